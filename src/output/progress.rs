//! What is said while a command runs. On a terminal (stderr), for a person:
//! a line as each driver call ends, a line while a long one runs (after a
//! second, then every two), and each pre-flight's remark before the work,
//! where it was said only in the report after. As JSON Lines on a
//! descriptor the caller names (`--progress-fd`), for a scheduler: each
//! call started and ended, and each remark, one event a line
//! (`schema/progress-event.schema.json`); stdout keeps its one document.
//!
//! Lines, not a redrawn spinner: cudackpt writes no cursor motion to
//! stderr (see [`super::stderr`]), and a line reads the same in a log, a
//! CI job and a screen reader as on a terminal.

use std::fs::File;
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::json;
use crate::ops::diagnose::describe_process;
use crate::ops::{Progress, StepDone};
use crate::vocabulary::locked;

/// How long a call runs before it is said to be running, and how often
/// after.
const FIRST_SAID: Duration = Duration::from_secs(1);
const SAID_EVERY: Duration = Duration::from_secs(2);
/// What a drain's wait is called while it runs.
const DRAIN: &str = "drain";

/// How often the ticker looks.
const TICK: Duration = Duration::from_millis(100);

/// A call in flight, as the terminal tells it.
struct InFlight {
    who: String,
    what: String,
    started: Instant,
    /// The next time it is said to be running.
    next: Instant,
}

#[derive(Default)]
struct Board {
    in_flight: Vec<InFlight>,
    stopping: bool,
}

/// The terminal's progress: lines as calls end, a ticker for those that
/// run long, the remarks said early (and which, so that the report does not
/// say them again).
pub struct Terminal {
    board: Arc<(Mutex<Board>, Condvar)>,
    said: Mutex<Vec<String>>,
    ticker: Option<JoinHandle<()>>,
}

impl Terminal {
    /// Starts the ticker (a thread that only reads the board and writes
    /// lines); without one (no thread may start), calls are told as they
    /// end all the same.
    pub fn start() -> Terminal {
        let board: Arc<(Mutex<Board>, Condvar)> = Arc::default();
        let watched = Arc::clone(&board);
        let ticker = std::thread::Builder::new()
            .name("progress".to_string())
            .spawn(move || tick(&watched))
            .ok();
        Terminal {
            board,
            said: Mutex::default(),
            ticker,
        }
    }

    /// Tells one event.
    pub fn tell(&self, event: &Progress<'_>) {
        match event {
            Progress::Started {
                target,
                step,
                rollback,
            } => {
                let now = Instant::now();
                locked(&self.board.0).in_flight.push(InFlight {
                    who: describe_process(target.pid, Some(&target.name)),
                    what: what(*step, *rollback),
                    started: now,
                    next: now + FIRST_SAID,
                });
            }
            Progress::Done(done) => {
                let who = describe_process(done.target.pid, Some(&done.target.name));
                let what = what(done.step, done.rollback);
                locked(&self.board.0)
                    .in_flight
                    .retain(|f| !(f.who == who && f.what == what));
                super::stderr::say(&step_line(done));
            }
            Progress::Remark(remark) => {
                super::stderr::warn(remark);
                locked(&self.said).push((*remark).to_string());
            }
            Progress::DrainAsked { targets } => {
                let now = Instant::now();
                locked(&self.board.0)
                    .in_flight
                    .extend(targets.iter().map(|target| InFlight {
                        who: describe_process(target.pid, Some(&target.name)),
                        what: DRAIN.to_string(),
                        started: now,
                        next: now + FIRST_SAID,
                    }));
            }
            Progress::DrainAnswered {
                target,
                acknowledged,
            } => {
                let who = describe_process(target.pid, Some(&target.name));
                locked(&self.board.0)
                    .in_flight
                    .retain(|f| !(f.who == who && f.what == DRAIN));
                super::stderr::say(&match acknowledged {
                    Some(took) => format!(
                        "{who}: drain acknowledged in {}",
                        super::look::format_duration(*took)
                    ),
                    None => format!("{who}: drain not acknowledged"),
                });
            }
        }
    }

    /// The remarks said while the command ran.
    pub fn said(&self) -> Vec<String> {
        locked(&self.said).clone()
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        locked(&self.board.0).stopping = true;
        self.board.1.notify_all();
        if let Some(ticker) = self.ticker.take() {
            let _ = ticker.join();
        }
    }
}

/// The ticker: says each call that has run past its next time.
fn tick(board: &(Mutex<Board>, Condvar)) {
    let mut held = locked(&board.0);
    loop {
        let (next, timed_out) = board
            .1
            .wait_timeout(held, TICK)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        held = next;
        if held.stopping {
            return;
        }
        if !timed_out.timed_out() {
            continue;
        }
        let now = Instant::now();
        for call in held.in_flight.iter_mut().filter(|c| now >= c.next) {
            super::stderr::say(&running_line(&call.who, &call.what, now - call.started));
            call.next = now + SAID_EVERY;
        }
    }
}

