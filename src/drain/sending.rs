//! Sending the drain signal, written in the ledger before it goes and
//! after, and the end of a wait for the answers: shared by the handshake
//! of the pipeline's stage and the rebuilds. A debug build can kill itself
//! around any send, so that tests put a kill -9 at every instant of a
//! drain.

use std::time::{Duration, Instant};

use super::handshake;
use super::ledger::SignalLedger;
use super::protocol::DrainSignal;
use crate::targets::process::Target;

/// The end of a wait that starts now: `timeout` from now, or `deadline`
/// if sooner (pure).
pub fn wait_until(timeout: Duration, deadline: Option<Instant>) -> Instant {
    let by_timeout = Instant::now() + timeout;
    deadline.map_or(by_timeout, |deadline| deadline.min(by_timeout))
}

/// Sends the drain signal to one process, written down first: the record
/// says it is going before it goes, and the next write says it went.
pub fn send(
    target: &Target,
    signal: DrainSignal,
    ledger: &dyn SignalLedger,
) -> std::io::Result<()> {
    ledger.begin(target.pid);
    fail_point(Send::Before);
    let sent = handshake::ask(target, signal);
    ledger.end(target.pid, sent.is_ok());
    if sent.is_ok() {
        fail_point(Send::After);
    }
    sent
}

/// Where a drain signal send stands, for [`fail_point`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Send {
    /// The record says the signal is going; it has not gone.
    Before,
    /// It went; the record has not said so yet.
    After,
}

/// A debug build's SIGKILL of itself around the Nth drain signal it sends
/// (requests, rebuilds and call-offs alike, counted from 1):
/// `CUDACKPT_DEBUG_KILL_AT=before-signal:N` or `after-signal:N`. Release
/// builds compile it to nothing, so no variable can kill an installed
/// cudackpt.
#[cfg(debug_assertions)]
fn fail_point(when: Send) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SENT: AtomicU32 = AtomicU32::new(0);
    let Some(wanted) = crate::environment::debug(crate::environment::DEBUG_KILL_AT) else {
        return;
    };
    let nth = match when {
        Send::Before => SENT.load(Ordering::SeqCst) + 1,
        Send::After => SENT.fetch_add(1, Ordering::SeqCst) + 1,
    };
    let label = match when {
        Send::Before => "before-signal",
        Send::After => "after-signal",
    };
    if wanted == *format!("{label}:{nth}") {
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
fn fail_point(_when: Send) {}
