//! What a person watching a terminal sees while a command runs: a line on
//! stderr as each step of each process ends.

use crate::ops::diagnose::describe_process;
use crate::ops::StepDone;

/// One stderr line for a finished step.
pub fn step_done(done: &StepDone<'_>) {
    super::stderr::say(&step_line(done));
}

/// `PID 42 (train): checkpoint done in 1.2 s` (pure).
fn step_line(done: &StepDone<'_>) -> String {
    let who = describe_process(done.target.pid, Some(&done.target.name));
    let what = if done.rollback {
        format!("rollback {}", done.step)
    } else {
        done.step.to_string()
    };
    let verdict = if done.ok { "done" } else { "FAILED" };
    format!(
        "{who}: {what} {verdict} in {}",
        super::look::format_duration(done.took)
    )
}
