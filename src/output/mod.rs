//! Everything cudackpt shows: renderers (pure functions from a report to
//! text or JSON), the JSON contract ([`json`], every document), how output
//! looks ([`look`]: colour, durations, columns) and where it goes
//! (`Sink`). Results go to stdout;
//! diagnostics to stderr; colour only when asked for or when stdout is a
//! terminal. A closed stdout pipe is not an error.
//!
//! May use: `commands`, `ops`, `gpu`, `driver`, `targets`, `exit` (for the
//! reports it renders) and `environment`; never `cli`.

pub mod criu_log;
mod demo;
mod devices;
pub mod disk;
mod doctor;
pub mod human;
pub mod json;
pub mod look;
pub mod man_page;
pub mod progress;
pub mod stderr;

pub use look::{ColorChoice, Look};

use std::io::{self, Write};

/// Where a run's output goes, and how it looks.
pub struct Sink {
    pub json: bool,
    pub quiet: bool,
    pub look: Look,
}

impl Sink {
    /// Plain text, nothing held back: what CRIU logs of its action script.
    pub fn plain() -> Sink {
        Sink {
            json: false,
            quiet: false,
            look: Look::plain(),
        }
    }

    /// Shows a result as asked and returns the exit status it decides.
    /// A result that could not be written (a full disk, an I/O error) is a
    /// failure, said on stderr, as coreutils does; a closed pipe is not.
    pub fn finish(&self, result: &dyn Rendered) -> crate::exit::ExitStatus {
        let status = result.exit_status();
        match self.emit(|| result.json(), |look| result.human(look)) {
            Ok(()) => status,
            Err(error) => write_failed(&error, status),
        }
    }

    /// Emits a rendered result: `json` or the human (stdout, stderr) pair.
    pub fn emit(
        &self,
        json: impl FnOnce() -> String,
        human: impl FnOnce(Look) -> (String, String),
    ) -> io::Result<()> {
        if self.quiet {
            // As `grep -q`: no result and no remarks, but what went wrong
            // is still said on stderr (in words, even with --json).
            write_stderr(&errors_only(&human(self.look).1));
            return Ok(());
        }
        if self.json {
            write_stdout(&json())
        } else {
            let (out, err) = human(self.look);
            write_stderr(&err);
            write_stdout(&out)
        }
    }
}

/// The error lines of a human stderr text: everything but the
/// `cudackpt: warning:` remarks (one line each) (pure).
pub fn errors_only(stderr: &str) -> String {
    stderr
        .lines()
        .filter(|line| !stderr::is_warning(line))
        .map(|line| format!("{line}\n"))
        .collect()
}

/// Says on stderr that stdout could not be written, and turns a success
/// into a failure (a command that already failed keeps its own status).
pub fn write_failed(error: &io::Error, status: crate::exit::ExitStatus) -> crate::exit::ExitStatus {
    stderr::say(&format!("error writing the result to stdout: {error}"));
    if status == crate::exit::ExitStatus::Success {
        crate::exit::ExitStatus::Failed
    } else {
        status
    }
}

/// A result that can be shown both ways and decides the exit status.
pub trait Rendered {
    /// One JSON document and a newline.
    fn json(&self) -> String;
    /// (stdout, stderr) for people.
    fn human(&self, look: Look) -> (String, String);
    fn exit_status(&self) -> crate::exit::ExitStatus;
}

impl Rendered for crate::commands::devices::DevicesReport {
    fn json(&self) -> String {
        json::devices(self)
    }

    fn human(&self, look: Look) -> (String, String) {
        devices::devices(self, look)
    }

    fn exit_status(&self) -> crate::exit::ExitStatus {
        crate::commands::devices::DevicesReport::exit_status(self)
    }
}

impl Rendered for crate::commands::doctor::DoctorReport {
    fn json(&self) -> String {
        json::doctor(self)
    }

    fn human(&self, look: Look) -> (String, String) {
        (doctor::doctor(self, look), String::new())
    }

    fn exit_status(&self) -> crate::exit::ExitStatus {
        crate::commands::doctor::DoctorReport::exit_status(self)
    }
}

impl Rendered for crate::commands::demo::DemoReport {
    fn json(&self) -> String {
        json::demo(self)
    }

    fn human(&self, look: Look) -> (String, String) {
        demo::demo(self, look)
    }

    fn exit_status(&self) -> crate::exit::ExitStatus {
        crate::commands::demo::DemoReport::exit_status(self)
    }
}

impl Rendered for crate::commands::install_compat::InstallReport {
    fn json(&self) -> String {
        json::install_compat(self)
    }

    fn human(&self, _look: Look) -> (String, String) {
        let warnings: String = self
            .warnings
            .iter()
            .map(|w| stderr::warning_line(w))
            .collect();
        if self.ok {
            (format!("{}\n", self.message), warnings)
        } else {
            (
                String::new(),
                format!("{}{warnings}", stderr::line(&self.message)),
            )
        }
    }

    fn exit_status(&self) -> crate::exit::ExitStatus {
        self.exit
    }
}

impl Rendered for crate::commands::disk::report::DiskReport {
    fn json(&self) -> String {
        json::disk(self)
    }

    fn human(&self, look: Look) -> (String, String) {
        disk::human(self, look)
    }

    fn exit_status(&self) -> crate::exit::ExitStatus {
        crate::commands::disk::report::DiskReport::exit_status(self)
    }
}

impl Rendered for crate::vocabulary::report::CommandReport {
    fn json(&self) -> String {
        json::process_report(self)
    }

    fn human(&self, look: Look) -> (String, String) {
        human::process_report(self, look)
    }

    fn exit_status(&self) -> crate::exit::ExitStatus {
        crate::vocabulary::report::CommandReport::exit_status(self)
    }
}

/// Writes `text` to stdout and flushes it, so that a failed write is seen
/// here rather than lost at exit; a closed pipe is not an error.
pub fn write_stdout(text: &str) -> io::Result<()> {
    let mut stdout = io::stdout().lock();
    ignore_broken_pipe(
        stdout
            .write_all(text.as_bytes())
            .and_then(|()| stdout.flush()),
    )
}

/// Writes `text` (lines already made) to stderr: see [`stderr`].
pub fn write_stderr(text: &str) {
    stderr::write(text);
}

pub fn ignore_broken_pipe(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn quiet_keeps_errors_and_drops_remarks() {
        let text = "cudackpt: warning: a remark\ncudackpt: could not lock PID 1\n  hint: try\n";
        assert_eq!(
            errors_only(text),
            "cudackpt: could not lock PID 1\n  hint: try\n"
        );
    }
}
