//! Every exported driver symbol, with the C signature of the real
//! `libcuda.so.1`. Each one checks its pointers (NULL is
//! `CUDA_ERROR_INVALID_VALUE`, never a crash), reads its argument structs,
//! calls the safe module that owns the behaviour, and writes its
//! out-parameters. Panics never cross the boundary.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_uchar, c_uint, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::codes::{self, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_UNKNOWN, CUDA_SUCCESS};
use crate::devices::{self, Uuid};
use crate::memory;
use crate::nvml;
use crate::ops::{self, Request};

type CUresult = c_int;
type CUdevice = c_int;
type CUdeviceptr = u64;
type CUcontext = *mut c_void;

/// `CUcheckpointLockArgs`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUcheckpointLockArgs {
    timeout_ms: u32,
    reserved0: u32,
    reserved1: [u64; 7],
}

/// `CUcheckpointCheckpointArgs` and `CUcheckpointUnlockArgs`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUcheckpointReservedArgs {
    reserved: [u64; 8],
}

/// `CUcheckpointGpuPair`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUcheckpointGpuPair {
    old_uuid: Uuid,
    new_uuid: Uuid,
}

/// `CUcheckpointRestoreArgs`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUcheckpointRestoreArgs {
    gpu_pairs: *const CUcheckpointGpuPair,
    gpu_pairs_count: c_uint,
    reserved: [u8; 52],
}

const _: () = assert!(std::mem::size_of::<CUcheckpointLockArgs>() == 64);
const _: () = assert!(std::mem::size_of::<CUcheckpointReservedArgs>() == 64);
const _: () = assert!(std::mem::size_of::<CUcheckpointGpuPair>() == 32);
const _: () = assert!(std::mem::size_of::<CUcheckpointRestoreArgs>() == 64);

/// More pairs than this is certainly not a map over the fake devices; they
/// are not read.
const MAX_PAIRS: u32 = 1024;

/// Runs `body`, turning a panic into `CUDA_ERROR_UNKNOWN`.
fn guard(body: impl FnOnce() -> CUresult) -> CUresult {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(CUDA_ERROR_UNKNOWN)
}

/// Writes `value` through `out` when it is non-null.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, value: T) -> CUresult {
    if out.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: non-null, and valid for writes by the caller's contract;
    // `write_unaligned` needs no alignment.
    unsafe { out.write_unaligned(value) };
    CUDA_SUCCESS
}

/// Reads `*args`, or `None` when it is null.
///
/// # Safety
/// `args` must be null or valid for a read of `T`.
unsafe fn read_args<T: Copy>(args: *const T) -> Option<T> {
    // SAFETY: non-null pointers are valid for reads by the caller's
    // contract; `read_unaligned` needs no alignment.
    (!args.is_null()).then(|| unsafe { args.read_unaligned() })
}

/// Copies `text` into the C buffer `out` of `len` bytes, truncated and
/// NUL-terminated.
///
/// # Safety
/// `out` must be null or valid for writes of `len` bytes.
unsafe fn put_string(out: *mut c_char, len: c_int, text: &str) -> CUresult {
    let Some(capacity) = usize::try_from(len).ok().filter(|l| *l > 0) else {
        return CUDA_ERROR_INVALID_VALUE;
    };
    if out.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let n = text.len().min(capacity - 1);
    // SAFETY: `out` is writable for `capacity` bytes and `n + 1 <= capacity`;
    // `text` is readable for `n` bytes and cannot overlap a C buffer we
    // were handed.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), out, n);
        out.add(n).write(0);
    }
    CUDA_SUCCESS
}

// ---------------------------------------------------------------- driver

#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    guard(|| devices::init(flags))
}

/// Says this library stands in for NVIDIA's driver, so cudackpt warns of
/// no missing NVML for its "GPUs"; with `FAKE_CUDA_AS_DRIVER=1` it passes
/// for NVIDIA's (the tests of what a real host without NVML is told).
#[no_mangle]
pub extern "C" fn cudackptStandIn() -> c_int {
    c_int::from(std::env::var_os("FAKE_CUDA_AS_DRIVER").is_none_or(|v| v != "1"))
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    guard(|| {
        if version.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        match devices::driver_version() {
            // SAFETY: `version` is non-null and points to a C int (driver API contract).
            (CUDA_SUCCESS, Some(v)) => unsafe { put(version, v) },
            (code, _) => code,
        }
    })
}

