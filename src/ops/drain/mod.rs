//! The drain's stage of the pipeline (cudackpt(1), DRAIN PROTOCOL):
//! [`Drain`], its one way in. Everything the drain is, its words, the
//! handshake with a process, the ledger and the records, lives in
//! [`crate::drain`]; here is what a command does with it: who takes part
//! ([`parties`]), the handshake before the driver calls and the settling
//! after them, or a dry run's prediction ([`stage`]), the rebuilds of
//! processes a command resumed ([`resumed`]), and `recover`'s part
//! ([`recovery`]).

mod parties;
pub mod recovery;
pub mod resumed;
mod stage;

use std::time::Instant;

use crate::ops::execute::interrupt::Interrupt;
use crate::ops::journal::intent::Journal;
use crate::ops::preflight::host_memory::{self, Weighed};
use crate::ops::preflight::restorable::{self, Passed};
use crate::vocabulary::ready::Ready;
use crate::vocabulary::report::TargetReport;
use crate::vocabulary::request::Request;
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
pub struct DrainInProgress(Option<stage::DrainedGroup>);

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
            &crate::drain::left_drained::vouches_for,
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
        Ok(host_memory::weigh(
            self.request,
            ready,
            crate::gpu::nvml::usage_of(&ready.pids()),
        )
        .unwrap_or_else(|why| Weighed {
            remarks: vec![format!(
                "host memory, weighed again after the drain: as they are now, {why}"
            )],
            usage: None,
        }))
    }

    /// A dry run's word on the drain.
    pub fn predict(&self, ready: &Ready, reports: &mut [TargetReport]) {
        stage::predict(self.request, ready, reports);
    }

    /// The handshake, just before the driver calls.
    pub fn before_calls(
        &self,
        ready: &Ready,
        journal: &Journal,
        interrupt: &Interrupt,
        deadline: Option<Instant>,
    ) -> Result<DrainInProgress, Stop> {
        stage::drain(self.request, ready, journal, interrupt, deadline).map(DrainInProgress)
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
            drained.settle(reports, journal, interrupt);
        }
        // A toggle --drain may also resume processes drained before: they
        // rebuild as after any resume (the settled members have their
        // report already).
        resumed::rebuild_resumed(self.request, ready, reports, journal, deadline);
    }
}
