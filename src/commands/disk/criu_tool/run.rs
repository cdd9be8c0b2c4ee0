//! Runs CRIU and watches it: cudackpt (this binary) as its action script,
//! the size of the images told while it writes. CRIU reaches the images
//! directory, its work directory (where its log goes) and its plugin
//! directory only through descriptors cudackpt checked and hands down
//! (`/proc/self/fd/N`), never by a path someone could swap in between.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::files::SafeDir;

use crate::commands::disk::images;

/// How often the images' size is told.
const TICK: Duration = Duration::from_millis(500);

/// What a CRIU run left.
#[derive(Debug)]
pub struct CriuRun {
    pub ok: bool,
    /// Its exit, in words, when it failed.
    pub exit: String,
    pub elapsed: Duration,
    /// CRIU's log in its work directory, as a person finds it.
    pub log: PathBuf,
    /// When CRIU started, in clock ticks since boot (/proc/PID/stat): what
    /// it restores started no earlier.
    pub started_ticks: Option<u64>,
    /// The first signal that asked cudackpt to stop while CRIU ran (CRIU
    /// was let finish: stopped mid-dump, it could leave its parasite code
    /// in the job), and whether a second one came, which ended the wait
    /// (`ok` is then false, `exit` says CRIU still runs).
    pub signal: Option<i32>,
    pub abandoned: bool,
}

/// A CRIU run to start: its arguments after `criu` and what the action
/// script is told through its environment.
pub struct CriuCall<'a> {
    pub criu: &'a Path,
    pub args: Vec<String>,
    pub env: Vec<(&'static str, String)>,
    /// The images, held open.
    pub images: &'a SafeDir,
    /// Where CRIU writes its log (and a restore its pidfile), held open.
    pub work: &'a SafeDir,
    pub log_name: &'static str,
}

/// Runs `call`, telling `written` the images' bytes every half second.
pub fn run(call: &CriuCall<'_>, written: &dyn Fn(u64, Duration)) -> std::io::Result<CriuRun> {
    let started = Instant::now();
    let log = call.work.path().join(call.log_name);
    let no_plugins = images::no_plugins_dir()?;
    // Inherited by CRIU alone, and closed here once it has started.
    let (plugins_fd, images_fd, work_fd) = (
        no_plugins.inheritable()?,
        call.images.inheritable()?,
        call.work.inheritable()?,
    );
    let mut command = Command::new(call.criu);
    command
        .args(&call.args)
        .arg("--libdir")
        .arg(&plugins_fd.path)
        .arg("-D")
        .arg(&images_fd.path)
        .arg("-W")
        .arg(&work_fd.path)
        .arg("-o")
        .arg(call.log_name)
        .arg("-v4")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (name, value) in &call.env {
        command.env(name, value);
    }
    // Caught from before CRIU starts: nothing between could end cudackpt
    // without its report.
    pending_signals();
    let spawned = command.spawn();
    drop((plugins_fd, images_fd, work_fd));
    let mut child = spawned?;
    // Read while CRIU is an unreaped child: its PID is its own.
    let started_ticks = crate::targets::process::starttime(child.id() as i32);
    let pidfd = rustix::process::pidfd_open(
        rustix::process::Pid::from_child(&child),
        rustix::process::PidfdFlags::empty(),
    )
    .ok();
    let mut signal = None;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        for arrived in pending_signals() {
            if signal.is_some() {
                return Ok(CriuRun {
                    ok: false,
                    exit: format!("still runs (PID {})", child.id()),
                    elapsed: started.elapsed(),
                    log,
                    started_ticks,
                    signal,
                    abandoned: true,
                });
            }
            signal = Some(arrived);
        }
        written(images::size_of(call.images), started.elapsed());
        wait_a_tick(pidfd.as_ref());
    };
    Ok(CriuRun {
        ok: status.success(),
        exit: in_words(status),
        elapsed: started.elapsed(),
        log,
        started_ticks,
        signal,
        abandoned: false,
    })
}

