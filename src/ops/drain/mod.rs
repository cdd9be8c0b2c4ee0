//! The drain handshake with processes (cudackpt(1), DRAIN PROTOCOL): may a process be asked,
//! ask it, read its answer, wait for answers. The request is a signal sent
//! through the target's pidfd, so it reaches that process and no other;
//! the answer is a thread name read in /proc/PID/task/*/comm, which crosses
//! PID and mount namespaces and plants no file. The protocol as data (the
//! signal, the marker) is `vocabulary::drain_protocol`; the stage that runs
//! the handshake, the rebuilds after the driver calls and `recover`'s part
//! are `stage`.

pub mod stage;

use std::thread;
use std::time::{Duration, Instant};

use crate::ops::execute::interrupt::Interrupt;
use crate::ops::journal::intent::Journal;
use crate::ops::preflight::host_memory::{self, Weighed};
use crate::ops::preflight::restorable::{self, Passed};
use crate::ops::vocabulary::ready::Ready;
use crate::ops::vocabulary::report::ProcessReport;
use crate::ops::vocabulary::request::Request;
use crate::ops::vocabulary::stop::Stop;

/// The drain of one command, as the pipeline sees it: the one way in. It
/// decides whether a drain applies, asks the restorability pre-flight
/// (now, or after the acknowledgements when it drains), runs the handshake
/// before the driver calls and the rebuilds after them, or says what a dry
/// run would have done.
pub struct Drain<'r> {
    request: &'r Request<'r>,
}

/// What the handshake left for after the driver calls.
pub struct Underway(Option<stage::Drained>);

impl Underway {
    /// The host-memory pre-flight the drain asked, on what its processes
    /// held once drained (none when the command did not drain).
    pub fn weighed(&mut self) -> Option<Weighed> {
        self.0.as_mut().and_then(|drained| drained.weighed.take())
    }
}

impl<'r> Drain<'r> {
    pub fn of(request: &'r Request<'r>) -> Drain<'r> {
        Drain { request }
    }

    /// Whether this command drains before its first lock.
    fn applies(&self) -> bool {
        self.request.drain.before_lock && stage::drains(&self.request.operation)
    }

    /// The restorability pre-flight, asked once: here, or (when this
    /// command drains) by the drain on the evidence after the
    /// acknowledgements. Outside a drain the marker is believed only where
    /// a cudackpt left the process drained.
    pub fn restorability(&self, ready: &Ready) -> Result<Passed, Stop> {
        if self.applies() {
            return Ok(Passed::default());
        }
        restorable::check(
            self.request,
            ready,
            &crate::ops::journal::drained::vouches_for,
        )
    }

    /// The host-memory pre-flight, asked once: here, or (when this command
    /// drains) by the drain, on the footprint its processes keep once they
    /// released what they could (a shrunk job may fit where it did not).
    /// A dry run cannot know what a drain would release: it weighs now,
    /// and says so rather than refuse.
    pub fn host_memory(&self, ready: &Ready) -> Result<Weighed, Stop> {
        if !self.applies() {
            return host_memory::check(self.request, ready);
        }
        if !self.request.dry_run {
            return Ok(Weighed::default());
        }
        if !host_memory::applies(self.request, ready) {
            return Ok(Weighed::default());
        }
        Ok(
            host_memory::weigh(self.request, ready, crate::gpu::nvml::usage_now()).unwrap_or_else(
                |why| Weighed {
                    remarks: vec![format!(
                        "host memory, weighed again after the drain: as they are now, {why}"
                    )],
                    usage: None,
                },
            ),
        )
    }

    /// A dry run's word on the drain.
    pub fn predict(&self, ready: &Ready, reports: &mut [ProcessReport]) {
        stage::predict(self.request, ready, reports);
    }

    /// The handshake, just before the driver calls.
    pub fn before_calls(
        &self,
        ready: &Ready,
        journal: &Journal,
        interrupt: &Interrupt,
        deadline: Option<Instant>,
    ) -> Result<Underway, Stop> {
        stage::drain(self.request, ready, journal, interrupt, deadline).map(Underway)
    }

    /// After the driver calls: members running again rebuild, and so do
    /// processes a command resumed that drained before it.
    pub fn after_calls(
        &self,
        underway: Underway,
        ready: &Ready,
        reports: &mut [ProcessReport],
        journal: &Journal,
        interrupt: &Interrupt,
        deadline: Option<Instant>,
    ) {
        if let Some(drained) = underway.0 {
            drained.settle(reports, journal, interrupt);
        }
        // A toggle --drain may also resume processes drained before: they
        // rebuild as after any resume (the settled members have their
        // report already).
        stage::rebuild_resumed(self.request, ready, reports, journal, deadline);
    }
}

