//! The fake GPUs: `$FAKE_CUDA_DEVICES` parsing, their UUIDs and PCI ids,
//! `cuInit` (which snapshots the list) and the driver version, and the check
//! that a restore's GPU map is a bijection over every device.

use std::sync::Mutex;

use crate::codes::{
    CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_INITIALIZED,
    CUDA_ERROR_NO_DEVICE, CUDA_ERROR_UNKNOWN, CUDA_SUCCESS,
};
use crate::inject::{self, Effect, RuleOp};

/// The list used when `$FAKE_CUDA_DEVICES` is unset.
pub const DEFAULT_DEVICES: &str = "NVIDIA Fake H100:81559";
/// Keeps the PCI bus id `0x10 + i` within one byte.
pub const MAX_DEVICES: usize = 64;
pub const DEFAULT_DRIVER_VERSION: i32 = 13000;

/// A `CUuuid`: 16 raw bytes.
pub type Uuid = [u8; 16];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    pub name: String,
    pub mem_mib: u64,
}

impl Device {
    pub fn total_bytes(&self) -> u64 {
        self.mem_mib.saturating_mul(1 << 20)
    }
}

/// Parses `NAME:MEM_MIB[,NAME:MEM_MIB...]`; an empty text is no device.
/// The name may itself hold `:` (the last one separates the memory).
pub fn parse_list(text: &str) -> Result<Vec<Device>, String> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let devices = text
        .split(',')
        .map(|entry| {
            let (name, mib) = entry
                .rsplit_once(':')
                .ok_or_else(|| format!("`{entry}` is not NAME:MEM_MIB"))?;
            let name = name.trim();
            let mem_mib = mib
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("`{entry}`: bad MEM_MIB `{}`", mib.trim()))?;
            if name.is_empty() {
                return Err(format!("`{entry}`: empty device name"));
            }
            Ok(Device {
                name: name.to_owned(),
                mem_mib,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    if devices.len() > MAX_DEVICES {
        return Err(format!("more than {MAX_DEVICES} devices"));
    }
    Ok(devices)
}

/// The devices `$FAKE_CUDA_DEVICES` describes in this process now.
pub fn configured() -> Result<Vec<Device>, String> {
    match std::env::var("FAKE_CUDA_DEVICES") {
        Ok(text) => parse_list(&text).map_err(|why| format!("FAKE_CUDA_DEVICES: {why}")),
        Err(_) => parse_list(DEFAULT_DEVICES),
    }
}

/// UUID of device `index`: `fa4e0000-0000-4000-8000-0000000000ii`.
pub fn uuid(index: usize) -> Uuid {
    let mut bytes = [0u8; 16];
    bytes[0] = 0xfa;
    bytes[1] = 0x4e;
    bytes[6] = 0x40;
    bytes[8] = 0x80;
    bytes[15] = u8::try_from(index).unwrap_or(u8::MAX);
    bytes
}

/// The index of the device whose UUID is `uuid`, if any.
pub fn index_of(uuid_bytes: &Uuid, count: usize) -> Option<usize> {
    (0..count).find(|i| uuid(*i) == *uuid_bytes)
}

/// Canonical lowercase form, without `GPU-`.
pub fn format_uuid(bytes: &Uuid) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// PCI bus number of device `index` (`0x1i`).
pub fn pci_bus(index: usize) -> i32 {
    0x10 + i32::try_from(index).unwrap_or(0)
}

/// `00000000:1i:00.0`.
pub fn pci_bus_id(index: usize) -> String {
    format!("00000000:{:02x}:00.0", pci_bus(index))
}

/// Whether `pairs` (old, new) name each of the `count` devices exactly once
/// as old and exactly once as new, and nothing else.
pub fn is_bijection(pairs: &[(Uuid, Uuid)], count: usize) -> bool {
    pairs.len() == count
        && (0..count).all(|i| {
            let id = uuid(i);
            pairs.iter().filter(|p| p.0 == id).count() == 1
                && pairs.iter().filter(|p| p.1 == id).count() == 1
        })
}

/// Where the map `pairs` sends device `from`; `None` when the map is not a
/// bijection over all `count` devices.
pub fn remap(pairs: &[(Uuid, Uuid)], count: usize, from: usize) -> Option<usize> {
    if !is_bijection(pairs, count) {
        return None;
    }
    let old = uuid(from);
    match pairs.iter().find(|p| p.0 == old) {
        Some(pair) => index_of(&pair.1, count),
        None => Some(from),
    }
}

/// The device list, once `cuInit` has succeeded in this process.
static INITIALIZED: Mutex<Option<Vec<Device>>> = Mutex::new(None);

/// `cuInit(flags)`, journalled in `init.log`.
pub fn init(flags: u32) -> i32 {
    let code = init_unlogged(flags);
    let line = format!("init {} {code}", std::process::id());
    if let Err(e) = crate::state::Store::from_env().log_init(&line) {
        crate::warn(&format!("cannot append to init.log: {e}"));
    }
    code
}

fn init_unlogged(flags: u32) -> i32 {
    match inject::for_caller(RuleOp::Init) {
        Some(Effect::Error { code, .. }) => return code,
        Some(Effect::Delay(ms)) => std::thread::sleep(std::time::Duration::from_millis(ms)),
        _ => {}
    }
    if flags != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let mut initialized = INITIALIZED.lock().unwrap_or_else(|e| e.into_inner());
    if initialized.is_some() {
        return CUDA_SUCCESS;
    }
    match configured() {
        Ok(devices) if devices.is_empty() => CUDA_ERROR_NO_DEVICE,
        Ok(devices) => {
            *initialized = Some(devices);
            CUDA_SUCCESS
        }
        Err(why) => {
            crate::warn(&why);
            CUDA_ERROR_UNKNOWN
        }
    }
}

/// The devices, or `CUDA_ERROR_NOT_INITIALIZED` before `cuInit`.
pub fn initialized() -> Result<Vec<Device>, i32> {
    INITIALIZED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .ok_or(CUDA_ERROR_NOT_INITIALIZED)
}

/// Device `ordinal` (with its index), after `cuInit`.
pub fn device(ordinal: i32) -> Result<(usize, Device), i32> {
    let devices = initialized()?;
    let index = usize::try_from(ordinal).map_err(|_| CUDA_ERROR_INVALID_DEVICE)?;
    devices
        .get(index)
        .cloned()
        .map(|d| (index, d))
        .ok_or(CUDA_ERROR_INVALID_DEVICE)
}

/// `cuDriverGetVersion`: `(code, version)`; no `cuInit` needed.
pub fn driver_version() -> (i32, Option<i32>) {
    match inject::for_caller(RuleOp::DriverVersion) {
        Some(Effect::Error { code, .. }) => return (code, None),
        Some(Effect::Delay(ms)) => std::thread::sleep(std::time::Duration::from_millis(ms)),
        _ => {}
    }
    let version = match std::env::var("FAKE_CUDA_DRIVER_VERSION") {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| {
            crate::warn(&format!(
                "FAKE_CUDA_DRIVER_VERSION `{text}` is not a number; answering {DEFAULT_DRIVER_VERSION}"
            ));
            DEFAULT_DRIVER_VERSION
        }),
        Err(_) => DEFAULT_DRIVER_VERSION,
    };
    (CUDA_SUCCESS, Some(version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_lists_parse() {
        let list = parse_list("NVIDIA Fake H100:81559").unwrap_or_default();
        assert_eq!(
            list,
            [Device {
                name: "NVIDIA Fake H100".into(),
                mem_mib: 81559
            }]
        );
        let two = parse_list("A:1024, Weird:Name:2048").unwrap_or_default();
        assert_eq!(two.len(), 2);
        assert_eq!((two[1].name.as_str(), two[1].mem_mib), ("Weird:Name", 2048));
        assert_eq!(two[0].total_bytes(), 1 << 30);
        assert_eq!(parse_list(""), Ok(Vec::new()));
        for bad in ["A", "A:", "A:x", ":5", "A:1,,B:2", "A:-1", "A:1,"] {
            assert!(parse_list(bad).is_err(), "`{bad}` was accepted");
        }
        let many = vec!["G:1"; MAX_DEVICES + 1].join(",");
        assert!(parse_list(&many).is_err());
    }

    #[test]
    fn uuids_and_pci_ids_follow_the_readme() {
        assert_eq!(
            format_uuid(&uuid(0)),
            "fa4e0000-0000-4000-8000-000000000000"
        );
        assert_eq!(
            format_uuid(&uuid(1)),
            "fa4e0000-0000-4000-8000-000000000001"
        );
        assert_eq!(
            format_uuid(&uuid(42)),
            "fa4e0000-0000-4000-8000-00000000002a"
        );
        assert_eq!(pci_bus_id(0), "00000000:10:00.0");
        assert_eq!(pci_bus_id(3), "00000000:13:00.0");
        assert_eq!(index_of(&uuid(2), 3), Some(2));
        assert_eq!(index_of(&uuid(2), 2), None);
    }

    #[test]
    fn maps_must_be_bijections_over_every_device() {
        let (a, b, c) = (uuid(0), uuid(1), uuid(2));
        // The spec's 2-GPU facts: A=B alone fails, A=B,B=A works, A=A,B=A fails.
        assert!(!is_bijection(&[(a, b)], 2));
        assert!(is_bijection(&[(a, b), (b, a)], 2));
        assert!(!is_bijection(&[(a, a), (b, a)], 2));
        assert!(is_bijection(&[(a, a), (b, b)], 2));
        assert!(!is_bijection(&[(a, b), (b, a), (a, b)], 2));
        assert!(!is_bijection(&[(a, c), (c, a)], 2));
        assert!(is_bijection(&[(a, a)], 1));
        let mut prefixed = a;
        prefixed[0] = b'G';
        assert!(!is_bijection(&[(prefixed, a)], 1));
        assert!(is_bijection(&[(c, a), (a, b), (b, c)], 3));
    }

    #[test]
    fn remap_sends_the_process_to_the_image_of_its_device() {
        let (a, b) = (uuid(0), uuid(1));
        assert_eq!(remap(&[(a, b), (b, a)], 2, 0), Some(1));
        assert_eq!(remap(&[(a, b), (b, a)], 2, 1), Some(0));
        assert_eq!(remap(&[(a, a), (b, b)], 2, 1), Some(1));
        assert_eq!(remap(&[(a, b)], 2, 0), None);
    }
}
