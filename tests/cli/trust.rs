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
