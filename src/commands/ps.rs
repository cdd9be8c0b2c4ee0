//! `ps`: every CUDA process on this host (or in the trees and cgroups
//! given) with its state, restore thread, GPU memory and NCCL. Read-only:
//! the pipeline's `state` over discovered processes, plus what NVML says
//! each one holds.

use std::path::Path;

use crate::api::group::Group;
use crate::gpu::nvml;
use crate::ops::doors::records as intent;
use crate::vocabulary::report::{CommandReport, GpuBytes, Layout};
use crate::vocabulary::request::Selectors;

pub fn run(libcuda: Option<&Path>, selectors: Selectors) -> CommandReport {
    let mut report = Group::new()
        .libcuda_option(libcuda)
        .selectors(selectors)
        .run(crate::vocabulary::plan::Operation::State { restore_tid: true });
    report.command = "ps";
    report.layout = Layout::Listing;
    // Processes a cudackpt left mid-change when it died.
    let abandoned = intent::abandoned().unwrap_or_else(|why| {
        report.warnings.push(format!(
            "could not read the intent records ({why}), so a process a dead cudackpt left mid-change is not marked here: {}",
            why.hint()
        ));
        Vec::new()
    });
    if !abandoned.is_empty() {
        for process in &mut report.processes {
            if let Some((path, owner, left_by)) = intent::holding(process.pid, &abandoned) {
                process.abandoned_by = Some(owner);
                process.warnings.push(format!(
                    "{left_by} (intent record {}): run `cudackpt recover`",
                    path.display()
                ));
            }
        }
    }
    // GPU memory per process, when NVML is there to say.
    match nvml::open().and_then(nvml::memory_by_process) {
        Ok(used) => {
            for process in &mut report.processes {
                let held = used.get(&process.pid).copied().unwrap_or(0);
                process.gpu_memory = Some(GpuBytes::Held(held));
            }
        }
        // Not an error: the column shows "-" and JSON omits the field.
        Err(why) => tracing::debug!(%why, "no GPU memory figures"),
    }
    report
}
