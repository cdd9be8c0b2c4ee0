//! Why the pipeline ended before its last stage.

use crate::ops::vocabulary::failure::Failure;
use crate::ops::vocabulary::report::ProcessReport;

/// Why the pipeline ended before its last stage.
#[derive(Debug)]
pub enum Stop {
    /// Before any target was examined: every named PID shares the failure.
    Refused(Failure),
    /// After the checks: the reports of targets already answered for, and
    /// the failure of every other valid target (none: they simply were
    /// not run).
    Halted {
        ran: Vec<ProcessReport>,
        not_run: Option<Failure>,
    },
}

impl Stop {
    /// Every valid target gets `failure`; nothing ran.
    pub(crate) fn not_run(failure: Failure) -> Stop {
        Stop::Halted {
            ran: Vec::new(),
            not_run: Some(failure),
        }
    }
}
