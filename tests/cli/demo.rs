//! `demo`: the self-checkpoint round trip, its data check, and the doctor's
//! diagnosis when the host cannot checkpoint.

use crate::support::{fake_uuid, texts, Fixture};
use crate::wire::{DemoDoc, Kind};

const ROUND_TRIP: [&str; 6] = [
    "fill",
    "lock→locked",
    "checkpoint→checkpointed",
    "restore→locked",
    "unlock→running",
    "verify",
];

#[test]
fn demo_round_trip_keeps_the_data() {
    let fx = Fixture::new();
    let doc: DemoDoc = fx.json(&["demo", "--size-mib", "4"], 0);
    assert_eq!(doc.data_intact, Some(true));
    // The proof, as NVIDIA's processCheckpoint sample shows it: the hash
    // before and after.
    let before = doc.hash_before.clone().expect("the hash before");
    assert_eq!(before.len(), 16);
    assert_eq!(doc.hash_after.as_ref(), Some(&before));
    assert_eq!(doc.size_bytes, 4 << 20);
    assert_eq!(doc.step_names(), ROUND_TRIP);
    let gpu = doc.gpu.as_ref().expect("the GPU used");
    assert_eq!(gpu.uuid, format!("GPU-{}", fake_uuid(0)));
    // The demo checkpoints itself, one step at a time.
    let calls = fx.take_calls();
    assert!(
        calls.iter().all(|c| c.pid == doc.pid && c.code == 0),
        "{calls:?}"
    );
    let steps: Vec<&str> = calls
        .iter()
        .filter(|c| c.op != "get_state")
        .map(|c| c.op.as_str())
        .collect();
    assert_eq!(steps, ["lock", "checkpoint", "restore", "unlock"]);

    let output = fx
        .cudackpt(&["demo", "--size-mib", "4"])
        .assert()
        .success()
        .stderr("")
        .get_output()
        .clone();
    let (stdout, _) = texts(&output);
    assert!(
        stdout.contains(&format!("pattern written, hash {before}")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("data intact, hash {before}")),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("PASS: 4 MiB of GPU memory survived checkpoint and restore\n"),
        "{stdout}"
    );
}

#[test]
fn demo_catches_a_restore_that_corrupts_memory() {
    let fx = Fixture::new();
    let doc: DemoDoc = fx.json_with_inject(&["demo", "--size-mib", "2"], "restore=corrupt", 1);
    assert_eq!(doc.data_intact, Some(false));
    assert!(doc.error.is_none());
    assert!(doc.hash_before.is_some() && doc.hash_after.is_some());
    assert_ne!(
        doc.hash_before, doc.hash_after,
        "the hashes show the change"
    );
    let verify = doc.steps.last().expect("steps");
    assert_eq!((verify.step.as_str(), verify.ok), ("verify", false));

    let output = fx
        .cudackpt(&["demo", "--size-mib", "2"])
        .env("FAKE_CUDA_INJECT", "restore=corrupt")
        .assert()
        .code(1)
        .get_output()
        .clone();
    let (stdout, _) = texts(&output);
    assert!(
        stdout.contains("DATA CHANGED") && stdout.ends_with("FAIL\n"),
        "{stdout}"
    );
}

#[test]
fn demo_reports_a_failed_step_and_leaves_itself_running() {
    let fx = Fixture::new();
    let doc: DemoDoc = fx.json_with_inject(&["demo", "--size-mib", "1"], "checkpoint=error:999", 1);
    let error = doc.error.as_ref().expect("an error");
    assert_eq!(error.kind, Kind::DriverError);
    assert_eq!(error.code, Some(999));
    assert_eq!(doc.data_intact, None);
    assert_eq!(
        doc.step_names(),
        ["fill", "lock→locked", "checkpoint!→locked"]
    );
    let calls = fx.take_calls();
    let last = calls
        .iter()
        .rev()
        .find(|c| c.op != "get_state")
        .expect("calls");
    assert_eq!(last.short(), "unlock 0", "undone: {calls:?}");
}

#[test]
fn demo_without_a_driver_exits_7_with_the_doctors_diagnosis() {
    let fx = Fixture::new();
    let doc: DemoDoc = fx.json(&["--libcuda", "/nonexistent/libcuda.so", "demo"], 7);
    assert_eq!(
        doc.error.as_ref().map(|e| e.kind),
        Some(Kind::DriverUnavailable)
    );
    assert!(doc.gpu.is_none() && doc.steps.is_empty() && doc.data_intact.is_none());

    let output = fx
        .cudackpt(&["--libcuda", "/nonexistent/libcuda.so", "demo"])
        .assert()
        .code(7)
        .get_output()
        .clone();
    let (stdout, stderr) = texts(&output);
    assert!(stdout.ends_with("FAIL\n"), "{stdout}");
    assert!(
        stderr.contains("/nonexistent/libcuda.so")
            && stderr.contains("doctor: driver library:")
            && stderr.contains("hint:"),
        "{stderr}"
    );
}
