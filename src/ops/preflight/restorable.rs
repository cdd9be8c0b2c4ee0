//! Never start what cannot be undone (docs/driver-facts.md, F4): before the first lock of a
//! command that will checkpoint, each target is examined for what the
//! driver is known not to restore, and such a target refuses the whole
//! group (exit 8) with the evidence, what the driver does, and the fix.
//! `--force` (`CUDACKPT_FORCE=1` for the compatible grammar and CRIU's hook)
//! checkpoints anyway. The facts are keyed by driver version, so a driver
//! that restores more turns a refusal into a warning.
//!
//! A rank that is accepted (NCCL over sockets only) gets a warning: every
//! rank must be suspended together. A process that merely maps libnccl
//! (every PyTorch process does) is no rank and gets none.
//!
//! A process that shows the drain marker (cudackpt(1), DRAIN PROTOCOL) said it released what
//! the driver cannot restore: its launcher's world size is no longer held
//! against it (and the report says so), but the evidence still is: a live
//! `pt_nccl_*` thread or a CUDA IPC mapping refuses it all the same. The
//! marker is a thread name any process can take, so it counts only for a
//! process the caller vouches for: one this command asked and saw answer,
//! or one a cudackpt drained and left drained (`crate::drain::left_drained`).

use crate::drain::protocol;
use crate::driver::{CheckpointApi, Driver, ProcessState};
use crate::ops::diagnose::describe_process;
use crate::ops::execute::concurrently;
use crate::targets::evidence::{self, Evidence, RankSign};
use crate::targets::process::Target;
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::plan::Operation;
use crate::vocabulary::ready::Ready;
use crate::vocabulary::report::TargetReport;
use crate::vocabulary::request::Request;
use crate::vocabulary::stop::Stop;

/// What a driver does with a checkpoint of such a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The checkpoint succeeds and no restore ever does: refuse.
    Lost,
    /// Restorable on this driver, with care: warn.
    Restorable,
}

/// What one range of drivers restores, as measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestoreFacts {
    /// The oldest driver (CUDA version, 13000 = 13.0) this row is about.
    pub from_cuda: i32,
    /// A process that shares GPU memory through CUDA IPC.
    pub ipc: Verdict,
    /// A rank of a multi-process NCCL job using P2P or SHM transports.
    pub nccl_p2p_shm: Verdict,
    /// Where the row comes from.
    pub source: &'static str,
}

/// The facts, oldest driver first. Drivers newer than the last measured one
/// are taken to behave like it (and the report says so), until measured.
pub const FACTS: [RestoreFacts; 1] = [RestoreFacts {
    from_cuda: 0,
    ipc: Verdict::Lost,
    nccl_p2p_shm: Verdict::Lost,
    source: "measured on driver 580.159.04 (CUDA 13.0)",
}];

/// The newest CUDA version the facts were measured on.
const LAST_MEASURED_CUDA: i32 = 13000;

/// The facts in force for a driver (CUDA version, when known).
pub fn facts_for(cuda_version: Option<i32>) -> RestoreFacts {
    let version = cuda_version.unwrap_or(LAST_MEASURED_CUDA);
    FACTS
        .iter()
        .rev()
        .find(|row| row.from_cuda <= version)
        .copied()
        .unwrap_or(FACTS[0])
}

/// What the pre-flight found about one target.
#[derive(Debug, Clone, PartialEq)]
struct Finding {
    pid: i32,
    verdict: Verdict,
    failure: Fault,
}

/// What the pre-flight lets through, with its words for the report.
#[derive(Debug, Default)]
pub struct Passed {
    /// Warnings for processes let through (PID, words).
    pub warnings: Vec<(i32, String)>,
    /// Drained processes whose launcher environment was not held against
    /// them (PID, the evidence set aside).
    pub exempted: Vec<(i32, String)>,
}