fn what(step: crate::vocabulary::plan::DriverCall, rollback: bool) -> String {
    if rollback {
        format!("rollback {step}")
    } else {
        step.to_string()
    }
}

/// `PID 42 (train): checkpoint running for 3.0 s` (pure).
fn running_line(who: &str, what: &str, took: Duration) -> String {
    format!("{who}: {what} running for {:.1} s", took.as_secs_f64())
}

/// `PID 42 (train): checkpoint done in 1.2 s` (pure).
fn step_line(done: &StepDone<'_>) -> String {
    let who = describe_process(done.target.pid, Some(&done.target.name));
    let verdict = if done.ok { "done" } else { "FAILED" };
    format!(
        "{who}: {} {verdict} in {}",
        what(done.step, done.rollback),
        super::look::format_duration(done.took)
    )
}

/// The event stream: one JSON line an event on the caller's descriptor.
pub struct Events {
    out: Mutex<File>,
    started: Instant,
}

impl Events {
    /// Descriptor `fd` of this process, which the caller opened (a pipe, a
    /// file, a terminal), opened again through /proc for writing: no path
    /// a user names is opened, and no descriptor is taken over unsafely.
    /// Only a descriptor the caller opened for writing is taken: opening
    /// it again is done with cudackpt's credentials, so a descriptor open
    /// only for reading (a file its user may read and not write) would
    /// otherwise become a way for a root or capable cudackpt to write there.
    pub fn to_fd(fd: u32) -> std::io::Result<Events> {
        if !open_for_writing(fd)? {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                "it is not open for writing",
            ));
        }
        let out = std::fs::OpenOptions::new()
            .append(true)
            .open(format!("/proc/self/fd/{fd}"))?;
        Ok(Events {
            out: Mutex::new(out),
            started: Instant::now(),
        })
    }

    /// Writes one event; a stream that cannot be written is given up on in
    /// silence (the command's own result is what matters, on stdout).
    pub fn tell(&self, event: &Progress<'_>) {
        let line = json::progress_event(event, self.started.elapsed());
        let _ = locked(&self.out).write_all(line.as_bytes());
    }

    /// A dump's or an undump's images so far (the `images` event).
    pub fn images(&self, command: &'static str, bytes: u64, expected_bytes: u64) {
        let line = json::images_event(command, bytes, expected_bytes, self.started.elapsed());
        let _ = locked(&self.out).write_all(line.as_bytes());
    }
}

/// Whether this process's descriptor `fd` was opened for writing
/// (`flags` in /proc/self/fdinfo/FD, octal: O_WRONLY or O_RDWR).
fn open_for_writing(fd: u32) -> std::io::Result<bool> {
    let info = crate::files::read_capped(
        std::path::Path::new(&format!("/proc/self/fdinfo/{fd}")),
        FDINFO_CAP,
    )
    .map_err(|why| std::io::Error::new(std::io::ErrorKind::NotFound, why.to_string()))?;
    Ok(writable(&info))
}

/// /proc/PID/fdinfo/FD is a few lines (more for an epoll or inotify fd).
const FDINFO_CAP: u64 = 64 << 10;

/// Whether fdinfo's `flags` say writable: its access mode, the low two
/// bits, is 1 (O_WRONLY) or 2 (O_RDWR) (pure).
fn writable(fdinfo: &str) -> bool {
    fdinfo
        .lines()
        .find_map(|line| line.strip_prefix("flags:"))
        .and_then(|flags| u32::from_str_radix(flags.trim(), 8).ok())
        .is_some_and(|flags| matches!(flags & 0o3, 1 | 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_call_is_said_with_how_long_it_has_run() {
        assert_eq!(
            running_line("PID 7 (train)", "checkpoint", Duration::from_millis(3040)),
            "PID 7 (train): checkpoint running for 3.0 s"
        );
        assert_eq!(
            what(crate::vocabulary::plan::DriverCall::Unlock, true),
            "rollback unlock"
        );
    }

    #[test]
    fn only_a_descriptor_open_for_writing_is_writable() {
        assert!(
            !writable("pos:\t0\nflags:\t0100000\nmnt_id:\t20\n"),
            "O_RDONLY"
        );
        assert!(writable("pos:\t0\nflags:\t0102001\n"), "O_WRONLY|O_APPEND");
        assert!(writable("flags:\t02\n"), "O_RDWR");
        assert!(!writable("pos:\t0\n"), "no flags line");
    }
}
