//! NVIDIA-compatible mode (docs/guide/criu.md, "NVIDIA-compatible mode and CRIU"), driven the way CRIU's CUDA plugin
//! (criu/plugins/cuda/cuda_plugin.c) drives `cuda-checkpoint`: found by
//! name on PATH (here a symlink to cudackpt), stdout and stderr dup'ed onto
//! one pipe, the answer read from the first bytes of that pipe, the exit
//! status checked. Also: the first-argument trigger under the name
//! `cudackpt`, the same driver calls as the modern grammar, `install-compat`,
//! and the rule that this mode never prints anything before its answer.

use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::support::{
    cudackpt_bin, fake_uuid, parse_one_document, shorts, texts, Fixture, SpawnGuarded,
};
use crate::wire::{Document, UsageDoc};

/// The name CRIU's plugin runs (`CUDA_CHECKPOINT`).
const NVIDIA_NAME: &str = "cuda-checkpoint";
/// What CRIU's plugin reads of an answer: `CUDA_CKPT_BUF_SIZE` less the NUL.
const CRIU_BUF: usize = 127;
/// What it reads of `-h` (`msg_buf[2048]` less the NUL).
const CRIU_HELP_BUF: usize = 2047;

/// What a run wrote on its one merged pipe, and how it ended.
struct Merged {
    code: i32,
    bytes: Vec<u8>,
    elapsed: Duration,
}

impl Merged {
    /// Everything written, stdout and stderr interleaved as written.
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    /// What CRIU's plugin keeps: the first `size` bytes (it drains the rest).
    fn criu_buffer(&self, size: usize) -> String {
        String::from_utf8_lossy(&self.bytes[..self.bytes.len().min(size)]).into_owned()
    }

    /// Asserts exit 0 and exactly `expected` on the pipe.
    fn expect_ok(&self, expected: &str, what: &str) {
        assert_eq!(
            (self.code, self.text().as_str()),
            (0, expected),
            "{what}: expected exit 0 and exactly {expected:?} on the merged pipe"
        );
    }

    /// Asserts exit exactly 1 with a message naming `words` in the pipe,
    /// led by the tool's name (nothing printed before it).
    fn expect_failure(&self, words: &str, what: &str) {
        let text = self.text();
        assert_eq!(self.code, 1, "{what}: expected exit 1, got:\n{text}");
        assert!(
            text.starts_with("cuda-checkpoint: "),
            "{what}: the message comes first, under NVIDIA's name:\n{text}"
        );
        assert!(
            text.contains(words),
            "{what}: expected {words:?} in the merged output:\n{text}"
        );
    }
}

/// Runs `command` as CRIU's `launch_cuda_checkpoint` does: stdout and stderr
/// both on the write end of one pipe, read to EOF, then the exit status.
///
/// `std::io::pipe` is newer than this crate's MSRV (1.85), so the dup2 is
/// done by a shell that then execs the program in its place: `exec 2>&1`
/// puts stderr on the stdout pipe, and `exec "$0" "$@"` looks the program up
/// in PATH and execs it as execvp does, with argv[0] as given. The command's
/// environment (set and removed variables) is carried over; the exit status
/// is the program's own.
fn run_merged(command: StdCommand) -> Merged {
    let mut shell = StdCommand::new("sh");
    shell
        .arg("-c")
        .arg(r#"exec 2>&1; exec "$0" "$@""#)
        .arg(command.get_program())
        .args(command.get_args())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => shell.env(key, value),
            None => shell.env_remove(key),
        };
    }
    let started = Instant::now();
    let mut child = shell.spawn_guarded();
    let mut bytes = Vec::new();
    child
        .stdout
        .take()
        .expect("the pipe")
        .read_to_end(&mut bytes)
        .expect("read the pipe");
    let status = child.wait().expect("wait");
    Merged {
        code: status
            .code()
            .unwrap_or_else(|| panic!("killed by a signal: {status:?}")),
        bytes,
        elapsed: started.elapsed(),
    }
}

/// CRIU's `get_cuda_restore_tid` on a buffer: `strtol`, then only
/// whitespace, and a positive int.
fn criu_restore_tid(buffer: &str) -> Option<i32> {
    let c_space = |c: char| matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r');
    let text = buffer.trim_start_matches(c_space);
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    let sign_len = text.len() - unsigned.len();
    let digits = unsigned
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(unsigned.len());
    if digits == 0 {
        return None;
    }
    let (number, tail) = text.split_at(sign_len + digits);
    let value: i64 = number.parse().ok()?;
    (tail.chars().all(c_space) && value > 0)
        .then(|| i32::try_from(value).ok())
        .flatten()
}

/// CRIU's `get_task_state_enum`: a prefix match on the buffer.
fn criu_state(buffer: &str) -> Option<&'static str> {
    ["running", "locked", "checkpointed"]
        .into_iter()
        .find(|state| buffer.starts_with(state))
}

/// A directory holding `cuda-checkpoint` -> the cudackpt binary, put first
/// on PATH, so that `cuda-checkpoint` is found as execvp finds it.
struct Nvidia<'a> {
    fx: &'a Fixture,
    path: OsString,
}

impl<'a> Nvidia<'a> {
    fn new(fx: &'a Fixture) -> Nvidia<'a> {
        let bin = fx.dir().join("nvidia-bin");
        fs::create_dir(&bin).expect("bin dir");
        std::os::unix::fs::symlink(cudackpt_bin(), bin.join(NVIDIA_NAME))
            .expect("symlink cuda-checkpoint");
        let inherited = std::env::var_os("PATH").unwrap_or_default();
        let path =
            std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(&inherited)))
                .expect("PATH");
        Nvidia { fx, path }
    }

    /// `cuda-checkpoint ARGS` by name, to be looked up in this PATH as
    /// execvp does (see [`run_merged`]), wired to the fake.
    fn command(&self, args: &[&str]) -> StdCommand {
        let mut command = self.fx.command_for(Path::new(NVIDIA_NAME), args);
        command.env("PATH", &self.path);
        command
    }

    fn run(&self, args: &[&str]) -> Merged {
        run_merged(self.command(args))
    }

    fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Merged {
        let mut command = self.command(args);
        command.envs(env.iter().copied());
        run_merged(command)
    }
}

