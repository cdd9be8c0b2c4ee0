//! Which GPUs a process has open, from the device numbers of its file
//! descriptors: a CUDA process opens `/dev/nvidiaN` (character major 195,
//! minor N) for every GPU it can see, and the kernel driver's listing says
//! which bus id each minor is. NVML's per-GPU start costs ~6 ms a GPU
//! (measured on 2 × H100, `cudackpt-bench nvml`), so the pre-flights ask
//! NVML about these GPUs only.
//!
//! The descriptors are `stat`ed through `/proc/PID/fd`, never opened and
//! never judged by their link text: a name can be planted, a device number
//! cannot. What cannot be read (a process gone, `/proc` hidden) is `None`,
//! and the caller asks every GPU: the set may be larger than the GPUs a
//! process uses, never smaller.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::gpu::kernel;

/// The NVIDIA driver's character major (`NV_MAJOR_DEVICE_NUMBER`).
const NVIDIA_MAJOR: u32 = 195;
/// Minors from here up are the driver's control nodes, not GPUs
/// (`nvidia-modeset` 254, `nvidiactl` 255).
const FIRST_CONTROL_MINOR: u32 = 254;
/// A process with more descriptors than this is asked about every GPU
/// rather than walked (the walk stays a fraction of a millisecond).
const DESCRIPTOR_CAP: usize = 65_536;

/// The GPU minors `pid` has open, or `None` when its descriptors cannot be
/// read (the caller then asks every GPU).
pub fn gpu_minors_of(pid: i32) -> Option<BTreeSet<u32>> {
    let entries = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    let mut minors = BTreeSet::new();
    for (seen, entry) in entries.enumerate() {
        if seen >= DESCRIPTOR_CAP {
            return None;
        }
        // `metadata` follows the magic link to the open file's inode
        // without opening it (a FIFO or socket is only stat'ed).
        let Ok(metadata) = entry.ok()?.path().metadata() else {
            continue; // closed since the listing
        };
        if let Some(minor) = gpu_minor(metadata.mode(), metadata.rdev()) {
            minors.insert(minor);
        }
    }
    Some(minors)
}

/// The GPU minor of a file of this mode and device number, if it is one of
/// the NVIDIA driver's GPU nodes (pure).
pub fn gpu_minor(mode: u32, rdev: u64) -> Option<u32> {
    let is_char_device = mode & libc_mode::S_IFMT == libc_mode::S_IFCHR;
    let (major, minor) = (rustix::fs::major(rdev), rustix::fs::minor(rdev));
    (is_char_device && major == NVIDIA_MAJOR && minor < FIRST_CONTROL_MINOR).then_some(minor)
}

/// File type bits of `st_mode` (POSIX values, the same on every Linux).
mod libc_mode {
    pub const S_IFMT: u32 = 0o170_000;
    pub const S_IFCHR: u32 = 0o020_000;
}

/// The union of the GPU minors every one of `pids` has open, or `None` when
/// any of them cannot be read or none has a GPU open (ask every GPU).
pub fn gpu_minors_of_all(pids: &[i32]) -> Option<BTreeSet<u32>> {
    let mut union = BTreeSet::new();
    for &pid in pids {
        union.extend(gpu_minors_of(pid)?);
    }
    (!union.is_empty()).then_some(union)
}

/// The bus ids of the GPUs `pids` have open, or `None` when that cannot be
/// told for every one of them (ask every GPU).
pub fn bus_ids_opened_by(pids: &[i32], kernel_dir: &Path) -> Option<Vec<String>> {
    let minors = gpu_minors_of_all(pids)?;
    let by_minor = kernel::bus_ids_by_minor(kernel_dir);
    minors
        .iter()
        .map(|minor| by_minor.get(minor).cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const S_IFCHR: u32 = 0o020_000;
    const S_IFREG: u32 = 0o100_000;

    #[test]
    fn only_the_drivers_gpu_nodes_are_gpus() {
        let dev = |major, minor| rustix::fs::makedev(major, minor);
        assert_eq!(gpu_minor(S_IFCHR | 0o666, dev(195, 0)), Some(0));
        assert_eq!(gpu_minor(S_IFCHR | 0o666, dev(195, 7)), Some(7));
        // nvidiactl and nvidia-modeset are the driver's, not GPUs.
        assert_eq!(gpu_minor(S_IFCHR | 0o666, dev(195, 255)), None);
        assert_eq!(gpu_minor(S_IFCHR | 0o666, dev(195, 254)), None);
        // nvidia-uvm has a major of its own; a regular file is no device
        // whatever its st_rdev says.
        assert_eq!(gpu_minor(S_IFCHR | 0o666, dev(238, 0)), None);
        assert_eq!(gpu_minor(S_IFREG | 0o644, dev(195, 0)), None);
    }

    #[test]
    fn a_process_without_gpus_or_gone_means_every_gpu() {
        // This test process has no GPU open: the union is empty, which says
        // "ask every GPU", never "ask none".
        assert_eq!(
            gpu_minors_of(std::process::id() as i32),
            Some(BTreeSet::new())
        );
        assert_eq!(gpu_minors_of_all(&[std::process::id() as i32]), None);
        assert_eq!(gpu_minors_of(i32::MAX), None);
        assert_eq!(
            bus_ids_opened_by(&[i32::MAX], Path::new("/nonexistent")),
            None
        );
    }
}
