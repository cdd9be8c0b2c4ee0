//! CRIU dumps the whole tree after its pre-dump hook, and stops at what it
//! cannot dump only after the hook has suspended CUDA and written gigabytes
//! of images (`targets::dumpable` says what that is). So the hook's
//! pre-dump refuses such a tree before any change (exit 8, `undumpable`),
//! naming each process, its parent and the fix; `CUDACKPT_FORCE=1` goes on
//! anyway. A dry run (and `check`) of a checkpoint says the same as a
//! warning: no dump may follow, but one may.

use std::collections::{BTreeMap, HashSet};

use crate::ops::diagnose::describe_process;
use crate::targets::discover;
use crate::targets::dumpable::{self, Obstacle, Undumpable};
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::ready::Ready;
use crate::vocabulary::request::Request;
use crate::vocabulary::stop::Stop;

/// What the hint says of a forked child that keeps device mappings.
const FORKED_CHILD_FIX: &str = "have its parent use the PyTorch drain client (`cudackpt_drain.Drain()` or `keep_forks_dumpable()`: children it forks drop what they inherit from the GPU), or give the DataLoader multiprocessing_context=\"forkserver\" or \"spawn\"";

/// What the hint says of `torch.compile`'s compile-worker pool.
const COMPILE_POOL_FIX: &str = "shut torch.compile's compile workers down once the model is warm (`cudackpt_drain.release_compile_workers()`, which the client's drain calls when it serves a dump: `dump --drain`; inductor starts them again when it next compiles), or run the job with TORCHINDUCTOR_COMPILE_THREADS=1 (no pool)";

/// What the hint says of an io_uring ring.
const PAST_CAP_FIX: &str =
    "look at what that process maps or holds open; CUDACKPT_FORCE=1 lets CRIU try anyway";
const IO_URING_FIX: &str = "for torchrun's launcher see the guide's PyTorch chapter (docs/guide/pytorch.md: start it under `python3 -m cudackpt_drain.no_io_uring`); otherwise stop the program from using io_uring, or checkpoint without CRIU (`cudackpt suspend --drain`)";

/// The pre-flight: `Ok` with warnings for the report (a dry run, or
/// `--force`), or the refusal of the pre-dump. A compile-worker pool that
/// a drain serving this dump will shut down is left to it (said in a
/// remark), and [`after_drain`] looks again once the drain is done.
pub fn check(request: &Request<'_>, ready: &Ready) -> Result<Vec<String>, Stop> {
    if !request.operation.checkpoints() || !(request.criu_dump.is_some() || request.dry_run) {
        return Ok(Vec::new());
    }
    let (found, left_to_drain) = excuse_released(request, found_in(request, ready));
    let mut remarks: Vec<String> = left_to_drain
        .iter()
        .map(|(pool, owner)| format!(
            "torch.compile's compile-worker pool, PID {pool}, and its workers map the GPU, which CRIU cannot dump: the drain shuts the pool down first (PID {owner}, which started it, catches the drain protocol's dump notice)"
        ))
        .collect();
    let failures = failures(&found);
    if failures.is_empty() {
        return Ok(remarks);
    }
    if request.criu_dump.is_none() {
        remarks.extend(failures.iter().map(|f| {
            let fix = f.hint.as_deref().unwrap_or_default();
            format!(
                "a CRIU dump of this tree would fail: {} (fix: {fix})",
                f.message
            )
        }));
        return Ok(remarks);
    }
    if request.force {
        remarks.extend(
            failures
                .iter()
                .map(|f| format!("{} (going on anyway: CUDACKPT_FORCE=1)", f.message)),
        );
        return Ok(remarks);
    }
    // The processes at fault are no targets: the group is refused as a
    // whole, and each target is not attempted.
    Err(Stop::not_run(together(failures.into_iter())))
}