/// The pre-flight of a request, or the stop of the group before any lock.
/// `vouched` says whose drain marker may be believed.
pub fn check(
    request: &Request<'_>,
    ready: &Ready,
    vouched: &dyn Fn(i32) -> bool,
) -> Result<Passed, Stop> {
    if !request.operation.checkpoints() {
        return Ok(Passed::default());
    }
    let facts = facts_for(ready.driver.version().ok());
    let evidence = concurrently(&ready.targets, |t| evidence::gather(t.pid));
    let mut passed = Passed::default();
    let mut findings: Vec<Finding> = Vec::new();
    for (target, found) in ready.targets.iter().zip(&evidence) {
        if found.past_cap {
            passed.warnings.push((target.pid, past_cap(target.pid)));
        }
        let drained = protocol::shows_marker(&found.threads) && vouched(target.pid);
        let (finding, exempted) = judge(target, found, &facts, drained);
        findings.extend(finding);
        passed
            .exempted
            .extend(exempted.map(|words| (target.pid, words)));
    }
    // A toggle checkpoints only the running ones: ask the suspects (a
    // read-only query; the clean ones cost no driver call).
    if matches!(request.operation, Operation::Toggle { .. }) {
        findings.retain(|f| will_checkpoint(&ready.driver, f.pid));
    }
    let mut refused = Vec::new();
    for finding in findings {
        match (finding.verdict, request.force) {
            (Verdict::Restorable, _) => {
                passed.warnings.push((finding.pid, finding.failure.message))
            }
            (Verdict::Lost, true) => passed.warnings.push((
                finding.pid,
                format!(
                    "{} (checkpointing anyway: --force)",
                    finding.failure.message
                ),
            )),
            (Verdict::Lost, false) => refused.push(finding),
        }
    }
    let Some(first) = refused.first().map(|f| f.pid) else {
        return Ok(passed);
    };
    let ran = refused
        .into_iter()
        .map(|f| TargetReport {
            failure: Some(f.failure),
            ..TargetReport::new(f.pid, name_of(ready, f.pid))
        })
        .collect();
    Err(Stop::Declined {
        refused: ran,
        others: Some(Fault::not_attempted(format!(
            "PID {first} could not be restored after a checkpoint"
        ))),
    })
}

/// What was not checked in a process whose /proc files go on past the caps.
fn past_cap(pid: i32) -> String {
    format!(
        "/proc/{pid}/maps goes on past {} MiB or {} lines, or the process has more than {} threads, and cudackpt reads no further (a process can make those as large as it likes): the CUDA IPC and NCCL checks saw only that part, so what lies past it was not checked",
        crate::targets::procfs::MAPS_BYTES_CAP >> 20,
        crate::targets::procfs::MAPS_LINES_CAP,
        crate::targets::evidence::TASKS_CAP
    )
}

/// What the pre-flight holds against each target now, as words, whatever
/// the marker says (for a dry run of a drain: what each must release).
pub fn pending(ready: &Ready) -> Vec<(i32, String)> {
    let facts = facts_for(ready.driver.version().ok());
    let evidence = concurrently(&ready.targets, |t| evidence::gather(t.pid));
    ready
        .targets
        .iter()
        .zip(&evidence)
        .filter_map(|(target, found)| {
            let finding = judge(target, found, &facts, false).0?;
            (finding.verdict == Verdict::Lost).then_some((target.pid, finding.failure.message))
        })
        .collect()
}

fn name_of(ready: &Ready, pid: i32) -> Option<String> {
    ready
        .targets
        .iter()
        .find(|t| t.pid == pid)
        .map(|t| t.name.clone())
}

/// Whether a toggle would checkpoint `pid` (it is running or locked).
fn will_checkpoint(driver: &Driver, pid: i32) -> bool {
    !matches!(
        driver.get_state(pid),
        Ok(ProcessState::Checkpointed | ProcessState::Failed)
    )
}

/// The finding about one target, if any, and for a drained target the
/// evidence set aside (pure).
fn judge(
    target: &Target,
    found: &Evidence,
    facts: &RestoreFacts,
    drained: bool,
) -> (Option<Finding>, Option<String>) {
    let who = describe_process(target.pid, Some(&target.name));
    let (set_aside, signs): (Vec<&RankSign>, Vec<&RankSign>) = found
        .rank_signs
        .iter()
        .partition(|sign| drained && matches!(sign, RankSign::WorldSize { .. }));
    let finding = judge_evidence(target, &who, found, &signs, facts, drained);
    // Said only of a process the evidence then lets through: one still
    // held to its threads or an IPC mapping has its refusal (or, forced,
    // its warning) say why instead.
    let exempted = (finding.is_none() && !set_aside.is_empty()).then(|| {
        let words: Vec<String> = set_aside
            .iter()
            .map(|sign| sign_text(target.pid, sign))
            .collect();
        format!(
            "acknowledged the drain: its launcher's {} is not held against it; no live NCCL thread and no CUDA IPC mapping were found",
            words.join(", ")
        )
    });
    (finding, exempted)
}

/// Where /proc shows a rank sign of `pid` (pure).
fn sign_text(pid: i32, sign: &RankSign) -> String {
    match sign {
        RankSign::NcclThread { tid, name } => {
            format!(
                "thread {} (TID {tid}) in /proc/{pid}/task",
                crate::targets::name::printable(name)
            )
        }
        RankSign::WorldSize { var, size } => format!("{var}={size} in /proc/{pid}/environ"),
    }
}

