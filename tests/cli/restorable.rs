//! Never start what cannot be undone (docs/guide/safety.md, "Before a checkpoint: what the driver cannot restore"): a checkpoint of a process
//! the driver is known not to restore is refused before any driver call
//! (exit 8, `unrestorable`), naming the evidence in /proc and the fix;
//! `--force` (`CUDACKPT_FORCE=1` for NVIDIA's grammar) checkpoints anyway.
//! What is recognised: a CUDA IPC party (it maps the driver's
//! /dev/shm/cuda.shm.* file), and a rank of a multi-process NCCL job
//! (PyTorch's watchdog thread, or a launcher's world size) whose transports
//! are not sockets only.

use std::fs;
use std::path::PathBuf;

use crate::support::{table_snapshot_settings, texts, wait_until, Fixture, Target};
use crate::wire::{Kind, ProcessCommandDoc, State};

/// A driver IPC file named as the driver names them, for an exporter PID;
/// removed on drop.
struct IpcFile(PathBuf);

impl IpcFile {
    fn new(exporter: i32) -> IpcFile {
        let path = PathBuf::from(format!(
            "/dev/shm/cuda.shm.{}.{exporter:x}.1",
            std::process::id()
        ));
        fs::write(&path, vec![0u8; 4096]).expect("an IPC file in /dev/shm");
        IpcFile(path)
    }
}

impl Drop for IpcFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// A program that maps the file it is given shared, as a party to CUDA
/// IPC maps the driver's file.
fn importer_program(fx: &Fixture) -> PathBuf {
    fx.compile_program(
        "importer",
        "#include <fcntl.h>\n#include <sys/mman.h>\n#include <unistd.h>\n\
         int main(int argc, char **argv) { (void)argc; int fd = open(argv[1], O_RDWR);\n\
         if (fd < 0 || mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED) return 1;\n\
         for (;;) pause(); }\n",
    )
}

/// A CUDA process that maps `file` shared, as an importer of CUDA IPC does.
fn importer(fx: &Fixture, file: &IpcFile) -> Target {
    let program = importer_program(fx);
    let path = file.0.to_str().expect("utf-8").to_string();
    let target = fx.cuda_program(&program, &[&path]);
    wait_until("the IPC file to be mapped", || {
        fs::read_to_string(format!("/proc/{}/maps", target.pid)).is_ok_and(|m| m.contains(&path))
    });
    target
}

/// A CUDA process with a thread named as PyTorch's NCCL watchdog.
fn watchdog_rank(fx: &Fixture) -> Target {
    let program = fx.compile_program(
        "rank",
        "#define _GNU_SOURCE\n#include <pthread.h>\n#include <sys/prctl.h>\n#include <unistd.h>\n\
         static void *watch(void *arg) { (void)arg; prctl(PR_SET_NAME, \"pt_nccl_watchdg\"); for (;;) pause(); return 0; }\n\
         int main(void) { pthread_t t; pthread_create(&t, 0, watch, 0); for (;;) pause(); }\n",
    );
    let target = fx.cuda_program(&program, &[]);
    wait_until("the watchdog thread", || {
        target.threads().iter().any(|tid| {
            fs::read_to_string(format!("/proc/{}/task/{tid}/comm", target.pid))
                .is_ok_and(|c| c.trim_end() == "pt_nccl_watchdg")
        })
    });
    target
}

#[test]
fn a_cuda_ipc_importer_is_refused_before_any_driver_call_and_forced_on_request() {
    let fx = Fixture::new();
    let file = IpcFile::new(0x1f4a);
    let party = importer(&fx, &file);
    let bystander = fx.cuda_target();
    fx.take_calls();
    let doc: ProcessCommandDoc = fx.json(&["suspend", &party.arg(), &bystander.arg()], 8);
    let error = doc.process(party.pid).error();
    assert_eq!(error.kind, Kind::Unrestorable);
    assert!(
        error.message.contains("shares GPU memory with PID 8010"),
        "{error:?}"
    );
    assert!(
        error.message.contains(&format!("/proc/{}/maps", party.pid)),
        "the evidence: {error:?}"
    );
    assert!(error.message.contains("would be lost"), "{error:?}");
    assert!(error.hint.as_deref().is_some_and(|h| h.contains("--force")));
    assert_eq!(doc.process(bystander.pid).error().kind, Kind::NotAttempted);
    fx.assert_no_calls("a refused IPC party");

    // The harm is the driver's, on a real GPU; here, the override works.
    let doc: ProcessCommandDoc = fx.json(&["suspend", "--force", &party.arg()], 0);
    let p = doc.process(party.pid);
    assert_eq!(p.state, State::Checkpointed);
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("checkpointing anyway")),
        "{p:?}"
    );
}

