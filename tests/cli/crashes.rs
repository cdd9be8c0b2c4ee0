//! A bug or a crash in the middle of a group: a panic (a debug build's
//! `CUDACKPT_DEBUG_PANIC_AFTER`), and an abort inside a driver call (what
//! the release build, `panic = "abort"`, does on a panic, and what a driver
//! that crashes its caller does). Either way the group's intent record
//! stays, every cudackpt refuses its processes (exit 10) until `cudackpt
//! recover` puts them back, and nobody is left locked or checkpointed.

use std::os::unix::process::ExitStatusExt;

use crate::support::{texts, Fixture, Target};
use crate::wire::{Kind, ProcessCommandDoc, State};

/// What the crash left is named by its record, refused until `recover`,
/// and then put back: every process running, the record gone.
fn refused_until_recovered(fx: &Fixture, group: &[Target]) {
    let left = fx.intents();
    assert_eq!(left.len(), 1, "the intent record stays: {left:?}");
    let states: Vec<String> = group.iter().map(|t| fx.fake_state(t.pid)).collect();
    assert!(
        states.iter().any(|s| s != "running"),
        "the crash came mid-change: {states:?}"
    );
    for target in group {
        let doc: ProcessCommandDoc = fx.json(&["resume", &target.arg()], 10);
        assert_eq!(doc.process(target.pid).error().kind, Kind::NeedsRecovery);
    }
    let doc: ProcessCommandDoc = fx.json(&["recover"], 0);
    assert!(doc.processes.iter().all(|p| p.state == State::Running));
    for target in group {
        assert_eq!(fx.fake_state(target.pid), "running");
    }
    assert!(fx.intents().is_empty(), "recover removes the record");
}

fn suspend(fx: &Fixture, group: &[Target]) -> std::process::Command {
    let mut args = vec!["--json".to_string(), "suspend".to_string()];
    args.extend(group.iter().map(Target::arg));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fx.std_command(&args)
}

#[test]
fn a_panic_mid_group_keeps_the_record_and_says_how_to_recover() {
    if !cfg!(debug_assertions) {
        crate::support::prerequisite(
            "panic on purpose (a release build has no CUDACKPT_DEBUG_PANIC_AFTER)",
            false,
        );
        return;
    }
    let fx = Fixture::new();
    let group: Vec<Target> = (0..3).map(|_| fx.cuda_target()).collect();
    let output = suspend(&fx, &group)
        .env("CUDACKPT_DEBUG_PANIC_AFTER", "checkpoint")
        .output()
        .expect("suspend");
    let (stdout, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(101), "a panic: {stderr}");
    assert!(stdout.is_empty(), "no half document: {stdout}");
    assert!(
        stderr.contains("a deliberate panic after a checkpoint call"),
        "{stderr}"
    );
    let record = fx.intents().pop().expect("a record");
    assert!(
        stderr.contains(&format!("its intent record {}", record.display()))
            && stderr.contains("`cudackpt recover`"),
        "the panic says what it left and what to run: {stderr}"
    );
    refused_until_recovered(&fx, &group);
}

#[test]
fn an_abort_inside_a_driver_call_keeps_the_record_for_recover() {
    let fx = Fixture::new();
    let group: Vec<Target> = (0..3).map(|_| fx.cuda_target()).collect();
    let output = suspend(&fx, &group)
        .env(
            "FAKE_CUDA_INJECT",
            format!("checkpoint@{}=abort", group[1].pid),
        )
        .output()
        .expect("suspend");
    assert_eq!(
        output.status.signal(),
        Some(6),
        "cudackpt died of SIGABRT (6) inside the call: {:?}",
        output.status
    );
    refused_until_recovered(&fx, &group);
}

/// An intent record that cannot be written does not stop the command, but
/// the report says what it means: a crash now would leave nothing for
/// `recover`. (It was a log line, off by default.)
#[test]
fn an_intent_record_that_cannot_be_written_is_said() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let records = fx.dir().join("records");
    std::fs::create_dir_all(&records).expect("records");
    std::fs::write(records.join("intents"), "not a directory").expect("a file in the way");
    let doc: ProcessCommandDoc = fx.json(&["suspend", &target.arg()], 0);
    assert_eq!(doc.process(target.pid).state, State::Checkpointed);
    assert!(
        doc.warnings
            .iter()
            .any(|w| w.starts_with("could not write the intent record")
                && w.contains("`cudackpt recover` would not have known")),
        "{doc:?}"
    );
}

/// A cudackpt killed between a record's temporary file and its rename
/// leaves `.PID.json.RANDOM.tmp`, which no reader looks at: `recover`
/// removes it once its writer is dead, and leaves a live writer's alone.
#[test]
fn recover_sweeps_the_half_written_records_of_dead_writers() {
    use std::os::unix::fs::PermissionsExt;
    let fx = Fixture::new();
    let intents = fx.dir().join("records").join("intents");
    std::fs::create_dir_all(&intents).expect("intents");
    for dir in [fx.dir().join("records"), intents.clone()] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("0700");
    }
    // Above any pid_max the kernel allows: never a live process.
    let dead = intents.join(".4194305.json.00ff12ab34cd56ef.tmp");
    let live = intents.join(format!(".{}.json.00ff12ab34cd56ef.tmp", std::process::id()));
    for planted in [&dead, &live] {
        std::fs::write(planted, "{\"half\":").expect("plant");
    }
    // A link planted under a temporary's name goes itself, never what it
    // leads to.
    let precious = fx.dir().join("precious");
    std::fs::write(&precious, "keep").expect("a file of root's");
    let link = intents.join(".4194306.json.00ff12ab34cd56ef.tmp");
    std::os::unix::fs::symlink(&precious, &link).expect("plant a link");
    let _: ProcessCommandDoc = fx.json(&["recover", "--dry-run"], 0);
    assert!(dead.exists(), "a dry run removes nothing");
    let _: ProcessCommandDoc = fx.json(&["recover"], 0);
    assert!(!dead.exists(), "the dead writer's temporary is swept");
    assert!(live.exists(), "a live writer's is left alone");
    assert!(
        link.symlink_metadata().is_err(),
        "the planted link is swept"
    );
    assert_eq!(
        std::fs::read_to_string(&precious).expect("still there"),
        "keep"
    );
}
