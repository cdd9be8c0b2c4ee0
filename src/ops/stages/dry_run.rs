//! The dry run's answer (`--dry-run`, `check`): once every pre-flight has
//! passed, each target's state now (a read-only query) and the steps the
//! command would take from there. Nothing here changes a process.

use crate::driver::{CallError, CheckpointApi, GpuPair};
use crate::ops::diagnose::Attempt;
use crate::ops::execute;
use crate::targets::process::{self, Privileges, Target};
use crate::vocabulary::failure::Fault;
use crate::vocabulary::plan;
use crate::vocabulary::ready::Ready;
use crate::vocabulary::report::TargetReport;
use crate::vocabulary::request::Request;

/// What a dry run says of each target once every pre-flight passed: its
/// state now (a read-only query) and the steps the command would take. It
/// refuses as the real command would: a process the driver cannot answer
/// for (not a CUDA process), or one in a state the command cannot start
/// from, fails with the real command's failure, and the rest of a group
/// that changes state are not attempted.
pub fn reports(request: &Request<'_>, ready: &Ready, map: &[GpuPair]) -> Vec<TargetReport> {
    let states = execute::concurrently(&ready.targets, |t| ready.driver.get_state(t.pid));
    let mut reports: Vec<TargetReport> = ready
        .targets
        .iter()
        .zip(states)
        .map(|(target, state)| {
            let report = TargetReport::new(target.pid, Some(target.name.clone()));
            let state = match state {
                Ok(state) => state,
                Err(error) => {
                    return TargetReport {
                        failure: Some(unanswered(ready, target, &error)),
                        ..report
                    }
                }
            };
            let current = Some(state).filter(|_| request.operation.needs_current_state());
            let (note, failure) = match plan::plan(&request.operation, current, map) {
                plan::Plan::Steps(steps) => {
                    let names: Vec<&str> = steps.iter().map(|s| s.kind().as_str()).collect();
                    let note = format!(
                        "dry run: every check passed; would {}",
                        names.join(", then ")
                    );
                    (Some(note), None)
                }
                plan::Plan::AlreadyThere => (
                    Some("dry run: already there; nothing to do".to_string()),
                    None,
                ),
                plan::Plan::Refused(wrong) => (
                    None,
                    Some(execute::wrong_state(&request.operation, target, &wrong)),
                ),
            };
            TargetReport {
                state_before: Some(state),
                state: Some(state),
                note,
                failure,
                ..report
            }
        })
        .collect();
    if request.operation.changes_state() && reports.iter().any(|r| r.failure.is_some()) {
        execute::mark_not_attempted(&mut reports, "another process would be refused");
    }
    reports.extend(ready.blocked.iter().cloned());
    reports
}

/// Why the driver could not say where `target` is, as the real command
/// would explain it (a process that never initialised CUDA, one gone).
fn unanswered(ready: &Ready, target: &Target, error: &CallError) -> Fault {
    let caller = execute::Caller {
        api: &ready.driver,
        alive: process::is_alive(target.pid),
        privileged: Privileges::current().is_privileged(),
    };
    execute::explain(&caller, Attempt::GetState, target, error).0
}
