//! `CUresult` codes by name, and the errors of the driver layer (loading the
//! library, and calls that return an error code).

use std::fmt;
use std::path::PathBuf;

macro_rules! cuda_error_names {
    ($($code:literal => $name:literal,)*) => {
        /// The driver's own name for a code, for every code cuda.h defines
        /// (as of CUDA 13). `None` for codes a newer driver may add.
        pub fn cuda_error_name(code: i32) -> Option<&'static str> {
            match code {
                $($code => Some($name),)*
                _ => None,
            }
        }
    };
}

cuda_error_names! {
    0 => "CUDA_SUCCESS",
    1 => "CUDA_ERROR_INVALID_VALUE",
    2 => "CUDA_ERROR_OUT_OF_MEMORY",
    3 => "CUDA_ERROR_NOT_INITIALIZED",
    4 => "CUDA_ERROR_DEINITIALIZED",
    5 => "CUDA_ERROR_PROFILER_DISABLED",
    6 => "CUDA_ERROR_PROFILER_NOT_INITIALIZED",
    7 => "CUDA_ERROR_PROFILER_ALREADY_STARTED",
    8 => "CUDA_ERROR_PROFILER_ALREADY_STOPPED",
    34 => "CUDA_ERROR_STUB_LIBRARY",
    46 => "CUDA_ERROR_DEVICE_UNAVAILABLE",
    100 => "CUDA_ERROR_NO_DEVICE",
    101 => "CUDA_ERROR_INVALID_DEVICE",
    102 => "CUDA_ERROR_DEVICE_NOT_LICENSED",
    200 => "CUDA_ERROR_INVALID_IMAGE",
    201 => "CUDA_ERROR_INVALID_CONTEXT",
    202 => "CUDA_ERROR_CONTEXT_ALREADY_CURRENT",
    205 => "CUDA_ERROR_MAP_FAILED",
    206 => "CUDA_ERROR_UNMAP_FAILED",
    207 => "CUDA_ERROR_ARRAY_IS_MAPPED",
    208 => "CUDA_ERROR_ALREADY_MAPPED",
    209 => "CUDA_ERROR_NO_BINARY_FOR_GPU",
    210 => "CUDA_ERROR_ALREADY_ACQUIRED",
    211 => "CUDA_ERROR_NOT_MAPPED",
    212 => "CUDA_ERROR_NOT_MAPPED_AS_ARRAY",
    213 => "CUDA_ERROR_NOT_MAPPED_AS_POINTER",
    214 => "CUDA_ERROR_ECC_UNCORRECTABLE",
    215 => "CUDA_ERROR_UNSUPPORTED_LIMIT",
    216 => "CUDA_ERROR_CONTEXT_ALREADY_IN_USE",
    217 => "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
    218 => "CUDA_ERROR_INVALID_PTX",
    219 => "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT",
    220 => "CUDA_ERROR_NVLINK_UNCORRECTABLE",
    221 => "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
    222 => "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
    223 => "CUDA_ERROR_JIT_COMPILATION_DISABLED",
    224 => "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY",
    225 => "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC",
    226 => "CUDA_ERROR_CONTAINED",
    300 => "CUDA_ERROR_INVALID_SOURCE",
    301 => "CUDA_ERROR_FILE_NOT_FOUND",
    302 => "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND",
    303 => "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED",
    304 => "CUDA_ERROR_OPERATING_SYSTEM",
    400 => "CUDA_ERROR_INVALID_HANDLE",
    401 => "CUDA_ERROR_ILLEGAL_STATE",
    402 => "CUDA_ERROR_LOSSY_QUERY",
    500 => "CUDA_ERROR_NOT_FOUND",
    600 => "CUDA_ERROR_NOT_READY",
    700 => "CUDA_ERROR_ILLEGAL_ADDRESS",
    701 => "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
    702 => "CUDA_ERROR_LAUNCH_TIMEOUT",
    703 => "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING",
    704 => "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
    705 => "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
    708 => "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
    709 => "CUDA_ERROR_CONTEXT_IS_DESTROYED",
    710 => "CUDA_ERROR_ASSERT",
    711 => "CUDA_ERROR_TOO_MANY_PEERS",
    712 => "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
    713 => "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
    714 => "CUDA_ERROR_HARDWARE_STACK_ERROR",
    715 => "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    716 => "CUDA_ERROR_MISALIGNED_ADDRESS",
    717 => "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    718 => "CUDA_ERROR_INVALID_PC",
    719 => "CUDA_ERROR_LAUNCH_FAILED",
    720 => "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
    721 => "CUDA_ERROR_TENSOR_MEMORY_LEAK",
    800 => "CUDA_ERROR_NOT_PERMITTED",
    801 => "CUDA_ERROR_NOT_SUPPORTED",
    802 => "CUDA_ERROR_SYSTEM_NOT_READY",
    803 => "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
    804 => "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
    805 => "CUDA_ERROR_MPS_CONNECTION_FAILED",
    806 => "CUDA_ERROR_MPS_RPC_FAILURE",
    807 => "CUDA_ERROR_MPS_SERVER_NOT_READY",
    808 => "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED",
    809 => "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED",
    810 => "CUDA_ERROR_MPS_CLIENT_TERMINATED",
    811 => "CUDA_ERROR_CDP_NOT_SUPPORTED",
    812 => "CUDA_ERROR_CDP_VERSION_MISMATCH",
    900 => "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
    901 => "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
    902 => "CUDA_ERROR_STREAM_CAPTURE_MERGE",
    903 => "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
    904 => "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
    905 => "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
    906 => "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
    907 => "CUDA_ERROR_CAPTURED_EVENT",
    908 => "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
    909 => "CUDA_ERROR_TIMEOUT",
    910 => "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
    911 => "CUDA_ERROR_EXTERNAL_DEVICE",
    912 => "CUDA_ERROR_INVALID_CLUSTER_SIZE",
    913 => "CUDA_ERROR_FUNCTION_NOT_LOADED",
    914 => "CUDA_ERROR_INVALID_RESOURCE_TYPE",
    915 => "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION",
    916 => "CUDA_ERROR_KEY_ROTATION",
    917 => "CUDA_ERROR_STREAM_DETACHED",
    999 => "CUDA_ERROR_UNKNOWN",
}