/// `GPU-A=GPU-B,GPU-B=GPU-A` over the fake's two devices.
fn swap_map() -> String {
    let (a, b) = (fake_uuid(0), fake_uuid(1));
    format!("GPU-{a}=GPU-{b},GPU-{b}=GPU-{a}")
}

const TWO_GPUS: &str = "GPU A:1000,GPU B:1000";

/// The buffer parsers above read as CRIU's plugin does, so that a pass
/// through them means CRIU would accept the answer.
#[test]
fn the_criu_buffer_parsers_follow_the_plugin() {
    assert_eq!(criu_restore_tid("4242\n"), Some(4242));
    assert_eq!(criu_restore_tid("  4242 \n\t"), Some(4242));
    for refused in [
        "",
        "\n",
        "0\n",
        "-5\n",
        "4242 x\n",
        "42a\n",
        "2147483648\n",
        "cuda-checkpoint: no process has PID 4242\n",
    ] {
        assert_eq!(criu_restore_tid(refused), None, "{refused:?}");
    }
    assert_eq!(criu_state("locked\n"), Some("locked"));
    assert_eq!(criu_state("checkpointed"), Some("checkpointed"));
    assert_eq!(criu_state("failed\n"), None);
    assert_eq!(criu_state(" running\n"), None, "nothing may come before it");
}

// 1. Through a `cuda-checkpoint` symlink on PATH.

#[test]
fn help_through_the_symlink_mentions_action_and_device_map() {
    let fx = Fixture::new();
    let nvidia = Nvidia::new(&fx);
    for flag in ["-h", "--help"] {
        let out = nvidia.run(&[flag]);
        assert_eq!(out.code, 0, "{flag}: {}", out.text());
        // CRIU's cuda_checkpoint_supports_flag looks within 2047 bytes.
        let seen = out.criu_buffer(CRIU_HELP_BUF);
        assert!(
            seen.contains("--action") && seen.contains("--device-map"),
            "{flag}: {seen}"
        );
        // cudackpt answered, in the mode its name selects (`-h` alone is no
        // trigger: under the name cudackpt it is the modern help).
        assert!(
            seen.contains("cudackpt, NVIDIA-compatible mode"),
            "{flag}: {seen}"
        );
    }
    fx.assert_no_calls("help");
}

#[test]
fn get_state_prints_exactly_the_state_word() {
    let fx = Fixture::new();
    let nvidia = Nvidia::new(&fx);
    for state in ["running", "locked", "checkpointed"] {
        let target = fx.cuda_target();
        fx.put_in(&target, state);
        let out = nvidia.run(&["--get-state", "--pid", &target.arg()]);
        out.expect_ok(&format!("{state}\n"), state);
        assert_eq!(criu_state(&out.criu_buffer(CRIU_BUF)), Some(state));
        // One driver call, nothing else.
        assert_eq!(shorts(&fx.take_calls()), ["get_state 0"], "{state}");
    }
    // `failed` too (CRIU does not know it, and treats it as unknown).
    let target = fx.cuda_target();
    nvidia
        .run_env(
            &["--action", "lock", "--pid", &target.arg()],
            &[("FAKE_CUDA_INJECT", "lock=error:999:failed")],
        )
        .expect_failure("CUDA_ERROR_UNKNOWN 999", "a lock that fails the process");
    fx.take_calls();
    let out = nvidia.run(&["--get-state", "--pid", &target.arg()]);
    out.expect_ok("failed\n", "failed");
    assert_eq!(criu_state(&out.criu_buffer(CRIU_BUF)), None);
}

#[test]
fn get_restore_tid_prints_exactly_the_number() {
    let fx = Fixture::new();
    let nvidia = Nvidia::new(&fx);
    let threaded = fx.threaded_cuda_target();
    let lowest_other = threaded.threads()[1];
    let out = nvidia.run(&["--get-restore-tid", "--pid", &threaded.arg()]);
    out.expect_ok(&format!("{lowest_other}\n"), "threaded");
    assert_eq!(
        criu_restore_tid(&out.criu_buffer(CRIU_BUF)),
        Some(lowest_other)
    );
    assert_eq!(shorts(&fx.take_calls()), ["restore_tid 0"]);

    // One thread: the restore thread is the process itself.
    let single = fx.cuda_target();
    let out = nvidia.run(&["--get-restore-tid", "--pid", &single.arg()]);
    out.expect_ok(&format!("{}\n", single.pid), "single-threaded");
    assert_eq!(
        criu_restore_tid(&out.criu_buffer(CRIU_BUF)),
        Some(single.pid)
    );
}

/// CRIU asks for the state of the restore thread id, not of the process:
/// any thread id answers for its whole process, in every state.
#[test]
fn get_state_of_a_thread_id_answers_for_its_process() {
    let fx = Fixture::new();
    let nvidia = Nvidia::new(&fx);
    let target = fx.threaded_cuda_target();
    let restore_tid = criu_restore_tid(
        &nvidia
            .run(&["--get-restore-tid", "--pid", &target.arg()])
            .criu_buffer(CRIU_BUF),
    )
    .expect("a restore tid");
    assert_ne!(restore_tid, target.pid, "a thread id, not the process id");
    fx.take_calls();
    for state in ["running", "locked", "checkpointed"] {
        fx.put_in(&target, state);
        for tid in target.threads() {
            let out = nvidia.run(&["--get-state", "--pid", &tid.to_string()]);
            out.expect_ok(&format!("{state}\n"), &format!("thread {tid}"));
            let calls = fx.take_calls();
            assert_eq!(shorts(&calls), ["get_state 0"], "thread {tid}");
            assert_eq!(
                calls[0].pid, target.pid,
                "the driver is asked about the process"
            );
        }
    }
    // The other queries and the actions act on the process as well.
    let tid = restore_tid.to_string();
    nvidia
        .run(&["--get-restore-tid", "--pid", &tid])
        .expect_ok(&format!("{restore_tid}\n"), "restore tid of a thread");
    nvidia
        .run(&["--toggle", "--pid", &tid])
        .expect_ok("", "toggle a thread");
    let calls = fx.take_calls();
    assert_eq!(
        shorts(&calls),
        ["restore_tid 0", "get_state 0", "restore 0", "unlock 0"]
    );
    assert!(calls.iter().all(|c| c.pid == target.pid), "{calls:?}");
    assert_eq!(fx.fake_state(target.pid), "running");
}