/// Once a drain that serves a dump is done: what CRIU still could not
/// dump (a pool its owner kept after all), refused as the pre-dump would
/// have; `None` when nothing is left, or when forced.
pub fn after_drain(request: &Request<'_>, ready: &Ready) -> Option<Fault> {
    if request.criu_dump.is_none() || request.force {
        return None;
    }
    let failures = failures(&found_in(request, ready));
    (!failures.is_empty()).then(|| together(failures.into_iter()))
}

/// What CRIU could not dump in the trees of the request.
fn found_in(request: &Request<'_>, ready: &Ready) -> Vec<Undumpable> {
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
    dumpable::find(&pids, &|pid| cuda.contains(&pid))
}

/// The compile-worker pools among `targets` (a pool starts CUDA, so holds
/// CUDA state of its own) that a drain serving this dump shuts down: left
/// out of the group, since they are gone before the first lock. Empty
/// unless the request drains for a CRIU dump.
pub fn pools_left_to_drain(request: &Request<'_>, targets: &[i32]) -> Vec<i32> {
    if !request.drain.before_lock || request.criu_dump.is_none() {
        return Vec::new();
    }
    targets
        .iter()
        .copied()
        .filter(|&pid| dumpable::is_pool_process(pid))
        .filter(|&pool| releasing_owner(request, pool).is_some())
        .collect()
}

/// The process that started `pool`, when it catches both the drain
/// signal and the dump notice: its drain shuts the pool down.
fn releasing_owner(request: &Request<'_>, pool: i32) -> Option<i32> {
    let signal = request.drain.signal;
    dumpable::pool_owner(pool).filter(|&owner| {
        crate::targets::process::read_status(owner)
            .ok()
            .flatten()
            .and_then(|status| status.caught)
            .is_some_and(|caught| {
                signal.caught_by(caught) && signal.dump_notice().caught_by(caught)
            })
    })
}

/// Splits off the pools a drain that serves this dump will shut down:
/// those whose owner catches both the drain signal and the dump notice
/// (the Python client does). Returns what is left, and each pool let
/// through with its owner.
fn excuse_released(
    request: &Request<'_>,
    found: Vec<Undumpable>,
) -> (Vec<Undumpable>, Vec<(i32, i32)>) {
    if !request.drain.before_lock || request.criu_dump.is_none() {
        return (found, Vec::new());
    }
    let mut owners: BTreeMap<i32, Option<i32>> = BTreeMap::new();
    let mut owner_of = |pool: i32| {
        *owners
            .entry(pool)
            .or_insert_with(|| releasing_owner(request, pool))
    };
    let (mut kept, mut excused) = (Vec::new(), Vec::new());
    for f in found {
        match (f.compile_pool, &f.obstacle) {
            (Some(pool), Obstacle::Device(_)) => match owner_of(pool) {
                Some(owner) => {
                    if !excused.contains(&(pool, owner)) {
                        excused.push((pool, owner));
                    }
                }
                None => kept.push(f),
            },
            _ => kept.push(f),
        }
    }
    (kept, excused)
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

/// The refusals of a tree's processes (pure): the device mappings of one
/// family (a compile-worker pool and its workers, or the children one
/// parent forked) in one sentence with their count, since a pool has one
/// worker a CPU core and the same words for each of 32 say nothing more;
/// every other process's obstacles together in one failure of its own.
/// In the order of their first PID.
fn failures(found: &[Undumpable]) -> Vec<Fault> {
    let mut families: BTreeMap<Family, Vec<&Undumpable>> = BTreeMap::new();
    let mut alone: Vec<&Undumpable> = Vec::new();
    for f in found {
        match family(f) {
            Some(key) => families.entry(key).or_default().push(f),
            None => alone.push(f),
        }
    }
    // A family of one is told as a process of its own.
    alone.extend(families.values().filter(|m| m.len() == 1).map(|m| m[0]));
    let mut told: Vec<(i32, Fault)> = by_process(alone)
        .into_iter()
        .map(|(pid, (_, fault))| (pid, fault))
        .collect();
    told.extend(
        families
            .values()
            .filter(|members| members.len() > 1)
            .map(|members| (members[0].pid, family_fault(members))),
    );
    told.sort_by_key(|(pid, _)| *pid);
    told.into_iter().map(|(_, fault)| fault).collect()
}

/// Whose device mappings are told together: a pool's, or one parent's
/// forked children's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Family {
    CompilePool(i32),
    ChildrenOf(i32),
}