/// The `CUresult` codes the checkpoint API answers with, by name
/// (docs/driver-facts.md, F2–F5 say when).
pub mod code {
    /// A bad argument: a map that is not a bijection, a null pointer.
    pub const INVALID_VALUE: i32 = 1;
    /// The GPU memory could not be allocated.
    pub const OUT_OF_MEMORY: i32 = 2;
    /// The process is live but never initialised CUDA.
    pub const NOT_INITIALIZED: i32 = 3;
    /// No GPU is visible.
    pub const NO_DEVICE: i32 = 100;
    /// No such process, or the process died (the OOM killer, a restore
    /// that failed for memory).
    pub const OPERATING_SYSTEM: i32 = 304;
    /// The process is in the wrong state for the call.
    pub const ILLEGAL_STATE: i32 = 401;
    /// A lock's timeout passed before the process's GPU work finished.
    pub const NOT_READY: i32 = 600;
    /// The caller may not act on the process.
    pub const NOT_PERMITTED: i32 = 800;
    /// The driver cannot checkpoint or restore what the process holds
    /// (managed memory; a multi-process NCCL job's restore).
    pub const NOT_SUPPORTED: i32 = 801;
}

/// A non-zero `CUresult` returned by a driver function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaError {
    /// The `CUresult` number; [`code`] names the ones that matter here.
    pub code: i32,
}

impl CudaError {
    /// The driver's name for the code, or `CUDA_ERROR_<code>` for one this
    /// build does not know (a newer driver's).
    pub fn name(self) -> String {
        match cuda_error_name(self.code) {
            Some(name) => name.to_string(),
            None => format!("CUDA_ERROR_{}", self.code),
        }
    }

    /// Whether it is `code` (one of [`code`]'s).
    pub fn is(self, code: i32) -> bool {
        self.code == code
    }
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.code)
    }
}

