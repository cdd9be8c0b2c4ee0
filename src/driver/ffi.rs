//! The only file with `unsafe`: the C types of the CUDA driver's checkpoint
//! and device APIs, the table of function pointers resolved from libcuda at
//! run time, and one thin wrapper per foreign call. Everything above this file
//! is safe Rust.
//!
//! Symbols are resolved once, into `Option<fn>` fields kept beside the
//! `Library` that owns them, so no `Symbol<'lib>` escapes and a missing
//! optional function is an error when called, never a panic.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, OsStr};
use std::ptr;

use libloading::Library;

/// `CUresult`: 0 is success, anything else an error code.
pub type CuResult = c_int;
/// `CUdevice`: an ordinal.
pub type CuDevice = c_int;
/// `CUdeviceptr`: a device address.
pub type CuDevicePtr = u64;
/// `CUcontext`: an opaque handle.
pub type CuContext = *mut c_void;

/// `CUuuid`: 16 raw bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CuUuid {
    pub bytes: [u8; 16],
}

/// `CUcheckpointLockArgs` (64 bytes, zeroed but for the timeout).
#[repr(C)]
#[derive(Default)]
pub struct LockArgs {
    pub timeout_ms: c_uint,
    pub reserved0: c_uint,
    pub reserved1: [u64; 7],
}

/// `CUcheckpointGpuPair`: where a GPU of the checkpoint goes on restore.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CuGpuPair {
    pub old_uuid: CuUuid,
    pub new_uuid: CuUuid,
}

/// `CUcheckpointRestoreArgs` (64 bytes).
#[repr(C)]
pub struct RestoreArgs {
    pub gpu_pairs: *const CuGpuPair,
    pub gpu_pairs_count: c_uint,
    pub reserved: [u8; 52],
}

/// The 64 zeroed bytes that `CUcheckpointCheckpointArgs` and
/// `CUcheckpointUnlockArgs` are today; passing zeroes rather than NULL keeps
/// us correct on drivers that start reading fields.
#[repr(C)]
#[derive(Default)]
pub struct ReservedArgs {
    pub reserved: [u64; 8],
}

const _: () = assert!(std::mem::size_of::<LockArgs>() == 64);
const _: () = assert!(std::mem::size_of::<RestoreArgs>() == 64);
const _: () = assert!(std::mem::size_of::<ReservedArgs>() == 64);
const _: () = assert!(std::mem::size_of::<CuGpuPair>() == 32);

type GetStateFn = unsafe extern "C" fn(c_int, *mut c_int) -> CuResult;
type GetRestoreTidFn = unsafe extern "C" fn(c_int, *mut c_int) -> CuResult;
type LockFn = unsafe extern "C" fn(c_int, *mut LockArgs) -> CuResult;
type CheckpointFn = unsafe extern "C" fn(c_int, *mut ReservedArgs) -> CuResult;
type RestoreFn = unsafe extern "C" fn(c_int, *mut RestoreArgs) -> CuResult;
type UnlockFn = unsafe extern "C" fn(c_int, *mut ReservedArgs) -> CuResult;
type DriverGetVersionFn = unsafe extern "C" fn(*mut c_int) -> CuResult;
/// `cudackptStandIn`: exported only by a stand-in for the driver (the
/// tests' fake), which answers whether it stands in now (no NVIDIA
/// libcuda has it).
type StandInFn = unsafe extern "C" fn() -> c_int;
type GetErrorTextFn = unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult;
type InitFn = unsafe extern "C" fn(c_uint) -> CuResult;
type DeviceGetCountFn = unsafe extern "C" fn(*mut c_int) -> CuResult;
type DeviceGetFn = unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult;
type DeviceGetNameFn = unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> CuResult;
type DeviceGetUuidFn = unsafe extern "C" fn(*mut CuUuid, CuDevice) -> CuResult;
type DeviceTotalMemFn = unsafe extern "C" fn(*mut usize, CuDevice) -> CuResult;
type DeviceGetPciBusIdFn = unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> CuResult;
type PrimaryCtxRetainFn = unsafe extern "C" fn(*mut CuContext, CuDevice) -> CuResult;
type PrimaryCtxReleaseFn = unsafe extern "C" fn(CuDevice) -> CuResult;
type CtxSetCurrentFn = unsafe extern "C" fn(CuContext) -> CuResult;
type CtxSynchronizeFn = unsafe extern "C" fn() -> CuResult;
type MemAllocFn = unsafe extern "C" fn(*mut CuDevicePtr, usize) -> CuResult;
type MemFreeFn = unsafe extern "C" fn(CuDevicePtr) -> CuResult;
type MemcpyHtoDFn = unsafe extern "C" fn(CuDevicePtr, *const c_void, usize) -> CuResult;
type MemcpyDtoHFn = unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize) -> CuResult;
/// `CUmodule` and `CUfunction`: opaque handles.
pub type CuModule = *mut c_void;
pub type CuFunction = *mut c_void;
type ModuleLoadDataFn = unsafe extern "C" fn(*mut CuModule, *const c_void) -> CuResult;
type ModuleGetFunctionFn =
    unsafe extern "C" fn(*mut CuFunction, CuModule, *const c_char) -> CuResult;
