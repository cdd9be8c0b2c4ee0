//! Who may aim cudackpt (SPEC section 12): each test plays a less
//! privileged user who tries to steer a root (or capable) cudackpt through
//! what that user controls (a flag a sudo rule lets through, an
//! environment variable, a directory, a file, a process's name) and shows
//! the harm does not happen, and that a refusal comes before any driver
//! call or signal.

use std::fs;
use std::path::{Path, PathBuf};

use crate::support::{texts, wait_until, Fixture, Target};

/// A CUDA process that catches SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2
/// and signal 40 and writes the number of each it gets to a file: the
/// root daemon or the other user's job that a drain signal must not reach
/// as "stop".
fn signal_catcher(fx: &Fixture) -> (Target, PathBuf) {
    let program = fx.compile_program(
        "catcher",
        r#"#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
static const char *path;
static void got(int sig) {
    char line[16];
    int n = snprintf(line, sizeof line, "%d\n", sig);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd >= 0) { write(fd, line, n); close(fd); }
}
int main(int argc, char **argv) {
    (void)argc;
    path = argv[1];
    int caught[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, 40};
    for (unsigned i = 0; i < sizeof caught / sizeof caught[0]; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = got;
        sigaction(caught[i], &sa, 0);
    }
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) close(fd);
    for (;;) pause();
}
"#,
    );
    let received = fx.dir().join("received");
    let target = fx.cuda_program(&program, &[received.to_str().expect("utf-8")]);
    wait_until("the catcher to install its handlers", || received.exists());
    (target, received)
}

fn received(path: &Path) -> String {
    fs::read_to_string(path).expect("the catcher's file")
}

/// `lock --drain --drain-signal TERM` once sent SIGTERM twice to every
/// CUDA process that catches it (a root daemon, another user's job), and
/// `--drain-signal INT` raised KeyboardInterrupt in Python jobs. Only
/// real-time signals may ask for a drain: the rest are refused as bad
/// input, before any driver call or signal, from every way in.
#[test]
fn a_drain_signal_that_means_stop_is_refused_before_anything_is_sent() {
    let fx = Fixture::new();
    let (target, received_file) = signal_catcher(&fx);
    let pid = target.arg();
    for signal in ["TERM", "SIGINT", "HUP", "USR1", "12", "15"] {
        for command in ["lock", "suspend", "toggle", "check"] {
            let output = fx
                .std_command(&[command, "--drain", "--drain-signal", signal, &pid])
                .output()
                .expect("run cudackpt");
            assert_eq!(
                output.status.code(),
                Some(2),
                "{command} {signal}: {output:?}"
            );
            let (_, stderr) = texts(&output);
            assert!(stderr.contains("real-time signal"), "{stderr}");
        }
        // The same through the environment, modern grammar.
        let output = fx
            .std_command(&["suspend", "--drain", &pid])
            .env("CUDACKPT_DRAIN_SIGNAL", signal)
            .output()
            .expect("run cudackpt");
        assert_eq!(output.status.code(), Some(2), "env {signal}: {output:?}");
        // NVIDIA's grammar with CUDACKPT_DRAIN=1: its failure is exit 1.
        let output = fx
            .std_command(&["--toggle", "--pid", &pid])
            .env("CUDACKPT_DRAIN", "1")
            .env("CUDACKPT_DRAIN_SIGNAL", signal)
            .output()
            .expect("run cudackpt");
        assert_eq!(output.status.code(), Some(1), "compat {signal}: {output:?}");
        assert!(texts(&output).1.contains("real-time signal"), "{output:?}");
        // CRIU's action script at pre-dump.
        let output = fx
            .std_command(&[])
            .env("CRTOOLS_SCRIPT_ACTION", "pre-dump")
            .env("CRTOOLS_INIT_PID", &pid)
            .env("CUDACKPT_DRAIN", "1")
            .env("CUDACKPT_DRAIN_SIGNAL", signal)
            .output()
            .expect("run cudackpt");
        assert_eq!(output.status.code(), Some(2), "hook {signal}: {output:?}");
        assert!(texts(&output).1.contains("real-time signal"), "{output:?}");
    }
    assert_eq!(
        received(&received_file),
        "",
        "no signal reached the process"
    );
    fx.assert_no_calls("a drain signal that means stop");
    assert_eq!(fx.fake_state(target.pid), "running");

    // A real-time signal it catches is still sent: the refusal is of the
    // signal, not of the drain.
    let output = fx
        .std_command(&[
            "lock",
            "--drain",
            "--drain-signal",
            "RTMIN+6",
            "--drain-timeout",
            "300ms",
            &pid,
        ])
        .output()
        .expect("run cudackpt");
    assert_ne!(output.status.code(), Some(2), "{output:?}");
    wait_until("the catcher to get signal 40", || {
        received(&received_file).lines().any(|l| l == "40")
    });
}

/// A prerequisite a test cannot do without. Where it is missing the test
/// says so and passes, except in CI (`CI` set), where it fails: CI must
/// run every attacker's test.
fn prerequisite(what: &str, met: bool) -> bool {
    if !met {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must be able to {what}"
        );
        eprintln!("skipped: cannot {what}");
    }
    met
}