/// Why the driver cannot be used at all (exit status 7).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// No library could be loaded.
    #[error("the CUDA driver library could not be loaded; tried:\n{}", format_attempts(.attempts))]
    NotFound {
        /// Every name or path tried, and why each failed.
        attempts: Vec<LoadAttempt>,
    },
    /// A library loaded, but it is not NVIDIA's driver.
    #[error("{path} was loaded but is not a CUDA driver: it has no cuDriverGetVersion")]
    NotADriver {
        /// The file loaded.
        path: PathBuf,
    },
    /// A driver older than 570: it has no checkpoint API.
    #[error(
        "the CUDA driver at {path} (CUDA {version}) has no checkpoint API: missing {missing}",
        version = format_version(*.version),
        missing = .missing.join(", ")
    )]
    NoCheckpointApi {
        /// The file loaded.
        path: PathBuf,
        /// Its CUDA version (13000 is 13.0), when it said.
        version: Option<i32>,
        /// The checkpoint functions it lacks.
        missing: Vec<&'static str>,
    },
    /// Running privileged, cudackpt would not load a library another
    /// user could have written.
    #[error("refused to load {0}")]
    Untrusted(#[from] crate::files::UntrustedLibrary),
}

impl LoadError {
    /// What to do about it.
    pub fn hint(&self) -> &'static str {
        match self {
            LoadError::NotFound { .. } => {
                "install the NVIDIA driver (libcuda.so.1), or point --libcuda or CUDACKPT_LIBCUDA at it"
            }
            LoadError::NotADriver { .. } => "point --libcuda or CUDACKPT_LIBCUDA at NVIDIA's libcuda.so.1",
            LoadError::NoCheckpointApi { .. } => {
                "the checkpoint API needs display driver 570 or newer (GPU remapping needs 580); upgrade the driver"
            }
            LoadError::Untrusted(_) => {
                "as root or with capabilities, --libcuda and CUDACKPT_LIBCUDA name only libraries owned by root and writable by nobody else (`chown root: FILE; chmod go-w FILE`); root itself (not through sudo or a capable copy) may load another with --libcuda-unsafe (CUDACKPT_LIBCUDA_UNSAFE=1)"
            }
        }
    }
}

/// One place the loader looked for libcuda, and what the loader said.
#[derive(Debug, Clone)]
pub struct LoadAttempt {
    /// The soname or path tried.
    pub name: String,
    /// The loader's words.
    pub reason: String,
}

fn format_attempts(attempts: &[LoadAttempt]) -> String {
    attempts
        .iter()
        .map(|a| format!("  {}: {}", a.name, a.reason))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `cuDriverGetVersion`'s integer (e.g. 13000) as `13.0`.
pub fn format_version(version: Option<i32>) -> String {
    match version {
        Some(v) => format!("{}.{}", v / 1000, (v % 1000) / 10),
        None => "version unknown".to_string(),
    }
}

/// A driver function that this libcuda does not export.
#[derive(Debug, thiserror::Error)]
#[error("this CUDA driver has no {function}")]
pub struct MissingFunction {
    /// The function's name.
    pub function: &'static str,
}

/// A failed driver call: the function was absent, or it returned an error.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The library does not export the function.
    #[error(transparent)]
    Missing(#[from] MissingFunction),
    /// The function returned an error code.
    #[error("{function} returned {error}")]
    Cuda {
        /// The function's name.
        function: &'static str,
        /// What it returned.
        error: CudaError,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_codes_have_driver_names() {
        assert_eq!(CudaError { code: 600 }.name(), "CUDA_ERROR_NOT_READY");
        assert_eq!(
            CudaError { code: 401 }.to_string(),
            "CUDA_ERROR_ILLEGAL_STATE (401)"
        );
    }

    #[test]
    fn unknown_codes_keep_their_number() {
        assert_eq!(CudaError { code: 4242 }.name(), "CUDA_ERROR_4242");
    }

    #[test]
    fn versions_print_as_major_minor() {
        assert_eq!(format_version(Some(13000)), "13.0");
        assert_eq!(format_version(Some(12080)), "12.8");
        assert_eq!(format_version(None), "version unknown");
    }
}
