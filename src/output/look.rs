//! How output looks: whether to colour (`--color`, NO_COLOR, CLICOLOR),
//! the styles, durations in words and milliseconds, and rows laid out in
//! columns. Pure but for asking whether a stream is a terminal; the
//! renderers (`human`, `devices`, `doctor`, `demo`, `json`) use it.

use std::io::{self, IsTerminal};
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
    use crate::environment::{os, CLICOLOR, CLICOLOR_FORCE, NO_COLOR, TERM};
    decide_colour(
        os(NO_COLOR).is_some(),
        os(CLICOLOR_FORCE).is_some_and(|v| v != "0"),
        os(CLICOLOR).is_some_and(|v| v == "0"),
        os(TERM).is_some_and(|v| v == "dumb"),
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

pub use crate::ops::vocabulary::timeout::format_duration;

/// Milliseconds for JSON, to the microsecond.
pub fn millis(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1_000_000.0).round() / 1000.0
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
