//! Stage 6, the drain (cudackpt(1), DRAIN PROTOCOL), between the lock and
//! the driver calls: with `--drain`, every process the command will lock
//! is asked to release what the driver cannot restore. The group goes on
//! only when every one has acknowledged and the section 10 pre-flight
//! passes on the evidence. All or nothing: otherwise every process asked
//! is asked again (to call the drain off, or to rebuild), nothing is
//! locked, and the report names who did not drain. Before anything is
//! sent, a process that does not catch the signal refuses the group:
//! nothing is sent to any. After the driver calls, the group settles: its
//! members running again rebuild, and so do processes a command resumed
//! that drained before it.
//!
//! The drain itself (who takes part, the handshake's loop, every rebuild)
//! is `crate::drain`'s. This file adapts it to a command, through
//! [`Drain`], the pipeline's one way in: the pre-flights it asks on the
//! drained evidence, the intent record as its ledger, the signals to
//! cudackpt as its stop check, the progress, and each outcome in the
//! report's words (`ops::diagnose`).

use std::time::Instant;

use crate::drain::group::{CalledOff, DrainEvent, DrainGroup, Unanswered};
use crate::drain::handshake;
use crate::drain::ledger::{DrainNote, DrainPhase, SignalLedger};
use crate::drain::left_drained;
use crate::drain::members::{self, DrainMember, Parties};
use crate::drain::protocol::DrainSignal;
use crate::drain::rebuild::rebuild;
use crate::drain::report::{DrainRecord, DrainVerdict};
use crate::drain::sending::wait_until;
use crate::driver::{CheckpointApi, ProcessState};
use crate::gpu::nvml;
use crate::ops::diagnose::{self, CallOffReason};
use crate::ops::execute::concurrently;
use crate::ops::execute::interrupt::{signal_name, Interrupt};
use crate::ops::journal::intent::Journal;
use crate::ops::preflight::host_memory::{self, Weighed};
use crate::ops::preflight::restorable::{self, Passed};
use crate::targets::process::Target;
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::place::Place;
use crate::vocabulary::plan::Operation;
use crate::vocabulary::ready::Ready;
use crate::vocabulary::report::TargetReport;
use crate::vocabulary::request::{Progress, Request};
use crate::vocabulary::stop::Stop;

/// The drain of one command, as the pipeline sees it: the one way in. It
/// decides whether a drain applies, asks the restorability pre-flight
/// (now, or after the acknowledgements when it drains), runs the handshake
/// before the driver calls and the rebuilds after them, or says what a dry
/// run would have done.
pub struct Drain<'r> {
    request: &'r Request<'r>,
}

/// What the handshake left for after the driver calls.
pub struct DrainInProgress(Option<Drained>);

/// A group that drained, and the host-memory pre-flight on what its
/// members kept, for the pipeline to take.
struct Drained {
    group: DrainGroup,
    weighed: Option<Weighed>,
}

