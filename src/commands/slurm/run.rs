//! `cudackpt slurm run -- COMMAND`: a Slurm batch job's command, run so
//! that a preemption writes the job to disk and its restart brings it
//! back. As the batch script's own process (`exec cudackpt slurm run --
//! ...`), it asks the node's service (`serve`), which checks who asks:
//!
//! - at a restart (Slurm's restart count above 0), the service brings the
//!   job back from its last complete snapshot, onto the GPUs Slurm gave it
//!   now; where there is none, or it cannot come back here, the command
//!   starts over, and the output says why;
//! - at Slurm's preemption signal (`--signal=B:USR1@SECONDS` and
//!   `SlurmctldParameters=preempt_send_user_signal`), the service drains
//!   the job and writes it to disk; the job is then requeued (by the
//!   wrapper, or by the preemption), and comes back at its next start;
//! - Slurm's other signals go to the job, wherever it runs, and the
//!   wrapper ends with the job's exit status.
//!
//! Every step is said on standard error (the job's output), with the
//! time, the node, where the images are and how long it took. Without a
//! service the command runs as it would without cudackpt, saying so.

use std::ffi::OsString;
use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use super::protocol::{receive, send, Ask, Reply};

/// What the wrapper is given.
#[derive(Debug, Clone)]
pub struct RunSettings {
    pub socket: PathBuf,
    pub command: Vec<OsString>,
}

/// What the wrapper waits for.
enum Event {
    Signal(i32),
    ChildExited(i32),
    Replied(Reply),
    ServiceGone,
}

/// The job's command as it runs.
enum Job {
    /// The wrapper's child.
    Child { pid: i32 },
    /// Restored by the service, its child; held by a pidfd opened when
    /// the service named it (it runs as the job's user, as the wrapper
    /// does), for the wrapper to stop it should the service go.
    Restored {
        root: i32,
        pidfd: Option<std::os::fd::OwnedFd>,
    },
}

/// A line of the job's output (standard error, through the writer the
/// command line gives).
fn say(line: &str) {
    super::tell(line);
}

fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

fn at(unix_s: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_secs(unix_s))
        .to_string()
}

/// Runs the job's command as the module says; its exit status.
pub fn run(settings: &RunSettings) -> i32 {
    let (tx, rx) = mpsc::channel();
    if let Err(why) = watch_signals(tx.clone()) {
        say(&format!(
            "cannot catch signals ({why}): the job runs without snapshots"
        ));
        return plain(&settings.command);
    }
    let (mut service, hello) = match connect(&settings.socket, tx.clone()) {
        Ok(connected) => connected,
        Err(why) => {
            say(&format!("{why}; the job runs without snapshots"));
            return supervise(None, None, spawn(&settings.command, &tx), &rx);
        }
    };
    let Reply::Hello {
        job,
        node,
        restarts,
        ..
    } = hello
    else {
        return 1;
    };
    say(&format!(
        "job {job} on {node}: Slurm's preemption signal (USR1) writes it to disk through {}",
        settings.socket.display()
    ));
    let mut restored = None;
    if restarts > 0 {
        let _ = send(&mut service, &Ask::Restore);
        match next_answer(&rx, &tx) {
            Some(Reply::Restored {
                from,
                written_on,
                written_unix_s,
                took_ms,
                root,
                gpus,
            }) => {
                say(&format!(
                    "job {job} came back on {node} at {} from its snapshot written on {written_on} at {} ({from}), in {:.1} s{}",
                    now(),
                    at(written_unix_s),
                    took_ms / 1e3,
                    gpus.map(|map| format!(", onto the GPUs Slurm gave it ({map})"))
                        .unwrap_or_default()
                ));
                restored = Some(root);
            }
            Some(Reply::NotRestored { why }) => {
                say(&format!(
                    "job {job} (restart {restarts}) starts over: {why}"
                ));
            }
            // The service went while it brought the job back: the job may
            // be running, restored, outside Slurm's reach. Starting it over
            // could run it twice; its snapshot is kept for a requeue.
            _ => {
                say(&format!(
                    "job {job} (restart {restarts}): the snapshot service ended while it brought the job back, which may have come back: the job is not started again, so that it never runs twice (its snapshot is kept: `scontrol requeue {job}` once the node's service runs again)"
                ));
                return 1;
            }
        }
    }
    let running = match restored {
        Some(root) => Some(Job::Restored {
            root,
            pidfd: crate::targets::process::pidfd_of(root),
        }),
        None => spawn(&settings.command, &tx),
    };
    supervise(Some(service), Some((job, node)), running, &rx)
}

/// Runs `command` as it would run without cudackpt (Slurm's signals reach
/// it as they reach every process of the job): its status.
fn plain(command: &[OsString]) -> i32 {
    match std::process::Command::new(&command[0])
        .args(&command[1..])
        .status()
    {
        Ok(status) => code_of(status),
        Err(e) => {
            say(&format!("cannot run {}: {e}", command[0].to_string_lossy()));
            127
        }
    }
}

