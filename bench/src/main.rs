//! cudackpt's benchmark harness (see bench/README.md).
//!
//! - `bare`: the floor, one driver call from a program that only loads libcuda.
//! - `latency` (`latency.rs`): whole-process latency of each command, per
//!   process state, against `bare` and NVIDIA's `cuda-checkpoint`.
//! - `group` (`group.rs`): one group suspend/resume of N processes against
//!   the same N one by one, with a data check in every process after every
//!   round.
//!
//! - `preflight` (`preflight.rs`): what the checkpoint pre-flights add to a
//!   suspend (with and without `--force`).
//!
//! - `nvml` (`nvml.rs`): where NVML's part of the pre-flights goes, step by
//!   step and per GPU, with NVML started two ways.
//!
//! `spawn.rs` starts the GPU target program and times commands for both.

mod group;
mod latency;
mod nvml;
mod preflight;
mod spawn;
mod throughput;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::builder::RangedU64ValueParser;
use clap::{Parser, Subcommand};
use cudackpt::{CheckpointApi, Driver};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// The floor: load libcuda, make one checkpoint-API call, exit.
    Bare {
        /// get-state, restore-tid, lock or unlock.
        op: String,
        pid: i32,
    },
    /// Whole-process latency of each command, per process state.
    Latency {
        /// The cudackpt binary to measure.
        #[arg(long)]
        cudackpt: PathBuf,
        /// NVIDIA's cuda-checkpoint, to compare against (optional).
        #[arg(long)]
        nvidia: Option<PathBuf>,
        /// The GPU target program to start (tests/fixtures/gpu-target).
        #[arg(long)]
        target: PathBuf,
        /// Device memory the target holds.
        #[arg(long, default_value_t = 1024)]
        size_mib: u64,
        /// Timed runs per figure (after 3 warm-ups).
        #[arg(long, default_value_t = 30)]
        runs: usize,
        /// Where to write the JSON results.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// One group suspend/resume of N processes against the same one by one.
    Group {
        /// The cudackpt binary to measure.
        #[arg(long)]
        cudackpt: PathBuf,
        /// The GPU target program to start (tests/fixtures/gpu-target).
        #[arg(long)]
        target: PathBuf,
        /// Device memory each target holds, MiB (comma-separated list: each
        /// size is measured in turn).
        #[arg(long, value_delimiter = ',', default_value = "2048",
              value_parser = RangedU64ValueParser::<u64>::new().range(1..))]
        sizes_mib: Vec<u64>,
        /// How many processes at once (comma-separated list).
        #[arg(long, value_delimiter = ',', default_value = "1,2,4,8",
              value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
        counts: Vec<usize>,
        /// Timed rounds per process count.
        #[arg(long, default_value_t = 3,
              value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
        runs: usize,
        /// NVIDIA's cuda-checkpoint: also time it one by one (--toggle).
        #[arg(long)]
        nvidia: Option<PathBuf>,
        /// Where to write every sample and the medians as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// What the pre-flights add to a suspend: dry runs and real cycles,
    /// each with and without --force (which skips them).
    Preflight {
        /// The cudackpt binary to measure.
        #[arg(long)]
        cudackpt: PathBuf,
        /// The GPU target program to start (tests/fixtures/gpu-target).
        #[arg(long)]
        target: PathBuf,
        /// Device memory the target holds.
        #[arg(long, default_value_t = 2048)]
        size_mib: u64,
        /// Timed rounds of the dry runs (a third as many real cycles).
        #[arg(long, default_value_t = 30,
              value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
        runs: usize,
        /// Where to write the JSON results.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Where NVML's part of the pre-flights goes on this host: each step's
    /// median, per GPU, with NVML attaching every GPU at start or none.
    Nvml {
        /// Samples of each way to start NVML (each a fresh process).
        #[arg(long, default_value_t = 30,
              value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
        runs: usize,
        /// Where to write the medians as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// One NVML sample of `nvml`, in a process of its own (internal).
    #[command(hide = true)]
    NvmlSample { variant: String },
    /// Suspend and resume time and throughput of one process, per size.
    Throughput {
        /// The cudackpt binary to measure.
        #[arg(long)]
        cudackpt: PathBuf,
        /// The GPU target program to start (tests/fixtures/gpu-target).
        #[arg(long)]
        target: PathBuf,
        /// Device memory sizes, MiB (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "16,1024,8192")]
        sizes_mib: Vec<u64>,
        /// Rounds per size.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// NVIDIA's cuda-checkpoint, timed with --toggle beside cudackpt.
        #[arg(long)]
        nvidia: Option<PathBuf>,
        /// Where to write every sample as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

fn bare(op: &str, pid: i32) -> ExitCode {
    let Ok(driver) = Driver::load(None) else {
        return ExitCode::from(7);
    };
    let result = match op {
        "get-state" => driver.get_state(pid).map(drop),
        "restore-tid" => driver.restore_thread_id(pid).map(drop),
        "lock" => driver.lock(pid, 0),
        "unlock" => driver.unlock(pid),
        _ => return ExitCode::from(2),
    };
    if result.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        BenchCommand::Bare { op, pid } => return bare(&op, pid),
        BenchCommand::Latency {
            cudackpt,
            nvidia,
            target,
            size_mib,
            runs,
            json,
        } => latency::latency(
            &cudackpt,
            nvidia.as_deref(),
            &target,
            size_mib,
            runs,
            json.as_deref(),
        ),
        BenchCommand::Group {
            cudackpt,
            target,
            sizes_mib,
            counts,
            runs,
            nvidia,
            json,
        } => group::group(&group::Options {
            cudackpt: &cudackpt,
            target: &target,
            sizes_mib: &sizes_mib,
            counts: &counts,
            runs,
            nvidia: nvidia.as_deref(),
            json: json.as_deref(),
        }),
        BenchCommand::Preflight {
            cudackpt,
            target,
            size_mib,
            runs,
            json,
        } => preflight::preflight(&cudackpt, &target, size_mib, runs, json.as_deref()),
        BenchCommand::Nvml { runs, json } => nvml::nvml(runs, json.as_deref()),
        BenchCommand::NvmlSample { variant } => nvml::sample(&variant),
        BenchCommand::Throughput {
            cudackpt,
            target,
            sizes_mib,
            runs,
            nvidia,
            json,
        } => throughput::throughput(&throughput::Options {
            cudackpt: &cudackpt,
            target: &target,
            sizes_mib: &sizes_mib,
            runs: runs.max(1),
            nvidia: nvidia.as_deref(),
            json: json.as_deref(),
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("cudackpt-bench: {error}");
            ExitCode::FAILURE
        }
    }
}
