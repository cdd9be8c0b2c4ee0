//! A distributed training job to disk and back on CPU (issue 46): a
//! torchrun job of two gloo ranks with DDP, its groups started through the
//! drain client, DataLoader workers forked from each rank handing 8 MiB
//! batches over in unlinked /dev/shm files, run under the client's
//! `no_io_uring` with the fake driver preloaded; `dump --drain` of
//! torchrun's agent with no iptables on PATH, the job gone, `undump`, and
//! the job's losses bit-exact against a run never dumped.
//!
//! Needs CRIU (`CUDACKPT_TEST_CRIU`) and a Python with torch
//! (`CUDACKPT_TEST_PYTHON`, as the client's tests): CI has both.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::disk::{alive, criu, document, options_of, undump};
use crate::support::{fake_libcuda, prerequisite, workspace, Fixture};

/// The first interpreter of `CUDACKPT_TEST_PYTHON` (else `python3`) that
/// has torch.
pub(crate) fn python_with_torch() -> Option<PathBuf> {
    let listed = std::env::var_os("CUDACKPT_TEST_PYTHON").unwrap_or_else(|| "python3".into());
    std::env::split_paths(&listed).find(|python| {
        Command::new(python)
            .args(["-c", "import torch"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// [`python_with_torch`], a prerequisite: where there is none the test
/// says so and passes, except in CI.
pub(crate) fn needed_python_with_torch() -> Option<PathBuf> {
    let python = python_with_torch();
    prerequisite(
        "find a Python with torch (CUDACKPT_TEST_PYTHON)",
        python.is_some(),
    )
    .then_some(python)
    .flatten()
}

/// A torchrun job in a session of its own, killed whole when dropped (its
/// restored self too: CRIU restores the session).
pub(crate) struct Job {
    pub(crate) agent: i32,
    child: std::process::Child,
}

impl Job {
    pub(crate) fn start(
        fx: &Fixture,
        python: &Path,
        work: &Path,
        steps: u32,
        pause: &str,
        preload: bool,
    ) -> Job {
        Job::spawn(ddp_loader(fx, python, work, (steps, pause), preload))
    }

    /// torchrun of two ranks running `script ARGS`, in `work`, under the
    /// client's `no_io_uring`, with the client from this checkout and
    /// (`preload`) the fake driver loaded in every process.
    pub(crate) fn start_script(
        fx: &Fixture,
        python: &Path,
        work: &Path,
        script: &Path,
        args: &[String],
        preload: bool,
    ) -> Job {
        Job::spawn(torchrun(fx, python, work, script, args, preload))
    }

    /// [`Job::start`] with the fake driver, the ranks' ring of connections
    /// on `ring_port` (see the job's script), and torchrun's standard
    /// output written to `out` (opened for writing, as a shell's `>`).
    pub(crate) fn start_with_ring_and_output(
        fx: &Fixture,
        python: &Path,
        work: &Path,
        (steps, pause): (u32, &str),
        ring_port: u16,
        out: &Path,
    ) -> Job {
        let mut command = ddp_loader(fx, python, work, (steps, pause), true);
        command
            .env("RING_PORT", ring_port.to_string())
            .stdout(std::fs::File::create(out).expect("the launcher's output"));
        Job::spawn(command)
    }

    /// [`Job::start`] with the fake driver, every socket of the job on
    /// loopback: gloo told `lo` (`GLOO_SOCKET_IFNAME`), torchrun's store on
    /// its default 127.0.0.1; a job another host's loopback takes as it is.
    pub(crate) fn start_on_loopback(
        fx: &Fixture,
        python: &Path,
        work: &Path,
        (steps, pause): (u32, &str),
    ) -> Job {
        let mut command = ddp_loader(fx, python, work, (steps, pause), true);
        command.env("GLOO_SOCKET_IFNAME", "lo");
        Job::spawn(command)
    }

    fn spawn(mut command: Command) -> Job {
        let child = command.spawn().expect("torchrun starts");
        Job {
            agent: child.id() as i32,
            child,
        }
    }

    /// Reaps the agent once a dump has ended it, freeing its PID for the
    /// undump.
    pub(crate) fn reap(&mut self) {
        let _ = self.child.wait();
    }

    /// Kills every process of its session, and waits (a few seconds at
    /// most) until none is left.
    pub(crate) fn kill(&self) {
        let session = self.agent.to_string();
        let _ = Command::new("pkill").args(["-9", "-s", &session]).status();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < deadline
            && Command::new("pgrep")
                .args(["-s", &session])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// The command that starts the disk job (`tests/fixtures/disk-job`) for
/// `steps` steps of `pause` seconds' rest each, in `work`.
fn ddp_loader(
    fx: &Fixture,
    python: &Path,
    work: &Path,
    (steps, pause): (u32, &str),
    preload: bool,
) -> Command {
    let script = workspace().join("tests/fixtures/disk-job/ddp_loader.py");
    let args = [
        work.display().to_string(),
        steps.to_string(),
        pause.to_string(),
    ];
    torchrun(fx, python, work, &script, &args, preload)
}

/// The disk job of `steps` steps run to its end untouched, in the
/// fixture's `reference/`: the losses every other run must match.
pub(crate) fn reference_run(fx: &Fixture, python: &Path, steps: u32) -> PathBuf {
    let reference = fx.dir().join("reference");
    std::fs::create_dir(&reference).expect("mkdir");
    let mut run = Job::start(fx, python, &reference, steps, "0", false);
    wait_long("the reference run to finish", || done(&reference));
    run.reap();
    reference
}

/// `cudackpt --json dump --drain [EXTRA] --to IMAGES --criu CRIU PID`
/// with no iptables on PATH: its document, which must say success.
pub(crate) fn dump_drained(
    fx: &Fixture,
    images: &Path,
    criu: &Path,
    pid: i32,
    extra: &[&str],
) -> serde_json::Value {
    let mut drained = vec!["--drain"];
    drained.extend_from_slice(extra);
    let args = crate::disk::dump_args(images, criu, pid, &drained);
    let output = fx
        .std_command(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("run cudackpt");
    let dumped = document(&output);
    assert_eq!(output.status.code(), Some(0), "{dumped:#}");
    dumped
}

/// The command that starts torchrun of two ranks running `script ARGS`
/// (see [`Job::start_script`]).
fn torchrun(
    fx: &Fixture,
    python: &Path,
    work: &Path,
    script: &Path,
    args: &[String],
    preload: bool,
) -> Command {
    let mut command = Command::new("setsid");
    command
        .arg(python)
        .args(["-m", "cudackpt_drain.no_io_uring"])
        .arg(python)
        .args(["-m", "torch.distributed.run", "--nproc-per-node", "2"])
        // A store port of its own, below the ephemeral range: torchrun's
        // default (29500) is every job's, and a test beside this one, or
        // a connection of the host, could hold it when the job is
        // restored.
        .arg("--master-port")
        .arg(crate::disk::a_free_port_below_the_ephemeral_range().to_string());
    command
        .arg(script)
        .args(args)
        .current_dir(work)
        .env("PYTHONPATH", workspace().join("clients/python/src"))
        // Python's temporary directories (multiprocessing's `pymp-*`,
        // where each DataLoader worker's listener is bound) in the
        // fixture's, gone with it: a job killed leaves them behind.
        .env("TMPDIR", job_tmp(fx))
        .env("FAKE_CUDA_STATE_DIR", fx.dir())
        .env("OMP_NUM_THREADS", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if preload {
        command.env("LD_PRELOAD", fake_libcuda());
    }
    command
}

/// The jobs' temporary directory, in the fixture's.
pub(crate) fn job_tmp(fx: &Fixture) -> PathBuf {
    let tmp = fx.dir().join("tmp");
    std::fs::create_dir_all(&tmp).expect("a temporary directory");
    tmp
}

impl Drop for Job {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits up to two minutes for `condition` (a torch job starts in seconds,
/// more on a loaded machine).
pub(crate) fn wait_long(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

pub(crate) fn losses(work: &Path, rank: u32) -> String {
    std::fs::read_to_string(work.join(format!("losses-{rank}.txt"))).unwrap_or_default()
}

pub(crate) fn done(work: &Path) -> bool {
    work.join("done-0").exists() && work.join("done-1").exists()
}

#[test]
fn a_torchrun_job_with_dataloader_workers_goes_to_disk_and_back_bit_exact() {
    let Some(criu) = criu() else { return };
    let Some(python) = needed_python_with_torch() else {
        return;
    };
    let fx = Fixture::new();
    let steps = 40;
    // The reference: the same job, never dumped.
    let reference = reference_run(&fx, &python, steps);
    // The job, dumped with its drain after a few steps.
    let work = fx.dir().join("job");
    std::fs::create_dir(&work).expect("mkdir");
    let mut job = Job::start(&fx, &python, &work, steps, "0.2", true);
    wait_long("the job's fifth step", || {
        losses(&work, 0).lines().count() >= 5
    });
    let images = fx.dir().join("images");
    let dumped = dump_drained(&fx, &images, &criu, job.agent, &[]);
    let options = options_of(&dumped);
    assert!(
        options.iter().any(|o| o == "--network-lock skip"),
        "{options:?}"
    );
    assert!(
        options.iter().any(|o| o.starts_with("--ghost-limit ")),
        "8 MiB batches in /dev/shm: {options:?}"
    );
    job.reap();
    wait_long("the dumped job to be gone", || !alive(job.agent));
    let at_dump = losses(&work, 0).lines().count();
    assert!(at_dump < steps as usize, "dumped mid-run");
    let (code, undumped) = undump(&fx, &images, &criu, &[]);
    assert_eq!(code, 0, "{undumped:#}");
    wait_long("the restored job to finish", || done(&work));
    for rank in 0..2 {
        assert_eq!(
            losses(&work, rank),
            losses(&reference, rank),
            "rank {rank}: the losses after the undump"
        );
    }
}
