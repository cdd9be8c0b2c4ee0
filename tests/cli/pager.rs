//! `cudackpt man` on a terminal, run by root: man(1) shows the page through
//! a pager, and a pager runs commands (less's `!`). Each test plays a
//! user who reaches `sudo cudackpt man` (the sudo rule the safety chapter
//! documents) and types at the pager, or who got their own `MANPAGER`
//! through (`sudo -E`, a scheduler's environment): neither runs anything
//! as root. The harm is shown first, as the user themselves, where the
//! same keys run the command.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{cudackpt_bin, running_as_root, Fixture, NOBODY};

/// `cudackpt man` on a pseudo-terminal (script(1)), as `uid` (`None`: as
/// this test), with `env` added: its keyboard and what it shows so far.
pub struct Terminal {
    child: Child,
    shown: Arc<Mutex<Vec<u8>>>,
}

impl Terminal {
    pub fn start(fx: &Fixture, uid: Option<u32>, env: &[(&str, &str)]) -> Terminal {
        // Another user runs a copy they can reach (the build directory may
        // be private, as CI's clone is).
        let binary = match uid {
            Some(_) => fx.world_runnable_cudackpt(),
            None => cudackpt_bin(),
        };
        let line = format!("'{}' man", binary.display());
        let mut command = match uid {
            Some(uid) => {
                let mut setpriv = fx.command_for(Path::new("/usr/bin/setpriv"), &[]);
                let id = uid.to_string();
                setpriv.args(["--reuid", &id, "--regid", &id, "--clear-groups"]);
                setpriv.arg("/usr/bin/script");
                setpriv
            }
            None => fx.command_for(Path::new("/usr/bin/script"), &[]),
        };
        command
            .args(["-qfc", &line, "/dev/null"])
            .env("HOME", fx.dir())
            .env("TERM", "xterm")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = command.spawn().expect("script runs");
        let shown = Arc::new(Mutex::new(Vec::new()));
        let mut stdout = child.stdout.take().expect("piped");
        let sink = Arc::clone(&shown);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                sink.lock().expect("not poisoned").extend(&buffer[..n]);
            }
        });
        Terminal { child, shown }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.shown.lock().expect("not poisoned")).into_owned()
    }

    /// Waits until the terminal shows one of `texts`, which it returns.
    pub fn wait_for(&self, texts: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = self.text();
            if let Some(found) = texts.iter().find(|t| text.contains(**t)) {
                return found.to_string();
            }
            assert!(
                Instant::now() < deadline,
                "the terminal never showed any of {texts:?}: {text:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn types(&mut self, keys: &str) {
        let stdin = self.child.stdin.as_mut().expect("piped");
        stdin.write_all(keys.as_bytes()).expect("typed");
        stdin.flush().expect("typed");
    }

    /// Quits the pager (q, past any screen the keys opened) and waits for
    /// `cudackpt man` to end.
    pub fn quit(mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match self.child.try_wait().expect("wait") {
                Some(_) => return,
                None if Instant::now() > deadline => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    panic!("the pager never quit: {:?}", self.text());
                }
                None => {
                    let _ = self.child.stdin.as_mut().map(|s| s.write_all(b"q\n"));
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    }
}

/// Whether this test can run: root, with man(1), less and script(1).
fn can_run() -> bool {
    let tools = ["/usr/bin/man", "/usr/bin/less", "/usr/bin/script"];
    crate::support::prerequisite(
        "run `cudackpt man` as root on a terminal (root, man, less, script)",
        running_as_root() && tools.iter().all(|t| Path::new(t).is_file()),
    )
}

/// A directory the user can write their marker into (the fixture's is
/// made passable to them by the copy of the binary they run).
fn users_dir(fx: &Fixture) -> PathBuf {
    let dir = fx.dir().join("users");
    std::fs::create_dir(&dir).expect("mkdir");
    std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY)).expect("chown");
    dir
}

/// The user types `!touch MARKER` at the pager. As themselves the pager
/// runs it (the harm, were the pager root's); as root it is not
/// available, and nothing runs.
#[test]
fn a_shell_escape_at_roots_pager_runs_nothing() {
    if !can_run() {
        return;
    }
    let fx = Fixture::new();
    fx.world_runnable_cudackpt();
    let dir = users_dir(&fx);
    let escape = |uid: Option<u32>, marker: &Path| {
        let mut terminal = Terminal::start(&fx, uid, &[]);
        terminal.wait_for(&["(press h for help"]);
        terminal.types(&format!("!touch {}\n", marker.display()));
        let answer = terminal.wait_for(&["!done", "Command not available"]);
        terminal.quit();
        answer
    };
    // The harm: the keys run a command, with the pager's powers.
    let theirs = dir.join("as-the-user");
    assert_eq!(escape(Some(NOBODY), &theirs), "!done");
    assert!(theirs.exists(), "the user's own pager ran their command");
    // As root: the pager refuses, and nothing ran.
    let roots = dir.join("as-root");
    assert_eq!(escape(None, &roots), "Command not available");
    assert!(!roots.exists(), "root's pager ran the user's command");
}

/// A user's pager, less options and input filter reach root's `cudackpt
/// man` (`sudo -E`): none is used; the page is still shown, through
/// root's own less.
#[test]
fn roots_man_ignores_the_pager_the_environment_names() {
    if !can_run() {
        return;
    }
    let fx = Fixture::new();
    let dir = users_dir(&fx);
    let marker = dir.join("owned");
    let planted = format!("sh -c 'id -u > {}; cat'", marker.display());
    let filter = format!("|sh -c 'id -u > {}' %s", marker.display());
    let terminal = Terminal::start(
        &fx,
        None,
        &[
            ("MANPAGER", &planted),
            ("PAGER", &planted),
            ("LESSOPEN", &filter),
            ("LESSSECURE", "0"),
            ("LESS", "-+R"),
        ],
    );
    terminal.wait_for(&["(press h for help"]);
    let text = terminal.text();
    terminal.quit();
    assert!(!marker.exists(), "the planted pager ran as root");
    assert!(text.contains("DESCRIPTION"), "{text:?}");
}
