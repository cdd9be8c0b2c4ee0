//! `nvml`: where the NVML part of the pre-flights goes, step by step, on
//! this host. Each sample is a fresh process (`nvml-sample`, hidden), as a
//! cudackpt invocation is, so the library's load and NVML's start-up are
//! paid every time. Two ways to start NVML are compared:
//!
//! - `default`: `nvmlInit_v2`, which attaches every GPU of the host;
//! - `no_attach`: `nvmlInitWithFlags(NVML_INIT_FLAG_NO_ATTACH)`, which
//!   attaches a GPU only when a handle to it is asked for.
//!
//! Each then asks what cudackpt's pre-flight asks: the GPU count, and per
//! GPU its handle, its UUID and its compute processes. The table gives each
//! step's median over the samples, per GPU where the step is per GPU.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use nvml_wrapper::bitmasks::InitFlags;
use nvml_wrapper::Nvml;
use serde::{Deserialize, Serialize};

/// One sample: each step's milliseconds, in the order taken.
#[derive(Serialize, Deserialize)]
struct Sample {
    variant: String,
    steps: Vec<(String, f64)>,
    error: Option<String>,
}

/// The ways NVML is started and walked, by name.
const VARIANTS: [&str; 3] = ["default", "parallel", "by_bus"];

/// Takes one sample in this process and prints it as JSON (the hidden
/// `nvml-sample` subcommand).
pub fn sample(variant: &str) -> Result<(), String> {
    let mut steps = Vec::new();
    let error = take(variant, &mut steps).err();
    let sample = Sample {
        variant: variant.to_string(),
        steps,
        error,
    };
    println!(
        "{}",
        serde_json::to_string(&sample).map_err(|e| e.to_string())?
    );
    Ok(())
}

fn take(variant: &str, steps: &mut Vec<(String, f64)>) -> Result<(), String> {
    let mut clock = Instant::now();
    let mut lap = |name: String, steps: &mut Vec<(String, f64)>| {
        let now = Instant::now();
        steps.push((name, (now - clock).as_secs_f64() * 1e3));
        clock = now;
    };
    let flags = match variant {
        "default" | "parallel" | "by_bus" => InitFlags::empty(),
        "no_attach" | "by_bus_no_attach" => InitFlags::NO_ATTACH,
        other => return Err(format!("no variant {other:?}")),
    };
    let nvml = Nvml::builder()
        .lib_path(OsStr::new("libnvidia-ml.so.1"))
        .flags(flags)
        .init()
        .map_err(|e| e.to_string())?;
    lap("load and init".into(), steps);
    if variant.starts_with("by_bus") {
        // The first GPU the driver lists, by its PCI bus id, alone.
        let bus = first_bus_id().ok_or("no GPU under /proc/driver/nvidia/gpus")?;
        lap("list /proc/driver/nvidia/gpus".into(), steps);
        let device = nvml
            .device_by_pci_bus_id(bus.as_str())
            .map_err(|e| e.to_string())?;
        lap("first GPU by bus id: handle".into(), steps);
        device
            .running_compute_processes()
            .map_err(|e| e.to_string())?;
        lap("first GPU by bus id: compute processes".into(), steps);
        return Ok(());
    }
    let count = nvml.device_count().map_err(|e| e.to_string())?;
    lap("device count".into(), steps);
    if variant == "parallel" {
        std::thread::scope(|scope| {
            let walks: Vec<_> = (0..count)
                .map(|index| {
                    let nvml = &nvml;
                    scope.spawn(move || {
                        let device = nvml.device_by_index(index)?;
                        device.uuid()?;
                        device.running_compute_processes().map(drop)
                    })
                })
                .collect();
            walks
                .into_iter()
                .map(|walk| walk.join().expect("a walk panicked"))
                .collect::<Result<Vec<()>, _>>()
        })
        .map_err(|e| e.to_string())?;
        lap("every GPU at once: handle, uuid, processes".into(), steps);
        return Ok(());
    }
    for index in 0..count {
        let device = nvml.device_by_index(index).map_err(|e| e.to_string())?;
        lap(format!("GPU {index}: handle"), steps);
        device.uuid().map_err(|e| e.to_string())?;
        lap(format!("GPU {index}: uuid"), steps);
        device
            .running_compute_processes()
            .map_err(|e| e.to_string())?;
        lap(format!("GPU {index}: compute processes"), steps);
    }
    drop(nvml);
    lap("shutdown".into(), steps);
    Ok(())
}

/// The first GPU's PCI bus id as the driver lists it.
fn first_bus_id() -> Option<String> {
    let mut ids: Vec<String> = std::fs::read_dir("/proc/driver/nvidia/gpus")
        .ok()?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .collect();
    ids.sort();
    ids.into_iter().next()
}

#[derive(Serialize)]
struct StepFigure {
    variant: String,
    step: String,
    median_ms: f64,
    min_ms: f64,
    samples: usize,
}

/// Runs `runs` samples of each variant, interleaved, each in a fresh
/// process, and prints the medians of each step.
pub fn nvml(runs: usize, json: Option<&Path>) -> Result<(), String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut by_step: BTreeMap<(String, usize, String), Vec<f64>> = BTreeMap::new();
    let mut totals: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for round in 0..runs + 2 {
        for offset in 0..VARIANTS.len() {
            let variant = VARIANTS[(round + offset) % VARIANTS.len()];
            let started = Instant::now();
            let out = std::process::Command::new(&me)
                .args(["nvml-sample", variant])
                .output()
                .map_err(|e| format!("cannot run {}: {e}", me.display()))?;
            let whole = started.elapsed().as_secs_f64() * 1e3;
            let sample: Sample = serde_json::from_slice(&out.stdout)
                .map_err(|e| format!("a {variant} sample said nothing readable: {e}"))?;
            if let Some(error) = sample.error {
                return Err(format!("NVML ({variant}): {error}"));
            }
            if round < 2 {
                continue; // warm-up
            }
            totals.entry(variant.to_string()).or_default().push(whole);
            for (order, (step, ms)) in sample.steps.into_iter().enumerate() {
                by_step
                    .entry((variant.to_string(), order, step))
                    .or_default()
                    .push(ms);
            }
        }
    }
    let mut figures: Vec<StepFigure> = by_step
        .into_iter()
        .map(|((variant, _, step), ms)| figure(variant, step, ms))
        .collect();
    figures.extend(
        totals
            .into_iter()
            .map(|(variant, ms)| figure(variant, "whole process".into(), ms)),
    );
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "| NVML started | step | median ms | min ms | samples |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|");
    for f in &figures {
        let _ = writeln!(
            out,
            "| {} | {} | {:.3} | {:.3} | {} |",
            f.variant, f.step, f.median_ms, f.min_ms, f.samples
        );
    }
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&figures).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn figure(variant: String, step: String, mut ms: Vec<f64>) -> StepFigure {
    ms.sort_by(f64::total_cmp);
    let round = |v: f64| (v * 1e3).round() / 1e3;
    StepFigure {
        variant,
        step,
        median_ms: round(ms[ms.len() / 2]),
        min_ms: round(ms[0]),
        samples: ms.len(),
    }
}
