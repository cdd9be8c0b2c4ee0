//! `demo` for people: the round trip step by step with times and
//! throughput, the data check, and the doctor's findings when it failed.

use std::time::Duration;

use super::human;
use super::look::{columns, format_duration, Look};
use crate::commands::demo::{DemoReport, DemoStep};

/// GiB/s for the steps that move the memory.
fn throughput(step: &DemoStep, bytes: u64) -> String {
    match step.name {
        "fill" | "checkpoint" | "restore" | "verify" if step.duration > Duration::ZERO => {
            format!(
                "{:.2} GiB/s",
                bytes as f64 / (1u64 << 30) as f64 / step.duration.as_secs_f64()
            )
        }
        _ => String::new(),
    }
}

pub fn demo(report: &DemoReport, look: Look) -> (String, String) {
    let mut out = String::new();
    let mut err = String::new();
    let gpu = report.gpu.as_ref().map_or("no GPU".to_string(), |g| {
        format!("GPU {} {} ({})", g.index, g.name, g.uuid)
    });
    out.push_str(&format!(
        "demo: PID {}, {gpu}, {} MiB\n",
        report.pid,
        report.size_bytes >> 20
    ));
    let rows: Vec<Vec<String>> = report
        .steps
        .iter()
        .map(|step| {
            let hash = |h: Option<u64>| h.map_or(String::new(), |h| format!(", hash {h:016x}"));
            let result = match (step.name, step.ok, step.state) {
                ("verify", true, _) => format!("data intact{}", hash(report.hash_after)),
                ("verify", false, _) => {
                    format!("{}{}", look.bad("DATA CHANGED"), hash(report.hash_after))
                }
                ("fill", _, _) => format!("pattern written{}", hash(report.hash_before)),
                (_, ok, state) => format!(
                    "{}{}",
                    if ok { "→ " } else { "FAILED, now " },
                    look.state(state)
                ),
            };
            vec![
                format!("  {}", step.name),
                result,
                format_duration(step.duration),
                throughput(step, report.size_bytes),
            ]
        })
        .collect();
    out.push_str(&columns(&rows));
    if let Some(failure) = &report.failure {
        err.push_str(&human::failure_text(failure));
    }
    if let Some(diagnosis) = &report.diagnosis {
        for check in diagnosis.failures() {
            err.push_str(&format!(
                "  doctor: {}: {}\n",
                check.name,
                check.detail.replace('\n', "; ")
            ));
            if let Some(hint) = &check.hint {
                err.push_str(&format!("    hint: {hint}\n"));
            }
        }
    }
    out.push_str(&if report.ok() {
        format!(
            "PASS: {} MiB of GPU memory survived checkpoint and restore\n",
            report.size_bytes >> 20
        )
    } else {
        format!("{}\n", look.bad("FAIL"))
    });
    (out, err)
}
