//! `cudackpt dump --to DIR PID`: a process tree to disk through CRIU, with
//! cudackpt as CRIU's action script, in one command. Before anything
//! changes: the tree is there, CRIU is usable, the pre-dump's pre-flights
//! pass (a dry run of it: what the driver could not restore, what CRIU could
//! not dump), CRIU's options are chosen from what the tree holds, and the
//! images fit on their filesystem. Then CRIU runs; the manifest is written
//! beside its images. A dump that fails leaves the tree running: the action
//! script's watcher resumes what its pre-dump suspended (docs/guide/criu.md, "The
//! action script"), and the report says so with CRIU's own errors.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::api::group::Group;
use crate::files::SafeDir;
use crate::gpu::inventory::Inventory;
use crate::gpu::nvml;
use crate::targets::identity::Identity;
use crate::targets::{discover, process};
use crate::vocabulary::plan::Operation;
use crate::vocabulary::report::CommandReport;
use crate::vocabulary::timeout::Timeout;

use crate::commands::disk::criu_tool::find as criu_tool;
use crate::commands::disk::criu_tool::run as criu_run;
use crate::commands::disk::dump_checks::tree_facts;
use crate::commands::disk::host_driver;
use crate::commands::disk::images;
use crate::commands::disk::manifest::{
    self, DumpTimings, Manifest, ManifestCriu, ManifestGpu, ManifestGpuUse, ManifestProcess,
};
use crate::commands::disk::report::{DiskFailure, DiskReport};
use crate::commands::disk::tree_state;

/// What a dump is asked to do.
pub struct DumpSettings<'a> {
    pub target: DumpTarget,
    pub to: PathBuf,
    pub criu: Option<PathBuf>,
    pub drain: bool,
    pub leave_running: bool,
    /// Go on past the pre-flights (CUDACKPT_FORCE for the action script).
    pub force: bool,
    pub libcuda: Option<&'a Path>,
}

/// What to dump: a process tree, or the one tree a cgroup holds (a
/// container's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DumpTarget {
    Tree(i32),
    Cgroup(PathBuf),
}

/// The root of the one process tree `pids` (a cgroup's) holds, or the
/// roots when there are several (pure): a root's parent is not among them.
pub fn tree_root(pids: &[i32], parent_of: impl Fn(i32) -> Option<i32>) -> Result<i32, Vec<i32>> {
    let roots: Vec<i32> = pids
        .iter()
        .copied()
        .filter(|&pid| parent_of(pid).is_none_or(|parent| !pids.contains(&parent)))
        .collect();
    match roots.as_slice() {
        [root] => Ok(*root),
        _ => Err(roots),
    }
}

/// The root a dump of `target` starts from, or why there is none (message,
/// hint).
fn root_of(target: &DumpTarget) -> Result<i32, (String, String)> {
    let path = match target {
        DumpTarget::Tree(pid) => return Ok(*pid),
        DumpTarget::Cgroup(path) => path,
    };
    let cgroup = crate::targets::cgroup::Cgroup::resolve(path).map_err(|why| {
        (
            why.to_string(),
            "name a cgroup directory (cudackpt ps --cgroup PATH lists it)".to_string(),
        )
    })?;
    if cgroup.is_root() {
        return Err((
            format!(
                "{} is the root cgroup: the whole host",
                cgroup.path.display()
            ),
            "name the job's own cgroup (a container's)".into(),
        ));
    }
    let pids = cgroup.pids().map_err(|why| {
        (
            format!("cannot read {}: {why}", cgroup.path.display()),
            String::new(),
        )
    })?;
    let parent_of = |pid: i32| {
        crate::targets::process::read_proc_text(&format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| discover::parse_ppid(&stat))
    };
    tree_root(&pids, parent_of).map_err(|roots| {
        let said = if roots.is_empty() {
            "holds no process".to_string()
        } else {
            format!(
                "holds {} trees, rooted at {}",
                roots.len(),
                crate::vocabulary::prose::pids(&roots)
            )
        };
        (
            format!("cgroup {} {said}: CRIU dumps one tree", cgroup.path.display()),
            "dump each tree by its root PID, or the container through its runtime (runc checkpoint)".into(),
        )
    })
}

/// How long a plain dump waits for the dumped tree to be gone (its PIDs
/// free for an undump on this host).
const GONE_WAIT: Duration = Duration::from_secs(10);

