//! Snapshots a job survives (SPEC section 17): `dump --leave-running`, the
//! job going on, and its images brought back later, after a crash or
//! after the job ended, with what the images need of the world put back
//! or checked before any change.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::disk::{
    a_free_port_below_the_ephemeral_range, alive, connected_pair, criu, dump, undump,
};
use crate::support::{wait_until, Fixture};

/// The host's TCP sockets in TIME_WAIT whose local port is `port`.
fn time_wait_on(port: u16) -> usize {
    let suffix = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|t| std::fs::read_to_string(t).ok())
        .map(|table| {
            table
                .lines()
                .skip(1)
                .filter(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    fields.get(1).is_some_and(|l| l.ends_with(&suffix))
                        && fields.get(3) == Some(&"06")
                })
                .count()
        })
        .sum()
}

/// Whether `pid` is taken, a zombie's too (CRIU restores each process
/// with its own PID).
fn exists(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The first child of `pid` (its main thread's `children` file).
fn child_of(pid: i32) -> i32 {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .expect("the children file")
        .split_whitespace()
        .next()
        .and_then(|c| c.parse().ok())
        .expect("a child")
}

/// Runs CRIU's restore of `images` alone, as cudackpt would but with
/// nothing put back first: its exit status and log.
fn criu_alone(criu: &Path, images: &Path, work: &Path) -> (bool, String) {
    std::fs::create_dir_all(work).expect("a work directory");
    let status = Command::new(criu)
        .args(["restore", "--restore-detached", "--tcp-established", "-v4"])
        .arg("-D")
        .arg(images)
        .arg("-W")
        .arg(work)
        .args(["--pidfile", "pid", "-o", "restore.log"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("criu runs");
    let log = std::fs::read_to_string(work.join("restore.log")).unwrap_or_default();
    (status.success(), log)
}

/// The pair's server listens without `SO_REUSEADDR`, as NCCL's bootstrap
/// does. Snapshotted (`dump --leave-running`), it goes on; then it
/// crashes, the server first, so its end of the connection is left in
/// TIME_WAIT on the port it listened on. CRIU alone cannot bring the
/// snapshot back then ("Address already in use", for up to a minute);
/// `undump` closes what the crash left, says so, and brings it back at
/// once.
#[test]
fn a_crashed_job_s_snapshot_comes_back_at_once_over_its_time_wait_sockets() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let port = a_free_port_below_the_ephemeral_range();
    let (job, _session, _host) = connected_pair(&fx, port, None);
    let client = child_of(job.0);
    let images = fx.dir().join("images");
    let (code, dumped) = dump(&fx, &images, &criu, job.0, &["--leave-running"]);
    assert_eq!(code, 0, "{dumped:#}");
    assert!(
        alive(job.0) && alive(client),
        "a snapshot leaves the job running"
    );
    // The crash: the server's end closes first, then the client's.
    Command::new("kill")
        .args(["-9", &job.0.to_string()])
        .stderr(std::process::Stdio::null())
        .status()
        .expect("kill");
    wait_until("the server to be gone", || !exists(job.0));
    Command::new("kill")
        .args(["-9", &client.to_string()])
        .stderr(std::process::Stdio::null())
        .status()
        .expect("kill");
    wait_until("the client to be gone", || !exists(client));
    wait_until("the server's end in TIME_WAIT", || time_wait_on(port) > 0);

    // The harm: CRIU alone fails on the port.
    let (restored, log) = criu_alone(&criu, &images, &fx.dir().join("criu-alone"));
    assert!(!restored, "CRIU alone restored it over TIME_WAIT: {log}");
    assert!(
        log.contains("Address already in use"),
        "CRIU failed on the port: {log}"
    );
    wait_until("CRIU to take back what it had restored", || !exists(job.0));
    assert!(time_wait_on(port) > 0, "TIME_WAIT still there");

    // The undump closes it and brings the pair back, saying so.
    let (code, undumped) = undump(&fx, &images, &criu, &[]);
    assert_eq!(code, 0, "{undumped:#}");
    assert!(alive(job.0), "the server is back");
    assert_eq!(time_wait_on(port), 0);
    let remarks = undumped["warnings"].to_string();
    assert!(
        remarks.contains("closed 1 socket left by closed connections of the job's last run")
            && remarks.contains(&format!(":{port} to "))
            && remarks.contains("(TIME_WAIT)"),
        "{undumped:#}"
    );
}

/// A job listening on a Unix socket in a directory of its own under /tmp,
/// as each of Python's multiprocessing listeners is
/// (`/tmp/pymp-*/listener-*`): the directory is gone by the time a job
/// that ended is brought back. The directory and the socket are given to
/// nobody, as a job of nobody's would have them (root here may lack
/// CAP_SYS_RESOURCE, which a dump of another user's job needs).
const UNIX_LISTENER: &str = r#"
import os, socket, time
os.mkdir(os.environ["DIR"], 0o700)
s = socket.socket(socket.AF_UNIX)
path = os.path.join(os.environ["DIR"], "listener")
s.bind(path)
s.listen(4)
os.chown(path, 65534, 65534)
os.chown(os.environ["DIR"], 65534, 65534)
while True:
    time.sleep(1)
"#;

/// Removes a directory when dropped.
struct Removed(std::path::PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The job ended after its snapshot and took its socket's directory with
/// it. CRIU alone cannot bind the socket there ("No such file or
/// directory"); `undump` makes the directory again as the job had it
/// (the socket's owner's, 0700), says so, and the restored listener takes
/// a connection.
#[test]
fn an_ended_job_s_snapshot_comes_back_with_its_socket_directory_made_again() {
    use std::os::unix::fs::MetadataExt;
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let dir = std::env::temp_dir().join(format!(
        "cudackpt-pymp-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    ));
    let _removed = Removed(dir.clone());
    let script = fx.dir().join("listener.py");
    std::fs::write(&script, UNIX_LISTENER).expect("write");
    let job = crate::disk::Orphan::launch(
        &fx,
        &format!(
            "DIR='{}' setsid python3 '{}' </dev/null >/dev/null 2>&1",
            dir.display(),
            script.display()
        ),
    );
    let socket = dir.join("listener");
    wait_until("the listener bound and given to nobody", || {
        std::fs::symlink_metadata(&dir).is_ok_and(|m| m.uid() == 65534)
    });
    let images = fx.dir().join("images");
    let (code, dumped) = dump(&fx, &images, &criu, job.0, &["--leave-running"]);
    assert_eq!(code, 0, "{dumped:#}");
    // The job ends, as Python's does, taking its directory away.
    Command::new("kill")
        .args(["-9", &job.0.to_string()])
        .stderr(std::process::Stdio::null())
        .status()
        .expect("kill");
    wait_until("the job to be gone", || !exists(job.0));
    std::fs::remove_dir_all(&dir).expect("the job's directory goes with it");

    // The harm: CRIU alone fails on the socket.
    let (restored, log) = criu_alone(&criu, &images, &fx.dir().join("criu-alone"));
    assert!(!restored, "CRIU alone bound it in no directory: {log}");
    assert!(
        log.contains("No such file or directory") && log.contains("listener"),
        "CRIU failed on the socket: {log}"
    );
    wait_until("CRIU to take back what it had restored", || !exists(job.0));

    let (code, undumped) = undump(&fx, &images, &criu, &[]);
    assert_eq!(code, 0, "{undumped:#}");
    assert!(alive(job.0), "the job is back");
    let made = std::fs::symlink_metadata(&dir).expect("the directory made again");
    assert!(made.is_dir());
    assert_eq!(
        (made.uid(), made.gid(), made.mode() & 0o7777),
        (65534, 65534, 0o700),
        "as the job had it"
    );
    let said = undumped["warnings"].to_string();
    assert!(
        said.contains(&format!(
            "made {} again (mode 700, uid 65534)",
            dir.display()
        )),
        "{undumped:#}"
    );
    std::os::unix::net::UnixStream::connect(&socket).expect("the listener takes a connection");
}

/// Each step's loss a losses file holds, the last line of a step winning:
/// a restored run appends again from its snapshot's step (the file is
/// opened to append).
pub(crate) fn final_losses(text: &str) -> std::collections::BTreeMap<u32, String> {
    text.lines()
        .filter_map(|line| {
            let (step, loss) = line.split_once(' ')?;
            Some((step.parse().ok()?, loss.to_string()))
        })
        .collect()
}

/// Each rank's losses, step by step, in the disk job run to its end
/// untouched for `steps` steps.
pub(crate) fn reference_losses(
    fx: &Fixture,
    python: &Path,
    steps: u32,
) -> Vec<std::collections::BTreeMap<u32, String>> {
    let reference = crate::disk_jobs::reference_run(fx, python, steps);
    let expected: Vec<_> = (0..2)
        .map(|r| final_losses(&crate::disk_jobs::losses(&reference, r)))
        .collect();
    assert_eq!(expected[0].len(), steps as usize);
    expected
}

/// Waits until every process a dump's or undump's manifest names is gone
/// (a crashed job's: their PIDs are the restore's).
fn wait_until_gone(document: &serde_json::Value) {
    let pids: Vec<i32> = document["manifest"]["processes"]
        .as_array()
        .expect("the dump's processes")
        .iter()
        .filter_map(|p| p["pid"].as_i64().map(|p| p as i32))
        .collect();
    crate::disk_jobs::wait_long("the crashed job's processes to be gone", || {
        pids.iter().all(|&p| !exists(p))
    });
}

/// Two ports in a row below the ephemeral range, both free now.
fn two_free_ports() -> u16 {
    (0..100)
        .map(|_| a_free_port_below_the_ephemeral_range())
        .find(|&port| {
            port < u16::MAX && std::net::TcpListener::bind(("127.0.0.1", port + 1)).is_ok()
        })
        .expect("two free ports in a row")
}

/// `cudackpt --json dump --drain --leave-running --to IMAGES --criu CRIU
/// PID` with no iptables on PATH: its document, which must say success.
fn snapshot(fx: &Fixture, images: &Path, criu: &Path, pid: i32) -> serde_json::Value {
    crate::disk_jobs::dump_drained(fx, images, criu, pid, &["--leave-running"])
}

/// A torchrun job (two gloo ranks, fork DataLoader workers, a ring of
/// connections without `SO_REUSEADDR` as NCCL's bootstrap holds, its
/// losses appended to a file, torchrun's output in a file opened for
/// writing) is snapshotted twice while it runs and finishes bit-exact.
/// Its second snapshot then comes back after the job ended (its
/// multiprocessing directories gone, its output grown), and again at once
/// after a kill -9 of the whole job (its ring's ports in TIME_WAIT), each
/// time finishing bit-exact against a run never touched.
#[test]
fn a_torchrun_job_s_snapshot_comes_back_after_it_ended_and_at_once_after_a_crash_bit_exact() {
    use crate::disk_jobs::{done, losses, needed_python_with_torch, wait_long, Job};
    let Some(criu) = criu() else { return };
    let Some(python) = needed_python_with_torch() else {
        return;
    };
    let fx = Fixture::new();
    let steps = 40;
    let expected = reference_losses(&fx, &python, steps);

    let work = fx.dir().join("job");
    std::fs::create_dir(&work).expect("mkdir");
    let out = work.join("out");
    let ring = two_free_ports();
    let mut job = Job::start_with_ring_and_output(&fx, &python, &work, (steps, "0.2"), ring, &out);
    let step = |work: &Path| losses(work, 0).lines().count();
    wait_long("the job's fifth step", || step(&work) >= 5);
    snapshot(&fx, &fx.dir().join("first"), &criu, job.agent);
    let first = step(&work);
    wait_long("the job to go on", || step(&work) >= first + 4);
    let second = fx.dir().join("second");
    snapshot(&fx, &second, &criu, job.agent);
    let at_second = step(&work);
    assert!(at_second < steps as usize, "snapshotted mid-run");
    wait_long("the job to finish", || done(&work));
    job.reap();
    let finished = |what: &str| {
        for rank in 0..2 {
            assert_eq!(
                final_losses(&losses(&work, rank)),
                expected[rank as usize],
                "rank {rank}, {what}"
            );
        }
    };
    finished("snapshotted twice while it ran");
    wait_long("the job's processes to be gone", || {
        !Path::new(&format!("/proc/{}", job.agent)).exists()
    });

    // (b) After the job ended.
    let clear_done = || {
        for rank in 0..2 {
            let _ = std::fs::remove_file(work.join(format!("done-{rank}")));
        }
    };
    clear_done();
    let (code, undumped) = undump(&fx, &second, &criu, &[]);
    assert_eq!(code, 0, "{undumped:#}");
    let said = undumped["warnings"].to_string();
    assert!(
        said.contains(&format!("cut {} back", out.display())),
        "the launcher's output, grown since: {undumped:#}"
    );
    assert!(
        said.contains(&format!(
            "made {}/pymp-",
            crate::disk_jobs::job_tmp(&fx).display()
        )) && said.contains("/listener-"),
        "the DataLoader's multiprocessing directories, gone with the job: {undumped:#}"
    );
    let lines = step(&work);
    wait_long("the restored job to go on", || step(&work) >= lines + 3);

    // (a) At once after a crash of the whole job.
    job.kill();
    wait_until_gone(&undumped);
    clear_done();
    let (code, undumped) = undump(&fx, &second, &criu, &[]);
    assert_eq!(code, 0, "{undumped:#}");
    assert!(
        undumped["warnings"]
            .to_string()
            .contains("left by closed connections of the job's last run"),
        "the crashed run's connections in TIME_WAIT: {undumped:#}"
    );
    wait_long("the job restored after its crash to finish", || done(&work));
    finished("restored after it ended, then at once after a crash");
}

/// A launcher's output as Python's `subprocess` gives it (a file opened
/// "w" in the launcher, the job's standard output and error): written to
/// after the snapshot, it is cut back at the undump, what was written
/// since kept beside it.
#[test]
fn a_python_launcher_s_output_that_grew_is_cut_back() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let log = fx.dir().join("job.log");
    let ready = fx.dir().join("job.pid");
    let launcher = format!(
        "import subprocess, os\nlog = open({log:?}, 'w')\np = subprocess.Popen(['sleep', '600'], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=dict(os.environ, LD_PRELOAD=os.environ['CUDA']))\nopen({ready:?}, 'w').write(str(p.pid))\n",
        log = log.display().to_string(),
        ready = ready.display().to_string(),
    );
    let script = fx.dir().join("launcher.py");
    std::fs::write(&script, launcher).expect("write");
    let status = Command::new("python3")
        .arg(&script)
        .env("CUDA", crate::support::fake_libcuda())
        .env("FAKE_CUDA_STATE_DIR", fx.dir())
        .status()
        .expect("the launcher runs");
    assert!(status.success());
    let pid: i32 = std::fs::read_to_string(&ready)
        .expect("the job's PID")
        .trim()
        .parse()
        .expect("a PID");
    let _session = crate::disk::KilledSession(pid);
    wait_until("the job to load the driver", || {
        std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .is_ok_and(|m| m.contains("libfake_libcuda"))
    });
    std::fs::write(&log, "before\n").expect("the log");
    let images = fx.dir().join("images");
    let (code, dumped) = dump(&fx, &images, &criu, pid, &["--leave-running"]);
    assert_eq!(code, 0, "{dumped:#}");
    std::fs::write(&log, "before\nand after the snapshot\n").expect("the log grows");
    Command::new("kill")
        .args(["-9", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status()
        .expect("kill");
    wait_until("the job to be gone", || !exists(pid));
    let (code, undumped) = undump(&fx, &images, &criu, &[]);
    assert_eq!(code, 0, "{undumped:#}");
    assert_eq!(std::fs::read_to_string(&log).expect("the log"), "before\n");
    assert!(
        undumped["warnings"]
            .to_string()
            .contains(&format!("cut {} back to its 7 bytes", log.display())),
        "{undumped:#}"
    );
}

/// Kills the pair rooted at `root` (its session), and waits until both
/// its processes are gone.
fn crash(root: i32) {
    let child = child_of(root);
    Command::new("pkill")
        .args(["-9", "-s", &root.to_string()])
        .status()
        .expect("pkill");
    wait_until("the job to be gone", || !exists(root) && !exists(child));
}

/// `cudackpt --json undump IMAGES --criu CRIU` in a network namespace of
/// its own with loopback up (a stand-in for another host, whose addresses
/// are not this one's): its exit status and document.
fn undump_elsewhere(fx: &Fixture, images: &Path, criu: &Path) -> (i32, serde_json::Value) {
    let mut command = Command::new("unshare");
    command
        .args([
            "--net",
            "--",
            "sh",
            "-c",
            // Loopback up, and an address of its own where the kernel
            // has dummy links: another host's.
            "ip link set lo up && { ip link add elsewhere0 type dummy && ip address add 192.0.2.7/24 dev elsewhere0 && ip link set elsewhere0 up; } 2>/dev/null; exec \"$0\" \"$@\"",
        ])
        .arg(crate::support::cudackpt_bin())
        .args(["--json", "undump"])
        .arg(images)
        .arg("--criu")
        .arg(criu);
    fx.configure_for(&mut command);
    let output = command.output().expect("run cudackpt in a namespace");
    (
        output.status.code().unwrap_or(-1),
        crate::disk::document(&output),
    )
}

/// Brought back on another host (another network namespace, its own
/// addresses): a job whose sockets are bound to this host's address is
/// refused before any change, each socket named with the settings that
/// avoid it; the same job on loopback comes back there.
#[test]
fn a_snapshot_elsewhere_comes_back_on_loopback_and_is_refused_naming_sockets_bound_to_this_host() {
    let Some(criu) = criu() else { return };
    if !ip_runs() {
        return;
    }
    let fx = Fixture::new();
    // On this host's own address (the one the default route leaves by).
    let (job, _session, host) = connected_pair(&fx, a_free_port_below_the_ephemeral_range(), None);
    if !crate::support::prerequisite(
        "find an address of this host besides loopback",
        host != "127.0.0.1",
    ) {
        return;
    }
    let images = fx.dir().join("bound");
    let (code, dumped) = dump(&fx, &images, &criu, job.0, &["--leave-running"]);
    assert_eq!(code, 0, "{dumped:#}");
    crash(job.0);
    let (code, refused) = undump_elsewhere(&fx, &images, &criu);
    let message = crate::disk::refusal_message(code, &refused, "address_missing");
    assert!(
        message.contains(&format!("a TCP listener on {host}:"))
            && message.contains(&format!("a TCP socket on {host}:")),
        "{message}"
    );
    assert!(
        refused["error"]["hint"]
            .to_string()
            .contains("--master-addr 127.0.0.1"),
        "{refused:#}"
    );
    assert!(refused["criu_log"].is_null(), "CRIU never ran: {refused:#}");
    drop(_session);

    // On loopback: it comes back in the other namespace.
    let (job, _session, _) = crate::disk::connected_pair_on(
        &fx,
        "127.0.0.1",
        a_free_port_below_the_ephemeral_range(),
        None,
    );
    let images = fx.dir().join("loopback");
    let (code, dumped) = dump(&fx, &images, &criu, job.0, &["--leave-running"]);
    assert_eq!(code, 0, "{dumped:#}");
    crash(job.0);
    let (code, undumped) = undump_elsewhere(&fx, &images, &criu);
    assert_eq!(code, 0, "{undumped:#}");
    assert!(alive(job.0), "back, in the other namespace");
    let here = std::fs::read_link("/proc/self/ns/net").expect("this namespace");
    let theirs = std::fs::read_link(format!("/proc/{}/ns/net", job.0)).expect("its namespace");
    assert_ne!(here, theirs, "the job runs in the other namespace");
}

/// Whether `ip` (iproute2) runs here: a prerequisite.
fn ip_runs() -> bool {
    let ip = Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    crate::support::prerequisite("run ip (iproute2)", ip)
}

/// (c) Another host: the torchrun job with every socket on loopback (see
/// [`Job::start_on_loopback`]), snapshotted while it runs and then killed
/// whole, comes back in another network namespace with an address of its
/// own, runs there, and finishes bit-exact against a run never touched.
#[test]
fn a_torchrun_job_on_loopback_comes_back_in_another_network_namespace_bit_exact() {
    use crate::disk_jobs::{done, losses, needed_python_with_torch, wait_long, Job};
    let Some(criu) = criu() else { return };
    if !ip_runs() {
        return;
    }
    let Some(python) = needed_python_with_torch() else {
        return;
    };
    let fx = Fixture::new();
    let steps = 24;
    let expected = reference_losses(&fx, &python, steps);
    let work = fx.dir().join("job");
    std::fs::create_dir(&work).expect("mkdir");
    let mut job = Job::start_on_loopback(&fx, &python, &work, (steps, "0.2"));
    let step = |work: &Path| losses(work, 0).lines().count();
    wait_long("the job's fifth step", || step(&work) >= 5);
    let images = fx.dir().join("snapshot");
    let dumped = snapshot(&fx, &images, &criu, job.agent);
    assert!(step(&work) < steps as usize, "snapshotted mid-run");
    job.kill();
    job.reap();
    wait_until_gone(&dumped);
    let (code, undumped) = undump_elsewhere(&fx, &images, &criu);
    assert_eq!(code, 0, "{undumped:#}");
    let here = std::fs::read_link("/proc/self/ns/net").expect("this namespace");
    let theirs = std::fs::read_link(format!("/proc/{}/ns/net", job.agent));
    assert!(
        theirs.is_ok_and(|theirs| theirs != here),
        "the restored agent runs in the other namespace"
    );
    wait_long("the job restored elsewhere to finish", || done(&work));
    for rank in 0..2 {
        assert_eq!(
            final_losses(&losses(&work, rank)),
            expected[rank as usize],
            "rank {rank}, restored in another network namespace"
        );
    }
}

/// A person reading a snapshot's line knows it is complete and that the
/// job went on.
#[test]
fn a_snapshot_says_it_is_complete_and_that_the_job_goes_on() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let job = crate::disk::Orphan::cuda(&fx);
    let images = fx.dir().join("images");
    let output = fx
        .std_command(&[
            "dump",
            "--leave-running",
            "--to",
            images.to_str().expect("UTF-8"),
            "--criu",
            criu.to_str().expect("UTF-8"),
            &job.0.to_string(),
        ])
        .output()
        .expect("run cudackpt");
    let said = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(
        said.starts_with(&format!(
            "dumped the tree of PID {} (1 process) to {}",
            job.0,
            images.display()
        )) && said
            .trim_end()
            .ends_with("; a complete snapshot (its manifest says so), and the job goes on running"),
        "{said}"
    );
    assert!(alive(job.0));
}
