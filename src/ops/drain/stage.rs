//! Stage 6, drain (cudackpt(1), DRAIN PROTOCOL), between the lock and the driver calls:
//! with `--drain`, every process the command will lock is asked to release
//! what the driver cannot restore. The group goes on only when every one
//! has acknowledged and the section 10 pre-flight passes on the evidence.
//! All or nothing: otherwise every process asked is asked again (to call
//! the drain off, or to rebuild), nothing is locked, and the report names
//! who did not drain. Before anything is sent, a process that does not
//! catch the signal refuses the group: nothing is sent to any.
//!
//! After the driver calls, every drained process that runs again (rolled
//! back, or resumed by `resume`, `toggle`, `unlock`) is asked to rebuild,
//! and the wait for its marker to go is reported.

use std::time::{Duration, Instant};

use super::protocol::{self as drain, Answer, Unable};
use crate::driver::{CheckpointApi, ProcessState};
use crate::gpu::nvml;
use crate::ops::diagnose::describe_process;
use crate::ops::execute::concurrently;
use crate::ops::execute::failpoint::{self, Send};
use crate::ops::execute::interrupt::{signal_name, Interrupt};
use crate::ops::journal::drained;
use crate::ops::journal::intent::{DrainNote, DrainPhase, Journal, SignalLedger};
use crate::ops::preflight::host_memory::{self, Weighed};
use crate::ops::preflight::restorable;
use crate::ops::vocabulary::drain_protocol::{self, DrainSignal};
use crate::ops::vocabulary::failure::{Failure, FailureKind};
use crate::ops::vocabulary::place::Place;
use crate::ops::vocabulary::plan::Operation;
use crate::ops::vocabulary::ready::Ready;
use crate::ops::vocabulary::report::{DrainOutcome, DrainReport, ProcessReport};
use crate::ops::vocabulary::request::Request;
use crate::ops::vocabulary::stop::Stop;
use crate::ops::vocabulary::timeout::format_duration;
use crate::targets::process::Target;

/// One process of a drained group.
struct Member {
    target: Target,
    state: ProcessState,
    /// Sent the request by this command (not: it showed the marker already).
    asked: bool,
    acknowledged: Option<Duration>,
    exempted: Option<String>,
    /// What it held before the request and once drained (NVML), in bytes.
    footprint: Option<(u64, u64)>,
}

