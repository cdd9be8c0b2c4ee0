//! Which Slurm job a process on the service's socket belongs to, known
//! without believing anything the job's user controls (SPEC section 12):
//! not its environment (`SLURM_JOB_ID` is the user's to set), not its
//! name. The asker must be the batch step's own process, the child of a
//! `slurmstepd` that root runs, whose title (`slurmstepd: [JOB.batch]`)
//! root wrote; Slurm's controller then says whose the job is, that it
//! runs, and how often it was restarted, and the asker must be that user.
//! The asker is held by a pidfd from its first look, so a PID reused
//! meanwhile is caught.

use std::os::fd::OwnedFd;

use crate::targets::process;

/// A Slurm job as its controller describes it (`scontrol show job -o -d`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRecord {
    pub job: u64,
    pub uid: u32,
    pub gid: u32,
    pub state: String,
    pub restarts: u32,
    pub batch_host: String,
    /// The GPUs (host indices) Slurm gave the job on its batch host, when
    /// its record says (`GRES=gpu:N(IDX:...)`).
    pub gpu_indices: Vec<u32>,
}

/// The job and step a `slurmstepd`'s title names (pure): `slurmstepd:
/// [12.batch]` is job 12's batch step.
pub fn stepd_title(cmdline: &[u8]) -> Option<(u64, String)> {
    let text = String::from_utf8_lossy(cmdline);
    let inside = text
        .trim_end_matches('\0')
        .strip_prefix("slurmstepd: [")?
        .split(']')
        .next()?;
    let (job, step) = inside.split_once('.')?;
    Some((job.parse().ok()?, step.to_string()))
}

/// A job's record from `scontrol show job -o -d JOB` (pure): `None` when
/// it names no job or lacks what is needed.
pub fn parse_record(text: &str) -> Option<JobRecord> {
    let value = |key: &str| {
        text.split_whitespace()
            .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
    };
    let id_in = |key: &str| -> Option<u32> {
        value(key)?
            .split_once('(')?
            .1
            .strip_suffix(')')?
            .parse()
            .ok()
    };
    Some(JobRecord {
        job: value("JobId")?.parse().ok()?,
        uid: id_in("UserId")?,
        gid: id_in("GroupId")?,
        state: value("JobState")?.to_string(),
        restarts: value("Restarts")?.parse().ok()?,
        batch_host: value("BatchHost").unwrap_or_default().to_string(),
        gpu_indices: value("GRES").map(gpu_indices).unwrap_or_default(),
    })
}

/// The host indices in a `GRES=gpu:2(IDX:0-1)` or `gpu:h200:3(IDX:0,2-3)`
/// value (pure).
fn gpu_indices(gres: &str) -> Vec<u32> {
    let Some(list) = gres
        .split("(IDX:")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
    else {
        return Vec::new();
    };
    let mut indices = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((from, to)) => {
                if let (Ok(from), Ok(to)) = (from.parse::<u32>(), to.parse::<u32>()) {
                    indices.extend(from..=to.min(from.saturating_add(1024)));
                }
            }
            None => indices.extend(part.parse::<u32>().ok()),
        }
    }
    indices
}

/// The job a connected process belongs to, and what the service keeps of
/// it.
pub struct AskingJob {
    pub record: JobRecord,
    /// The asker (the batch step's process), held.
    pub asker: i32,
    pub asker_pidfd: OwnedFd,
    /// What Slurm gives the batch step beyond its user id (its groups,
    /// its scheduling limits): a process of the job has no more.
    pub grant: super::own_processes::StepGrant,
    /// The job's network namespace (`/proc/STEPD/ns/net`), opened while
    /// the step was held.
    pub netns: OwnedFd,
}

