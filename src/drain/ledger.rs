//! The drain's ledger (cudackpt(1), DRAIN PROTOCOL): how far a drained
//! group's handshake got and every drain signal a command sent, member by
//! member, as the intent record keeps it, so that `recover` sends each
//! process exactly what undoes it: nothing to one never asked, one signal
//! to one asked once. [`SignalLedger`] is where a command writes each send
//! down, before it goes and after.

use serde::{Deserialize, Serialize};

/// A drained group's handshake, as far as it got: the signal, and every
/// drain signal this command sent, member by member, so that `recover`
/// sends each exactly what undoes it (cudackpt(1), DRAIN PROTOCOL): nothing to one never
/// asked, one signal to one asked once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainNote {
    /// The signal that asked (and asks for the rebuild).
    pub signal: i32,
    pub phase: DrainPhase,
    /// The command's drain timeout: how long `recover` waits on a process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Each member's signals; `None` in a record written before they were
    /// kept (`recover` then goes by `phase`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signals: Option<Vec<Signalled>>,
    /// The member a signal was going to when the record was written: it
    /// may or may not have had it (the record is written just before the
    /// send, and again before the next one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sending: Option<i32>,
}

/// The drain signals one member has had from this command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signalled {
    pub pid: i32,
    /// Signals delivered to it: a request, then a rebuild or a call-off.
    pub sent: u32,
    /// It showed the marker before this command sent it anything (it
    /// drained for an earlier command and waits for its rebuild).
    pub drained_before: bool,
}

impl Signalled {
    /// Whether the process waits for one more signal: it was asked once
    /// (or drained before) and not yet asked again.
    pub fn owes_one(self) -> bool {
        self.drained_before ^ (self.sent % 2 == 1)
    }
}

/// How far a drain got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DrainPhase {
    /// The requests are being sent, or answered.
    Requested,
    /// Every member acknowledged.
    Drained,
    /// A resume is asking processes that drained before to rebuild (no
    /// drain of its own).
    Rebuilding,
}

impl DrainNote {
    /// A drain about to ask `members` (PID, showing the marker already).
    pub fn new(signal: i32, timeout: std::time::Duration, members: &[(i32, bool)]) -> DrainNote {
        DrainNote {
            signal,
            phase: DrainPhase::Requested,
            timeout_ms: Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
            signals: Some(
                members
                    .iter()
                    .map(|&(pid, drained_before)| Signalled {
                        pid,
                        sent: 0,
                        drained_before,
                    })
                    .collect(),
            ),
            sending: None,
        }
    }

    /// Notes `pids`, drained before this command, as owed their rebuild
    /// (those already noted keep their account).
    pub fn owe_rebuild(&mut self, pids: &[i32]) {
        let signals = self.signals.get_or_insert_with(Vec::new);
        for &pid in pids {
            if !signals.iter().any(|s| s.pid == pid) {
                signals.push(Signalled {
                    pid,
                    sent: 0,
                    drained_before: true,
                });
            }
        }
    }

    /// A signal is about to go to `pid`.
    pub fn begin(&mut self, pid: i32) {
        self.sending = Some(pid);
    }

    /// The signal to `pid` went (`delivered`) or could not be sent.
    pub fn end(&mut self, pid: i32, delivered: bool) {
        if self.sending == Some(pid) {
            self.sending = None;
        }
        if !delivered {
            return;
        }
        let signals = self.signals.get_or_insert_with(Vec::new);
        match signals.iter_mut().find(|s| s.pid == pid) {
            Some(member) => member.sent += 1,
            None => signals.push(Signalled {
                pid,
                sent: 1,
                drained_before: false,
            }),
        }
    }

    /// What the record says of `pid`, when it knows.
    pub fn of(&self, pid: i32) -> Option<Signalled> {
        self.signals
            .as_ref()?
            .iter()
            .find(|s| s.pid == pid)
            .copied()
    }
}

/// Where the drain signals of a command are accounted for: its intent
/// record, or (for `recover`) the record it took over.
pub trait SignalLedger {
    /// Before a drain signal goes to `pid`: written down first.
    fn begin(&self, pid: i32);
    /// After the send: whether it went.
    fn end(&self, pid: i32, delivered: bool);
    /// After the last send of a round: written down.
    fn flush(&self);
    /// Before a resume asks `pids` (drained before it) to rebuild with
    /// `signal`: written down, so that a kill from here on leaves an
    /// account of who was asked. A ledger that has its drain already
    /// (`recover`'s) needs nothing more.
    fn rebuilding(&self, _signal: i32, _timeout: std::time::Duration, _pids: &[i32]) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What each member is owed follows from what it was sent: nothing
    /// after none or two, one after one; the reverse for a member that
    /// showed the marker before (drained for an earlier command).
    #[test]
    fn a_member_is_owed_one_signal_after_an_odd_number() {
        let mut note = DrainNote::new(
            40,
            std::time::Duration::from_secs(2),
            &[(7, false), (9, true)],
        );
        assert_eq!(note.timeout_ms, Some(2000));
        let owes = |note: &DrainNote, pid| note.of(pid).expect("a member").owes_one();
        assert!(!owes(&note, 7) && owes(&note, 9));
        note.begin(7);
        assert_eq!(note.sending, Some(7), "written down before it goes");
        note.end(7, true);
        assert_eq!(note.sending, None);
        assert!(
            owes(&note, 7),
            "asked once: owed the rebuild or the call-off"
        );
        note.begin(9);
        note.end(9, false);
        assert!(owes(&note, 9), "a send that failed counts for nothing");
        note.begin(9);
        note.end(9, true);
        assert!(!owes(&note, 9), "drained before, rebuilt now");
        note.begin(7);
        note.end(7, true);
        assert!(!owes(&note, 7), "asked twice: balanced");
        // A record without the counts reads back, and says it has none.
        let old: DrainNote =
            serde_json::from_str(r#"{"signal":40,"phase":"drained"}"#).expect("an old note");
        assert_eq!(old.signals, None);
        assert_eq!(old.of(7), None);
    }
}
