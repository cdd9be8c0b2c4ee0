//! `cudackpt dump --to DIR PID`: a process tree to disk through CRIU, with
//! cudackpt as CRIU's action script, in one command. Before anything
//! changes: the tree is there, CRIU is usable, the pre-dump's pre-flights
//! pass (a dry run of it: what the driver could not restore, what CRIU could
//! not dump), CRIU's options are chosen from what the tree holds, and the
//! images fit on their filesystem. Then CRIU runs; the manifest is written
//! beside its images. A dump that fails leaves the tree running: the action
//! script's watcher resumes what its pre-dump suspended (README, "The
//! action script"), and the report says so with CRIU's own errors.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use crate::api::group::Group;
use crate::gpu::inventory::Inventory;
use crate::gpu::nvml;
use crate::ops::vocabulary::plan::Operation;
use crate::ops::vocabulary::report::CommandReport;
use crate::ops::vocabulary::timeout::Timeout;
use crate::targets::identity::Identity;
use crate::targets::{discover, process};

use super::manifest::{
    self, DumpTimings, Manifest, ManifestCriu, ManifestGpu, ManifestGpuUse, ManifestProcess,
};
use super::report::DiskReport;
use super::{criu_run, criu_tool, host_driver, images, tree_facts};

/// What a dump is asked to do.
pub struct DumpSettings<'a> {
    pub root: i32,
    pub to: &'a Path,
    pub criu: Option<&'a Path>,
    pub drain: bool,
    pub leave_running: bool,
    /// Go on past the pre-flights (CUDACKPT_FORCE for the action script).
    pub force: bool,
    pub libcuda: Option<&'a Path>,
}

/// How long a plain dump waits for the dumped tree to be gone (its PIDs
/// free for an undump on this host).
const GONE_WAIT: Duration = Duration::from_secs(10);

/// Dumps the tree, telling `written` the images' bytes against the
/// expected size while CRIU writes.
pub fn run(request: &DumpSettings<'_>, written: &dyn Fn(u64, u64, Duration)) -> DiskReport {
    let started = Instant::now();
    let report = DiskReport::new("dump", request.to.to_path_buf());
    let mut report = dump(request, report, started, written);
    report.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    report
}

