//! `group`: what a group suspend/resume gains over the same processes one by
//! one. For each process count N it starts N targets, then each round times
//! one `cudackpt suspend P1..PN` and one `resume` (the driver calls run
//! concurrently), `cudackpt suspend Pi` / `resume Pi` for each process in
//! sequence, and NVIDIA's `cuda-checkpoint --toggle --pid Pi` in sequence when
//! given. The order of the modes rotates from round to round. After every
//! command, `cudackpt --json state` must report every process in the state it
//! should be in, and after every mode each target must find its device memory
//! intact; anything else aborts the run before a single figure is printed.

use std::io::Write;
use std::iter;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::spawn::{capture, start_targets, time_checked, Target};

pub struct Options<'a> {
    pub cudackpt: &'a Path,
    pub target: &'a Path,
    pub sizes_mib: &'a [u64],
    pub counts: &'a [usize],
    pub runs: usize,
    pub nvidia: Option<&'a Path>,
    pub json: Option<&'a Path>,
}

/// How the N processes are moved.
#[derive(Clone, Copy, PartialEq, Eq, Serialize)]
enum Mode {
    /// One `cudackpt suspend P1..PN`, one `cudackpt resume P1..PN`.
    #[serde(rename = "group")]
    Group,
    /// `cudackpt suspend Pi` for each process in sequence, then `resume Pi`.
    #[serde(rename = "one-by-one")]
    OneByOne,
    /// `cuda-checkpoint --toggle --pid Pi` for each process in sequence, twice.
    #[serde(rename = "nvidia-one-by-one")]
    Nvidia,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Group => "group",
            Mode::OneByOne => "one-by-one",
            Mode::Nvidia => "nvidia-one-by-one",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Direction {
    Suspend,
    Resume,
}

impl Direction {
    fn verb(self) -> &'static str {
        match self {
            Direction::Suspend => "suspend",
            Direction::Resume => "resume",
        }
    }

    /// The state every process must be in afterwards.
    fn leaves(self) -> &'static str {
        match self {
            Direction::Suspend => "checkpointed",
            Direction::Resume => "running",
        }
    }
}

/// One timed move of all N processes: spawn to exit of the one group
/// command, or the sum over the N commands one by one.
#[derive(Serialize)]
struct Sample {
    processes: usize,
    size_mib: u64,
    round: usize,
    /// 0 when this mode went first in its round.
    position: usize,
    mode: Mode,
    direction: Direction,
    seconds: f64,
}

#[derive(Serialize)]
struct Median {
    processes: usize,
    size_mib: u64,
    mode: Mode,
    direction: Direction,
    runs: usize,
    median_s: f64,
    min_s: f64,
    max_s: f64,
    /// processes × size / median time.
    gib_per_s: f64,
}

#[derive(Serialize)]
struct Results<'a> {
    benchmark: &'static str,
    sizes_mib: &'a [u64],
    counts: &'a [usize],
    runs: usize,
    /// False while rounds are still to come: the file is written after
    /// every process count, so a run stopped by its host's time limit keeps
    /// what it measured.
    complete: bool,
    medians: &'a [Median],
    samples: &'a [Sample],
}

/// The part of `cudackpt --json state`'s document this checks.
#[derive(Deserialize)]
struct StateDoc {
    processes: Vec<ProcessState>,
}

#[derive(Deserialize)]
struct ProcessState {
    pid: i32,
    state: String,
    error: Option<StateError>,
}

#[derive(Deserialize)]
struct StateError {
    message: String,
}

pub fn group(options: &Options<'_>) -> Result<(), String> {
    let mut modes = vec![
        (Mode::Group, options.cudackpt),
        (Mode::OneByOne, options.cudackpt),
    ];
    if let Some(nvidia) = options.nvidia {
        modes.push((Mode::Nvidia, nvidia));
    }
    let mut samples = Vec::new();
    for &size_mib in options.sizes_mib {
        for &count in options.counts {
            measure(options, &modes, size_mib, count, &mut samples)
                .map_err(|e| format!("{e}\naborted: no figures reported"))?;
            write_results(options, &samples, false)?;
        }
    }
    print_table(&medians(&samples), options.nvidia.is_some());
    write_results(options, &samples, true)
}

