//! `devices`: every GPU of this host with what a checkpoint or a move needs
//! to know (UUID, memory free, MIG and persistence mode), without creating
//! a CUDA context when NVML is installed; otherwise the CUDA driver's
//! context-free queries answer, and the report says what is unknown.
//! Returns a report; `output` renders it.

use crate::exit::ExitStatus;
use crate::gpu::inventory::{Gpu, Inventory, Source};

#[derive(Debug, Clone)]
pub struct DevicesReport {
    pub gpus: Vec<Gpu>,
    pub source: Option<Source>,
    pub warnings: Vec<String>,
    /// Why no GPU could be listed at all.
    pub error: Option<String>,
}

impl DevicesReport {
    /// What to do when no GPU could be listed.
    pub const HINT: &'static str = "install the NVIDIA driver (and NVML), or point --libcuda at libcuda; `cudackpt doctor` says more";

    pub fn exit_status(&self) -> ExitStatus {
        match &self.error {
            None => ExitStatus::Success,
            Some(_) => ExitStatus::DriverUnavailable,
        }
    }
}

/// Lists the GPUs: NVML first, else the CUDA driver (which costs a cuInit).
pub fn list(host: &Inventory<'_>) -> DevicesReport {
    match host.described() {
        Ok(listing) => DevicesReport {
            gpus: listing.gpus.to_vec(),
            source: Some(listing.source),
            warnings: match listing.source {
                Source::Nvml => Vec::new(),
                _ if host.driver_is_stand_in() => Vec::new(),
                _ => host
                    .nvml_problem()
                    .map(|why| vec![format!(
                        "{why}; free memory, MIG and persistence mode are unknown, and indexes follow CUDA's order"
                    )])
                    .unwrap_or_default(),
            },
            error: None,
        },
        Err(unlisted) => DevicesReport {
            gpus: Vec::new(),
            source: None,
            warnings: Vec::new(),
            error: Some(format!(
                "no GPU could be listed: {}; and the CUDA driver: {}",
                unlisted.nvml.unwrap_or_default(),
                unlisted.cuda.unwrap_or_default()
            )),
        },
    }
}
