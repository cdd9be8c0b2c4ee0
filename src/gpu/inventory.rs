//! This host's GPUs, listed at most once per source per command, for every
//! part of cudackpt that asks (`devices`, `doctor`, `demo`, map checks and
//! completion, `--map auto`, checkpoint records, the memory pre-flight).
//!
//! Three sources, each read only when first asked for:
//! - the kernel driver (`/proc/driver/nvidia/gpus/*/information`): every GPU
//!   the driver exposes, which is the set a restore map must cover whatever
//!   `CUDA_VISIBLE_DEVICES` says, in PCI order, with UUID and model; free;
//! - NVML: the same GPUs with memory, MIG and persistence mode, without a
//!   CUDA context; tens of milliseconds to start;
//! - the CUDA driver: the fallback, and the only source that costs a
//!   `cuInit`. Views used by process commands say whether they may use it:
//!   a checkpoint record never does (docs/driver-facts.md, F1: no `cuInit` on the process
//!   path); resolving a map the user gave may, as nothing else can tell.

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::driver::{DeviceInfo, Driver, GpuUuid};
use crate::files;
use crate::gpu::nvml;

/// Where the kernel driver lists its GPUs.
pub const KERNEL_GPUS_DIR: &str = "/proc/driver/nvidia/gpus";
/// Debug builds only (the tests' stand-in for a host): reads another
/// directory in its place. Release builds ignore it, so nobody can make a
/// root cudackpt see GPUs that are not there.
pub const DEBUG_KERNEL_GPUS_DIR_VAR: &str = crate::environment::DEBUG_DRIVER_GPUS_DIR;

/// Where the kernel's GPU listing is read: [`KERNEL_GPUS_DIR`], or in a
/// debug build the directory [`DEBUG_KERNEL_GPUS_DIR_VAR`] names.
fn kernel_gpus_dir() -> PathBuf {
    crate::environment::debug(DEBUG_KERNEL_GPUS_DIR_VAR)
        .map_or_else(|| PathBuf::from(KERNEL_GPUS_DIR), PathBuf::from)
}

pub use crate::gpu::device::Gpu;

impl Gpu {
    fn known(index: usize, uuid: GpuUuid, name: String) -> Gpu {
        Gpu {
            index,
            uuid,
            name,
            pci_bus_id: None,
            memory_total_bytes: None,
            memory_free_bytes: None,
            mig_enabled: None,
            persistence_mode: None,
        }
    }
}

/// What the CUDA driver alone can tell of a GPU (no free memory, no modes).
impl From<&DeviceInfo> for Gpu {
    fn from(device: &DeviceInfo) -> Gpu {
        Gpu {
            pci_bus_id: device.pci_bus_id.clone(),
            memory_total_bytes: Some(device.total_bytes),
            ..Gpu::known(
                usize::try_from(device.ordinal).unwrap_or_default(),
                device.uuid,
                device.name.clone(),
            )
        }
    }
}

/// Which source a listing came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    KernelDriver,
    Nvml,
    CudaDriver,
}

/// GPUs in index order, and where they were read.
#[derive(Debug, Clone, Copy)]
pub struct Listing<'a> {
    pub gpus: &'a [Gpu],
    pub source: Source,
}

impl Listing<'_> {
    pub fn uuids(&self) -> Vec<GpuUuid> {
        self.gpus.iter().map(|g| g.uuid).collect()
    }
}

/// Why no source that a view may use could list the GPUs, one reason per
/// source tried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unlisted {
    pub nvml: Option<String>,
    pub cuda: Option<String>,
}

/// The CUDA driver to ask, when it comes to that.
enum CudaAccess<'a> {
    /// The one this command already loaded.
    Loaded(&'a Driver),
    /// Load this one (`--libcuda`, or the default) on first need.
    Load(Option<&'a Path>),
}

/// The GPUs of this host for one command.
pub struct Inventory<'a> {
    cuda: CudaAccess<'a>,
    kernel_dir: PathBuf,
    kernel: OnceCell<Option<Vec<Gpu>>>,
    nvml: OnceCell<Result<Vec<Gpu>, nvml::NvmlError>>,
    cuda_listing: OnceCell<Result<Vec<Gpu>, String>>,
}