/// Writes every sample so far and their medians to `--json`, if asked.
fn write_results(options: &Options<'_>, samples: &[Sample], complete: bool) -> Result<(), String> {
    let Some(path) = options.json else {
        return Ok(());
    };
    let results = Results {
        benchmark: "group",
        sizes_mib: options.sizes_mib,
        counts: options.counts,
        runs: options.runs,
        complete,
        medians: &medians(samples),
        samples,
    };
    let text = serde_json::to_string_pretty(&results).map_err(|e| e.to_string())?;
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// All rounds for N targets of one size; the targets are killed on return.
fn measure(
    options: &Options<'_>,
    modes: &[(Mode, &Path)],
    size_mib: u64,
    count: usize,
    samples: &mut Vec<Sample>,
) -> Result<(), String> {
    let setup = format!("{count} x {size_mib} MiB");
    eprintln!("group: {setup}: starting the targets");
    let seeds: Vec<u64> = (1..=count as u64).collect();
    let mut targets = start_targets(options.target, size_mib, &seeds)?;
    let pids: Vec<i32> = targets.iter().map(|t| t.pid).collect();
    expect_state(options.cudackpt, &pids, "running").map_err(|e| format!("{setup}: {e}"))?;
    verify_all(&mut targets).map_err(|e| format!("{setup}, before the first round: {e}"))?;

    for round in 0..options.runs {
        let mut progress = Vec::new();
        for position in 0..modes.len() {
            let (mode, program) = modes[(round + position) % modes.len()];
            let mut times = Vec::new();
            for direction in [Direction::Suspend, Direction::Resume] {
                let context = format!(
                    "{setup}, round {}, {} {}",
                    round + 1,
                    mode.name(),
                    direction.verb()
                );
                let took: Duration = commands(mode, direction, &pids)
                    .iter()
                    .map(|args| time_checked(program, args))
                    .sum::<Result<Duration, String>>()
                    .map_err(|e| format!("{context}: {e}"))?;
                expect_state(options.cudackpt, &pids, direction.leaves())
                    .map_err(|e| format!("{context}: {e}"))?;
                times.push(format!("{:.2}", took.as_secs_f64()));
                samples.push(Sample {
                    processes: count,
                    size_mib,
                    round,
                    position,
                    mode,
                    direction,
                    seconds: (took.as_secs_f64() * 1e6).round() / 1e6,
                });
            }
            verify_all(&mut targets)
                .map_err(|e| format!("{setup}, round {}, after {}: {e}", round + 1, mode.name()))?;
            progress.push(format!("{} {} s", mode.name(), times.join("/")));
        }
        eprintln!(
            "group: {setup}: round {}/{} (suspend/resume, data intact): {}",
            round + 1,
            options.runs,
            progress.join(", ")
        );
    }
    Ok(())
}

/// The argument lists, in order, that move every process in this direction.
fn commands(mode: Mode, direction: Direction, pids: &[i32]) -> Vec<Vec<String>> {
    let verb = direction.verb().to_string();
    match mode {
        Mode::Group => vec![iter::once(verb)
            .chain(pids.iter().map(i32::to_string))
            .collect()],
        Mode::OneByOne => pids
            .iter()
            .map(|pid| vec![verb.clone(), pid.to_string()])
            .collect(),
        // NVIDIA's tool has no suspend or resume: --toggle checkpoints a
        // running process and restores a checkpointed one.
        Mode::Nvidia => pids
            .iter()
            .map(|pid| vec!["--toggle".to_string(), "--pid".to_string(), pid.to_string()])
            .collect(),
    }
}

/// Checks with `cudackpt --json state P...` that every process is in `want`.
fn expect_state(cudackpt: &Path, pids: &[i32], want: &str) -> Result<(), String> {
    let args: Vec<String> = ["--json", "state"]
        .into_iter()
        .map(String::from)
        .chain(pids.iter().map(i32::to_string))
        .collect();
    let output = capture(cudackpt, &args)?;
    let doc: StateDoc = serde_json::from_slice(&output.stdout).map_err(|e| {
        format!(
            "`cudackpt --json state` printed no state document ({e}; exit {}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )
    })?;
    let wrong: Vec<String> = pids
        .iter()
        .filter_map(|&pid| match doc.processes.iter().find(|p| p.pid == pid) {
            Some(p) if p.state == want => None,
            Some(p) => Some(format!(
                "PID {pid} is {}{}",
                p.state,
                p.error
                    .as_ref()
                    .map_or(String::new(), |e| format!(" ({})", e.message))
            )),
            None => Some(format!("PID {pid} is missing from the report")),
        })
        .collect();
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "every process should be {want}, but {}",
            wrong.join("; ")
        ))
    }
}