#[test]
fn a_nccl_rank_is_refused_by_its_watchdog_thread_or_its_launcher() {
    let fx = Fixture::new();
    let by_thread = watchdog_rank(&fx);
    let by_env =
        fx.nccl_cuda_target_with(&[("OMPI_COMM_WORLD_SIZE", "4"), ("NCCL_P2P_DISABLE", "1")]);
    fx.take_calls();
    for (target, evidence) in [
        (&by_thread, "thread pt_nccl_watchdg".to_string()),
        (
            &by_env,
            format!("OMPI_COMM_WORLD_SIZE=4 in /proc/{}/environ", by_env.pid),
        ),
    ] {
        for command in ["suspend", "checkpoint"] {
            let doc: ProcessCommandDoc = fx.json(&[command, &target.arg()], 8);
            let error = doc.process(target.pid).error();
            assert_eq!(error.kind, Kind::Unrestorable, "{command}");
            assert!(error.message.contains(&evidence), "{command}: {error:?}");
            assert!(
                error
                    .hint
                    .as_deref()
                    .is_some_and(|h| h.contains("NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1")),
                "{error:?}"
            );
        }
    }
    fx.assert_no_calls("refused ranks");
    // Lock and unlock never checkpoint: no pre-flight.
    fx.json::<ProcessCommandDoc>(&["lock", &by_env.arg()], 0);
    fx.json::<ProcessCommandDoc>(&["unlock", &by_env.arg()], 0);
}

/// A rank known only by its launcher's world size (a gloo job has one
/// too) is refused for what was found, not for an NCCL transport nobody
/// saw; the hint names the ways on, gloo's included.
#[test]
fn a_rank_known_by_its_launcher_alone_is_refused_for_what_was_found() {
    let fx = Fixture::new();
    let rank = fx.nccl_cuda_target_with(&[("WORLD_SIZE", "2")]);
    let doc: ProcessCommandDoc = fx.json(&["suspend", &rank.arg()], 8);
    let error = doc.process(rank.pid).error();
    assert_eq!(error.kind, Kind::Unrestorable);
    assert!(
        error
            .message
            .contains("is a rank of a multi-process job (WORLD_SIZE=2")
            && error.message.contains("shows no NCCL thread")
            && !error.message.contains("transport is in use"),
        "{error:?}"
    );
    let hint = error.hint.as_deref().unwrap_or_default();
    assert!(hint.contains("gloo") && hint.contains("--drain"), "{hint}");
    fx.assert_no_calls("a refused rank");
}

#[test]
fn a_toggle_refuses_only_the_way_down() {
    let fx = Fixture::new();
    let file = IpcFile::new(0x77);
    let party = importer(&fx, &file);
    fx.json::<ProcessCommandDoc>(&["toggle", &party.arg()], 8);
    assert_eq!(fx.fake_state(party.pid), "running");
    // Checkpointed anyway (as by an earlier --force): toggling it back up is
    // its only way home, and is never refused.
    fx.json::<ProcessCommandDoc>(&["suspend", "--force", &party.arg()], 0);
    fx.json::<ProcessCommandDoc>(&["toggle", &party.arg()], 0);
    assert_eq!(fx.fake_state(party.pid), "running");
}

#[test]
fn nvidias_grammar_refuses_too_and_takes_cuda_checkpoint_force() {
    let fx = Fixture::new();
    let file = IpcFile::new(0x99);
    let party = importer(&fx, &file);
    let pid = party.arg();
    fx.cudackpt(&["--action", "lock", "--pid", &pid])
        .assert()
        .code(0);
    fx.take_calls();
    let output = fx
        .cudackpt(&["--action", "checkpoint", "--pid", &pid])
        .assert()
        .code(1)
        .get_output()
        .clone();
    let (_, stderr) = texts(&output);
    assert!(
        stderr.starts_with("cuda-checkpoint: refused before any change"),
        "{stderr}"
    );
    fx.assert_no_calls("a refused compatible checkpoint");
    fx.cudackpt(&["--action", "checkpoint", "--pid", &pid])
        .env("CUDACKPT_FORCE", "1")
        .assert()
        .code(0);
    assert_eq!(fx.fake_state(party.pid), "checkpointed");
}

