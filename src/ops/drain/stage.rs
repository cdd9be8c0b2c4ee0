//! Stage 6, drain (cudackpt(1), DRAIN PROTOCOL), between the lock and the driver calls:
//! with `--drain`, every process the command will lock is asked to release
//! what the driver cannot restore. The group goes on only when every one
//! has acknowledged and the section 10 pre-flight passes on the evidence.
//! All or nothing: otherwise every process asked is asked again (to call
//! the drain off, or to rebuild), nothing is locked, and the report names
//! who did not drain. Before anything is sent, a process that does not
//! catch the signal refuses the group: nothing is sent to any
//! ([`super::parties`]). After the driver calls, the group settles: its
//! members running again rebuild ([`super::resumed`]).

use std::time::{Duration, Instant};

use super::parties::{parties, places};
use super::resumed::{note_rebuild, state_in};
use crate::drain::handshake::{self, Answer};
use crate::drain::ledger::{DrainNote, DrainPhase, SignalLedger};
use crate::drain::left_drained;
use crate::drain::members::{DrainMember, Parties};
use crate::drain::protocol::{self, DrainSignal};
use crate::drain::rebuild::rebuild;
use crate::drain::report::{DrainRecord, DrainVerdict};
use crate::drain::sending::{send, wait_until};
use crate::driver::ProcessState;
use crate::gpu::nvml;
use crate::ops::diagnose::describe_process;
use crate::ops::execute::interrupt::{signal_name, Interrupt};
use crate::ops::journal::intent::Journal;
use crate::ops::preflight::host_memory::{self, Weighed};
use crate::ops::preflight::restorable;
use crate::targets::process::Target;
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::plan::Operation;
use crate::vocabulary::ready::Ready;
use crate::vocabulary::report::TargetReport;
use crate::vocabulary::request::{Progress, ProgressSink, Request};
use crate::vocabulary::stop::Stop;
use crate::vocabulary::timeout::format_duration;

/// A group that drained: asked to rebuild once it runs again.
pub struct DrainedGroup {
    signal: DrainSignal,
    timeout: Duration,
    /// The command's `--deadline`: no wait outlasts it.
    deadline: Option<Instant>,
    members: Vec<DrainMember>,
    /// Left out of the handshake: nothing to release, nothing sent.
    bystanders: Vec<i32>,
    /// The host-memory pre-flight on what the members kept, for the
    /// pipeline to take.
    pub(super) weighed: Option<Weighed>,
}

/// Whether `operation` locks running processes, so `--drain` applies.
pub(super) fn drains(operation: &Operation) -> bool {
    matches!(
        operation,
        Operation::Lock { .. } | Operation::Suspend { .. } | Operation::Toggle { .. }
    ) || operation == &Operation::Checkpoint
}

/// The drain of a request's targets, if it asks for one; or the stop of
/// the group, every process asked having been asked again.
pub(super) fn drain(
    request: &Request<'_>,
    ready: &Ready,
    journal: &Journal,
    interrupt: &Interrupt,
    deadline: Option<Instant>,
) -> Result<Option<DrainedGroup>, Stop> {
    if !request.drain.before_lock || !drains(&request.operation) {
        return Ok(None);
    }
    let signal = request.drain.signal;
    let Parties {
        members,
        bystanders,
    } = parties(ready, signal)?;
    let mut drained = DrainedGroup {
        signal,
        timeout: request.drain.timeout,
        deadline,
        members,
        bystanders,
        weighed: None,
    };
    if drained.members.is_empty() {
        // Every process is checkpointed already, or left out: nothing to ask.
        return Ok(Some(drained));
    }
    let members: Vec<(i32, bool)> = drained
        .members
        .iter()
        .map(|m| (m.target.pid, !m.asked))
        .collect();
    journal.drain(
        &request.operation,
        &places(&drained.members),
        DrainNote::new(signal.number(), drained.timeout, &members),
    );
    // What each member holds before it is asked: what it releases shows
    // against this.
    let before = nvml::usage_of(&ready.pids());
    // From the first request on, a signal to cudackpt calls the drain off
    // rather than ending it with processes half drained.
    interrupt.arm();
    let for_dump = request.criu_dump.is_some();
    if let Err(why) = drained.ask_and_wait(for_dump, interrupt, journal, request.progress) {
        return Err(drained.call_off(&why, journal, interrupt));
    }
    journal.drain_phase(DrainPhase::Drained);
    drained.prove(request, ready, journal, interrupt)?;
    drained.weigh(request, ready, before.as_ref().ok(), journal, interrupt)?;
    // What the drain was to shut down for CRIU must be gone by now.
    if let Some(fault) = crate::ops::preflight::dumpable::after_drain(request, ready) {
        return Err(drained.call_off(&CallOffReason::Undumpable(fault), journal, interrupt));
    }
    // The wait can be long: a target stopped meanwhile (SIGSTOP, a
    // debugger, a freeze) would make its lock wait until it runs.
    if let Some(pid) = stopped_meanwhile(ready) {
        return Err(drained.call_off(&CallOffReason::Stopped(pid), journal, interrupt));
    }
    Ok(Some(drained))
}