/// Shared body of `cuGetErrorName` / `cuGetErrorString`: unknown codes set
/// `*text` to NULL and return `CUDA_ERROR_INVALID_VALUE`, as the driver does.
///
/// # Safety
/// `text` must be null or valid for a write of a pointer.
unsafe fn error_text(found: Option<&'static std::ffi::CStr>, text: *mut *const c_char) -> CUresult {
    if text.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let pointer = found.map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: `text` is non-null and writable (caller's contract); the
    // strings are 'static.
    let written = unsafe { put(text, pointer) };
    if found.is_some() {
        written
    } else {
        CUDA_ERROR_INVALID_VALUE
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: CUresult, text: *mut *const c_char) -> CUresult {
    // SAFETY: `text` comes from the caller with the driver API's contract.
    guard(|| unsafe { error_text(codes::name(error), text) })
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: CUresult, text: *mut *const c_char) -> CUresult {
    // SAFETY: `text` comes from the caller with the driver API's contract.
    guard(|| unsafe { error_text(codes::description(error), text) })
}

// --------------------------------------------------------------- devices

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    guard(|| match devices::initialized() {
        // SAFETY: `count` is null or points to a C int (driver API contract).
        Ok(list) => unsafe { put(count, c_int::try_from(list.len()).unwrap_or(c_int::MAX)) },
        Err(code) => code,
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    guard(|| match devices::device(ordinal) {
        // SAFETY: `device` is null or points to a CUdevice (driver API contract).
        Ok(_) => unsafe { put(device, ordinal) },
        Err(code) => code,
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    guard(|| match devices::device(dev) {
        // SAFETY: `name` is null or writable for `len` bytes (driver API contract).
        Ok((_, device)) => unsafe { put_string(name, len, &device.name) },
        Err(code) => code,
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut Uuid, dev: CUdevice) -> CUresult {
    guard(|| match devices::device(dev) {
        // SAFETY: `uuid` is null or points to a CUuuid (driver API contract).
        Ok((index, _)) => unsafe { put(uuid, devices::uuid(index)) },
        Err(code) => code,
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut Uuid, dev: CUdevice) -> CUresult {
    // SAFETY: same contract as `cuDeviceGetUuid`.
    unsafe { cuDeviceGetUuid(uuid, dev) }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    guard(|| match devices::device(dev) {
        Ok((_, device)) => {
            let total = usize::try_from(device.total_bytes()).unwrap_or(usize::MAX);
            // SAFETY: `bytes` is null or points to a size_t (driver API contract).
            unsafe { put(bytes, total) }
        }
        Err(code) => code,
    })
}

const CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: c_int = 33;
const CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: c_int = 34;
const CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: c_int = 50;

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut c_int,
    attribute: c_int,
    dev: CUdevice,
) -> CUresult {
    guard(|| match devices::device(dev) {
        Ok((index, _)) => {
            let answer = match attribute {
                CU_DEVICE_ATTRIBUTE_PCI_BUS_ID => devices::pci_bus(index),
                CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID | CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID => 0,
                _ => 0,
            };
            // SAFETY: `value` is null or points to a C int (driver API contract).
            unsafe { put(value, answer) }
        }
        Err(code) => code,
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetPCIBusId(
    bus_id: *mut c_char,
    len: c_int,
    dev: CUdevice,
) -> CUresult {
    guard(|| match devices::device(dev) {
        // SAFETY: `bus_id` is null or writable for `len` bytes (driver API contract).
        Ok((index, _)) => unsafe { put_string(bus_id, len, &devices::pci_bus_id(index)) },
        Err(code) => code,
    })
}

// -------------------------------------------------------- contexts, memory

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(
    context: *mut CUcontext,
    dev: CUdevice,
) -> CUresult {
    guard(|| {
        if context.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        match memory::primary_retain(dev) {
            // SAFETY: `context` is non-null and points to a CUcontext (driver API contract).
            Ok(handle) => unsafe { put(context, handle as CUcontext) },
            Err(code) => code,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    guard(|| memory::primary_release(dev))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(context: CUcontext) -> CUresult {
    guard(|| memory::set_current(context as usize))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    guard(memory::synchronize)
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytes: usize) -> CUresult {
    guard(|| {
        if dptr.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        match memory::alloc(bytes) {
            // SAFETY: `dptr` is non-null and points to a CUdeviceptr (driver API contract).
            Ok(address) => unsafe { put(dptr, address) },
            Err(code) => code,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    guard(|| memory::free(dptr))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
) -> CUresult {
    // SAFETY: `src` is null or readable for `bytes` bytes (driver API contract).
    guard(|| unsafe { memory::copy_to_device(dst, src.cast::<u8>(), bytes) })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    bytes: usize,
) -> CUresult {
    // SAFETY: `dst` is null or writable for `bytes` bytes (driver API contract).
    guard(|| unsafe { memory::copy_from_device(dst.cast::<u8>(), src, bytes) })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8_v2(dst: CUdeviceptr, value: c_uchar, count: usize) -> CUresult {
    guard(|| memory::memset(dst, value, count))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    guard(|| {
        if free.is_null() || total.is_null() {
            return CUDA_ERROR_INVALID_VALUE;
        }
        match memory::info() {
            Ok((free_bytes, total_bytes)) => {
                let as_size = |b: u64| usize::try_from(b).unwrap_or(usize::MAX);
                // SAFETY: both pointers are non-null and point to size_t
                // values (driver API contract).
                unsafe {
                    put(free, as_size(free_bytes));
                    put(total, as_size(total_bytes))
                }
            }
            Err(code) => code,
        }
    })
}

// ----------------------------------------------------------- checkpoint

/// Performs `request`, or logs it refused with `CUDA_ERROR_INVALID_VALUE`
/// when its arguments were bad.
fn checkpoint_call(pid: c_int, request: Request, args_ok: bool) -> CUresult {
    if args_ok {
        ops::call(pid, &request).code
    } else {
        ops::refuse(pid, &request, CUDA_ERROR_INVALID_VALUE)
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCheckpointProcessGetState(pid: c_int, state: *mut c_int) -> CUresult {
    guard(|| {
        if state.is_null() {
            return ops::refuse(pid, &Request::GetState, CUDA_ERROR_INVALID_VALUE);
        }
        let reply = ops::call(pid, &Request::GetState);
        match reply.value {
            // SAFETY: `state` is non-null and points to a CUprocessState (driver API contract).
            Some(value) if reply.code == CUDA_SUCCESS => unsafe { put(state, value) },
            _ => reply.code,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCheckpointProcessGetRestoreThreadId(
    pid: c_int,
    tid: *mut c_int,
) -> CUresult {
    guard(|| {
        if tid.is_null() {
            return ops::refuse(pid, &Request::RestoreTid, CUDA_ERROR_INVALID_VALUE);
        }
        let reply = ops::call(pid, &Request::RestoreTid);
        match reply.value {
            // SAFETY: `tid` is non-null and points to a C int (driver API contract).
            Some(value) if reply.code == CUDA_SUCCESS => unsafe { put(tid, value) },
            _ => reply.code,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCheckpointProcessLock(
    pid: c_int,
    args: *const CUcheckpointLockArgs,
) -> CUresult {
    guard(|| {
        // SAFETY: `args` is null or points to a CUcheckpointLockArgs (driver API contract).
        let args = unsafe { read_args(args) };
        let timeout_ms = args.map_or(0, |a| a.timeout_ms);
        let reserved_zero = args.is_none_or(|a| a.reserved0 == 0 && a.reserved1 == [0; 7]);
        checkpoint_call(pid, Request::Lock { timeout_ms }, reserved_zero)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCheckpointProcessCheckpoint(
    pid: c_int,
    args: *const CUcheckpointReservedArgs,
) -> CUresult {
    guard(|| {
        // SAFETY: `args` is null or points to 64 bytes (driver API contract).
        let args = unsafe { read_args(args) };
        let reserved_zero = args.is_none_or(|a| a.reserved == [0; 8]);
        checkpoint_call(pid, Request::Checkpoint, reserved_zero)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCheckpointProcessUnlock(
    pid: c_int,
    args: *const CUcheckpointReservedArgs,
) -> CUresult {
    guard(|| {
        // SAFETY: `args` is null or points to 64 bytes (driver API contract).
        let args = unsafe { read_args(args) };
        let reserved_zero = args.is_none_or(|a| a.reserved == [0; 8]);
        checkpoint_call(pid, Request::Unlock, reserved_zero)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCheckpointProcessRestore(
    pid: c_int,
    args: *const CUcheckpointRestoreArgs,
) -> CUresult {
    guard(|| {
        // SAFETY: `args` is null or points to a CUcheckpointRestoreArgs (driver API contract).
        let Some(args) = (unsafe { read_args(args) }) else {
            return checkpoint_call(pid, Request::Restore { pairs: Vec::new() }, true);
        };
        let count = args.gpu_pairs_count;
        let mut ok = args.reserved == [0; 52];
        let mut pairs = Vec::new();
        if count > 0 {
            if args.gpu_pairs.is_null() || count > MAX_PAIRS {
                ok = false;
            } else {
                // SAFETY: the caller promises `gpu_pairs` points to
                // `gpu_pairs_count` pairs; the pair type has alignment 1.
                let given = unsafe { std::slice::from_raw_parts(args.gpu_pairs, count as usize) };
                pairs = given.iter().map(|p| (p.old_uuid, p.new_uuid)).collect();
            }
        }
        checkpoint_call(pid, Request::Restore { pairs }, ok)
    })
}

// ----------------------------------------------------------------- NVML
// Answered when the tests copy this library as `libnvidia-ml.so.1` (see
// `nvml`). `nvmlDevice_t` handles are `NVML_HANDLE_BASE + 16 * index`.

type NvmlReturn = c_uint;
type NvmlDevice = *mut c_void;

const NVML_HANDLE_BASE: usize = 0x0fa4_f000;

/// `nvmlMemory_v2_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NvmlMemoryV2 {
    version: c_uint,
    total: u64,
    reserved: u64,
    free: u64,
    used: u64,
}

/// `nvmlProcessInfo_t` (v2 and v3).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NvmlProcessInfo {
    pid: c_uint,
    used_gpu_memory: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

const _: () = assert!(std::mem::size_of::<NvmlMemoryV2>() == 40);
const _: () = assert!(std::mem::size_of::<NvmlProcessInfo>() == 24);

/// Runs `body`, turning a panic into `NVML_ERROR_UNKNOWN`.
fn nvml_guard(body: impl FnOnce() -> NvmlReturn) -> NvmlReturn {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(nvml::NVML_ERROR_UNKNOWN)
}

/// The device behind a handle, with its index.
fn nvml_device(handle: NvmlDevice) -> Result<(usize, devices::Device), NvmlReturn> {
    let offset = (handle as usize)
        .checked_sub(NVML_HANDLE_BASE)
        .filter(|o| o % 16 == 0)
        .ok_or(nvml::NVML_ERROR_INVALID_ARGUMENT)?;
    let index = offset / 16;
    nvml::devices()?
        .into_iter()
        .nth(index)
        .map(|device| (index, device))
        .ok_or(nvml::NVML_ERROR_INVALID_ARGUMENT)
}

/// `put_string` with NVML's argument error.
///
/// # Safety
/// `out` must be null or valid for writes of `len` bytes.
unsafe fn nvml_put_string(out: *mut c_char, len: c_uint, text: &str) -> NvmlReturn {
    let Ok(len) = c_int::try_from(len) else {
        return nvml::NVML_ERROR_INVALID_ARGUMENT;
    };
    // SAFETY: forwarded from the caller's contract.
    match unsafe { put_string(out, len, text) } {
        CUDA_SUCCESS => nvml::NVML_SUCCESS,
        _ => nvml::NVML_ERROR_INVALID_ARGUMENT,
    }
}

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> NvmlReturn {
    nvml_guard(|| nvml::devices().map_or_else(|code| code, |_| nvml::NVML_SUCCESS))
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> NvmlReturn {
    nvml::NVML_SUCCESS
}

#[no_mangle]
pub extern "C" fn nvmlErrorString(code: NvmlReturn) -> *const c_char {
    nvml::error_string(code).as_ptr()
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(out: *mut c_char, len: c_uint) -> NvmlReturn {
    // SAFETY: `out` is writable for `len` bytes (NVML API contract).
    nvml_guard(|| unsafe { nvml_put_string(out, len, nvml::DRIVER_VERSION) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> NvmlReturn {
    nvml_guard(|| match nvml::devices() {
        Ok(list) => match c_uint::try_from(list.len()) {
            // SAFETY: `count` is null or points to a C uint (NVML API contract).
            Ok(n) if unsafe { put(count, n) } == CUDA_SUCCESS => nvml::NVML_SUCCESS,
            _ => nvml::NVML_ERROR_INVALID_ARGUMENT,
        },
        Err(code) => code,
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    nvml_guard(|| {
        let handle = (NVML_HANDLE_BASE + 16 * index as usize) as NvmlDevice;
        if let Err(code) = nvml_device(handle) {
            return code;
        }
        // SAFETY: `device` is null or points to a handle (NVML API contract).
        match unsafe { put(device, handle) } {
            CUDA_SUCCESS => nvml::NVML_SUCCESS,
            _ => nvml::NVML_ERROR_INVALID_ARGUMENT,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: NvmlDevice,
    out: *mut c_char,
    len: c_uint,
) -> NvmlReturn {
    nvml_guard(|| match nvml_device(device) {
        Ok((index, _)) => {
            let text = format!("GPU-{}", devices::format_uuid(&devices::uuid(index)));
            // SAFETY: `out` is writable for `len` bytes (NVML API contract).
            unsafe { nvml_put_string(out, len, &text) }
        }
        Err(code) => code,
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: NvmlDevice,
    out: *mut c_char,
    len: c_uint,
) -> NvmlReturn {
    nvml_guard(|| match nvml_device(device) {
        // SAFETY: `out` is writable for `len` bytes (NVML API contract).
        Ok((_, found)) => unsafe { nvml_put_string(out, len, &found.name) },
        Err(code) => code,
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: NvmlDevice,
    memory: *mut NvmlMemoryV2,
) -> NvmlReturn {
    nvml_guard(|| {
        let (index, found) = match nvml_device(device) {
            Ok(found) => found,
            Err(code) => return code,
        };
        let total = found.total_bytes();
        let used: u64 = nvml::processes_on(index).iter().map(|(_, b)| b).sum();
        let used = used.min(total);
        let info = NvmlMemoryV2 {
            version: 2 << 24 | 40,
            total,
            reserved: 0,
            free: total - used,
            used,
        };
        // SAFETY: `memory` is null or points to an nvmlMemory_v2_t (NVML API contract).
        match unsafe { put(memory, info) } {
            CUDA_SUCCESS => nvml::NVML_SUCCESS,
            _ => nvml::NVML_ERROR_INVALID_ARGUMENT,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut NvmlProcessInfo,
) -> NvmlReturn {
    nvml_guard(|| {
        let index = match nvml_device(device) {
            Ok((index, _)) => index,
            Err(code) => return code,
        };
        if count.is_null() {
            return nvml::NVML_ERROR_INVALID_ARGUMENT;
        }
        let listed = nvml::processes_on(index);
        // SAFETY: `count` is non-null and points to a C uint (NVML API contract).
        let room = unsafe { count.read_unaligned() } as usize;
        let Ok(found) = c_uint::try_from(listed.len()) else {
            return nvml::NVML_ERROR_UNKNOWN;
        };
        // SAFETY: as above.
        unsafe { count.write_unaligned(found) };
        if listed.is_empty() {
            return nvml::NVML_SUCCESS;
        }
        if infos.is_null() || room < listed.len() {
            return nvml::NVML_ERROR_INSUFFICIENT_SIZE;
        }
        for (i, (pid, bytes)) in listed.into_iter().enumerate() {
            let info = NvmlProcessInfo {
                pid,
                used_gpu_memory: bytes,
                gpu_instance_id: u32::MAX,
                compute_instance_id: u32::MAX,
            };
            // SAFETY: `infos` holds `room` entries (NVML API contract) and
            // `i < listed.len() <= room`.
            unsafe { infos.add(i).write_unaligned(info) };
        }
        nvml::NVML_SUCCESS
    })
}
