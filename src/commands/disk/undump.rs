//! `cudackpt undump DIR`: a job dumped by `cudackpt dump` back to life
//! through CRIU, with cudackpt as the action script that resumes its GPU
//! work. Before CRIU restores anything: the manifest is read, the host's
//! driver must be the dump's (unless forced), the job's PIDs must be free,
//! and its GPUs are chosen (each stays where this host has it with room,
//! else moves to a GPU with room; or the user's `--map`), so a restore that
//! cannot fit is refused instead of leaving a stuck process. After CRIU, the
//! restored CUDA processes must be running; a restore that fails is killed
//! whole, and the report says so.
//!
//! The images are reached by descriptor and read only through it
//! (`source`); images another user could have written restore only as that
//! user (`credentials`); the manifest is data, and CRIU's options come from
//! the closed list of those a dump chooses (`tree_facts::restore_args`);
//! what is killed after a failure is what that CRIU restored
//! (`restored_tree`), never a PID read from a file.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::files::SafeDir;
use crate::gpu::inventory::Inventory;
use crate::targets::process;

use crate::commands::disk::criu_tool::find as criu_tool;
use crate::commands::disk::criu_tool::run as criu_run;
use crate::commands::disk::dump;
use crate::commands::disk::host_driver;
use crate::commands::disk::manifest::{self, Manifest};
use crate::commands::disk::report::{DiskFailure, DiskReport, UndumpPhases};
use crate::commands::disk::tree_state;
use crate::commands::disk::undump_checks::addresses;
use crate::commands::disk::undump_checks::credentials;
use crate::commands::disk::undump_checks::grown_files;
use crate::commands::disk::undump_checks::open_files;
use crate::commands::disk::undump_checks::placement::{self, HostGpu};
use crate::commands::disk::undump_checks::ports;
use crate::commands::disk::undump_checks::restored_tree;
use crate::commands::disk::undump_checks::socket_dirs;
use crate::commands::disk::undump_checks::source::{HeldImages, StageProblem};

/// What an undump is asked to do.
pub struct UndumpSettings<'a> {
    pub from: PathBuf,
    pub criu: Option<PathBuf>,
    /// The user's map (old UUID, new UUID), if any.
    pub map: Option<Vec<(String, String)>>,
    pub force: bool,
    pub libcuda: Option<&'a Path>,
}

/// The pidfile CRIU writes the restored root's PID to.
const PIDFILE: &str = "restore.pid";

/// Restores the images in `request.from`.
pub fn run(request: &UndumpSettings<'_>, written: &dyn Fn(u64, u64, Duration)) -> DiskReport {
    let started = Instant::now();
    let report = DiskReport::new("undump", request.from.clone());
    let mut report = undump(request, report, written, started);
    let done = match report.restored_root {
        Some(root) => format!("the tree runs again, rooted at PID {root}"),
        None => String::new(),
    };
    if report.signal.is_none() {
        report.signal = criu_run::late_signal();
    }
    report.note_signal(
        &done,
        "it was restored whole; end it as any process if it was not wanted",
        "when CRIU ends, the tree is restored or not: `cudackpt ps` lists its CUDA processes, and a half-restored tree is CRIU's to take away",
    );
    report.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    report
}

fn undump(
    request: &UndumpSettings<'_>,
    mut report: DiskReport,
    written: &dyn Fn(u64, u64, Duration),
    started: Instant,
) -> DiskReport {
    let mut source = match HeldImages::open(&request.from) {
        Ok(source) => source,
        Err(why) => {
            report.failure = Some(DiskFailure::refused(
                "images_dir",
                format!(
                    "cannot open the images directory {}: {why}",
                    request.from.display()
                ),
                format!(
                    "{}; undump takes the directory a `cudackpt dump --to DIR` wrote (it holds manifest.json)",
                    why.hint()
                ),
            ));
            return report;
        }
    };
    let result = read_manifest(&source, &request.from)
        .map_err(|(message, hint)| DiskFailure::refused("images_dir", message, hint))
        .and_then(|manifest| {
            report.manifest = Some(manifest.clone());
            if !manifest.complete {
                report.remarks.push(finished_by_criu(&source, &request.from)?);
            }
            let criu_args = trusted_options(&manifest)?;
            // Before any image is read: what is checked from here on is
            // what CRIU reads.
            source.prepare_for_criu().map_err(|why| {
                let kind = match why {
                    StageProblem::NoRoom { .. } => "no_room",
                    StageProblem::Io { .. } => "images_dir",
                };
                DiskFailure::refused(kind, format!("refused before any change: {why}"), why.hint())
            })?;
            let job_files = open_files::read(&source);
            if let Some(uid) = source.writer {
                credentials::refuse_beyond(&source, &job_files, uid)?;
                report.remarks.push(format!(
                    "uid {uid} could have written these images: every process was checked to restore as uid {uid}, with no capability and no descriptor they could not make, and CRIU read a private stage of them ({})",
                    source.criu_images().path().display()
                ));
            }
            let trusted = source.writer.is_none();
            let (criu, moved) =
                checked(request, &manifest, &job_files, trusted, &mut report.remarks)?;
            report.gpu_map = moved.clone();
            let restore = Restore {
                criu: &criu,
                criu_args,
                moved: &moved,
            };
            restored(request, &mut report, &manifest, &source, &restore, written, started)
        });
    source.unstage();
    match result {
        Ok(root) => report.restored_root = Some(root),
        Err(failure) => report.failure = Some(failure),
    }
    report
}