fn family(found: &Undumpable) -> Option<Family> {
    if !matches!(found.obstacle, Obstacle::Device(_)) {
        return None;
    }
    match (found.compile_pool, &found.parent) {
        (Some(pool), _) => Some(Family::CompilePool(pool)),
        (None, Some((ppid, _))) => Some(Family::ChildrenOf(*ppid)),
        (None, None) => None,
    }
}

/// One sentence for a family's device mappings (pure; `members` share a
/// [`Family`], sorted by PID, two or more).
fn family_fault(members: &[&Undumpable]) -> Fault {
    let first = members[0];
    let path = match &first.obstacle {
        Obstacle::Device(path) => crate::targets::name::printable(path),
        _ => "a GPU device".into(),
    };
    let pids = pid_list(members.iter().map(|m| m.pid));
    let count = members.len();
    let (message, hint) = match family(first) {
        Some(Family::CompilePool(pool)) => {
            let who = match members.iter().find(|m| m.pid == pool) {
                Some(itself) => format!(
                    "torch.compile's compile-worker pool, {}{} and its workers",
                    describe_process(pool, itself.name.as_deref()),
                    parent_clause(itself)
                ),
                None => format!(
                    "workers of torch.compile's compile-worker pool {}",
                    parent_of(first)
                ),
            };
            (
                format!(
                    "{who}, {count} processes ({pids}), map {path} but hold no CUDA state: the pool starts CUDA to read the GPUs' properties, then forks its workers; no checkpoint releases that mapping, and CRIU cannot dump it (\"Can't handle non-regular mapping\")"
                ),
                COMPILE_POOL_FIX,
            )
        }
        _ => (
            format!(
                "{count} children of {} ({pids}) map {path} but hold no CUDA state: they were forked after their parent started CUDA (DataLoader workers), no checkpoint releases that mapping, and CRIU cannot dump it (\"Can't handle non-regular mapping\")",
                parent_of(first)
            ),
            FORKED_CHILD_FIX,
        ),
    };
    Fault::new(FaultKind::Undumpable, message, hint)
}

/// `PID 7 (python3)`, the parent a process was found with.
fn parent_of(found: &Undumpable) -> String {
    found
        .parent
        .as_ref()
        .map(|(ppid, name)| describe_process(*ppid, name.as_deref()))
        .unwrap_or_else(|| "its parent".to_string())
}

/// `, a child of PID 7 (python3),` or nothing.
fn parent_clause(found: &Undumpable) -> String {
    found
        .parent
        .as_ref()
        .map(|(ppid, name)| format!(", a child of {},", describe_process(*ppid, name.as_deref())))
        .unwrap_or_default()
}

/// How many PIDs a family's sentence lists before it counts the rest.
const PIDS_LISTED: usize = 8;

/// `PIDs 4, 5 and 6`, or `PIDs 4, 5, …, 11 and 24 more` (pure).
fn pid_list(pids: impl Iterator<Item = i32>) -> String {
    let pids: Vec<String> = pids.map(|p| p.to_string()).collect();
    match pids.len() {
        0 => String::new(),
        1 => format!("PID {}", pids[0]),
        n if n <= PIDS_LISTED => format!("PIDs {} and {}", pids[..n - 1].join(", "), pids[n - 1]),
        n => format!(
            "PIDs {} and {} more",
            pids[..PIDS_LISTED].join(", "),
            n - PIDS_LISTED
        ),
    }
}

