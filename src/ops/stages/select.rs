//! Stage 1, select: the targets named, plus the CUDA processes found in
//! process trees, cgroups or the whole host. Finding is read-only:
//! candidates come from /proc (libcuda mapped) and the driver's GetState
//! confirms them; nothing is locked to find out.

use std::collections::{HashMap, HashSet};

use crate::driver::{code, CallError, CheckpointApi, Driver, ProcessState};
use crate::ops::execute::cannot_answer;
use crate::ops::execute::concurrently;
use crate::targets::cgroup::{self, Cgroup};
use crate::targets::discover::{self, Mapped};
use crate::targets::process::{self, TargetError};
use crate::targets::procfs;
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::request::{Request, Selectors};

/// What selection found.
pub struct Selection {
    /// Named PIDs first, in order, then the ones found.
    pub pids: Vec<i32>,
    /// What each found process has mapped (libcuda, NCCL).
    pub mapped: HashMap<i32, Mapped>,
    /// The states the driver gave when confirming found processes, for the
    /// report of those that are then not acted on.
    pub known_states: HashMap<i32, ProcessState>,
    /// Remarks on the selection (nothing found).
    pub warnings: Vec<String>,
    /// The driver, when selection had to load it.
    pub driver: Option<Driver>,
    /// The processes that are targets only as members of a tree, and the
    /// trees' members as the walk found them: once a member's pidfd is
    /// held, its parent must be one of them (`check`).
    pub walked: Walked,
}

/// What a walk of the trees found, for the check of each member's parent.
#[derive(Debug, Default)]
pub struct Walked {
    /// Every process of the trees, roots included.
    pub members: HashSet<i32>,
    /// Those selected only for being below a root: not named, not in a
    /// cgroup named, not `--all`.
    pub only_walked: HashSet<i32>,
}

impl Walked {
    /// Why `target` (checked, its pidfd held) is not the tree's process
    /// its PID was (pure): a process selected only by the walk whose parent
    /// is not of the trees.
    pub fn stranger(&self, target: &crate::targets::process::Target) -> Option<String> {
        (self.only_walked.contains(&target.pid) && !self.members.contains(&target.parent)).then(|| {
            format!(
                "PID {} was below the tree's root as the walk read it, and its process now is the child of PID {}, outside the tree: left alone (a PID reused, or a process moved out)",
                target.pid, target.parent
            )
        })
    }
}

/// Selects the targets of a request, or refuses the whole command.
pub fn select(request: &Request<'_>) -> Result<Selection, Fault> {
    let command = request.operation.name();
    let cgroups = open_cgroups(&request.selectors)?;
    if let (Some(what), true, false) = (
        whole_host(&request.selectors, &cgroups),
        request.operation.changes_state(),
        request.confirmed,
    ) {
        return Err(Fault::new(
            FaultKind::Usage,
            format!("{what} would {command} every CUDA process on this host"),
            "add --yes to confirm (CUDACKPT_YES=1 for CRIU's action script), or name the processes (--tree, --cgroup, PIDs)",
        ));
    }
    let mut selection = Selection {
        pids: request.pids.clone(),
        mapped: HashMap::new(),
        known_states: HashMap::new(),
        warnings: Vec::new(),
        driver: None,
        walked: Walked::default(),
    };
    if request.selectors.is_empty() {
        return Ok(selection);
    }
    // The driver is needed this early only to confirm discovered processes.
    let driver = load_driver(request.libcuda)?;
    let Discovered {
        found,
        unreadable,
        past_cap,
        walked,
    } = find(&request.selectors, &cgroups, &driver)?;
    selection.walked = walked;
    if found.is_empty() {
        selection.warnings.push(format!(
            "no CUDA process found in {}",
            request.selectors.describe()
        ));
    }
    if !unreadable.is_empty() {
        say_uninspected(&request.selectors, &unreadable, &mut selection.warnings);
    }
    if !past_cap.is_empty() {
        let named: Vec<(i32, Option<String>)> = past_cap
            .iter()
            .map(|&pid| {
                (
                    pid,
                    process::read_status(pid).ok().flatten().map(|s| s.name),
                )
            })
            .collect();
        selection.warnings.push(inspected_in_part(&named));
    }
    for FoundProcess { pid, map, state } in found {
        selection.mapped.insert(pid, map);
        if let Some(state) = state {
            selection.known_states.insert(pid, state);
        }
        if !selection.pids.contains(&pid) {
            selection.pids.push(pid);
        }
    }
    selection.driver = Some(driver);
    Ok(selection)
}

