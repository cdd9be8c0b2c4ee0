//! Who may aim cudackpt (docs/guide/safety.md, "Running as root: the trust model"): each test plays a less
//! privileged user who tries to steer a root (or capable) cudackpt through
//! what that user controls (a flag a sudo rule lets through, an
//! environment variable, a directory, a file, a process's name) and shows
//! the harm does not happen, and that a refusal comes before any driver
//! call or signal.

use std::fs;
use std::path::{Path, PathBuf};

use crate::support::{
    prerequisite, texts, wait_until, Fixture, RealCgroup, Target, MARKING_LIBRARY, NOBODY,
};

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

/// [`prerequisite`] for a test that must run as root (as CI does): to
/// give files to another user, run as them, or make a namespace.
fn as_root(what: &str) -> bool {
    prerequisite(
        &format!("{what} (needs root)"),
        crate::support::running_as_root(),
    )
}

/// Arguments, environment and the exit status expected.
type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], i32);

/// Gives `bin` the file capability the README offers
/// (`cap_sys_ptrace+ep`); false (a missing prerequisite, said) where
/// setcap is missing or the filesystem refuses it.
fn give_ptrace(bin: &Path) -> bool {
    let Some(setcap) = setcap() else {
        return prerequisite("find setcap (Debian's libcap2-bin)", false);
    };
    let status = std::process::Command::new(&setcap)
        .args(["cap_sys_ptrace+ep"])
        .arg(bin)
        .status()
        .expect("run setcap");
    prerequisite("set a file capability here", status.success())
}

