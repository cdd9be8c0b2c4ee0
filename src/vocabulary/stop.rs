//! Why the pipeline ended before its last stage.

use crate::vocabulary::failure::Fault;
use crate::vocabulary::report::TargetReport;

/// Why the pipeline ended before its last stage.
#[derive(Debug)]
pub enum Stop {
    /// After the checks, before anything was done to any process (no
    /// state change, no signal): the reports of the targets refused, each
    /// with its reason, and the failure of every other valid target (none:
    /// there was nothing to do).
    Declined {
        refused: Vec<TargetReport>,
        others: Option<Fault>,
    },
    /// After something was done: the reports of the targets it was done to
    /// (a drain asked and called off), and the failure of every other
    /// valid target.
    Halted {
        ran: Vec<TargetReport>,
        not_run: Option<Fault>,
    },
}

impl Stop {
    /// Every valid target gets `failure`; nothing was done.
    pub(crate) fn not_run(failure: Fault) -> Stop {
        Stop::Declined {
            refused: Vec::new(),
            others: Some(failure),
        }
    }
}