/// Identifies the job of the process `pid` (uid `uid`, as the socket's
/// peer credentials say), asking Slurm's controller through `scontrol`.
pub fn identify(pid: i32, uid: u32, scontrol: &std::path::Path) -> Result<AskingJob, String> {
    let asker_pidfd = process::pidfd_of(pid).ok_or_else(|| format!("PID {pid} is gone"))?;
    let status = process::read_status(pid)
        .ok()
        .flatten()
        .ok_or_else(|| format!("PID {pid} is gone"))?;
    if status.uids.iter().any(|&u| u != uid) {
        return Err(format!("PID {pid} changed its user ids since it connected"));
    }
    let grant = super::own_processes::StepGrant::of(pid)?;
    let stepd = status.ppid;
    let stepd_pidfd =
        process::pidfd_of(stepd).ok_or_else(|| format!("PID {pid}'s parent is gone"))?;
    let stepd_status = process::read_status(stepd).ok().flatten();
    let is_stepd = stepd_status
        .as_ref()
        .is_some_and(|s| s.name == "slurmstepd" && s.uids.iter().all(|&u| u == 0));
    if !is_stepd {
        return Err(format!(
            "PID {pid} is not a Slurm batch step's process: its parent (PID {stepd}) is not root's slurmstepd (run `exec cudackpt slurm run -- COMMAND` as the batch script's command)"
        ));
    }
    // Read capped, as every /proc text; its title is in the first bytes.
    let cmdline = process::read_proc_text(&format!("/proc/{stepd}/cmdline")).unwrap_or_default();
    let (job, step) = stepd_title(&cmdline.as_bytes()[..cmdline.len().min(4096)])
        .ok_or_else(|| format!("slurmstepd PID {stepd} does not name its job"))?;
    if step != "batch" {
        return Err(format!(
            "PID {pid} runs in step {job}.{step}, not in job {job}'s batch step: the batch script itself runs `cudackpt slurm run`"
        ));
    }
    let netns = std::fs::File::open(format!("/proc/{stepd}/ns/net"))
        .map(OwnedFd::from)
        .map_err(|e| format!("cannot open job {job}'s network namespace: {e}"))?;
    // Both still the processes read: neither exited (a PID reused since
    // would be another process, and its pidfd would say the first ended).
    if process::pidfd_exit_within(&asker_pidfd, Some(std::time::Duration::ZERO)).unwrap_or(true)
        || process::pidfd_exit_within(&stepd_pidfd, Some(std::time::Duration::ZERO)).unwrap_or(true)
    {
        return Err(format!(
            "PID {pid} or its slurmstepd ended while it was checked"
        ));
    }
    let record = show_job(scontrol, job)?;
    if record.uid != uid {
        return Err(format!(
            "job {job} is uid {}'s, and PID {pid} runs as uid {uid}",
            record.uid
        ));
    }
    if record.state != "RUNNING" {
        return Err(format!("job {job} is {}, not running", record.state));
    }
    Ok(AskingJob {
        record,
        asker: pid,
        asker_pidfd,
        grant,
        netns,
    })
}

/// The controller's record of `job`.
pub fn show_job(scontrol: &std::path::Path, job: u64) -> Result<JobRecord, String> {
    let output = std::process::Command::new(scontrol)
        .args(["show", "job", "-o", "-d", &job.to_string()])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", scontrol.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    parse_record(&text).filter(|r| r.job == job).ok_or_else(|| {
        format!(
            "Slurm's controller does not describe job {job} ({}): {}",
            output.status,
            crate::targets::name::printable(String::from_utf8_lossy(&output.stderr).trim())
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stepd_title_names_its_job_and_step() {
        assert_eq!(
            stepd_title(b"slurmstepd: [12.batch]\0"),
            Some((12, "batch".into()))
        );
        assert_eq!(stepd_title(b"slurmstepd: [7.0]"), Some((7, "0".into())));
        assert_eq!(stepd_title(b"python3\0slurmstepd: [1.batch]"), None);
        assert_eq!(stepd_title(b"slurmstepd: [x.batch]"), None);
    }

    #[test]
    fn a_job_record_is_read_from_scontrol_s_one_line() {
        let line = "JobId=12 JobName=job.sh UserId=nobody(65534) GroupId=nogroup(65534) MCS_label=N/A Priority=1 JobState=RUNNING Reason=None Requeue=1 Restarts=2 BatchFlag=1 NodeList=n2 BatchHost=n2 NumNodes=1 JOB_GRES=gpu:1 Nodes=n2 CPU_IDs=0-1 Mem=0 GRES=gpu:2(IDX:0,2-3) Command=/home/a b/job.sh\n";
        assert_eq!(
            parse_record(line),
            Some(JobRecord {
                job: 12,
                uid: 65534,
                gid: 65534,
                state: "RUNNING".into(),
                restarts: 2,
                batch_host: "n2".into(),
                gpu_indices: vec![0, 2, 3],
            })
        );
        let no_gpus = line.replace(" GRES=gpu:2(IDX:0,2-3)", "");
        assert_eq!(
            parse_record(&no_gpus).expect("a record").gpu_indices,
            Vec::<u32>::new()
        );
        assert_eq!(
            parse_record("slurm_load_jobs error: Invalid job id specified"),
            None
        );
        assert_eq!(parse_record(&line.replace("(65534)", "")), None);
    }
}
