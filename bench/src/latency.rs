//! `latency`: whole invocations (spawn to exit, as a user or CRIU pays for
//! them) of cudackpt, of a bare program that loads libcuda and makes the one
//! driver call (the floor: `cudackpt-bench bare`), and of NVIDIA's
//! `cuda-checkpoint` when given, on one CUDA process while it runs and while
//! it is checkpointed. Medians of repeated runs, printed as a table and
//! written as JSON.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::spawn::{run_cli, start_target, time_once};

#[derive(Serialize, Clone)]
pub struct Figure {
    pub operation: String,
    pub process_state: String,
    pub tool: String,
    pub median_ms: f64,
    pub min_ms: f64,
    pub p90_ms: f64,
    pub runs: usize,
    pub all_succeeded: bool,
}

fn summarize(
    operation: &str,
    state: &str,
    tool: &str,
    mut samples: Vec<Duration>,
    all_ok: bool,
) -> Figure {
    samples.sort();
    let ms = |d: Duration| (d.as_secs_f64() * 1e6).round() / 1e3;
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    Figure {
        operation: operation.to_string(),
        process_state: state.to_string(),
        tool: tool.to_string(),
        median_ms: ms(at(0.5)),
        min_ms: ms(samples[0]),
        p90_ms: ms(at(0.9)),
        runs: samples.len(),
        all_succeeded: all_ok,
    }
}

/// One thing to time: a single command, or a lock/unlock pair that leaves
/// the process as it found it.
pub struct Case<'a> {
    pub tool: &'static str,
    pub program: &'a Path,
    pub commands: Vec<(&'static str, Vec<String>)>,
}

/// Times every case `runs` times after 3 warm-up rounds, interleaved: each
/// round runs every case once, starting from a different case each round,
/// so drift on the host (or in the driver) does not favour one tool.
pub fn measure_interleaved(cases: &[Case<'_>], state: &str, runs: usize) -> Vec<Figure> {
    let mut samples: Vec<Vec<(Vec<Duration>, bool)>> = cases
        .iter()
        .map(|c| vec![(Vec::new(), true); c.commands.len()])
        .collect();
    for round in 0..runs + 3 {
        for k in 0..cases.len() {
            let index = (k + round) % cases.len();
            for (j, (_, args)) in cases[index].commands.iter().enumerate() {
                let (took, ok) = time_once(cases[index].program, args);
                if round >= 3 {
                    samples[index][j].0.push(took);
                    samples[index][j].1 &= ok;
                }
            }
        }
    }
    let mut figures = Vec::new();
    for (case, per_command) in cases.iter().zip(samples) {
        for ((operation, _), (times, ok)) in case.commands.iter().zip(per_command) {
            figures.push(summarize(operation, state, case.tool, times, ok));
        }
    }
    figures
}

pub fn latency(
    cudackpt: &Path,
    nvidia: Option<&Path>,
    target: &Path,
    size_mib: u64,
    runs: usize,
    json: Option<&Path>,
) -> Result<(), String> {
    let bench = std::env::current_exe().map_err(|e| e.to_string())?;
    let running = start_target(target, size_mib, 1)?;
    let p = running.pid.to_string();
    let mut figures = Vec::new();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();

    for state in ["running", "checkpointed"] {
        if state == "checkpointed" && !run_cli(cudackpt, &["suspend", &p]) {
            return Err("could not suspend the target".into());
        }
        // On a checkpointed process lock and unlock are refused, which
        // times the error path; while running they are a real cycle.
        let mut cases = vec![
            Case {
                tool: "bare",
                program: &bench,
                commands: vec![("get-state", s(&["bare", "get-state", &p]))],
            },
            Case {
                tool: "cudackpt",
                program: cudackpt,
                commands: vec![("get-state", s(&["state", &p]))],
            },
            Case {
                tool: "bare",
                program: &bench,
                commands: vec![("restore-tid", s(&["bare", "restore-tid", &p]))],
            },
            Case {
                tool: "cudackpt",
                program: cudackpt,
                commands: vec![("restore-tid", s(&["restore-tid", &p]))],
            },
            Case {
                tool: "bare",
                program: &bench,
                commands: vec![
                    ("lock", s(&["bare", "lock", &p])),
                    ("unlock", s(&["bare", "unlock", &p])),
                ],
            },
            Case {
                tool: "cudackpt",
                program: cudackpt,
                commands: vec![("lock", s(&["lock", &p])), ("unlock", s(&["unlock", &p]))],
            },
        ];
        // The compatible grammar, as CRIU's plugin calls it.
        cases.push(Case {
            tool: "compat",
            program: cudackpt,
            commands: vec![("get-state", s(&["--get-state", "--pid", &p]))],
        });
        cases.push(Case {
            tool: "compat",
            program: cudackpt,
            commands: vec![("restore-tid", s(&["--get-restore-tid", "--pid", &p]))],
        });
        cases.push(Case {
            tool: "compat",
            program: cudackpt,
            commands: vec![
                ("lock", s(&["--action", "lock", "--pid", &p])),
                ("unlock", s(&["--action", "unlock", "--pid", &p])),
            ],
        });
        if let Some(nvidia) = nvidia {
            cases.push(Case {
                tool: "nvidia",
                program: nvidia,
                commands: vec![("get-state", s(&["--get-state", "--pid", &p]))],
            });
            cases.push(Case {
                tool: "nvidia",
                program: nvidia,
                commands: vec![("restore-tid", s(&["--get-restore-tid", "--pid", &p]))],
            });
            cases.push(Case {
                tool: "nvidia",
                program: nvidia,
                commands: vec![
                    ("lock", s(&["--action", "lock", "--pid", &p])),
                    ("unlock", s(&["--action", "unlock", "--pid", &p])),
                ],
            });
        }
        figures.extend(measure_interleaved(&cases, state, runs));
        if state == "checkpointed" && !run_cli(cudackpt, &["resume", &p]) {
            return Err("could not resume the target".into());
        }
    }
    print_table(&figures);
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&figures).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn print_table(figures: &[Figure]) {
    let find = |op: &str, state: &str, tool: &str| {
        figures
            .iter()
            .find(|f| f.operation == op && f.process_state == state && f.tool == tool)
    };
    let cell = |figure: Option<&Figure>| {
        figure.map_or("-".to_string(), |f| {
            let refused = if f.all_succeeded { "" } else { " (err)" };
            format!("{:.2}{refused}", f.median_ms)
        })
    };
    let ratio = |over: Option<&Figure>, under: Option<&Figure>| match (over, under) {
        (Some(over), Some(under)) => format!("{:.2}x", over.median_ms / under.median_ms),
        _ => "-".to_string(),
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "| operation | process | bare ms | cudackpt ms | compat ms | nvidia ms | cudackpt/bare | compat/bare | nvidia/cudackpt |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
    for state in ["running", "checkpointed"] {
        for op in ["get-state", "restore-tid", "lock", "unlock"] {
            let [bare, ours, compat, nvidia] =
                ["bare", "cudackpt", "compat", "nvidia"].map(|tool| find(op, state, tool));
            if bare.is_none() {
                continue;
            }
            let _ = writeln!(
                out,
                "| {op} | {state} | {} | {} | {} | {} | {} | {} | {} |",
                cell(bare),
                cell(ours),
                cell(compat),
                cell(nvidia),
                ratio(ours, bare),
                ratio(compat, bare),
                ratio(nvidia, ours),
            );
        }
    }
}
