//! Text for people: one aligned line per process on stdout, and for each
//! failure a message and a hint on stderr.

use super::look::{format_duration, Look};
use crate::drain::report::{DrainRecord, DrainVerdict};
use crate::targets::name::printable;
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::report::{CommandReport, Layout, TargetReport};

/// Renders a process command's report: (stdout, stderr).
pub fn process_report(report: &CommandReport, look: Look) -> (String, String) {
    let mut rows: Vec<Vec<String>> = Vec::with_capacity(report.processes.len() + 1);
    let header = match report.layout {
        Layout::State => vec!["PID", "STATE", "RESTORE-TID", "NAME"],
        Layout::RestoreTid => vec!["PID", "RESTORE-TID", "NAME"],
        Layout::Wait => vec!["PID", "STATE", "WAITED", "NAME"],
        Layout::Listing => vec!["PID", "STATE", "RESTORE-TID", "GPU-MEM", "NCCL", "NAME"],
        Layout::Change => vec!["PID", "NAME", "RESULT", "TIME"],
    };
    rows.push(header.into_iter().map(|h| look.dim(h)).collect());
    for process in &report.processes {
        rows.push(row(report.layout, report.prediction, process, look));
    }
    let mut errors = String::new();
    if let Some(failure) = &report.failure {
        errors.push_str(&failure_text(failure));
    }
    for warning in &report.warnings {
        errors.push_str(&super::stderr::warning_line(warning));
    }
    // The same failure of several processes (a signal that rolled the
    // group back) is said once, naming them all.
    let mut failures: Vec<(&Fault, Vec<i32>)> = Vec::new();
    for process in &report.processes {
        for warning in &process.warnings {
            let who = crate::ops::diagnose::describe_process(process.pid, process.name.as_deref());
            errors.push_str(&super::stderr::warning_line(&format!("{who}: {warning}")));
        }
        for failure in [&process.failure, &process.rollback_failure]
            .into_iter()
            .flatten()
            .filter(|f| !matches!(f.kind, FaultKind::NotAttempted | FaultKind::RolledBack))
        {
            match failures.iter_mut().find(|(seen, _)| *seen == failure) {
                Some((_, pids)) => pids.push(process.pid),
                None => failures.push((failure, vec![process.pid])),
            }
        }
    }
    for (failure, pids) in failures {
        if pids.len() == 1 {
            errors.push_str(&failure_text(failure));
        } else {
            let who = crate::vocabulary::prose::pids(&pids);
            errors.push_str(&failure_text(&Fault {
                message: format!("{who}: {}", failure.message),
                ..failure.clone()
            }));
        }
    }
    // A command that found no process prints no empty table.
    let table = if report.processes.is_empty() {
        String::new()
    } else {
        super::look::columns_within(&rows, look.width)
    };
    (table, errors)
}

fn row(layout: Layout, prediction: bool, p: &TargetReport, look: Look) -> Vec<String> {
    let pid = p.pid.to_string();
    // A name is its process's to choose: never raw on a terminal.
    let name = p
        .name
        .as_deref()
        .map_or_else(|| "-".to_string(), |n| printable(n).into_owned());
    let tid = p
        .restore_tid
        .map_or_else(|| "-".to_string(), |t| t.to_string());
    let outcome = if p.stopped {
        look.dim("stopped")
    } else if p.failure.is_some() && p.state.is_none() {
        // As the JSON says it: the state is not known (the failure, on
        // stderr, says why).
        look.bad("unknown")
    } else {
        look.state(p.state)
    };
    match layout {
        Layout::State => vec![pid, outcome, tid, name],
        Layout::RestoreTid => vec![pid, if p.ok() { tid } else { look.bad("unknown") }, name],
        Layout::Wait => vec![pid, outcome, format_duration(p.duration), name],
        Layout::Listing => {
            let nccl = match p.nccl {
                Some(true) => "yes",
                Some(false) => "no",
                None => "-",
            };
            let memory = p
                .gpu_memory
                .map_or("-".to_string(), |m| format!("{} MiB", m.bytes() >> 20));
            vec![pid, outcome, tid, memory, nccl.to_string(), name]
        }
        Layout::Change => {
            // No time was spent on a process nothing reached (a dry run, a
            // refusal): "-", not "0.000 ms".
            let time = if p.duration.is_zero() {
                "-".to_string()
            } else {
                format_duration(p.duration)
            };
            vec![pid, name, result(p, prediction, look), time]
        }
    }
}

/// The result column, with what the drain handshake did, if anything.
fn result(p: &TargetReport, prediction: bool, look: Look) -> String {
    let base = match (&p.failure, prediction) {
        (Some(failure), true) => predicted_refusal(failure, look),
        _ => moved_or_failed(p, look),
    };
    match p.drain.as_ref().and_then(drain_words) {
        Some(words) => format!("{base}; {words}"),
        None => base,
    }
}

