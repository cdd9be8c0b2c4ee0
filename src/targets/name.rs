//! Names of processes and threads. Each process sets its own (`prctl`,
//! `/proc/self/comm`) to any bytes but NUL: a name is read as bytes and
//! decoded lossily, so no name can make a process unreadable (and so
//! unseen, or a whole group refused), and it is never printed raw, so no
//! name can move a terminal's cursor, retitle it, or overwrite a row.

use std::borrow::Cow;

/// A name from /proc's bytes: invalid UTF-8 becomes U+FFFD, and the
/// newline the kernel ends a `comm` file with goes.
pub fn from_bytes(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    String::from_utf8_lossy(bytes).into_owned()
}

/// `text` with every control character (C0, DEL, C1: ESC, CR, BEL, OSC's
/// 0x9d ...) written as an escape (`\x1b`, `\u{9d}`), for people's eyes on
/// a terminal. JSON needs none of this: its encoder escapes them itself.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if (c as u32) < 0x80 && c.is_control() => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A path as [`printable`] shows text: a name anyone may choose (a
/// directory under their home, a cgroup) with its control characters
/// escaped, so a terminal never acts on them.
pub fn printable_path(path: &std::path::Path) -> String {
    printable(&path.to_string_lossy()).into_owned()
}

/// [`printable`] for a message that may hold several lines of its own:
/// newlines stay, every other control character is escaped. Names that go
/// into messages are made [`printable`] first, so a newline in a name
/// cannot start a line of its own.
pub fn printable_lines(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() && c != '\n') {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.split('\n')
            .map(printable)
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_bytes_make_a_name() {
        assert_eq!(from_bytes(b"python3\n"), "python3");
        assert_eq!(from_bytes(b"bad\xff\xfe\n"), "bad\u{fffd}\u{fffd}");
        assert_eq!(from_bytes(b""), "");
    }

    #[test]
    fn control_characters_are_escaped_for_a_terminal() {
        assert_eq!(printable("python3"), Cow::Borrowed("python3"));
        assert_eq!(printable("\x1b]0;owned\x07x"), "\\x1b]0;owned\\x07x");
        assert_eq!(printable("a\rb\nc\td\x7f"), "a\\x0db\\x0ac\\x09d\\x7f");
        assert_eq!(printable("\u{9b}2J"), "\\u{9b}2J");
        assert_eq!(printable("caf\u{e9} \u{fffd}"), "caf\u{e9} \u{fffd}");
        assert_eq!(
            printable_lines("line \x1b[2K1\n  hint\r"),
            "line \\x1b[2K1\n  hint\\x0d"
        );
    }
}
