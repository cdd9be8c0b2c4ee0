//! The dry run's answer (`--dry-run`, `check`): once every pre-flight has
//! passed, each target's state now (a read-only query) and the steps the
//! command would take from there. Nothing here changes a process.

use crate::driver::{CheckpointApi, GpuPair};
use crate::ops::execute;
use crate::ops::plan;
use crate::ops::report::ProcessReport;
use crate::ops::stages::check::Ready;
use crate::ops::Request;

/// What a dry run says of each target once every pre-flight passed: its
/// state now (a read-only query) and the steps the command would take.
pub fn reports(request: &Request<'_>, ready: &Ready, map: &[GpuPair]) -> Vec<ProcessReport> {
    let states = execute::concurrently(&ready.targets, |t| ready.driver.get_state(t.pid).ok());
    let mut reports: Vec<ProcessReport> = ready
        .targets
        .iter()
        .zip(states)
        .map(|(target, state)| {
            let current = state.filter(|_| request.operation.needs_current_state());
            let what = match plan::plan(&request.operation, current, map) {
                plan::Plan::Steps(steps) => {
                    let names: Vec<&str> = steps.iter().map(|s| s.kind().as_str()).collect();
                    format!(
                        "dry run: every check passed; would {}",
                        names.join(", then ")
                    )
                }
                plan::Plan::AlreadyThere => "dry run: already there; nothing to do".to_string(),
                plan::Plan::Refused(wrong) => {
                    format!(
                        "dry run: would be refused: it is {} ({})",
                        wrong.state, wrong.hint
                    )
                }
            };
            ProcessReport {
                state_before: state,
                state,
                note: Some(what),
                ..ProcessReport::new(target.pid, Some(target.name.clone()))
            }
        })
        .collect();
    reports.extend(ready.blocked.iter().cloned());
    reports
}
