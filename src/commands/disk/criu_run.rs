//! Runs CRIU and watches it: its log and every image inside the images
//! directory, cudackpt (this binary) as its action script, the size of the
//! images told while it writes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::images;

/// How often the images' size is told.
const TICK: Duration = Duration::from_millis(500);

/// What a CRIU run left.
#[derive(Debug)]
pub struct CriuRun {
    pub ok: bool,
    /// Its exit, in words, when it failed.
    pub exit: String,
    pub elapsed: Duration,
    /// CRIU's log in the images directory.
    pub log: PathBuf,
}

/// A CRIU run to start: its arguments after `criu` and what the action
/// script is told through its environment.
pub struct CriuCall<'a> {
    pub criu: &'a Path,
    pub args: Vec<String>,
    pub env: Vec<(&'static str, String)>,
    pub images: &'a Path,
    pub log_name: &'static str,
}

/// Runs `call`, telling `written` the images' bytes every half second.
pub fn run(call: &CriuCall<'_>, written: &dyn Fn(u64, Duration)) -> std::io::Result<CriuRun> {
    let started = Instant::now();
    let log = call.images.join(call.log_name);
    let no_plugins = images::no_plugins_dir(call.images)?;
    let mut command = Command::new(call.criu);
    command
        .args(&call.args)
        .arg("--libdir")
        .arg(&no_plugins)
        .arg("-D")
        .arg(call.images)
        .arg("-o")
        .arg(call.log_name)
        .arg("-v4")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (name, value) in &call.env {
        command.env(name, value);
    }
    let mut child = command.spawn()?;
    let pidfd = rustix::process::pidfd_open(
        rustix::process::Pid::from_child(&child),
        rustix::process::PidfdFlags::empty(),
    )
    .ok();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        written(images::size_of(call.images), started.elapsed());
        wait_a_tick(pidfd.as_ref());
    };
    Ok(CriuRun {
        ok: status.success(),
        exit: in_words(status),
        elapsed: started.elapsed(),
        log,
    })
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

/// The lines of CRIU's log that say what went wrong (`Error (`), the last
/// `limit` of them, else its last lines.
pub fn log_errors(log: &Path, limit: usize) -> Vec<String> {
    let Ok(text) = crate::files::read_capped(log, 64 << 20) else {
        return Vec::new();
    };
    let lines: Vec<&str> = text.lines().collect();
    let errors: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.contains("Error ("))
        .collect();
    let chosen = if errors.is_empty() { &lines } else { &errors };
    chosen[chosen.len().saturating_sub(limit)..]
        .iter()
        .map(|l| crate::targets::name::printable(l).into_owned())
        .collect()
}