#[test]
fn every_action_with_and_without_a_timeout() {
    let fx = Fixture::new();
    let nvidia = Nvidia::new(&fx);
    let target = fx.cuda_target();
    let pid = target.arg();
    for timeout in [None, Some("1000")] {
        for (action, state) in [
            ("lock", "locked"),
            ("checkpoint", "checkpointed"),
            ("restore", "locked"),
            ("unlock", "running"),
        ] {
            let mut args = vec!["--action", action, "--pid", &pid];
            if let Some(ms) = timeout {
                args.extend(["--timeout", ms]);
            }
            // Actions print nothing at all on success.
            nvidia.run(&args).expect_ok("", &format!("{args:?}"));
            assert_eq!(
                shorts(&fx.take_calls()),
                [format!("{action} 0")],
                "{args:?}"
            );
            assert_eq!(fx.fake_state(target.pid), state, "{args:?}");
        }
    }
}

/// The timeout reaches the driver's lock: with work that needs 3 s to drain,
/// a 100 ms timeout gives up at once, in every spelling of the flag.
#[test]
fn the_lock_timeout_reaches_the_driver_in_every_spelling() {
    let fx = Fixture::new();
    let nvidia = Nvidia::new(&fx);
    let target = fx.cuda_target();
    let pid = target.arg();
    let glued = format!("-p{pid}");
    let eq = format!("--pid={pid}");
    let spellings: [Vec<&str>; 4] = [
        vec!["--action", "lock", "--pid", &pid, "--timeout", "100"],
        vec!["--timeout=100", &eq, "--action=lock"],
        vec!["-t", "100", "-p", &pid, "--action", "lock"],
        vec!["-t100", &glued, "--action=lock"],
    ];
    for args in spellings {
        let out = nvidia.run_env(&args, &[("FAKE_CUDA_INJECT", "lock=busy:3000")]);
        out.expect_failure("did not finish within 100 ms", &format!("{args:?}"));
        assert!(
            out.elapsed < Duration::from_millis(2500),
            "{args:?} took {:?}",
            out.elapsed
        );
        assert_eq!(shorts(&fx.take_calls()), ["lock 600", "get_state 0"]);
        assert_eq!(fx.fake_state(target.pid), "running");
    }
}

#[test]
fn toggle_goes_both_ways() {
    let fx = Fixture::new();
    let nvidia = Nvidia::new(&fx);
    let target = fx.cuda_target();
    let pid = target.arg();
    let forward = [
        vec!["--toggle", "--pid", &pid],
        vec!["--pid", &pid, "--toggle", "--timeout", "5000"],
    ];
    for args in forward {
        nvidia.run(&args).expect_ok("", &format!("{args:?}"));
        assert_eq!(
            shorts(&fx.take_calls()),
            ["get_state 0", "lock 0", "checkpoint 0"]
        );
        assert_eq!(fx.fake_state(target.pid), "checkpointed");
        nvidia.run(&args).expect_ok("", &format!("{args:?}"));
        assert_eq!(
            shorts(&fx.take_calls()),
            ["get_state 0", "restore 0", "unlock 0"]
        );
        assert_eq!(fx.fake_state(target.pid), "running");
    }
}

#[test]
fn restore_with_a_device_map_moves_the_process() {
    let fx = Fixture::with_devices(TWO_GPUS);
    let nvidia = Nvidia::new(&fx);
    let target = fx.cuda_target();
    let pid = target.arg();
    let map = swap_map();
    let (a, b) = (fake_uuid(0), fake_uuid(1));
    let there = format!("{a}>{b},{b}>{a}");
    fx.put_in(&target, "checkpointed");

    nvidia
        .run(&["--action", "restore", "--pid", &pid, "--device-map", &map])
        .expect_ok("", "restore --device-map");
    let calls = fx.take_calls();
    assert_eq!(shorts(&calls), ["restore 0"]);
    assert_eq!(calls[0].map.as_deref(), Some(there.as_str()));
    assert_eq!(fx.fake_record(target.pid), ("locked".to_string(), 1));

    // The other spellings, through toggle from checkpointed: each swap
    // moves the process to the other GPU.
    nvidia
        .run(&["--action", "unlock", "--pid", &pid])
        .expect_ok("", "unlock");
    let glued = format!("-d{map}");
    let eq = format!("--device-map={map}");
    for (i, spelling) in [vec!["-d", &map], vec![&glued], vec![&eq]]
        .into_iter()
        .enumerate()
    {
        nvidia
            .run(&["--toggle", "-p", &pid])
            .expect_ok("", "toggle");
        fx.take_calls();
        let mut args = vec!["--toggle", "-p", &pid];
        args.extend(spelling);
        nvidia.run(&args).expect_ok("", &format!("{args:?}"));
        let calls = fx.take_calls();
        assert_eq!(
            shorts(&calls),
            ["get_state 0", "restore 0", "unlock 0"],
            "{args:?}"
        );
        assert_eq!(calls[1].map.as_deref(), Some(there.as_str()), "{args:?}");
        let device = if i % 2 == 0 { 0 } else { 1 };
        assert_eq!(
            fx.fake_record(target.pid),
            ("running".to_string(), device),
            "{args:?}"
        );
    }
}

