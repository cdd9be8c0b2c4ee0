//! `recover`'s part of the drain: what a cudackpt killed mid-drain owes
//! each process, judged from its intent record and, where a signal was in
//! flight, from what the process does.

use std::time::{Duration, Instant};

use super::handshake;
use super::ledger::{DrainNote, DrainPhase, SignalLedger, Signalled};
use super::protocol::{self, DrainSignal};
use super::rebuild::rebuild;
use super::report::DrainRecord;
use super::settings::DEFAULT_DRAIN_TIMEOUT;
use crate::targets::process::Target;

/// What `recover` did for a drained group a dead cudackpt left.
#[derive(Default)]
pub struct Recovered {
    /// Each member asked, with its drain report.
    pub reports: Vec<(i32, DrainRecord)>,
    /// What it could not be sure of, in words.
    pub warnings: Vec<String>,
}

/// `recover`'s part for a drained group a dead cudackpt left, once its
/// processes are back where they started (running): each is sent exactly
/// what undoes what happened to it, from the record's account of every
/// signal sent (`ledger`, the record taken over, written as it goes):
/// nothing to one never asked, one signal to one asked once (it rebuilds,
/// or calls off a request it has not acted on), none to one asked twice.
/// The one process a signal was going to when cudackpt died is judged by
/// what it does (see `delivered`).
pub fn recover(
    pids: &[i32],
    note: &DrainNote,
    ledger: &dyn SignalLedger,
    bounds: &Bounds<'_>,
) -> Recovered {
    let mut recovered = Recovered::default();
    let Ok(signal) = DrainSignal::from_number(note.signal) else {
        return recovered;
    };
    let timeout = bounds.timeout_of(note);
    let privileges = crate::targets::process::Privileges::current();
    let targets: Vec<Target> = pids
        .iter()
        .filter_map(|&pid| crate::targets::process::check_target(pid, &privileges, true).ok())
        .collect();
    let mut owed: Vec<&Target> = Vec::new();
    for target in &targets {
        let pid = target.pid;
        if note.signals.is_none() {
            // A record from before signals were counted: by its phase.
            if note.phase == DrainPhase::Requested || handshake::shows_marker(pid) {
                owed.push(target);
            }
            continue;
        }
        let known = note.of(pid).unwrap_or(Signalled {
            pid,
            sent: 0,
            drained_before: false,
        });
        if note.sending == Some(pid) {
            let went = delivered(target, signal, known.owes_one(), timeout, bounds.stop);
            ledger.end(pid, went.delivered);
            if let Some(doubt) = went.doubt {
                recovered.warnings.push(doubt);
            }
            let now = Signalled {
                sent: known.sent + u32::from(went.delivered),
                ..known
            };
            if now.owes_one() {
                owed.push(target);
            }
        } else if known.owes_one() {
            owed.push(target);
        }
    }
    ledger.flush();
    recovered.reports = rebuild(&owed, signal, Instant::now() + timeout, ledger, bounds.stop);
    recovered
}

/// What bounds a recover's waits, whatever a record says: the longest wait
/// the command line allows (a record is a file its owner may have
/// written: a planted `timeout_ms` of 2^64 - 1 kept root's recover waiting
/// for ever), and a stop asked for (a signal).
pub struct Bounds<'a> {
    pub longest: Duration,
    pub stop: &'a (dyn Fn() -> bool + Sync),
}

impl Bounds<'_> {
    /// The record's own drain timeout, capped by [`Bounds::longest`]
    /// (pure).
    pub fn timeout_of(&self, note: &DrainNote) -> Duration {
        note.timeout_ms
            .map_or(DEFAULT_DRAIN_TIMEOUT, Duration::from_millis)
            .min(self.longest)
    }
}

/// Whether the signal that was going to `target` when cudackpt died went.
struct SignalVerdict {
    delivered: bool,
    /// Said when its behaviour could not settle it.
    doubt: Option<String>,
}

/// Judges a signal in doubt by what the process does. It went if it is
/// still pending. Else, a request (`owed_before` false) went if the
/// process drains within `timeout` (its marker appears); a rebuild or a
/// call-off went if the marker goes, or is not there at the end. A process
/// that takes a request and never reaches a safe point cannot be told from
/// one never asked: it is taken as never asked, and the words say so.
fn delivered(
    target: &Target,
    signal: DrainSignal,
    owed_before: bool,
    timeout: Duration,
    stop: &dyn Fn() -> bool,
) -> SignalVerdict {
    let pid = target.pid;
    if handshake::pending(target, signal) {
        return SignalVerdict {
            delivered: true,
            doubt: None,
        };
    }
    let until = Instant::now() + timeout;
    let mut seen_marker = false;
    loop {
        let marker = handshake::shows_marker(pid);
        if !owed_before && marker {
            // It drained: it had the request.
            return SignalVerdict {
                delivered: true,
                doubt: None,
            };
        }
        if owed_before && seen_marker && !marker {
            // It rebuilt: it had the rebuild.
            return SignalVerdict {
                delivered: true,
                doubt: None,
            };
        }
        seen_marker |= marker;
        if Instant::now() >= until || target.still_the_same().is_err() || stop() {
            break;
        }
        std::thread::sleep(handshake::POLL);
    }
    // Seconds, as the drain timeout is given.
    let waited = format!("{:.1} s", timeout.as_secs_f64());
    if owed_before {
        let marker = handshake::shows_marker(pid);
        SignalVerdict {
            delivered: !marker,
            doubt: (!marker && !seen_marker).then(|| format!(
                "PID {pid}: cudackpt died as it sent it a rebuild or a call-off; it showed no drain marker within {waited}, so that signal is taken as delivered and nothing more was sent. If it shows the marker {} later, `cudackpt resume {pid}` asks it to rebuild",
                protocol::MARKER
            )),
        }
    } else {
        SignalVerdict {
            delivered: false,
            doubt: Some(format!(
                "PID {pid}: cudackpt died as it sent it the drain request; it did not drain within {waited}, so it is taken as never asked and nothing was sent. If it shows the drain marker {} later, `cudackpt resume {pid}` asks it to rebuild",
                protocol::MARKER
            )),
        }
    }
}
