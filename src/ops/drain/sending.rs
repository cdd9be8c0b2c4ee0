//! Sending the drain signal, written in the intent record's ledger before
//! it goes and after, and the end of a wait for the answers: shared by the
//! handshake ([`super::stage`]) and the rebuilds ([`super::rebuild`]).

use std::time::{Duration, Instant};

use super::protocol as drain;
use crate::ops::execute::failpoint::{self, Send};
use crate::ops::journal::intent::SignalLedger;
use crate::ops::vocabulary::drain_protocol::DrainSignal;
use crate::targets::process::Target;

/// The end of a wait that starts now: `timeout` from now, or `deadline`
/// if sooner (pure).
pub(super) fn wait_until(timeout: Duration, deadline: Option<Instant>) -> Instant {
    let by_timeout = Instant::now() + timeout;
    deadline.map_or(by_timeout, |deadline| deadline.min(by_timeout))
}

/// Sends the drain signal to one process, written down first: the record
/// says it is going before it goes, and the next write says it went.
pub(super) fn send(
    target: &Target,
    signal: DrainSignal,
    ledger: &dyn SignalLedger,
) -> std::io::Result<()> {
    ledger.begin(target.pid);
    failpoint::drain_signal(Send::Before);
    let sent = drain::ask(target, signal);
    ledger.end(target.pid, sent.is_ok());
    if sent.is_ok() {
        failpoint::drain_signal(Send::After);
    }
    sent
}