type LaunchKernelFn = unsafe extern "C" fn(
    CuFunction,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    *mut c_void,
    *mut *mut c_void,
    *mut *mut c_void,
) -> CuResult;

/// A driver function: its symbol name (written once, here in the table
/// below) and its address, when the library has it.
pub struct Sym<F> {
    pub name: &'static str,
    pub f: Option<F>,
}

impl<F> Sym<F> {
    pub fn is_present(&self) -> bool {
        self.f.is_some()
    }
}

/// How many functions the checkpoint API has.
pub const CHECKPOINT_FUNCTIONS: usize = 6;

/// The loaded library and the functions resolved from it.
pub struct Symbols {
    pub get_state: Sym<GetStateFn>,
    pub get_restore_tid: Sym<GetRestoreTidFn>,
    pub lock: Sym<LockFn>,
    pub checkpoint: Sym<CheckpointFn>,
    pub restore: Sym<RestoreFn>,
    pub unlock: Sym<UnlockFn>,
    pub driver_get_version: Sym<DriverGetVersionFn>,
    /// Present only in a stand-in for the driver (the tests' fake).
    pub stand_in: Sym<StandInFn>,
    pub get_error_name: Sym<GetErrorTextFn>,
    pub get_error_string: Sym<GetErrorTextFn>,
    pub init: Sym<InitFn>,
    pub device_get_count: Sym<DeviceGetCountFn>,
    pub device_get: Sym<DeviceGetFn>,
    pub device_get_name: Sym<DeviceGetNameFn>,
    pub device_get_uuid: Sym<DeviceGetUuidFn>,
    pub device_total_mem: Sym<DeviceTotalMemFn>,
    pub device_get_pci_bus_id: Sym<DeviceGetPciBusIdFn>,
    pub primary_ctx_retain: Sym<PrimaryCtxRetainFn>,
    pub primary_ctx_release: Sym<PrimaryCtxReleaseFn>,
    pub ctx_set_current: Sym<CtxSetCurrentFn>,
    pub ctx_synchronize: Sym<CtxSynchronizeFn>,
    pub mem_alloc: Sym<MemAllocFn>,
    pub mem_free: Sym<MemFreeFn>,
    pub memcpy_htod: Sym<MemcpyHtoDFn>,
    pub memcpy_dtoh: Sym<MemcpyDtoHFn>,
    pub module_load_data: Sym<ModuleLoadDataFn>,
    pub module_get_function: Sym<ModuleGetFunctionFn>,
    pub launch_kernel: Sym<LaunchKernelFn>,
    // Declared last so it is dropped after nothing can call through the
    // pointers above any more (they are plain copies, valid while it lives).
    _library: Library,
}

/// Opens a shared library by name or path. The error is the loader's own text.
pub fn open_library(name: &OsStr) -> Result<Library, libloading::Error> {
    // SAFETY: loading libcuda runs its initialisers; that is what every CUDA
    // program does, and NVIDIA's library is written to be loaded this way.
    // A user-supplied `--libcuda` path is trusted as the user's choice.
    unsafe { Library::new(name) }
}