/// Dumps the tree, telling `written` the images' bytes against the
/// expected size while CRIU writes.
pub fn run(request: &DumpSettings<'_>, written: &dyn Fn(u64, u64, Duration)) -> DiskReport {
    let started = Instant::now();
    let report = DiskReport::new("dump", request.to.clone());
    let mut report = dump(request, report, started, written);
    let dir = crate::targets::name::printable_path(&request.to);
    if report.signal.is_none() {
        report.signal = criu_run::late_signal();
    }
    report.note_signal(
        if request.leave_running {
            "the dump completed, and the tree goes on running"
        } else {
            "the dump completed"
        },
        &format!("the tree is on disk: `cudackpt undump {dir}` brings it back"),
        &format!("when CRIU ends, either the tree is on disk (`cudackpt undump {dir}` brings it back: the manifest says the dump was cut short, and CRIU's log whether it finished) or CRIU failed and cudackpt's action script resumed the tree; `cudackpt recover` puts back a tree left suspended"),
    );
    report.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    report
}

fn dump(
    request: &DumpSettings<'_>,
    mut report: DiskReport,
    started: Instant,
    written: &dyn Fn(u64, u64, Duration),
) -> DiskReport {
    let result = checked(request, &mut report.remarks)
        .and_then(|checked| weighed(request, &checked).map(|weighed| (checked, weighed)))
        .and_then(|(checked, (weighed, dir))| {
            written_to_disk(
                request,
                &mut report,
                &checked,
                &weighed,
                &dir,
                started,
                written,
            )
        });
    match result {
        Ok(manifest) => report.manifest = Some(manifest),
        Err(failure) => report.failure = Some(failure),
    }
    report
}

/// The tree as the checks found it, before anything changed.
struct CheckedTree {
    root: Identity,
    criu: criu_tool::Criu,
    tree: Vec<i32>,
    facts: tree_facts::TreeFacts,
    /// The tree's CUDA processes, as the pre-dump's dry run found them.
    cuda: Vec<i32>,
}

/// The checks that change nothing: the tree is there, CRIU is usable, the
/// images directory is unused, CRIU could dump what the tree holds, and the
/// pre-dump's pre-flights pass (its dry run, the only one that asks the
/// driver, last).
fn checked(
    request: &DumpSettings<'_>,
    remarks: &mut Vec<String>,
) -> Result<CheckedTree, DiskFailure> {
    let root_pid = root_of(&request.target)
        .map_err(|(message, hint)| DiskFailure::refused("refused", message, hint))?;
    let root = Identity::of(root_pid);
    if root_pid == 1 {
        return Err(DiskFailure::refused(
            "refused",
            "the tree of PID 1 is the whole host",
            "dump a tree of its own (the job's launcher)",
        ));
    }
    if root.starttime.is_none() {
        return Err(DiskFailure::refused(
            "no_such_process",
            format!("no process {root_pid}"),
            "check the PID (cudackpt ps lists CUDA processes)",
        ));
    }
    let criu = criu_tool::find_on_path(request.criu.as_deref())
        .map_err(|why| DiskFailure::refused("criu_unusable", why.to_string(), why.hint()))?;
    // The directory, before any driver is asked: refused as it is, created
    // only once every pre-flight passed.
    images::check_unused(&request.to)
        .map_err(|why| DiskFailure::refused("images_dir", why.to_string(), why.hint()))?;
    let tree = discover::trees(&[root_pid]);
    let facts = tree_facts::gather(&tree, &criu.path);
    if let Some(undumpable) = tree_facts::refusal(&facts) {
        DiskFailure::unless_forced(
            "refused",
            &undumpable.why,
            undumpable.fix,
            request.force,
            remarks,
        )?;
    }
    let predicted = predump_dry_run(request, root_pid);
    if let Some((message, hint)) = refusal_of(&predicted) {
        return Err(DiskFailure::refused("refused", message, hint));
    }
    remarks.extend(predicted.warnings.iter().cloned());
    Ok(CheckedTree {
        root,
        criu,
        tree,
        facts,
        cuda: predicted.processes.iter().map(|p| p.pid).collect(),
    })
}

/// What the images will take, against the room there.
struct WeighedImages {
    usage: Option<nvml::Usage>,
    expected: u64,
}

