//! Everything cudackpt writes to stderr goes out here, with the program's
//! name first: warnings, errors and their hints, progress lines, logs, and
//! the last words of a cudackpt that must stop at once (a second signal, a
//! panic), which the rooms below hand up through [`crate::exit::last_words`]
//! because they may not call up into this one. Nothing else in `src/`
//! writes to stderr (`tests/house/terminal.rs` holds the crate to it).
//!
//! Messages carry the names of processes and threads, which their owners
//! choose: every control character but the newline is escaped (`\x1b`),
//! so none can drive the terminal (cudackpt writes no colour or cursor
//! motion to stderr but through the logs, coloured only on a terminal).

use std::io::{self, IsTerminal, Write};

/// What every line cudackpt writes to stderr begins with (NVIDIA's grammar
/// puts its own name in its place).
pub const PREFIX: &str = "cudackpt: ";

/// `cudackpt: TEXT` as a line (pure).
pub fn line(text: &str) -> String {
    format!("{PREFIX}{}\n", continued(text))
}

/// `cudackpt: warning: TEXT` as a line (pure).
pub fn warning_line(text: &str) -> String {
    format!("{PREFIX}warning: {}\n", continued(text))
}

/// `cudackpt: MESSAGE` and, indented below it, `hint: HINT` (pure).
pub fn error_lines(message: &str, hint: Option<&str>) -> String {
    let mut text = line(message);
    if let Some(hint) = hint {
        text.push_str(&format!("  hint: {}\n", continued(hint)));
    }
    text
}

/// A message's lines after its first, indented (two spaces) where they are
/// not already (pure): only cudackpt's own lines begin with its name. A
/// message carries text others chose (a manifest's, a file's name, a
/// process's), escaped where it is put in; were a newline left in one, it
/// could still not start a line that reads as cudackpt's.
fn continued(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('\n') {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut lines = text.split('\n');
    let mut out = lines.next().unwrap_or_default().to_string();
    for next in lines {
        out.push('\n');
        if !next.starts_with("  ") && !next.is_empty() {
            out.push_str("  ");
        }
        out.push_str(next);
    }
    std::borrow::Cow::Owned(out)
}

/// Whether a line of stderr text is a warning (pure).
pub fn is_warning(line: &str) -> bool {
    line.starts_with(&format!("{PREFIX}warning:"))
}

/// Writes `text` as it is (its lines already made), escaped, ignoring a
/// closed stream.
pub fn write(text: &str) {
    let text = crate::targets::name::printable_lines(text);
    let _ = io::stderr().lock().write_all(text.as_bytes());
}

/// Says `text` as a line of its own.
pub fn say(text: &str) {
    write(&line(text));
}

/// Warns: `cudackpt: warning: TEXT`.
pub fn warn(text: &str) {
    write(&warning_line(text));
}

/// An error and what to do about it.
pub fn error(message: &str, hint: &str) {
    write(&error_lines(message, Some(hint)));
}

/// The last words of a cudackpt that stops at once, each line prefixed.
/// Called from a signal watcher's thread or a panic hook: it must not
/// panic, so a failed write is ignored.
pub fn last_words(text: &str) {
    let lines: String = text.lines().map(line).collect();
    write(&lines);
}

/// Whether stderr is a terminal (a person may be watching).
pub fn is_terminal() -> bool {
    io::stderr().is_terminal()
}

/// Whether the logs on stderr may be coloured, by the usual conventions.
pub fn colours() -> bool {
    super::look::colour_suits(&io::stderr())
}

/// Where the logs go: stderr (for `tracing_subscriber`'s writer).
pub fn log_writer() -> io::Stderr {
    io::stderr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_carry_the_name_and_the_hint_is_indented() {
        assert_eq!(line("x"), "cudackpt: x\n");
        assert_eq!(warning_line("x"), "cudackpt: warning: x\n");
        assert_eq!(
            error_lines("no", Some("try")),
            "cudackpt: no\n  hint: try\n"
        );
        assert_eq!(error_lines("no", None), "cudackpt: no\n");
        assert!(is_warning(&warning_line("x")) && !is_warning(&line("x")));
    }

    /// A newline in a message never starts a line of cudackpt's own.
    #[test]
    fn a_message_s_later_lines_are_indented_under_it() {
        let forged = "driver 580\ncudackpt: restored the tree of PID 1";
        assert_eq!(
            line(forged),
            "cudackpt: driver 580\n  cudackpt: restored the tree of PID 1\n"
        );
        assert_eq!(
            error_lines("tried:\n  a: no", Some("x\ncudackpt: y")),
            "cudackpt: tried:\n  a: no\n  hint: x\n  cudackpt: y\n"
        );
        for text in [
            line(forged),
            warning_line(forged),
            error_lines(forged, Some(forged)),
        ] {
            let own = text.lines().filter(|l| l.starts_with(PREFIX)).count();
            assert_eq!(own, 1, "{text}");
        }
    }
}
