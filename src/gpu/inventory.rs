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
use std::path::{Path, PathBuf};

use crate::driver::{DeviceInfo, Driver, GpuUuid};
use crate::gpu::{kernel, nvml};

pub use crate::gpu::device::Gpu;

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
    /// The driver this inventory loaded itself (`CudaAccess::Load`).
    loaded: OnceCell<Result<Driver, String>>,
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
        Inventory::reading(kernel::listing_dir(), cuda)
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
            loaded: OnceCell::new(),
        }
    }

    /// The command's driver, or the one named, loaded once on first need.
    fn driver(&self) -> Result<&Driver, &str> {
        match self.cuda {
            CudaAccess::Loaded(driver) => Ok(driver),
            CudaAccess::Load(libcuda) => self
                .loaded
                .get_or_init(|| Driver::load(libcuda).map_err(|e| e.to_string()))
                .as_ref()
                .map_err(String::as_str),
        }
    }

    /// Whether the CUDA driver of this command is a stand-in
    /// ([`Driver::is_stand_in`]): then NVML's absence is not worth a
    /// warning. Only a driver named by path can be one.
    pub fn driver_is_stand_in(&self) -> bool {
        !matches!(self.cuda, CudaAccess::Load(None)) && self.driver().is_ok_and(Driver::is_stand_in)
    }

    fn kernel(&self) -> Option<Listing<'_>> {
        self.kernel
            .get_or_init(|| kernel::read_listing(&self.kernel_dir))
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
                self.driver()?
                    .devices()
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