/// Whether a dump whose cudackpt ended before it completed the manifest
/// was finished by CRIU all the same (its log says so last): the remark
/// that says the undump goes on, or the refusal.
fn finished_by_criu(source: &HeldImages, dir: &Path) -> Result<String, DiskFailure> {
    let log = source
        .read(dump::LOG_NAME, 256 << 20)
        .ok()
        .flatten()
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
    let finished = log
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .is_some_and(|last| last.contains(manifest::DUMP_FINISHED));
    if finished {
        return Ok("the cudackpt that dumped these images ended before it completed their manifest, and CRIU's log says the dump finished: restored from them as they are".into());
    }
    Err(DiskFailure::refused(
        "dump_incomplete",
        format!(
            "refused before any change: the dump into {} was cut short (its cudackpt ended, and CRIU's log does not say the dump finished)",
            crate::targets::name::printable(&dir.to_string_lossy())
        ),
        "if CRIU still runs, wait for it and undump again; else the images are not whole: if the job is still there, `cudackpt recover` puts its GPU state back, then dump it again",
    ))
}

/// CRIU's options from the manifest, each one a dump chooses, or the
/// undump refused: a manifest is data whoever could write the images could
/// have written.
fn trusted_options(manifest: &Manifest) -> Result<Vec<&'static str>, DiskFailure> {
    crate::commands::disk::dump_checks::tree_facts::restore_args(&manifest.criu_options).map_err(|unknown| {
        DiskFailure::refused(
            "manifest",
            format!(
                "refused before any change: the manifest asks CRIU for {:?}, which is not an option cudackpt's dump chooses ({})",
                crate::targets::name::printable(&unknown),
                crate::commands::disk::dump_checks::tree_facts::KNOWN_OPTIONS.join(", ")
            ),
            "undump only images `cudackpt dump` wrote, with their manifest as it wrote it",
        )
    })
}

/// What the restore runs: the CRIU checked, its options, the GPUs moved.
struct Restore<'a> {
    criu: &'a criu_tool::Criu,
    criu_args: Vec<&'static str>,
    moved: &'a [(String, String)],
}