/// Says which processes could not be inspected: in the log only for
/// root's sweep of the whole host, which meets processes no one may
/// inspect (a sandbox's init, in a container) at every `ps`; as a warning
/// for another user's sweep, or a tree or cgroup named.
fn say_uninspected(selectors: &Selectors, unreadable: &[i32], warnings: &mut Vec<String>) {
    let uid = rustix::process::geteuid().as_raw();
    let remark = uninspected(unreadable, uid);
    if uid == 0 && selectors.all && selectors.trees.is_empty() && selectors.cgroups.is_empty() {
        tracing::info!("{remark}");
    } else {
        warnings.push(remark);
    }
}

/// The selector that reaches every process of the host, in words: `--all`,
/// but also the tree of PID 1 (`--tree 1`, CRIU's `CRTOOLS_INIT_PID=1`) and
/// the root cgroup (`--cgroup /`), which are the whole host too.
fn whole_host(selectors: &Selectors, cgroups: &[Cgroup]) -> Option<String> {
    if selectors.all {
        return Some("--all".to_string());
    }
    if selectors.trees.contains(&1) {
        return Some("the tree of PID 1 (the whole host)".to_string());
    }
    cgroups.iter().find(|c| c.is_root()).map(|cgroup| {
        format!(
            "cgroup {} (the root of its hierarchy: the whole host)",
            cgroup.path.display()
        )
    })
}

/// The cgroups the selectors name, opened and known to be cgroups, or the
/// refusal of the whole command before the driver is loaded: a plain
/// directory holding a file named cgroup.procs names whatever PIDs its
/// owner wrote there. A `CUDACKPT_CGROUP_ROOT` that is no cgroup v2 mount
/// is refused as well, even where no `--cgroup` reads it.
fn open_cgroups(selectors: &Selectors) -> Result<Vec<Cgroup>, Fault> {
    let usage = |why: String| {
        Fault::new(
            FaultKind::Usage,
            why,
            "give a cgroup directory, e.g. /sys/fs/cgroup/kubepods.slice/...",
        )
    };
    cgroup::check_root_override().map_err(|why| usage(why.to_string()))?;
    selectors
        .cgroups
        .iter()
        .map(|path| Cgroup::resolve(path).map_err(|why| usage(format!("--cgroup: {why}"))))
        .collect()
}

/// The PIDs the selectors name, before any is confirmed, and what the
/// walk of the trees found.
fn candidate_pids(selectors: &Selectors, cgroups: &[Cgroup]) -> Result<(Vec<i32>, Walked), Fault> {
    let mut pids = Vec::new();
    if let Some(&root) = selectors
        .trees
        .iter()
        .find(|&&root| !process::is_alive(root))
    {
        let error = TargetError::NoSuchProcess { pid: root };
        return Err(Fault::new(
            FaultKind::NoSuchProcess,
            format!("--tree {root}: {error}"),
            error.hint(),
        ));
    }
    let members = discover::trees(&selectors.trees);
    if !selectors.trees.is_empty() {
        process::debug_pause(crate::environment::DEBUG_PAUSE_AFTER_WALK);
    }
    pids.extend(&members);
    let mut walked = Walked {
        only_walked: members
            .iter()
            .copied()
            .filter(|pid| !selectors.trees.contains(pid))
            .collect(),
        members: members.into_iter().collect(),
    };
    for cgroup in cgroups {
        let members = cgroup.pids().map_err(|e| {
            Fault::new(
                FaultKind::ProcUnreadable,
                format!("could not read cgroup {}: {e}", cgroup.path.display()),
                "",
            )
        })?;
        for pid in &members {
            walked.only_walked.remove(pid);
        }
        pids.extend(members);
    }
    pids.extend(&selectors.candidates);
    for pid in &selectors.candidates {
        walked.only_walked.remove(pid);
    }
    if selectors.all {
        pids = discover::all_pids();
        walked.only_walked.clear();
    }
    pids.sort_unstable();
    pids.dedup();
    Ok((pids, walked))
}

/// How many uninspected processes a remark names; the rest are counted.
const NAMED_UNINSPECTED: usize = 10;