const NOBODY: u32 = 65534;

/// A library whose constructor writes `MARK_FILE`: the code a user would
/// have a capable cudackpt run.
const MARKING_LIBRARY: &str = r#"
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void mark(void) {
    const char *path = getenv("MARK_FILE");
    if (path) { FILE *f = fopen(path, "w"); if (f) { fputs("ran with cudackpt's power", f); fclose(f); } }
}
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
"#;

/// Arguments, environment and the exit status expected.
type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], i32);

fn setcap() -> Option<PathBuf> {
    ["/usr/sbin/setcap", "/sbin/setcap", "/usr/bin/setcap"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// The README offers `setcap cap_sys_ptrace+ep` on the binary. Such a copy
/// runs with the uid of whoever starts it, so it once skipped root's
/// checks on `--libcuda`: a user's library ran with CAP_SYS_PTRACE, enough
/// to attach to a root daemon. A capable copy now loads only what root
/// would, and root's `--libcuda-unsafe` is not the user's to give.
#[test]
fn a_copy_with_capabilities_loads_only_what_root_would() {
    if !prerequisite(
        "give files to another user and run as them (needs root)",
        crate::support::running_as_root(),
    ) {
        return;
    }
    let Some(setcap) = setcap() else {
        prerequisite("find setcap (Debian's libcap2-bin)", false);
        return;
    };
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let bin = fx.world_runnable_cudackpt();
    let plain_bin = bin.with_file_name("cudackpt-plain");
    fs::copy(&bin, &plain_bin).expect("a copy without capabilities");
    let status = std::process::Command::new(&setcap)
        .args(["cap_sys_ptrace+ep"])
        .arg(&bin)
        .status()
        .expect("run setcap");
    if !prerequisite("set a file capability here", status.success()) {
        return;
    }
    // The user's own directory, library and mark.
    let home = fx.dir().join("home");
    fs::create_dir(&home).expect("home");
    let library = home.join("libcuda.so.1");
    fs::copy(fx.compile_library("evil", MARKING_LIBRARY), &library).expect("library");
    for path in [&home, &library] {
        std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY)).expect("chown");
    }
    let mark = home.join("mark");
    let lib = library.to_str().expect("utf-8").to_string();
    let pid = target.arg();
    let as_nobody = |program: &Path, args: &[&str], env: &[(&str, &str)]| {
        use std::os::unix::process::CommandExt;
        let mut command = fx.command_for(program, args);
        command
            .uid(NOBODY)
            .gid(NOBODY)
            .current_dir("/")
            .env_remove("CUDACKPT_LIBCUDA")
            .env("MARK_FILE", &mark)
            .envs(env.iter().copied());
        command.output().expect("run cudackpt as nobody")
    };

    // The control: without capabilities nobody loads their own library
    // into their own process (their business), so the library works.
    let output = as_nobody(&plain_bin, &["--libcuda", &lib, "devices"], &[]);
    assert!(
        mark.exists(),
        "the library runs in nobody's own process: {output:?}"
    );
    fs::remove_file(&mark).expect("reset");

    // With the capability, every way of naming it is refused.
    let cases: [Case; 6] = [
        (&["--json", "--libcuda", &lib, "state", &pid], &[], 6),
        (
            &[
                "--json",
                "--libcuda",
                &lib,
                "--libcuda-unsafe",
                "state",
                &pid,
            ],
            &[],
            6,
        ),
        (&["--json", "state", &pid], &[("CUDACKPT_LIBCUDA", &lib)], 6),
        (
            &["--json", "state", &pid],
            &[("CUDACKPT_LIBCUDA", &lib), ("CUDACKPT_LIBCUDA_UNSAFE", "1")],
            6,
        ),
        (
            &["--get-state", "--pid", &pid],
            &[("CUDACKPT_LIBCUDA", &lib), ("CUDACKPT_LIBCUDA_UNSAFE", "1")],
            1,
        ),
        (
            &[],
            &[
                ("CUDACKPT_LIBCUDA", &lib),
                ("CUDACKPT_LIBCUDA_UNSAFE", "1"),
                ("CRTOOLS_SCRIPT_ACTION", "pre-dump"),
                ("CRTOOLS_INIT_PID", &pid),
            ],
            6,
        ),
    ];
    for (args, env, code) in cases {
        let output = as_nobody(&bin, args, env);
        assert_eq!(
            output.status.code(),
            Some(code),
            "{args:?} {env:?}: {output:?}"
        );
        assert!(
            !mark.exists(),
            "{args:?} {env:?}: the user's code ran with CAP_SYS_PTRACE"
        );
        let (stdout, stderr) = texts(&output);
        assert!(
            (stdout + &stderr).contains("uid 65534"),
            "{args:?}: the refusal names the owner or the user: {output:?}"
        );
    }
    fx.assert_no_calls("a capable copy refusing a user's library");
}
