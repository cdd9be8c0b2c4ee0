//! `devices` for people: one aligned row per GPU, warnings and errors on
//! stderr.

use super::look::{columns, Look};
use crate::commands::devices::DevicesReport;

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

pub fn devices(report: &DevicesReport, look: Look) -> (String, String) {
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
            gpu.uuid.to_string(),
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
        err.push_str(&super::stderr::warning_line(warning));
    }
    if let Some(error) = &report.error {
        err.push_str(&super::stderr::error_lines(
            &error.to_string(),
            Some(DevicesReport::HINT),
        ));
    }
    let table = if report.gpus.is_empty() {
        String::new()
    } else {
        columns(&rows)
    };
    (table, err)
}