/// The first [`NAMED_UNINSPECTED`] of `labels`, then how many more (pure).
fn first_named(labels: Vec<String>) -> String {
    let more = labels.len().saturating_sub(NAMED_UNINSPECTED);
    let mut named = labels
        .into_iter()
        .take(NAMED_UNINSPECTED)
        .collect::<Vec<_>>()
        .join(", ");
    if more > 0 {
        named.push_str(&format!(" and {more} more"));
    }
    named
}

/// The remark on processes whose maps user `uid` may not read, naming them
/// (pure).
fn uninspected(pids: &[i32], uid: u32) -> String {
    let named = first_named(pids.iter().map(ToString::to_string).collect());
    let which = if pids.len() == 1 {
        format!("PID {named} could not be inspected")
    } else {
        format!("PIDs {named} could not be inspected")
    };
    let one = pids.len() == 1;
    let (its, is) = if one { ("its", "is") } else { ("their", "are") };
    let (among, a_cuda) = if one {
        (
            "it would not be listed were it a CUDA process",
            "it is not listed if it is a CUDA process",
        )
    } else {
        (
            "a CUDA process among them would not be listed",
            "CUDA processes among them are not listed",
        )
    };
    if uid == 0 {
        return format!(
            "{which}: {its} /proc/PID/maps {is} not readable even by root (another user namespace, or a process the kernel shields), so {among}"
        );
    }
    format!(
        "{which}: uid {uid} may not read {its} /proc/PID/maps (another user's process), so {a_cuda}; run as root or with CAP_SYS_PTRACE to see every one"
    )
}

/// The remark on processes whose maps go on past the cap with no CUDA
/// driver in the part read, naming them (pure).
fn inspected_in_part(processes: &[(i32, Option<String>)]) -> String {
    let named = first_named(
        processes
            .iter()
            .map(|(pid, name)| match name {
                Some(name) => format!("{pid} ({})", crate::targets::name::printable(name)),
                None => pid.to_string(),
            })
            .collect(),
    );
    let (which, their) = if processes.len() == 1 {
        (format!("PID {named} was"), "its")
    } else {
        (format!("PIDs {named} were"), "their")
    };
    format!(
        "{which} inspected only in part: {their} /proc/PID/maps goes on past {} MiB or {} lines, and the part read shows no CUDA driver; cudackpt reads no further (a process can make that file as large as it likes), so a CUDA process among them would not be listed: name it by PID to act on it",
        procfs::MAPS_BYTES_CAP >> 20,
        procfs::MAPS_LINES_CAP
    )
}

/// What the selectors' processes showed.
struct Discovered {
    /// The CUDA processes, with what each has mapped.
    found: Vec<FoundProcess>,
    /// Those whose maps could not be read.
    unreadable: Vec<i32>,
    /// Those inspected only in part (maps past the cap).
    past_cap: Vec<i32>,
    /// What the walk of the trees found.
    walked: Walked,
}

/// The CUDA processes the selectors pick, and those that could not be
/// inspected whole. Processes that never initialised CUDA, or that vanish
/// meanwhile, are skipped.
fn find(selectors: &Selectors, cgroups: &[Cgroup], driver: &Driver) -> Result<Discovered, Fault> {
    let (pids, walked) = candidate_pids(selectors, cgroups)?;
    let driver_path = driver.path();
    let driver_file = driver_path.file_name().and_then(|n| n.to_str());
    let discover::Scan {
        found: candidates,
        unreadable,
        past_cap,
    } = discover::cuda_candidates(&pids, driver_file);
    // A stopped candidate is kept unconfirmed: asking the driver would wait
    // until it runs. The checks after selection report it as stopped.
    // Each answer: `None` not a CUDA process (or gone); `Some(state)` one,
    // with its state when the driver could be asked.
    let confirmed = concurrently(&candidates, |(pid, _)| {
        if cannot_answer(driver, *pid) {
            return Some(None);
        }
        match driver.get_state(*pid) {
            Ok(state) => Some(Some(state)),
            Err(CallError::Cuda { error, .. })
                if error.is(code::NOT_INITIALIZED) || error.is(code::OPERATING_SYSTEM) =>
            {
                None
            }
            Err(_) => Some(None),
        }
    });
    let found = candidates
        .into_iter()
        .zip(confirmed)
        .filter_map(|((pid, map), answer)| {
            Some(FoundProcess {
                pid,
                map,
                state: answer?,
            })
        })
        .collect();
    Ok(Discovered {
        found,
        unreadable,
        past_cap,
        walked,
    })
}

