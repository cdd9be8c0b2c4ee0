//! `devices`: every GPU of this host with what a checkpoint or a move needs
//! to know (UUID, memory free, MIG and persistence mode), without creating
//! a CUDA context. NVML answers when it is installed; otherwise the CUDA
//! driver's context-free queries do, and the report says what is unknown.

use std::path::Path;

use serde::Serialize;

use crate::driver::{DeviceInfo, Driver};
use crate::exit::ExitStatus;
use crate::output::{columns, json, Look};

/// One GPU as the report shows it; `None` fields could not be known.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GpuRow {
    pub index: usize,
    pub uuid: String,
    pub name: String,
    pub pci_bus_id: Option<String>,
    pub memory_total_bytes: Option<u64>,
    pub memory_free_bytes: Option<u64>,
    pub mig_enabled: Option<bool>,
    pub persistence_mode: Option<bool>,
}

/// What the CUDA driver alone can tell of a GPU (no free memory, no modes).
impl From<&DeviceInfo> for GpuRow {
    fn from(device: &DeviceInfo) -> GpuRow {
        GpuRow {
            index: usize::try_from(device.ordinal).unwrap_or_default(),
            uuid: device.uuid.to_string(),
            name: device.name.clone(),
            pci_bus_id: device.pci_bus_id.clone(),
            memory_total_bytes: Some(device.total_bytes),
            memory_free_bytes: None,
            mig_enabled: None,
            persistence_mode: None,
        }
    }
}

/// Where the figures came from.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Nvml,
    CudaDriver,
}

#[derive(Debug, Clone)]
pub struct DevicesReport {
    pub gpus: Vec<GpuRow>,
    pub source: Option<Source>,
    pub warnings: Vec<String>,
    /// Why no GPU could be listed at all.
    pub error: Option<String>,
}

impl DevicesReport {
    pub fn exit_status(&self) -> ExitStatus {
        match &self.error {
            None => ExitStatus::Success,
            Some(_) => ExitStatus::DriverUnavailable,
        }
    }
}

/// Lists the GPUs: NVML first, else the CUDA driver (which costs a cuInit).
pub fn list(libcuda: Option<&Path>) -> DevicesReport {
    let nvml_problem = match crate::gpu::nvml::open().and_then(crate::gpu::nvml::gpus) {
        Ok(gpus) => {
            return DevicesReport {
                gpus: gpus
                    .into_iter()
                    .enumerate()
                    .map(|(index, gpu)| GpuRow {
                        index,
                        uuid: gpu.uuid,
                        name: gpu.name,
                        pci_bus_id: gpu.pci_bus_id,
                        memory_total_bytes: gpu.memory_total_bytes,
                        memory_free_bytes: gpu.memory_free_bytes,
                        mig_enabled: gpu.mig_enabled,
                        persistence_mode: gpu.persistence_mode,
                    })
                    .collect(),
                source: Some(Source::Nvml),
                warnings: Vec::new(),
                error: None,
            }
        }
        Err(why) => why,
    };
    let listed = Driver::load(libcuda)
        .map_err(|e| e.to_string())
        .and_then(|driver| driver.devices().map_err(|e| e.to_string()));
    match listed {
        Ok(devices) => DevicesReport {
            gpus: devices.iter().map(GpuRow::from).collect(),
            source: Some(Source::CudaDriver),
            warnings: vec![format!(
                "{nvml_problem}; free memory, MIG and persistence mode are unknown, and indexes follow CUDA's order"
            )],
            error: None,
        },
        Err(why) => DevicesReport {
            gpus: Vec::new(),
            source: None,
            warnings: Vec::new(),
            error: Some(format!("no GPU could be listed: {nvml_problem}; and the CUDA driver: {why}")),
        },
    }
}

fn gib(bytes: Option<u64>) -> String {
    bytes.map_or("?".to_string(), |b| {
        format!("{:.1}", b as f64 / (1u64 << 30) as f64)
    })
}

fn flag(value: Option<bool>, on: &str, off: &str) -> String {
    match value {
        Some(true) => on.to_string(),
        Some(false) => off.to_string(),
        None => "-".to_string(),
    }
}

pub fn render_human(report: &DevicesReport, look: Look) -> (String, String) {
    let mut rows = vec![[
        "INDEX",
        "UUID",
        "NAME",
        "BUS-ID",
        "FREE/TOTAL GiB",
        "MIG",
        "PERSISTENCE",
    ]
    .map(|h| look.dim(h))
    .to_vec()];
    for gpu in &report.gpus {
        rows.push(vec![
            gpu.index.to_string(),
            gpu.uuid.clone(),
            gpu.name.clone(),
            gpu.pci_bus_id.clone().unwrap_or_else(|| "-".to_string()),
            format!(
                "{}/{}",
                gib(gpu.memory_free_bytes),
                gib(gpu.memory_total_bytes)
            ),
            flag(gpu.mig_enabled, "on", "off"),
            flag(gpu.persistence_mode, "on", "off"),
        ]);
    }
    let mut err = String::new();
    for warning in &report.warnings {
        err.push_str(&format!("cudackpt: warning: {warning}\n"));
    }
    if let Some(error) = &report.error {
        err.push_str(&format!(
            "cudackpt: {error}\n  hint: install the NVIDIA driver (and NVML), or point --libcuda at libcuda; `cudackpt doctor` says more\n"
        ));
    }
    let table = if report.gpus.is_empty() {
        String::new()
    } else {
        columns(&rows)
    };
    (table, err)
}

#[derive(Serialize)]
struct DevicesDoc<'a> {
    schema_version: u32,
    command: &'static str,
    ok: bool,
    exit_code: u8,
    source: Option<Source>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    gpus: &'a [GpuRow],
}

pub fn render_json(report: &DevicesReport) -> String {
    json::to_line(&DevicesDoc {
        schema_version: json::SCHEMA_VERSION,
        command: "devices",
        ok: report.error.is_none(),
        exit_code: report.exit_status().code(),
        source: report.source,
        warnings: &report.warnings,
        error: report.error.as_deref(),
        gpus: &report.gpus,
    })
}

impl crate::output::Rendered for DevicesReport {
    fn json(&self) -> String {
        render_json(self)
    }

    fn human(&self, look: Look) -> (String, String) {
        render_human(self, look)
    }

    fn exit_status(&self) -> ExitStatus {
        DevicesReport::exit_status(self)
    }
}
