//! The safe face of the CUDA driver: loading libcuda at run time, the
//! checkpoint API as a trait the rest of the tool programs against, and the
//! few device and memory calls that `doctor`, `devices` and `demo` need.
//!
//! The process path never calls `cuInit`: the checkpoint functions do not need
//! it, and it costs milliseconds per invocation.
//!
//! May use: `exit`, `files`.

mod error;
mod ffi;
mod gpu_id;
#[cfg(test)]
pub(crate) mod model;
mod state;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub use error::{
    code, format_version, CallError, CudaError, LoadAttempt, LoadError, MissingFunction,
};
pub use ffi::CHECKPOINT_FUNCTIONS;
pub use state::{ProcessState, UnknownState, NAMED_STATES};

use ffi::Call;
pub use gpu_id::{GpuPair, GpuUuid, UuidError};

/// The names tried, in order, when no library is named explicitly.
pub const DEFAULT_LIBRARY_NAMES: [&str; 2] = ["libcuda.so.1", "libcuda.so"];

/// The oldest driver seen to restore a process onto other GPUs: 580, which
/// supports CUDA 13.0 (`cuDriverGetVersion` 13000). An older one fails the
/// restore instead.
pub const GPU_REMAPPING_SINCE_CUDA: i32 = 13000;

/// The checkpoint operations on a process, as the planner and executor see
/// them. The real driver implements it; unit tests implement it with a model.
///
/// Each method is one call of the driver's, on a PID, with nothing checked
/// first: [`Process`](crate::Process) is the safe way to make them.
pub trait CheckpointApi: Sync {
    /// `cuCheckpointProcessGetState`.
    fn get_state(&self, pid: i32) -> Result<ProcessState, CallError>;
    /// `cuCheckpointProcessGetRestoreThreadId`.
    fn restore_thread_id(&self, pid: i32) -> Result<i32, CallError>;
    /// `cuCheckpointProcessLock`; `timeout_ms` 0 waits for as long as the
    /// process needs.
    fn lock(&self, pid: i32, timeout_ms: u32) -> Result<(), CallError>;
    /// `cuCheckpointProcessCheckpoint`.
    fn checkpoint(&self, pid: i32) -> Result<(), CallError>;
    /// `cuCheckpointProcessRestore`, through `map` (empty: in place).
    fn restore(&self, pid: i32, map: &[GpuPair]) -> Result<(), CallError>;
    /// `cuCheckpointProcessUnlock`.
    fn unlock(&self, pid: i32) -> Result<(), CallError>;
    /// The driver's own words for an error code, when it has them.
    fn describe_error(&self, _error: CudaError) -> Option<String> {
        None
    }
}

/// A loaded libcuda.
pub struct Driver {
    symbols: ffi::Symbols,
    /// What the loader was asked for (a soname or a path).
    requested: String,
}

/// Turns a raw foreign-call outcome into a result, naming the function.
fn checked<T>(call: Call<T>) -> Result<T, CallError> {
    match call {
        Call::Missing(function) => Err(MissingFunction { function }.into()),
        Call::Returned(_, 0, value) => Ok(value),
        Call::Returned(function, code, _) => Err(CallError::Cuda {
            function,
            error: CudaError { code },
        }),
    }
}