#[test]
fn flags_come_in_any_order_and_every_form() {
    let fx = Fixture::new();
    let nvidia = Nvidia::new(&fx);
    let target = fx.cuda_target();
    let pid = target.arg();
    let glued = format!("-p{pid}");
    let eq = format!("--pid={pid}");

    let get_state: [Vec<&str>; 6] = [
        vec!["--get-state", "--pid", &pid],
        vec!["--pid", &pid, "--get-state"],
        vec![&eq, "--get-state"],
        vec!["-p", &pid, "--get-state"],
        vec!["--get-state", &glued],
        vec![&glued, "--get-state"],
    ];
    for args in get_state {
        nvidia
            .run(&args)
            .expect_ok("running\n", &format!("{args:?}"));
    }
    let get_tid: [Vec<&str>; 3] = [
        vec!["--pid", &pid, "--get-restore-tid"],
        vec![&eq, "--get-restore-tid"],
        vec!["--get-restore-tid", &glued],
    ];
    for args in get_tid {
        nvidia
            .run(&args)
            .expect_ok(&format!("{pid}\n"), &format!("{args:?}"));
    }
    assert_eq!(
        shorts(&fx.take_calls()),
        [vec!["get_state 0"; 6], vec!["restore_tid 0"; 3]].concat()
    );

    // Each lock spelling, then an unlock spelled another way.
    let pairs: [(Vec<&str>, Vec<&str>); 5] = [
        (
            vec!["--action", "lock", "--pid", &pid, "--timeout", "5000"],
            vec!["--action", "unlock", "--pid", &pid],
        ),
        (
            vec!["--pid", &pid, "--timeout", "5000", "--action", "lock"],
            vec!["--pid", &pid, "--action", "unlock"],
        ),
        (
            vec!["--action=lock", &eq, "--timeout=5000"],
            vec!["--action=unlock", &eq],
        ),
        (
            vec!["-p", &pid, "-t", "5000", "--action", "lock"],
            vec!["-p", &pid, "--action=unlock"],
        ),
        (
            vec!["-t5000", &glued, "--action=lock"],
            vec![&glued, "--action", "unlock"],
        ),
    ];
    for (lock, unlock) in pairs {
        nvidia.run(&lock).expect_ok("", &format!("{lock:?}"));
        assert_eq!(fx.fake_state(target.pid), "locked", "{lock:?}");
        nvidia.run(&unlock).expect_ok("", &format!("{unlock:?}"));
        assert_eq!(fx.fake_state(target.pid), "running", "{unlock:?}");
        assert_eq!(shorts(&fx.take_calls()), ["lock 0", "unlock 0"]);
    }
}

