//! "Device" memory for `demo`: primary contexts and each thread's current
//! one, allocations (host memory of this process, tracked by address), copies
//! and memset, and scrambling every allocation while this process is
//! checkpointed so that skipped restores and reads of a checkpointed process
//! show up as data mismatches.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use crate::codes::{
    CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS,
};
use crate::devices::{self, Device};

/// Device pointers are aligned like the real driver's.
const ALIGN: usize = 256;
/// Opaque `CUcontext` values: `CONTEXT_BASE + 16 * device`.
const CONTEXT_BASE: usize = 0x0fa4_e000;
/// Scrambling XORs every byte with this (non-zero, so every byte changes).
const KEY: u8 = 0xa5;

struct Allocation {
    size: usize,
    device: usize,
    scrambled: bool,
}

struct Memory {
    /// Keyed by base address.
    allocations: BTreeMap<u64, Allocation>,
    /// Primary-context reference counts, by device index.
    retained: Vec<u32>,
}

static MEMORY: Mutex<Memory> = Mutex::new(Memory {
    allocations: BTreeMap::new(),
    retained: Vec::new(),
});

thread_local! {
    /// The device whose primary context is current on this thread.
    static CURRENT: Cell<Option<usize>> = const { Cell::new(None) };
}

fn memory() -> MutexGuard<'static, Memory> {
    MEMORY.lock().unwrap_or_else(|e| e.into_inner())
}

fn current_index() -> Option<usize> {
    CURRENT.try_with(Cell::get).ok().flatten()
}

fn set_current_index(index: Option<usize>) {
    let _ = CURRENT.try_with(|c| c.set(index));
}

