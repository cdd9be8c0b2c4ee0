//! cudackpt under a real Slurm (issue 60; docs/guide/slurm.md): Debian's
//! munge, slurmctld and two slurmd, started by the test in namespaces of
//! its own (`tests/fixtures/slurm/up`), with cudackpt's service beside
//! them and the fake driver. A user's torchrun job, submitted with
//! `sbatch` as the guide says, is preempted by a higher-priority job,
//! written to disk, requeued and restored on the other node, and finishes
//! bit-exact against a run never preempted.
//!
//! Needs root, Slurm and munge (`.ci/run` installs them), CRIU
//! (`CUDACKPT_TEST_CRIU`) and a Python with torch (`CUDACKPT_TEST_PYTHON`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::disk::criu;
use crate::disk_jobs::{done, losses, needed_python_with_torch, wait_long};
use crate::support::{cudackpt_bin, prerequisite, running_as_root, workspace, Fixture, NOBODY};

/// A test's Slurm cluster and cudackpt's service on it; stopped whole
/// when dropped.
struct Cluster {
    dir: PathBuf,
    ctl: i32,
    service: Option<std::process::Child>,
}

impl Cluster {
    /// Starts the cluster in `dir`, every path of `reach` reachable there
    /// by every user; `None` (said) where this host cannot.
    fn start(dir: &Path, reach: &[&Path]) -> Option<Cluster> {
        let tools = [
            "slurmctld",
            "slurmd",
            "munged",
            "sbatch",
            "nsenter",
            "setpriv",
        ]
        .iter()
        .all(|tool| {
            Command::new("sh")
                .args([
                    "-c",
                    &format!("command -v {tool} || test -x /usr/sbin/{tool}"),
                ])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        if !prerequisite(
            "run Slurm as root (slurmctld, slurmd, munge: .ci/run installs them)",
            running_as_root() && tools,
        ) {
            return None;
        }
        let up = Command::new(workspace().join("tests/fixtures/slurm/up"))
            .arg(dir)
            .args(reach)
            .output()
            .expect("run up");
        let mut cluster = Cluster {
            dir: dir.to_path_buf(),
            ctl: 0,
            service: None,
        };
        assert!(
            up.status.success(),
            "the cluster came up: {}",
            String::from_utf8_lossy(&up.stderr)
        );
        let namespaces = std::fs::read_to_string(dir.join("namespaces")).expect("the namespaces");
        let ctl = namespaces
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .expect("the controller's namespace");
        cluster.ctl = ctl;
        Some(cluster)
    }

    /// `program` in the controller's namespaces, with this cluster's
    /// configuration.
    fn command(&self, program: &str) -> Command {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net=/proc/{}/ns/net", self.ctl))
            .arg(format!("--mount=/proc/{}/ns/mnt", self.ctl))
            .arg(program)
            .env("SLURM_CONF", self.dir.join("slurm.conf"));
        command
    }

    /// `program` as `uid`, in the controller's namespaces.
    fn command_as(&self, uid: u32, program: &str) -> Command {
        let mut command = self.command("setpriv");
        command
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"))
            .arg("--clear-groups")
            .arg(program);
        command
    }

    /// Starts cudackpt's service with the fake driver (its state in
    /// `state`) and CRIU `criu`, and waits for its socket.
    fn start_service(&mut self, fake: &Path, state: &Path, criu: &Path) -> PathBuf {
        let socket = self.dir.join("cudackpt.sock");
        let log = std::fs::File::create(self.dir.join("log/cudackpt.log")).expect("the log");
        let mut command = self.command(cudackpt_bin().to_str().expect("UTF-8"));
        command
            .args(["slurm", "serve", "--socket"])
            .arg(&socket)
            .arg("--store")
            .arg(self.store())
            .arg("--criu")
            .arg(criu)
            .args(["--scontrol", "/usr/bin/scontrol"])
            .env("CUDACKPT_LIBCUDA", fake)
            .env("FAKE_CUDA_STATE_DIR", state)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        self.service = Some(command.spawn().expect("start the service"));
        wait_long("the service's socket", || socket.exists());
        socket
    }

    /// Kills cudackpt's service, as a crash would.
    fn kill_service(&mut self) {
        if let Some(mut service) = self.service.take() {
            let _ = service.kill();
            let _ = service.wait();
        }
    }

    fn store(&self) -> PathBuf {
        self.dir.join("store")
    }

    /// `scontrol ARGS`, which must succeed: what it printed.
    fn scontrol(&self, args: &[&str]) -> String {
        let output = self
            .command("scontrol")
            .args(args)
            .output()
            .expect("scontrol");
        assert!(
            output.status.success(),
            "scontrol {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Job `id`'s field `key`, as `scontrol show job` says it.
    fn job_field(&self, id: u64, key: &str) -> String {
        let record = self.scontrol(&["show", "job", "-o", &id.to_string()]);
        record
            .split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('=').map(str::to_string))
            .unwrap_or_default()
    }

    /// `sbatch ARGS` as `uid`: the job's id.
    fn sbatch_as(&self, uid: u32, args: &[&str]) -> u64 {
        let output = self
            .command_as(uid, "sbatch")
            .arg("--parsable")
            .args(args)
            .output()
            .expect("sbatch");
        assert!(
            output.status.success(),
            "sbatch {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout)
            .trim()
            .split(';')
            .next()
            .and_then(|id| id.parse().ok())
            .expect("a job id")
    }

    /// Waits up to three minutes for `condition`; past that, fails with
    /// the cluster's logs and the job's output in `work`.
    fn wait(&self, what: &str, work: &Path, mut condition: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
        while !condition() {
            if std::time::Instant::now() > deadline {
                panic!(
                    "timed out waiting for {what}\n== job.out\n{}\n{}",
                    std::fs::read_to_string(work.join("job.out")).unwrap_or_default(),
                    self.logs()
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    /// The cluster's logs, for a failure's message.
    fn logs(&self) -> String {
        let mut said = String::new();
        for name in [
            "cudackpt.log",
            "slurmctld.log",
            "slurmd-n1.log",
            "slurmd-n2.log",
        ] {
            let text = std::fs::read_to_string(self.dir.join("log").join(name)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            said.push_str(&format!("== {name}\n"));
            for line in tail.into_iter().rev() {
                said.push_str(line);
                said.push('\n');
            }
        }
        said
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(workspace().join("tests/fixtures/slurm/down"))
            .arg(&self.dir)
            .status();
        if let Some(mut service) = self.service.take() {
            let _ = service.kill();
            let _ = service.wait();
        }
    }
}

/// Where Python `python` lives (its prefix and its base's), for the
/// cluster to reach.
fn python_homes(python: &Path) -> Vec<PathBuf> {
    let output = Command::new(python)
        .args([
            "-c",
            "import sys; print(sys.prefix); print(sys.base_prefix)",
        ])
        .output()
        .expect("python");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(PathBuf::from)
        .collect()
}

/// Copies `from` (a directory) to `to`, every file readable by all.
fn copy_tree(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .args(["-r", "--no-preserve=mode,ownership"])
        .arg(from)
        .arg(to)
        .status()
        .expect("cp");
    assert!(status.success());
    let _ = Command::new("chmod").args(["-R", "a+rX"]).arg(to).status();
}

/// The batch script a user submits, as the guide writes it: the job's
/// command under `cudackpt slurm run`, the preemption's signal asked for.
#[allow(clippy::too_many_arguments)]
fn batch_script(
    cudackpt: &Path,
    socket: &Path,
    python: &Path,
    script: &Path,
    work: &Path,
    env: &[(&str, String)],
    steps: u32,
    sidecar: Option<&Path>,
) -> String {
    let exports: String = env
        .iter()
        .map(|(k, v)| format!("export {k}={v}\n"))
        .collect();
    // A sidecar is started beside the job, a child of its first process.
    let beside = sidecar
        .map(|s| format!("/bin/sh -c '{} & exec \"$0\" \"$@\"' ", s.display()))
        .unwrap_or_default();
    format!(
        "#!/bin/bash\n#SBATCH --signal=B:USR1@60\n#SBATCH --open-mode=append\n#SBATCH --output={out}\n#SBATCH --cpus-per-task=2\n{exports}exec {cudackpt} slurm run --socket {socket} -- {beside}{python} -m cudackpt_drain.no_io_uring {python} -m torch.distributed.run --nproc-per-node 2 --master-port {port} {script} {work} {steps} 0.3\n",
        out = work.join("job.out").display(),
        cudackpt = cudackpt.display(),
        socket = socket.display(),
        python = python.display(),
        port = crate::disk::a_free_port_below_the_ephemeral_range(),
        script = script.display(),
        work = work.display(),
    )
}

/// A user's job on the test's cluster: the fixture, the cluster with
/// cudackpt's service (CRIU `service_criu`), nobody's work directory, the
/// batch script the guide writes, and the losses of a run never touched.
struct UsersJob {
    /// First, so that it is dropped first (fields go in order): the
    /// cluster is stopped while its directory, which says what to stop,
    /// is still there.
    cluster: Cluster,
    fx: Fixture,
    work: PathBuf,
    script: PathBuf,
    steps: u32,
    expected: Vec<std::collections::BTreeMap<u32, String>>,
}

impl UsersJob {
    fn set_up(service_criu: Option<&Path>) -> Option<UsersJob> {
        UsersJob::set_up_with(service_criu, false)
    }

    /// With `with_sidecar`, the job starts [`capable_sidecar`] beside
    /// itself.
    fn set_up_with(service_criu: Option<&Path>, with_sidecar: bool) -> Option<UsersJob> {
        let criu = criu()?;
        let python = needed_python_with_torch()?;
        let fx = Fixture::new();
        let sidecar = match with_sidecar {
            true => Some(capable_sidecar(&fx)?),
            false => None,
        };
        let steps = 30;
        let expected = crate::disk_snapshots::reference_losses(&fx, &python, steps);
        // What the job needs, where every user reaches it.
        let cudackpt = fx.world_runnable_cudackpt();
        let fake = fx.world_fake();
        let state = fx.shared_state();
        let share = fx.dir().join("share");
        std::fs::create_dir(&share).expect("mkdir");
        copy_tree(
            &workspace().join("tests/fixtures/disk-job"),
            &share.join("disk-job"),
        );
        copy_tree(
            &workspace().join("clients/python/src"),
            &share.join("client"),
        );
        let work = fx.dir().join("work");
        let tmp = work.join("tmp");
        for dir in [&work, &tmp] {
            std::fs::create_dir(dir).expect("mkdir");
            std::os::unix::fs::chown(dir, Some(NOBODY), Some(NOBODY)).expect("chown");
        }
        let mut reach: Vec<PathBuf> = python_homes(&python);
        reach.push(fx.dir().to_path_buf());
        reach.push(criu.clone());
        let reach: Vec<&Path> = reach.iter().map(PathBuf::as_path).collect();
        let mut cluster = Cluster::start(&fx.dir().join("cluster"), &reach)?;
        let socket = cluster.start_service(&fake, &state, service_criu.unwrap_or(&criu));
        let env = [
            ("LD_PRELOAD", fake.display().to_string()),
            ("FAKE_CUDA_STATE_DIR", state.display().to_string()),
            ("TMPDIR", tmp.display().to_string()),
            ("PYTHONPATH", share.join("client").display().to_string()),
            ("OMP_NUM_THREADS", "1".to_string()),
            ("GLOO_SOCKET_IFNAME", "lo".to_string()),
        ];
        let script = work.join("job.sh");
        std::fs::write(
            &script,
            batch_script(
                &cudackpt,
                &socket,
                &python,
                &share.join("disk-job/ddp_loader.py"),
                &work,
                &env,
                steps,
                sidecar.as_deref(),
            ),
        )
        .expect("the batch script");
        Some(UsersJob {
            cluster,
            fx,
            work,
            script,
            steps,
            expected,
        })
    }

    /// Submits the job as nobody with n2 held back, waits for its fifth
    /// step on n1, and preempts it there with a higher-priority job: the
    /// job's id, the preemptor's, and the step reached.
    fn preempted_on_n1(&self) -> (u64, u64, usize) {
        let cluster = &self.cluster;
        cluster.scontrol(&["update", "nodename=n2", "state=drain", "reason=test"]);
        let work = self.work.display().to_string();
        let job = cluster.sbatch_as(NOBODY, &["-D", &work, self.script.to_str().expect("UTF-8")]);
        cluster.wait("the job's fifth step on n1", &self.work, || {
            self.step() >= 5
        });
        assert_eq!(
            cluster.job_field(job, "NodeList"),
            "n1",
            "{}",
            cluster.logs()
        );
        let high = cluster.sbatch_as(
            0,
            &[
                "-p",
                "high",
                "-w",
                "n1",
                "-c",
                "2",
                "-D",
                &work,
                "--wrap",
                "sleep 600",
            ],
        );
        cluster.wait("the job to be requeued", &self.work, || {
            cluster.job_field(job, "Restarts") == "1"
        });
        let at = self.step();
        assert!(at < self.steps as usize, "preempted mid-run");
        (job, high, at)
    }

    /// Lets the job run on n2, waits for its end, and checks its losses
    /// against the run never touched (`how` it got there, for the
    /// message): its output.
    fn finished_bit_exact_on_n2(&self, job: u64, how: &str) -> String {
        let output = self.finished_on_n2(job);
        self.assert_bit_exact(&format!("{how}: {output}"));
        output
    }

    /// Lets the job run on n2, and waits for its end: its output.
    fn finished_on_n2(&self, job: u64) -> String {
        let cluster = &self.cluster;
        cluster.scontrol(&["update", "nodename=n2", "state=resume"]);
        cluster.wait("the job to finish on n2", &self.work, || {
            matches!(
                cluster.job_field(job, "JobState").as_str(),
                "COMPLETED" | "FAILED"
            )
        });
        let output = std::fs::read_to_string(self.work.join("job.out")).unwrap_or_default();
        assert_eq!(
            cluster.job_field(job, "JobState"),
            "COMPLETED",
            "{output}\n{}",
            cluster.logs()
        );
        assert_eq!(cluster.job_field(job, "NodeList"), "n2");
        assert!(done(&self.work), "{output}");
        output
    }

    /// Waits until the job's wrapper says it came back on n2 (the restored
    /// job runs, and writes its steps, before the service's answer
    /// reaches the wrapper), and it went on a few steps past `at`.
    fn wait_back_on_n2(&self, id: u64, at: usize) {
        let said = format!("job {id} came back on n2");
        self.cluster
            .wait("the job to come back on n2", &self.work, || {
                std::fs::read_to_string(self.work.join("job.out")).is_ok_and(|o| o.contains(&said))
            });
        self.cluster
            .wait("the job to run again on n2", &self.work, || {
                self.step() > at + 2
            });
    }

    /// Waits until no process runs the job's script (wherever it runs:
    /// below Slurm, or restored by the service).
    fn wait_until_its_processes_end(&self, what: &str) {
        let script = self.fx.dir().join("share/disk-job/ddp_loader.py");
        self.cluster.wait(what, &self.work, || {
            Command::new("pgrep")
                .args(["-f", &script.display().to_string()])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| !s.success())
        });
    }

    fn step(&self) -> usize {
        losses(&self.work, 0).lines().count()
    }

    /// Each rank's losses, against the run never touched.
    fn assert_bit_exact(&self, what: &str) {
        for rank in 0..2 {
            assert_eq!(
                crate::disk_snapshots::final_losses(&losses(&self.work, rank)),
                self.expected[rank as usize],
                "rank {rank}, {what}"
            );
        }
    }

    /// Stops the cluster, and checks nothing of it is left.
    fn stop(self) {
        let dir = self.fx.dir().to_path_buf();
        drop(self.cluster);
        nothing_left_of(&dir);
    }
}

/// A user's torchrun job with DataLoader workers, preempted on n1 by a
/// higher-priority job: written to disk, requeued, restored on n2 once
/// that node is free, and finished bit-exact; Slurm shows the restart, the
/// job's output says each step, the store forgets the job, and nothing is
/// left running or mounted.
#[test]
fn a_preempted_users_job_is_written_to_disk_requeued_and_finishes_bit_exact_on_the_other_node() {
    let Some(job) = UsersJob::set_up(None) else {
        return;
    };
    let (id, high, at) = job.preempted_on_n1();
    let output = job.finished_bit_exact_on_n2(id, &format!("preempted at step {at}"));
    assert!(
        output.contains(&format!("job {id} was written to disk at"))
            && output.contains(&format!("job {id} came back on n2 at")),
        "the job's output says when and where: {output}"
    );
    assert_eq!(job.cluster.job_field(id, "Restarts"), "1");
    let record = job
        .cluster
        .scontrol(&["show", "job", "-o", &id.to_string()]);
    assert!(
        record.contains(&format!(
            "Comment=cudackpt snapshot {}/{id}/snapshot-",
            job.cluster.store().display()
        )),
        "Slurm's record says where the images were: {record}"
    );
    assert!(
        !job.cluster.store().join(id.to_string()).exists(),
        "the store forgets a job that finished"
    );
    assert_eq!(
        job.cluster.job_field(high, "JobState"),
        "RUNNING",
        "the preemptor runs on"
    );
    job.stop();
}

/// A dump that fails at the preemption (here CRIU cannot start): the job
/// is requeued at once, starts over at its restart saying why, and
/// finishes bit-exact all the same.
#[test]
fn a_job_whose_dump_fails_is_requeued_and_starts_over_saying_why() {
    let Some(job) = UsersJob::set_up(Some(Path::new("/bin/false"))) else {
        return;
    };
    let (id, _high, _) = job.preempted_on_n1();
    let output = job.finished_bit_exact_on_n2(id, "started over");
    assert!(
        output.contains(&format!("job {id} could not be written to disk at"))
            && output.contains(&format!(
                "job {id} (restart 1) starts over: no complete snapshot of job {id}"
            )),
        "the job's output says why it starts over: {output}"
    );
    job.stop();
}

/// A program that runs with a capability whoever starts it
/// (`cap_net_raw`, a file capability, as `ping` has on many hosts), and
/// ends with its parent: what a job may run that is more than its user,
/// and that the service's look at the tree's user ids does not see. `None`
/// (said) where setcap is missing or the filesystem refuses it.
fn capable_sidecar(fx: &Fixture) -> Option<PathBuf> {
    let program = fx.compile_program(
        "capable-sidecar",
        "#include <signal.h>\n#include <sys/prctl.h>\n#include <unistd.h>\n\
         int main(void) {\n\
           pid_t parent = getppid();\n\
           prctl(PR_SET_PDEATHSIG, SIGKILL);\n\
           if (getppid() != parent) return 0;\n\
           for (;;) pause(); }\n",
    );
    let _ = Command::new("chmod").arg("755").arg(&program).status();
    let setcap = crate::trust::setcap()?;
    let given = Command::new(setcap)
        .arg("cap_net_raw+ep")
        .arg(&program)
        .status()
        .is_ok_and(|s| s.success());
    prerequisite("set a file capability here", given).then_some(program)
}

/// A job that runs a program with more than its user (here a file
/// capability, which the service's look at the tree's user ids before the
/// dump does not see; where root has CAP_SYS_RESOURCE, as on a bare node,
/// also a set-user-ID program started while the job drains): the images
/// say so once written, and the service discards them rather than keep a
/// snapshot that CRIU, as root, would bring back with that capability. The
/// dump has ended the job; it is requeued all the same, starts over saying
/// why, and finishes bit-exact.
#[test]
fn a_snapshot_holding_more_than_the_jobs_user_is_discarded_and_the_job_starts_over() {
    let Some(job) = UsersJob::set_up_with(None, true) else {
        return;
    };
    let (id, _high, _) = job.preempted_on_n1();
    let output = job.finished_bit_exact_on_n2(id, "started over");
    assert!(
        output.contains(&format!("job {id} could not be written to disk at"))
            && output.contains("would restore more than the job's user (uid 65534)")
            && output
                .contains("runs its thread with permitted capabilities, effective capabilities")
            && output.contains(&format!(
                "job {id} (restart 1) starts over: no complete snapshot of job {id}"
            )),
        "the job's output says why it was not kept, and that it starts over: {output}"
    );
    assert!(
        !job.cluster
            .store()
            .join(id.to_string())
            .join("latest")
            .exists(),
        "no snapshot was recorded"
    );
    job.stop();
}

/// A snapshot in the store whose images would restore more than the
/// job's user (a thread of root's: what a set-user-ID program caught by a
/// dump leaves, played here by root rewriting a core of the job's last
/// snapshot, as `crit` would) is never restored: the restart starts over,
/// saying why, and finishes bit-exact.
#[test]
fn a_snapshot_that_would_restore_root_is_refused_and_the_job_starts_over() {
    let Some(job) = UsersJob::set_up(None) else {
        return;
    };
    let (id, _high, _) = job.preempted_on_n1();
    let jobs_dir = job.cluster.store().join(id.to_string());
    let latest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(jobs_dir.join("latest")).expect("the record"))
            .expect("JSON");
    let snapshot = jobs_dir.join(latest["snapshot"].as_str().expect("its snapshot"));
    let core = std::fs::read_dir(&snapshot)
        .expect("the snapshot")
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("core-"))
        })
        .expect("a core image");
    let bytes = std::fs::read(&core).expect("the core");
    std::fs::write(
        &core,
        crate::support::criu_forge::core_as_user(&bytes, 0, 0),
    )
    .expect("rewrite");
    let output = job.finished_bit_exact_on_n2(id, "started over");
    let core_name = core
        .file_name()
        .expect("a name")
        .to_string_lossy()
        .into_owned();
    assert!(
        output.contains(&format!("job {id} (restart 1) starts over: the snapshot "))
            && output.contains("would restore more than the job's user (uid 65534)")
            && output.contains(&format!("{core_name} runs its thread with uid 0")),
        "the job's output says why it starts over: {output}"
    );
    job.stop();
}

/// Nothing of the cluster in `dir` is left: no process names it (the
/// daemons, the jobs and what the service restored all do), and no mount
/// of this namespace is under it (the cluster's mounts were in a
/// namespace of its own, gone with its last process).
fn nothing_left_of(dir: &Path) {
    let named = dir.display().to_string();
    let left = Command::new("pgrep")
        .args(["-a", "-f", &named])
        .output()
        .expect("pgrep");
    assert!(
        left.stdout.is_empty(),
        "left running: {}",
        String::from_utf8_lossy(&left.stdout)
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert!(!mounts.contains(&named), "left mounted: {mounts}");
}

/// Another user cannot make the service dump, restore or read a job: the
/// service serves only a job's own batch step, known by root's
/// `slurmstepd` above it and not by anything the asker controls (a job id
/// in its environment, a parent of its own named `slurmstepd`), refuses
/// anyone else before reading what they ask, and keeps the images where
/// only root reads them.
#[test]
fn only_a_jobs_own_batch_step_is_served_and_the_store_is_roots_alone() {
    use std::os::unix::fs::MetadataExt;
    if !prerequisite("run the Slurm service as root", running_as_root()) {
        return;
    }
    let fx = Fixture::new();
    fx.world_runnable_cudackpt();
    let socket = fx.dir().join("slurm.sock");
    let store = fx.dir().join("store");
    let log = fx.dir().join("service.log");
    let mut service = Command::new(cudackpt_bin())
        .args(["slurm", "serve", "--socket"])
        .arg(&socket)
        .arg("--store")
        .arg(&store)
        .args(["--scontrol", "/bin/false"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("the log"))
        .spawn()
        .expect("start the service");
    wait_long("the service's socket", || socket.exists());
    let stat = std::fs::metadata(&store).expect("the store");
    assert_eq!(
        (stat.uid(), stat.mode() & 0o777),
        (0, 0o700),
        "the store is root's alone"
    );
    assert_eq!(
        std::fs::metadata(&socket).expect("the socket").mode() & 0o777,
        0o666,
        "any user may ask"
    );

    // The attacker's client: asks for a dump and a restore, prints what
    // the service says.
    let client = fx.dir().join("ask.py");
    std::fs::write(
        &client,
        "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\ns.sendall(b'{\"ask\":\"dump\"}\\n{\"ask\":\"restore\"}\\n')\nprint(s.makefile().read())\n",
    )
    .expect("the client");
    let fake_stepd = fx.dir().join("slurmstepd");
    std::fs::copy("/bin/bash", &fake_stepd).expect("a fake slurmstepd");
    for path in [&client, &fake_stepd] {
        let _ = Command::new("chmod").arg("755").arg(path).status();
    }
    let as_nobody = |program: &Path, args: &[&str]| {
        let output = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(program)
            .args(args)
            .env("SLURM_JOB_ID", "1")
            .env("SLURM_RESTART_COUNT", "1")
            .current_dir("/")
            .output()
            .expect("run as nobody");
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    };
    let ask = format!("/usr/bin/python3 {} {}", client.display(), socket.display());
    let outside = as_nobody(Path::new("/bin/sh"), &["-c", &ask]);
    let under_a_fake = as_nobody(&fake_stepd, &["-c", &format!("{ask}; true")]);
    for (said, what) in [
        (&outside, "outside any job"),
        (&under_a_fake, "under a slurmstepd of its own"),
    ] {
        assert!(
            said.contains("\"said\":\"refused\"")
                && said.contains("is not a Slurm batch step's process")
                && said.lines().filter(|l| !l.trim().is_empty()).count() == 1,
            "nobody {what} is refused once, before anything it asks: {said}"
        );
    }
    let _ = service.kill();
    let _ = service.wait();
    assert_eq!(
        std::fs::read_dir(&store).expect("the store").count(),
        0,
        "nothing was dumped or made: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// One job may hold only a few connections to the service (its wrapper
/// holds one; a restart may meet the last run's still closing): a batch
/// step that opens more, each held open, is refused past the fourth, and
/// the service serves on. Played by nobody's batch script, which runs a
/// client of its own as the batch step's process.
#[test]
fn a_job_holds_no_more_than_four_connections_to_the_service() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    fx.world_runnable_cudackpt();
    let (fake, state) = (fx.world_fake(), fx.shared_state());
    let Some(mut cluster) = Cluster::start(&fx.dir().join("cluster"), &[fx.dir()]) else {
        return;
    };
    let socket = cluster.start_service(&fake, &state, &criu);
    let work = fx.dir().join("work");
    std::fs::create_dir(&work).expect("mkdir");
    std::os::unix::fs::chown(&work, Some(NOBODY), Some(NOBODY)).expect("chown");
    let client = work.join("connect.py");
    std::fs::write(
        &client,
        "import socket, sys\nheld = []\nfor n in range(6):\n    s = socket.socket(socket.AF_UNIX)\n    s.connect(sys.argv[1])\n    held.append(s)\n    print(n, s.makefile().readline().strip(), flush=True)\n",
    )
    .expect("the client");
    let script = work.join("job.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/bash\n#SBATCH --output={}\nexec /usr/bin/python3 {} {}\n",
            work.join("job.out").display(),
            client.display(),
            socket.display()
        ),
    )
    .expect("the batch script");
    let dir = work.display().to_string();
    let job = cluster.sbatch_as(NOBODY, &["-D", &dir, script.to_str().expect("UTF-8")]);
    cluster.wait("the job to end", &work, || {
        matches!(
            cluster.job_field(job, "JobState").as_str(),
            "COMPLETED" | "FAILED"
        )
    });
    let output = std::fs::read_to_string(work.join("job.out")).unwrap_or_default();
    let lines: Vec<&str> = output.lines().collect();
    assert_eq!(lines.len(), 6, "{output}\n{}", cluster.logs());
    for line in &lines[..4] {
        assert!(line.contains("\"said\":\"hello\""), "{output}");
    }
    for line in &lines[4..] {
        assert!(
            line.contains("\"said\":\"refused\"")
                && line.contains(&format!(
                    "job {job} holds 4 connections to the service already"
                )),
            "{output}"
        );
    }
    // It serves on: the next job has its own four (a place given back
    // is taken again: `places`' own test).
    let again = cluster.sbatch_as(NOBODY, &["-D", &dir, script.to_str().expect("UTF-8")]);
    cluster.wait("the second job to end", &work, || {
        cluster.job_field(again, "JobState") == "COMPLETED"
    });
    let output = std::fs::read_to_string(work.join("job.out")).unwrap_or_default();
    assert_eq!(output.matches("\"said\":\"hello\"").count(), 4, "{output}");
    assert!(
        output.contains(&format!("job {again} holds 4 connections")),
        "{output}"
    );
    let dir = fx.dir().to_path_buf();
    drop(cluster);
    nothing_left_of(&dir);
}

/// A job the service restored is outside Slurm's reach (not below the
/// job's slurmstepd): cancelled by Slurm, it still ends with its job, its
/// wrapper's signal forwarded and, once the wrapper is gone, the rest
/// killed by the service; its last snapshot is kept (it did not finish).
#[test]
fn a_restored_job_cancelled_by_slurm_ends_with_it() {
    let Some(job) = UsersJob::set_up(None) else {
        return;
    };
    let (id, _high, at) = job.preempted_on_n1();
    let cluster = &job.cluster;
    cluster.scontrol(&["update", "nodename=n2", "state=resume"]);
    job.wait_back_on_n2(id, at);
    let scancel = cluster
        .command("scancel")
        .arg(id.to_string())
        .status()
        .expect("scancel");
    assert!(scancel.success());
    job.wait_until_its_processes_end("every process of the cancelled job to end");
    assert!(!done(&job.work), "cancelled before its end");
    assert!(
        cluster.store().join(id.to_string()).join("latest").exists(),
        "the last snapshot of a job that did not finish is kept"
    );
    job.stop();
}

/// A job the service restored has the service as its lifeline: when the
/// service dies, the job's wrapper stops the restored job itself (it runs
/// as the same user), says so, and ends the job failed, rather than leave
/// it running outside Slurm's reach.
#[test]
fn a_restored_job_whose_service_dies_is_stopped_by_its_wrapper() {
    let Some(mut job) = UsersJob::set_up(None) else {
        return;
    };
    let (id, _high, at) = job.preempted_on_n1();
    job.cluster
        .scontrol(&["update", "nodename=n2", "state=resume"]);
    job.wait_back_on_n2(id, at);
    job.cluster.kill_service();
    job.wait_until_its_processes_end("every process of the job to end");
    job.cluster.wait("Slurm to see the job end", &job.work, || {
        job.cluster.job_field(id, "JobState") == "FAILED"
    });
    let output = std::fs::read_to_string(job.work.join("job.out")).unwrap_or_default();
    assert!(
        output.contains("the snapshot service ended while it ran the restored job")
            && output.contains("which is stopped (SIGTERM)"),
        "{output}"
    );
    assert!(!done(&job.work), "stopped before its end");
    job.stop();
}