/// CRIU's dump and restore of one process, call for call: pause_devices,
/// checkpoint_devices, then resume_device as after a dump of a running
/// process (restore, unlock).
#[test]
fn criu_plugin_sequence_through_the_symlink() {
    let fx = Fixture::new();
    let nvidia = Nvidia::new(&fx);
    let target = fx.threaded_cuda_target();
    let pid = target.arg();
    let restore_tid = || {
        let out = nvidia.run(&["--get-restore-tid", "--pid", &pid]);
        assert_eq!(out.code, 0, "{}", out.text());
        criu_restore_tid(&out.criu_buffer(CRIU_BUF)).expect("CRIU parses the tid")
    };
    let action = |name: &str, timeout: u32| {
        let mut args = vec![
            "--action".to_string(),
            name.to_string(),
            "--pid".into(),
            pid.clone(),
        ];
        if timeout > 0 {
            args.extend(["--timeout".to_string(), timeout.to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        nvidia.run(&args).expect_ok("", name);
    };

    let help = nvidia.run(&["-h"]);
    assert!(help.code == 0 && help.criu_buffer(CRIU_HELP_BUF).contains("--action"));
    // pause_devices
    let tid = restore_tid();
    let state = nvidia.run(&["--get-state", "--pid", &tid.to_string()]);
    assert_eq!(state.code, 0);
    assert_eq!(criu_state(&state.criu_buffer(CRIU_BUF)), Some("running"));
    action("lock", 10_000);
    // checkpoint_devices
    restore_tid();
    action("checkpoint", 0);
    assert_eq!(fx.fake_state(target.pid), "checkpointed");
    // resume_device(checkpointed, running)
    restore_tid();
    action("restore", 0);
    action("unlock", 0);

    let calls = fx.take_calls();
    assert_eq!(
        shorts(&calls),
        [
            "restore_tid 0",
            "get_state 0",
            "lock 0",
            "restore_tid 0",
            "checkpoint 0",
            "restore_tid 0",
            "restore 0",
            "unlock 0",
        ]
    );
    assert!(calls.iter().all(|c| c.pid == target.pid), "{calls:?}");
    assert_eq!(fx.fake_state(target.pid), "running");
}

// 2. Every failure exits exactly 1 with its message on the merged pipe.

#[test]
fn a_wrong_state_exits_1_and_says_why() {
    let fx = Fixture::new();
    let nvidia = Nvidia::new(&fx);
    let cases = [
        ("running", "unlock", "could not unlock PID", "unlock 401"),
        (
            "running",
            "checkpoint",
            "could not checkpoint PID",
            "checkpoint 401",
        ),
        ("running", "restore", "could not restore PID", "restore 401"),
        ("locked", "lock", "could not lock PID", "lock 401"),
        (
            "checkpointed",
            "unlock",
            "could not unlock PID",
            "unlock 401",
        ),
    ];
    for (state, action, words, call) in cases {
        let target = fx.cuda_target();
        fx.put_in(&target, state);
        let out = nvidia.run(&["--action", action, "--pid", &target.arg()]);
        let what = format!("{action} when {state}");
        out.expect_failure(words, &what);
        assert!(out.criu_buffer(CRIU_BUF).contains(words), "{what}");
        assert!(
            out.text().contains("[CUDA_ERROR_ILLEGAL_STATE 401]"),
            "{what}"
        );
        assert_eq!(shorts(&fx.take_calls()), [call, "get_state 0"], "{what}");
        assert_eq!(fx.fake_state(target.pid), state, "{what}: unchanged");
    }
    let locked = fx.cuda_target();
    fx.put_in(&locked, "locked");
    nvidia
        .run(&["--toggle", "--pid", &locked.arg()])
        .expect_failure("it is locked", "toggle when locked");
    assert_eq!(shorts(&fx.take_calls()), ["get_state 0"]);
}

#[test]
fn no_such_process_exits_1_without_a_driver_call() {
    let fx = Fixture::new();
    let nvidia = Nvidia::new(&fx);
    let gone = fx.cuda_target().kill_and_reap().to_string();
    for args in [
        vec!["--get-state", "--pid", &gone],
        vec!["--get-restore-tid", "--pid", &gone],
        vec!["--action", "lock", "--pid", &gone],
        vec!["--toggle", "--pid", &gone],
    ] {
        let out = nvidia.run(&args);
        out.expect_failure(&format!("no process has PID {gone}"), &format!("{args:?}"));
        fx.assert_no_calls(&format!("{args:?}"));
    }
}

/// CRIU reads exit > 0 from `--get-restore-tid` as "not a CUDA process".
#[test]
fn a_process_without_cuda_exits_1() {
    let fx = Fixture::new();
    let nvidia = Nvidia::new(&fx);
    let plain = fx.plain_target();
    let pid = plain.arg();
    for args in [
        vec!["--get-restore-tid", "--pid", &pid],
        vec!["--get-state", "--pid", &pid],
        vec!["--action", "lock", "--pid", &pid],
    ] {
        let out = nvidia.run(&args);
        out.expect_failure("is not a CUDA process", &format!("{args:?}"));
        assert!(out.text().contains("CUDA_ERROR_NOT_INITIALIZED 3"));
        // The driver is asked and says so; nothing moved.
        assert!(fx.take_calls().iter().all(|c| c.code == 3));
    }
}

#[test]
fn a_lock_timeout_exits_1_with_the_process_still_running() {
    let fx = Fixture::new();
    let nvidia = Nvidia::new(&fx);
    let target = fx.cuda_target();
    let out = nvidia.run_env(
        &[
            "--action",
            "lock",
            "--pid",
            &target.arg(),
            "--timeout",
            "200",
        ],
        &[("FAKE_CUDA_INJECT", "lock=busy:2000")],
    );
    out.expect_failure("did not finish within 200 ms", "lock timeout");
    assert!(
        out.text().contains("[CUDA_ERROR_NOT_READY 600]"),
        "{}",
        out.text()
    );
    assert!(
        out.elapsed < Duration::from_millis(1500),
        "gave up after its timeout, not the drain: {:?}",
        out.elapsed
    );
    assert_eq!(shorts(&fx.take_calls()), ["lock 600", "get_state 0"]);
    assert_eq!(fx.fake_state(target.pid), "running");
}

#[test]
fn an_injected_driver_error_exits_1_and_names_it() {
    let fx = Fixture::new();
    let nvidia = Nvidia::new(&fx);
    let target = fx.cuda_target();
    let pid = target.arg();
    fx.put_in(&target, "locked");
    let cases = [
        (
            vec!["--action", "checkpoint", "--pid", &pid],
            "checkpoint=error:999",
            "could not checkpoint PID",
        ),
        (
            vec!["--get-state", "--pid", &pid],
            "get_state=error:999",
            "could not read the CUDA state",
        ),
        (
            vec!["--get-restore-tid", "--pid", &pid],
            "restore_tid=error:999",
            "could not read the restore thread id",
        ),
    ];
    for (args, rule, words) in cases {
        let out = nvidia.run_env(&args, &[("FAKE_CUDA_INJECT", rule)]);
        out.expect_failure(words, rule);
        assert!(out.text().contains("[CUDA_ERROR_UNKNOWN 999]"), "{rule}");
        let calls = fx.take_calls();
        assert_eq!(calls[0].code, 999, "{rule}: {calls:?}");
        assert_eq!(fx.fake_state(target.pid), "locked", "{rule}");
    }
}

#[test]
fn a_missing_driver_exits_1_without_a_driver_call() {
    let fx = Fixture::new();
    let nvidia = Nvidia::new(&fx);
    let target = fx.cuda_target();
    let pid = target.arg();
    for args in [
        vec!["--get-state", "--pid", &pid],
        vec!["--get-restore-tid", "--pid", &pid],
        vec!["--action", "lock", "--pid", &pid],
    ] {
        let out = nvidia.run_env(&args, &[("CUDACKPT_LIBCUDA", "/nonexistent")]);
        out.expect_failure("could not be loaded", &format!("{args:?}"));
        assert!(out.text().contains("/nonexistent"), "{}", out.text());
        fx.assert_no_calls(&format!("{args:?}"));
    }
    assert_eq!(fx.fake_state(target.pid), "running");
}

/// Bad input, with a real CUDA process among the arguments: exit 1, the
/// problem (quoting what was typed) in the first bytes CRIU keeps, and no
/// driver call at all.
#[test]
fn bad_input_exits_1_before_any_driver_call() {
    let fx = Fixture::with_devices(TWO_GPUS);
    let nvidia = Nvidia::new(&fx);
    let target = fx.cuda_target();
    fx.put_in(&target, "checkpointed");
    let pid = target.arg();
    let map = swap_map();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--get-state", "--pid", "abc"], "invalid PID \"abc\""),
        (vec!["--get-state", "--pid", "12x"], "invalid PID \"12x\""),
        (vec!["--get-state", "--pid", "0"], "invalid PID \"0\""),
        (vec!["--get-state", "-p", "-5"], "invalid PID \"-5\""),
        (vec!["--action", "lock", "--pid="], "invalid PID \"\""),
        (
            vec!["--get-state", "--pid", &pid, "--verbose"],
            "unknown option \"--verbose\"",
        ),
        (
            vec!["--get-state", "--pid", &pid, "-v"],
            "unknown option \"-v\"",
        ),
        (
            vec!["--json", "--get-state", "--pid", &pid],
            "unknown option \"--json\"",
        ),
        (
            vec!["--get-state", "--pid", &pid, &pid],
            "unexpected argument",
        ),
        (vec!["--get-state"], "--pid is required"),
        (vec!["--action", "lock"], "--pid is required"),
        (
            vec!["--get-state", "--get-restore-tid", "--pid", &pid],
            "only one of",
        ),
        (
            vec!["--action", "unlock", "--toggle", "--pid", &pid],
            "only one of",
        ),
        (vec!["--pid", &pid], "no operation"),
        (vec![], "no operation"),
        (
            vec!["--action", "bogus", "--pid", &pid],
            "invalid --action \"bogus\"",
        ),
        (vec!["--pid", &pid, "--action"], "--action needs a value"),
        (
            vec!["--get-state", "--pid", &pid, "--pid", &pid],
            "--pid given twice",
        ),
        (
            vec!["--get-state=yes", "--pid", &pid],
            "--get-state takes no value",
        ),
        (
            vec!["--action", "lock", "--pid", &pid, "--timeout", "soon"],
            "\"soon\"",
        ),
        (
            vec![
                "--action",
                "checkpoint",
                "--pid",
                &pid,
                "--device-map",
                &map,
            ],
            "--device-map applies only to --action restore and --toggle",
        ),
        (
            vec!["--get-state", "--pid", &pid, "-d", &map],
            "--device-map applies only",
        ),
        (
            vec!["--action", "restore", "--pid", &pid, "-d", "garbage"],
            "\"garbage\"",
        ),
    ];
    for (args, words) in cases {
        let what = format!("{args:?}");
        let out = nvidia.run(&args);
        out.expect_failure(words, &what);
        assert!(
            out.criu_buffer(CRIU_BUF).contains(words),
            "{what}: the problem is in what CRIU reads:\n{}",
            out.text()
        );
        fx.assert_no_calls(&what);
    }
    assert_eq!(fx.fake_record(target.pid), ("checkpointed".to_string(), 0));
}

// 3. The trigger under the name `cudackpt`.

#[test]
fn a_compatible_first_argument_selects_the_grammar_under_any_name() {
    let fx = Fixture::new();
    let target = fx.threaded_cuda_target();
    let pid = target.arg();
    let tid = target.threads()[1];
    let run = |args: &[&str]| run_merged(fx.std_command(args));

    run(&["--get-state", "--pid", &pid]).expect_ok("running\n", "--get-state");
    run(&["--get-restore-tid", "--pid", &pid]).expect_ok(&format!("{tid}\n"), "--get-restore-tid");
    run(&["--action=lock", "--pid", &pid]).expect_ok("", "--action=lock");
    run(&["--action", "checkpoint", "-p", &pid]).expect_ok("", "--action checkpoint");
    // A thread id acts on its process here too (the modern grammar refuses it).
    run(&["--get-state", "--pid", &tid.to_string()]).expect_ok("checkpointed\n", "thread");
    run(&["--toggle", "--pid", &pid]).expect_ok("", "--toggle");
    assert_eq!(
        shorts(&fx.take_calls()),
        [
            "get_state 0",
            "restore_tid 0",
            "lock 0",
            "checkpoint 0",
            "get_state 0",
            "get_state 0",
            "restore 0",
            "unlock 0",
        ]
    );
    // Failures follow the compatible contract: exit 1, not the modern 2/4.
    run(&["--get-state", "--pid", "abc"]).expect_failure("invalid PID \"abc\"", "bad pid");
    run(&["--action", "unlock", "--pid", &pid]).expect_failure("could not unlock", "unlock");
    assert_eq!(shorts(&fx.take_calls()), ["unlock 401", "get_state 0"]);
}

/// Only the first argument triggers: after `--json` (or `--pid`), it is the
/// modern grammar, which has no such flag: a usage error, exit 2.
#[test]
fn a_compatible_flag_after_the_first_argument_is_a_modern_usage_error() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let pid = target.arg();
    let assert = fx
        .cudackpt(&["--json", "--get-state", "--pid", &pid])
        .assert()
        .code(2);
    let doc: UsageDoc = parse_one_document(&assert.get_output().stdout);
    doc.check(2);
    assert!(doc.error.message.contains("--get-state"), "{doc:?}");

    let output = fx
        .cudackpt(&["--pid", &pid, "--get-state"])
        .assert()
        .code(2)
        .get_output()
        .clone();
    let (stdout, stderr) = texts(&output);
    assert!(stdout.is_empty() && stderr.contains("--pid"), "{stderr}");
    fx.assert_no_calls("modern usage errors");
}