/// How a CUDA IPC party shares GPU memory, naming its peers by host PID
/// (pure): "exports GPU memory to PID 7", "shares GPU memory with PID 3".
fn ipc_sharing(found: &Evidence) -> String {
    let peers: Vec<String> = found
        .ipc_peers
        .pids
        .iter()
        .map(|p| format!("PID {p}"))
        .collect();
    let mut with = match (found.ipc_peers.exports, peers.is_empty()) {
        (true, true) => "exports GPU memory to other processes".to_string(),
        (true, false) => format!("exports GPU memory to {}", peers.join(", ")),
        (false, true) => "imports GPU memory from another process".to_string(),
        (false, false) => format!("shares GPU memory with {}", peers.join(", ")),
    };
    for gone in &found.ipc_peers.unresolved {
        with.push_str(&format!(
            " (its exporter was PID {gone} of its PID namespace, and no process is now)"
        ));
    }
    with
}

/// How every refusal of a checkpoint the driver could not restore ends its
/// hint.
const FORCE: &str = "or checkpoint anyway with --force (CUDACKPT_FORCE=1 for NVIDIA's grammar and CRIU's hook), knowing the restore will fail";

/// The finding from the evidence still held against a target (pure).
fn judge_evidence(
    target: &Target,
    who: &str,
    found: &Evidence,
    signs: &[&RankSign],
    facts: &RestoreFacts,
    drained: bool,
) -> Option<Finding> {
    let drained_yet = if drained {
        "it acknowledged the drain, yet "
    } else {
        ""
    };
    if found.is_ipc_party() {
        let with = ipc_sharing(found);
        // The files' names are the mapping process's to choose: escaped.
        let files: Vec<std::borrow::Cow<'_, str>> = found
            .ipc_files
            .iter()
            .map(|f| crate::targets::name::printable(&f.path))
            .collect();
        return Some(Finding {
            pid: target.pid,
            verdict: facts.ipc,
            failure: Fault::new(
                FaultKind::Unrestorable,
                format!(
                    "refused before any change: {drained_yet}{who} {with} through CUDA IPC ({} in /proc/{}/maps); {}, such a checkpoint succeeds and every restore fails: the process would be lost",
                    files.join(", "),
                    target.pid,
                    facts.source
                ),
                format!("stop sharing CUDA memory between processes before checkpointing (no CUDA IPC, e.g. torch.multiprocessing with CUDA tensors; a drain client must drop every shared tensor before it acknowledges), {FORCE}"),
            ),
        });
    }
    if !signs.is_empty() {
        return Some(rank_finding(
            target,
            &format!("{drained_yet}{who}"),
            found,
            signs,
            facts,
            drained,
        ));
    }
    None
}

