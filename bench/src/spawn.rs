//! Processes the benchmarks start: the GPU target program (`tests/fixtures/gpu-target`)
//! behind a guard that kills it on drop and talks to it over its stdin and
//! stdout, and whole-process timings of one command (spawn to exit).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

/// How long a target may take to fill its device memory and print READY.
const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a target may take to answer one command (`verify`).
const REPLY_TIMEOUT: Duration = Duration::from_secs(120);

/// Spawn-to-exit wall time of one command, output discarded, and whether it
/// succeeded. For timing error paths too: a failure is not an error here.
pub fn time_once(program: &Path, args: &[String]) -> (Duration, bool) {
    let started = Instant::now();
    let status = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    (started.elapsed(), status.is_ok_and(|s| s.success()))
}

/// Spawn-to-exit wall time of one command that must succeed; stdout is
/// discarded, stderr kept for the error, which names the command.
pub fn time_checked(program: &Path, args: &[String]) -> Result<Duration, String> {
    let started = Instant::now();
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    let took = started.elapsed();
    check(program, args, output).map(|_| took)
}

/// Runs a command to completion and returns its stdout; stderr is kept for
/// the error. The exit status is not judged: the caller reads the output.
pub fn capture(program: &Path, args: &[String]) -> Result<Output, String> {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("could not run {}: {e}", program.display()))
}

fn check(
    program: &Path,
    args: &[String],
    output: std::io::Result<Output>,
) -> Result<Output, String> {
    let output = output.map_err(|e| format!("could not run {}: {e}", program.display()))?;
    if output.status.success() {
        return Ok(output);
    }
    Err(format!(
        "`{} {}` failed ({}): {}",
        program.display(),
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    ))
}

/// Runs a command, stdout discarded, and says whether it succeeded.
pub fn run_cli(program: &Path, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Kills (and reaps) the child on drop, whatever state it is in: running,
/// locked or checkpointed, a SIGKILL ends it.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A target that has been spawned but has not yet printed READY.
struct Spawned {
    child: KillOnDrop,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

/// A running target program, killed on drop. Its stdin stays a pipe for
/// commands; its stdout is read line by line by a thread that owns the one
/// `BufReader` (so nothing it buffered is lost) and hands the lines over.
pub struct Target {
    _child: KillOnDrop,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// Its PID, from its READY line.
    pub pid: i32,
    /// The hash of its device memory when it was filled, from READY.
    pub hash: String,
}

fn spawn(program: &Path, size_mib: u64, seed: u64) -> Result<Spawned, String> {
    let mut child = Command::new(program)
        .args(["--size-mib", &size_mib.to_string()])
        .args(["--seed", &seed.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not start {}: {e}", program.display()))?;
    let stdin = child.stdin.take().ok_or("target: no stdin pipe")?;
    let stdout = child.stdout.take().ok_or("target: no stdout pipe")?;
    let child = KillOnDrop(child);
    let (sender, lines) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    Ok(Spawned {
        child,
        stdin,
        lines,
    })
}

impl Spawned {
    /// Waits for `READY <pid> <hash>`.
    fn ready(self) -> Result<Target, String> {
        let os_pid = self.child.0.id();
        let line = match self.lines.recv_timeout(READY_TIMEOUT) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                return Err(format!(
                    "target (process {os_pid}) printed no READY line in {} s",
                    READY_TIMEOUT.as_secs()
                ))
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(format!(
                    "target (process {os_pid}) exited before printing READY (its stderr is above)"
                ))
            }
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        let (pid, hash) = match words.as_slice() {
            ["READY", pid, hash] => (pid.parse().ok(), hash.to_string()),
            _ => return Err(format!("target did not start: {line:?}")),
        };
        let pid = pid.ok_or(format!("bad READY line {line:?}"))?;
        Ok(Target {
            _child: self.child,
            stdin: self.stdin,
            lines: self.lines,
            pid,
            hash,
        })
    }
}

/// Starts one target holding `size_mib` of device memory filled from `seed`.
pub fn start_target(program: &Path, size_mib: u64, seed: u64) -> Result<Target, String> {
    spawn(program, size_mib, seed)?.ready()
}

/// Starts one target per seed, all at once (they fill their memory in
/// parallel), and waits until every one is READY. On error, those already
/// started are killed.
pub fn start_targets(program: &Path, size_mib: u64, seeds: &[u64]) -> Result<Vec<Target>, String> {
    let spawned = seeds
        .iter()
        .map(|&seed| spawn(program, size_mib, seed))
        .collect::<Result<Vec<_>, _>>()?;
    spawned.into_iter().map(Spawned::ready).collect()
}

impl Target {
    /// Asks the target to read its device memory back. Ok only when it
    /// answers `OK <the hash it printed in READY>`; anything else, no
    /// answer, or a target that went away is an error naming its PID.
    pub fn verify(&mut self) -> Result<(), String> {
        let pid = self.pid;
        writeln!(self.stdin, "verify")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| format!("target PID {pid}: could not send `verify`: {e}"))?;
        let expected = format!("OK {}", self.hash);
        match self.lines.recv_timeout(REPLY_TIMEOUT) {
            Ok(line) if line.trim() == expected => Ok(()),
            Ok(line) => Err(format!(
                "target PID {pid}: DATA CHECK FAILED: it answered {:?} to `verify`, expected {expected:?}",
                line.trim()
            )),
            Err(RecvTimeoutError::Timeout) => Err(format!(
                "target PID {pid}: no answer to `verify` in {} s",
                REPLY_TIMEOUT.as_secs()
            )),
            Err(RecvTimeoutError::Disconnected) => Err(format!(
                "target PID {pid}: exited before answering `verify`"
            )),
        }
    }
}
