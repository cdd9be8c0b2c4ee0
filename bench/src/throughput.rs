//! `throughput`: how long one process takes to suspend (lock + checkpoint)
//! and resume (restore + unlock), and how fast that moves its device memory,
//! at several sizes, with cudackpt and NVIDIA's `--toggle` side by side.
//! Whole invocations are timed, as a user pays for them; the order of the
//! tools alternates by round; the data is checked after every round.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::spawn::{start_target, time_checked};

pub struct Options<'a> {
    pub cudackpt: &'a Path,
    pub target: &'a Path,
    pub sizes_mib: &'a [u64],
    pub runs: usize,
    pub nvidia: Option<&'a Path>,
    pub json: Option<&'a Path>,
}

#[derive(Serialize)]
struct Sample {
    size_mib: u64,
    tool: &'static str,
    direction: &'static str,
    seconds: f64,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

pub fn throughput(options: &Options<'_>) -> Result<(), String> {
    let mut samples = Vec::new();
    let s = |v: &[&str]| v.iter().map(ToString::to_string).collect::<Vec<String>>();
    for &size_mib in options.sizes_mib {
        let mut target = start_target(options.target, size_mib, 7)?;
        let pid = target.pid.to_string();
        let mut tools: Vec<(&'static str, &Path, Vec<String>, Vec<String>)> = vec![(
            "cudackpt",
            options.cudackpt,
            s(&["suspend", &pid]),
            s(&["resume", &pid]),
        )];
        if let Some(nvidia) = options.nvidia {
            tools.push((
                "nvidia",
                nvidia,
                s(&["--toggle", "--pid", &pid]),
                s(&["--toggle", "--pid", &pid]),
            ));
        }
        for round in 0..options.runs {
            for k in 0..tools.len() {
                let (tool, program, down, up) = &tools[(k + round) % tools.len()];
                let took: [Duration; 2] =
                    [time_checked(program, down)?, time_checked(program, up)?];
                target.verify()?;
                for (direction, time) in ["suspend", "resume"].into_iter().zip(took) {
                    samples.push(Sample {
                        size_mib,
                        tool,
                        direction,
                        seconds: time.as_secs_f64(),
                    });
                }
            }
            eprintln!(
                "throughput: {size_mib} MiB: round {}/{} (data intact)",
                round + 1,
                options.runs
            );
        }
    }
    println!("| size | cudackpt suspend s | GiB/s | cudackpt resume s | GiB/s | NVIDIA suspend s | NVIDIA resume s |");
    println!("|---|---|---|---|---|---|---|");
    for &size_mib in options.sizes_mib {
        let pick = |tool: &str, direction: &str| {
            let values: Vec<f64> = samples
                .iter()
                .filter(|x| x.size_mib == size_mib && x.tool == tool && x.direction == direction)
                .map(|x| x.seconds)
                .collect();
            (!values.is_empty()).then(|| median(values))
        };
        let gib = size_mib as f64 / 1024.0;
        let cell = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
        let rate = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.2}", gib / v));
        let (cs, cr) = (pick("cudackpt", "suspend"), pick("cudackpt", "resume"));
        println!(
            "| {size_mib} MiB | {} | {} | {} | {} | {} | {} |",
            cell(cs),
            rate(cs),
            cell(cr),
            rate(cr),
            cell(pick("nvidia", "suspend")),
            cell(pick("nvidia", "resume"))
        );
    }
    println!(
        "\nMedians of {} rounds; whole invocations; GiB/s = the target's memory / time.",
        options.runs
    );
    if let Some(path) = options.json {
        let text = serde_json::to_string_pretty(&samples).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| e.to_string())?;
    }
    Ok(())
}