// 4. The same scenario through both grammars, call for call.

#[test]
fn both_grammars_make_the_same_driver_calls() {
    struct Step<'a> {
        modern: &'a [&'a str],
        compat: &'a [&'a str],
        /// The calls both make.
        calls: &'a [&'a str],
        /// What only the modern command adds: `state` also reports the
        /// restore thread id; `--get-state` prints the state word alone.
        modern_only: &'a [&'a str],
        /// What the compatible mode prints (`{tid}`: the restore tid).
        compat_prints: &'a str,
    }
    let steps = [
        Step {
            modern: &["lock", "--timeout", "5000"],
            compat: &["--action", "lock", "--timeout", "5000"],
            calls: &["lock 0"],
            modern_only: &[],
            compat_prints: "",
        },
        Step {
            modern: &["checkpoint"],
            compat: &["--action", "checkpoint"],
            calls: &["checkpoint 0"],
            modern_only: &[],
            compat_prints: "",
        },
        Step {
            modern: &["restore"],
            compat: &["--action", "restore"],
            calls: &["restore 0"],
            modern_only: &[],
            compat_prints: "",
        },
        Step {
            modern: &["unlock"],
            compat: &["--action", "unlock"],
            calls: &["unlock 0"],
            modern_only: &[],
            compat_prints: "",
        },
        Step {
            modern: &["toggle"],
            compat: &["--toggle"],
            calls: &["get_state 0", "lock 0", "checkpoint 0"],
            modern_only: &[],
            compat_prints: "",
        },
        Step {
            modern: &["toggle"],
            compat: &["--toggle"],
            calls: &["get_state 0", "restore 0", "unlock 0"],
            modern_only: &[],
            compat_prints: "",
        },
        Step {
            modern: &["state"],
            compat: &["--get-state"],
            calls: &["get_state 0"],
            modern_only: &["restore_tid 0"],
            compat_prints: "running\n",
        },
        Step {
            modern: &["restore-tid"],
            compat: &["--get-restore-tid"],
            calls: &["restore_tid 0"],
            modern_only: &[],
            compat_prints: "{tid}\n",
        },
    ];

    let fx = Fixture::new();
    let nvidia = Nvidia::new(&fx);
    let modern_target = fx.threaded_cuda_target();
    let compat_target = fx.threaded_cuda_target();
    let (mut modern_log, mut compat_log) = (Vec::new(), Vec::new());
    for step in &steps {
        let mut args = step.modern.to_vec();
        let pid = modern_target.arg();
        args.push(&pid);
        fx.cudackpt(&args).assert().success();
        let calls = fx.take_calls();
        assert!(
            calls.iter().all(|c| c.pid == modern_target.pid),
            "{calls:?}"
        );
        let expected = [step.calls, step.modern_only].concat();
        assert_eq!(shorts(&calls), expected, "modern {args:?}");
        modern_log.extend(shorts(&calls));

        let mut args = step.compat.to_vec();
        let pid = compat_target.arg();
        args.extend(["--pid", &pid]);
        let tid = compat_target.threads()[1].to_string();
        nvidia.run(&args).expect_ok(
            &step.compat_prints.replace("{tid}", &tid),
            &format!("{args:?}"),
        );
        let calls = fx.take_calls();
        assert!(
            calls.iter().all(|c| c.pid == compat_target.pid),
            "{calls:?}"
        );
        assert_eq!(shorts(&calls), step.calls, "compatible {args:?}");
        compat_log.extend(shorts(&calls));

        assert_eq!(
            fx.fake_state(modern_target.pid),
            fx.fake_state(compat_target.pid),
            "after {:?}",
            step.modern
        );
    }
    // Over the whole scenario: the same calls, plus exactly the modern
    // `state`'s restore_tid, in its place.
    let mut expected_modern = Vec::new();
    for step in &steps {
        expected_modern.extend(step.calls.iter().chain(step.modern_only).copied());
    }
    assert_eq!(modern_log, expected_modern);
    assert_eq!(
        compat_log,
        steps
            .iter()
            .flat_map(|s| s.calls)
            .copied()
            .collect::<Vec<_>>()
    );
    assert_eq!(modern_log.len(), compat_log.len() + 1);
}