/// Weighs the images (the tree's host memory, its GPU memory) against the
/// room on their filesystem, and makes the directory once they fit.
fn weighed(
    request: &DumpSettings<'_>,
    checked: &CheckedTree,
) -> Result<(WeighedImages, SafeDir), DiskFailure> {
    let usage = nvml::usage_of(&checked.cuda).ok();
    let host_bytes: u64 = checked
        .tree
        .iter()
        .filter_map(|&pid| images::host_footprint(pid))
        .sum();
    let gpu_bytes: u64 = usage.as_ref().map_or(0, |u| {
        let totals = nvml::totals(u);
        checked
            .cuda
            .iter()
            .map(|pid| totals.get(pid).copied().unwrap_or(0))
            .sum()
    });
    // CRIU copies the deleted files into the images too.
    let ghost_bytes = checked.facts.ghosts.total();
    let expected = host_bytes + gpu_bytes + ghost_bytes;
    let prepared = images::prepare(&request.to)
        .map_err(|why| DiskFailure::refused("images_dir", why.to_string(), why.hint()))?;
    if let Some(free) = prepared.dir.free_bytes() {
        if !images::fits(expected, free) && !request.force {
            images::remove_made(&prepared);
            return Err(DiskFailure::refused(
                "no_room",
                format!(
                    "the images need about {} MiB ({} MiB of host memory, {} MiB of GPU memory{}{}), and {} has {} MiB free",
                    expected >> 20,
                    host_bytes >> 20,
                    gpu_bytes >> 20,
                    if request.drain { ", before the drain shrinks it" } else { "" },
                    if ghost_bytes > 0 { format!(", {} MiB of deleted files", ghost_bytes >> 20) } else { String::new() },
                    crate::targets::name::printable_path(&request.to),
                    free >> 20
                ),
                "free space there, or dump to another filesystem with --to; --force dumps anyway",
            ));
        }
    }
    Ok((WeighedImages { usage, expected }, prepared.dir))
}

/// Runs CRIU and writes the manifest: what the dump left, or why it failed
/// (the tree then goes on running).
fn written_to_disk(
    request: &DumpSettings<'_>,
    report: &mut DiskReport,
    checked: &CheckedTree,
    weighed: &WeighedImages,
    dir: &SafeDir,
    started: Instant,
    written: &dyn Fn(u64, u64, Duration),
) -> Result<Manifest, DiskFailure> {
    let options = tree_facts::choose(&checked.facts);
    let identities: Vec<Identity> = checked.tree.iter().map(|&pid| Identity::of(pid)).collect();
    report.remarks.extend(
        options
            .iter()
            .map(|o| format!("CRIU {}: {}", o.option, o.why)),
    );
    // Written before CRIU starts, marked incomplete: a cudackpt killed
    // while CRIU writes leaves images an undump can still bring back.
    let mut manifest = before_criu(request, checked, weighed, options, started);
    write_manifest(dir, &manifest).map_err(|why| {
        DiskFailure::refused(
            "images_dir",
            format!("the manifest could not be written before CRIU started: {why}"),
            "name a directory cudackpt can write with --to",
        )
    })?;
    let ran = run_criu(
        request,
        report,
        checked,
        dir,
        weighed.expected,
        &manifest.criu_options,
        written,
    )
    .inspect_err(|failure| {
        // No images to undump: nothing may say there are (unless CRIU
        // still writes them, cudackpt having stopped waiting).
        if failure.kind != "abandoned" {
            let _ = dir.remove(manifest::FILE_NAME);
        }
    })?;
    note_the_tree_after(request, report, checked);
    moved_by_checkpoints(&mut manifest.processes, &identities);
    manifest.drain_released_bytes = request
        .drain
        .then(|| Manifest::released_by_drain(&manifest.processes))
        .flatten();
    manifest.created_unix_s = now_unix_s();
    manifest.image_bytes = images::size_of(dir);
    manifest.timings.criu_ms = ms(ran.elapsed);
    manifest.timings.total_ms = ms(started.elapsed());
    manifest.complete = true;
    if let Err(why) = write_manifest(dir, &manifest) {
        report.remarks.push(format!("the manifest could not be completed ({why}): an undump of these images asks CRIU's log whether the dump finished"));
    }
    Ok(manifest)
}