/// What a wait for rebuilds that a signal ended says of each process it
/// did not see rebuild.
pub(super) fn cut_short(interrupt: &Interrupt) -> Option<String> {
    interrupt.signal().map(|signal| {
        format!(
            "{} arrived while cudackpt waited for the rebuilds: it was asked to rebuild, and cudackpt stopped waiting; `cudackpt ps` shows whether it still shows the drain marker",
            signal_name(signal)
        )
    })
}

/// A stop for a wait that starts now: a signal to cudackpt that arrives
/// during it (one that arrived before is the reason for the wait, and the
/// wait still runs, bounded by the timeout and the deadline).
pub(super) fn new_signal(interrupt: &Interrupt) -> impl Fn() -> bool + '_ {
    let before = interrupt.signal().is_some();
    move || !before && interrupt.signal().is_some()
}

/// A target stopped since it was checked, so that the driver could not
/// answer for it.
fn stopped_meanwhile(ready: &Ready) -> Option<i32> {
    ready
        .targets
        .iter()
        .map(|t| t.pid)
        .find(|&pid| crate::ops::execute::cannot_answer(&ready.driver, pid))
}

/// Why a drain was called off, for every member's report.
pub(super) enum CallOffReason {
    /// These processes did not acknowledge in time.
    NoAnswer(Vec<i32>, Duration),
    /// These had not acknowledged when the command's --deadline passed.
    Deadline(Vec<i32>, Duration),
    /// A process exited (or could not be sent the request).
    Gone(i32, String),
    /// cudackpt was asked to stop by this signal.
    Signal(i32),
    /// The section 10 pre-flight refused, after the acknowledgements.
    Refused(Vec<TargetReport>),
    /// This process was stopped during the drain: its lock would wait.
    Stopped(i32),
    /// Even drained, the group's host copies would not fit (the failure of
    /// the host-memory pre-flight, on what the members kept).
    HostMemory(Fault),
    /// Drained for a CRIU dump, the tree still holds what CRIU cannot
    /// dump (a compile-worker pool its owner kept).
    Undumpable(Fault),
}

