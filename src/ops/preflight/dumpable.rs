//! CRIU dumps the whole tree after its pre-dump hook, and stops at what it
//! cannot dump only after the hook has suspended CUDA and written gigabytes
//! of images (`targets::dumpable` says what that is). So the hook's
//! pre-dump refuses such a tree before any change (exit 8, `undumpable`),
//! naming each process, its parent and the fix; `CUDACKPT_FORCE=1` goes on
//! anyway. A dry run (and `check`) of a checkpoint says the same as a
//! warning: no dump may follow, but one may.

use std::collections::{BTreeMap, HashSet};

use crate::ops::diagnose::describe_process;
use crate::ops::vocabulary::failure::{Fault, FaultKind};
use crate::ops::vocabulary::ready::Ready;
use crate::ops::vocabulary::request::Request;
use crate::ops::vocabulary::stop::Stop;
use crate::targets::discover;
use crate::targets::dumpable::{self, Obstacle, Undumpable};

/// What the hint says of a forked child that keeps device mappings.
const FORKED_CHILD_FIX: &str = "have its parent use the PyTorch drain client (`cudackpt_drain.Drain()` or `keep_forks_dumpable()`: children it forks drop what they inherit from the GPU), or give the DataLoader multiprocessing_context=\"forkserver\" or \"spawn\"";

/// What the hint says of `torch.compile`'s compile-worker pool.
const COMPILE_POOL_FIX: &str = "shut torch.compile's compile workers down once the model is warm (`cudackpt_drain.release_compile_workers()`, which a drain calls; inductor starts them again when it next compiles), or run the job with TORCHINDUCTOR_COMPILE_THREADS=1 (no pool)";

/// What the hint says of an io_uring ring.
const PAST_CAP_FIX: &str =
    "look at what that process maps or holds open; CUDACKPT_FORCE=1 lets CRIU try anyway";
const IO_URING_FIX: &str = "for torchrun's launcher see the README, \"Checkpointing a PyTorch job\"; otherwise stop the program from using io_uring, or checkpoint without CRIU (`cudackpt suspend --drain`)";

/// The pre-flight: `Ok` with warnings for the report (a dry run, or
/// `--force`), or the refusal of the pre-dump.
pub fn check(request: &Request<'_>, ready: &Ready) -> Result<Vec<String>, Stop> {
    if !request.operation.checkpoints() || !(request.criu_dump.is_some() || request.dry_run) {
        return Ok(Vec::new());
    }
    // CRIU dumps the trees it was given; a dry run also looks below each
    // process it names.
    let mut roots = request.selectors.trees.clone();
    if request.criu_dump.is_none() {
        roots.extend(ready.targets.iter().map(|t| t.pid));
    }
    let pids = discover::trees(&roots);
    let cuda: HashSet<i32> = ready
        .targets
        .iter()
        .map(|t| t.pid)
        .chain(ready.blocked.iter().map(|p| p.pid))
        .collect();
    let found = dumpable::find(&pids, &|pid| cuda.contains(&pid));
    let failures = by_process(&found);
    if failures.is_empty() {
        return Ok(Vec::new());
    }
    if request.criu_dump.is_none() {
        return Ok(failures
            .values()
            .map(|(_, f)| {
                let fix = f.hint.as_deref().unwrap_or_default();
                format!(
                    "a CRIU dump of this tree would fail: {} (fix: {fix})",
                    f.message
                )
            })
            .collect());
    }
    if request.force {
        return Ok(failures
            .values()
            .map(|(_, f)| format!("{} (going on anyway: CUDACKPT_FORCE=1)", f.message))
            .collect());
    }
    // The processes at fault are no targets: the group is refused as a
    // whole, and each target is not attempted.
    Err(Stop::not_run(together(
        failures.into_values().map(|(_, f)| f),
    )))
}

/// One refusal of the tree from each process's (pure).
fn together(failures: impl Iterator<Item = Fault>) -> Fault {
    let (mut messages, mut hints): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    for failure in failures {
        messages.push(failure.message);
        for hint in failure
            .hint
            .into_iter()
            .flat_map(|h| h.split("; ").map(str::to_string).collect::<Vec<_>>())
        {
            if !hints.contains(&hint) {
                hints.push(hint);
            }
        }
    }
    Fault::new(
        FaultKind::Undumpable,
        format!("CRIU could not dump this tree: {}", messages.join("; ")),
        hints.join("; "),
    )
}

/// One failure per process, its obstacles together, by PID, with its name
/// (pure).
fn by_process(found: &[Undumpable]) -> BTreeMap<i32, (Option<String>, Fault)> {
    let mut failures: BTreeMap<i32, (Option<String>, Fault)> = BTreeMap::new();
    for f in found {
        let (message, hint) = words(f);
        failures
            .entry(f.pid)
            .and_modify(|(_, failure)| {
                failure.message = format!("{}; it also {}", failure.message, message);
                let before = failure.hint.take().unwrap_or_default();
                failure.hint = Some(format!("{before}; {hint}"));
            })
            .or_insert_with(|| {
                let who = describe_process(f.pid, f.name.as_deref());
                let parent = f
                    .parent
                    .as_ref()
                    .map(|(ppid, name)| {
                        format!(", a child of {},", describe_process(*ppid, name.as_deref()))
                    })
                    .unwrap_or_default();
                (
                    f.name.clone(),
                    Fault::new(
                        FaultKind::Undumpable,
                        format!("{who}{parent} {message}"),
                        hint,
                    ),
                )
            });
    }
    failures
}