pub(crate) fn setcap() -> Option<PathBuf> {
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
    if !as_root("give files to another user and run as them") {
        return;
    }
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let bin = fx.world_runnable_cudackpt();
    let plain_bin = bin.with_file_name("cudackpt-plain");
    fs::copy(&bin, &plain_bin).expect("a copy without capabilities");
    if !give_ptrace(&bin) {
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

/// A CUDA program that names itself by its first argument: `bad` gives it
/// a name that is not UTF-8, `ctl` one that would retitle a terminal,
/// return the cursor and erase the row, `nl` one with a newline and a
/// backslash (which /proc/PID/status shows escaped).
const NAMED_PROGRAM: &str = r#"#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>
int main(int argc, char **argv) {
    const char *name = argc > 1 && strcmp(argv[1], "ctl") == 0
        ? "\x1b]0;pwn\x07\r\x1b[2K"
        : argc > 1 && strcmp(argv[1], "nl") == 0 ? "nl\n\\x" : "bad\xff\xfe";
    prctl(PR_SET_NAME, name);
    for (;;) pause();
}
"#;

const BAD_NAME: &str = "bad\u{fffd}\u{fffd}";
const CONTROL_NAME: &str = "\x1b]0;pwn\x07\r\x1b[2K";
const NEWLINE_NAME: &str = "nl\n\\x";

/// Raw control characters a terminal would act on.
fn drives_a_terminal(text: &str) -> bool {
    text.chars().any(|c| c.is_control() && c != '\n')
}

fn named_program(fx: &Fixture) -> PathBuf {
    fx.compile_program("named", NAMED_PROGRAM)
}

/// A name is its process's to choose, and `prctl(PR_SET_NAME, "bad\xff\xfe")`
/// once made /proc/PID/status unreadable as text: `state` failed with the
/// hint "check that /proc is mounted", `suspend --all --yes` failed the
/// process and left the rest of the group not attempted, and a `--tree`
/// suspend said "no CUDA process found" while it kept its GPU. Every CUDA
/// process is now found and acted on whatever its name, and no name
/// reaches a terminal raw.
#[test]
fn a_process_is_found_named_and_acted_on_whatever_its_name() {
    use crate::support::Member;
    use crate::wire::{ProcessCommandDoc, State};
    let fx = Fixture::new();
    let program = named_program(&fx);
    let tree = fx.tree(
        &format!(
            r#"LD_PRELOAD=$CUDA {0} bad & echo "bad $!" >> "$PIDS"
LD_PRELOAD=$CUDA {0} ctl & echo "ctl $!" >> "$PIDS"
LD_PRELOAD=$CUDA {0} nl & echo "nl $!" >> "$PIDS"
wait"#,
            program.display()
        ),
        &[
            ("bad", Member::Cuda),
            ("ctl", Member::Cuda),
            ("nl", Member::Cuda),
        ],
    );
    let (bad, ctl, nl) = (tree.pid("bad"), tree.pid("ctl"), tree.pid("nl"));
    wait_until("both to name themselves", || {
        fs::read(format!("/proc/{ctl}/comm")).is_ok_and(|c| c.starts_with(b"\x1b"))
            && fs::read(format!("/proc/{bad}/comm")).is_ok_and(|c| c.starts_with(b"bad\xff"))
            && fs::read(format!("/proc/{nl}/comm")).is_ok_and(|c| c.starts_with(b"nl\n"))
    });
    let (bad_arg, ctl_arg, root) = (bad.to_string(), ctl.to_string(), tree.root().to_string());

    // state and ps, JSON: the names as the process set them (lossily).
    let doc: ProcessCommandDoc = fx.json(&["state", &bad_arg, &ctl_arg], 0);
    assert_eq!(doc.process(bad).name.as_deref(), Some(BAD_NAME), "{doc:?}");
    assert_eq!(
        doc.process(ctl).name.as_deref(),
        Some(CONTROL_NAME),
        "{doc:?}"
    );
    // Not the kernel's escaped `nl\\n\\\\x` of /proc/PID/status.
    let doc: ProcessCommandDoc = fx.json(&["state", &nl.to_string()], 0);
    assert_eq!(
        doc.process(nl).name.as_deref(),
        Some(NEWLINE_NAME),
        "{doc:?}"
    );
    let doc: ProcessCommandDoc = fx.json(&["ps", "--tree", &root], 0);
    assert_eq!(
        doc.process(nl).name.as_deref(),
        Some(NEWLINE_NAME),
        "{doc:?}"
    );
    let mut pids = doc.pids();
    pids.sort_unstable();
    assert_eq!(pids, {
        let mut all = vec![bad, ctl, nl];
        all.sort_unstable();
        all
    });

    // Human output: found, and every control character escaped.
    for args in [
        vec!["state", &bad_arg, &ctl_arg],
        vec!["ps", "--tree", &root],
        vec!["-v", "suspend", "--tree", &root],
        vec!["resume", "--tree", &root],
        // A refusal names the process on stderr.
        vec!["unlock", &ctl_arg],
        vec!["restore", &ctl_arg],
    ] {
        let output = fx.std_command(&args).output().expect("run cudackpt");
        let (stdout, stderr) = texts(&output);
        assert!(
            !drives_a_terminal(&stdout) && !drives_a_terminal(&stderr),
            "{args:?}: raw control characters reached the terminal: {output:?}"
        );
        if args[0] == "state" {
            assert_eq!(output.status.code(), Some(0), "{output:?}");
            assert!(stdout.contains("\\x1b]0;pwn\\x07\\x0d\\x1b[2K"), "{stdout}");
            assert!(stdout.contains(BAD_NAME), "{stdout}");
        }
        if args[0] == "restore" {
            assert_eq!(output.status.code(), Some(4), "{output:?}");
            assert!(
                stderr.contains(&format!("PID {ctl} (\\x1b]0;pwn")),
                "{stderr}"
            );
        }
    }
    // The suspend and resume above went through --tree, and did act.
    let doc: ProcessCommandDoc = fx.json(&["suspend", "--tree", &root], 0);
    for pid in [bad, ctl, nl] {
        assert_eq!(doc.process(pid).state, State::Checkpointed, "{doc:?}");
    }
    let doc: ProcessCommandDoc = fx.json(&["resume", "--tree", &root], 0);
    for pid in [bad, ctl, nl] {
        assert_eq!(doc.process(pid).state, State::Running, "{doc:?}");
    }
}

/// `suspend --all --yes` of a host where one CUDA process has a name that
/// is not text: every process is suspended and resumed. Run in a PID
/// namespace of its own (`unshare --pid --mount-proc`), so that "the whole
/// host" is this test's processes alone.
#[test]
fn the_whole_host_is_suspended_whatever_its_processes_are_named() {
    if !as_root("make a PID namespace") {
        return;
    }
    let fx = Fixture::new();
    let program = named_program(&fx);
    let out = fx.dir().join("all");
    fs::create_dir(&out).expect("out dir");
    let script = format!(
        r#"set -e
LD_PRELOAD="$CUDA" {program} bad & LD_PRELOAD="$CUDA" {program} ctl & LD_PRELOAD="$CUDA" sleep 600 &
for i in $(seq 200); do [ "$(grep -l -s '{fake}' /proc/[0-9]*/maps | wc -l)" -ge 3 ] && break; sleep 0.05; done
"$CUDACKPT" --json suspend --all --yes > {out}/suspend.json || echo $? > {out}/suspend.status
"$CUDACKPT" --json resume --all --yes > {out}/resume.json || echo $? > {out}/resume.status
kill $(jobs -p) 2>/dev/null || true"#,
        program = program.display(),
        fake = crate::support::fake_libcuda().display(),
        out = out.display(),
    );
    let output = in_pid_namespace(&fx, &script);
    if !prerequisite(
        "run unshare --pid --mount-proc here",
        output.status.success() || out.join("suspend.json").exists(),
    ) {
        return;
    }
    for step in ["suspend", "resume"] {
        assert!(
            !out.join(format!("{step}.status")).exists(),
            "{step} failed: {output:?}"
        );
        let text = fs::read(out.join(format!("{step}.json"))).expect("the document");
        let doc: crate::wire::ProcessCommandDoc = crate::support::parse_one_document(&text);
        assert!(doc.ok, "{step}: {doc:?}");
        assert_eq!(
            doc.processes.len(),
            3,
            "{step}: every CUDA process: {doc:?}"
        );
        let names: Vec<_> = doc
            .processes
            .iter()
            .filter_map(|p| p.name.clone())
            .collect();
        assert!(names.iter().any(|n| n == BAD_NAME), "{names:?}");
        assert!(names.iter().any(|n| n == CONTROL_NAME), "{names:?}");
    }
}

/// Under sudo, `--map-file` once checked only the file's owner and its
/// other-read bit: a 0644 file under root's 0700 directory was read for a
/// user who could not open it, and its text came back in the error
/// (`invalid --map entry "SECRET-TOKEN-abc123=hunter2-password"`). The
/// file is now opened with the user's own credentials, so the kernel
/// judges every directory above it; a missing file there reads the same as
/// a present one; and no error shows a file's text.
#[test]
fn a_map_file_is_read_as_the_user_who_asked_and_never_echoed() {
    if !as_root("act for another user") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let vault = fx.dir().join("vault");
    fs::create_dir(&vault).expect("vault");
    fs::set_permissions(&vault, fs::Permissions::from_mode(0o700)).expect("chmod");
    let secret = vault.join("map.json");
    fs::write(&secret, r#"["SECRET-TOKEN-abc123=hunter2-password"]"#).expect("secret");
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o644)).expect("chmod");
    let missing = vault.join("missing.json");
    // The fixture's own directory must be open to nobody, as a home is.
    fs::set_permissions(fx.dir(), fs::Permissions::from_mode(0o755)).expect("chmod");
    let run = |file: &Path, sudo_uid: Option<&str>| {
        let mut command = fx.std_command(&[
            "restore",
            "--map-file",
            file.to_str().expect("utf-8"),
            &target.arg(),
        ]);
        if let Some(uid) = sudo_uid {
            command.env("SUDO_UID", uid).env("SUDO_GID", uid);
        }
        let output = command.output().expect("run cudackpt");
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        texts(&output).1
    };
    // Root itself reads it, and names the bad entry by position.
    let err = run(&secret, None);
    assert!(err.contains("entry 1 is not OLD=NEW"), "{err}");
    assert!(!err.contains("SECRET") && !err.contains("hunter2"), "{err}");
    // For nobody, through sudo: the directory stops them, as it would
    // stop them without sudo; present or not, the same words.
    let present = run(&secret, Some("65534"));
    assert!(
        present.contains("uid 65534") && present.contains("may not read it"),
        "{present}"
    );
    assert!(
        !present.contains("SECRET") && !present.contains("hunter2"),
        "{present}"
    );
    let absent = run(&missing, Some("65534"));
    assert_eq!(
        present.replace("map.json", "FILE"),
        absent.replace("missing.json", "FILE"),
        "whether the file exists is not told"
    );
    fx.assert_no_calls("a map file the user may not read");
    // Once nobody may pass through, the same file is read for them.
    fs::set_permissions(&vault, fs::Permissions::from_mode(0o755)).expect("chmod");
    let err = run(&secret, Some("65534"));
    assert!(err.contains("entry 1 is not OLD=NEW"), "{err}");
    assert!(!err.contains("SECRET") && !err.contains("hunter2"), "{err}");
}

/// Item 3: a directory that only looks like a cgroup. A user makes a
/// directory holding a file named `cgroup.procs` and writes a root
/// daemon's PID in it, then asks root to suspend "their cgroup". Before,
/// root suspended the daemon. Now the directory is refused because its
/// filesystem is not a cgroup one, as is `CUDACKPT_CGROUP_ROOT` naming it,
/// before any driver call; a link to a real cgroup is not followed; and a
/// real cgroup still works (`discovery`'s cgroup tests use real ones).
#[test]
fn a_directory_that_only_looks_like_a_cgroup_aims_nothing() {
    if !as_root("plant a directory as another user") {
        return;
    }
    let fx = Fixture::new();
    let daemon = fx.cuda_target();
    let planted = fx.dir().join("planted");
    fs::create_dir(&planted).expect("the user's directory");
    fs::write(planted.join("cgroup.procs"), format!("{}\n", daemon.pid)).expect("planted");
    std::os::unix::fs::chown(&planted, Some(NOBODY), Some(NOBODY)).expect("theirs");
    let path = planted.to_str().expect("utf-8");

    let refused = |args: &[&str], env: &[(&str, &str)], says: &str| {
        let mut command = fx.std_command(args);
        command.envs(env.iter().copied());
        let output = command.output().expect("run cudackpt");
        let (stdout, stderr) = texts(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stdout}{stderr}");
        // doctor says it in its table, the process commands on stderr.
        assert!(
            stderr.contains(says) || (args[0] == "doctor" && stdout.contains(says)),
            "{args:?}: {stdout}{stderr}"
        );
        fx.assert_no_calls(&format!("{args:?} {env:?}"));
        assert_eq!(fx.fake_state(daemon.pid), "running", "{args:?}");
    };
    let not_a_cgroup = "not on a cgroup filesystem";
    for command in ["suspend", "lock", "ps", "state"] {
        refused(&[command, "--cgroup", path], &[], not_a_cgroup);
    }
    refused(
        &["suspend", "--cgroup", path, "--all", "--yes"],
        &[],
        not_a_cgroup,
    );
    refused(&["doctor", "--cgroup", path], &[], not_a_cgroup);

    // The same directory named as the cgroup v2 mount, and a cgroup named
    // relative to it; a root that is no mount is refused even for a PID.
    let root = [("CUDACKPT_CGROUP_ROOT", path)];
    let not_a_mount = "not a cgroup v2 mount";
    refused(&["suspend", "--cgroup", "/"], &root, not_a_mount);
    refused(&["suspend", &daemon.arg()], &root, not_a_mount);
    refused(&["doctor", "--cgroup", "/"], &root, not_a_mount);

    // A link the user made, even to a real cgroup, is not followed.
    if let Some(real) = RealCgroup::new() {
        let link = fx.dir().join("link");
        std::os::unix::fs::symlink(&real.dir, &link).expect("link");
        refused(
            &["suspend", "--cgroup", link.to_str().expect("utf-8")],
            &[],
            "symbolic link",
        );
    }
}

/// The root of a cgroup hierarchy holds every process of the host: v1's
/// as well as v2's, named as a directory or as `/`, needs `--yes` to
/// change anything, like `--all`. Before, only the v2 mount's root was
/// caught.
#[test]
fn the_root_of_any_cgroup_hierarchy_is_the_whole_host() {
    let fx = Fixture::new();
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let roots: Vec<String> = cudackpt::internal::mounts(&mountinfo)
        .filter(|m| m.root == "/" && m.fstype.starts_with("cgroup"))
        .map(|m| m.point.to_string())
        .collect();
    if !prerequisite("find a cgroup hierarchy mounted here", !roots.is_empty()) {
        return;
    }
    let mut named: Vec<&str> = roots.iter().map(String::as_str).collect();
    if mountinfo.contains(" - cgroup2 ") {
        named.push("/");
    }
    for root in named {
        let output = fx
            .std_command(&["suspend", "--cgroup", root])
            .output()
            .expect("run cudackpt");
        let (_, stderr) = texts(&output);
        assert_eq!(output.status.code(), Some(2), "{root}: {stderr}");
        assert!(
            stderr.contains("the whole host") && stderr.contains("--yes"),
            "{root}: {stderr}"
        );
        fx.assert_no_calls(root);
    }
}

/// Runs `script` with sh as PID 1 of a PID namespace of its own (its own
/// /proc), with `$CUDA` (the fake driver) and `$CUDACKPT` (the binary) set
/// and the fixture's environment.
fn in_pid_namespace(fx: &Fixture, script: &str) -> std::process::Output {
    let mut command = std::process::Command::new("unshare");
    command
        .args(["--pid", "--fork", "--mount-proc", "sh", "-c", script])
        .env("CUDA", crate::support::fake_libcuda())
        .env("CUDACKPT", crate::support::cudackpt_bin());
    fx.configure_for(&mut command);
    command.output().expect("run unshare")
}

/// Item 8: the pidfd is opened before the /proc checks. Inside a PID
/// namespace of its own, the test pauses cudackpt just after its checks
/// of a CUDA process (a debug build's pause point), kills that process,
/// and makes the next process take its PID (`ns_last_pid`). When the pidfd
/// was opened after the checks, it held the newcomer, which was then
/// locked and checkpointed in the first one's place. Now the pidfd holds
/// the process the checks read, which has exited: the PID is refused as
/// gone, and nothing is asked of the newcomer.
#[test]
fn a_pid_reused_during_the_checks_is_never_acted_on() {
    let fx = Fixture::new();
    let Some((pid, doc)) = with_a_pid_reused(
        &fx,
        r#"LD_PRELOAD="$CUDA" sleep 600 & A=$!"#,
        r#"CUDACKPT_DEBUG_PAUSE_AFTER_CHECKS="$OUT/paused" "$CUDACKPT" --json suspend $A"#,
    ) else {
        return;
    };
    assert!(!doc.ok, "refused: {doc:?}");
    assert_eq!(
        doc.process(pid).kind(),
        crate::wire::Kind::NoSuchProcess,
        "{doc:?}"
    );
    let changes = fx.state_changes();
    assert!(
        changes.is_empty(),
        "nothing asked of the newcomer: {changes:?}"
    );
}

/// The walk of a tree reads its members' PIDs from their parents'
/// `children` files, before any pidfd is held: a member that exits there
/// and whose PID the next process of the host takes (`ns_last_pid`, in a
/// PID namespace of the test's own) put that outsider in the tree, and it
/// was checkpointed. Each member's parent is now read once its pidfd is
/// held and must be of the tree: the outsider is left alone, and said.
#[test]
fn a_pid_reused_during_a_tree_walk_is_never_acted_on() {
    let fx = Fixture::new();
    let Some((pid, doc)) = with_a_pid_reused(
        &fx,
        r#"sh -c 'LD_PRELOAD="$CUDA" sleep 600 & echo $! > "$OUT/member"; wait; exec sleep 600' & R=$!
for i in $(seq 200); do [ -s "$OUT/member" ] && break; sleep 0.05; done
A=$(cat "$OUT/member")"#,
        r#"CUDACKPT_DEBUG_PAUSE_AFTER_WALK="$OUT/paused" "$CUDACKPT" --json suspend --tree $R"#,
    ) else {
        return;
    };
    let changes = fx.state_changes();
    assert!(
        changes.is_empty(),
        "nothing asked of the outsider: {changes:?} {doc:?}"
    );
    assert!(
        doc.warnings
            .iter()
            .any(|w| w.contains(&format!("PID {pid} was below the tree's root"))),
        "{doc:?}"
    );
}

/// In a PID namespace of the test's own: `start` starts a fake CUDA
/// process whose PID it leaves in `$A`; `command` (a cudackpt that pauses
/// at a debug build's pause point, creating `$OUT/paused`) runs; there
/// `$A` is killed and the next process (a fake CUDA `sleep`) takes its PID
/// (`ns_last_pid`); then the command goes on. The PID taken and the
/// command's document, or `None` (said) where the PID could not be reused.
fn with_a_pid_reused(
    fx: &Fixture,
    start: &str,
    command: &str,
) -> Option<(i32, crate::wire::ProcessCommandDoc)> {
    if !as_root("make a PID namespace and set its ns_last_pid") {
        return None;
    }
    let out = fx.dir().join("reuse");
    fs::create_dir(&out).expect("out dir");
    let script = format!(
        r#"set -e
export OUT={out}
cuda() {{ for i in $(seq 200); do grep -q -s '{fake}' /proc/$1/maps && return 0; sleep 0.05; done; return 1; }}
{start}
cuda $A
(set +e; {command} > $OUT/suspend.json; echo $? > $OUT/status) &
for i in $(seq 400); do [ -e $OUT/paused ] && break; sleep 0.05; done
kill -9 $A; wait $A 2>/dev/null || true
for i in $(seq 200); do [ -d /proc/$A ] || break; sleep 0.05; done
echo $((A - 1)) > /proc/sys/kernel/ns_last_pid
LD_PRELOAD="$CUDA" sleep 600 & B=$!
echo "$A $B" > $OUT/pids
cuda $B
rm $OUT/paused
for i in $(seq 1200); do [ -e $OUT/status ] && break; sleep 0.05; done
kill $B ${{R:-}} 2>/dev/null || true"#,
        fake = crate::support::fake_libcuda().display(),
        out = out.display(),
    );
    let output = in_pid_namespace(fx, &script);
    let pids = fs::read_to_string(out.join("pids")).unwrap_or_default();
    let pids: Vec<&str> = pids.split_whitespace().collect();
    if !prerequisite(
        "reuse a PID in a PID namespace of its own (unshare, ns_last_pid)",
        output.status.success() && pids.len() == 2 && pids[0] == pids[1],
    ) {
        return None;
    }
    let status = fs::read_to_string(out.join("status")).expect("cudackpt's status");
    let doc: crate::wire::ProcessCommandDoc =
        crate::support::parse_one_document(&fs::read(out.join("suspend.json")).expect("doc"));
    assert_eq!(status.trim(), doc.exit_code.to_string(), "{doc:?}");
    Some((pids[0].parse().expect("a PID"), doc))
}

/// Root and a capable copy (or the process's owner) keep their lock files
/// in run directories of their own, so a capable copy once ran `unlock`
/// in the middle of root's checkpoint with no "busy". Every cudackpt now
/// also holds the process's name in the abstract socket namespace, which
/// every user shares: the second is refused (exit 10, in use) before any
/// driver call, whoever runs it.
#[test]
fn root_and_a_capable_copy_never_interleave_on_one_process() {
    use crate::support::SpawnGuarded;
    use crate::wire::{Kind, ProcessCommandDoc};
    use std::os::unix::fs::PermissionsExt;
    if !as_root("run a capable copy as another user") {
        return;
    }
    let fx = Fixture::new();
    let bin = fx.world_runnable_cudackpt();
    if !give_ptrace(&bin) {
        return;
    }
    // A state directory both may write, and the copy's own run directory.
    let state = fx.shared_state();
    let theirs = fx.dir().join("nobody-run");
    fs::create_dir(&theirs).expect("dir");
    fs::set_permissions(&theirs, fs::Permissions::from_mode(0o700)).expect("chmod");
    std::os::unix::fs::chown(&theirs, Some(NOBODY), Some(NOBODY)).expect("chown");
    let fake = fx.world_fake();
    let target = fx.world_cuda_target(&state, None);
    let pid = target.id().to_string();
    // Root's suspend, slow in its checkpoint.
    let mut roots = fx.std_command(&["--json", "suspend", &pid]);
    // The fake knows its processes by the library they map: the same copy.
    roots
        .env("CUDACKPT_LIBCUDA", &fake)
        .env("FAKE_CUDA_STATE_DIR", &state)
        .env("FAKE_CUDA_INJECT", "checkpoint=delay:3000");
    roots
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let roots = roots.spawn_guarded();
    let record = state.join(format!("{pid}.json"));
    crate::support::wait_until("root's suspend to lock the process", || {
        fs::read_to_string(&record).is_ok_and(|t| t.contains("\"locked\""))
    });
    let output = fx.run_as_nobody(
        &bin,
        &["--json", "unlock", &pid],
        &state,
        &[("XDG_RUNTIME_DIR", theirs.as_os_str())],
    );
    assert_eq!(output.status.code(), Some(10), "{output:?}");
    let doc: ProcessCommandDoc = crate::support::parse_one_document(&output.stdout);
    let error = doc.refusal(target.id() as i32);
    assert_eq!(error.kind, Kind::InUse, "{error:?}");
    let done = roots.wait_with_output().expect("root's suspend");
    assert_eq!(done.status.code(), Some(0), "{done:?}");
}

/// Anyone may bind any abstract name: a user who squats the lock name of
/// a process they could never act on (root's) is ignored, and root's
/// command goes on.
#[test]
fn a_squatted_lock_name_stops_nobody() {
    use crate::support::SpawnGuarded;
    use std::os::unix::process::CommandExt;
    if !as_root("run a process as another user") {
        return;
    }
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let stat = fs::read_to_string(format!("/proc/{}/stat", target.pid)).expect("stat");
    let starttime = stat[stat.rfind(')').expect("comm") + 2..]
        .split_whitespace()
        .nth(19)
        .expect("field 22")
        .to_string();
    let name = format!("cudackpt/process/{}@{starttime}", target.pid);
    let squat = format!(
        "import socket, time\ns = socket.socket(socket.AF_UNIX)\ns.bind('\\0{name}')\ns.listen(4)\nprint('bound', flush=True)\ntime.sleep(600)"
    );
    let mut squatter = std::process::Command::new("python3");
    squatter
        .args(["-c", &squat])
        .stdout(std::process::Stdio::piped())
        .uid(NOBODY)
        .gid(NOBODY);
    let mut squatter = squatter.spawn_guarded();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(squatter.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("the squatter says");
    assert_eq!(line.trim(), "bound");
    for step in ["lock", "unlock"] {
        let doc: crate::wire::ProcessCommandDoc = fx.json(&[step, &target.arg()], 0);
        assert!(doc.ok, "{step}: {doc:?}");
    }
}

/// A cgroup path anyone may type, with a newline and escape sequences in
/// it, is printed escaped in the error, never raw.
#[test]
fn a_cgroup_path_is_printed_escaped() {
    let fx = Fixture::new();
    let output = fx
        .std_command(&["ps", "--cgroup", "\n\x1b]0;OWNED\x07"])
        .output()
        .expect("run cudackpt");
    let (_, stderr) = crate::support::texts(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    let first = stderr.lines().next().unwrap_or_default();
    assert!(first.contains("\\x0a\\x1b]0;OWNED\\x07"), "{stderr:?}");
    assert!(
        !stderr.contains('\x1b') && !stderr.contains('\x07'),
        "{stderr:?}"
    );
}