/// The checks before CRIU restores anything: a usable CRIU, this host's
/// driver the dump's, the job's PIDs free, and GPUs with room for it. The
/// CRIU, and the job's GPUs that move (old, new).
fn checked(
    request: &UndumpSettings<'_>,
    manifest: &Manifest,
    job_files: &open_files::JobFiles,
    trusted: bool,
    remarks: &mut Vec<String>,
) -> Result<(criu_tool::Criu, Vec<(String, String)>), DiskFailure> {
    let criu = criu_tool::find_on_path(request.criu.as_deref())
        .map_err(|why| DiskFailure::refused("criu_unusable", why.to_string(), why.hint()))?;
    let here = host_driver::facts(request.libcuda);
    if let Some(why) = host_driver::mismatch(&manifest.driver, &here) {
        DiskFailure::unless_forced(
            "driver_mismatch",
            &why,
            "restore on a host with the dump's driver, or install it here; --force tries anyway",
            request.force,
            remarks,
        )?;
    }
    if let Some((taken, holder)) = manifest
        .processes
        .iter()
        .find_map(|p| pid_holder(p.pid).map(|holder| (p, holder)))
    {
        return Err(DiskFailure::refused(
            "pid_in_use",
            format!(
                "refused before any change: PID {} ({} in the dump) is {holder}, and CRIU restores every process with its own PID",
                taken.pid,
                crate::targets::name::printable(&taken.name)
            ),
            "end that process (after `dump --leave-running` it is the job itself; a zombie goes when its parent reaps it or ends), or undump on another host",
        ));
    }
    let grown = open_files::refuse_changed(job_files, request.force, trusted, remarks)?;
    ports::refuse_taken(job_files, request.force, remarks)?;
    addresses::refuse_foreign(job_files, request.force, remarks)?;
    let pairs = choose_gpus(request, manifest, remarks).map_err(|why| {
        DiskFailure::refused(
            "no_gpu_room",
            format!("refused before any change: {why}"),
            "free GPU memory, or name GPUs with room with --map OLD=NEW; --force restores anyway",
        )
    })?;
    let moved = pairs.into_iter().filter(|(old, new)| old != new).collect();
    // The last check passed: the first change, just before CRIU.
    ports::close_left_over(job_files, request.force, remarks)?;
    socket_dirs::put_back(job_files, request.force, remarks)?;
    grown_files::cut_back(&grown, remarks)?;
    Ok((criu, moved))
}

/// Runs CRIU's restore and checks the restored CUDA processes run: the
/// restored root, or why not (what CRIU had restored then killed).
fn restored(
    request: &UndumpSettings<'_>,
    report: &mut DiskReport,
    manifest: &Manifest,
    source: &HeldImages,
    restore: &Restore<'_>,
    written: &dyn Fn(u64, u64, Duration),
    started: Instant,
) -> Result<i32, DiskFailure> {
    let work = source.criu_work();
    let _ = work.remove(PIDFILE);
    // What CRIU forks and leaves becomes this process's child.
    let subreaper = restored_tree::become_subreaper();
    let call = criu_run::CriuCall {
        criu: &restore.criu.path,
        args: restore_args(&restore.criu_args),
        env: restore_env(request, restore.moved),
        images: source.criu_images(),
        work,
        log_name: LOG_NAME,
    };
    let criu_started = Instant::now();
    let ran = criu_run::run(&call, &|_, elapsed| {
        written(0, manifest.image_bytes, elapsed)
    });
    let criu_ended = Instant::now();
    let ran = ran.map_err(|why| DiskReport::not_started(&restore.criu.path, &why))?;
    let ran = report.noted(ran)?;
    let root = restored_root_running(request, report, &ran, work, subreaper.is_ok())?;
    let log = criu_run::read_log(work, LOG_NAME).unwrap_or_default();
    report.phases = Some(phases(
        &log,
        criu_started - started,
        criu_ended - criu_started,
        criu_ended.elapsed(),
    ));
    Ok(root)
}

/// The root CRIU restored, once its CUDA processes run; or why not, with
/// what CRIU had restored killed (only children of this process since
/// CRIU started, when it could make itself their subreaper).
fn restored_root_running(
    request: &UndumpSettings<'_>,
    report: &mut DiskReport,
    ran: &criu_run::CriuRun,
    work: &SafeDir,
    subreaper: bool,
) -> Result<i32, DiskFailure> {
    let failed = |message: String, killed: &[i32]| {
        DiskFailure {
        kind: "criu_failed",
        message: format!("{message}{}", said_killed(killed)),
        hint: format!(
            "see CRIU's errors (below, and in {}) and `journalctl -t cudackpt`; the images are unchanged",
            ran.log.display()
        ),
        changed: !killed.is_empty(),
    }
    };
    let since = ran.started_ticks.unwrap_or(u64::MAX);
    let kill_restored = || {
        if subreaper {
            restored_tree::kill_trees(&restored_tree::children_since(since), since)
        } else {
            Vec::new()
        }
    };
    if !ran.ok {
        report.criu_errors = criu_run::read_log(work, LOG_NAME)
            .map(|log| criu_run::log_errors(&log, 12).0)
            .unwrap_or_default();
        let killed = kill_restored();
        let exit = format!(
            "CRIU's restore {} after {:.1} s",
            ran.exit,
            ran.elapsed.as_secs_f64()
        );
        return Err(failed(exit, &killed));
    }
    let root = restored_root(work).filter(|&pid| restored_tree::is_restored_child(pid, since));
    let Some(root) = root else {
        let killed = kill_restored();
        return Err(DiskFailure {
            changed: true,
            ..failed(
                "CRIU said it restored the tree but named no process it restored".into(),
                &killed,
            )
        });
    };
    if let Some(stuck) = tree_state::first_not_running(request.libcuda, root) {
        let killed = restored_tree::kill_trees(&[root], since);
        return Err(failed(
            format!("the GPU state of {stuck} was not restored"),
            &killed,
        ));
    }
    Ok(root)
}

