//! The kernel driver's listing of this host's GPUs
//! (`/proc/driver/nvidia/gpus/<bus id>/information`): every GPU the driver
//! exposes, whatever `CUDA_VISIBLE_DEVICES` says, in PCI order, with its
//! UUID, model and device minor (`/dev/nvidiaN`). Free to read: no library,
//! no context.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::driver::GpuUuid;
use crate::files;
use crate::gpu::device::Gpu;

/// Where the kernel driver lists its GPUs.
pub const KERNEL_GPUS_DIR: &str = "/proc/driver/nvidia/gpus";
/// Debug builds only (the tests' stand-in for a host): reads another
/// directory in its place. Release builds ignore it, so nobody can make a
/// root cudackpt see GPUs that are not there.
pub const DEBUG_KERNEL_GPUS_DIR_VAR: &str = crate::environment::DEBUG_DRIVER_GPUS_DIR;

/// Where the kernel's GPU listing is read: [`KERNEL_GPUS_DIR`], or in a
/// debug build the directory [`DEBUG_KERNEL_GPUS_DIR_VAR`] names.
pub fn listing_dir() -> PathBuf {
    crate::environment::debug(DEBUG_KERNEL_GPUS_DIR_VAR)
        .map_or_else(|| PathBuf::from(KERNEL_GPUS_DIR), PathBuf::from)
}

/// Where the kernel module says its version.
const VERSION_FILE: &str = "/proc/driver/nvidia/version";

/// The kernel module's version (`580.159.04`), read from
/// [`VERSION_FILE`]; `None` without the driver.
pub fn module_version() -> Option<String> {
    files::read_capped(Path::new(VERSION_FILE), 64 * 1024)
        .ok()
        .and_then(|text| module_version_in(&text))
}

/// The version in `/proc/driver/nvidia/version`'s first line: its first
/// word that starts with a digit and holds a dot. The proprietary module
/// says `NVIDIA UNIX x86_64 Kernel Module  580.159.04`, the open one
/// `NVIDIA UNIX Open Kernel Module for x86_64  580.159.04` (pure).
pub fn module_version_in(text: &str) -> Option<String> {
    text.lines()
        .next()?
        .split_whitespace()
        .find(|word| word.starts_with(|c: char| c.is_ascii_digit()) && word.contains('.'))
        .map(str::to_string)
}

/// A kernel driver `information` file is a few hundred bytes.
const INFORMATION_CAP: u64 = 64 * 1024;

/// Reads every `<bus id>/information` file under `dir`, ordered by bus id.
/// `None` when the directory is missing or holds no readable GPU.
pub fn read_listing(dir: &Path) -> Option<Vec<Gpu>> {
    let mut found: Vec<(String, GpuUuid, String)> = fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let text = files::read_capped(&entry.path().join("information"), INFORMATION_CAP)
                .map_err(|why| tracing::debug!(path = ?entry.path(), %why, "unreadable GPU"))
                .ok()?;
            let (uuid, model) = parse_information(&text)?;
            Some((
                entry.file_name().to_string_lossy().to_lowercase(),
                uuid,
                model,
            ))
        })
        .collect();
    found.sort();
    let gpus: Vec<Gpu> = found
        .into_iter()
        .enumerate()
        .map(|(index, (bus, uuid, model))| Gpu {
            pci_bus_id: Some(bus),
            ..Gpu::known(index, uuid, model)
        })
        .collect();
    (!gpus.is_empty()).then_some(gpus)
}

/// The UUID and model in one GPU's `information` file (`GPU UUID: GPU-...`,
/// `Model: ...`); the model may be missing.
fn parse_information(text: &str) -> Option<(GpuUuid, String)> {
    let field = |name: &str| {
        text.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == name).then(|| value.trim().to_string())
        })
    };
    let uuid = field("GPU UUID")?.parse().ok()?;
    Some((uuid, field("Model").unwrap_or_default()))
}

/// Writes a kernel listing of GPUs (`(bus id, uuid, model)`) under `dir`,
/// as `/proc/driver/nvidia/gpus` holds it (tests of what reads it).
#[cfg(test)]
pub fn write_listing(dir: &Path, gpus: &[(&str, GpuUuid, &str)]) {
    for (bus, uuid, model) in gpus {
        let gpu = dir.join(bus);
        fs::create_dir_all(&gpu).expect("a GPU directory");
        fs::write(
            gpu.join("information"),
            format!("Model: \t\t {model}\nGPU UUID: \t {uuid}\n"),
        )
        .expect("an information file");
    }
}