use crate::ops::vocabulary::drain_protocol::{self, DrainSignal};

use crate::targets::evidence;
use crate::targets::process::{self, Target};

/// How often answers are read while waiting: far below a training step,
/// and a few small reads per process.
const POLL: Duration = Duration::from_millis(10);

/// Why a process cannot be asked to drain (nothing is sent to it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unable {
    /// Its `SigCgt` does not show the signal caught: the signal would kill
    /// it (or do whatever its default is), so it is never sent.
    NotCaught,
    /// Its status could not be read.
    Unreadable(String),
}

/// Whether `target` catches `signal`, from its `SigCgt` in /proc.
pub fn may_ask(target: &Target, signal: DrainSignal) -> Result<(), Unable> {
    let status = process::read_status(target.pid)
        .map_err(|e| Unable::Unreadable(e.to_string()))?
        .ok_or_else(|| Unable::Unreadable("it exited".to_string()))?;
    match status.caught {
        Some(caught) if signal.caught_by(caught) => Ok(()),
        Some(_) => Err(Unable::NotCaught),
        None => Err(Unable::Unreadable(
            "its status shows no SigCgt line".to_string(),
        )),
    }
}

/// Whether `pid` says its rebuild failed (the renamed marker thread).
pub fn shows_failure(pid: i32) -> bool {
    drain_protocol::shows_failure(&evidence::thread_names(pid))
}

/// What `pid` said of its failed rebuild in its error memfd, if anything
/// (cudackpt(1), DRAIN PROTOCOL).
pub fn stated_error(pid: i32) -> Option<String> {
    match crate::targets::procfs::find_fd_link(pid, drain_protocol::is_error_memfd) {
        crate::targets::procfs::FdLink::Found(link) => drain_protocol::stated_error(&link),
        _ => None,
    }
}

/// Whether `pid` shows the marker: it has drained and waits.
pub fn shows_marker(pid: i32) -> bool {
    drain_protocol::shows_marker(&evidence::thread_names(pid))
}

/// Whether `signal` was sent to `target` and not yet taken by it.
pub fn pending(target: &Target, signal: DrainSignal) -> bool {
    process::read_status(target.pid)
        .ok()
        .flatten()
        .is_some_and(|status| signal.in_mask(status.pending))
}

/// Sends the request (or the rebuild, or the call-off: the same signal).
pub fn ask(target: &Target, signal: DrainSignal) -> std::io::Result<()> {
    target.send_signal(signal.number())
}

/// How a wait ended for one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// It answered this long after the wait began.
    After(Duration),
    /// It exited (or its PID now names another process).
    Gone,
    /// No answer by the end of the wait.
    None,
}

/// Waits until every target answers (`answered` says so), exits, `until`
/// passes or `stop` asks to stop; returns each target's answer, in order.
pub fn wait_for(
    targets: &[&Target],
    answered: impl Fn(i32) -> bool,
    until: Instant,
    stop: &dyn Fn() -> bool,
) -> Vec<Answer> {
    let started = Instant::now();
    let mut answers = vec![Answer::None; targets.len()];
    loop {
        for (target, answer) in targets.iter().zip(answers.iter_mut()) {
            if *answer != Answer::None {
                continue;
            }
            if answered(target.pid) {
                *answer = Answer::After(started.elapsed());
            } else if target.still_the_same().is_err() {
                *answer = Answer::Gone;
            }
        }
        let pending = answers.contains(&Answer::None);
        if !pending || stop() || Instant::now() >= until {
            return answers;
        }
        thread::sleep(POLL.min(until.saturating_duration_since(Instant::now())));
    }
}
