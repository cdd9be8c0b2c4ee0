//! `check`: what a scheduler asks before it preempts. For each process,
//! whether `suspend` would be safe and whether `resume` would be, and why
//! not: both commands run as dry runs (every check and pre-flight, only
//! read-only queries reach the driver), and their verdicts are merged into
//! one report. Changes nothing.

use std::path::Path;
use std::time::Instant;

use crate::api::group::Group;
use crate::drain::settings::DrainSettings;
use crate::vocabulary::plan::Operation;
use crate::vocabulary::report::{CommandReport, TargetReport};
use crate::vocabulary::request::Selectors;
use crate::vocabulary::timeout::Timeout;

/// One dry run's word on a process.
fn verdict(report: Option<&TargetReport>) -> String {
    match report {
        None => "not examined".to_string(),
        Some(p) => match (&p.failure, &p.note) {
            (Some(failure), _) => format!("refused: {}", failure.message),
            (None, Some(note)) => note.trim_start_matches("dry run: ").to_string(),
            (None, None) => "would go ahead".to_string(),
        },
    }
}

pub fn run(
    libcuda: Option<&Path>,
    pids: Vec<i32>,
    selectors: Selectors,
    drain: DrainSettings,
) -> CommandReport {
    let started = Instant::now();
    let dry = |operation| {
        Group::new()
            .libcuda_option(libcuda)
            .pids(pids.clone())
            .selectors(selectors.clone())
            .options(false, false, true)
            .drain_options(drain)
            .run(operation)
    };
    let suspend = dry(Operation::Suspend {
        timeout: Timeout::NONE,
    });
    let resume = dry(Operation::Resume);
    let processes = suspend
        .processes
        .iter()
        .map(|s| {
            let r = resume.processes.iter().find(|r| r.pid == s.pid);
            let failure = s
                .failure
                .clone()
                .or_else(|| r.and_then(|r| r.failure.clone()));
            // A note is a remark on success (the JSON contract): with a
            // refusal, the refusal is the error and both verdicts warnings.
            let (note, warnings) = match failure {
                None => (
                    Some(format!(
                        "suspend: {}; resume: {}",
                        verdict(Some(s)),
                        verdict(r)
                    )),
                    Vec::new(),
                ),
                Some(_) => (
                    None,
                    vec![
                        format!("suspend: {}", verdict(Some(s))),
                        format!("resume: {}", verdict(r)),
                    ],
                ),
            };
            // Suspend's own warnings (what a drain must release) come first.
            let warnings = s.warnings.iter().cloned().chain(warnings).collect();
            TargetReport {
                note,
                failure,
                warnings,
                ..s.clone()
            }
        })
        .collect();
    let mut warnings = suspend.warnings;
    for warning in resume.warnings {
        if !warnings.contains(&warning) {
            warnings.push(warning);
        }
    }
    CommandReport {
        processes,
        warnings,
        failure: suspend.failure.or(resume.failure),
        prediction: true,
        ..CommandReport::new("check", started.elapsed())
    }
}
