//! `cudackpt man` on a terminal: the page handed to man(1), which formats
//! it and shows it through a pager. man and its pager run with this
//! process's powers, and a pager runs commands (less's `!`, `|`, `v`, its
//! log files): a root `cudackpt man`, with a user's `MANPAGER` or none,
//! was a root shell one `!sh` away. So an elevated cudackpt (root, any
//! capability, secure execution: `files::privilege`) runs man with none of
//! its caller's environment but the terminal's kind and language (plain
//! words only), a fixed `PATH`, and as the pager root's own `less` in its
//! secure mode (`LESSSECURE=1`: no shell, pipe, editor, examine, log file,
//! lesskey or history), or `cat` where there is no such `less`. systemd's
//! pager does the same for root. Anyone else pages as they like: the pager
//! runs as them.
//!
//! May use: `files` (the privilege and the file checks), `environment`.

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// Where `man` is looked for: the system's own, never a `man` that `PATH`
/// names (cudackpt may run as root with a user's `PATH`).
const MAN_PROGRAMS: [&str; 2] = ["/usr/bin/man", "/bin/man"];

/// The pager an elevated cudackpt pages with, when root's own.
const LESS: &str = "/usr/bin/less";

/// The pager where there is no `less` root alone can change: no paging.
const CAT: &str = "/bin/cat";

/// The `PATH` man and its helpers (groff, the pager) get when elevated.
const FIXED_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The caller's variables an elevated man keeps, when their values are
/// plain words: the terminal's kind and the language.
const KEPT: [&str; 5] = ["TERM", "LANG", "LC_ALL", "LC_MESSAGES", "LC_CTYPE"];

/// A man page on stdout: as `man` shows it when stdout is a terminal
/// (`man -l -` reads it from its stdin), else the roff source, for a file
/// or a pipe. `Ok(false)`: `man` ran and failed.
pub fn show(page: &[u8]) -> io::Result<bool> {
    use std::io::IsTerminal;
    let man = MAN_PROGRAMS
        .iter()
        .find(|program| Path::new(program).is_file());
    if let (true, Some(man)) = (io::stdout().is_terminal(), man) {
        let mut command = Command::new(man);
        command.args(["-l", "-"]).stdin(Stdio::piped());
        if crate::files::privilege::elevated() {
            let pager = if only_root_changes(Path::new(LESS)) {
                LESS
            } else {
                CAT
            };
            command
                .env_clear()
                .envs(elevated_environment(&crate::environment::os, pager));
        }
        let shown = command.spawn().and_then(|mut child| {
            if let Some(mut stdin) = child.stdin.take() {
                // A reader that quits early (q in the pager) closes it.
                let _ = stdin.write_all(page);
            }
            child.wait()
        });
        if let Ok(status) = shown {
            return Ok(status.success());
        }
    }
    super::write_stdout(&String::from_utf8_lossy(page)).map(|()| true)
}

/// The whole environment of an elevated man (pure, given the caller's
/// variables and the pager): the kept variables whose values are plain
/// words, a fixed `PATH`, `pager` as man's pager and the only one, and
/// less's secure mode.
pub fn elevated_environment(
    caller: &dyn Fn(&str) -> Option<OsString>,
    pager: &str,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = KEPT
        .iter()
        .filter_map(|name| {
            let value = caller(name)?.into_string().ok()?;
            plain_word(&value).then(|| (name.to_string(), value))
        })
        .collect();
    env.push(("PATH".into(), FIXED_PATH.into()));
    for name in ["MANPAGER", "PAGER"] {
        env.push((name.into(), pager.into()));
    }
    env.push(("LESSSECURE".into(), "1".into()));
    env
}

/// Letters, digits and `._-+@:` only, at most 64 of them (pure): a
/// terminal's kind or a locale's name, never a path or a command.
fn plain_word(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 64
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-+@:".contains(&b))
}

/// Whether only root can change the program at `path`: a regular file of
/// root's that neither its group nor others may write.
fn only_root_changes(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.uid() == 0 && m.mode() & 0o022 == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    fn get<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
        env.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The caller's pager, its less options and its paths are not kept;
    /// the pager is the one given, in secure mode.
    #[test]
    fn an_elevated_man_pages_only_through_the_pager_given_in_secure_mode() {
        let planted = caller(&[
            ("MANPAGER", "sh -c 'id > /tmp/owned'"),
            ("PAGER", "vim -"),
            ("LESS", "-+S"),
            ("LESSOPEN", "|/tmp/x %s"),
            ("LESSKEY", "/tmp/keys"),
            ("PATH", "/tmp/evil:/usr/bin"),
            ("LD_PRELOAD", "/tmp/evil.so"),
            ("HOME", "/home/mallory"),
            ("TERM", "xterm-256color"),
            ("LANG", "en_US.UTF-8"),
        ]);
        let env = elevated_environment(&planted, LESS);
        assert_eq!(get(&env, "MANPAGER"), Some(LESS));
        assert_eq!(get(&env, "PAGER"), Some(LESS));
        assert_eq!(get(&env, "LESSSECURE"), Some("1"));
        assert_eq!(get(&env, "PATH"), Some(FIXED_PATH));
        assert_eq!(get(&env, "TERM"), Some("xterm-256color"));
        assert_eq!(get(&env, "LANG"), Some("en_US.UTF-8"));
        for gone in ["LESS", "LESSOPEN", "LESSKEY", "LD_PRELOAD", "HOME"] {
            assert_eq!(get(&env, gone), None, "{gone}");
        }
    }

    /// A terminal's kind or a locale that is a path or a command is dropped.
    #[test]
    fn kept_variables_must_be_plain_words() {
        let planted = caller(&[
            ("TERM", "../../tmp/terminfo"),
            ("LANG", "C; id"),
            ("LC_ALL", "C.UTF-8"),
        ]);
        let env = elevated_environment(&planted, CAT);
        assert_eq!(get(&env, "TERM"), None);
        assert_eq!(get(&env, "LANG"), None);
        assert_eq!(get(&env, "LC_ALL"), Some("C.UTF-8"));
        assert_eq!(get(&env, "MANPAGER"), Some(CAT));
    }
}