/// Where an undump's time went (pure): `checks` before CRIU, CRIU's
/// `criu` split at its post-restore and post-resume scripts by its log,
/// `after` it. A mark missing from the log puts its time in the phase
/// before.
fn phases(log: &str, checks: Duration, criu: Duration, after: Duration) -> UndumpPhases {
    let memory_done = criu_run::log_mark(log, "Running post-restore scripts")
        .unwrap_or(criu)
        .min(criu);
    let resumed = criu_run::log_mark(log, "Running post-resume scripts")
        .unwrap_or(criu)
        .clamp(memory_done, criu);
    UndumpPhases {
        checks,
        criu_memory: memory_done,
        criu_resume: resumed - memory_done,
        gpu_restore: criu - resumed,
        after,
    }
}

/// CRIU's log of a restore, in its work directory.
const LOG_NAME: &str = "restore.log";

/// The manifest among the images, or why there is none to use (message,
/// hint).
fn read_manifest(source: &HeldImages, dir: &Path) -> Result<Manifest, (String, String)> {
    let hint = "name a directory `cudackpt dump --to` wrote; images CRIU wrote without cudackpt restore with `criu restore -D DIR -d --action-script \"$(command -v cudackpt)\" --libdir EMPTY_DIR` (cudackpt as the action script puts the GPU state back; an empty plugin directory keeps CRIU's CUDA plugin from acting twice)";
    let path = dir.join(manifest::FILE_NAME);
    let cannot = |why: String| {
        (
            format!(
                "cannot read {}: {why}",
                crate::targets::name::printable(&path.to_string_lossy())
            ),
            hint.to_string(),
        )
    };
    let bytes = match source.read(manifest::FILE_NAME, manifest::CAP) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Err(cannot("no such file".into())),
        Err(why) => return Err(cannot(why.to_string())),
    };
    let manifest: Manifest = serde_json::from_slice(&bytes).map_err(|why| {
        (
            format!(
                "{} is not a manifest cudackpt can read: {why}",
                crate::targets::name::printable_path(&path)
            ),
            hint.to_string(),
        )
    })?;
    if let Some(why) = manifest.malformed() {
        return Err((
            format!(
                "{} is not a manifest cudackpt wrote: {why}",
                crate::targets::name::printable_path(&path)
            ),
            hint.to_string(),
        ));
    }
    if manifest.schema_version > manifest::SCHEMA_VERSION {
        return Err((
            format!(
                "{} is of a newer cudackpt (schema {})",
                crate::targets::name::printable_path(&path),
                manifest.schema_version
            ),
            "undump with the cudackpt that dumped it, or a newer one".into(),
        ));
    }
    Ok(manifest)
}

/// The GPUs the job lands on: the user's map checked, or chosen here.
fn choose_gpus(
    request: &UndumpSettings<'_>,
    manifest: &Manifest,
    remarks: &mut Vec<String>,
) -> Result<Vec<(String, String)>, placement::NoRoom> {
    let needs = manifest.needs_by_gpu();
    if needs.is_empty() {
        return Ok(Vec::new());
    }
    let inventory = Inventory::loading(request.libcuda);
    let host: Vec<HostGpu> = match inventory.free_memory() {
        Ok(free) => free
            .into_iter()
            .map(|(uuid, bytes)| HostGpu {
                uuid: uuid.to_string(),
                free_bytes: (!request.force).then_some(bytes),
            })
            .collect(),
        Err(why) => {
            // None for a stand-in driver, whose GPUs NVML cannot know.
            if !inventory.driver_is_stand_in() {
                remarks.push(format!("GPU memory not weighed before the restore: {why}"));
            }
            inventory
                .without_cuda()
                .map(|listing| {
                    listing
                        .gpus
                        .iter()
                        .map(|g| HostGpu {
                            uuid: g.uuid.to_string(),
                            free_bytes: None,
                        })
                        .collect()
                })
                .unwrap_or_default()
        }
    };
    if !manifest.footprint_known() {
        remarks.push("the dump did not know the job's GPU memory (no NVML then): GPUs chosen by presence only".into());
    }
    placement::place(&needs, &host, request.map.as_deref())
}