impl Driver {
    /// Loads libcuda: `explicit` alone when given (from `--libcuda` or
    /// `CUDACKPT_LIBCUDA`), else `libcuda.so.1` then `libcuda.so`. Succeeds
    /// for any CUDA driver; [`Driver::require_checkpoint_api`] says whether
    /// it can checkpoint.
    pub fn load(explicit: Option<&Path>) -> Result<Driver, LoadError> {
        // An explicit library is opened and checked first, then loaded
        // through its descriptor: what was checked is what runs. No flag
        // or variable lifts the check: however this process became root
        // (sudo, doas, pkexec, a scheduler passing a user's environment),
        // it cannot tell whose choice the library was.
        let pinned = match explicit {
            Some(path) => match crate::files::open_library_for_root(path) {
                Ok(fd) => Some(fd),
                // Not there (or unreadable): say so as the loader would.
                Err(crate::files::UntrustedLibrary::Io { path, source }) => {
                    return Err(LoadError::NotFound {
                        attempts: vec![LoadAttempt {
                            name: path.display().to_string(),
                            reason: source.to_string(),
                        }],
                    })
                }
                Err(untrusted) => return Err(untrusted.into()),
            },
            None => None,
        };
        let candidates: Vec<OsString> = match &pinned {
            Some(fd) => vec![OsString::from(format!(
                "/proc/self/fd/{}",
                std::os::fd::AsRawFd::as_raw_fd(fd)
            ))],
            None => DEFAULT_LIBRARY_NAMES.iter().map(OsString::from).collect(),
        };
        let mut attempts = Vec::new();
        for candidate in candidates {
            // Name the library as asked for, not by its descriptor.
            let requested = match explicit {
                Some(path) => path.display().to_string(),
                None => candidate.to_string_lossy().into_owned(),
            };
            match ffi::open_library(&candidate) {
                Ok(library) => {
                    let symbols = ffi::Symbols::resolve_all(library);
                    let driver = Driver { symbols, requested };
                    if !driver.symbols.driver_get_version.is_present() {
                        return Err(LoadError::NotADriver {
                            path: driver.path(),
                        });
                    }
                    tracing::debug!(library = %driver.requested, "loaded the CUDA driver");
                    return Ok(driver);
                }
                Err(reason) => attempts.push(LoadAttempt {
                    name: requested,
                    reason: reason.to_string(),
                }),
            }
        }
        Err(LoadError::NotFound { attempts })
    }

    /// Loads libcuda and insists on the six checkpoint functions.
    pub fn load_for_checkpoint(explicit: Option<&Path>) -> Result<Driver, LoadError> {
        let driver = Driver::load(explicit)?;
        driver.require_checkpoint_api()?;
        Ok(driver)
    }

    /// Fails unless this driver has all six checkpoint functions (570+).
    pub fn require_checkpoint_api(&self) -> Result<(), LoadError> {
        let missing = self.missing_checkpoint_functions();
        if missing.is_empty() {
            return Ok(());
        }
        Err(LoadError::NoCheckpointApi {
            path: self.path(),
            version: self.version().ok(),
            missing,
        })
    }