/// Starts the job's command as the wrapper's child, its end told on `tx`.
fn spawn(command: &[OsString], tx: &mpsc::Sender<Event>) -> Option<Job> {
    let mut child = match std::process::Command::new(&command[0])
        .args(&command[1..])
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            say(&format!("cannot run {}: {e}", command[0].to_string_lossy()));
            let _ = tx.send(Event::ChildExited(127));
            return None;
        }
    };
    let pid = child.id() as i32;
    let tx = tx.clone();
    std::thread::spawn(move || {
        let code = child.wait().map_or(1, code_of);
        let _ = tx.send(Event::ChildExited(code));
    });
    Some(Job::Child { pid })
}

fn code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

/// Connects to the service and reads its first line: the stream to ask
/// on, and its hello; its answers then come as events.
fn connect(
    socket: &std::path::Path,
    tx: mpsc::Sender<Event>,
) -> Result<(UnixStream, Reply), String> {
    let stream = UnixStream::connect(socket)
        .map_err(|e| format!("no snapshot service at {} ({e})", socket.display()))?;
    let mut reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(|e| e.to_string())?;
    let hello = match receive::<Reply>(&mut reader) {
        Ok(Some(hello @ Reply::Hello { .. })) => hello,
        Ok(Some(Reply::Refused { why })) => {
            return Err(format!("the snapshot service refused: {why}"))
        }
        Ok(_) => return Err("the snapshot service said nothing".into()),
        Err(e) => return Err(format!("the snapshot service: {e}")),
    };
    // One socket behind both descriptors: its timeout is theirs.
    let _ = stream.set_read_timeout(None);
    std::thread::spawn(move || {
        while let Ok(Some(said)) = receive::<Reply>(&mut reader) {
            if tx.send(Event::Replied(said)).is_err() {
                return;
            }
        }
        let _ = tx.send(Event::ServiceGone);
    });
    Ok((stream, hello))
}

/// The service's next answer; what came meanwhile (a signal) is put back
/// after it, in order.
fn next_answer(rx: &mpsc::Receiver<Event>, tx: &mpsc::Sender<Event>) -> Option<Reply> {
    let mut meanwhile = Vec::new();
    let answer = loop {
        match rx.recv() {
            Ok(Event::Replied(said)) => break Some(said),
            Ok(Event::ServiceGone) | Err(_) => break None,
            Ok(other) => meanwhile.push(other),
        }
    };
    for event in meanwhile {
        let _ = tx.send(event);
    }
    answer
}

/// Catches the preemption signal and those Slurm ends a job with.
fn watch_signals(tx: mpsc::Sender<Event>) -> std::io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
    let mut signals = signal_hook::iterator::Signals::new([SIGUSR1, SIGTERM, SIGINT, SIGHUP])?;
    std::thread::spawn(move || {
        for signal in signals.forever() {
            if tx.send(Event::Signal(signal)).is_err() {
                return;
            }
        }
    });
    Ok(())
}

/// Waits for the job's end, acting on each event; the wrapper's exit
/// status.
fn supervise(
    service: Option<UnixStream>,
    named: Option<(u64, String)>,
    job: Option<Job>,
    rx: &mpsc::Receiver<Event>,
) -> i32 {
    let (id, node) = named.unwrap_or((0, String::new()));
    let mut watch = JobWatch {
        service,
        id,
        node,
        job,
        dumped: false,
        dumping: false,
        ended_while_dumping: None,
    };
    while let Ok(event) = rx.recv() {
        if let Some(code) = watch.on(event) {
            return finished(watch.service.as_mut(), rx, code);
        }
    }
    1
}

/// The wrapper's state while the job runs.
struct JobWatch {
    service: Option<UnixStream>,
    id: u64,
    node: String,
    job: Option<Job>,
    /// The job is on disk (its processes ended by the dump).
    dumped: bool,
    /// A dump was asked, and not yet answered.
    dumping: bool,
    /// How the job's processes ended while the dump ran: the job's
    /// status, should the dump fail.
    ended_while_dumping: Option<i32>,
}

impl JobWatch {
    /// Acts on `event`: the wrapper's exit status once the job is over.
    fn on(&mut self, event: Event) -> Option<i32> {
        let id = self.id;
        match event {
            Event::Signal(signal) if signal == signal_hook::consts::SIGUSR1 => self.preempted(),
            Event::Signal(signal) if self.dumped => {
                say(&format!(
                    "job {id}: stopped by signal {signal} after its snapshot"
                ));
                self.service = None;
                return Some(0);
            }
            Event::Signal(signal) => match (&self.job, &mut self.service) {
                (Some(Job::Child { pid }), _) => forward(*pid, signal),
                (Some(Job::Restored { .. }), Some(stream)) => {
                    let _ = send(stream, &Ask::Signal { signal });
                }
                _ => return Some(128 + signal),
            },
            // A dump ends the job's processes: their end waits for the
            // dump's answer.
            Event::ChildExited(code) | Event::Replied(Reply::Exited { code }) if self.dumping => {
                self.ended_while_dumping = Some(code);
            }
            Event::ChildExited(_) | Event::Replied(Reply::Exited { .. }) if self.dumped => {
                self.job = None;
            }
            Event::ChildExited(code) | Event::Replied(Reply::Exited { code }) => return Some(code),
            Event::Replied(Reply::Dumped { to, bytes, took_ms }) => {
                (self.dumping, self.dumped) = (false, true);
                say(&format!(
                    "job {id} was written to disk at {} on {}, {:.2} GB in {:.1} s, to {to}; it is requeued, and comes back from there",
                    now(),
                    self.node,
                    bytes as f64 / 1e9,
                    took_ms / 1e3
                ));
                requeue(id);
            }
            Event::Replied(Reply::NotDumped { why }) => return self.not_dumped(&why),
            Event::Replied(_) => {}
            Event::ServiceGone => {
                self.service = None;
                if let (Some(Job::Restored { root, pidfd }), false) = (&self.job, self.dumped) {
                    say(&format!(
                        "job {id}: the snapshot service ended while it ran the restored job (PID {root}), which is {}",
                        stop_restored(pidfd.as_ref())
                    ));
                    return Some(1);
                }
            }
        }
        None
    }

