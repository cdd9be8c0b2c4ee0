//! Checkpoints one CUDA process through the cudackpt library, then brings
//! it back, saying how long each took:
//!
//! ```text
//! cargo run --example checkpoint -- PID [LIBCUDA]
//! ```
//!
//! LIBCUDA names the driver library; without it, `CUDACKPT_LIBCUDA` does,
//! as for the `cudackpt` command (the fake driver of "Try it without a
//! GPU"), else the host's libcuda.so.1.
//! Needs the rights `cudackpt` needs: the process's owner, or root.

use std::error::Error;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use cudackpt::{Driver, Process};

const USAGE: &str = "usage: checkpoint PID [LIBCUDA]";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("checkpoint: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let pid: i32 = args
        .next()
        .ok_or(USAGE)?
        .parse()
        .map_err(|_| format!("the PID is not a number; {USAGE}"))?;
    let libcuda = args
        .next()
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("CUDACKPT_LIBCUDA").map(PathBuf::from));
    if args.next().is_some() {
        return Err(USAGE.into());
    }

    let driver = Driver::load(libcuda.as_deref())?;
    driver.require_checkpoint_api()?;
    let process = Process::open(&driver, pid)?;
    println!(
        "PID {pid}: {}, restore thread {}",
        process.state()?,
        process.restore_thread_id()?
    );

    let started = Instant::now();
    // A process whose GPU work does not finish in 10 s stays running.
    process.suspend(Some(Duration::from_secs(10)))?;
    println!(
        "suspended in {:.1?}: {}",
        started.elapsed(),
        process.state()?
    );

    let started = Instant::now();
    process.resume(&[])?;
    println!("resumed in {:.1?}: {}", started.elapsed(), process.state()?);
    Ok(())
}