/// `--dry-run`: every check and pre-flight, then nothing: a scheduler asks
/// before it preempts. Only read-only queries reach the driver.
#[test]
fn a_dry_run_says_what_would_happen_and_changes_nothing() {
    let fx = Fixture::new();
    let file = IpcFile::new(0x55);
    let party = importer(&fx, &file);
    let plain = fx.cuda_target();
    fx.take_calls();
    let doc: ProcessCommandDoc = fx.json(&["suspend", "--dry-run", &plain.arg()], 0);
    let p = doc.process(plain.pid);
    assert_eq!(p.state, State::Running);
    assert!(
        p.note
            .as_deref()
            .is_some_and(|n| n.contains("would lock, then checkpoint")),
        "{p:?}"
    );
    let doc: ProcessCommandDoc = fx.json(&["suspend", "--dry-run", &party.arg()], 8);
    assert_eq!(doc.process(party.pid).error().kind, Kind::Unrestorable);
    let doc: ProcessCommandDoc = fx.json(&["resume", "--dry-run", &plain.arg()], 0);
    assert!(
        doc.process(plain.pid)
            .note
            .as_deref()
            .is_some_and(|n| n.contains("already there")),
        "{doc:?}"
    );
    let calls = fx.take_calls();
    assert!(
        calls.iter().all(|c| c.op == "get_state"),
        "a dry run only asks: {calls:?}"
    );
    assert_eq!(fx.fake_state(plain.pid), "running");
    assert_eq!(fx.fake_state(party.pid), "running");
}

/// `check`: suspend and resume as dry runs, one verdict per process.
#[test]
fn check_says_whether_suspend_and_resume_would_be_safe() {
    let fx = Fixture::new();
    let file = IpcFile::new(0x66);
    let party = importer(&fx, &file);
    let plain = fx.cuda_target();
    fx.take_calls();
    let doc: ProcessCommandDoc = fx.json(&["check", &plain.arg()], 0);
    let note = doc.process(plain.pid).note.clone().expect("a verdict");
    assert!(
        note.starts_with(
            "suspend: every check passed; would lock, then checkpoint; resume: already there"
        ),
        "{note}"
    );
    let doc: ProcessCommandDoc = fx.json(&["check", &party.arg()], 8);
    let p = doc.process(party.pid);
    assert_eq!(p.error().kind, Kind::Unrestorable);
    assert!(p.note.is_none(), "a note is a remark on success: {p:?}");
    assert!(
        p.warnings
            .iter()
            .any(|w| w.starts_with("resume: already there")),
        "{p:?}"
    );
    assert!(
        fx.take_calls().iter().all(|c| c.op == "get_state"),
        "check only asks"
    );
    assert_eq!(fx.fake_state(plain.pid), "running");
}

/// `check` and `--dry-run` predict (issue 19): a refused process is reported
/// in the state the driver gives, never `unknown` (checkpointed too), and
/// the table says what a real run would meet ("would be refused"), with the
/// exit status and JSON of a refusal. Only state queries reach the driver.
#[test]
fn a_prediction_reads_the_state_and_words_itself_as_one() {
    let fx = Fixture::new();
    let file = IpcFile::new(0x67);
    let party = importer(&fx, &file);
    let parked = fx.cuda_target();
    fx.json::<ProcessCommandDoc>(&["suspend", &parked.arg()], 0);
    fx.take_calls();

    for command in [&["check"][..], &["suspend", "--dry-run"][..]] {
        let mut args = command.to_vec();
        let (a, b) = (party.arg(), parked.arg());
        args.extend([a.as_str(), b.as_str()]);
        let doc: ProcessCommandDoc = fx.json(&args, 8);
        let refused = doc.process(party.pid);
        assert_eq!(refused.error().kind, Kind::Unrestorable, "{command:?}");
        assert_eq!(
            refused.state,
            State::Running,
            "{command:?}: the state read, not unknown"
        );
        let other = doc.process(parked.pid);
        assert_eq!(other.error().kind, Kind::NotAttempted);
        assert_eq!(other.state, State::Checkpointed, "{command:?}");

        let output = fx.cudackpt(&args).assert().code(8).get_output().clone();
        let (table, _) = texts(&output);
        assert!(
            table.contains("would be refused: could not be restored")
                && table.contains("would not be attempted")
                && !table.contains("FAILED"),
            "{command:?}: {table}"
        );
        if command == ["check"] {
            table_snapshot_settings(&fx, &[party.pid, parked.pid])
                .bind(|| insta::assert_snapshot!("check_refused_table", table));
        }
    }
    // One refused before the driver is even loaded (no such process): the
    // others' states are read all the same.
    let doc: ProcessCommandDoc = fx.json(&["check", "4194305", &parked.arg()], 5);
    assert_eq!(
        doc.process(parked.pid).state,
        State::Checkpointed,
        "{doc:?}"
    );
    assert!(
        fx.take_calls().iter().all(|c| c.op == "get_state"),
        "a prediction only asks"
    );
    assert_eq!(fx.fake_state(party.pid), "running");
    assert_eq!(fx.fake_state(parked.pid), "checkpointed");
    fx.json::<ProcessCommandDoc>(&["resume", &parked.arg()], 0);
}

