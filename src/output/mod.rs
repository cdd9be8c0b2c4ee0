//! Everything cudackpt shows: renderers (pure functions from a report to
//! text or JSON), the JSON contract (`json.rs`, every document), how output
//! looks (`Look`) and where it goes (`Sink`). Results go to stdout;
//! diagnostics to stderr; colour only when asked for or when stdout is a
//! terminal. A closed stdout pipe is not an error.
//!
//! May use: `commands`, `ops`, `gpu`, `driver`, `exit` (for the reports it
//! renders); never `cli`.

mod demo;
mod devices;
mod doctor;
pub mod human;
pub mod json;

use std::io::{self, IsTerminal, Write};
use std::time::Duration;

use anstyle::{AnsiColor, Style};

use crate::driver::ProcessState;

/// When to colour (`--color`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colour when stdout is a terminal and NO_COLOR is unset.
    Auto,
    Always,
    Never,
}

/// How output looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Look {
    pub color: bool,
}

impl Look {
    pub fn plain() -> Look {
        Look { color: false }
    }

    /// Decides colour: `auto` colours only a terminal, and never when
    /// NO_COLOR is set (no-color.org).
    pub fn for_stdout(choice: ColorChoice) -> Look {
        let color = match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => colour_suits(&io::stdout()),
        };
        Look { color }
    }

    pub fn paint(&self, style: Style, text: &str) -> String {
        if self.color {
            format!("{}{text}{}", style.render(), style.render_reset())
        } else {
            text.to_string()
        }
    }

    pub fn state(&self, state: Option<ProcessState>) -> String {
        let (text, color) = match state {
            Some(ProcessState::Running) => ("running", AnsiColor::Green),
            Some(ProcessState::Locked) => ("locked", AnsiColor::Yellow),
            Some(ProcessState::Checkpointed) => ("checkpointed", AnsiColor::Cyan),
            Some(ProcessState::Failed) => ("failed", AnsiColor::Red),
            Some(ProcessState::Unknown(_)) | None => ("unknown", AnsiColor::Magenta),
        };
        self.paint(Style::new().fg_color(Some(color.into())), text)
    }

    pub fn bad(&self, text: &str) -> String {
        self.paint(
            Style::new().bold().fg_color(Some(AnsiColor::Red.into())),
            text,
        )
    }

    pub fn dim(&self, text: &str) -> String {
        self.paint(Style::new().dimmed(), text)
    }
}

/// Whether `stream` may be coloured when nothing was asked for, by the
/// usual conventions, in this order: NO_COLOR set and not empty
/// (no-color.org) says no; CLICOLOR_FORCE set and not `0` says yes, even
/// off a terminal; CLICOLOR=0 or TERM=dumb says no; else a terminal.
pub fn colour_suits(stream: &impl IsTerminal) -> bool {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    decide_colour(
        var("NO_COLOR").is_some(),
        var("CLICOLOR_FORCE").is_some_and(|v| v != "0"),
        var("CLICOLOR").is_some_and(|v| v == "0"),
        var("TERM").is_some_and(|v| v == "dumb"),
        stream.is_terminal(),
    )
}

/// The colour decision from its inputs (pure).
pub fn decide_colour(
    no_color: bool,
    force: bool,
    clicolor_off: bool,
    dumb: bool,
    terminal: bool,
) -> bool {
    if no_color {
        return false;
    }
    if force {
        return true;
    }
    !clicolor_off && !dumb && terminal
}

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
        .filter(|line| !line.starts_with("cudackpt: warning:"))
        .map(|line| format!("{line}\n"))
        .collect()
}

/// Says on stderr that stdout could not be written, and turns a success
/// into a failure (a command that already failed keeps its own status).
pub fn write_failed(error: &io::Error, status: crate::exit::ExitStatus) -> crate::exit::ExitStatus {
    write_stderr(&format!(
        "cudackpt: error writing the result to stdout: {error}\n"
    ));
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
            .map(|w| format!("cudackpt: warning: {w}\n"))
            .collect();
        if self.ok {
            (format!("{}\n", self.message), warnings)
        } else {
            (
                String::new(),
                format!("cudackpt: {}\n{warnings}", self.message),
            )
        }
    }

    fn exit_status(&self) -> crate::exit::ExitStatus {
        self.exit
    }
}