fn dump(
    request: &DumpSettings<'_>,
    report: DiskReport,
    started: Instant,
    written: &dyn Fn(u64, u64, Duration),
) -> DiskReport {
    let root = Identity::of(request.root);
    if request.root == 1 {
        return report.failed(
            "usage",
            "the tree of PID 1 is the whole host",
            "dump a tree of its own (the job's launcher)",
            false,
        );
    }
    if root.starttime.is_none() {
        return report.failed(
            "no_such_process",
            format!("no process {}", request.root),
            "check the PID (cudackpt ps lists CUDA processes)",
            false,
        );
    }
    let criu = match criu_tool::find_on_path(request.criu) {
        Ok(criu) => criu,
        Err(why) => return report.failed("criu_unusable", why.to_string(), why.hint(), false),
    };
    // The directory, before any driver is asked: refused as it is, created
    // only once every pre-flight passed.
    if let Err(why) = images::check_unused(request.to) {
        let hint = why.hint();
        return report.failed("images_dir", why.to_string(), hint, false);
    }
    let predicted = predump_dry_run(request);
    if let Some((message, hint)) = refusal_of(&predicted) {
        return report.failed("refused", message, hint, false);
    }
    let mut report = report;
    report.remarks.extend(predicted.warnings.iter().cloned());
    let cuda: Vec<i32> = predicted.processes.iter().map(|p| p.pid).collect();
    let tree = discover::trees(&[request.root]);
    let options = tree_facts::choose(&tree_facts::gather(&tree));
    let usage = nvml::usage_of(&cuda).ok();
    let host_bytes: u64 = tree
        .iter()
        .filter_map(|&pid| images::host_footprint(pid))
        .sum();
    let gpu_bytes: u64 = usage.as_ref().map_or(0, |u| {
        cuda.iter()
            .map(|pid| nvml::totals(u).get(pid).copied().unwrap_or(0))
            .sum()
    });
    let expected = host_bytes + gpu_bytes;
    let dir = match images::prepare(request.to) {
        Ok(dir) => dir,
        Err(why) => {
            let hint = why.hint();
            return report.failed("images_dir", why.to_string(), hint, false);
        }
    };
    if let Some(free) = images::free_bytes(request.to) {
        if !images::fits(expected, free) && !request.force {
            let _ = std::fs::remove_dir(request.to);
            return report.failed(
                "no_room",
                format!(
                    "the images need about {} MiB ({} MiB of host memory, {} MiB of GPU memory{}), and {} has {} MiB free",
                    expected >> 20,
                    host_bytes >> 20,
                    gpu_bytes >> 20,
                    if request.drain { ", before the drain shrinks it" } else { "" },
                    request.to.display(),
                    free >> 20
                ),
                "free space there, or dump to another filesystem with --to; --force dumps anyway",
                false,
            );
        }
    }
    // Read now: after a plain dump the processes are gone.
    let members = processes(&tree, usage.as_ref());
    let preflights = started.elapsed();
    for option in &options {
        report
            .remarks
            .push(format!("CRIU {}: {}", option.option, option.why));
    }
    let call = criu_run::CriuCall {
        criu: &criu.path,
        args: dump_args(request, &options),
        env: action_script_env(request),
        images: request.to,
        log_name: "dump.log",
    };
    let ran = match criu_run::run(&call, &|bytes, elapsed| written(bytes, expected, elapsed)) {
        Ok(ran) => ran,
        Err(why) => return report.criu_not_started(&criu.path, &why),
    };
    report.criu_log = Some(ran.log.clone());
    if !dir.is_still_at_its_path() {
        report.remarks.push(format!(
            "{} was replaced while CRIU wrote into it",
            request.to.display()
        ));
    }
    if !ran.ok {
        report.criu_errors = criu_run::log_errors(&ran.log, 12);
        return report.failed(
            "criu_failed",
            format!("CRIU's dump {} after {:.1} s", ran.exit, ran.elapsed.as_secs_f64()),
            format!("the tree goes on running (cudackpt's action script resumes what it suspended); CRIU's errors are below and in {}", ran.log.display()),
            true,
        );
    }
    if !request.leave_running && !gone(root, GONE_WAIT) {
        report.remarks.push(format!(
            "PID {} is still taken (its parent has not reaped it): an undump on this host needs its PIDs free",
            request.root
        ));
    }
    let manifest = Manifest {
        schema_version: manifest::SCHEMA_VERSION,
        created_unix_s: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        cudackpt_version: env!("CARGO_PKG_VERSION").to_string(),
        criu: ManifestCriu {
            path: criu.path.display().to_string(),
            version: criu.version.clone(),
        },
        driver: host_driver::facts(request.libcuda),
        root_pid: request.root,
        processes: members,
        gpus: gpus_held(request.libcuda, usage.as_ref(), &cuda),
        drained: request.drain,
        leave_running: request.leave_running,
        criu_options: options,
        image_bytes: images::size_of(request.to),
        timings: DumpTimings {
            preflights_ms: ms(preflights),
            criu_ms: ms(ran.elapsed),
            total_ms: ms(started.elapsed()),
        },
    };
    if let Err(why) = write_manifest(&dir, &manifest) {
        report.remarks.push(format!("the manifest could not be written ({why}): an undump of these images cannot check the host or choose GPUs"));
    }
    report.manifest = Some(manifest);
    report
}

fn ms(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1e6).round() / 1e3
}

/// The pre-dump's suspend as a dry run: every check, the dumpable one
/// refusing as the action script's would, nothing changed.
fn predump_dry_run(request: &DumpSettings<'_>) -> CommandReport {
    let mut group = Group::new()
        .libcuda_option(request.libcuda)
        .tree(request.root)
        .options(request.force, false, true)
        .criu_dump(Identity::of(std::process::id() as i32));
    if request.drain {
        group = group.drain(Duration::from_secs(30));
    }
    group.run(Operation::Suspend {
        timeout: Timeout::from_millis(10_000),
    })
}

