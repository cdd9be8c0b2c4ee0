//! Stage 7b, the post-mortem of a target that died during a command that
//! moves GPU memory: the host copy of a checkpoint is charged to the
//! target's memory cgroup, and a kernel OOM kill then reads as "the process
//! has exited" (the driver answers 304). So each target's cgroup `oom_kill`
//! count is noted before the driver calls, and a target gone afterwards
//! whose cgroup counted a new OOM kill is reported as `oom_killed`, with the
//! cgroup and its limit.

use std::path::{Path, PathBuf};

use crate::ops::diagnose::{describe_process, Failure, FailureKind};
use crate::ops::plan::Operation;
use crate::ops::report::ProcessReport;
use crate::targets::discover;
use crate::targets::memory;
use crate::targets::process::Target;

/// Each target's cgroup and its OOM kills so far.
pub struct Watch {
    root: PathBuf,
    entries: Vec<(i32, String, u64)>,
}

/// Notes the OOM kills of the targets' cgroups, for commands that move GPU
/// memory (`None` for others, and without cgroup v2).
pub fn watch(operation: &Operation, targets: &[Target]) -> Option<Watch> {
    if !operation.moves_memory() {
        return None;
    }
    let root = discover::cgroup2_root()?;
    let entries = targets
        .iter()
        .filter_map(|t| {
            let name = memory::cgroup_of(t.pid)?;
            let count = memory::oom_kills(&root, &name)?;
            Some((t.pid, name, count))
        })
        .collect();
    Some(Watch { root, entries })
}

impl Watch {
    /// Names an OOM kill where a target is gone and its cgroup counted one.
    pub fn diagnose(&self, reports: &mut [ProcessReport]) {
        for report in reports.iter_mut() {
            // Gone, or the driver's 304 from a process being killed (it can
            // still show in /proc while the kernel tears it down).
            let gone = report.failure.as_ref().is_some_and(|f| {
                f.kind == FailureKind::NoSuchProcess
                    || f.cuda
                        .is_some_and(|c| c.code == crate::driver::code::OPERATING_SYSTEM)
            });
            let Some((_, cgroup, before)) =
                self.entries.iter().find(|(pid, _, _)| *pid == report.pid)
            else {
                continue;
            };
            if !gone {
                continue;
            }
            if let Some(failure) = oom_verdict(&self.root, report, cgroup, *before) {
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

/// The OOM verdict on one gone process, if its cgroup counted a new kill.
fn oom_verdict(root: &Path, report: &ProcessReport, cgroup: &str, before: u64) -> Option<Failure> {
    let after = memory::oom_kills(root, cgroup)?;
    if after <= before || !vanishes(report.pid) {
        return None;
    }
    let limit = memory::chain(root, cgroup)
        .first()
        .and_then(|level| level.max.or(level.high))
        .map_or("no limit of its own; an ancestor's".to_string(), |bytes| {
            format!("memory limit {} MiB", bytes >> 20)
        });
    Some(Failure::new(
        FailureKind::OomKilled,
        format!(
            "{} was killed by the kernel's OOM killer during the command: its cgroup {cgroup} ({limit}) counted an OOM kill (memory.events oom_kill {before} -> {after}); the checkpoint copies GPU memory into the process's host memory, charged to that cgroup",
            describe_process(report.pid, report.name.as_deref())
        ),
        "the process is gone: restart it, with a memory limit above its GPU footprint plus its own use (the pre-flight refuses such a checkpoint unless --force)",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn a_gone_process_whose_cgroup_counted_an_oom_kill_is_named_as_such() {
        let root = tempfile::tempdir().expect("tempdir");
        let pod = root.path().join("pod");
        fs::create_dir(&pod).expect("cgroup");
        fs::write(pod.join("memory.max"), "2147483648\n").expect("max");
        fs::write(pod.join("memory.events"), "oom 0\noom_kill 0\n").expect("events");
        let gone = |pid| ProcessReport {
            failure: Some(Failure::new(FailureKind::NoSuchProcess, "exited", "")),
            ..ProcessReport::new(pid, Some("python3".into()))
        };
        // PIDs that are no process here (the test's own would be alive).
        let (dead, alive) = (i32::MAX - 7, std::process::id() as i32);
        let watch = Watch {
            root: root.path().to_path_buf(),
            entries: vec![
                (dead, "/pod".to_string(), 0),
                (alive, "/pod".to_string(), 0),
            ],
        };
        let mut reports = vec![gone(dead), ProcessReport::new(alive, None)];
        watch.diagnose(&mut reports);
        assert_eq!(
            reports[0].failure.as_ref().map(|f| f.kind),
            Some(FailureKind::NoSuchProcess),
            "no new kill, no verdict"
        );
        fs::write(pod.join("memory.events"), "oom 1\noom_kill 1\n").expect("events");
        watch.diagnose(&mut reports);
        let failure = reports[0].failure.as_ref().expect("a failure");
        assert_eq!(failure.kind, FailureKind::OomKilled);
        assert!(
            failure
                .message
                .contains("cgroup /pod (memory limit 2048 MiB)"),
            "{failure:?}"
        );
        assert!(failure.message.contains("oom_kill 0 -> 1"), "{failure:?}");
        assert!(
            reports[1].failure.is_none(),
            "a process that is alive is left alone"
        );
    }
}
