//! One GPU of this host, as every source (NVML, the kernel driver, the CUDA
//! driver) describes it: what the inventory lists and NVML reads.

use crate::driver::GpuUuid;

/// One GPU of this host; `None` fields could not be known from its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// nvidia-smi's index (PCI order), or CUDA's ordinal from the CUDA driver.
    pub index: usize,
    pub uuid: GpuUuid,
    pub name: String,
    pub pci_bus_id: Option<String>,
    pub memory_total_bytes: Option<u64>,
    pub memory_free_bytes: Option<u64>,
    /// `None` also when the GPU does not support MIG.
    pub mig_enabled: Option<bool>,
    pub persistence_mode: Option<bool>,
}

impl Gpu {
    /// A GPU known by index, UUID and name alone; every other fact unknown.
    pub fn known(index: usize, uuid: GpuUuid, name: String) -> Gpu {
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