/// Resolves one symbol to a copied function pointer.
///
/// # Safety
/// `T` must be the exact C signature of the symbol named `name`.
unsafe fn resolve<T: Copy>(library: &Library, name: &'static str) -> Sym<T> {
    let mut c_name = Vec::with_capacity(name.len() + 1);
    c_name.extend_from_slice(name.as_bytes());
    c_name.push(0);
    // SAFETY: the caller promises `T` matches the symbol's signature; the
    // copied pointer is used only while `library` is alive (both live in
    // `Symbols`).
    let f = unsafe { library.get::<T>(&c_name).ok().map(|symbol| *symbol) };
    Sym { name, f }
}

impl Symbols {
    /// Resolves every function cudackpt knows from an opened library.
    pub fn resolve_all(library: Library) -> Symbols {
        // SAFETY: for each `resolve` below, the type alias is the C
        // prototype from cuda.h for the symbol named beside it. `_v2` names
        // are the ABI the unsuffixed macros map to on 64-bit Linux.
        unsafe {
            Symbols {
                get_state: resolve(&library, "cuCheckpointProcessGetState"),
                get_restore_tid: resolve(&library, "cuCheckpointProcessGetRestoreThreadId"),
                lock: resolve(&library, "cuCheckpointProcessLock"),
                checkpoint: resolve(&library, "cuCheckpointProcessCheckpoint"),
                restore: resolve(&library, "cuCheckpointProcessRestore"),
                unlock: resolve(&library, "cuCheckpointProcessUnlock"),
                driver_get_version: resolve(&library, "cuDriverGetVersion"),
                stand_in: resolve(&library, "cudackptStandIn"),
                get_error_name: resolve(&library, "cuGetErrorName"),
                get_error_string: resolve(&library, "cuGetErrorString"),
                init: resolve(&library, "cuInit"),
                device_get_count: resolve(&library, "cuDeviceGetCount"),
                device_get: resolve(&library, "cuDeviceGet"),
                device_get_name: resolve(&library, "cuDeviceGetName"),
                device_get_uuid: {
                    let v2 = resolve(&library, "cuDeviceGetUuid_v2");
                    if v2.is_present() {
                        v2
                    } else {
                        resolve(&library, "cuDeviceGetUuid")
                    }
                },
                device_total_mem: resolve(&library, "cuDeviceTotalMem_v2"),
                device_get_pci_bus_id: resolve(&library, "cuDeviceGetPCIBusId"),
                primary_ctx_retain: resolve(&library, "cuDevicePrimaryCtxRetain"),
                primary_ctx_release: resolve(&library, "cuDevicePrimaryCtxRelease_v2"),
                ctx_set_current: resolve(&library, "cuCtxSetCurrent"),
                ctx_synchronize: resolve(&library, "cuCtxSynchronize"),
                mem_alloc: resolve(&library, "cuMemAlloc_v2"),
                mem_free: resolve(&library, "cuMemFree_v2"),
                memcpy_htod: resolve(&library, "cuMemcpyHtoD_v2"),
                memcpy_dtoh: resolve(&library, "cuMemcpyDtoH_v2"),
                module_load_data: resolve(&library, "cuModuleLoadData"),
                module_get_function: resolve(&library, "cuModuleGetFunction"),
                launch_kernel: resolve(&library, "cuLaunchKernel"),
                _library: library,
            }
        }
    }

    /// An address inside the library, to find its file in /proc/self/maps.
    pub fn address_hint(&self) -> Option<usize> {
        self.driver_get_version.f.map(|f| f as usize)
    }

