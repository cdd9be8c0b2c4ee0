//! A drained group, the handshake's loop whole (cudackpt(1), DRAIN
//! PROTOCOL): every member asked at once and waited for (the drain timeout,
//! or the command's deadline if sooner); called off all together when one
//! does not answer (each asked again: a drained one rebuilds, one that has
//! not drained yet calls it off); settled after the driver calls (the
//! members running again rebuild, the others stay drained until the
//! command that resumes them). What it needs of a command comes in as
//! values: the ledger every signal is written in, a stop check (a signal
//! to cudackpt) and a progress callback. The pipeline's stage
//! (`ops::stages::drain`) decides who takes part and words each outcome.

use std::time::{Duration, Instant};

use super::handshake::{self, Answer};
use super::ledger::SignalLedger;
use super::left_drained;
use super::members::DrainMember;
use super::protocol::DrainSignal;
use super::rebuild::rebuild;
use super::report::{DrainRecord, DrainVerdict};
use super::sending::{send, wait_until};
use crate::targets::process::Target;

/// A group that drains: its members (asked, or drained already) and those
/// left out.
pub struct DrainGroup {
    pub signal: DrainSignal,
    pub timeout: Duration,
    /// The command's `--deadline`: no wait outlasts it.
    pub deadline: Option<Instant>,
    pub members: Vec<DrainMember>,
    /// Left out of the handshake: nothing to release, nothing sent.
    pub bystanders: Vec<i32>,
}

/// What the command is told as the handshake goes.
pub enum DrainEvent<'a> {
    /// The requests went to these.
    Asked(&'a [&'a Target]),
    /// This one answered after so long, or did not.
    Answered {
        target: &'a Target,
        acknowledged: Option<Duration>,
    },
}

/// Why the handshake ended without a drained group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unanswered {
    /// These did not acknowledge within the drain timeout (waited so long).
    NoAnswer(Vec<i32>, Duration),
    /// These had not acknowledged when the command's deadline passed.
    Deadline(Vec<i32>, Duration),
    /// This process exited, or could not be sent the request (why).
    Gone(i32, String),
    /// cudackpt was asked to stop by this signal.
    Signal(i32),
}

/// One member's account once the group was called off.
pub struct CalledOff {
    pub pid: i32,
    pub record: DrainRecord,
    /// Asked to rebuild, it still showed the marker when the wait ended.
    pub unconfirmed: bool,
}

impl DrainGroup {
    /// The members this command asked.
    pub fn asked(&self) -> Vec<&Target> {
        self.members
            .iter()
            .filter(|m| m.asked)
            .map(|m| &m.target)
            .collect()
    }

    /// The end of a wait that starts now.
    fn until(&self) -> Instant {
        wait_until(self.timeout, self.deadline)
    }

