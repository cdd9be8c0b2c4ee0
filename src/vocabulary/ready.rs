//! The targets that passed every check, with the driver to act on them:
//! what every stage after the checks is given.

use crate::driver::Driver;
use crate::targets::process::Target;
use crate::vocabulary::report::TargetReport;

/// Targets that passed every check, and the driver to act on them.
pub struct Ready {
    pub driver: Driver,
    pub targets: Vec<Target>,
    /// Stopped targets the driver cannot be asked about, already reported.
    pub blocked: Vec<TargetReport>,
}

impl Ready {
    /// The targets' PIDs, in their order.
    pub fn pids(&self) -> Vec<i32> {
        self.targets.iter().map(|t| t.pid).collect()
    }
}