impl DrainInProgress {
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
        self.request.drain.before_lock && drains(&self.request.operation)
    }

    /// The restorability pre-flight, asked once: here, or (when this
    /// command drains) by the drain on the evidence after the
    /// acknowledgements. Outside a drain the marker is believed only where
    /// a cudackpt left the process drained.
    pub fn restorability(&self, ready: &Ready) -> Result<Passed, Stop> {
        if self.applies() {
            return Ok(Passed::default());
        }
        restorable::check(self.request, ready, &left_drained::vouches_for)
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
        if !self.request.dry_run || !host_memory::applies(self.request, ready) {
            return Ok(Weighed::default());
        }
        Ok(
            host_memory::weigh(self.request, ready, nvml::usage_of(&ready.pids())).unwrap_or_else(
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
    pub fn predict(&self, ready: &Ready, reports: &mut [TargetReport]) {
        if self.applies() {
            predict(self.request, ready, reports);
        }
    }

    /// The handshake, just before the driver calls.
    pub fn before_calls(
        &self,
        ready: &Ready,
        journal: &Journal,
        interrupt: &Interrupt,
        deadline: Option<Instant>,
    ) -> Result<DrainInProgress, Stop> {
        if !self.applies() {
            return Ok(DrainInProgress(None));
        }
        drain(self.request, ready, journal, interrupt, deadline).map(DrainInProgress)
    }

    /// After the driver calls: members running again rebuild, and so do
    /// processes a command resumed that drained before it.
    pub fn after_calls(
        &self,
        underway: DrainInProgress,
        ready: &Ready,
        reports: &mut [TargetReport],
        journal: &Journal,
        interrupt: &Interrupt,
        deadline: Option<Instant>,
    ) {
        if let Some(drained) = underway.0 {
            settle(drained.group, reports, journal, interrupt);
        }
        // A toggle --drain may also resume processes drained before: they
        // rebuild as after any resume (the settled members have their
        // report already).
        rebuild_resumed(self.request, ready, reports, journal, deadline);
    }
}

/// Whether `operation` locks running processes, so `--drain` applies.
fn drains(operation: &Operation) -> bool {
    matches!(
        operation,
        Operation::Lock { .. } | Operation::Suspend { .. } | Operation::Toggle { .. }
    ) || operation == &Operation::Checkpoint
}

/// The drain of a request's targets; or the stop of the group, every
/// process asked having been asked again.
fn drain(
    request: &Request<'_>,
    ready: &Ready,
    journal: &Journal,
    interrupt: &Interrupt,
    deadline: Option<Instant>,
) -> Result<Option<Drained>, Stop> {
    let signal = request.drain.signal;
    let Parties {
        members,
        bystanders,
    } = parties(ready, signal)?;
    let mut drained = Drained {
        group: DrainGroup {
            signal,
            timeout: request.drain.timeout,
            deadline,
            members,
            bystanders,
        },
        weighed: None,
    };
    if drained.group.members.is_empty() {
        // Every process is checkpointed already, or left out: nothing to ask.
        return Ok(Some(drained));
    }
    let group = &drained.group;
    let asked: Vec<(i32, bool)> = group
        .members
        .iter()
        .map(|m| (m.target.pid, !m.asked))
        .collect();
    journal.drain(
        &request.operation,
        &places(&group.members),
        DrainNote::new(signal.number(), group.timeout, &asked),
    );
    // What each member holds before it is asked: what it releases shows
    // against this.
    let before = nvml::usage_of(&ready.pids());
    // From the first request on, a signal to cudackpt calls the drain off
    // rather than ending it with processes half drained.
    interrupt.arm();
    let for_dump = request.criu_dump.is_some();
    let signalled = || interrupt.signal();
    let progress = |event: DrainEvent<'_>| tell(request, event);
    if let Err(why) = drained
        .group
        .ask_and_wait(for_dump, &signalled, journal, &progress)
    {
        return Err(call_off(&drained.group, &reason(why), journal, interrupt));
    }
    journal.drain_phase(DrainPhase::Drained);
    prove(&mut drained.group, request, ready, journal, interrupt)?;
    weigh(
        &mut drained,
        request,
        ready,
        before.as_ref().ok(),
        journal,
        interrupt,
    )?;
    // What the drain was to shut down for CRIU must be gone by now.
    if let Some(fault) = crate::ops::preflight::dumpable::after_drain(request, ready) {
        let why = CallOffReason::Undumpable(fault);
        return Err(call_off(&drained.group, &why, journal, interrupt));
    }
    // The wait can be long: a target stopped meanwhile (SIGSTOP, a
    // debugger, a freeze) would make its lock wait until it runs.
    if let Some(pid) = stopped_meanwhile(ready) {
        let why = CallOffReason::Stopped(pid);
        return Err(call_off(&drained.group, &why, journal, interrupt));
    }
    Ok(Some(drained))
}

/// Who takes part (`drain::members::choose`), or the group refused with a
/// report of each process unable to drain.
fn parties(ready: &Ready, signal: DrainSignal) -> Result<Parties, Stop> {
    let held_against = || restorable::pending(ready);
    let states = || concurrently(&ready.targets, |t| ready.driver.get_state(t.pid).ok());
    members::choose(&ready.targets, signal, &held_against, &states).map_err(|unable| {
        let first = unable[0].target.pid;
        Stop::Declined {
            refused: unable
                .iter()
                .map(|refusal| diagnose::cannot_drain(refusal, signal))
                .collect(),
            others: Some(Fault::not_drained(format!(
                "PID {first} cannot drain, so nothing was sent to any process"
            ))),
        }
    })
}

/// Where each member is, for the intent record.
fn places(members: &[DrainMember]) -> Vec<Place> {
    members
        .iter()
        .map(|m| Place {
            pid: m.target.pid,
            name: m.target.name.clone(),
            state: Some(m.state),
            in_flight: None,
        })
        .collect()
}

/// Tells the request's progress what the handshake did.
fn tell(request: &Request<'_>, event: DrainEvent<'_>) {
    let Some(progress) = request.progress else {
        return;
    };
    match event {
        DrainEvent::Asked(targets) => progress(&Progress::DrainAsked { targets }),
        DrainEvent::Answered {
            target,
            acknowledged,
        } => progress(&Progress::DrainAnswered {
            target,
            acknowledged,
        }),
    }
}

/// Why the handshake ended, as a called-off drain's reports say it.
fn reason(why: Unanswered) -> CallOffReason {
    match why {
        Unanswered::NoAnswer(silent, waited) => CallOffReason::NoAnswer(silent, waited),
        Unanswered::Deadline(silent, waited) => CallOffReason::Deadline(silent, waited),
        Unanswered::Gone(pid, words) => CallOffReason::Gone(pid, words),
        Unanswered::Signal(signal) => CallOffReason::Signal(signal, signal_name(signal)),
    }
}

/// The section 10 pre-flight, on the evidence after the drain.
fn prove(
    group: &mut DrainGroup,
    request: &Request<'_>,
    ready: &Ready,
    ledger: &dyn SignalLedger,
    interrupt: &Interrupt,
) -> Result<(), Stop> {
    // Believed: the marker of one that answered this command's request,
    // or of one a cudackpt drained and left drained.
    let answered: Vec<i32> = group
        .members
        .iter()
        .filter(|m| m.asked && m.acknowledged.is_some())
        .map(|m| m.target.pid)
        .collect();
    let vouched = |pid: i32| answered.contains(&pid) || left_drained::vouches_for(pid);
    match restorable::check(request, ready, &vouched) {
        Ok(passed) => {
            for (pid, words) in passed.exempted {
                if let Some(m) = group.members.iter_mut().find(|m| m.target.pid == pid) {
                    m.exempted = Some(words);
                }
            }
            Ok(())
        }
        Err(Stop::Declined { refused, .. }) => Err(call_off(
            group,
            &CallOffReason::Refused(refused),
            ledger,
            interrupt,
        )),
        Err(stop) => Err(stop),
    }
}

/// What each member released, and the host-memory pre-flight on what
/// they kept: a group that fits only once shrunk goes on; one that does
/// not fit even then is called off before any lock.
fn weigh(
    drained: &mut Drained,
    request: &Request<'_>,
    ready: &Ready,
    before: Option<&nvml::Usage>,
    ledger: &dyn SignalLedger,
    interrupt: &Interrupt,
) -> Result<(), Stop> {
    let after = nvml::usage_of(&ready.pids());
    if let (Some(before), Ok(after)) = (before, after.as_ref()) {
        let (before, after) = (nvml::totals(before), nvml::totals(after));
        let members = drained.group.members.iter_mut();
        for member in members.filter(|m| m.acknowledged.is_some()) {
            let held = |usage: &std::collections::HashMap<i32, u64>| {
                usage.get(&member.target.pid).copied().unwrap_or(0)
            };
            member.footprint = Some((held(&before), held(&after)));
        }
    }
    match host_memory::weigh(request, ready, after) {
        Ok(weighed) => {
            drained.weighed = Some(weighed);
            Ok(())
        }
        Err(why) => {
            let failure = host_memory::refusal(
                "refused after the drain, on the GPU memory left once it released what it could",
                &why,
            );
            let why = CallOffReason::HostMemory(failure);
            Err(call_off(&drained.group, &why, ledger, interrupt))
        }
    }
}

/// Calls the group's drain off (`DrainGroup::call_off`) and says what
/// happened to each member.
fn call_off(
    group: &DrainGroup,
    why: &CallOffReason,
    ledger: &dyn SignalLedger,
    interrupt: &Interrupt,
) -> Stop {
    let stop = new_signal(interrupt);
    let accounts = group.call_off(ledger, &stop);
    let cut_short = stop().then(|| cut_short(interrupt)).flatten();
    let reports = group
        .members
        .iter()
        .zip(accounts)
        .map(
            |(
                member,
                CalledOff {
                    pid,
                    record,
                    unconfirmed,
                },
            )| {
                let mut failure = diagnose::called_off(pid, &member.target.name, group.signal, why);
                if let CallOffReason::Refused(refused) = why {
                    if let Some(own) = refused.iter().find(|r| r.pid == pid) {
                        failure = own.failure.clone().unwrap_or(failure);
                    }
                }
                let mut report = TargetReport {
                    state_before: Some(member.state),
                    state: Some(member.state),
                    failure: Some(failure),
                    drain: Some(record),
                    ..TargetReport::new(pid, Some(member.target.name.clone()))
                };
                if let (true, Some(words)) = (unconfirmed, &cut_short) {
                    report.warnings.push(words.clone());
                }
                report
            },
        )
        .collect();
    Stop::Halted {
        ran: reports,
        // The bystanders, and any process the command had nothing to do
        // with (already checkpointed): not attempted.
        not_run: Some(Fault::not_drained("the drain of its group was called off")),
    }
}

/// What a wait for rebuilds that a signal ended says of each process it
/// did not see rebuild.
fn cut_short(interrupt: &Interrupt) -> Option<String> {
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
fn new_signal(interrupt: &Interrupt) -> impl Fn() -> bool + '_ {
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

/// After the driver calls: the group's members running again rebuild; the
/// others stay drained until the command that resumes them. The
/// bystanders are said to have had nothing to drain.
fn settle(
    group: DrainGroup,
    reports: &mut [TargetReport],
    ledger: &dyn SignalLedger,
    interrupt: &Interrupt,
) {
    let signal = group.signal.number();
    for report in reports
        .iter_mut()
        .filter(|r| group.bystanders.contains(&r.pid))
    {
        report.drain = Some(DrainRecord::new(signal, DrainVerdict::NotNeeded));
    }
    let state = |pid: i32| state_in(reports, pid);
    let running = |pid: i32| state(pid) == Some(ProcessState::Running);
    let left = |pid: i32| {
        matches!(
            state(pid),
            Some(ProcessState::Locked | ProcessState::Checkpointed)
        )
    };
    let stop = new_signal(interrupt);
    let records = group.settle(&running, &left, ledger, &stop);
    for (pid, record) in records {
        if let Some(report) = reports.iter_mut().find(|r| r.pid == pid) {
            diagnose::rebuild_unfinished(report, &record);
            report.drain = Some(record);
        }
    }
}

/// A dry run's word on the drain: who would be asked, who cannot be, and
/// what each would have to release (the evidence held against it now).
fn predict(request: &Request<'_>, ready: &Ready, reports: &mut [TargetReport]) {
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
        let Some(member) = parties.members.iter().find(|m| m.target.pid == report.pid) else {
            continue;
        };
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

/// Whether `operation` leaves processes running, so drained ones rebuild.
fn resumes(operation: &Operation) -> bool {
    matches!(
        operation,
        Operation::Resume | Operation::Unlock | Operation::Toggle { .. }
    )
}

fn state_in(reports: &[TargetReport], pid: i32) -> Option<ProcessState> {
    reports.iter().find(|r| r.pid == pid).and_then(|r| r.state)
}

/// After a command that resumes: every process running again that shows
/// the marker (it drained before its checkpoint) is asked to rebuild,
/// through the drain's one door (`drain::rebuild`).
fn rebuild_resumed(
    request: &Request<'_>,
    ready: &Ready,
    reports: &mut [TargetReport],
    ledger: &dyn SignalLedger,
    deadline: Option<Instant>,
) {
    if !request.drain.rebuild || !resumes(&request.operation) {
        return;
    }
    let waiting: Vec<&Target> = ready
        .targets
        .iter()
        .filter(|t| state_in(reports, t.pid) == Some(ProcessState::Running))
        .filter(|t| reports.iter().any(|r| r.pid == t.pid && r.drain.is_none()))
        .filter(|t| handshake::shows_marker(t.pid))
        .collect();
    if waiting.is_empty() {
        return;
    }
    let signal = request.drain.signal;
    let (askable, deaf): (Vec<&Target>, Vec<&Target>) = waiting
        .into_iter()
        .partition(|t| handshake::catches(t, signal) == Ok(true));
    for target in deaf {
        if let Some(report) = reports.iter_mut().find(|r| r.pid == target.pid) {
            report.drain = Some(DrainRecord::new(signal.number(), DrainVerdict::NotRebuilt));
            report.failure.get_or_insert_with(|| Fault::new(
                FaultKind::CannotDrain,
                format!("PID {} shows the drain marker, so it waits to rebuild, but it does not catch signal {signal}: nothing was sent", target.pid),
                "resume it again with the --drain-signal it was drained with (CUDACKPT_DRAIN_SIGNAL)",
            ));
        }
    }
    let until = wait_until(request.drain.timeout, deadline);
    let asked: Vec<i32> = askable.iter().map(|t| t.pid).collect();
    ledger.rebuilding(signal.number(), request.drain.timeout, &asked);
    for (pid, drain) in rebuild(&askable, signal, until, ledger, &|| false) {
        if let Some(report) = reports.iter_mut().find(|r| r.pid == pid) {
            diagnose::rebuild_unfinished(report, &drain);
            report.drain = Some(drain);
        }
    }
}