/// What is wrong with one obstacle, and its fix (pure).
fn words(found: &Undumpable) -> (String, &'static str) {
    match &found.obstacle {
        Obstacle::Device(path) if found.compile_pool => (
            format!(
                "maps {} but holds no CUDA state: it is torch.compile's compile-worker pool, or one of its workers (the pool starts CUDA to read the GPUs' properties, then forks them), no checkpoint releases that mapping, and CRIU cannot dump it (\"Can't handle non-regular mapping\")",
                crate::targets::name::printable(path)
            ),
            COMPILE_POOL_FIX,
        ),
        Obstacle::Device(path) => (
            format!(
                "maps {} but holds no CUDA state: it was forked after its parent started CUDA (a DataLoader worker), no checkpoint releases that mapping, and CRIU cannot dump it (\"Can't handle non-regular mapping\")",
                crate::targets::name::printable(path)
            ),
            FORKED_CHILD_FIX,
        ),
        Obstacle::IoUring => (
            "holds an io_uring ring (anon_inode:[io_uring]), which CRIU 4.2 cannot dump".to_string(),
            IO_URING_FIX,
        ),
        Obstacle::PastCap => (
            format!(
                "could not be checked whole: its /proc/PID/maps goes on past {} MiB or {} lines, or it holds more than {} descriptors, and cudackpt reads no further (a process can make those as large as it likes)",
                crate::targets::procfs::MAPS_BYTES_CAP >> 20,
                crate::targets::procfs::MAPS_LINES_CAP,
                crate::targets::procfs::FD_CAP
            ),
            PAST_CAP_FIX,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(pid: i32, obstacle: Obstacle) -> Undumpable {
        Undumpable {
            pid,
            name: Some("pt_data_worker".to_string()),
            parent: Some((100, Some("python3".to_string()))),
            obstacle,
            compile_pool: false,
        }
    }

    #[test]
    fn a_compile_worker_gets_the_pool_s_fix_not_the_dataloader_s() {
        let pool_worker = Undumpable {
            compile_pool: true,
            ..worker(101, Obstacle::Device("/dev/nvidiactl".into()))
        };
        let failures = by_process(&[pool_worker]);
        let fault = &failures[&101].1;
        assert!(
            fault.message.contains("compile-worker pool"),
            "{}",
            fault.message
        );
        let hint = fault.hint.as_deref().expect("a fix");
        assert!(hint.contains("release_compile_workers()"), "{hint}");
        assert!(hint.contains("TORCHINDUCTOR_COMPILE_THREADS=1"), "{hint}");
        assert!(!hint.contains("DataLoader"), "{hint}");
    }

    #[test]
    fn a_forked_worker_is_named_with_its_parent_and_the_fix() {
        let failures = by_process(&[worker(101, Obstacle::Device("/dev/nvidia0".into()))]);
        let (name, failure) = &failures[&101];
        assert_eq!(name.as_deref(), Some("pt_data_worker"));
        assert_eq!(failure.kind, FaultKind::Undumpable);
        assert!(
            failure.message.starts_with(
                "PID 101 (pt_data_worker), a child of PID 100 (python3), maps /dev/nvidia0 but holds no CUDA state"
            ),
            "{}",
            failure.message
        );
        let hint = failure.hint.as_deref().unwrap_or_default();
        assert!(hint.contains("keep_forks_dumpable") && hint.contains("forkserver"));
    }

    #[test]
    fn two_obstacles_of_one_process_make_one_failure() {
        let failures = by_process(&[
            worker(101, Obstacle::Device("/dev/nvidia0".into())),
            worker(101, Obstacle::IoUring),
            worker(102, Obstacle::IoUring),
        ]);
        assert_eq!(failures.keys().copied().collect::<Vec<_>>(), [101, 102]);
        let both = &failures[&101].1;
        assert!(both.message.contains("/dev/nvidia0"));
        assert!(both.message.contains("; it also holds an io_uring ring"));
        let hint = both.hint.as_deref().unwrap_or_default();
        assert!(hint.contains("forkserver") && hint.contains("torchrun"));
    }

    #[test]
    fn the_tree_is_refused_once_naming_every_process_and_each_fix_once() {
        let failures = by_process(&[
            worker(101, Obstacle::Device("/dev/nvidia0".into())),
            worker(102, Obstacle::Device("/dev/nvidiactl".into())),
            worker(103, Obstacle::IoUring),
        ]);
        let failure = together(failures.into_values().map(|(_, f)| f));
        assert_eq!(failure.kind, FaultKind::Undumpable);
        assert!(failure
            .message
            .starts_with("CRIU could not dump this tree: PID 101 "));
        for pid in ["PID 102 ", "PID 103 "] {
            assert!(failure.message.contains(pid), "{}", failure.message);
        }
        let hint = failure.hint.unwrap_or_default();
        assert_eq!(hint.matches("forkserver").count(), 1, "{hint}");
        assert_eq!(hint.matches("torchrun").count(), 1, "{hint}");
    }

    #[test]
    fn a_device_path_cannot_start_a_line_of_its_own() {
        let failures = by_process(&[worker(7, Obstacle::Device("/dev/nvidia\nFAKE".into()))]);
        assert!(!failures[&7].1.message.contains('\n'));
    }
}