/// One failure per process, its obstacles together, by PID, with its name
/// (pure).
fn by_process<'a>(
    found: impl IntoIterator<Item = &'a Undumpable>,
) -> BTreeMap<i32, (Option<String>, Fault)> {
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
                (
                    f.name.clone(),
                    Fault::new(
                        FaultKind::Undumpable,
                        format!("{who}{} {message}", parent_clause(f)),
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
        Obstacle::Device(path) if found.compile_pool.is_some() => (
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
            compile_pool: None,
        }
    }

    #[test]
    fn a_compile_worker_gets_the_pool_s_fix_not_the_dataloader_s() {
        let pool_worker = Undumpable {
            compile_pool: Some(100),
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
    fn a_compile_pool_and_its_workers_are_one_sentence_with_their_count() {
        let pool = Undumpable {
            name: Some("python3".to_string()),
            compile_pool: Some(100),
            ..worker(100, Obstacle::Device("/dev/nvidiactl".into()))
        };
        let mut found = vec![pool];
        found[0].parent = Some((50, Some("torchrun".to_string())));
        found.extend((101..=132).map(|pid| Undumpable {
            compile_pool: Some(100),
            parent: Some((100, Some("python3".to_string()))),
            ..worker(pid, Obstacle::Device("/dev/nvidiactl".into()))
        }));
        let told = failures(&found);
        assert_eq!(told.len(), 1, "{told:?}");
        let message = &told[0].message;
        assert!(
            message.starts_with("torch.compile's compile-worker pool, PID 100 (python3), a child of PID 50 (torchrun), and its workers, 33 processes (PIDs 100, 101, 102, 103, 104, 105, 106, 107 and 25 more), map /dev/nvidiactl but hold no CUDA state"),
            "{message}"
        );
        assert!(message.len() < 500, "{} bytes: {message}", message.len());
        let refusal = together(told.into_iter());
        assert_eq!(refusal.hint.as_deref(), Some(COMPILE_POOL_FIX));
    }

    #[test]
    fn one_parent_s_forked_children_are_one_sentence_and_other_obstacles_their_own() {
        let mut found: Vec<Undumpable> = (101..=104)
            .map(|pid| worker(pid, Obstacle::Device("/dev/nvidia0".into())))
            .collect();
        found.push(worker(104, Obstacle::IoUring));
        found.push(Undumpable {
            parent: Some((200, Some("python3".to_string()))),
            ..worker(201, Obstacle::Device("/dev/nvidia1".into()))
        });
        let told = failures(&found);
        let messages: Vec<&str> = told.iter().map(|f| f.message.as_str()).collect();
        assert_eq!(
            messages[0].split(':').next(),
            Some("4 children of PID 100 (python3) (PIDs 101, 102, 103 and 104) map /dev/nvidia0 but hold no CUDA state"),
            "{messages:?}"
        );
        assert_eq!(
            messages[1],
            "PID 104 (pt_data_worker), a child of PID 100 (python3), holds an io_uring ring (anon_inode:[io_uring]), which CRIU 4.2 cannot dump"
        );
        // A family of one keeps the words for one process.
        assert!(
            messages[2].starts_with(
                "PID 201 (pt_data_worker), a child of PID 200 (python3), maps /dev/nvidia1"
            ),
            "{messages:?}"
        );
        assert_eq!(told.len(), 3);
    }

    #[test]
    fn a_pid_list_counts_what_it_does_not_show() {
        assert_eq!(pid_list([7].into_iter()), "PID 7");
        assert_eq!(pid_list([7, 8].into_iter()), "PIDs 7 and 8");
        assert_eq!(pid_list(1..=8), "PIDs 1, 2, 3, 4, 5, 6, 7 and 8");
        assert_eq!(pid_list(1..=9), "PIDs 1, 2, 3, 4, 5, 6, 7, 8 and 1 more");
    }

    #[test]
    fn a_device_path_cannot_start_a_line_of_its_own() {
        let failures = by_process(&[worker(7, Obstacle::Device("/dev/nvidia\nFAKE".into()))]);
        assert!(!failures[&7].1.message.contains('\n'));
    }
}