// 5. install-compat.

#[derive(Debug, Deserialize)]
struct InstallDoc {
    schema_version: u32,
    command: String,
    ok: bool,
    exit_code: i32,
    message: String,
    #[serde(default)]
    warnings: Vec<String>,
}

fn binary() -> PathBuf {
    cudackpt_bin().canonicalize().expect("the cudackpt binary")
}

/// `install-compat DIR` as the tests run it: the binary is in a cargo
/// build directory (so `--allow-build-dir`), and `PATH` starts at `DIR`.
fn install_compat(fx: &Fixture, dir: &Path, extra: &[&str]) -> assert_cmd::Command {
    let mut args = vec!["install-compat", "--allow-build-dir"];
    args.extend_from_slice(extra);
    args.push(dir.to_str().expect("UTF-8 path"));
    let mut command = fx.cudackpt(&args);
    command.env("PATH", format!("{}:/usr/bin:/bin", dir.display()));
    command
}

#[test]
fn install_compat_links_is_idempotent_and_answers_as_cuda_checkpoint() {
    let fx = Fixture::new();
    let dir = fx.dir().join("install");
    fs::create_dir(&dir).expect("dir");
    let link = dir.join(NVIDIA_NAME);

    let output = install_compat(&fx, &dir, &[])
        .assert()
        .success()
        .stderr("")
        .get_output()
        .clone();
    assert_eq!(fs::read_link(&link).expect("a symlink"), binary());
    let (stdout, _) = texts(&output);
    assert_eq!(
        stdout,
        format!("installed {} -> {}\n", link.display(), binary().display())
    );

    let output = install_compat(&fx, &dir, &[])
        .assert()
        .success()
        .get_output()
        .clone();
    let (stdout, _) = texts(&output);
    assert!(stdout.starts_with("already installed"), "{stdout}");
    assert_eq!(fs::read_link(&link).expect("still the link"), binary());

    let assert = install_compat(&fx, &dir, &["--json"]).assert().success();
    let doc: InstallDoc = parse_one_document(&assert.get_output().stdout);
    assert_eq!(
        (
            doc.schema_version,
            doc.command.as_str(),
            doc.ok,
            doc.exit_code
        ),
        (1, "install-compat", true, 0)
    );
    assert!(doc.message.contains("already installed"), "{doc:?}");
    assert!(doc.warnings.is_empty(), "first on PATH: {doc:?}");

    // What it installed answers as NVIDIA's tool.
    let target = fx.cuda_target();
    run_merged(fx.command_for(&link, &["--get-state", "--pid", &target.arg()]))
        .expect_ok("running\n", "the installed link");
}