/// `drained (0.81 s, released 8.2 GiB)`, `rebuilt (1.20 s)`, `did not
/// drain`.
fn drain_words(drain: &DrainRecord) -> Option<String> {
    let took = |d: Option<std::time::Duration>| {
        d.map_or(String::new(), |d| format!(" ({})", format_duration(d)))
    };
    let released = drain
        .released_bytes
        .map(|bytes| format!("released {}", gib(bytes)));
    Some(match drain.outcome {
        // The failure already says so.
        DrainVerdict::WouldDrain | DrainVerdict::CannotDrain | DrainVerdict::NotAcknowledged => {
            return None
        }
        DrainVerdict::Drained => {
            let said: Vec<String> = drain
                .acknowledged
                .map(format_duration)
                .into_iter()
                .chain(released)
                .collect();
            if said.is_empty() {
                "drained".to_string()
            } else {
                format!("drained ({})", said.join(", "))
            }
        }
        DrainVerdict::Rebuilt => format!("rebuilt{}", took(drain.rebuilt)),
        DrainVerdict::NotRebuilt => "not rebuilt".to_string(),
        DrainVerdict::RebuildFailed => "rebuild failed".to_string(),
        DrainVerdict::RebuildAsked => "asked to rebuild once it runs".to_string(),
        DrainVerdict::NotNeeded => "nothing to drain".to_string(),
    })
}

/// Bytes as GiB with one decimal (`8.2 GiB`), or MiB below one GiB.
fn gib(bytes: u64) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / (MIB * 1024.0))
    } else {
        format!("{:.0} MiB", bytes as f64 / MIB)
    }
}

/// `running → checkpointed`, `already checkpointed`, or what went wrong.
fn moved_or_failed(p: &TargetReport, look: Look) -> String {
    let after = look.state(p.state);
    let moved = match p.state_before {
        Some(before) if Some(before) != p.state => {
            format!("{} → {after}", look.state(Some(before)))
        }
        _ => after.clone(),
    };
    if let Some(failure) = &p.rollback_failure {
        return format!(
            "{} (rollback failed: {}; now {after})",
            look.bad("FAILED"),
            short(failure)
        );
    }
    // A process no driver call reached has the state it had: unchanged,
    // whatever it was, rather than "unknown".
    let untouched = p.state.is_none() && p.steps.is_empty();
    match &p.failure {
        None => p
            .note
            .as_deref()
            .map_or(moved, |note| printable(note).into_owned()),
        Some(f) if f.kind == FaultKind::NotAttempted => {
            let now = if untouched {
                "unchanged".to_string()
            } else {
                format!("still {after}")
            };
            format!("{} ({now})", look.dim("not attempted"))
        }
        Some(f) if f.kind == FaultKind::RolledBack => {
            format!("{} to {after}", look.dim("rolled back"))
        }
        Some(f) => {
            let tail = if p.rolled_back {
                format!("; rolled back to {after}")
            } else if untouched {
                String::new()
            } else {
                format!("; now {after}")
            };
            format!("{} ({}{tail})", look.bad("FAILED"), short(f))
        }
    }
}

/// A refusal foretold (`check`, `--dry-run`): nothing failed, nothing was
/// done, so the words say what a real run would meet.
fn predicted_refusal(failure: &Fault, look: Look) -> String {
    match failure.kind {
        FaultKind::NotAttempted => look.dim("would not be attempted").to_string(),
        _ => format!("{}: {}", look.bad("would be refused"), short(failure)),
    }
}

/// A few words for the result column.
fn short(failure: &Fault) -> &'static str {
    match failure.kind {
        FaultKind::NoSuchProcess => "no such process",
        FaultKind::ThreadNotProcess => "a thread, not a process",
        FaultKind::NotCudaProcess => "not a CUDA process",
        FaultKind::PermissionDenied => "permission denied",
        FaultKind::LockTimeout => "lock timed out",
        FaultKind::WrongState => "wrong state",
        FaultKind::MapRejected => "GPU map rejected",
        FaultKind::InvalidMap => "invalid GPU map",
        FaultKind::OutOfMemory => "out of memory",
        FaultKind::DriverError => "driver error",
        FaultKind::DriverUnavailable => "driver unavailable",
        FaultKind::WaitTimeout => "timed out",
        FaultKind::NotAttempted => "not attempted",
        FaultKind::RolledBack => "rolled back",
        FaultKind::RollbackFailed => "rollback failed",
        FaultKind::Interrupted => "interrupted",
        FaultKind::DeadlineExceeded => "deadline passed",
        FaultKind::ProcessStopped => "process stopped",
        FaultKind::InsufficientGpuMemory => "not enough GPU memory",
        FaultKind::VerifyFailed => "verification failed",
        FaultKind::InUse => "in use by another cudackpt",
        FaultKind::ProcUnreadable => "/proc unreadable",
        FaultKind::UnsafePath => "untrusted path",
        FaultKind::Unrestorable => "could not be restored",
        FaultKind::Undumpable => "CRIU could not dump it",
        FaultKind::InsufficientHostMemory => "not enough host memory",
        FaultKind::OomKilled => "killed by the OOM killer",
        FaultKind::NeedsRecovery => "left by a dead cudackpt",
        FaultKind::LockUnavailable => "lock unavailable",
        FaultKind::SpawnFailed => "could not start a helper",
        FaultKind::CannotDrain => "cannot drain",
        FaultKind::DrainTimeout => "did not drain in time",
        FaultKind::RebuildFailed => "rebuild failed",
        FaultKind::Usage => "usage error",
    }
}

/// `cudackpt: <message> [CUDA_ERROR_X 600]` and an indented hint.
pub fn failure_text(failure: &Fault) -> String {
    let mut message = failure.message.clone();
    if let Some(cuda) = failure.cuda {
        message.push_str(&format!(" [{} {}]", cuda.name(), cuda.code));
    }
    super::stderr::error_lines(&message, failure.hint.as_deref())
}
