//! The GPUs of this host, for checking and resolving `--map`. The kernel
//! driver's view (`/proc/driver/nvidia/gpus/*/information`) comes first: it
//! lists every GPU the driver exposes, which is the set a restore map must
//! cover, whatever `CUDA_VISIBLE_DEVICES` says, and reading it costs no
//! `cuInit`. Without it (containers without /proc/driver/nvidia, the fake
//! driver in CI) the CUDA driver's own enumeration is used.

use std::fs;
use std::path::Path;

use crate::driver::Driver;
use crate::gpu::map::GpuUuid;

/// Where a GPU list came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    KernelDriver,
    CudaDriver,
}

/// The host's GPUs in index order (PCI bus order, as `nvidia-smi` numbers
/// them), or why they could not be listed.
pub fn host_gpus(driver: &Driver) -> Result<(Vec<GpuUuid>, Source), String> {
    if let Some(gpus) = from_proc(Path::new("/proc/driver/nvidia/gpus")) {
        return Ok((gpus, Source::KernelDriver));
    }
    driver
        .devices()
        .map(|devices| (devices.iter().map(|d| d.uuid).collect(), Source::CudaDriver))
        .map_err(|e| e.to_string())
}

/// Reads every `<bus id>/information` file under `dir`, ordered by bus id.
/// `None` when the directory is missing or holds no readable GPU.
fn from_proc(dir: &Path) -> Option<Vec<GpuUuid>> {
    let mut gpus: Vec<(String, GpuUuid)> = fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let text = fs::read_to_string(entry.path().join("information")).ok()?;
            let uuid = parse_information(&text)?;
            Some((entry.file_name().to_string_lossy().to_lowercase(), uuid))
        })
        .collect();
    gpus.sort();
    (!gpus.is_empty()).then(|| gpus.into_iter().map(|(_, uuid)| uuid).collect())
}

/// The UUID in one GPU's `information` file (`GPU UUID: GPU-...`).
fn parse_information(text: &str) -> Option<GpuUuid> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "GPU UUID").then(|| value.trim().parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFORMATION: &str = "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\nGPU UUID: \t GPU-84173e3f-5c5c-be88-8f69-664fb749ac65\nVideo BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\nBus Location: \t 0000:00:05.0\nDevice Minor: \t 0\nGPU Excluded:\t No\n";

    #[test]
    fn the_uuid_is_read_from_the_information_file() {
        let uuid = parse_information(INFORMATION).expect("has a UUID");
        assert_eq!(uuid.to_string(), "GPU-84173e3f-5c5c-be88-8f69-664fb749ac65");
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
        let gpus = from_proc(dir.path()).expect("two GPUs");
        let names: Vec<String> = gpus.iter().map(ToString::to_string).collect();
        assert_eq!(
            names,
            [
                "GPU-84173e3f-5c5c-be88-8f69-664fb749ac61",
                "GPU-84173e3f-5c5c-be88-8f69-664fb749ac62"
            ]
        );
        assert_eq!(from_proc(&dir.path().join("missing")), None);
    }
}
