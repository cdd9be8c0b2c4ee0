//! A job's snapshot holds its user's processes alone, as its images say.
//! The service checks the job's tree before the dump (every process the
//! job's user's), but the job runs on while it is drained and CRIU starts:
//! a process of it that meanwhile executes a set-user-ID program (`su`,
//! `passwd`, a site's helper) is dumped as root, and CRIU, restoring as
//! root, would make it again as root. So the images themselves are read:
//! once written, before they become the job's last snapshot, and again
//! before any restore. Every thread must run as the job's user, in the
//! job's groups, with no capability and nothing of the scheduler's beyond
//! what Slurm gives the job's batch step now (undump's own rule for
//! another user's images, `undump_checks::credentials`, with the step's
//! groups and limits for the user's); and no deleted
//! file CRIU makes again may be set-user-ID or set-group-ID. A deleted
//! file of another owner is not refused: it is the file the job held (a
//! library replaced while it ran, say), made again only to be opened and
//! unlinked, and the store, root's alone, holds nothing the user wrote.

use std::path::Path;

use crate::commands::disk::undump_checks::credentials::{self, is_numbered, SchedulingLimits};

/// The most of a ghost image read: only its first entry is weighed, and
/// the deleted file's bytes follow it.
const GHOST_HEAD_CAP: u64 = 1 << 20;

/// What a process of a job may run with beyond its user id: what Slurm
/// gives the job's batch step now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepGrant {
    /// Its gids and supplementary groups.
    pub groups: Vec<u32>,
    /// Its hard limits of `RLIMIT_NICE` and `RLIMIT_RTPRIO` (Slurm may
    /// pass a job the submitting shell's, `PropagateResourceLimits`).
    pub limits: SchedulingLimits,
}

impl StepGrant {
    /// The grant of the batch step's process `pid`, from /proc, capped.
    pub fn of(pid: i32) -> Result<StepGrant, String> {
        let read = |what: &str| {
            crate::targets::process::read_proc_text(&format!("/proc/{pid}/{what}"))
                .map_err(|e| format!("PID {pid}'s {what} cannot be read ({e})"))
        };
        step_grant_in(&read("status")?, &read("limits")?)
            .ok_or_else(|| format!("PID {pid}'s groups or limits are not as Linux writes them"))
    }
}

/// What the snapshot in `dir` would restore beyond user `uid` with
/// `grant`: one line for each image that would, empty when none. Only the
/// images are read, each capped and never through a link.
pub fn beyond_the_job(dir: &Path, uid: u32, grant: &StepGrant) -> Vec<String> {
    let names = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect::<Vec<String>>(),
        Err(e) => return vec![format!("{} cannot be read ({e})", dir.display())],
    };
    let (groups, limits) = (&grant.groups, grant.limits);
    let mut found = Vec::new();
    let mut cores = 0;
    for name in names {
        let read = |cap| {
            crate::files::capped::read_capped_bytes(&dir.join(&name), cap)
                .map_err(|e| e.to_string())
        };
        if is_numbered(&name, "core-") {
            cores += 1;
            let read = read(credentials::CORE_CAP);
            found.extend(credentials::core_image_beyond(
                &name, read, uid, groups, limits,
            ));
        } else if is_numbered(&name, "ghost-file-") {
            found.extend(credentials::ghost_image_beyond(
                &name,
                read(GHOST_HEAD_CAP),
                |_, _, mode| credentials::special_bits(mode),
            ));
        }
    }
    if cores == 0 {
        found.push("the images hold no thread's core (core-TID.img)".into());
    }
    found.sort();
    found
}

/// The grant of a process whose `/proc/PID/status` and `/proc/PID/limits`
/// read so (pure; `None` where either lacks a line it needs).
pub fn step_grant_in(status: &str, limits: &str) -> Option<StepGrant> {
    Some(StepGrant {
        groups: groups_in_status(status)?,
        limits: SchedulingLimits {
            nice: hard_limit(limits, "Max nice priority")?,
            rtprio: hard_limit(limits, "Max realtime priority")?,
        },
    })
}

/// The hard limit on the line `name` of a `/proc/PID/limits` text (pure):
/// `unlimited` is the most there is.
fn hard_limit(limits: &str, name: &str) -> Option<u64> {
    let values = limits.lines().find_map(|l| l.strip_prefix(name))?;
    match values.split_whitespace().nth(1)? {
        "unlimited" => Some(u64::MAX),
        hard => hard.parse().ok(),
    }
}

/// The groups a process of the job may run in: the real, effective, saved
/// and filesystem gids and the supplementary groups of a `/proc/PID/status`
/// text (pure; `None` where it lacks either line).
fn groups_in_status(status: &str) -> Option<Vec<u32>> {
    let line = |key: &str| status.lines().find_map(|l| l.strip_prefix(key));
    let numbers = |text: &str| -> Vec<u32> {
        text.split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect()
    };
    let mut groups = numbers(line("Gid:")?);
    groups.extend(numbers(line("Groups:")?));
    groups.sort_unstable();
    groups.dedup();
    Some(groups)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_step_s_groups_are_its_gids_and_supplementary_groups() {
        let status = "Name:\tpython3\nUid:\t65534\t65534\t65534\t65534\nGid:\t65534\t65534\t65534\t65534\nFDSize:\t64\nGroups:\t27 100 \n";
        assert_eq!(groups_in_status(status), Some(vec![27, 100, 65534]));
        let none = status.replace("Groups:\t27 100 ", "Groups:\t");
        assert_eq!(groups_in_status(&none), Some(vec![65534]));
        assert_eq!(groups_in_status("Name:\tx\nGid:\t1 1 1 1\n"), None);
    }

    #[test]
    fn a_batch_step_s_limits_are_its_hard_ones() {
        let status = "Gid:\t100\t100\t100\t100\nGroups:\t\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max nice priority         0                    40                   \n\
                      Max realtime priority     0                    unlimited            \n\
                      Max realtime timeout      unlimited            unlimited            us        \n";
        assert_eq!(
            step_grant_in(status, limits),
            Some(StepGrant {
                groups: vec![100],
                limits: SchedulingLimits {
                    nice: 40,
                    rtprio: u64::MAX
                },
            })
        );
        assert_eq!(
            step_grant_in(status, "Max nice priority 0 0\n"),
            None,
            "no realtime line"
        );
    }

    #[test]
    fn a_directory_with_no_core_or_none_at_all_is_named() {
        let dir = std::env::temp_dir().join(format!("cudackpt-own-{}", std::process::id()));
        std::fs::create_dir(&dir).expect("mkdir");
        let grant = StepGrant {
            groups: vec![1000],
            limits: SchedulingLimits { nice: 0, rtprio: 0 },
        };
        assert_eq!(
            beyond_the_job(&dir, 1000, &grant),
            ["the images hold no thread's core (core-TID.img)"]
        );
        std::fs::write(dir.join("core-1.img"), b"not an image").expect("write");
        let found = beyond_the_job(&dir, 1000, &grant);
        assert!(
            found[0].starts_with("core-1.img cannot be read"),
            "{found:?}"
        );
        std::fs::remove_dir_all(&dir).expect("rm");
        assert!(beyond_the_job(&dir, 1000, &grant)[0].contains("cannot be read"));
    }
}