impl DrainedGroup {
    fn asked(&self) -> Vec<&Target> {
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
    /// when the drain serves a dump), then waits for every marker (the
    /// drain timeout, or the command's --deadline if sooner).
    fn ask_and_wait(
        &mut self,
        for_dump: bool,
        interrupt: &Interrupt,
        ledger: &dyn SignalLedger,
        progress: Option<ProgressSink<'_>>,
    ) -> Result<(), CallOffReason> {
        let started = Instant::now();
        let until = self.until();
        let by_deadline = self.deadline.is_some_and(|d| d <= started + self.timeout);
        for member in self.members.iter().filter(|m| m.asked) {
            if for_dump {
                // Not in the ledger: the notice changes no count, so no
                // recovery has anything of it to undo. Not sent, it costs
                // the process nothing but what it keeps for a suspend.
                let _ = handshake::notify_dump(&member.target, self.signal.dump_notice());
            }
            if let Err(error) = send(&member.target, self.signal, ledger) {
                ledger.flush();
                return Err(CallOffReason::Gone(
                    member.target.pid,
                    format!("the drain request could not be sent to it ({error})"),
                ));
            }
        }
        ledger.flush();
        let asked = self.asked();
        if let Some(progress) = progress {
            progress(&Progress::DrainAsked { targets: &asked });
        }
        let stop = || interrupt.signal().is_some();
        let answers = handshake::wait_for(&asked, handshake::shows_marker, until, &stop);
        if let Some(progress) = progress {
            for (target, answer) in asked.iter().zip(&answers) {
                let acknowledged = match answer {
                    Answer::After(took) => Some(*took),
                    _ => None,
                };
                progress(&Progress::DrainAnswered {
                    target,
                    acknowledged,
                });
            }
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
        if let Some(signal) = interrupt.signal() {
            return Err(CallOffReason::Signal(signal));
        }
        if let Some((pid, _)) = pids.iter().zip(&answers).find(|(_, a)| **a == Answer::Gone) {
            return Err(CallOffReason::Gone(
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
            Err(CallOffReason::Deadline(silent, started.elapsed()))
        } else {
            Err(CallOffReason::NoAnswer(silent, started.elapsed()))
        }
    }

    /// The section 10 pre-flight, on the evidence after the drain.
    fn prove(
        &mut self,
        request: &Request<'_>,
        ready: &Ready,
        ledger: &dyn SignalLedger,
        interrupt: &Interrupt,
    ) -> Result<(), Stop> {
        // Believed: the marker of one that answered this command's request,
        // or of one a cudackpt drained and left drained.
        let answered: Vec<i32> = self
            .members
            .iter()
            .filter(|m| m.asked && m.acknowledged.is_some())
            .map(|m| m.target.pid)
            .collect();
        let vouched = |pid: i32| answered.contains(&pid) || left_drained::vouches_for(pid);
        match restorable::check(request, ready, &vouched) {
            Ok(passed) => {
                for (pid, words) in passed.exempted {
                    if let Some(m) = self.members.iter_mut().find(|m| m.target.pid == pid) {
                        m.exempted = Some(words);
                    }
                }
                Ok(())
            }
            Err(Stop::Declined { refused, .. }) => {
                Err(self.call_off(&CallOffReason::Refused(refused), ledger, interrupt))
            }
            Err(stop) => Err(stop),
        }
    }

    /// What each member released, and the host-memory pre-flight on what
    /// they kept: a group that fits only once shrunk goes on; one that
    /// does not fit even then is called off before any lock.
    fn weigh(
        &mut self,
        request: &Request<'_>,
        ready: &Ready,
        before: Option<&nvml::Usage>,
        ledger: &dyn SignalLedger,
        interrupt: &Interrupt,
    ) -> Result<(), Stop> {
        let after = nvml::usage_of(&ready.pids());
        if let (Some(before), Ok(after)) = (before, after.as_ref()) {
            let (before, after) = (nvml::totals(before), nvml::totals(after));
            for member in self.members.iter_mut().filter(|m| m.acknowledged.is_some()) {
                let pid = member.target.pid;
                let held = |usage: &std::collections::HashMap<i32, u64>| {
                    usage.get(&pid).copied().unwrap_or(0)
                };
                member.footprint = Some((held(&before), held(&after)));
            }
        }
        match host_memory::weigh(request, ready, after) {
            Ok(weighed) => {
                self.weighed = Some(weighed);
                Ok(())
            }
            Err(why) => {
                let failure = host_memory::refusal(
                    "refused after the drain, on the GPU memory left once it released what it could",
                    &why,
                );
                Err(self.call_off(&CallOffReason::HostMemory(failure), ledger, interrupt))
            }
        }
    }

    /// Asks every process asked once more (a drained one rebuilds, one
    /// that has not drained yet calls it off), waits for the markers to
    /// go, and says what happened to each.
    fn call_off(
        &self,
        why: &CallOffReason,
        ledger: &dyn SignalLedger,
        interrupt: &Interrupt,
    ) -> Stop {
        let asked = self.asked();
        let stop = new_signal(interrupt);
        let mut rebuilds = rebuild(&asked, self.signal, self.until(), ledger, &stop);
        let cut_short = stop().then(|| cut_short(interrupt)).flatten();
        let mut reports = Vec::new();
        for member in &self.members {
            let pid = member.target.pid;
            let mut drain = self.report_of(member, &mut rebuilds);
            let unconfirmed = drain.outcome == DrainVerdict::NotRebuilt;
            if member.acknowledged.is_none() && member.asked {
                drain.outcome = DrainVerdict::NotAcknowledged;
                drain.rebuilt = None;
            }
            let failure = self.failure_of(member, why);
            let mut report = TargetReport {
                state_before: Some(member.state),
                state: Some(member.state),
                failure: Some(failure),
                drain: Some(drain),
                ..TargetReport::new(pid, Some(member.target.name.clone()))
            };
            if let CallOffReason::Refused(refused) = why {
                if let Some(own) = refused.iter().find(|r| r.pid == pid) {
                    report.failure.clone_from(&own.failure);
                }
            }
            if let (true, Some(words)) = (unconfirmed, &cut_short) {
                report.warnings.push(words.clone());
            }
            reports.push(report);
        }
        Stop::Halted {
            ran: reports,
            // The bystanders, and any process the command had nothing to do
            // with (already checkpointed): not attempted.
            not_run: Some(Fault::not_drained("the drain of its group was called off")),
        }
    }

    /// What a called-off drain says of one member.
    fn failure_of(&self, member: &DrainMember, why: &CallOffReason) -> Fault {
        let pid = member.target.pid;
        let who = describe_process(pid, Some(&member.target.name));
        let rebuilt = "every process asked was asked again to rebuild, and nothing was locked";
        match why {
            CallOffReason::NoAnswer(silent, _) | CallOffReason::Deadline(silent, _) if !silent.contains(&pid) => {
                Fault::not_drained(format!("PID {} did not drain in time; {rebuilt}", silent[0]))
            }
            CallOffReason::NoAnswer(_, waited) => Fault::new(
                FaultKind::DrainTimeout,
                format!(
                    "{who} did not acknowledge the drain (signal {}) within {}: no thread named {} in /proc/{pid}/task; {rebuilt}",
                    self.signal,
                    format_duration(*waited),
                    protocol::MARKER
                ),
                "give it longer (--drain-timeout; a rank answers at its next step boundary), check that every rank of the job was named (all ranks must agree), or run `cudackpt check --drain`",
            ),
            CallOffReason::Deadline(_, waited) => Fault::new(
                FaultKind::DeadlineExceeded,
                format!(
                    "{who} had not acknowledged the drain (signal {}) when the command's --deadline passed, {} into the drain; {rebuilt}",
                    self.signal,
                    format_duration(*waited),
                ),
                "give the command a later --deadline (a rank answers at its next step boundary), or leave it out to wait the whole --drain-timeout",
            ),
            CallOffReason::Gone(gone, reason) if *gone == pid => Fault::new(
                FaultKind::NoSuchProcess,
                format!("{who}: {reason}; {rebuilt}"),
                "check the job: one of its processes is gone",
            ),
            CallOffReason::Gone(gone, _) => Fault::not_drained(format!("PID {gone} exited during the drain; {rebuilt}")),
            CallOffReason::Stopped(stopped) if *stopped == pid => {
                let stopped = crate::ops::diagnose::process_stopped(pid, Some(&member.target.name));
                Fault::new(
                    stopped.kind,
                    format!("{} during the drain; {rebuilt}", stopped.message),
                    stopped.hint.unwrap_or_default(),
                )
            }
            CallOffReason::Stopped(stopped) => Fault::not_drained(format!("PID {stopped} was stopped during the drain; {rebuilt}")),
            CallOffReason::Signal(signal) => Fault::interrupted(
                *signal,
                format!("interrupted by {} during the drain; {rebuilt}", signal_name(*signal)),
                "run the command again when it may finish",
            ),
            CallOffReason::HostMemory(failure) | CallOffReason::Undumpable(failure) => Fault::new(
                failure.kind,
                format!("{}; {rebuilt}", failure.message),
                failure.hint.clone().unwrap_or_default(),
            ),
            CallOffReason::Refused(refused) => Fault::not_attempted(format!(
                "PID {} drained but still could not be restored; {rebuilt}",
                refused.first().map_or(0, |r| r.pid)
            )),
        }
    }

    /// A member's drain report: its rebuild's, taken from `rebuilds`, when
    /// it was asked to rebuild, else drained; with what it acknowledged.
    fn report_of(
        &self,
        member: &DrainMember,
        rebuilds: &mut Vec<(i32, DrainRecord)>,
    ) -> DrainRecord {
        let mut drain = match rebuilds.iter().position(|(p, _)| *p == member.target.pid) {
            Some(at) => rebuilds.swap_remove(at).1,
            None => DrainRecord::new(self.signal.number(), DrainVerdict::Drained),
        };
        drain.acknowledged = member.acknowledged;
        drain.exempted.clone_from(&member.exempted);
        if let Some((before, after)) = member.footprint {
            drain.released_bytes = Some(before.saturating_sub(after));
            drain.footprint_bytes = Some(after);
        }
        drain
    }

    /// After the driver calls: members running again are asked to rebuild;
    /// the others stay drained until the command that resumes them. The
    /// bystanders are said to have had nothing to drain.
    pub(super) fn settle(
        self,
        reports: &mut [TargetReport],
        ledger: &dyn SignalLedger,
        interrupt: &Interrupt,
    ) {
        for report in reports
            .iter_mut()
            .filter(|r| self.bystanders.contains(&r.pid))
        {
            report.drain = Some(DrainRecord::new(
                self.signal.number(),
                DrainVerdict::NotNeeded,
            ));
        }
        let running: Vec<&Target> = self
            .members
            .iter()
            .filter(|m| state_in(reports, m.target.pid) == Some(ProcessState::Running))
            .map(|m| &m.target)
            .collect();
        let stop = new_signal(interrupt);
        let mut rebuilt = rebuild(&running, self.signal, self.until(), ledger, &stop);
        for member in &self.members {
            let Some(report) = reports.iter_mut().find(|r| r.pid == member.target.pid) else {
                continue;
            };
            let left_drained = matches!(
                report.state,
                Some(ProcessState::Locked | ProcessState::Checkpointed)
            );
            let answered = member.asked && member.acknowledged.is_some();
            if left_drained && (answered || left_drained::vouches_for(member.target.pid)) {
                left_drained::note(member.target.pid, self.signal.number());
            }
            let drain = self.report_of(member, &mut rebuilt);
            note_rebuild(report, &drain);
            report.drain = Some(drain);
        }
    }
}

/// A dry run's word on the drain: who would be asked, who cannot be, and
/// what each would have to release (the evidence held against it now).
pub(super) fn predict(request: &Request<'_>, ready: &Ready, reports: &mut [TargetReport]) {
    if !request.drain.before_lock || !drains(&request.operation) {
        return;
    }
    let signal = request.drain.signal;
    let pending = restorable::pending(ready);
    let parties = parties(ready, signal);
    let refused = match &parties {
        Ok(_) => Vec::new(),
        Err(Stop::Declined { refused, .. }) => refused.clone(),
        Err(Stop::Halted { ran, .. }) => ran.clone(),
    };
    for report in reports.iter_mut() {
        if let Some(own) = refused.iter().find(|r| r.pid == report.pid) {
            report.failure.clone_from(&own.failure);
            report.drain.clone_from(&own.drain);
            report.note = None;
            continue;
        }
        let Ok(parties) = &parties else { continue };
        if parties.bystanders.contains(&report.pid) {
            report.drain = Some(DrainRecord::new(signal.number(), DrainVerdict::NotNeeded));
        }
        if let Some(member) = parties.members.iter().find(|m| m.target.pid == report.pid) {
            let outcome = if member.asked {
                DrainVerdict::WouldDrain
            } else {
                DrainVerdict::Drained
            };
            report.drain = Some(DrainRecord::new(signal.number(), outcome));
            if let (Some(note), true) = (&report.note, member.asked) {
                report.note = Some(note.replacen(
                    "every check passed; would ",
                    &format!("every check passed; would drain (signal {signal}), then "),
                    1,
                ));
            }
            for (_, words) in pending.iter().filter(|(pid, _)| *pid == report.pid) {
                report.warnings.push(format!(
                    "the drain must release, before it acknowledges: {words}"
                ));
            }
        }
    }
}