impl Rendered for crate::ops::vocabulary::report::Report {
    fn json(&self) -> String {
        json::process_report(self)
    }

    fn human(&self, look: Look) -> (String, String) {
        human::process_report(self, look)
    }

    fn exit_status(&self) -> crate::exit::ExitStatus {
        crate::ops::vocabulary::report::Report::exit_status(self)
    }
}

pub use crate::ops::vocabulary::timeout::format_duration;

/// Milliseconds for JSON, to the microsecond.
pub fn millis(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1_000_000.0).round() / 1000.0
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

/// Writes `text` to stderr, ignoring a closed stream. Messages carry the
/// names of processes and threads, which their owners choose: every control
/// character but the newline is escaped (`\x1b`), so none can drive the
/// terminal (cudackpt writes no colour or cursor motion to stderr).
pub fn write_stderr(text: &str) {
    let text = crate::targets::name::printable_lines(text);
    let _ = io::stderr().lock().write_all(text.as_bytes());
}

pub fn ignore_broken_pipe(result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Lays out rows in columns: each cell padded to its column's widest
/// visible text (colour codes don't count), the last column unpadded.
pub fn columns(rows: &[Vec<String>]) -> String {
    let width = |cell: &str| visible_width(cell);
    let count = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..count)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| width(cell))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut text = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if c + 1 < row.len() {
                line.push_str(&" ".repeat(widths[c] - width(cell) + 2));
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

/// Characters shown on screen, skipping ANSI escape sequences.
fn visible_width(text: &str) -> usize {
    let mut width = 0;
    let mut in_escape = false;
    for c in text.chars() {
        match (in_escape, c) {
            (false, '\x1b') => in_escape = true,
            (true, 'm') => in_escape = false,
            (true, _) => {}
            (false, _) => width += 1,
        }
    }
    width
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_follows_the_conventions_in_order() {
        // no_color, force, clicolor_off, dumb, terminal
        assert!(decide_colour(false, false, false, false, true));
        assert!(!decide_colour(false, false, false, false, false));
        assert!(
            !decide_colour(true, true, false, false, true),
            "NO_COLOR wins"
        );
        assert!(decide_colour(false, true, false, true, false), "forced");
        assert!(!decide_colour(false, false, false, true, true), "TERM=dumb");
        assert!(
            !decide_colour(false, false, true, false, true),
            "CLICOLOR=0"
        );
    }

    #[test]
    fn quiet_keeps_errors_and_drops_remarks() {
        let text = "cudackpt: warning: a remark\ncudackpt: could not lock PID 1\n  hint: try\n";
        assert_eq!(
            errors_only(text),
            "cudackpt: could not lock PID 1\n  hint: try\n"
        );
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_duration(Duration::from_micros(412)), "0.412 ms");
        assert_eq!(format_duration(Duration::from_micros(12_345)), "12.3 ms");
        assert_eq!(format_duration(Duration::from_millis(1302)), "1.302 s");
        assert_eq!(millis(Duration::from_nanos(1_234_567)), 1.235);
    }

    #[test]
    fn columns_align_ignoring_colour() {
        let look = Look { color: true };
        let rows = vec![
            vec!["PID".to_string(), "STATE".to_string(), "NAME".to_string()],
            vec![
                "4242".to_string(),
                look.state(Some(ProcessState::Running)),
                "python3".to_string(),
            ],
        ];
        let text = columns(&rows);
        let plain: Vec<String> = text.lines().map(|l| l.replace('\x1b', "")).collect();
        assert!(text.lines().nth(1).is_some_and(|l| l.contains("\x1b[")));
        assert_eq!(
            columns(&[
                vec!["PID".into(), "STATE".into()],
                vec!["1".into(), "running".into()]
            ]),
            "PID  STATE\n1    running\n"
        );
        assert_eq!(plain.len(), 2);
    }
}
