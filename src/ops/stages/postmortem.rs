//! Stage 7, beside the driver calls: the post-mortem of a target that died during a command that
//! moves GPU memory: the host copy of a checkpoint is charged to the
//! target's memory cgroup, and a kernel OOM kill then reads as "the process
//! has exited" (the driver answers 304). So before the driver calls, each
//! target's cgroup `oom_kill` count is noted and the kernel log (where
//! readable: root) is opened at its end; a target gone afterwards whose
//! cgroup counted a new OOM kill, or whom the kernel log says the OOM killer
//! took, is reported as `oom_killed`, with the cgroup, its limit and the
//! kernel's line.

use std::path::Path;
use std::sync::Mutex;

use crate::ops::diagnose::describe_process;
use crate::targets::kmsg::{self, KernelLog};
use crate::targets::memory::{self, Placement};
use crate::targets::process::Target;
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::plan::Operation;
use crate::vocabulary::report::TargetReport;
use crate::vocabulary::snapshot::Snapshot;

/// Each target's cgroup and its OOM kills so far, its GPU footprint, and
/// the kernel log from before the driver calls.
pub struct Watch {
    entries: Vec<(i32, Placement, u64)>,
    kernel_log: Option<Mutex<KernelLog>>,
    /// GPU memory per target, from the snapshot NVML gave before the
    /// command (absent without NVML).
    footprints: Vec<(i32, u64)>,
}

/// Notes the OOM kills of the targets' cgroups and their footprints (from
/// `snapshot`), and opens the kernel log, for commands that move GPU memory
/// (`None` for others).
pub fn watch(
    operation: &Operation,
    targets: &[Target],
    snapshot: Option<&Snapshot>,
) -> Option<Watch> {
    if !operation.moves_memory() {
        return None;
    }
    let entries = targets
        .iter()
        .filter_map(|t| {
            let placement = memory::placement_of(t.pid)?;
            let count = placement.oom_kills()?;
            Some((t.pid, placement, count))
        })
        .collect();
    let footprints = targets
        .iter()
        .filter_map(|t| Some((t.pid, snapshot?.footprint(t.pid)?)))
        .collect();
    Some(Watch {
        entries,
        kernel_log: KernelLog::from_now(Path::new(kmsg::KERNEL_LOG)).map(Mutex::new),
        footprints,
    })
}

impl Watch {
    /// Names an OOM kill where a target is gone and its cgroup counted one
    /// or the kernel logged it.
    pub fn diagnose(&self, reports: &mut [TargetReport]) {
        let gone = |report: &TargetReport| {
            // Gone, or the driver's 304 from a process being killed (it can
            // still show in /proc while the kernel tears it down).
            report.failure.as_ref().is_some_and(|f| {
                f.kind == FaultKind::NoSuchProcess
                    || f.cuda
                        .is_some_and(|c| c.code == crate::driver::code::OPERATING_SYSTEM)
            })
        };
        if !reports.iter().any(gone) {
            return;
        }
        let logged = self
            .kernel_log
            .as_ref()
            .map(|log| {
                log.lock()
                    .map_or_else(|_| Vec::new(), |mut log| log.messages_since())
            })
            .unwrap_or_default();
        for report in reports.iter_mut().filter(|r| gone(r)) {
            let cgroup = self
                .entries
                .iter()
                .find(|(pid, _, _)| *pid == report.pid)
                .map(|(_, placement, before)| (placement, *before));
            let kernel_line = kmsg::oom_kill_of(&logged, report.pid);
            let footprint = self
                .footprints
                .iter()
                .find(|(pid, _)| *pid == report.pid)
                .map(|(_, bytes)| *bytes);
            let seen = Seen {
                cgroup,
                kernel_line,
                footprint,
            };
            if let Some(failure) = oom_verdict(report, &seen) {
                report.failure = Some(failure);
            }
        }
    }
}

/// Whether `pid` is gone, or goes within a couple of seconds (a process the
/// OOM killer chose is torn down, not gone at once).
fn vanishes(pid: i32) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while crate::targets::process::is_alive(pid) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    true
}

/// What is known of one gone target.
struct Seen<'a> {
    /// Its memory cgroup and the OOM kills it had counted before.
    cgroup: Option<(&'a Placement, u64)>,
    /// The kernel's line about killing it.
    kernel_line: Option<&'a str>,
    /// Its GPU memory before the command.
    footprint: Option<u64>,
}