/// The dry run's refusal, if it refused: its own, or a process's.
fn refusal_of(predicted: &CommandReport) -> Option<(String, String)> {
    let fault = predicted
        .failure
        .as_ref()
        .or_else(|| predicted.processes.iter().find_map(|p| p.failure.as_ref()))?;
    Some((
        format!("refused before any change: {}", fault.message),
        fault
            .hint
            .clone()
            .unwrap_or_else(|| "see `cudackpt check --tree PID`".into()),
    ))
}

/// `criu dump`'s arguments, before `-D` and `-o` (pure).
pub fn dump_args(
    request: &DumpSettings<'_>,
    options: &[tree_facts::ChosenCriuOption],
) -> Vec<String> {
    let mut args = vec![
        "dump".to_string(),
        "-t".to_string(),
        request.root.to_string(),
        "--action-script".to_string(),
        action_script(),
    ];
    if request.leave_running {
        args.push("--leave-running".into());
    }
    args.extend(options.iter().flat_map(tree_facts::ChosenCriuOption::args));
    args
}

/// This cudackpt, as CRIU's action script.
pub fn action_script() -> String {
    std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "/proc/self/exe".to_string())
}

/// What the action script is told: drain, force, which libcuda.
pub fn action_script_env(request: &DumpSettings<'_>) -> Vec<(&'static str, String)> {
    let mut env = Vec::new();
    if request.drain {
        env.push((crate::environment::DRAIN, "1".to_string()));
    }
    if request.force {
        env.push((crate::environment::FORCE, "1".to_string()));
    }
    if let Some(libcuda) = request.libcuda {
        env.push((crate::environment::LIBCUDA, libcuda.display().to_string()));
    }
    env
}

/// Waits up to `limit` for `root` to be gone, zombie and all.
fn gone(root: Identity, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    while root.is_still_there() {
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Every process of the tree with its GPU memory per GPU.
fn processes(tree: &[i32], usage: Option<&nvml::Usage>) -> Vec<ManifestProcess> {
    tree.iter()
        .map(|&pid| ManifestProcess {
            pid,
            name: process::read_status(pid)
                .ok()
                .flatten()
                .map(|s| s.name)
                .unwrap_or_default(),
            gpu_memory: usage
                .and_then(|u| u.get(&pid))
                .map(|uses| {
                    uses.iter()
                        .map(|(uuid, bytes)| ManifestGpuUse {
                            uuid: uuid.to_string(),
                            bytes: *bytes,
                        })
                        .collect()
                })
                .unwrap_or_default(),
            gpu_memory_known: usage.is_some(),
        })
        .collect()
}

/// The GPUs the job's processes held memory on, as the host describes them.
fn gpus_held(
    libcuda: Option<&Path>,
    usage: Option<&nvml::Usage>,
    cuda: &[i32],
) -> Vec<ManifestGpu> {
    let Some(usage) = usage else {
        return Vec::new();
    };
    let mut held: Vec<crate::driver::GpuUuid> = cuda
        .iter()
        .filter_map(|pid| usage.get(pid))
        .flatten()
        .map(|(uuid, _)| *uuid)
        .collect();
    held.sort_by_key(ToString::to_string);
    held.dedup();
    let host = Inventory::loading(libcuda);
    let listing = host.without_cuda();
    held.into_iter()
        .map(|uuid| {
            let gpu = listing
                .as_ref()
                .and_then(|l| l.gpus.iter().find(|g| g.uuid == uuid));
            ManifestGpu {
                uuid: uuid.to_string(),
                name: gpu.map(|g| g.name.clone()),
                pci_bus_id: gpu.and_then(|g| g.pci_bus_id.clone()),
                memory_total_bytes: gpu.and_then(|g| g.memory_total_bytes),
            }
        })
        .collect()
}

/// Writes the manifest into the images directory, created exclusively.
fn write_manifest(dir: &crate::files::SafeDir, manifest: &Manifest) -> std::io::Result<()> {
    let mut text = serde_json::to_string_pretty(manifest).map_err(std::io::Error::other)?;
    text.push('\n');
    dir.write_atomic(manifest::FILE_NAME, text.as_bytes())
        .map(drop)
}
