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
    /// The terminal's width in columns, when stdout is a terminal: a table
    /// wraps its last column to fit it.
    pub width: Option<usize>,
}

impl Look {
    pub fn plain() -> Look {
        Look {
            color: false,
            width: None,
        }
    }

    /// Decides colour: `auto` colours only a terminal, and never when
    /// NO_COLOR is set (no-color.org).
    pub fn for_stdout(choice: ColorChoice) -> Look {
        let color = match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => colour_suits(&io::stdout()),
        };
        let width = rustix::termios::tcgetwinsize(io::stdout())
            .ok()
            .map(|size| usize::from(size.ws_col))
            .filter(|&columns| columns > 0);
        Look { color, width }
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

pub use crate::vocabulary::timeout::format_duration;

/// Milliseconds for JSON, to the microsecond.
pub fn millis(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1_000_000.0).round() / 1000.0
}

/// Lays out rows in columns: each cell padded to its column's widest
/// visible text (colour codes don't count), the last column unpadded.
pub fn columns(rows: &[Vec<String>]) -> String {
    let width = |cell: &str| visible_width(cell);
    let widths = column_widths(rows);
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

/// [`columns`], fitted to `width` (a terminal's): when a line would be
/// wider, the widest column is narrowed and its cells wrap at spaces onto
/// lines of their own, under the column, the other columns blank there. A
/// table that cannot be fitted (the wide column's cells hold colour codes,
/// or the others leave it fewer than 20 characters) is left as it is
/// (pure).
pub fn columns_within(rows: &[Vec<String>], width: Option<usize>) -> String {
    let natural = columns(rows);
    let Some(width) = width else {
        return natural;
    };
    if natural.lines().all(|line| visible_width(line) <= width) {
        return natural;
    }
    let widths = column_widths(rows);
    let count = widths.len();
    let Some(wide) = (0..count).max_by_key(|&c| widths[c]) else {
        return natural;
    };
    // Each column but the last is followed by two spaces; whichever column
    // is the wide one, the others take this much of a line.
    let others: usize = (0..count)
        .filter(|&c| c != wide)
        .map(|c| widths[c] + 2)
        .sum();
    let room = width.saturating_sub(others);
    let colour = rows
        .iter()
        .skip(1)
        .filter_map(|r| r.get(wide))
        .any(|cell| cell.contains('\x1b'));
    if room < 20 || colour {
        return natural;
    }
    let mut wrapped: Vec<Vec<String>> = Vec::new();
    for row in rows {
        let pieces = match row.get(wide) {
            Some(cell) if visible_width(cell) > room && !cell.contains('\x1b') => wrap(cell, room),
            _ => vec![row.get(wide).cloned().unwrap_or_default()],
        };
        for (i, piece) in pieces.into_iter().enumerate() {
            let line: Vec<String> = (0..row.len())
                .map(|c| match (c == wide, i) {
                    (true, _) => piece.clone(),
                    (false, 0) => row[c].clone(),
                    (false, _) => String::new(),
                })
                .collect();
            wrapped.push(line);
        }
    }
    columns(&wrapped)
}

/// Each column's widest visible text (colour codes don't count) (pure).
fn column_widths(rows: &[Vec<String>]) -> Vec<usize> {
    let count = rows.iter().map(Vec::len).max().unwrap_or(0);
    (0..count)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| visible_width(cell))
                .max()
                .unwrap_or(0)
        })
        .collect()
}

/// `text` in pieces of at most `room` characters, broken at spaces (a
/// word longer than `room` stands alone) (pure).
fn wrap(text: &str, room: usize) -> Vec<String> {
    let mut pieces: Vec<String> = Vec::new();
    let mut piece = String::new();
    for word in text.split(' ') {
        if !piece.is_empty() && piece.chars().count() + 1 + word.chars().count() > room {
            pieces.push(std::mem::take(&mut piece));
        }
        if !piece.is_empty() {
            piece.push(' ');
        }
        piece.push_str(word);
    }
    pieces.push(piece);
    pieces
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
        let look = Look {
            color: true,
            width: None,
        };
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

    #[test]
    fn a_wide_last_column_wraps_to_the_terminal() {
        let rows = vec![
            vec!["PID".to_string(), "NOTE".to_string()],
            vec![
                "4242".to_string(),
                "suspend: every check passed; would lock, then checkpoint".to_string(),
            ],
        ];
        let text = columns_within(&rows, Some(30));
        assert!(text.lines().all(|l| l.chars().count() <= 30), "{text}");
        assert_eq!(
            text,
            "PID   NOTE\n4242  suspend: every check\n      passed; would lock, then\n      checkpoint\n"
        );
        assert_eq!(columns_within(&rows, None), columns(&rows));
        assert_eq!(columns_within(&rows, Some(200)), columns(&rows));
    }

    #[test]
    fn a_wide_middle_column_wraps_and_the_others_stay_on_its_first_line() {
        let rows = vec![
            vec!["PID".to_string(), "RESULT".to_string(), "TIME".to_string()],
            vec![
                "7".to_string(),
                "suspend: every check passed; would lock, then checkpoint".to_string(),
                "-".to_string(),
            ],
        ];
        let text = columns_within(&rows, Some(32));
        assert!(text.lines().all(|l| l.chars().count() <= 32), "{text}");
        assert_eq!(
            text,
            "PID  RESULT                TIME\n7    suspend: every check  -\n     passed; would lock,\n     then checkpoint\n"
        );
    }
}