/// The OOM verdict on one gone process: its cgroup counted a new kill, or
/// the kernel logged one.
fn oom_verdict(report: &TargetReport, seen: &Seen<'_>) -> Option<Fault> {
    let (cgroup, kernel_line) = (seen.cgroup, seen.kernel_line);
    let counted = cgroup.and_then(|(placement, before)| {
        placement
            .oom_kills()
            .filter(|&after| after > before)
            .map(|after| (placement, before, after))
    });
    if (counted.is_none() && kernel_line.is_none()) || !vanishes(report.pid) {
        return None;
    }
    let mut evidence = Vec::new();
    if let Some((placement, before, after)) = counted {
        let (name, events) = (&placement.name, placement.hierarchy.events_file());
        let limit = placement
            .chain()
            .first()
            .and_then(|level| level.max.or(level.high))
            .map_or("no limit of its own; an ancestor's".to_string(), |bytes| {
                format!("memory limit {} MiB", bytes >> 20)
            });
        evidence.push(format!(
            "its cgroup {name} ({limit}) counted an OOM kill ({events} oom_kill {before} -> {after})"
        ));
    }
    if let Some(line) = kernel_line {
        evidence.push(format!("the kernel logged \"{line}\""));
    }
    let copied = seen.footprint.map_or("GPU memory".to_string(), |bytes| {
        format!(
            "its {} MiB of GPU memory (NVML, before the command)",
            bytes >> 20
        )
    });
    Some(Fault::new(
        FaultKind::OomKilled,
        format!(
            "{} was killed by the kernel's OOM killer during the command: {}; the checkpoint copies {copied} into the process's host memory, charged to its cgroup",
            describe_process(report.pid, report.name.as_deref()),
            evidence.join(", and ")
        ),
        "the process is gone: restart it, with a memory limit above its GPU footprint plus its own use (the pre-flight refuses such a checkpoint unless --force)",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A target gone during the command, in a cgroup of `hierarchy` whose
    /// OOM kills go from 0 to 1: named `oom_killed`, with the cgroup's
    /// limit, the count and the footprint.
    fn a_counted_oom_kill_is_named(hierarchy: memory::Hierarchy) {
        let root = tempfile::tempdir().expect("tempdir");
        let pod = root.path().join("pod");
        fs::create_dir(&pod).expect("cgroup");
        fs::write(pod.join(hierarchy.max_file()), "2147483648\n").expect("max");
        let events = pod.join(hierarchy.events_file());
        let counting = |n: u64| match hierarchy {
            memory::Hierarchy::V2 => format!("oom {n}\noom_kill {n}\n"),
            memory::Hierarchy::V1 => format!("oom_kill_disable 0\nunder_oom 0\noom_kill {n}\n"),
        };
        fs::write(&events, counting(0)).expect("events");
        let gone = |pid| TargetReport {
            failure: Some(Fault::new(FaultKind::NoSuchProcess, "exited", "")),
            ..TargetReport::new(pid, Some("python3".into()))
        };
        // PIDs that are no process here (the test's own would be alive).
        let (dead, alive) = (i32::MAX - 7, std::process::id() as i32);
        let placement = Placement {
            hierarchy,
            root: root.path().to_path_buf(),
            name: "/pod".to_string(),
        };
        let watch = Watch {
            entries: vec![(dead, placement.clone(), 0), (alive, placement, 0)],
            kernel_log: None,
            footprints: vec![(dead, 4 << 30)],
        };
        let mut reports = vec![gone(dead), TargetReport::new(alive, None)];
        watch.diagnose(&mut reports);
        assert_eq!(
            reports[0].failure.as_ref().map(|f| f.kind),
            Some(FaultKind::NoSuchProcess),
            "no new kill, no verdict"
        );
        fs::write(&events, counting(1)).expect("events");
        watch.diagnose(&mut reports);
        let failure = reports[0].failure.as_ref().expect("a failure");
        assert_eq!(failure.kind, FaultKind::OomKilled);
        assert!(
            failure
                .message
                .contains("cgroup /pod (memory limit 2048 MiB)"),
            "{failure:?}"
        );
        let counted = format!("({} oom_kill 0 -> 1)", hierarchy.events_file());
        assert!(failure.message.contains(&counted), "{failure:?}");
        assert!(
            failure
                .message
                .contains("copies its 4096 MiB of GPU memory"),
            "the footprint: {failure:?}"
        );
        assert!(
            reports[1].failure.is_none(),
            "a process that is alive is left alone"
        );
    }

    #[test]
    fn a_gone_process_whose_cgroup_counted_an_oom_kill_is_named_as_such() {
        a_counted_oom_kill_is_named(memory::Hierarchy::V2);
    }

    #[test]
    fn cgroup_v1_counts_oom_kills_in_memory_oom_control() {
        a_counted_oom_kill_is_named(memory::Hierarchy::V1);
    }

    #[test]
    fn the_kernel_log_alone_names_an_oom_kill() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("kmsg");
        fs::write(&log, "").expect("log");
        let dead = i32::MAX - 9;
        let watch = Watch {
            entries: Vec::new(),
            kernel_log: KernelLog::from_now(&log).map(Mutex::new),
            footprints: Vec::new(),
        };
        fs::write(
            &log,
            format!("3,77,5,-;Out of memory: Killed process {dead} (python3) total-vm:1kB, anon-rss:1kB\n"),
        )
        .expect("a kill");
        let mut reports = vec![TargetReport {
            failure: Some(Fault::new(FaultKind::NoSuchProcess, "exited", "")),
            ..TargetReport::new(dead, Some("python3".into()))
        }];
        watch.diagnose(&mut reports);
        let failure = reports[0].failure.as_ref().expect("a failure");
        assert_eq!(failure.kind, FaultKind::OomKilled);
        assert!(
            failure.message.contains(&format!(
                "the kernel logged \"Out of memory: Killed process {dead} (python3)\""
            )),
            "{failure:?}"
        );
    }
}