    /// The checkpoint functions this driver lacks (empty on driver 570+).
    pub fn missing_checkpoint_functions(&self) -> Vec<&'static str> {
        self.symbols
            .checkpoint_api()
            .into_iter()
            .filter(|(_, present)| !present)
            .map(|(name, _)| name)
            .collect()
    }

    /// Whether this library is a stand-in for NVIDIA's driver, such as the
    /// tests' fake: it exports `cudackptStandIn`, which no libcuda of
    /// NVIDIA's does, and says yes. Its "GPUs" are none that NVML could
    /// describe, so a missing NVML is nothing to warn of.
    pub fn is_stand_in(&self) -> bool {
        ffi::stands_in(&self.symbols)
    }

    /// The file the library was loaded from, found through /proc/self/maps;
    /// what was asked for when that cannot be told.
    pub fn path(&self) -> PathBuf {
        self.symbols
            .address_hint()
            .and_then(mapped_file_containing)
            .unwrap_or_else(|| PathBuf::from(&self.requested))
    }

    /// `cuDriverGetVersion`: the CUDA version the driver supports (13000 is
    /// CUDA 13.0). Needs no `cuInit`.
    pub fn version(&self) -> Result<i32, CallError> {
        checked(ffi::driver_get_version(&self.symbols))
    }

    /// The driver's description of an error code, when it has one.
    pub fn describe(&self, error: CudaError) -> Option<String> {
        ffi::get_error_string(&self.symbols, error.code)
    }

    /// The driver's name for an error code, when it exports `cuGetErrorName`.
    pub fn error_name(&self, error: CudaError) -> Option<String> {
        ffi::get_error_name(&self.symbols, error.code)
    }

    /// `cuInit(0)`: needed before any device query, never for process
    /// operations.
    pub fn init(&self) -> Result<(), CallError> {
        checked(ffi::init(&self.symbols))
    }

    /// Every GPU the driver exposes to this process. Calls `cuInit`.
    pub fn devices(&self) -> Result<Vec<DeviceInfo>, CallError> {
        self.init()?;
        let s = &self.symbols;
        let count = checked(ffi::device_get_count(s))?;
        (0..count)
            .map(|ordinal| {
                let handle = checked(ffi::device_get(s, ordinal))?;
                Ok(DeviceInfo {
                    ordinal,
                    name: checked(ffi::device_get_name(s, handle))?,
                    uuid: GpuUuid::from_bytes(checked(ffi::device_get_uuid(s, handle))?.bytes),
                    total_bytes: checked(ffi::device_total_mem(s, handle))? as u64,
                    pci_bus_id: checked(ffi::device_get_pci_bus_id(s, handle)).ok(),
                })
            })
            .collect()
    }

    /// Makes device `ordinal`'s primary context current on this thread.
    /// Calls `cuInit`.
    pub fn open_device(&self, ordinal: i32) -> Result<DeviceSession<'_>, CallError> {
        self.init()?;
        let s = &self.symbols;
        let device = checked(ffi::device_get(s, ordinal))?;
        let context = checked(ffi::primary_ctx_retain(s, device))?;
        let session = DeviceSession {
            driver: self,
            device,
        };
        checked(ffi::ctx_set_current(s, context))?;
        Ok(session)
    }
}

/// The file mapped at `address` in this process (from /proc/self/maps).
fn mapped_file_containing(address: usize) -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let start = usize::from_str_radix(start, 16).ok()?;
        let end = usize::from_str_radix(end, 16).ok()?;
        let path = fields.nth(4)?;
        (start <= address && address < end && path.starts_with('/')).then(|| PathBuf::from(path))
    })
}

impl CheckpointApi for Driver {
    fn get_state(&self, pid: i32) -> Result<ProcessState, CallError> {
        checked(ffi::get_state(&self.symbols, pid)).map(ProcessState::from_raw)
    }

    fn restore_thread_id(&self, pid: i32) -> Result<i32, CallError> {
        checked(ffi::get_restore_tid(&self.symbols, pid))
    }

    fn lock(&self, pid: i32, timeout_ms: u32) -> Result<(), CallError> {
        checked(ffi::lock(&self.symbols, pid, timeout_ms))
    }

    fn checkpoint(&self, pid: i32) -> Result<(), CallError> {
        checked(ffi::checkpoint(&self.symbols, pid))
    }

    fn restore(&self, pid: i32, map: &[GpuPair]) -> Result<(), CallError> {
        let pairs: Vec<ffi::CuGpuPair> = map
            .iter()
            .map(|pair| ffi::CuGpuPair {
                old_uuid: ffi::CuUuid {
                    bytes: pair.old.bytes(),
                },
                new_uuid: ffi::CuUuid {
                    bytes: pair.new.bytes(),
                },
            })
            .collect();
        checked(ffi::restore(&self.symbols, pid, &pairs))
    }

    fn unlock(&self, pid: i32) -> Result<(), CallError> {
        checked(ffi::unlock(&self.symbols, pid))
    }

    fn describe_error(&self, error: CudaError) -> Option<String> {
        self.describe(error)
    }
}

