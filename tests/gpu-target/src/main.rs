//! A CUDA process for the real-GPU suite (`tests/gpu/suite.py`).
//!
//! It fills `--size-mib` of device memory with a seeded pattern, prints
//! `READY <pid> <hash>`, then answers one command per line on stdin:
//! `verify` (read the memory back: `OK <hash>` or `MISMATCH <hash>`),
//! `busy MS` (start a kernel that runs MS milliseconds; `BUSY`),
//! `sync` (wait for the GPU; `SYNCED`), `quit`. Every CUDA call blocks while
//! the process is locked or checkpointed, which is what the suite relies on.
//!
//! With `--hold` it reads no commands: it verifies its memory once a second
//! and prints `OK <hash>` or `MISMATCH <hash>`, for runs under CRIU, which
//! dumps and restores the process whole (its stdio should be a file).

use std::io::{self, BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use cudackpt::internal::pattern;
use cudackpt::Driver;

struct Options {
    size_mib: usize,
    device: i32,
    seed: u64,
    libcuda: Option<PathBuf>,
    hold: bool,
    /// Allocate without writing the pattern (a memory hog for pre-flight
    /// tests; `verify` then means nothing).
    no_fill: bool,
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        size_mib: 256,
        device: 0,
        seed: 1,
        libcuda: None,
        hold: false,
        no_fill: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--size-mib" => {
                options.size_mib = value()?.parse().map_err(|e| format!("--size-mib: {e}"))?
            }
            "--device" => {
                options.device = value()?.parse().map_err(|e| format!("--device: {e}"))?
            }
            "--seed" => options.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--libcuda" => options.libcuda = Some(PathBuf::from(value()?)),
            "--hold" => options.hold = true,
            "--no-fill" => options.no_fill = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(options)
}

fn run(options: &Options) -> Result<(), String> {
    let driver = Driver::load(options.libcuda.as_deref()).map_err(|e| e.to_string())?;
    let session = driver
        .open_device(options.device)
        .map_err(|e| e.to_string())?;
    let buffer = session
        .alloc(options.size_mib << 20)
        .map_err(|e| e.to_string())?;
    let expected = if options.no_fill {
        0
    } else {
        pattern::write_pattern(&buffer, options.seed).map_err(|e| e.to_string())?
    };
    session.synchronize().map_err(|e| e.to_string())?;
    let mut out = io::stdout().lock();
    let say = |out: &mut io::StdoutLock<'_>, line: String| -> Result<(), String> {
        writeln!(out, "{line}")
            .and_then(|()| out.flush())
            .map_err(|e| e.to_string())
    };
    say(
        &mut out,
        format!("READY {} {expected:016x}", std::process::id()),
    )?;
    let verify = || -> Result<String, String> {
        let actual = pattern::hash_device(&buffer).map_err(|e| e.to_string())?;
        let verdict = if actual == expected { "OK" } else { "MISMATCH" };
        Ok(format!("{verdict} {actual:016x}"))
    };
    if options.hold {
        loop {
            std::thread::sleep(Duration::from_secs(1));
            say(&mut out, verify()?)?;
        }
    }
    for line in io::stdin().lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = match words.as_slice() {
            ["verify"] => verify()?,
            ["busy", millis] => {
                let millis: u64 = millis.parse().map_err(|e| format!("busy: {e}"))?;
                session
                    .launch_spin(Duration::from_millis(millis))
                    .map_err(|e| e.to_string())?;
                "BUSY".to_string()
            }
            ["sync"] => {
                session.synchronize().map_err(|e| e.to_string())?;
                "SYNCED".to_string()
            }
            ["quit"] | [] => break,
            other => format!("ERROR unknown command {other:?}"),
        };
        say(&mut out, reply)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let result = parse_options().and_then(|options| run(&options));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("cudackpt-gpu-target: {error}");
            println!("ERROR {error}");
            ExitCode::FAILURE
        }
    }
}
