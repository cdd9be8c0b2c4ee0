//! The drain handshake with one process and a group's wait
//! (cudackpt(1), DRAIN PROTOCOL): may a process be asked, ask it, read its
//! answer (the marker, a failed rebuild and its stated reason), wait for
//! answers. The request is a signal sent through the target's pidfd, so it
//! reaches that process and no other; the answer is a thread name read in
//! /proc/PID/task/*/comm, which crosses PID and mount namespaces and plants
//! no file.

use std::thread;
use std::time::{Duration, Instant};

use super::protocol::{self, DrainSignal};
use crate::targets::evidence;
use crate::targets::process::{self, Target};

/// How often answers are read while waiting: far below a training step,
/// and a few small reads per process.
pub const POLL: Duration = Duration::from_millis(10);

/// Whether `target` catches `signal`, from its `SigCgt` in /proc; why it
/// could not be told (its status unreadable, or gone) otherwise. A signal
/// it does not catch would kill it (or do whatever its default is), so
/// it is never sent.
pub fn catches(target: &Target, signal: DrainSignal) -> Result<bool, String> {
    let status = process::read_status(target.pid)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "it exited".to_string())?;
    match status.caught {
        Some(caught) => Ok(signal.caught_by(caught)),
        None => Err("its status shows no SigCgt line".to_string()),
    }
}

/// Whether `pid` says its rebuild failed (the renamed marker thread).
pub fn shows_failure(pid: i32) -> bool {
    protocol::shows_failure(&evidence::thread_names(pid))
}

/// What `pid` said of its failed rebuild in its error memfd, if anything
/// (cudackpt(1), DRAIN PROTOCOL).
pub fn stated_error(pid: i32) -> Option<String> {
    match crate::targets::procfs::find_fd_link(pid, protocol::is_error_memfd) {
        crate::targets::procfs::FdLink::Found(link) => protocol::stated_error(&link),
        _ => None,
    }
}

/// Whether `pid` shows the marker: it has drained and waits.
pub fn shows_marker(pid: i32) -> bool {
    protocol::shows_marker(&evidence::thread_names(pid))
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

/// How long the dump notice may stay pending before the request goes
/// anyway.
const NOTICE_TAKEN: Duration = Duration::from_millis(100);

/// Sends the dump notice (cudackpt(1), DRAIN PROTOCOL) if `target`
/// catches it, and waits (briefly) until it is taken, so that the
/// process's handler has seen it before the request that follows: two
/// pending signals are delivered lowest first, which would put the
/// request (the lower) before the notice. Returns whether it was sent.
pub fn notify_dump(target: &Target, notice: DrainSignal) -> std::io::Result<bool> {
    if catches(target, notice) != Ok(true) {
        return Ok(false);
    }
    target.send_signal(notice.number())?;
    let until = Instant::now() + NOTICE_TAKEN;
    while pending(target, notice) && Instant::now() < until {
        thread::sleep(Duration::from_millis(1));
    }
    Ok(true)
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