/// Each GPU's minor and bus id from the kernel driver's listing under `dir`
/// (`<bus id>/information`, `Device Minor: N`); GPUs it cannot read are
/// left out.
pub fn bus_ids_by_minor(dir: &Path) -> BTreeMap<u32, String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let text =
                files::read_capped(&entry.path().join("information"), INFORMATION_CAP).ok()?;
            let minor = device_minor(&text)?;
            Some((minor, entry.file_name().to_str()?.to_string()))
        })
        .collect()
}

/// The `Device Minor` of one `information` file (pure).
pub fn device_minor(text: &str) -> Option<u32> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "Device Minor")
            .then(|| value.trim().parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFORMATION: &str = "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\nGPU UUID: \t GPU-84173e3f-5c5c-be88-8f69-664fb749ac65\nVideo BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\nBus Location: \t 0000:00:05.0\nDevice Minor: \t 0\nGPU Excluded:\t No\n";

    #[test]
    fn the_uuid_and_model_are_read_from_the_information_file() {
        let (uuid, model) = parse_information(INFORMATION).expect("has a UUID");
        assert_eq!(uuid.to_string(), "GPU-84173e3f-5c5c-be88-8f69-664fb749ac65");
        assert_eq!(model, "NVIDIA H100 80GB HBM3");
        assert_eq!(parse_information("Model: x\n"), None);
    }

    #[test]
    fn gpus_are_listed_in_bus_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (bus, last) in [("0000:41:00.0", "2"), ("0000:0a:00.0", "1")] {
            let gpu = dir.path().join(bus);
            fs::create_dir(&gpu).expect("gpu dir");
            let text = INFORMATION.replace("ac65", &format!("ac6{last}"));
            fs::write(gpu.join("information"), text).expect("information");
        }
        let gpus = read_listing(dir.path()).expect("two GPUs");
        let names: Vec<String> = gpus.iter().map(|g| g.uuid.to_string()).collect();
        assert_eq!(
            names,
            [
                "GPU-84173e3f-5c5c-be88-8f69-664fb749ac61",
                "GPU-84173e3f-5c5c-be88-8f69-664fb749ac62"
            ]
        );
        assert_eq!(gpus[1].index, 1);
        assert_eq!(read_listing(&dir.path().join("missing")), None);
    }

    #[test]
    fn a_planted_fifo_is_skipped_not_waited_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let gpu = dir.path().join("0000:0a:00.0");
        fs::create_dir(&gpu).expect("gpu dir");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            gpu.join("information"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .expect("mkfifo");
        assert_eq!(read_listing(dir.path()), None);
    }

    #[test]
    fn the_minor_is_read_from_the_information_file() {
        let text = "Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t GPU-84173e3f-5c5c-be88-8f69-664fb749ac65\nBus Location: \t 0000:00:05.0\nDevice Minor: \t 3\nGPU Excluded:\t No\n";
        assert_eq!(device_minor(text), Some(3));
        assert_eq!(device_minor("Device Minor: x\n"), None);
        assert_eq!(device_minor("Model: y\n"), None);
    }

    #[test]
    fn minors_map_to_the_kernel_listings_bus_ids() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (bus, minor) in [("0000:00:06.0", 0), ("0000:00:07.0", 1)] {
            let gpu = dir.path().join(bus);
            std::fs::create_dir(&gpu).expect("gpu dir");
            std::fs::write(
                gpu.join("information"),
                format!("Device Minor: \t {minor}\n"),
            )
            .expect("information");
        }
        let by_minor = bus_ids_by_minor(dir.path());
        assert_eq!(by_minor.get(&1).map(String::as_str), Some("0000:00:07.0"));
        assert_eq!(by_minor.len(), 2);
        assert!(bus_ids_by_minor(&dir.path().join("missing")).is_empty());
    }

    #[test]
    fn the_module_version_is_read_from_either_module_s_line() {
        let proprietary = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Tue Oct 28 2025\nGCC version: gcc 12\n";
        let open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22-I3-AF03-09-1)  Thu Oct 30 2025\n";
        assert_eq!(
            module_version_in(proprietary).as_deref(),
            Some("580.159.04")
        );
        assert_eq!(module_version_in(open).as_deref(), Some("580.159.04"));
        assert_eq!(module_version_in("nothing\n"), None);
        assert_eq!(module_version_in(""), None);
    }
}