/// The finding on a rank of a multi-process job, from the signs that make
/// it one (pure): `who` says who it is (and that it acknowledged a drain,
/// when it did).
fn rank_finding(
    target: &Target,
    who: &str,
    found: &Evidence,
    signs: &[&RankSign],
    facts: &RestoreFacts,
    drained: bool,
) -> Finding {
    // What was seen, said as seen: a launcher's world size alone does
    // not show NCCL (a gloo job has one too).
    let nccl_seen = signs
        .iter()
        .any(|sign| matches!(sign, RankSign::NcclThread { .. }));
    let signs: Vec<String> = signs
        .iter()
        .map(|sign| sign_text(target.pid, sign))
        .collect();
    let job = if nccl_seen {
        "a multi-process NCCL job"
    } else {
        "a multi-process job"
    };
    let rank = format!("{who} is a rank of {job} ({})", signs.join("; "));
    if found.socket_transport_only {
        return Finding {
            pid: target.pid,
            verdict: Verdict::Restorable,
            failure: Fault::new(
                FaultKind::Unrestorable,
                format!("{rank}, over NCCL's socket transport (restorable): suspend and resume every rank together"),
                "",
            ),
        };
    }
    let why = if nccl_seen {
        format!(
            "whose P2P or shared-memory transport is in use; {}, such a checkpoint succeeds and every restore fails: the job would be lost",
            facts.source
        )
    } else {
        format!(
            "and shows no NCCL thread: whether its ranks share GPU memory (NCCL's P2P or shared-memory transports, CUDA IPC) cannot be told from /proc, and if they do, {}, such a checkpoint succeeds and every restore fails",
            facts.source
        )
    };
    let hint = if drained {
        format!("its drain client must release every NCCL process group before it acknowledges (destroy it, or ncclCommSuspend on NCCL 2.29.7 and later); {FORCE}")
    } else if nccl_seen {
        format!("relaunch the job with NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 (the socket transport restores) and suspend every rank together, or drain it first (--drain, with a drain client in the job), {FORCE}")
    } else {
        format!("drain it (--drain, with a drain client in the job: `import cudackpt_drain`), which vouches for each rank; a job whose ranks share no GPU memory (gloo on CPU tensors) restores: suspend every rank together with --force; or relaunch with NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1, {FORCE}")
    };
    Finding {
        pid: target.pid,
        verdict: facts.nccl_p2p_shm,
        failure: Fault::new(
            FaultKind::Unrestorable,
            format!("refused before any change: {rank} {why}"),
            hint,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::targets::evidence::{IpcFile, IpcPeers};

    fn target(pid: i32) -> Target {
        Target {
            pid,
            name: "python3".to_string(),
            stopped: false,
            parent: 1,
            identity: Default::default(),
        }
    }

    #[test]
    fn the_facts_of_the_last_measured_driver_hold_for_newer_ones() {
        assert_eq!(facts_for(Some(12080)).ipc, Verdict::Lost);
        assert_eq!(facts_for(Some(13000)).nccl_p2p_shm, Verdict::Lost);
        assert_eq!(facts_for(Some(99000)), FACTS[FACTS.len() - 1]);
        assert_eq!(facts_for(None), FACTS[FACTS.len() - 1]);
    }

    #[test]
    fn an_ipc_importer_names_its_exporter_and_the_fix() {
        let found = Evidence {
            ipc_files: vec![IpcFile {
                path: "/dev/shm/cuda.shm.0.1f4a.1".into(),
                exporter: Some(0x1f4a),
                id: None,
            }],
            ipc_peers: IpcPeers {
                pids: vec![0x1f4a],
                ..IpcPeers::default()
            },
            ..Evidence::default()
        };
        let finding = judge(&target(42), &found, &FACTS[0], false)
            .0
            .expect("a finding");
        assert_eq!(finding.verdict, Verdict::Lost);
        let message = &finding.failure.message;
        assert!(
            message.contains("shares GPU memory with PID 8010"),
            "{message}"
        );
        assert!(message.contains("/proc/42/maps"), "{message}");
        assert!(finding
            .failure
            .hint
            .as_deref()
            .is_some_and(|h| h.contains("--force")));
    }

    #[test]
    fn ranks_are_refused_unless_over_sockets_and_libnccl_alone_is_nothing() {
        let rank = Evidence {
            rank_signs: vec![RankSign::WorldSize {
                var: "WORLD_SIZE".into(),
                size: 2,
            }],
            ..Evidence::default()
        };
        let refused = judge(&target(7), &rank, &FACTS[0], false)
            .0
            .expect("a finding");
        assert_eq!(refused.verdict, Verdict::Lost);
        assert!(refused
            .failure
            .message
            .contains("WORLD_SIZE=2 in /proc/7/environ"));
        assert!(refused
            .failure
            .hint
            .as_deref()
            .is_some_and(|h| h.contains("NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1")));
        let sockets = Evidence {
            socket_transport_only: true,
            ..rank
        };
        let accepted = judge(&target(7), &sockets, &FACTS[0], false)
            .0
            .expect("a warning");
        assert_eq!(accepted.verdict, Verdict::Restorable);
        assert_eq!(
            judge(&target(7), &Evidence::default(), &FACTS[0], false),
            (None, None)
        );
    }

    #[test]
    fn a_drained_rank_is_exempt_from_its_launcher_environment_but_not_from_its_threads() {
        let world = RankSign::WorldSize {
            var: "WORLD_SIZE".into(),
            size: 2,
        };
        let drained = Evidence {
            rank_signs: vec![world.clone()],
            ..Evidence::default()
        };
        let (finding, exempted) = judge(&target(7), &drained, &FACTS[0], true);
        assert_eq!(finding, None, "the environment alone no longer refuses it");
        let exempted = exempted.expect("the report says what was set aside");
        assert!(
            exempted.contains("acknowledged the drain") && exempted.contains("WORLD_SIZE=2"),
            "{exempted}"
        );

        let still_live = Evidence {
            rank_signs: vec![
                world,
                RankSign::NcclThread {
                    tid: 9,
                    name: "pt_nccl_watchdg".into(),
                },
            ],
            ..Evidence::default()
        };
        let (finding, exempted) = judge(&target(7), &still_live, &FACTS[0], true);
        assert_eq!(
            exempted, None,
            "no exemption is claimed for a refused process"
        );
        let finding = finding.expect("a live NCCL thread refuses it all the same");
        assert_eq!(finding.verdict, Verdict::Lost);
        let message = &finding.failure.message;
        assert!(
            message.contains("acknowledged the drain, yet")
                && message.contains("thread pt_nccl_watchdg (TID 9)")
                && !message.contains("WORLD_SIZE"),
            "{message}"
        );
        let ipc = Evidence {
            ipc_files: vec![IpcFile {
                path: "/dev/shm/cuda.shm.0.7.1".into(),
                exporter: Some(7),
                id: None,
            }],
            ..Evidence::default()
        };
        assert_eq!(
            judge(&target(7), &ipc, &FACTS[0], true)
                .0
                .map(|f| f.verdict),
            Some(Verdict::Lost),
            "a CUDA IPC mapping refuses a drained process"
        );
    }
}
