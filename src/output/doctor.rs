//! `doctor` for people: one aligned row per check, then the hints of the
//! checks that need something done, then the verdict.

use super::look::{columns, Look};
use crate::commands::doctor::{DoctorReport, Status};

pub fn doctor(report: &DoctorReport, look: Look) -> String {
    let mut rows = Vec::new();
    for check in &report.checks {
        let label = match check.status {
            Status::Ok => look.paint(
                anstyle::Style::new().fg_color(Some(anstyle::AnsiColor::Green.into())),
                "ok",
            ),
            Status::Warn => look.paint(
                anstyle::Style::new().fg_color(Some(anstyle::AnsiColor::Yellow.into())),
                "warn",
            ),
            Status::Fail => look.bad("FAIL"),
            Status::Info => look.dim("info"),
        };
        let first = check.detail.lines().next().unwrap_or_default();
        rows.push(vec![label, check.name.to_string(), first.to_string()]);
    }
    // A detail of several lines (a list of libraries tried) shows its first
    // line in the row and the rest under it, indented.
    let mut text = String::new();
    for (line, check) in columns(&rows).lines().zip(&report.checks) {
        text.push_str(line);
        text.push('\n');
        for more in check.detail.lines().skip(1) {
            text.push_str(&format!("      {}\n", more.trim_start()));
        }
    }
    for check in report
        .checks
        .iter()
        .filter(|c| c.hint.is_some() && c.status != Status::Ok)
    {
        if let Some(hint) = &check.hint {
            text.push_str(&format!("{}: {hint}\n", check.name));
        }
    }
    text.push_str(if report.ok() {
        "checkpointing can work on this host\n"
    } else {
        "checkpointing cannot work on this host yet: fix the checks marked FAIL\n"
    });
    text
}