/// A prediction refuses as the real command would, also after every
/// pre-flight passed: a process the driver has no CUDA state for (exit 5),
/// and one in a state the command cannot start from (exit 4, the rest of
/// the group not attempted). Before, both read "would be refused" in a note
/// beside `ok: true` and exit 0: a scheduler was told to go ahead.
#[test]
fn a_prediction_refuses_what_the_real_command_refuses() {
    let fx = Fixture::new();
    let plain = fx.plain_target();
    let doc: ProcessCommandDoc = fx.json(&["check", &plain.arg()], 5);
    assert!(!doc.ok);
    assert_eq!(
        doc.process(plain.pid).error().kind,
        Kind::NotCudaProcess,
        "{doc:?}"
    );
    let output = fx
        .cudackpt(&["check", &plain.arg()])
        .assert()
        .code(5)
        .get_output()
        .clone();
    assert!(
        texts(&output)
            .0
            .contains("would be refused: not a CUDA process"),
        "{output:?}"
    );

    let locked = fx.cuda_target();
    let running = fx.cuda_target();
    fx.json::<ProcessCommandDoc>(&["lock", &locked.arg()], 0);
    fx.take_calls();
    let (l, r) = (locked.arg(), running.arg());
    let predicted: ProcessCommandDoc = fx.json(&["toggle", "--dry-run", &l, &r], 4);
    let refused = predicted.process(locked.pid);
    assert_eq!(refused.error().kind, Kind::WrongState, "{predicted:?}");
    assert_eq!(refused.state, State::Locked);
    assert_eq!(
        predicted.process(running.pid).error().kind,
        Kind::NotAttempted
    );
    assert!(
        fx.take_calls().iter().all(|c| c.op == "get_state"),
        "a prediction only asks"
    );
    // The real command says the same.
    let real: ProcessCommandDoc = fx.json(&["toggle", &l, &r], 4);
    assert_eq!(real.process(locked.pid).error().kind, Kind::WrongState);
    assert_eq!(fx.fake_state(running.pid), "running");
    fx.json::<ProcessCommandDoc>(&["unlock", &l], 0);
}

/// A CUDA IPC pair in a PID namespace of its own, as in a container: the
/// driver's file names the exporter by its PID in that namespace (1 here),
/// and the refusals name both processes by their host PIDs: the exporter
/// its importer, the importer its exporter. `unshare` needs root.
#[test]
fn an_ipc_pair_in_a_pid_namespace_is_named_by_host_pids() {
    if !crate::support::running_as_root() {
        crate::support::prerequisite("make a PID namespace (unshare --pid needs root)", false);
        return;
    }
    use crate::support::SpawnGuarded;
    let fx = Fixture::new();
    let file = IpcFile::new(1);
    let path = file.0.to_str().expect("utf-8").to_string();
    let program = importer_program(&fx);
    // sh is PID 1 of the namespace: it starts one importer (PID 2 there),
    // then becomes the other, which so stays PID 1: the exporter.
    let _namespace = std::process::Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "sh",
            "-c",
            r#""$0" "$1" & exec "$0" "$1""#,
        ])
        .arg(&program)
        .arg(&path)
        .env("LD_PRELOAD", crate::support::fake_libcuda())
        .env("FAKE_CUDA_STATE_DIR", fx.dir())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn_guarded();
    let _pair_killer = KillMapping(path.clone());
    let mut pair: Vec<(i32, i32)> = Vec::new();
    wait_until("both to map the file", || {
        pair = mapping(&path);
        pair.len() == 2
    });
    let exporter = pair
        .iter()
        .find(|(_, own)| *own == 1)
        .expect("PID 1 there")
        .0;
    let importer = pair.iter().find(|(_, own)| *own != 1).expect("the other").0;
    let doc: ProcessCommandDoc = fx.json(
        &["suspend", &exporter.to_string(), &importer.to_string()],
        8,
    );
    let said = |pid: i32| doc.process(pid).error().message.clone();
    assert!(
        said(exporter).contains(&format!("exports GPU memory to PID {importer}")),
        "{}",
        said(exporter)
    );
    assert!(
        said(importer).contains(&format!("shares GPU memory with PID {exporter}")),
        "{}",
        said(importer)
    );
    assert!(
        !said(importer).contains("PID 1 ") && !said(exporter).contains("PID 1 "),
        "no namespace PID passed for a host one"
    );
}

/// Kills every process that maps the file, when dropped: the namespace's
/// init among them, which ends the namespace (killing `unshare` alone
/// would leave both running).
struct KillMapping(String);

impl Drop for KillMapping {
    fn drop(&mut self) {
        for (pid, _) in mapping(&self.0) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// The host PIDs of the processes mapping `path`, with each one's PID in
/// its own namespace.
fn mapping(path: &str) -> Vec<(i32, i32)> {
    fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains(path))
        })
        .filter_map(|pid| {
            let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let own = status
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))?
                .split_whitespace()
                .last()?
                .parse()
                .ok()?;
            Some((pid, own))
        })
        .collect()
}