/// The manifest as it is before CRIU runs: the tree's processes and GPUs
/// (read now: after a plain dump the processes are gone), the host's
/// driver and CRIU, the options chosen; marked incomplete.
fn before_criu(
    request: &DumpSettings<'_>,
    checked: &CheckedTree,
    weighed: &WeighedImages,
    criu_options: Vec<tree_facts::ChosenCriuOption>,
    started: Instant,
) -> Manifest {
    Manifest {
        schema_version: manifest::SCHEMA_VERSION,
        created_unix_s: now_unix_s(),
        cudackpt_version: env!("CARGO_PKG_VERSION").to_string(),
        criu: ManifestCriu {
            path: checked.criu.path.display().to_string(),
            version: checked.criu.version.clone(),
        },
        driver: host_driver::facts(request.libcuda),
        root_pid: checked.root.pid,
        drain_released_bytes: None,
        processes: processes(&checked.tree, weighed.usage.as_ref()),
        gpus: gpus_held(request.libcuda, weighed.usage.as_ref(), &checked.cuda),
        drained: request.drain,
        leave_running: request.leave_running,
        criu_options,
        image_bytes: 0,
        timings: DumpTimings {
            preflights_ms: ms(started.elapsed()),
            criu_ms: 0.0,
            total_ms: 0.0,
        },
        complete: false,
    }
}

/// What the report says of the tree once CRIU is done: a tree left
/// running that is not running again, or a root not yet reaped.
fn note_the_tree_after(request: &DumpSettings<'_>, report: &mut DiskReport, checked: &CheckedTree) {
    if request.leave_running {
        if let Err(stuck) = running_again(request, checked.root.pid) {
            report.remarks.push(format!(
                "{stuck} is not running {:.1} s after the dump (the action script's resume failed: `journalctl -t cudackpt`): `cudackpt recover` puts the tree back",
                resume_wait().as_secs_f64()
            ));
        }
    }
    if !request.leave_running && !gone(checked.root, GONE_WAIT) {
        report.remarks.push(format!(
            "PID {} is still taken (its parent has not reaped it): an undump on this host needs its PIDs free",
            checked.root.pid
        ));
    }
}

fn now_unix_s() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Runs `criu dump` with the options chosen: what it did, or its failure
/// with CRIU's errors in `report`.
fn run_criu(
    request: &DumpSettings<'_>,
    report: &mut DiskReport,
    checked: &CheckedTree,
    dir: &SafeDir,
    expected: u64,
    options: &[tree_facts::ChosenCriuOption],
    written: &dyn Fn(u64, u64, Duration),
) -> Result<criu_run::CriuRun, DiskFailure> {
    let call = criu_run::CriuCall {
        criu: &checked.criu.path,
        args: dump_args(request, checked.root.pid, options),
        env: action_script_env(request),
        images: dir,
        work: dir,
        log_name: LOG_NAME,
    };
    let ran = criu_run::run(&call, &|bytes, elapsed| written(bytes, expected, elapsed))
        .map_err(|why| DiskReport::not_started(&checked.criu.path, &why))?;
    let ran = report.noted(ran)?;
    if !ran.ok {
        // Read once: what to quote, and whether the pre-dump ran.
        let log = criu_run::read_log(dir, LOG_NAME);
        let (quoted, are_errors) = log
            .as_deref()
            .map_or((Vec::new(), false), |log| criu_run::log_errors(log, 12));
        report.criu_errors = quoted;
        return Err(failed_dump(
            request,
            checked,
            log.as_deref(),
            &ran,
            are_errors,
        ));
    }
    Ok(ran)
}

/// CRIU's log of a dump, in the images directory.
pub const LOG_NAME: &str = "dump.log";

/// What a failed CRIU left: nothing changed when it ended before its
/// pre-dump (the action script's suspend) ran, else where the tree is now.
fn failed_dump(
    request: &DumpSettings<'_>,
    checked: &CheckedTree,
    log: Option<&str>,
    ran: &criu_run::CriuRun,
    quoted_errors: bool,
) -> DiskFailure {
    let message = format!(
        "CRIU's dump {} after {:.1} s",
        ran.exit,
        ran.elapsed.as_secs_f64()
    );
    let log_path = ran.log.display();
    let where_said = match quoted_errors {
        true => format!("CRIU's errors are below and in {log_path}"),
        false => format!("CRIU wrote no error line: its last lines are below and in {log_path}"),
    };
    if !log.is_some_and(predump_ran) {
        return DiskFailure {
            kind: "criu_failed",
            message: format!("{message}, before its pre-dump: nothing was changed"),
            hint: format!(
                "the tree was never suspended and runs as it did; {}",
                if log.is_some() {
                    where_said
                } else {
                    "CRIU wrote no log: run it by hand (`criu --version`, `criu check`) to see why it stops".to_string()
                }
            ),
            changed: false,
        };
    }
    let now = match running_again(request, checked.root.pid) {
        Ok(()) => "the tree is running again (cudackpt's action script resumed what it suspended)".to_string(),
        Err(stuck) => format!(
            "{stuck} is not running {:.1} s after CRIU's failure (the action script's resume failed: `journalctl -t cudackpt`): `cudackpt recover` puts the tree back (`--dry-run` says what it would do)",
            resume_wait().as_secs_f64(),
        ),
    };
    DiskFailure {
        kind: "criu_failed",
        message,
        hint: format!("{now}; {where_said}"),
        changed: true,
    }
}

