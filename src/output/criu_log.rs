//! What cudackpt's CRIU plugin says in CRIU's log, rendered as the
//! terminal's output is (pure): a group command's outcome, a line a
//! process with its level, and the `-v4` lines of how long it took and how
//! much of it the driver's calls were; and the one line the action
//! script's detached helpers leave in syslog. The plugin crate writes the
//! lines through CRIU; a process's name is printed escaped, so no name
//! can forge a line of CRIU's log.

use std::time::Duration;

use crate::commands::criu::plugin::{Level, Said, Saying};
use crate::vocabulary::plan::DriverCall;
use crate::vocabulary::prose;
use crate::vocabulary::report::CommandReport;

/// What the plugin says, as lines of CRIU's log with their levels (pure).
pub fn lines(said: &Said<'_>) -> Vec<(Level, String)> {
    match &said.0 {
        Saying::Report(what, report) => report_lines(what, report),
        Saying::Preflights { processes, spent } => {
            vec![(Level::Debug, preflight_line(*processes, *spent))]
        }
    }
}

/// What a group command did, a line a process (pure).
fn report_lines(what: &str, report: &CommandReport) -> Vec<(Level, String)> {
    let mut lines = Vec::new();
    if let Some(fault) = &report.failure {
        lines.push((Level::Error, format!("{what} refused: {}", fault.message)));
        lines.extend(
            fault
                .hint
                .iter()
                .map(|h| (Level::Error, format!("hint: {h}"))),
        );
    }
    for p in &report.processes {
        // A process names itself: no name may forge a line of CRIU's log.
        let name = crate::targets::name::printable(p.name.as_deref().unwrap_or("?"));
        match &p.failure {
            None => {
                let state = p.state.map_or("unknown".to_string(), |s| s.to_string());
                lines.push((
                    Level::Info,
                    format!("{what}: PID {} ({name}) {state}", p.pid),
                ));
            }
            Some(fault) => {
                lines.push((
                    Level::Error,
                    format!("{what}: PID {} ({name}): {}", p.pid, fault.message),
                ));
                lines.extend(
                    fault
                        .hint
                        .iter()
                        .map(|h| (Level::Error, format!("hint: {h}"))),
                );
            }
        }
        if let Some(fault) = &p.rollback_failure {
            lines.push((
                Level::Error,
                format!("{what}: PID {} not rolled back: {}", p.pid, fault.message),
            ));
        }
    }
    lines.extend(
        report
            .warnings
            .iter()
            .map(|w| (Level::Warn, format!("{what}: {w}"))),
    );
    if !report.processes.is_empty() {
        lines.push((Level::Debug, timing_line(what, report)));
    }
    lines
}

/// The `-v4` line that says how long a group command took and how much of
/// it was the driver's (pure). The group runs each step side by side and
/// waits for the slowest before the next (all restores, then all unlocks),
/// so the driver's share is, step by step, the longest process's call; the
/// rest is the plugin's own (reading the processes, the records, the
/// threads).
fn timing_line(what: &str, report: &CommandReport) -> String {
    let mut longest: Vec<(DriverCall, bool, Duration)> = Vec::new();
    for step in report.processes.iter().flat_map(|p| &p.steps) {
        match longest
            .iter_mut()
            .find(|(call, rollback, _)| *call == step.step && *rollback == step.rollback)
        {
            Some(slowest) => slowest.2 = slowest.2.max(step.duration),
            None => longest.push((step.step, step.rollback, step.duration)),
        }
    }
    let driver: Duration = longest.iter().map(|(_, _, took)| *took).sum();
    format!(
        "{what}: {} in {} ms, {} ms of it the driver's calls (each step's slowest process)",
        prose::count(report.processes.len(), "process", "processes"),
        milliseconds(report.duration),
        milliseconds(driver)
    )
}

/// The `-v4` line that says how long the first hook's pre-flights took,
/// before any change (pure).
fn preflight_line(processes: usize, spent: Duration) -> String {
    format!(
        "pre-flights: the tree scanned and {} weighed in {} ms, before any change",
        prose::count(processes, "process", "processes"),
        milliseconds(spent)
    )
}

/// A duration in milliseconds, to the hundredth (pure).
fn milliseconds(spent: Duration) -> String {
    format!("{:.2}", spent.as_secs_f64() * 1000.0)
}

/// The one line a detached helper of the action script (the thaw waiter,
/// the CRIU watcher) leaves where an administrator finds it (pure).
pub fn outcome_line(report: &CommandReport) -> String {
    let verdict = if report.ok() { "done" } else { "FAILED" };
    let mut line = format!("criu-hook {verdict}:");
    for p in &report.processes {
        let state = p.state.map_or("unknown".to_string(), |s| s.to_string());
        line.push_str(&format!(" PID {} {state}", p.pid));
        if let Some(failure) = &p.failure {
            line.push_str(&format!(" ({})", failure.message));
        }
        line.push(';');
    }
    for warning in report
        .warnings
        .iter()
        .chain(report.failure.iter().map(|f| &f.message))
    {
        line.push_str(&format!(" {warning};"));
    }
    if report.processes.is_empty() && report.failure.is_none() {
        line.push_str(" nothing to resume (the processes are gone);");
    }
    // One line, whatever a message carries.
    crate::targets::name::printable(&line).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_name_cannot_forge_a_line_of_criu_s_log() {
        let mut report = CommandReport::new("lock", Duration::ZERO);
        report
            .processes
            .push(crate::vocabulary::report::TargetReport::new(
                7,
                Some("job\n(00.000001) cudackpt: lock: PID 1 (init) locked".to_string()),
            ));
        let lines = report_lines("lock", &report);
        let said: Vec<_> = lines.iter().filter(|l| l.0 == Level::Info).collect();
        assert_eq!(said.len(), 1, "{lines:?}");
        assert!(lines.iter().all(|l| !l.1.contains('\n')), "{lines:?}");
        assert!(lines[0].1.contains("job\\x0a(00.000001)"), "{lines:?}");
    }

    #[test]
    fn a_group_command_says_its_time_and_the_driver_s_share() {
        use crate::vocabulary::report::{CallRecord, TargetReport};
        let call = |step, micros, rollback| CallRecord {
            step,
            duration: Duration::from_micros(micros),
            ok: true,
            rollback,
        };
        let mut report = CommandReport::new("resume", Duration::from_micros(95_310));
        // Each process's restores run side by side, then each unlock: the
        // driver's share is the slowest restore and the slowest unlock,
        // though no one process was slowest at both.
        for (pid, restore, unlock) in [(7, 60_000, 5_000), (8, 40_000, 30_120)] {
            let mut p = TargetReport::new(pid, None);
            p.steps = vec![
                call(DriverCall::Restore, restore, false),
                call(DriverCall::Unlock, unlock, false),
            ];
            report.processes.push(p);
        }
        assert_eq!(
            timing_line("resume", &report),
            "resume: 2 processes in 95.31 ms, 90.12 ms of it the driver's calls (each step's slowest process)"
        );
        let lines = report_lines("resume", &report);
        assert_eq!(lines.last().map(|l| l.0), Some(Level::Debug), "{lines:?}");
        assert!(report_lines("lock", &CommandReport::new("lock", Duration::ZERO)).is_empty());
        assert_eq!(
            preflight_line(1, Duration::from_micros(2_500)),
            "pre-flights: the tree scanned and 1 process weighed in 2.50 ms, before any change"
        );
    }
}