#[test]
fn install_compat_keeps_what_it_replaces_and_uninstall_puts_it_back() {
    let fx = Fixture::new();
    let dir = fx.dir().join("install");
    fs::create_dir(&dir).expect("dir");
    let link = dir.join(NVIDIA_NAME);
    let nvidia = "#!/bin/sh\necho NVIDIA\n";
    fs::write(&link, nvidia).expect("NVIDIA's tool, say");

    let output = install_compat(&fx, &dir, &[])
        .assert()
        .failure()
        .get_output()
        .clone();
    let (stdout, stderr) = texts(&output);
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("already exists") && stderr.contains("--force"),
        "{stderr}"
    );
    let assert = install_compat(&fx, &dir, &["--json"]).assert().failure();
    let doc: InstallDoc = parse_one_document(&assert.get_output().stdout);
    assert!(
        !doc.ok && doc.exit_code == 1 && doc.message.contains("--force"),
        "{doc:?}"
    );
    assert_eq!(fs::read_to_string(&link).expect("untouched"), nvidia);

    let assert = install_compat(&fx, &dir, &["--json", "--force"])
        .assert()
        .success();
    let doc: InstallDoc = parse_one_document(&assert.get_output().stdout);
    assert!(doc.ok && doc.message.starts_with("replaced"), "{doc:?}");
    assert!(doc.message.contains("cuda-checkpoint.orig"), "{doc:?}");
    assert_eq!(fs::read_link(&link).expect("now a symlink"), binary());
    assert_eq!(
        fs::read_to_string(dir.join("cuda-checkpoint.orig")).expect("kept"),
        nvidia
    );

    let assert = fx
        .cudackpt(&[
            "--json",
            "install-compat",
            "--uninstall",
            dir.to_str().expect("utf-8"),
        ])
        .assert()
        .success();
    let doc: InstallDoc = parse_one_document(&assert.get_output().stdout);
    assert!(doc.ok && doc.message.contains("put back"), "{doc:?}");
    assert_eq!(fs::read_to_string(&link).expect("NVIDIA's again"), nvidia);
    assert!(!dir.join("cuda-checkpoint.orig").exists());
    // NVIDIA's file is not cudackpt's to remove.
    fx.cudackpt(&[
        "install-compat",
        "--uninstall",
        dir.to_str().expect("utf-8"),
    ])
    .assert()
    .failure()
    .stderr(predicates::str::contains("not a link to this cudackpt"));
    assert_eq!(fs::read_to_string(&link).expect("left alone"), nvidia);
}

/// A link into a build directory breaks at the next `cargo clean`: refused
/// unless asked, as a usage error that says how to install first.
#[test]
fn install_compat_refuses_a_build_directory_unless_asked() {
    let fx = Fixture::new();
    let dir = fx.dir().join("install");
    fs::create_dir(&dir).expect("dir");
    let output = fx
        .cudackpt(&["install-compat", dir.to_str().expect("utf-8")])
        .assert()
        .code(2)
        .get_output()
        .clone();
    let (_, stderr) = texts(&output);
    assert!(
        stderr.contains("cargo build directory") && stderr.contains("--allow-build-dir"),
        "{stderr}"
    );
    assert!(!dir.join(NVIDIA_NAME).exists());
}

/// Another `cuda-checkpoint` earlier on PATH is what CRIU will run: said.
#[test]
fn install_compat_warns_when_another_cuda_checkpoint_comes_first_on_path() {
    let fx = Fixture::new();
    let (dir, earlier) = (fx.dir().join("install"), fx.dir().join("earlier"));
    for d in [&dir, &earlier] {
        fs::create_dir(d).expect("dir");
    }
    let theirs = earlier.join(NVIDIA_NAME);
    fs::write(&theirs, "#!/bin/sh\n").expect("another tool");
    fs::set_permissions(&theirs, fs::Permissions::from_mode(0o755)).expect("chmod");
    let output = fx
        .cudackpt(&[
            "install-compat",
            "--allow-build-dir",
            dir.to_str().expect("utf-8"),
        ])
        .env("PATH", format!("{}:{}", earlier.display(), dir.display()))
        .assert()
        .success()
        .get_output()
        .clone();
    let (_, stderr) = texts(&output);
    assert!(
        stderr.contains(&format!("{} comes first on PATH", theirs.display())),
        "{stderr}"
    );
}

// 6. Nothing before the answer, whatever the environment asks for.

#[test]
fn the_compatible_mode_never_logs_even_with_rust_log() {
    let fx = Fixture::new();
    let nvidia = Nvidia::new(&fx);
    let target = fx.threaded_cuda_target();
    let pid = target.arg();
    // A thread id takes the path that would log (acting on its process).
    let tid = target.threads()[2].to_string();
    let restore_tid = target.threads()[1];

    // The same environment makes the modern mode log: RUST_LOG is live.
    let mut modern = fx.std_command(&["state", &pid]);
    modern.env("RUST_LOG", "debug");
    let output = modern.output().expect("modern state");
    let (_, stderr) = texts(&output);
    assert!(stderr.contains("DEBUG"), "modern mode logs: {stderr:?}");

    for level in ["debug", "trace"] {
        let env = [("RUST_LOG", level)];
        let run = |args: &[&str]| nvidia.run_env(args, &env);
        run(&["--get-state", "--pid", &tid]).expect_ok("running\n", level);
        run(&["--get-restore-tid", "--pid", &tid]).expect_ok(&format!("{restore_tid}\n"), level);
        run(&["--action", "lock", "--pid", &tid, "--timeout", "1000"]).expect_ok("", level);
        run(&["--toggle", "--pid", &pid]).expect_failure("cannot toggle", level);
        run(&["--action", "unlock", "--pid", &pid]).expect_ok("", level);
        run(&["--action", "unlock", "--pid", &pid]).expect_failure("could not unlock", level);
        let help = run(&["-h"]);
        assert!(
            help.code == 0 && help.bytes.starts_with(b"CUDA checkpoint"),
            "{level}: {}",
            help.text()
        );
        // Under the name cudackpt, with the first-argument trigger, too.
        let mut command = fx.std_command(&["--get-state", "--pid", &tid]);
        command.env("RUST_LOG", level);
        run_merged(command).expect_ok("running\n", level);
    }
}