    /// Slurm's preemption signal: asks the service for the dump.
    fn preempted(&mut self) {
        match (&mut self.service, &self.job) {
            _ if self.dumped || self.dumping => {}
            (Some(stream), Some(_)) => {
                say(&format!(
                    "job {}: the preemption signal came at {}: writing the job to disk",
                    self.id,
                    now()
                ));
                self.dumping = send(stream, &Ask::Dump).is_ok();
            }
            _ => say("the preemption signal came, and there is no snapshot service: the job cannot be written to disk"),
        }
    }

    /// The dump failed: the job runs on, or, preempted, is requeued now
    /// (it would only be killed at the grace time's end).
    fn not_dumped(&mut self, why: &str) -> Option<i32> {
        self.dumping = false;
        let preempted = being_preempted(self.id);
        say(&format!(
            "job {} could not be written to disk at {}: {why}; {}, and its next start comes back from its last complete snapshot, or starts over",
            self.id,
            now(),
            if preempted {
                "it is preempted, so it is requeued now"
            } else {
                "it runs on"
            }
        ));
        // Requeued first, also where the job ended meanwhile (a dump whose
        // images were refused once written has ended it): a preempted job
        // is never lost.
        if preempted {
            requeue(self.id);
        }
        self.ended_while_dumping.take()
    }
}

/// Stops the restored job whose service went, through its pidfd: SIGTERM
/// (a launcher stops its workers), then SIGKILL after 30 s. What was done.
fn stop_restored(pidfd: Option<&std::os::fd::OwnedFd>) -> &'static str {
    use rustix::process::{pidfd_send_signal, Signal};
    let Some(pidfd) = pidfd else {
        return "left running: it could not be held when it came back";
    };
    if pidfd_send_signal(pidfd, Signal::TERM).is_err() {
        return "gone already";
    }
    if crate::targets::process::pidfd_exit_within(pidfd, Some(Duration::from_secs(30)))
        .unwrap_or(false)
    {
        return "stopped (SIGTERM)";
    }
    let _ = pidfd_send_signal(pidfd, Signal::KILL);
    "killed (SIGKILL, 30 s after SIGTERM)"
}

/// Sends `signal` to the wrapper's child.
fn forward(pid: i32, signal: i32) {
    use rustix_libc_wrappers::process::SignalExt;
    if let (Some(pid), Some(signal)) = (
        rustix::process::Pid::from_raw(pid),
        rustix::process::Signal::from_raw(signal),
    ) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// The job's command ended: tells the service (a job that succeeded needs
/// no snapshot) and waits a moment for it to note that, so the job ends
/// for Slurm after its images are gone; returns the job's status.
fn finished(service: Option<&mut UnixStream>, rx: &mpsc::Receiver<Event>, code: i32) -> i32 {
    if let Some(stream) = service {
        if send(stream, &Ask::Finished { code }).is_ok() {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
                match rx.recv_timeout(left) {
                    Ok(Event::Replied(Reply::Noted)) | Ok(Event::ServiceGone) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        }
    }
    code
}

/// Whether Slurm is preempting job `id` (its record has a preemption
/// time): a job whose dump failed then gains nothing by running on to the
/// end of its grace time, and the preemptor waits for it.
fn being_preempted(id: u64) -> bool {
    std::process::Command::new("scontrol")
        .args(["show", "job", "-o", &id.to_string()])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .is_ok_and(|output| {
            String::from_utf8_lossy(&output.stdout)
                .split_whitespace()
                .find_map(|word| word.strip_prefix("PreemptTime="))
                .is_some_and(|time| time != "None")
        })
}

/// Asks Slurm to requeue job `id` once it is on disk, so that it comes
/// back without waiting out the preemption's grace time; where Slurm
/// refuses, the preemption requeues it.
fn requeue(id: u64) {
    let requeued = std::process::Command::new("scontrol")
        .args(["requeue", &id.to_string()])
        .stdin(std::process::Stdio::null())
        .output();
    if let Ok(output) = requeued {
        if !output.status.success() {
            say(&format!(
                "scontrol requeue {id}: {}; Slurm's preemption requeues the job",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
    }
}
