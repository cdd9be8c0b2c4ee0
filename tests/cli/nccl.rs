//! NCCL (docs/guide/commands.md, "Several processes" and "Before a checkpoint"): a process with `libnccl` mapped is flagged
//! by `ps`; only a real rank of a multi-process job (a launcher's world
//! size, PyTorch's watchdog thread) is warned about, and only by commands
//! that checkpoint it, when its transports restore (sockets only; the
//! others are refused: `restorable.rs`). Every PyTorch process maps
//! libnccl, so that alone says nothing. A warning never fails the command.

use crate::support::{texts, Fixture};
use crate::wire::{ProcessCommandDoc, State};

fn nccl_warnings(p: &crate::wire::ProcessDoc) -> Vec<&String> {
    p.warnings.iter().filter(|w| w.contains("NCCL")).collect()
}

#[test]
fn ps_flags_a_process_with_nccl_mapped() {
    let fx = Fixture::new();
    let nccl = fx.nccl_cuda_target();
    let plain_cuda = fx.cuda_target();

    for (t, expected) in [(&nccl, true), (&plain_cuda, false)] {
        let doc: ProcessCommandDoc = fx.json(&["ps", "--tree", &t.arg()], 0);
        let p = doc.only(t.pid);
        assert_eq!(p.nccl, Some(expected), "{p:?}");
        assert_eq!(p.state, State::Running);
        assert!(p.warnings.is_empty(), "ps only lists: {p:?}");

        let output = fx
            .cudackpt(&["ps", "--tree", &t.arg()])
            .assert()
            .code(0)
            .get_output()
            .clone();
        let (stdout, stderr) = texts(&output);
        let row: Vec<&str> = stdout
            .lines()
            .nth(1)
            .expect("one row")
            .split_whitespace()
            .collect();
        let pid = t.arg();
        let flag = if expected { "yes" } else { "no" };
        // GPU-MEM is "-": the fake host has no NVML.
        assert_eq!(
            row,
            [pid.as_str(), "running", pid.as_str(), "-", flag, "sleep"]
        );
        assert!(stderr.is_empty(), "{stderr}");
    }
    assert!(fx
        .take_calls()
        .iter()
        .all(|c| c.op == "get_state" || c.op == "restore_tid"));
}

/// A rank over NCCL's socket transport, as a launcher starts it.
const SOCKET_RANK: [(&str, &str); 3] = [
    ("WORLD_SIZE", "2"),
    ("NCCL_P2P_DISABLE", "1"),
    ("NCCL_SHM_DISABLE", "1"),
];

#[test]
fn a_real_rank_is_warned_about_when_checkpointed_and_libnccl_alone_is_not() {
    let fx = Fixture::new().with_nvml();
    let rank = fx.nccl_cuda_target_with(&SOCKET_RANK);
    let pytorch = fx.nccl_cuda_target();
    let other = fx.cuda_target();
    let pids = [rank.arg(), pytorch.arg(), other.arg()];

    for (command, state, warned) in [
        ("suspend", State::Checkpointed, 1),
        ("resume", State::Running, 0),
    ] {
        let doc: ProcessCommandDoc = fx.json(&[command, &pids[0], &pids[1], &pids[2]], 0);
        let p = doc.process(rank.pid);
        assert!(p.ok && p.state == state, "{command}: {p:?}");
        assert_eq!(p.nccl, Some(true), "{command}: {p:?}");
        assert_eq!(nccl_warnings(p).len(), warned, "{command}: {p:?}");
        if warned > 0 {
            let warning = nccl_warnings(p)[0];
            assert!(
                warning.contains(&format!("WORLD_SIZE=2 in /proc/{}/environ", rank.pid))
                    && warning.contains("socket transport"),
                "the evidence and the verdict: {warning}"
            );
        }
        for q in [doc.process(pytorch.pid), doc.process(other.pid)] {
            assert!(q.ok && q.state == state, "{command}: {q:?}");
            assert!(
                q.warnings.is_empty(),
                "{command}: libnccl alone is no rank: {q:?}"
            );
        }
        assert!(
            doc.warnings
                .iter()
                .all(|w| w.starts_with("GPU memory not checked")),
            "{command}: {doc:?}"
        );
    }

    // For people: a warning on stderr naming the rank, none for the others.
    let output = fx
        .cudackpt(&["suspend", &pids[0], &pids[1], &pids[2]])
        .assert()
        .code(0)
        .get_output()
        .clone();
    let (_, stderr) = texts(&output);
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("NCCL")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("warning") && warnings[0].contains(&pids[0]),
        "{stderr}"
    );
    fx.cudackpt(&["resume", &pids[0], &pids[1], &pids[2]])
        .assert()
        .code(0);
    assert_eq!(fx.state_of(&rank), "running");
}

#[test]
fn single_steps_that_only_lock_or_unlock_do_not_warn() {
    let fx = Fixture::new();
    let nccl = fx.nccl_cuda_target();
    let pid = nccl.arg();
    for command in ["lock", "unlock"] {
        let doc: ProcessCommandDoc = fx.json(&[command, &pid], 0);
        let p = doc.only(nccl.pid);
        assert!(p.ok, "{command}: {p:?}");
        assert!(p.warnings.is_empty(), "{command} warned: {p:?}");
        assert!(doc.warnings.is_empty(), "{command}: {doc:?}");
        // Undo, then again for people.
        let undo = if command == "lock" { "unlock" } else { "lock" };
        fx.cudackpt(&[undo, &pid]).assert().code(0);
        let output = fx
            .cudackpt(&[command, &pid])
            .assert()
            .code(0)
            .get_output()
            .clone();
        let (_, stderr) = texts(&output);
        assert!(!stderr.contains("NCCL"), "{command}: {stderr}");
    }
    assert_eq!(fx.state_of(&nccl), "running");
}

/// A rank found by a selector is flagged (and warned about) the same way as
/// one named by PID.
#[test]
fn a_nccl_process_found_by_tree_is_warned_about() {
    let fx = Fixture::new();
    let nccl = fx.nccl_cuda_target_with(&SOCKET_RANK);
    let doc: ProcessCommandDoc = fx.json(&["suspend", "--tree", &nccl.arg()], 0);
    let p = doc.only(nccl.pid);
    assert_eq!(p.nccl, Some(true));
    assert_eq!(nccl_warnings(p).len(), 1, "{p:?}");
    assert_eq!(fx.fake_state(nccl.pid), "checkpointed");
}