/// A CUDA process selection found.
struct FoundProcess {
    pid: i32,
    map: Mapped,
    /// What the driver said when asked to confirm it.
    state: Option<ProcessState>,
}

/// Loads the driver for process commands, or says why it cannot.
pub(crate) fn load_driver(libcuda: Option<&std::path::Path>) -> Result<Driver, Fault> {
    Driver::load_for_checkpoint(libcuda)
        .map_err(|error| crate::ops::diagnose::from_load_error(&error))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocabulary::plan::Operation;

    /// A walked member is the tree's while its parent is; a PID named or
    /// in a cgroup is judged by no walk.
    #[test]
    fn a_walked_member_whose_parent_is_outside_the_tree_is_a_stranger() {
        let walked = Walked {
            members: HashSet::from([10, 11, 12]),
            only_walked: HashSet::from([11, 12]),
        };
        let target = |pid, parent| crate::targets::process::Target {
            pid,
            name: "sleep".into(),
            stopped: false,
            parent,
            identity: Default::default(),
        };
        assert_eq!(walked.stranger(&target(11, 10)), None);
        assert_eq!(walked.stranger(&target(12, 11)), None);
        let why = walked.stranger(&target(12, 1)).expect("a stranger");
        assert!(
            why.contains("PID 12") && why.contains("child of PID 1"),
            "{why}"
        );
        assert_eq!(walked.stranger(&target(10, 1)), None, "the root");
        assert_eq!(walked.stranger(&target(99, 1)), None, "not walked");
    }

    #[test]
    fn processes_not_inspected_are_named_then_counted() {
        assert!(uninspected(&[42], 0).starts_with("PID 42 could not be inspected: "));
        let many: Vec<i32> = (1..=13).collect();
        let remark = uninspected(&many, 1000);
        assert!(
            remark.starts_with("PIDs 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 3 more could not be inspected: uid 1000 may not read"),
            "{remark}"
        );
    }
    use crate::vocabulary::timeout::Timeout;
    use std::path::PathBuf;

    fn request(operation: Operation, all: bool, confirmed: bool) -> Request<'static> {
        Request {
            selectors: Selectors {
                all,
                ..Selectors::default()
            },
            confirmed,
            pids: vec![7, 3],
            ..Request::new(None, operation)
        }
    }

    #[test]
    fn all_needs_yes_only_to_change_state() {
        let suspend = Operation::Suspend {
            timeout: Timeout::NONE,
        };
        let refused = select(&request(suspend, true, false))
            .err()
            .expect("--all without --yes is refused");
        assert_eq!(refused.kind, FaultKind::Usage);
        assert!(
            refused.message.contains("every CUDA process"),
            "{refused:?}"
        );
    }

    #[test]
    fn the_tree_of_pid_1_is_the_whole_host() {
        let request = Request {
            selectors: Selectors {
                trees: vec![1],
                ..Selectors::default()
            },
            ..Request::new(
                None,
                Operation::Suspend {
                    timeout: Timeout::NONE,
                },
            )
        };
        let refused = select(&request).err().expect("refused without --yes");
        assert!(
            refused.message.starts_with("the tree of PID 1"),
            "{refused:?}"
        );
        assert_eq!(whole_host(&Selectors::default(), &[]), None);
    }

    #[test]
    fn named_pids_alone_need_no_driver_and_keep_their_order() {
        let selection = select(&request(Operation::Unlock, false, false)).expect("selected");
        assert_eq!(selection.pids, [7, 3]);
        assert!(
            selection.driver.is_none(),
            "no driver loaded for named PIDs"
        );
        assert!(selection.warnings.is_empty());
    }

    #[test]
    fn a_missing_tree_root_is_no_such_process() {
        let selectors = Selectors {
            trees: vec![i32::MAX],
            ..Selectors::default()
        };
        let failure = candidate_pids(&selectors, &[]).expect_err("no such process");
        assert_eq!(failure.kind, FaultKind::NoSuchProcess);
        assert!(failure.message.starts_with(&format!("--tree {}", i32::MAX)));
    }

    #[test]
    fn selectors_describe_where_they_looked() {
        let selectors = Selectors {
            trees: vec![4],
            cgroups: vec![PathBuf::from("/sys/fs/cgroup/pod")],
            all: true,
            candidates: vec![9],
        };
        assert_eq!(
            selectors.describe(),
            "the tree of PID 4, cgroup /sys/fs/cgroup/pod, this host, PID 9"
        );
    }
}