    /// Sends every request (after the dump notice to those that catch it,
    /// when the drain serves a dump), then waits for every marker; a
    /// signal to cudackpt (`signalled`) ends the wait.
    pub fn ask_and_wait(
        &mut self,
        for_dump: bool,
        signalled: &dyn Fn() -> Option<i32>,
        ledger: &dyn SignalLedger,
        progress: &dyn Fn(DrainEvent<'_>),
    ) -> Result<(), Unanswered> {
        let started = Instant::now();
        let until = self.until();
        let by_deadline = self.deadline.is_some_and(|d| d <= started + self.timeout);
        self.send_requests(for_dump, ledger)?;
        let asked = self.asked();
        progress(DrainEvent::Asked(&asked));
        let stop = || signalled().is_some();
        let answers = handshake::wait_for(&asked, handshake::shows_marker, until, &stop);
        for (target, answer) in asked.iter().zip(&answers) {
            let acknowledged = match answer {
                Answer::After(took) => Some(*took),
                _ => None,
            };
            progress(DrainEvent::Answered {
                target,
                acknowledged,
            });
        }
        let pids: Vec<i32> = asked.iter().map(|t| t.pid).collect();
        for (pid, answer) in pids.iter().zip(&answers) {
            if let (Answer::After(took), Some(member)) = (
                answer,
                self.members.iter_mut().find(|m| m.target.pid == *pid),
            ) {
                member.acknowledged = Some(*took);
            }
        }
        if let Some(signal) = signalled() {
            return Err(Unanswered::Signal(signal));
        }
        if let Some((pid, _)) = pids.iter().zip(&answers).find(|(_, a)| **a == Answer::Gone) {
            return Err(Unanswered::Gone(
                *pid,
                "it exited during the drain".to_string(),
            ));
        }
        let silent: Vec<i32> = pids
            .iter()
            .zip(&answers)
            .filter(|(_, a)| **a == Answer::None)
            .map(|(pid, _)| *pid)
            .collect();
        if silent.is_empty() {
            Ok(())
        } else if by_deadline {
            Err(Unanswered::Deadline(silent, started.elapsed()))
        } else {
            Err(Unanswered::NoAnswer(silent, started.elapsed()))
        }
    }

    /// Sends each member asked its request, every send in the ledger.
    fn send_requests(&self, for_dump: bool, ledger: &dyn SignalLedger) -> Result<(), Unanswered> {
        for member in self.members.iter().filter(|m| m.asked) {
            if for_dump {
                // Not in the ledger: the notice changes no count, so no
                // recovery has anything of it to undo. Not sent, it costs
                // the process nothing but what it keeps for a suspend.
                let _ = handshake::notify_dump(&member.target, self.signal.dump_notice());
            }
            if let Err(error) = send(&member.target, self.signal, ledger) {
                ledger.flush();
                return Err(Unanswered::Gone(
                    member.target.pid,
                    format!("the drain request could not be sent to it ({error})"),
                ));
            }
        }
        ledger.flush();
        Ok(())
    }

    /// Calls the drain off: every member asked is asked once more (a
    /// drained one rebuilds, one that has not drained yet calls it off),
    /// and the markers are waited for (until `stop`). Each member's
    /// account.
    pub fn call_off(&self, ledger: &dyn SignalLedger, stop: &dyn Fn() -> bool) -> Vec<CalledOff> {
        let asked = self.asked();
        let mut rebuilds = rebuild(&asked, self.signal, self.until(), ledger, stop);
        self.members
            .iter()
            .map(|member| {
                let mut record = self.record_of(member, &mut rebuilds);
                let unconfirmed = record.outcome == DrainVerdict::NotRebuilt;
                if member.acknowledged.is_none() && member.asked {
                    record.outcome = DrainVerdict::NotAcknowledged;
                    record.rebuilt = None;
                }
                CalledOff {
                    pid: member.target.pid,
                    record,
                    unconfirmed,
                }
            })
            .collect()
    }

    /// After the driver calls: the members `running` again are asked to
    /// rebuild (until `stop`); a member `left_drained` (locked or
    /// checkpointed) that drained is noted so, for the command that
    /// resumes it. Each member's record.
    pub fn settle(
        self,
        running: &dyn Fn(i32) -> bool,
        left_drained: &dyn Fn(i32) -> bool,
        ledger: &dyn SignalLedger,
        stop: &dyn Fn() -> bool,
    ) -> Vec<(i32, DrainRecord)> {
        let again: Vec<&Target> = self
            .members
            .iter()
            .filter(|m| running(m.target.pid))
            .map(|m| &m.target)
            .collect();
        let mut rebuilt = rebuild(&again, self.signal, self.until(), ledger, stop);
        self.members
            .iter()
            .map(|member| {
                let pid = member.target.pid;
                let answered = member.asked && member.acknowledged.is_some();
                if left_drained(pid) && (answered || left_drained::vouches_for(pid)) {
                    left_drained::note(pid, self.signal.number());
                }
                (pid, self.record_of(member, &mut rebuilt))
            })
            .collect()
    }

    /// A member's record: its rebuild's, taken from `rebuilds`, when it
    /// was asked to rebuild, else drained; with what it acknowledged.
    fn record_of(
        &self,
        member: &DrainMember,
        rebuilds: &mut Vec<(i32, DrainRecord)>,
    ) -> DrainRecord {
        let mut record = match rebuilds.iter().position(|(p, _)| *p == member.target.pid) {
            Some(at) => rebuilds.swap_remove(at).1,
            None => DrainRecord::new(self.signal.number(), DrainVerdict::Drained),
        };
        record.acknowledged = member.acknowledged;
        record.exempted.clone_from(&member.exempted);
        if let Some((before, after)) = member.footprint {
            record.released_bytes = Some(before.saturating_sub(after));
            record.footprint_bytes = Some(after);
        }
        record
    }
}