/// Whether CRIU ran its pre-dump action scripts (cudackpt's suspend), by
/// its log (pure): CRIU says so at `-v4` before it runs them, and freezes nothing
/// before.
fn predump_ran(log: &str) -> bool {
    log.contains("Running pre-dump scripts")
}

/// How long the action script's helper is given to resume the tree after
/// CRIU fails or thaws it: it acts the moment CRIU does, and a resume
/// copies the GPU memory back (22 GiB took about 10 s on an H100).
const RESUME_WAIT: Duration = Duration::from_secs(60);

/// Waits until every CUDA process of the tree is running again (after a
/// failed dump the action script's watcher resumes them once CRIU has
/// gone; after `--leave-running` its waiter, once CRIU thaws the tree), so
/// the report says the tree as it is, not as it will be: the first one
/// still not running after [`RESUME_WAIT`], named.
fn running_again(request: &DumpSettings<'_>, root_pid: i32) -> Result<(), String> {
    let until = Instant::now() + resume_wait();
    loop {
        let Some(stuck) = tree_state::first_not_running(request.libcuda, root_pid) else {
            return Ok(());
        };
        if Instant::now() > until {
            return Err(stuck);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`RESUME_WAIT`], or in a debug build what a test set in
/// `CUDACKPT_DEBUG_RESUME_WAIT_MS`.
fn resume_wait() -> Duration {
    crate::environment::debug(crate::environment::DEBUG_RESUME_WAIT_MS)
        .and_then(|ms| ms.to_str()?.parse().ok())
        .map_or(RESUME_WAIT, Duration::from_millis)
}

fn ms(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1e6).round() / 1e3
}

/// The pre-dump's suspend as a dry run: every check, the dumpable one
/// refusing as the action script's would, nothing changed.
fn predump_dry_run(request: &DumpSettings<'_>, root_pid: i32) -> CommandReport {
    let mut group = Group::new()
        .libcuda_option(request.libcuda)
        .tree(root_pid)
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
    root_pid: i32,
    options: &[tree_facts::ChosenCriuOption],
) -> Vec<String> {
    let mut args = vec![
        "dump".to_string(),
        "-t".to_string(),
        root_pid.to_string(),
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

/// Waits up to `limit` for `root` to die, then a moment for its parent to
/// reap it: whether its PID is free.
fn gone(root: Identity, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    while root.is_still_there() && crate::targets::process::is_alive(root.pid) {
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    !root.is_still_there()
        || crate::targets::process::zombie_reaped_within(
            root.pid,
            crate::targets::process::REAP_WAIT,
        )
}

/// What each process's checkpoint moved, from the checkpoint records the
/// action script's pre-dump wrote (the same process: PID and start time).
fn moved_by_checkpoints(members: &mut [ManifestProcess], identities: &[Identity]) {
    let Ok(Some(dir)) = crate::files::SafeDir::open_existing(&crate::gpu::record::dir(None)) else {
        return;
    };
    for (member, identity) in members.iter_mut().zip(identities) {
        let found = crate::gpu::record::read(&dir, member.pid, &member.name)
            .ok()
            .flatten();
        let record = match found {
            Some(
                crate::gpu::record::RecordMatch::ThisProcess(r)
                | crate::gpu::record::RecordMatch::SameName(r),
            ) => r,
            None => continue,
        };
        if record.starttime.is_some() && record.starttime == identity.starttime {
            member.checkpointed_bytes = record.bytes_needed();
        }
    }
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
            checkpointed_bytes: None,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgroup_dumps_only_when_it_holds_one_tree() {
        // 10 -> 11 -> 12, and 20 whose parent (1) is outside.
        let parents = |pid: i32| match pid {
            11 => Some(10),
            12 => Some(11),
            10 | 20 => Some(1),
            _ => None,
        };
        assert_eq!(tree_root(&[10, 11, 12], parents), Ok(10));
        assert_eq!(tree_root(&[10, 11, 12, 20], parents), Err(vec![10, 20]));
        assert_eq!(tree_root(&[], parents), Err(vec![]));
    }
}