/// A GPU as the driver describes it.
#[derive(Debug, Clone)]
pub struct DeviceInfo {
    /// Its index among the GPUs this process sees.
    pub ordinal: i32,
    /// Its product name.
    pub name: String,
    /// Its UUID, as `nvidia-smi -L` prints it.
    pub uuid: GpuUuid,
    /// Its memory.
    pub total_bytes: u64,
    /// Its PCI address, when the driver said.
    pub pci_bus_id: Option<String>,
}

/// A device's primary context, current on the thread that opened it;
/// released on drop.
pub struct DeviceSession<'d> {
    driver: &'d Driver,
    device: ffi::CuDevice,
}

impl DeviceSession<'_> {
    /// Allocates `bytes` of device memory (`cuMemAlloc`).
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer<'_>, CallError> {
        let address = checked(ffi::mem_alloc(&self.driver.symbols, bytes))?;
        Ok(DeviceBuffer {
            session: self,
            address,
            len: bytes,
        })
    }

    /// Waits for the context's GPU work (`cuCtxSynchronize`).
    pub fn synchronize(&self) -> Result<(), CallError> {
        checked(ffi::ctx_synchronize(&self.driver.symbols))
    }

    /// Starts a kernel that keeps the GPU busy for `duration` without
    /// waiting for it (a long kernel, to test lock timeouts against).
    pub fn launch_spin(&self, duration: std::time::Duration) -> Result<(), CallError> {
        let s = &self.driver.symbols;
        let module = checked(ffi::module_load_data(s, SPIN_PTX))?;
        let function = checked(ffi::module_get_function(s, module, c"spin"))?;
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        checked(ffi::launch_single_thread(s, function, nanos))
    }
}

/// A one-thread kernel that spins on the GPU's global timer for `ns`
/// nanoseconds; PTX, so the driver compiles it for whatever GPU is there.
const SPIN_PTX: &std::ffi::CStr = c".version 7.0
.target sm_70
.address_size 64
.visible .entry spin(.param .u64 ns)
{
    .reg .u64 %rd<5>;
    .reg .pred %p;
    ld.param.u64 %rd1, [ns];
    mov.u64 %rd2, %globaltimer;
    add.u64 %rd3, %rd2, %rd1;
SPIN:
    mov.u64 %rd4, %globaltimer;
    setp.lt.u64 %p, %rd4, %rd3;
    @%p bra SPIN;
    ret;
}
";

impl Drop for DeviceSession<'_> {
    fn drop(&mut self) {
        // A failed release leaves a context the process exit reclaims anyway.
        let _ = ffi::primary_ctx_release(&self.driver.symbols, self.device);
    }
}

/// Device memory owned by this process; freed on drop.
pub struct DeviceBuffer<'s> {
    session: &'s DeviceSession<'s>,
    address: u64,
    len: usize,
}

impl DeviceBuffer<'_> {
    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `data` to `offset`; refuses a range outside the allocation.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), CallError> {
        let symbols = &self.session.driver.symbols;
        let address = self.address_of(symbols.memcpy_htod.name, offset, data.len())?;
        checked(ffi::memcpy_htod(
            &self.session.driver.symbols,
            address,
            data,
        ))
    }

    /// Copies from `offset` into `out`; refuses a range outside the allocation.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), CallError> {
        let symbols = &self.session.driver.symbols;
        let address = self.address_of(symbols.memcpy_dtoh.name, offset, out.len())?;
        checked(ffi::memcpy_dtoh(&self.session.driver.symbols, out, address))
    }

    fn address_of(
        &self,
        function: &'static str,
        offset: usize,
        len: usize,
    ) -> Result<u64, CallError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.address + offset as u64),
            _ => Err(CallError::Cuda {
                function,
                error: CudaError {
                    code: code::INVALID_VALUE,
                },
            }),
        }
    }
}

impl Drop for DeviceBuffer<'_> {
    fn drop(&mut self) {
        // Freeing can only fail if the context is gone, which frees it too.
        let _ = ffi::mem_free(&self.session.driver.symbols, self.address);
    }
}