impl<'a> Inventory<'a> {
    /// An inventory that falls back on a driver already loaded.
    pub fn with_driver(driver: &'a Driver) -> Inventory<'a> {
        Inventory::new(CudaAccess::Loaded(driver))
    }

    /// An inventory that loads libcuda itself if it must (`devices`,
    /// `doctor`).
    pub fn loading(libcuda: Option<&'a Path>) -> Inventory<'a> {
        Inventory::new(CudaAccess::Load(libcuda))
    }

    fn new(cuda: CudaAccess<'a>) -> Inventory<'a> {
        Inventory::reading(kernel_gpus_dir(), cuda)
    }

    /// An inventory whose kernel listing is `kernel_dir`'s, with no NVML
    /// whatever the host has, loading the CUDA driver from `libcuda` if it
    /// must (tests of the views).
    #[cfg(test)]
    pub fn over(kernel_dir: &Path, libcuda: Option<&'a Path>) -> Inventory<'a> {
        let inventory = Inventory::reading(kernel_dir.to_path_buf(), CudaAccess::Load(libcuda));
        let _ = inventory.nvml.set(Err(nvml::NvmlError::Query(
            "NVML is not asked in tests".to_string(),
        )));
        inventory
    }

    fn reading(kernel_dir: PathBuf, cuda: CudaAccess<'a>) -> Inventory<'a> {
        Inventory {
            cuda,
            kernel_dir,
            kernel: OnceCell::new(),
            nvml: OnceCell::new(),
            cuda_listing: OnceCell::new(),
        }
    }

    fn kernel(&self) -> Option<Listing<'_>> {
        self.kernel
            .get_or_init(|| from_kernel_dir(&self.kernel_dir))
            .as_deref()
            .map(|gpus| Listing {
                gpus,
                source: Source::KernelDriver,
            })
    }

    fn nvml(&self) -> Result<Listing<'_>, &nvml::NvmlError> {
        self.nvml
            .get_or_init(|| nvml::open().and_then(nvml::gpus))
            .as_deref()
            .map(|gpus| Listing {
                gpus,
                source: Source::Nvml,
            })
    }

    /// Costs a `cuInit`: only views that may, call it.
    fn cuda(&self) -> Result<Listing<'_>, &str> {
        self.cuda_listing
            .get_or_init(|| {
                let devices = match self.cuda {
                    CudaAccess::Loaded(driver) => driver.devices(),
                    CudaAccess::Load(libcuda) => match Driver::load(libcuda) {
                        Ok(driver) => driver.devices(),
                        Err(error) => return Err(error.to_string()),
                    },
                };
                devices
                    .map(|devices| devices.iter().map(Gpu::from).collect())
                    .map_err(|e| e.to_string())
            })
            .as_deref()
            .map(|gpus| Listing {
                gpus,
                source: Source::CudaDriver,
            })
            .map_err(String::as_str)
    }

    /// Every fact about every GPU (`devices`, `doctor`, `demo`): NVML, else
    /// the CUDA driver.
    pub fn described(&self) -> Result<Listing<'_>, Unlisted> {
        let nvml_problem = match self.nvml() {
            Ok(listing) => return Ok(listing),
            Err(why) => why.to_string(),
        };
        self.cuda().map_err(|why| Unlisted {
            nvml: Some(nvml_problem),
            cuda: Some(why.to_string()),
        })
    }

    /// The set a restore map must cover, for resolving and completing a map
    /// the user gave: the kernel driver's list, else the CUDA driver.
    pub fn for_map(&self) -> Result<Listing<'_>, Unlisted> {
        if let Some(listing) = self.kernel() {
            return Ok(listing);
        }
        self.cuda().map_err(|why| Unlisted {
            nvml: None,
            cuda: Some(why.to_string()),
        })
    }

    /// What a checkpoint record holds of the host, or nothing: NVML, else
    /// the kernel driver. Never the CUDA driver (no `cuInit` on the process
    /// path).
    pub fn without_cuda(&self) -> Option<Listing<'_>> {
        self.nvml().ok().or_else(|| self.kernel())
    }

    /// Models by index for `--map auto`: as in records, and the CUDA driver
    /// when neither NVML nor the kernel driver answers (the map needs it).
    pub fn models(&self) -> Result<Listing<'_>, Unlisted> {
        match self.without_cuda() {
            Some(listing) => Ok(listing),
            None => self.cuda().map_err(|why| Unlisted {
                nvml: self.nvml().err().map(ToString::to_string),
                cuda: Some(why.to_string()),
            }),
        }
    }

    /// Why NVML could not list the GPUs, once something asked it.
    pub fn nvml_problem(&self) -> Option<&nvml::NvmlError> {
        self.nvml.get()?.as_ref().err()
    }

    /// Free memory per GPU, from NVML (nothing else knows it without a
    /// context), or why it is unknown.
    pub fn free_memory(&self) -> Result<BTreeMap<GpuUuid, u64>, String> {
        let listing = self.nvml().map_err(ToString::to_string)?;
        Ok(listing
            .gpus
            .iter()
            .filter_map(|g| Some((g.uuid, g.memory_free_bytes?)))
            .collect())
    }
}

/// A kernel driver `information` file is a few hundred bytes.
const INFORMATION_CAP: u64 = 64 * 1024;

/// Reads every `<bus id>/information` file under `dir`, ordered by bus id.
/// `None` when the directory is missing or holds no readable GPU.
fn from_kernel_dir(dir: &Path) -> Option<Vec<Gpu>> {
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
pub fn write_kernel_listing(dir: &Path, gpus: &[(&str, GpuUuid, &str)]) {
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
        let gpus = from_kernel_dir(dir.path()).expect("two GPUs");
        let names: Vec<String> = gpus.iter().map(|g| g.uuid.to_string()).collect();
        assert_eq!(
            names,
            [
                "GPU-84173e3f-5c5c-be88-8f69-664fb749ac61",
                "GPU-84173e3f-5c5c-be88-8f69-664fb749ac62"
            ]
        );
        assert_eq!(gpus[1].index, 1);
        assert_eq!(from_kernel_dir(&dir.path().join("missing")), None);
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
        assert_eq!(from_kernel_dir(dir.path()), None);
    }
}
