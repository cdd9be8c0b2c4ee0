//! The fake NVML (`libnvidia-ml.so.1`): the same library, copied under that
//! name by the tests, answers the NVML calls cudackpt makes through
//! nvml-wrapper: the devices of `$FAKE_CUDA_DEVICES` (same names, UUIDs and
//! sizes as the fake driver's) and, per device, the compute processes and
//! their GPU memory listed in the state directory's `nvml-processes` file
//! (written by a test once it knows its targets' PIDs). As the real NVML
//! does, a process that is gone or checkpointed (the fake driver's state)
//! is not listed: it holds no GPU memory.

use crate::devices::{self, Device};
use crate::procfs;
use crate::state::{ProcState, Store};

pub const NVML_SUCCESS: u32 = 0;
pub const NVML_ERROR_UNINITIALIZED: u32 = 1;
pub const NVML_ERROR_INVALID_ARGUMENT: u32 = 2;
pub const NVML_ERROR_INSUFFICIENT_SIZE: u32 = 7;
pub const NVML_ERROR_UNKNOWN: u32 = 999;

/// What the real driver of the measurements reports.
pub const DRIVER_VERSION: &str = "580.159.04";

/// One entry of `nvml-processes`: `PID:MIB[@DEVICE]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    pub pid: i32,
    pub mib: u64,
    pub device: usize,
}

impl Footprint {
    pub fn bytes(&self) -> u64 {
        self.mib.saturating_mul(1 << 20)
    }
}

/// Parses `PID:MIB[@DEVICE]` entries separated by commas or newlines; an
/// empty text lists no process.
pub fn parse_processes(text: &str) -> Result<Vec<Footprint>, String> {
    text.split([',', '\n'])
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let (pid, rest) = entry
                .split_once(':')
                .ok_or_else(|| format!("`{entry}` is not PID:MIB[@DEVICE]"))?;
            let (mib, device) = rest.split_once('@').unwrap_or((rest, "0"));
            let number = |what: &str, text: &str| {
                text.trim()
                    .parse::<u64>()
                    .map_err(|_| format!("`{entry}`: bad {what} `{text}`"))
            };
            Ok(Footprint {
                pid: i32::try_from(number("PID", pid)?)
                    .map_err(|_| format!("`{entry}`: bad PID"))?,
                mib: number("MIB", mib)?,
                device: usize::try_from(number("DEVICE", device)?)
                    .map_err(|_| format!("`{entry}`: bad DEVICE"))?,
            })
        })
        .collect()
}

/// The devices NVML sees (those of the fake driver), or an NVML error.
pub fn devices() -> Result<Vec<Device>, u32> {
    devices::configured().map_err(|why| {
        crate::warn(&why);
        NVML_ERROR_UNKNOWN
    })
}

/// The compute processes on device `index` with their GPU memory, in bytes.
/// A process listed twice on one device holds what its last entry says
/// (a drain target appends its shrunk footprint when it releases).
pub fn processes_on(index: usize) -> Vec<(u32, u64)> {
    let text = Store::from_env().nvml_processes().unwrap_or_default();
    let listed = parse_processes(&text).unwrap_or_else(|why| {
        crate::warn(&format!("nvml-processes: {why}"));
        Vec::new()
    });
    latest(&listed)
        .iter()
        .filter(|f| f.device == index && holds_memory(f.pid))
        .filter_map(|f| Some((u32::try_from(f.pid).ok()?, f.bytes())))
        .collect()
}

/// The last entry of each (process, device), in the order first listed.
pub fn latest(listed: &[Footprint]) -> Vec<Footprint> {
    let mut kept: Vec<Footprint> = Vec::new();
    for footprint in listed {
        match kept
            .iter_mut()
            .find(|k| k.pid == footprint.pid && k.device == footprint.device)
        {
            Some(earlier) => *earlier = *footprint,
            None => kept.push(*footprint),
        }
    }
    kept
}

/// Whether a process is alive (not a zombie) and not checkpointed.
fn holds_memory(pid: i32) -> bool {
    if !procfs::is_running(pid) {
        return false;
    }
    match procfs::starttime(pid) {
        Some(starttime) => Store::from_env()
            .read(pid, starttime)
            .map_or(true, |record| record.state != ProcState::Checkpointed),
        None => false,
    }
}

/// The text of `nvmlErrorString`.
pub fn error_string(code: u32) -> &'static std::ffi::CStr {
    match code {
        NVML_SUCCESS => c"Success",
        NVML_ERROR_UNINITIALIZED => c"Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT => c"Invalid Argument",
        NVML_ERROR_INSUFFICIENT_SIZE => c"Insufficient Size",
        _ => c"Unknown Error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_entry_of_a_process_on_a_device_is_what_it_holds() {
        let listed = parse_processes("7:8192\n9:100\n7:1024\n7:50@1").expect("parses");
        let kept = latest(&listed);
        assert_eq!(kept.len(), 3);
        assert_eq!((kept[0].pid, kept[0].mib, kept[0].device), (7, 1024, 0));
        assert_eq!((kept[1].pid, kept[1].mib), (9, 100));
        assert_eq!((kept[2].pid, kept[2].mib, kept[2].device), (7, 50, 1));
    }

    #[test]
    fn process_lists_parse_with_an_optional_device() {
        assert_eq!(
            parse_processes("12:4096, 13:512@1\n").expect("parses"),
            vec![
                Footprint {
                    pid: 12,
                    mib: 4096,
                    device: 0
                },
                Footprint {
                    pid: 13,
                    mib: 512,
                    device: 1
                },
            ]
        );
        assert_eq!(parse_processes("").expect("empty"), Vec::new());
        assert!(parse_processes("12").is_err());
        assert!(parse_processes("12:x").is_err());
        assert!(parse_processes("-1:4").is_err());
    }

    #[test]
    fn a_process_that_is_gone_is_not_listed() {
        assert!(!holds_memory(i32::MAX - 3));
        assert!(holds_memory(std::process::id() as i32));
    }
}