/// A group that drained: asked to rebuild once it runs again.
pub struct Drained {
    signal: DrainSignal,
    timeout: Duration,
    /// The command's `--deadline`: no wait outlasts it.
    deadline: Option<Instant>,
    members: Vec<Member>,
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

/// Whether `operation` leaves processes running, so drained ones rebuild.
fn resumes(operation: &Operation) -> bool {
    matches!(
        operation,
        Operation::Resume | Operation::Unlock | Operation::Toggle { .. }
    )
}

/// The drain of a request's targets, if it asks for one; or the stop of
/// the group, every process asked having been asked again.
pub(super) fn drain(
    request: &Request<'_>,
    ready: &Ready,
    journal: &Journal,
    interrupt: &Interrupt,
    deadline: Option<Instant>,
) -> Result<Option<Drained>, Stop> {
    if !request.drain.before_lock || !drains(&request.operation) {
        return Ok(None);
    }
    let signal = request.drain.signal;
    let Parties {
        members,
        bystanders,
    } = parties(ready, signal)?;
    let mut drained = Drained {
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
    let before = nvml::usage_now();
    // From the first request on, a signal to cudackpt calls the drain off
    // rather than ending it with processes half drained.
    interrupt.arm();
    if let Err(why) = drained.ask_and_wait(interrupt, journal) {
        return Err(drained.call_off(&why, journal, interrupt));
    }
    journal.drain_phase(DrainPhase::Drained);
    drained.prove(request, ready, journal, interrupt)?;
    drained.weigh(request, ready, before.as_ref().ok(), journal, interrupt)?;
    // The wait can be long: a target stopped meanwhile (SIGSTOP, a
    // debugger, a freeze) would make its lock wait until it runs.
    if let Some(pid) = stopped_meanwhile(ready) {
        return Err(drained.call_off(&Why::Stopped(pid), journal, interrupt));
    }
    Ok(Some(drained))
}

/// The end of a wait that starts now: `timeout` from now, or `deadline`
/// if sooner (pure).
fn wait_until(timeout: Duration, deadline: Option<Instant>) -> Instant {
    let by_timeout = Instant::now() + timeout;
    deadline.map_or(by_timeout, |deadline| deadline.min(by_timeout))
}

/// Sends the drain signal to one process, written down first: the record
/// says it is going before it goes, and the next write says it went.
fn send(target: &Target, signal: DrainSignal, ledger: &dyn SignalLedger) -> std::io::Result<()> {
    ledger.begin(target.pid);
    failpoint::drain_signal(Send::Before);
    let sent = drain::ask(target, signal);
    ledger.end(target.pid, sent.is_ok());
    if sent.is_ok() {
        failpoint::drain_signal(Send::After);
    }
    sent
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

/// Who takes part in a drain, and who is left out of it.
struct Parties {
    members: Vec<Member>,
    /// Processes that do not catch the signal and hold nothing the driver
    /// cannot restore (a launcher such as torchrun's agent): never sent
    /// anything, checkpointed as they are.
    bystanders: Vec<i32>,
}

/// The processes to drain: those the command will lock (running), and
/// locked ones that drained before their lock. A process that does not
/// catch the signal is left out when the evidence holds nothing against
/// it; when it does, it stops the group before any driver call and before
/// anything is sent. So does one locked without having drained.
fn parties(ready: &Ready, signal: DrainSignal) -> Result<Parties, Stop> {
    let marked: Vec<bool> = ready
        .targets
        .iter()
        .map(|t| drain::shows_marker(t.pid))
        .collect();
    let mut held_against: Option<Vec<(i32, String)>> = None;
    let mut bystanders = Vec::new();
    let mut unable = Vec::new();
    for (t, _) in ready.targets.iter().zip(&marked).filter(|(_, &m)| !m) {
        let why = match drain::may_ask(t, signal) {
            Err(Unable::NotCaught) => {
                // Read once, and only when a process does not catch it.
                let findings = held_against.get_or_insert_with(|| restorable::pending(ready));
                match findings.iter().find(|(pid, _)| *pid == t.pid) {
                    Some((_, evidence)) => Cannot::NotCaught(evidence.clone()),
                    None => {
                        bystanders.push(t.pid);
                        continue;
                    }
                }
            }
            Err(Unable::Unreadable(reason)) => Cannot::Unreadable(reason),
            Ok(()) if t.stopped => Cannot::Stopped,
            Ok(()) => continue,
        };
        unable.push(cannot_drain(t, None, &why, signal));
    }
    if !unable.is_empty() {
        return Err(stop_unable(unable));
    }
    let states = concurrently(&ready.targets, |t| ready.driver.get_state(t.pid).ok());
    let mut members = Vec::new();
    for ((target, state), marked) in ready.targets.iter().zip(states).zip(marked) {
        if bystanders.contains(&target.pid) {
            continue;
        }
        match state {
            Some(ProcessState::Locked) if !marked => {
                unable.push(cannot_drain(target, state, &Cannot::Locked, signal));
            }
            Some(state @ (ProcessState::Running | ProcessState::Locked)) => members.push(Member {
                target: target.clone(),
                state,
                asked: !marked,
                acknowledged: None,
                exempted: None,
                footprint: None,
            }),
            // Checkpointed already, or a state the command refuses.
            _ => {}
        }
    }
    if unable.is_empty() {
        Ok(Parties {
            members,
            bystanders,
        })
    } else {
        Err(stop_unable(unable))
    }
}

fn stop_unable(unable: Vec<ProcessReport>) -> Stop {
    let first = unable[0].pid;
    Stop::Declined {
        refused: unable,
        others: Some(Failure::not_drained(format!(
            "PID {first} cannot drain, so nothing was sent to any process"
        ))),
    }
}

/// Why a process cannot take part in a drain.
enum Cannot {
    /// It does not catch the signal, and this evidence holds it to the
    /// drain (a rank, a CUDA IPC party).
    NotCaught(String),
    /// Its status could not be read (why).
    Unreadable(String),
    /// Locked without having drained: it cannot run the CUDA calls that
    /// release its resources.
    Locked,
    /// Stopped (SIGSTOP, a debugger, CRIU's freeze): it cannot answer.
    Stopped,
}

/// The report of a process that cannot take part.
fn cannot_drain(
    target: &Target,
    state: Option<ProcessState>,
    why: &Cannot,
    signal: DrainSignal,
) -> ProcessReport {
    let who = describe_process(target.pid, Some(&target.name));
    let (message, hint) = match why {
        Cannot::NotCaught(evidence) => (
            format!("refused before any change: {who} does not catch the drain signal, {signal}, according to SigCgt in /proc/{}/status: it does not speak the drain protocol and the signal could kill it, yet it holds what the driver cannot restore ({evidence}); nothing was sent to any process", target.pid),
            "start it with a drain client (the PyTorch one: `import cudackpt_drain`; see cudackpt(1), DRAIN PROTOCOL), pass the signal it catches with --drain-signal, or leave out --drain".to_string(),
        ),
        Cannot::Unreadable(reason) => (
            format!("refused before any change: whether {who} catches the drain signal, {signal}, could not be read ({reason}); nothing was sent to any process"),
            "check /proc/PID/status, then try again".to_string(),
        ),
        Cannot::Stopped => (
            format!("refused before any change: {who} is stopped (SIGSTOP, a debugger, or CRIU's freeze), so it cannot reach a safe point to drain; nothing was sent to any process"),
            "drain before the freeze: CRIU's action-script mode drains at pre-dump (CUDACKPT_DRAIN=1), before CRIU freezes the tree, or run `cudackpt suspend --drain` before `criu dump`".to_string(),
        ),
        Cannot::Locked => (
            format!("refused before any change: {who} is locked and has not drained: a locked process cannot run the CUDA calls that release its resources"),
            format!("unlock it (`cudackpt unlock {}`), then drain with `suspend --drain`", target.pid),
        ),
    };
    ProcessReport {
        state_before: state,
        state,
        failure: Some(Failure::new(FailureKind::CannotDrain, message, hint)),
        drain: Some(DrainReport::new(signal.number(), DrainOutcome::CannotDrain)),
        ..ProcessReport::new(target.pid, Some(target.name.clone()))
    }
}

/// Where each member is, for the intent record.
fn places(members: &[Member]) -> Vec<Place> {
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

/// Why a drain was called off, for every member's report.
enum Why {
    /// These processes did not acknowledge in time.
    NoAnswer(Vec<i32>, Duration),
    /// These had not acknowledged when the command's --deadline passed.
    Deadline(Vec<i32>, Duration),
    /// A process exited (or could not be sent the request).
    Gone(i32, String),
    /// cudackpt was asked to stop by this signal.
    Signal(i32),
    /// The section 10 pre-flight refused, after the acknowledgements.
    Refused(Vec<ProcessReport>),
    /// This process was stopped during the drain: its lock would wait.
    Stopped(i32),
    /// Even drained, the group's host copies would not fit (the failure of
    /// the host-memory pre-flight, on what the members kept).
    HostMemory(Failure),
}

impl Drained {
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

    /// Sends every request, then waits for every marker (the drain
    /// timeout, or the command's --deadline if sooner).
    fn ask_and_wait(
        &mut self,
        interrupt: &Interrupt,
        ledger: &dyn SignalLedger,
    ) -> Result<(), Why> {
        let started = Instant::now();
        let until = self.until();
        let by_deadline = self.deadline.is_some_and(|d| d <= started + self.timeout);
        for member in self.members.iter().filter(|m| m.asked) {
            if let Err(error) = send(&member.target, self.signal, ledger) {
                ledger.flush();
                return Err(Why::Gone(
                    member.target.pid,
                    format!("the drain request could not be sent to it ({error})"),
                ));
            }
        }
        ledger.flush();
        let asked = self.asked();
        let stop = || interrupt.signal().is_some();
        let answers = drain::wait_for(&asked, drain::shows_marker, until, &stop);
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
            return Err(Why::Signal(signal));
        }
        if let Some((pid, _)) = pids.iter().zip(&answers).find(|(_, a)| **a == Answer::Gone) {
            return Err(Why::Gone(*pid, "it exited during the drain".to_string()));
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
            Err(Why::Deadline(silent, started.elapsed()))
        } else {
            Err(Why::NoAnswer(silent, started.elapsed()))
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
        let vouched = |pid: i32| answered.contains(&pid) || drained::vouches_for(pid);
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
                Err(self.call_off(&Why::Refused(refused), ledger, interrupt))
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
        let after = nvml::usage_now();
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
                Err(self.call_off(&Why::HostMemory(failure), ledger, interrupt))
            }
        }
    }

    /// Asks every process asked once more (a drained one rebuilds, one
    /// that has not drained yet calls it off), waits for the markers to
    /// go, and says what happened to each.
    fn call_off(&self, why: &Why, ledger: &dyn SignalLedger, interrupt: &Interrupt) -> Stop {
        let asked = self.asked();
        let stop = new_signal(interrupt);
        let mut rebuilds = rebuild(&asked, self.signal, self.until(), ledger, &stop);
        let cut_short = stop().then(|| cut_short(interrupt)).flatten();
        let mut reports = Vec::new();
        for member in &self.members {
            let pid = member.target.pid;
            let mut drain = self.report_of(member, &mut rebuilds);
            let unconfirmed = drain.outcome == DrainOutcome::NotRebuilt;
            if member.acknowledged.is_none() && member.asked {
                drain.outcome = DrainOutcome::NotAcknowledged;
                drain.rebuilt = None;
            }
            let failure = self.failure_of(member, why);
            let mut report = ProcessReport {
                state_before: Some(member.state),
                state: Some(member.state),
                failure: Some(failure),
                drain: Some(drain),
                ..ProcessReport::new(pid, Some(member.target.name.clone()))
            };
            if let Why::Refused(refused) = why {
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
            not_run: Some(Failure::not_drained(
                "the drain of its group was called off",
            )),
        }
    }

    /// What a called-off drain says of one member.
    fn failure_of(&self, member: &Member, why: &Why) -> Failure {
        let pid = member.target.pid;
        let who = describe_process(pid, Some(&member.target.name));
        let rebuilt = "every process asked was asked again to rebuild, and nothing was locked";
        match why {
            Why::NoAnswer(silent, _) | Why::Deadline(silent, _) if !silent.contains(&pid) => {
                Failure::not_drained(format!("PID {} did not drain in time; {rebuilt}", silent[0]))
            }
            Why::NoAnswer(_, waited) => Failure::new(
                FailureKind::DrainTimeout,
                format!(
                    "{who} did not acknowledge the drain (signal {}) within {}: no thread named {} in /proc/{pid}/task; {rebuilt}",
                    self.signal,
                    format_duration(*waited),
                    drain_protocol::MARKER
                ),
                "give it longer (--drain-timeout; a rank answers at its next step boundary), check that every rank of the job was named (all ranks must agree), or run `cudackpt check --drain`",
            ),
            Why::Deadline(_, waited) => Failure::new(
                FailureKind::DeadlineExceeded,
                format!(
                    "{who} had not acknowledged the drain (signal {}) when the command's --deadline passed, {} into the drain; {rebuilt}",
                    self.signal,
                    format_duration(*waited),
                ),
                "give the command a later --deadline (a rank answers at its next step boundary), or leave it out to wait the whole --drain-timeout",
            ),
            Why::Gone(gone, reason) if *gone == pid => Failure::new(
                FailureKind::NoSuchProcess,
                format!("{who}: {reason}; {rebuilt}"),
                "check the job: one of its processes is gone",
            ),
            Why::Gone(gone, _) => Failure::not_drained(format!("PID {gone} exited during the drain; {rebuilt}")),
            Why::Stopped(stopped) if *stopped == pid => {
                let stopped = crate::ops::diagnose::process_stopped(pid, Some(&member.target.name));
                Failure::new(
                    stopped.kind,
                    format!("{} during the drain; {rebuilt}", stopped.message),
                    stopped.hint.unwrap_or_default(),
                )
            }
            Why::Stopped(stopped) => Failure::not_drained(format!("PID {stopped} was stopped during the drain; {rebuilt}")),
            Why::Signal(signal) => Failure::new(
                FailureKind::Interrupted,
                format!("interrupted by {} during the drain; {rebuilt}", signal_name(*signal)),
                "run the command again when it may finish",
            ),
            Why::HostMemory(failure) => Failure::new(
                failure.kind,
                format!("{}; {rebuilt}", failure.message),
                failure.hint.clone().unwrap_or_default(),
            ),
            Why::Refused(refused) => Failure::not_attempted(format!(
                "PID {} drained but still could not be restored; {rebuilt}",
                refused.first().map_or(0, |r| r.pid)
            )),
        }
    }

    /// A member's drain report: its rebuild's, taken from `rebuilds`, when
    /// it was asked to rebuild, else drained; with what it acknowledged.
    fn report_of(&self, member: &Member, rebuilds: &mut Vec<(i32, DrainReport)>) -> DrainReport {
        let mut drain = match rebuilds.iter().position(|(p, _)| *p == member.target.pid) {
            Some(at) => rebuilds.swap_remove(at).1,
            None => DrainReport::new(self.signal.number(), DrainOutcome::Drained),
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
        reports: &mut [ProcessReport],
        ledger: &dyn SignalLedger,
        interrupt: &Interrupt,
    ) {
        for report in reports
            .iter_mut()
            .filter(|r| self.bystanders.contains(&r.pid))
        {
            report.drain = Some(DrainReport::new(
                self.signal.number(),
                DrainOutcome::NotNeeded,
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
            if left_drained && (answered || drained::vouches_for(member.target.pid)) {
                drained::note(member.target.pid, self.signal.number());
            }
            let drain = self.report_of(member, &mut rebuilt);
            note_rebuild(report, &drain);
            report.drain = Some(drain);
        }
    }
}

fn state_in(reports: &[ProcessReport], pid: i32) -> Option<ProcessState> {
    reports.iter().find(|r| r.pid == pid).and_then(|r| r.state)
}

/// A rebuild that did not finish is the command's failure when nothing
/// else failed, else a warning.
fn note_rebuild(report: &mut ProcessReport, drain: &DrainReport) {
    if drain.outcome == DrainOutcome::RebuildFailed {
        let failure = rebuild_failed(report.pid, drain.signal, drain.rebuild_error.as_deref());
        match &report.failure {
            None => report.failure = Some(failure),
            Some(_) => report.warnings.push(failure.message),
        }
        return;
    }
    if drain.outcome != DrainOutcome::NotRebuilt {
        return;
    }
    let words = format!(
        "asked to rebuild (signal {}), PID {} still showed the drain marker at the end of the wait: it is running, and was not rolled back",
        drain.signal, report.pid
    );
    if report.failure.is_none() {
        report.failure = Some(Failure::new(
            FailureKind::DrainTimeout,
            words,
            "look at the process: its rebuild (e.g. a new NCCL communicator) may be waiting for a rank that is not back",
        ));
    } else {
        report.warnings.push(words);
    }
}

/// The failure of a process whose rebuild failed (it renamed its marker
/// thread, and may have said why) or that exited during it.
pub fn rebuild_failed(pid: i32, signal: i32, stated: Option<&str>) -> Failure {
    let how = if crate::targets::process::is_alive(pid) {
        let why = stated.map_or(String::new(), |text| {
            format!(": \"{}\"", crate::targets::name::printable(text))
        });
        format!(
            "said that its rebuild failed{why} (it names a thread {}): it runs with process groups that do not work",
            drain_protocol::FAIL_MARKER
        )
    } else {
        "exited during its rebuild".to_string()
    };
    Failure::new(
        FailureKind::RebuildFailed,
        format!("PID {pid}, asked to rebuild (signal {signal}), {how}; nothing was rolled back"),
        "read the process's own log for the whole error (the drain client raises it in the training loop); its checkpoint was restored, so only the job's communicators are at fault",
    )
}

/// Asks each target that catches `signal` to rebuild, once, each send
/// written down in `ledger`, and waits until `until` (or `stop`) for each
/// marker to go.
pub fn rebuild(
    targets: &[&Target],
    signal: DrainSignal,
    until: Instant,
    ledger: &dyn SignalLedger,
    stop: &dyn Fn() -> bool,
) -> Vec<(i32, DrainReport)> {
    let mut sent = Vec::new();
    let mut reports = Vec::new();
    for &target in targets {
        let sendable = drain::may_ask(target, signal).is_ok();
        // Forgotten before the send: once a rebuild may have gone, no file
        // may vouch for the marker (a kill between the two would let a
        // checkpoint through while the rank rebuilds its communicators).
        if sendable {
            drained::forget(target.pid);
        }
        if sendable && send(target, signal, ledger).is_ok() {
            sent.push(target);
        } else {
            reports.push((
                target.pid,
                DrainReport::new(signal.number(), DrainOutcome::NotRebuilt),
            ));
        }
    }
    ledger.flush();
    // A stopped process takes the signal once it runs again: not waited for.
    let (stopped, sent): (Vec<&Target>, Vec<&Target>) = sent
        .into_iter()
        .partition(|t| crate::targets::process::is_stopped(t.pid));
    reports.extend(stopped.iter().map(|t| {
        (
            t.pid,
            DrainReport::new(signal.number(), DrainOutcome::NotRebuilt),
        )
    }));
    // The marker went: rebuilt, unless it went because the rebuild failed
    // (renamed) or the process exited, judged when it went (a rank may
    // finish its job and exit while the others still rebuild).
    let failed = std::sync::Mutex::new(Vec::new());
    let answered = |pid: i32| {
        if drain::shows_marker(pid) {
            return false;
        }
        if drain::shows_failure(pid) || !crate::targets::process::is_alive(pid) {
            crate::ops::vocabulary::locked(&failed).push(pid);
        }
        true
    };
    let answers = drain::wait_for(&sent, answered, until, stop);
    let failed = crate::ops::vocabulary::locked(&failed).clone();
    for (target, answer) in sent.iter().zip(answers) {
        let mut report = DrainReport::new(signal.number(), DrainOutcome::Rebuilt);
        match answer {
            Answer::After(_) if failed.contains(&target.pid) => {
                report.outcome = DrainOutcome::RebuildFailed;
                report.rebuild_error = drain::stated_error(target.pid);
            }
            Answer::After(took) => report.rebuilt = Some(took),
            Answer::Gone => report.outcome = DrainOutcome::RebuildFailed,
            Answer::None => report.outcome = DrainOutcome::NotRebuilt,
        }
        reports.push((target.pid, report));
    }
    reports
}

/// What `recover` did for a drained group a dead cudackpt left.
#[derive(Default)]
pub struct Recovered {
    /// Each member asked, with its drain report.
    pub reports: Vec<(i32, DrainReport)>,
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
pub fn recover(pids: &[i32], note: &DrainNote, ledger: &dyn SignalLedger) -> Recovered {
    let mut recovered = Recovered::default();
    let Ok(signal) = DrainSignal::from_number(note.signal) else {
        return recovered;
    };
    let timeout = note.timeout_ms.map_or(
        crate::ops::vocabulary::request::DEFAULT_DRAIN_TIMEOUT,
        Duration::from_millis,
    );
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
            if note.phase == DrainPhase::Requested || drain::shows_marker(pid) {
                owed.push(target);
            }
            continue;
        }
        let known = note
            .of(pid)
            .unwrap_or(crate::ops::journal::intent::Signalled {
                pid,
                sent: 0,
                drained_before: false,
            });
        if note.sending == Some(pid) {
            let went = delivered(target, signal, known.owes_one(), timeout);
            ledger.end(pid, went.delivered);
            if let Some(doubt) = went.doubt {
                recovered.warnings.push(doubt);
            }
            let now = crate::ops::journal::intent::Signalled {
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
    recovered.reports = rebuild(&owed, signal, Instant::now() + timeout, ledger, &|| false);
    recovered
}

/// Whether the signal that was going to `target` when cudackpt died went.
struct Went {
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
fn delivered(target: &Target, signal: DrainSignal, owed_before: bool, timeout: Duration) -> Went {
    let pid = target.pid;
    if drain::pending(target, signal) {
        return Went {
            delivered: true,
            doubt: None,
        };
    }
    let until = Instant::now() + timeout;
    let mut seen_marker = false;
    loop {
        let marker = drain::shows_marker(pid);
        if !owed_before && marker {
            // It drained: it had the request.
            return Went {
                delivered: true,
                doubt: None,
            };
        }
        if owed_before && seen_marker && !marker {
            // It rebuilt: it had the rebuild.
            return Went {
                delivered: true,
                doubt: None,
            };
        }
        seen_marker |= marker;
        if Instant::now() >= until || target.still_the_same().is_err() {
            break;
        }
        std::thread::sleep(drain::POLL);
    }
    let waited = format_duration(timeout);
    if owed_before {
        let marker = drain::shows_marker(pid);
        Went {
            delivered: !marker,
            doubt: (!marker && !seen_marker).then(|| format!(
                "PID {pid}: cudackpt died as it sent it a rebuild or a call-off; it showed no drain marker within {waited}, so that signal is taken as delivered and nothing more was sent. If it shows the marker {} later, `cudackpt resume {pid}` asks it to rebuild",
                drain_protocol::MARKER
            )),
        }
    } else {
        Went {
            delivered: false,
            doubt: Some(format!(
                "PID {pid}: cudackpt died as it sent it the drain request; it did not drain within {waited}, so it is taken as never asked and nothing was sent. If it shows the drain marker {} later, `cudackpt resume {pid}` asks it to rebuild",
                drain_protocol::MARKER
            )),
        }
    }
}

/// After a command that resumes: every process running again that shows
/// the marker (it drained before its checkpoint) is asked to rebuild.
pub(super) fn rebuild_resumed(
    request: &Request<'_>,
    ready: &Ready,
    reports: &mut [ProcessReport],
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
        .filter(|t| drain::shows_marker(t.pid))
        .collect();
    if waiting.is_empty() {
        return;
    }
    let signal = request.drain.signal;
    let (askable, deaf): (Vec<&Target>, Vec<&Target>) = waiting
        .into_iter()
        .partition(|t| drain::may_ask(t, signal).is_ok());
    for target in deaf {
        if let Some(report) = reports.iter_mut().find(|r| r.pid == target.pid) {
            report.drain = Some(DrainReport::new(signal.number(), DrainOutcome::NotRebuilt));
            report.failure.get_or_insert_with(|| Failure::new(
                FailureKind::CannotDrain,
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
            note_rebuild(report, &drain);
            report.drain = Some(drain);
        }
    }
}

/// A dry run's word on the drain: who would be asked, who cannot be, and
/// what each would have to release (the evidence held against it now).
pub(super) fn predict(request: &Request<'_>, ready: &Ready, reports: &mut [ProcessReport]) {
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
            report.drain = Some(DrainReport::new(signal.number(), DrainOutcome::NotNeeded));
        }
        if let Some(member) = parties.members.iter().find(|m| m.target.pid == report.pid) {
            let outcome = if member.asked {
                DrainOutcome::WouldDrain
            } else {
                DrainOutcome::Drained
            };
            report.drain = Some(DrainReport::new(signal.number(), outcome));
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