    /// The checkpoint API's functions: name, and whether this library has it.
    pub fn checkpoint_api(&self) -> [(&'static str, bool); CHECKPOINT_FUNCTIONS] {
        [
            (self.get_state.name, self.get_state.is_present()),
            (self.get_restore_tid.name, self.get_restore_tid.is_present()),
            (self.lock.name, self.lock.is_present()),
            (self.checkpoint.name, self.checkpoint.is_present()),
            (self.restore.name, self.restore.is_present()),
            (self.unlock.name, self.unlock.is_present()),
        ]
    }
}

/// A foreign call's outcome, named by its function: the function was
/// absent, or it returned a code (and a value).
pub enum Call<T> {
    Missing(&'static str),
    Returned(&'static str, CuResult, T),
}

/// Calls through `$symbol` when the library has it: `$body` gives the code
/// and the value.
macro_rules! absent_or {
    ($symbol:expr, $f:ident => $body:expr) => {
        match $symbol.f {
            None => Call::Missing($symbol.name),
            Some($f) => {
                let (code, value) = $body;
                Call::Returned($symbol.name, code, value)
            }
        }
    };
}

pub fn get_state(s: &Symbols, pid: c_int) -> Call<c_int> {
    absent_or!(s.get_state, f => {
        let mut state: c_int = -1;
        // SAFETY: `state` is a valid, initialised out-parameter for the call.
        let code = unsafe { f(pid, &mut state) };
        (code, state)
    })
}

pub fn get_restore_tid(s: &Symbols, pid: c_int) -> Call<c_int> {
    absent_or!(s.get_restore_tid, f => {
        let mut tid: c_int = 0;
        // SAFETY: `tid` is a valid, initialised out-parameter for the call.
        let code = unsafe { f(pid, &mut tid) };
        (code, tid)
    })
}

pub fn lock(s: &Symbols, pid: c_int, timeout_ms: c_uint) -> Call<()> {
    absent_or!(s.lock, f => {
        let mut args = LockArgs { timeout_ms, ..LockArgs::default() };
        // SAFETY: `args` is a fully initialised 64-byte CUcheckpointLockArgs
        // that outlives the call.
        let code = unsafe { f(pid, &mut args) };
        (code, ())
    })
}

pub fn checkpoint(s: &Symbols, pid: c_int) -> Call<()> {
    absent_or!(s.checkpoint, f => {
        let mut args = ReservedArgs::default();
        // SAFETY: `args` is 64 zeroed bytes, the layout the driver expects.
        let code = unsafe { f(pid, &mut args) };
        (code, ())
    })
}

pub fn restore(s: &Symbols, pid: c_int, pairs: &[CuGpuPair]) -> Call<()> {
    absent_or!(s.restore, f => {
        let Ok(count) = c_uint::try_from(pairs.len()) else {
            // CUDA_ERROR_INVALID_VALUE, as the driver would say.
            return Call::Returned(s.restore.name, 1, ());
        };
        let mut args = RestoreArgs {
            gpu_pairs: if pairs.is_empty() { ptr::null() } else { pairs.as_ptr() },
            gpu_pairs_count: count,
            reserved: [0; 52],
        };
        // SAFETY: `args` is a fully initialised CUcheckpointRestoreArgs whose
        // `gpu_pairs` points at `count` pairs borrowed for the whole call.
        let code = unsafe { f(pid, &mut args) };
        (code, ())
    })
}

pub fn unlock(s: &Symbols, pid: c_int) -> Call<()> {
    absent_or!(s.unlock, f => {
        let mut args = ReservedArgs::default();
        // SAFETY: `args` is 64 zeroed bytes, the layout the driver expects.
        let code = unsafe { f(pid, &mut args) };
        (code, ())
    })
}

/// Whether the library says it stands in for NVIDIA's driver: `false`
/// for every library without `cudackptStandIn` (NVIDIA's).
pub fn stands_in(s: &Symbols) -> bool {
    match s.stand_in.f {
        // SAFETY: `cudackptStandIn` takes nothing and returns an int.
        Some(f) => (unsafe { f() }) != 0,
        None => false,
    }
}

pub fn driver_get_version(s: &Symbols) -> Call<c_int> {
    absent_or!(s.driver_get_version, f => {
        let mut version: c_int = 0;
        // SAFETY: `version` is a valid, initialised out-parameter.
        let code = unsafe { f(&mut version) };
        (code, version)
    })
}

/// `cuGetErrorName` or `cuGetErrorString`, copied into an owned string.
fn error_text(f: Option<GetErrorTextFn>, code: CuResult) -> Option<String> {
    let f = f?;
    let mut text: *const c_char = ptr::null();
    // SAFETY: `text` is a valid out-parameter; the driver stores a pointer to
    // a static NUL-terminated string or leaves it untouched on error.
    let rc = unsafe { f(code, &mut text) };
    if rc != 0 || text.is_null() {
        return None;
    }
    // SAFETY: non-null and documented to point at a static C string.
    let owned = unsafe { CStr::from_ptr(text) };
    Some(owned.to_string_lossy().into_owned())
}

pub fn get_error_name(s: &Symbols, code: CuResult) -> Option<String> {
    error_text(s.get_error_name.f, code)
}

pub fn get_error_string(s: &Symbols, code: CuResult) -> Option<String> {
    error_text(s.get_error_string.f, code)
}

pub fn init(s: &Symbols) -> Call<()> {
    absent_or!(s.init, f => {
        // SAFETY: cuInit takes a flags word that must be 0.
        let code = unsafe { f(0) };
        (code, ())
    })
}

pub fn device_get_count(s: &Symbols) -> Call<c_int> {
    absent_or!(s.device_get_count, f => {
        let mut count: c_int = 0;
        // SAFETY: `count` is a valid, initialised out-parameter.
        let code = unsafe { f(&mut count) };
        (code, count)
    })
}

pub fn device_get(s: &Symbols, ordinal: c_int) -> Call<CuDevice> {
    absent_or!(s.device_get, f => {
        let mut device: CuDevice = 0;
        // SAFETY: `device` is a valid, initialised out-parameter.
        let code = unsafe { f(&mut device, ordinal) };
        (code, device)
    })
}

/// Reads a NUL-terminated string the driver writes into a caller buffer.
fn string_from_buffer(buffer: &[u8]) -> String {
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    String::from_utf8_lossy(&buffer[..end]).into_owned()
}

pub fn device_get_name(s: &Symbols, device: CuDevice) -> Call<String> {
    absent_or!(s.device_get_name, f => {
        let mut buffer = [0u8; 256];
        // SAFETY: the buffer is 256 writable bytes and we pass that length.
        let code = unsafe { f(buffer.as_mut_ptr().cast(), buffer.len() as c_int, device) };
        (code, string_from_buffer(&buffer))
    })
}

pub fn device_get_pci_bus_id(s: &Symbols, device: CuDevice) -> Call<String> {
    absent_or!(s.device_get_pci_bus_id, f => {
        let mut buffer = [0u8; 64];
        // SAFETY: the buffer is 64 writable bytes and we pass that length.
        let code = unsafe { f(buffer.as_mut_ptr().cast(), buffer.len() as c_int, device) };
        (code, string_from_buffer(&buffer))
    })
}

pub fn device_get_uuid(s: &Symbols, device: CuDevice) -> Call<CuUuid> {
    absent_or!(s.device_get_uuid, f => {
        let mut uuid = CuUuid::default();
        // SAFETY: `uuid` is a valid, initialised 16-byte out-parameter.
        let code = unsafe { f(&mut uuid, device) };
        (code, uuid)
    })
}

pub fn device_total_mem(s: &Symbols, device: CuDevice) -> Call<usize> {
    absent_or!(s.device_total_mem, f => {
        let mut bytes: usize = 0;
        // SAFETY: `bytes` is a valid, initialised out-parameter.
        let code = unsafe { f(&mut bytes, device) };
        (code, bytes)
    })
}

pub fn primary_ctx_retain(s: &Symbols, device: CuDevice) -> Call<CuContext> {
    absent_or!(s.primary_ctx_retain, f => {
        let mut context: CuContext = ptr::null_mut();
        // SAFETY: `context` is a valid, initialised out-parameter.
        let code = unsafe { f(&mut context, device) };
        (code, context)
    })
}

pub fn primary_ctx_release(s: &Symbols, device: CuDevice) -> Call<()> {
    absent_or!(s.primary_ctx_release, f => {
        // SAFETY: releases a reference this process took with retain.
        let code = unsafe { f(device) };
        (code, ())
    })
}

pub fn ctx_set_current(s: &Symbols, context: CuContext) -> Call<()> {
    absent_or!(s.ctx_set_current, f => {
        // SAFETY: `context` came from cuDevicePrimaryCtxRetain and is retained.
        let code = unsafe { f(context) };
        (code, ())
    })
}

pub fn ctx_synchronize(s: &Symbols) -> Call<()> {
    absent_or!(s.ctx_synchronize, f => {
        // SAFETY: no arguments; acts on the calling thread's current context.
        let code = unsafe { f() };
        (code, ())
    })
}

pub fn mem_alloc(s: &Symbols, bytes: usize) -> Call<CuDevicePtr> {
    absent_or!(s.mem_alloc, f => {
        let mut address: CuDevicePtr = 0;
        // SAFETY: `address` is a valid, initialised out-parameter.
        let code = unsafe { f(&mut address, bytes) };
        (code, address)
    })
}

pub fn mem_free(s: &Symbols, address: CuDevicePtr) -> Call<()> {
    absent_or!(s.mem_free, f => {
        // SAFETY: `address` was returned by cuMemAlloc and is freed once (the
        // safe layer owns it in a guard).
        let code = unsafe { f(address) };
        (code, ())
    })
}

pub fn memcpy_htod(s: &Symbols, dst: CuDevicePtr, src: &[u8]) -> Call<()> {
    absent_or!(s.memcpy_htod, f => {
        // SAFETY: `src` is readable for its whole length during the
        // synchronous copy; the safe layer keeps `dst..dst+len` inside one
        // allocation.
        let code = unsafe { f(dst, src.as_ptr().cast(), src.len()) };
        (code, ())
    })
}

pub fn memcpy_dtoh(s: &Symbols, dst: &mut [u8], src: CuDevicePtr) -> Call<()> {
    absent_or!(s.memcpy_dtoh, f => {
        // SAFETY: `dst` is writable for its whole length during the
        // synchronous copy; the safe layer keeps `src..src+len` inside one
        // allocation.
        let code = unsafe { f(dst.as_mut_ptr().cast(), src, dst.len()) };
        (code, ())
    })
}

/// Loads a module from NUL-terminated PTX text.
pub fn module_load_data(s: &Symbols, ptx: &CStr) -> Call<CuModule> {
    absent_or!(s.module_load_data, f => {
        let mut module: CuModule = ptr::null_mut();
        // SAFETY: `ptx` is a NUL-terminated image that outlives the call;
        // `module` is a valid out-parameter.
        let code = unsafe { f(&mut module, ptx.as_ptr().cast()) };
        (code, module)
    })
}

pub fn module_get_function(s: &Symbols, module: CuModule, name: &CStr) -> Call<CuFunction> {
    absent_or!(s.module_get_function, f => {
        let mut function: CuFunction = ptr::null_mut();
        // SAFETY: `module` came from cuModuleLoadData; `name` is
        // NUL-terminated; `function` is a valid out-parameter.
        let code = unsafe { f(&mut function, module, name.as_ptr()) };
        (code, function)
    })
}

/// Launches `function` as one thread on the default stream with a single
/// 64-bit parameter.
pub fn launch_single_thread(s: &Symbols, function: CuFunction, argument: u64) -> Call<()> {
    absent_or!(s.launch_kernel, f => {
        let mut argument = argument;
        let mut params: [*mut c_void; 1] = [(&mut argument as *mut u64).cast()];
        // SAFETY: `function` came from cuModuleGetFunction for a kernel that
        // takes exactly one u64; `params` points at that value, and the
        // driver copies kernel arguments before cuLaunchKernel returns.
        let code = unsafe {
            f(function, 1, 1, 1, 1, 1, 1, 0, ptr::null_mut(), params.as_mut_ptr(), ptr::null_mut())
        };
        (code, ())
    })
}