/// `criu restore`'s arguments, before `-D` and `-o` (pure): the pidfile
/// in CRIU's work directory, the options from the closed list.
pub fn restore_args(options: &[&'static str]) -> Vec<String> {
    let mut args = vec![
        "restore".to_string(),
        "--restore-detached".to_string(),
        "--pidfile".to_string(),
        PIDFILE.to_string(),
        "--action-script".to_string(),
        dump::action_script(),
    ];
    args.extend(options.iter().map(|o| o.to_string()));
    args
}

/// What the action script is told at restore: the GPUs to move to.
fn restore_env(
    request: &UndumpSettings<'_>,
    moved: &[(String, String)],
) -> Vec<(&'static str, String)> {
    let mut env = Vec::new();
    if !moved.is_empty() {
        let map: Vec<String> = moved
            .iter()
            .map(|(old, new)| format!("{old}={new}"))
            .collect();
        env.push((crate::environment::MAP, map.join(",")));
    }
    if request.force {
        env.push((crate::environment::FORCE, "1".to_string()));
    }
    if let Some(libcuda) = request.libcuda {
        env.push((crate::environment::LIBCUDA, libcuda.display().to_string()));
    }
    env
}

/// The PID CRIU's pidfile names, read in its work directory (root's).
fn restored_root(work: &SafeDir) -> Option<i32> {
    let text = work.read_capped(PIDFILE, 64).ok()??;
    text.trim().parse().ok().filter(|pid| *pid > 1)
}

fn said_killed(pids: &[i32]) -> String {
    if pids.is_empty() {
        String::new()
    } else {
        format!(
            "; what CRIU had restored was killed ({})",
            crate::vocabulary::prose::pids(pids)
        )
    }
}

/// What holds `pid` on this host, if anything does: a process, or a zombie
/// (a process that ended and whose parent has not reaped it still holds its
/// PID, and CRIU cannot fork it: "File exists").
fn pid_holder(pid: i32) -> Option<String> {
    match process::read_status(pid) {
        Ok(None) => None,
        Ok(Some(status)) if status.state == 'Z' => {
            if process::zombie_reaped_within(pid, process::REAP_WAIT) {
                return None;
            }
            let parent = process::read_proc_text(&format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| process::stat_fields(&stat)?.nth(1)?.parse::<i32>().ok());
            Some(match parent {
                Some(parent) => {
                    format!("held by a zombie that its parent, PID {parent}, has not reaped")
                }
                None => "held by a zombie its parent has not reaped".to_string(),
            })
        }
        // Unreadable is no proof it is free.
        Ok(Some(_)) | Err(_) => Some("in use on this host".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The marks of a CRIU 4.2.1 restore log, as it writes them at -v4.
    const LOG: &str = "(00.000047) Running on vm Linux 6.18\n(00.035109) Running pre-restore scripts\n(02.500000) Running post-restore scripts\n(02.503301) Running pre-resume scripts\n(02.505436) Restore finished successfully. Tasks resumed.\n(02.510000) Running post-resume scripts\n";

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn an_undump_s_time_is_split_at_criu_s_scripts() {
        let split = phases(LOG, ms(40), ms(3_200), ms(20));
        assert_eq!(split.checks, ms(40));
        assert_eq!(split.criu_memory, ms(2_500));
        assert_eq!(split.criu_resume, ms(10));
        assert_eq!(split.gpu_restore, ms(690));
        assert_eq!(split.after, ms(20));
        let total = split.criu_memory + split.criu_resume + split.gpu_restore;
        assert_eq!(total, ms(3_200), "CRIU's time, whole");
    }

    /// A log without the marks (cut, or another CRIU's words), or with
    /// stamps past CRIU's own end, never makes a phase negative.
    #[test]
    fn missing_or_late_marks_put_the_time_in_the_phase_before() {
        let none = phases("", ms(1), ms(900), ms(1));
        assert_eq!(
            (none.criu_memory, none.criu_resume, none.gpu_restore),
            (ms(900), ms(0), ms(0))
        );
        let late = phases(LOG, ms(1), ms(2_000), ms(1));
        assert_eq!(
            (late.criu_memory, late.criu_resume, late.gpu_restore),
            (ms(2_000), ms(0), ms(0))
        );
    }
}