/// The current context's device, which must be retained.
fn current() -> Result<(usize, Device), i32> {
    let devices = devices::initialized()?;
    let index = current_index().ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    let device = devices.get(index).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    if memory().retained.get(index).copied().unwrap_or(0) == 0 {
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    Ok((index, device.clone()))
}

/// `cuDevicePrimaryCtxRetain`: the context handle of device `ordinal`.
pub fn primary_retain(ordinal: i32) -> Result<usize, i32> {
    let (index, _) = devices::device(ordinal)?;
    let mut memory = memory();
    if memory.retained.len() <= index {
        memory.retained.resize(index + 1, 0);
    }
    memory.retained[index] = memory.retained[index].saturating_add(1);
    Ok(CONTEXT_BASE + 16 * index)
}

/// `cuDevicePrimaryCtxRelease_v2`; the last release frees the device's
/// allocations, as destroying the real context does.
pub fn primary_release(ordinal: i32) -> i32 {
    let index = match devices::device(ordinal) {
        Ok((index, _)) => index,
        Err(code) => return code,
    };
    let mut memory = memory();
    let Some(count) = memory.retained.get_mut(index).filter(|c| **c > 0) else {
        return CUDA_ERROR_INVALID_CONTEXT;
    };
    *count -= 1;
    if *count == 0 {
        let doomed: Vec<u64> = memory
            .allocations
            .iter()
            .filter(|(_, a)| a.device == index)
            .map(|(base, _)| *base)
            .collect();
        for base in doomed {
            if let Some(allocation) = memory.allocations.remove(&base) {
                release(base, allocation.size);
            }
        }
    }
    CUDA_SUCCESS
}

/// `cuCtxSetCurrent`; 0 (NULL) unbinds.
pub fn set_current(handle: usize) -> i32 {
    let devices = match devices::initialized() {
        Ok(devices) => devices,
        Err(code) => return code,
    };
    if handle == 0 {
        set_current_index(None);
        return CUDA_SUCCESS;
    }
    let index = handle
        .checked_sub(CONTEXT_BASE)
        .filter(|offset| offset % 16 == 0)
        .map(|offset| offset / 16)
        .filter(|index| *index < devices.len());
    match index {
        Some(index) if memory().retained.get(index).copied().unwrap_or(0) > 0 => {
            set_current_index(Some(index));
            CUDA_SUCCESS
        }
        _ => CUDA_ERROR_INVALID_CONTEXT,
    }
}

/// `cuCtxSynchronize`: nothing is ever pending.
pub fn synchronize() -> i32 {
    current().map_or_else(|code| code, |_| CUDA_SUCCESS)
}

/// `cuMemAlloc_v2`: zeroed host memory, charged to the current device.
pub fn alloc(size: usize) -> Result<u64, i32> {
    let (index, device) = current()?;
    if size == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut memory = memory();
    let used = used_on(&memory, index);
    let wanted = u64::try_from(size).unwrap_or(u64::MAX);
    if used.saturating_add(wanted) > device.total_bytes() {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    let layout = Layout::from_size_align(size, ALIGN).map_err(|_| CUDA_ERROR_OUT_OF_MEMORY)?;
    // SAFETY: `layout` has a non-zero size (checked above).
    let pointer = unsafe { alloc_zeroed(layout) };
    if pointer.is_null() {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    let base = pointer as u64;
    memory.allocations.insert(
        base,
        Allocation {
            size,
            device: index,
            scrambled: false,
        },
    );
    Ok(base)
}

/// `cuMemFree_v2`: `dptr` must be the base of a live allocation.
pub fn free(dptr: u64) -> i32 {
    if let Err(code) = devices::initialized() {
        return code;
    }
    match memory().allocations.remove(&dptr) {
        Some(allocation) => {
            release(dptr, allocation.size);
            CUDA_SUCCESS
        }
        None => CUDA_ERROR_INVALID_VALUE,
    }
}

/// Returns an allocation made by `alloc` to the allocator.
fn release(base: u64, size: usize) {
    if let Ok(layout) = Layout::from_size_align(size, ALIGN) {
        // SAFETY: `base` was returned by `alloc_zeroed` with this very layout
        // and has just been removed from the table, so it is freed only once.
        unsafe { dealloc(base as usize as *mut u8, layout) };
    }
}

fn used_on(memory: &Memory, index: usize) -> u64 {
    memory
        .allocations
        .values()
        .filter(|a| a.device == index)
        .map(|a| u64::try_from(a.size).unwrap_or(u64::MAX))
        .fold(0, u64::saturating_add)
}

/// The host address of `[dptr, dptr + n)` when it lies inside one allocation.
fn region(memory: &Memory, dptr: u64, n: usize) -> Result<*mut u8, i32> {
    let (base, allocation) = memory
        .allocations
        .range(..=dptr)
        .next_back()
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let end = base.saturating_add(u64::try_from(allocation.size).unwrap_or(u64::MAX));
    match dptr.checked_add(u64::try_from(n).unwrap_or(u64::MAX)) {
        Some(last) if last <= end => Ok(dptr as usize as *mut u8),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// `cuMemcpyHtoD_v2`.
///
/// # Safety
/// `src` must be null or valid for reads of `n` bytes.
pub unsafe fn copy_to_device(dst: u64, src: *const u8, n: usize) -> i32 {
    if let Err(code) = devices::initialized() {
        return code;
    }
    if n == 0 {
        return CUDA_SUCCESS;
    }
    if src.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let memory = memory();
    match region(&memory, dst, n) {
        Ok(target) => {
            // SAFETY: `src` is readable for `n` bytes (caller's contract);
            // `target` lies inside a live allocation (checked by `region`, and
            // the lock keeps it alive). `copy` tolerates overlap.
            unsafe { std::ptr::copy(src, target, n) };
            CUDA_SUCCESS
        }
        Err(code) => code,
    }
}

/// `cuMemcpyDtoH_v2`.
///
/// # Safety
/// `dst` must be null or valid for writes of `n` bytes.
pub unsafe fn copy_from_device(dst: *mut u8, src: u64, n: usize) -> i32 {
    if let Err(code) = devices::initialized() {
        return code;
    }
    if n == 0 {
        return CUDA_SUCCESS;
    }
    if dst.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let memory = memory();
    match region(&memory, src, n) {
        Ok(source) => {
            // SAFETY: `dst` is writable for `n` bytes (caller's contract);
            // `source` lies inside a live allocation held by the lock.
            unsafe { std::ptr::copy(source.cast_const(), dst, n) };
            CUDA_SUCCESS
        }
        Err(code) => code,
    }
}

/// `cuMemsetD8_v2`.
pub fn memset(dst: u64, value: u8, n: usize) -> i32 {
    if let Err(code) = devices::initialized() {
        return code;
    }
    if n == 0 {
        return CUDA_SUCCESS;
    }
    let memory = memory();
    match region(&memory, dst, n) {
        Ok(target) => {
            // SAFETY: `[target, target + n)` lies inside a live allocation
            // (checked by `region`; the lock keeps it alive).
            unsafe { std::ptr::write_bytes(target, value, n) };
            CUDA_SUCCESS
        }
        Err(code) => code,
    }
}

/// `cuMemGetInfo_v2`: `(free, total)` of the current device.
pub fn info() -> Result<(u64, u64), i32> {
    let (index, device) = current()?;
    let total = device.total_bytes();
    Ok((total.saturating_sub(used_on(&memory(), index)), total))
}

/// XORs `[base, base + size)` with `KEY`; applying it twice is a no-op.
fn xor(base: u64, size: usize) {
    // SAFETY: the range is a live allocation (callers hold the MEMORY lock
    // while walking the table), so nothing else reads, writes or frees it.
    let bytes = unsafe { std::slice::from_raw_parts_mut(base as usize as *mut u8, size) };
    // SAFETY: every bit pattern is a valid `u64`.
    let (head, words, tail) = unsafe { bytes.align_to_mut::<u64>() };
    let word_key = u64::from_ne_bytes([KEY; 8]);
    head.iter_mut().for_each(|b| *b ^= KEY);
    words.iter_mut().for_each(|w| *w ^= word_key);
    tail.iter_mut().for_each(|b| *b ^= KEY);
}

/// On this process's own checkpoint: scramble every live allocation.
pub fn scramble_all() {
    let mut memory = memory();
    for (base, allocation) in memory.allocations.iter_mut() {
        if !allocation.scrambled {
            xor(*base, allocation.size);
            allocation.scrambled = true;
        }
    }
}

/// On this process's own restore: unscramble, or with `corrupt` leave the
/// bytes scrambled for good (a later restore does not repair them).
pub fn unscramble_all(corrupt: bool) {
    let mut memory = memory();
    for (base, allocation) in memory.allocations.iter_mut() {
        if allocation.scrambled && !corrupt {
            xor(*base, allocation.size);
        }
        allocation.scrambled = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_back(dptr: u64, n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n];
        // SAFETY: `out` is writable for `n` bytes.
        let code = unsafe { copy_from_device(out.as_mut_ptr(), dptr, n) };
        assert_eq!(code, CUDA_SUCCESS);
        out
    }

    #[test]
    fn allocations_copy_scramble_and_unscramble() {
        assert_eq!(devices::init(0), CUDA_SUCCESS);
        assert_eq!(alloc(16), Err(CUDA_ERROR_INVALID_CONTEXT));
        let handle = primary_retain(0).unwrap_or(0);
        assert_eq!(set_current(handle), CUDA_SUCCESS);
        assert_eq!(set_current(handle + 1), CUDA_ERROR_INVALID_CONTEXT);
        assert_eq!(synchronize(), CUDA_SUCCESS);
        assert_eq!(alloc(0), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(alloc(usize::MAX), Err(CUDA_ERROR_OUT_OF_MEMORY));
        let dptr = alloc(1000).unwrap_or(0);
        assert_eq!(dptr % 256, 0);
        let data: Vec<u8> = (0..1000).map(|i| (i % 251) as u8).collect();
        // SAFETY: `data` is readable for its length.
        let written = unsafe { copy_to_device(dptr, data.as_ptr(), 1000) };
        assert_eq!(written, CUDA_SUCCESS);
        // SAFETY: `data` is readable; the range overflows the allocation.
        let too_far = unsafe { copy_to_device(dptr + 1, data.as_ptr(), 1000) };
        assert_eq!(too_far, CUDA_ERROR_INVALID_VALUE);
        assert_eq!(read_back(dptr, 1000), data);
        assert_eq!(memset(dptr + 10, 7, 5), CUDA_SUCCESS);
        assert_eq!(read_back(dptr + 10, 5), [7; 5]);
        assert_eq!(memset(dptr, 3, 10), CUDA_SUCCESS);
        assert_eq!(memset(dptr + 995, 9, 6), CUDA_ERROR_INVALID_VALUE);
        let before = read_back(dptr, 1000);
        scramble_all();
        let scrambled = read_back(dptr, 1000);
        assert!(before.iter().zip(&scrambled).all(|(a, b)| a != b));
        scramble_all(); // idempotent while checkpointed
        unscramble_all(false);
        assert_eq!(read_back(dptr, 1000), before);
        scramble_all();
        unscramble_all(true);
        scramble_all();
        unscramble_all(false);
        assert_eq!(read_back(dptr, 1000), scrambled, "corruption is permanent");
        let (free_bytes, total) = info().unwrap_or((0, 0));
        assert_eq!(total, 81559 << 20);
        assert!(free_bytes <= total - 1000);
        assert_eq!(free(dptr + 1), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(free(dptr), CUDA_SUCCESS);
        assert_eq!(free(dptr), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(primary_release(0), CUDA_SUCCESS);
        assert_eq!(primary_release(0), CUDA_ERROR_INVALID_CONTEXT);
        assert_eq!(
            primary_retain(5),
            Err(crate::codes::CUDA_ERROR_INVALID_DEVICE)
        );
    }
}