/// The signals that ask cudackpt to stop, caught from CRIU's start to the
/// command's end (a signal handler signal-hook installs stays installed:
/// caught once, a signal never ends cudackpt before its report again);
/// `None` where they cannot be caught (they then end cudackpt as their
/// default does, and CRIU goes on alone).
static CAUGHT: std::sync::Mutex<Option<signal_hook::iterator::Signals>> =
    std::sync::Mutex::new(None);

/// The signals that came since the last look, catching them from now on.
fn pending_signals() -> Vec<i32> {
    let mut caught = CAUGHT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if caught.is_none() {
        let signals = crate::ops::doors::signals::CAUGHT.map(|(signal, _)| signal.as_raw());
        *caught = signal_hook::iterator::Signals::new(signals).ok();
    }
    caught
        .as_mut()
        .map(|s| s.pending().collect())
        .unwrap_or_default()
}

/// A signal that came after CRIU ended, before the command's report: the
/// first, if any.
pub fn late_signal() -> Option<i32> {
    let caught = CAUGHT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if caught.is_none() {
        return None; // CRIU never ran: nothing was caught
    }
    drop(caught);
    pending_signals().first().copied()
}

/// Waits a tick, or less when CRIU exits first: its pidfd turns readable
/// then (a plain sleep kept a restore waiting up to half a second after
/// CRIU had finished). Without a pidfd (a kernel before 5.3), the sleep.
fn wait_a_tick(pidfd: Option<&std::os::fd::OwnedFd>) {
    let waited = pidfd.map(|fd| crate::targets::process::pidfd_exit_within(fd, Some(TICK)));
    match waited {
        Some(Ok(_)) | Some(Err(rustix::io::Errno::INTR)) => {}
        None | Some(Err(_)) => std::thread::sleep(TICK),
    }
}

/// `exited 1`, `killed by signal 9` (pure).
pub(super) fn in_words(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => "ended".to_string(),
    }
}

/// CRIU's log `name` in `work`, where it wrote one (read at most 64 MiB).
pub fn read_log(work: &SafeDir, name: &str) -> Option<String> {
    work.read_capped(name, 64 << 20).ok().flatten()
}

/// When CRIU's log first says `text`, by the time it stamps its lines with
/// (`(12.345678) text`: seconds since CRIU started) (pure).
pub fn log_mark(log: &str, text: &str) -> Option<Duration> {
    log.lines()
        .find(|line| line.contains(text))
        .and_then(|line| {
            let stamp = line.trim_start().strip_prefix('(')?.split_once(')')?.0;
            Duration::try_from_secs_f64(stamp.trim().parse().ok()?).ok()
        })
}

/// The lines of a CRIU log that say what went wrong (`Error (`), the last
/// `limit` of them, else its last lines; and whether they are errors
/// (CRIU's own words) rather than the log's last lines (pure).
pub fn log_errors(log: &str, limit: usize) -> (Vec<String>, bool) {
    let lines: Vec<&str> = log.lines().collect();
    let errors: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.contains("Error ("))
        .collect();
    let are_errors = !errors.is_empty();
    let chosen = if are_errors { &errors } else { &lines };
    let quoted = chosen[chosen.len().saturating_sub(limit)..]
        .iter()
        .map(|l| crate::targets::name::printable(l).into_owned())
        .collect();
    (quoted, are_errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_mark_is_the_stamp_of_the_first_line_that_says_it() {
        let log = "(00.035109) Running pre-restore scripts\n(02.500000) Running post-restore scripts\n(09.0) Running post-restore scripts\n";
        assert_eq!(
            log_mark(log, "post-restore"),
            Some(Duration::from_micros(2_500_000))
        );
        assert_eq!(log_mark(log, "post-resume"), None);
        assert_eq!(
            log_mark("Running post-resume scripts\n", "post-resume"),
            None
        );
        assert_eq!(log_mark("(-1.0) post-resume\n", "post-resume"), None);
    }
}
