//! `preflight`: what the pre-flights of a checkpoint (docs/guide/safety.md, "Before a checkpoint":
//! restorability from /proc, host memory from NVML, /proc/meminfo and the
//! cgroup chain) add to a suspend. `--force` skips them, so each pair below
//! differs by the pre-flights alone:
//!
//! - `suspend --dry-run` against `suspend --dry-run --force`: every check
//!   and one state query, nothing changed; the difference is the pre-flights
//!   in isolation (NVML's start-up included).
//! - `suspend` + `resume` against `suspend --force` + `resume`: the real
//!   thing, where the driver's copy dominates.
//!
//! `state` is timed beside them as the floor of one cudackpt invocation.
//! Interleaved rounds (as in `latency`), medians; the target's data is
//! checked at the end, and a failed check reports no figure.

use std::io::Write;
use std::path::Path;

use crate::latency::{measure_interleaved, Case};
use crate::spawn::start_target;

pub fn preflight(
    cudackpt: &Path,
    target: &Path,
    size_mib: u64,
    runs: usize,
    json: Option<&Path>,
) -> Result<(), String> {
    let mut running = start_target(target, size_mib, 1)?;
    let p = running.pid.to_string();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    let case = |commands| Case {
        tool: "cudackpt",
        program: cudackpt,
        commands,
    };
    let quick = [
        case(vec![("state", s(&["state", &p]))]),
        case(vec![(
            "suspend --dry-run",
            s(&["suspend", "--dry-run", &p]),
        )]),
        case(vec![(
            "suspend --dry-run --force",
            s(&["suspend", "--dry-run", "--force", &p]),
        )]),
    ];
    let mut figures = measure_interleaved(&quick, "running", runs);
    let cycles = [
        case(vec![
            ("suspend", s(&["suspend", &p])),
            ("resume after suspend", s(&["resume", &p])),
        ]),
        case(vec![
            ("suspend --force", s(&["suspend", "--force", &p])),
            ("resume after suspend --force", s(&["resume", &p])),
        ]),
    ];
    figures.extend(measure_interleaved(&cycles, "running", runs.div_ceil(3)));
    running.verify()?;
    if let Some(failed) = figures.iter().find(|f| !f.all_succeeded) {
        return Err(format!("`{}` failed in some round", failed.operation));
    }
    // The pre-flights' cost grows with the host's GPUs (NVML opens each):
    // the table says how many this host has.
    let gpus = host_gpus(cudackpt);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "| command ({size_mib} MiB target, {} GPU(s) on the host) | median ms | min ms | p90 ms | runs |",
        gpus.map_or("?".to_string(), |n| n.to_string())
    );
    let _ = writeln!(out, "|---|---|---|---|---|");
    for f in &figures {
        let _ = writeln!(
            out,
            "| {} | {:.2} | {:.2} | {:.2} | {} |",
            f.operation, f.median_ms, f.min_ms, f.p90_ms, f.runs
        );
    }
    let median = |op: &str| {
        figures
            .iter()
            .find(|f| f.operation == op)
            .map(|f| f.median_ms)
    };
    if let (Some(with), Some(without)) = (
        median("suspend --dry-run"),
        median("suspend --dry-run --force"),
    ) {
        let _ = writeln!(
            out,
            "\nThe pre-flights alone: {:.2} ms (median difference of the dry runs).",
            with - without
        );
    }
    if let Some(path) = json {
        let doc = serde_json::json!({ "host_gpus": gpus, "figures": figures });
        let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// How many GPUs `cudackpt devices` lists on this host, if it can say.
fn host_gpus(cudackpt: &Path) -> Option<usize> {
    let out = std::process::Command::new(cudackpt)
        .args(["--json", "devices"])
        .output()
        .ok()?;
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    doc["gpus"].as_array().map(Vec::len)
}