/// Every target reads its device memory back and must find it intact.
fn verify_all(targets: &mut [Target]) -> Result<(), String> {
    targets.iter_mut().try_for_each(Target::verify)
}

fn median_of(mut seconds: Vec<f64>) -> (f64, f64, f64) {
    seconds.sort_by(f64::total_cmp);
    let n = seconds.len();
    let median = if n % 2 == 1 {
        seconds[n / 2]
    } else {
        (seconds[n / 2 - 1] + seconds[n / 2]) / 2.0
    };
    (median, seconds[0], seconds[n - 1])
}

/// One median per (processes, size, mode, direction), in the order measured.
fn medians(samples: &[Sample]) -> Vec<Median> {
    let key = |s: &Sample| (s.processes, s.size_mib, s.mode, s.direction);
    let mut keys = Vec::new();
    for sample in samples {
        if !keys.contains(&key(sample)) {
            keys.push(key(sample));
        }
    }
    keys.into_iter()
        .map(|k @ (processes, size_mib, mode, direction)| {
            let seconds: Vec<f64> = samples
                .iter()
                .filter(|s| key(s) == k)
                .map(|s| s.seconds)
                .collect();
            let runs = seconds.len();
            let (median_s, min_s, max_s) = median_of(seconds);
            let gib = processes as f64 * size_mib as f64 / 1024.0;
            Median {
                processes,
                size_mib,
                mode,
                direction,
                runs,
                median_s,
                min_s,
                max_s,
                gib_per_s: (gib / median_s * 100.0).round() / 100.0,
            }
        })
        .collect()
}

fn size_label(size_mib: u64) -> String {
    match (size_mib / 1024, size_mib % 1024) {
        (gib, 0) => format!("{gib} GiB"),
        _ => format!("{size_mib} MiB"),
    }
}

fn print_table(medians: &[Median], nvidia: bool) {
    let mut setups: Vec<(usize, u64)> = Vec::new();
    for m in medians {
        if !setups.contains(&(m.processes, m.size_mib)) {
            setups.push((m.processes, m.size_mib));
        }
    }
    let mut out = std::io::stdout().lock();
    let mut header = "| processes | size | group suspend s | one-by-one suspend s | speedup \
                      | group resume s | one-by-one resume s | speedup \
                      | group suspend GiB/s | group resume GiB/s |"
        .to_string();
    if nvidia {
        header.push_str(" nvidia one-by-one suspend s | nvidia one-by-one resume s |");
    }
    let columns = header.matches('|').count() - 1;
    let _ = writeln!(out, "{header}");
    let _ = writeln!(out, "|{}", "---|".repeat(columns));
    for (processes, size_mib) in setups {
        let find = |mode: Mode, direction: Direction| {
            medians.iter().find(|m| {
                (m.processes, m.size_mib, m.mode, m.direction)
                    == (processes, size_mib, mode, direction)
            })
        };
        let secs = |m: Option<&Median>| m.map_or("-".to_string(), |m| format!("{:.2}", m.median_s));
        let rate =
            |m: Option<&Median>| m.map_or("-".to_string(), |m| format!("{:.2}", m.gib_per_s));
        let speedup = |slow: Option<&Median>, fast: Option<&Median>| match (slow, fast) {
            (Some(slow), Some(fast)) => format!("{:.2}x", slow.median_s / fast.median_s),
            _ => "-".to_string(),
        };
        let [group_s, group_r, seq_s, seq_r, nv_s, nv_r] = [
            (Mode::Group, Direction::Suspend),
            (Mode::Group, Direction::Resume),
            (Mode::OneByOne, Direction::Suspend),
            (Mode::OneByOne, Direction::Resume),
            (Mode::Nvidia, Direction::Suspend),
            (Mode::Nvidia, Direction::Resume),
        ]
        .map(|(mode, direction)| find(mode, direction));
        let mut row = format!(
            "| {processes} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            size_label(size_mib),
            secs(group_s),
            secs(seq_s),
            speedup(seq_s, group_s),
            secs(group_r),
            secs(seq_r),
            speedup(seq_r, group_r),
            rate(group_s),
            rate(group_r),
        );
        if nvidia {
            row.push_str(&format!(" {} | {} |", secs(nv_s), secs(nv_r)));
        }
        let _ = writeln!(out, "{row}");
    }
    let _ = writeln!(
        out,
        "\nMedians; size is per process; speedup = one-by-one / group; \
         GiB/s = processes x size / group time."
    );
}
