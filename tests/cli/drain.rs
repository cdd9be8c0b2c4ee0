//! The drain handshake (cudackpt(1), DRAIN PROTOCOL): fake ranks (tests/fixtures/drain-target, built on
//! the reference C client) play the protocol against the real binary and
//! the fake driver. A rank that acknowledges is checkpointed and rebuilds
//! on resume; one that does not catch the signal refuses the group before
//! any driver call or signal; one that never answers, dies, or answers but
//! keeps its NCCL thread calls the drain off with nothing locked; a killed
//! cudackpt leaves a record that `recover` turns into a rebuild.

use std::fs;
use std::process::Stdio;
use std::time::Duration;

use crate::support::{send_signal, texts, thread_names, wait_until, Fixture, SpawnGuarded, Target};
use crate::wire::{DrainOutcome, Kind, ProcessCommandDoc, State};

/// The launcher environment of a rank of a two-rank job.
const RANK: [(&str, &str); 1] = [("WORLD_SIZE", "2")];

/// What a drain target wrote, a line per event.
pub(crate) fn events(path: &std::path::Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// How many drain signals a rank has taken.
pub(crate) fn signals(events: &std::path::Path) -> usize {
    let mut path = events.as_os_str().to_owned();
    path.push(".signals");
    fs::read_to_string(path).unwrap_or_default().lines().count()
}

pub(crate) fn shows(pid: i32, name: &str) -> bool {
    thread_names(pid).iter().any(|n| n == name)
}

/// A rank ready to be looked at: its watchdog thread is named.
fn rank(fx: &Fixture, mode: &str) -> (Target, std::path::PathBuf) {
    let (target, events) = fx.drain_target(mode, &RANK);
    wait_until("the rank's watchdog thread", || {
        shows(target.pid, "pt_nccl_watchdg")
    });
    (target, events)
}

/// Where the drain handshake left a process, as its document says.
fn outcome_of(p: &crate::wire::ProcessDoc) -> Option<DrainOutcome> {
    p.drain.as_ref().map(|d| d.outcome)
}

#[test]
fn a_drained_job_is_checkpointed_and_rebuilds_on_resume() {
    let fx = Fixture::new();
    let (a, a_events) = rank(&fx, "ack");
    let (b, b_events) = rank(&fx, "ack");
    let (pa, pb) = (a.arg(), b.arg());

    // Not drained, the job is refused: its ranks would be lost.
    let refused: ProcessCommandDoc = fx.json(&["suspend", &pa, &pb], 8);
    assert_eq!(refused.process(a.pid).kind(), Kind::Unrestorable);
    fx.take_calls();

    let doc: ProcessCommandDoc = fx.json(&["suspend", "--drain", &pa, &pb], 0);
    for (target, events_file) in [(&a, &a_events), (&b, &b_events)] {
        let p = doc.process(target.pid);
        assert!(p.ok && p.state == State::Checkpointed, "{p:?}");
        let drain = p.drain.as_ref().expect("the drain is reported");
        assert_eq!(drain.signal, 40);
        assert_eq!(drain.outcome, DrainOutcome::Drained, "{p:?}");
        assert!(drain.acknowledged_ms.is_some(), "{p:?}");
        let exempted = drain.exempted.as_deref().unwrap_or_default();
        assert!(
            exempted.contains("acknowledged the drain") && exempted.contains("WORLD_SIZE=2"),
            "the report says what was set aside: {exempted}"
        );
        assert_eq!(events(events_file), ["ready", "released"]);
        assert!(shows(target.pid, "cudackpt-drain1"), "the marker stays");
        assert!(!shows(target.pid, "pt_nccl_watchdg"), "released");
    }
    let changes = fx.state_changes();
    assert_eq!(changes.len(), 4, "lock and checkpoint each: {changes:?}");

    let doc: ProcessCommandDoc = fx.json(&["resume", &pa, &pb], 0);
    for (target, events_file) in [(&a, &a_events), (&b, &b_events)] {
        let p = doc.process(target.pid);
        assert!(p.ok && p.state == State::Running, "{p:?}");
        let drain = p.drain.as_ref().expect("the rebuild is reported");
        assert_eq!(drain.outcome, DrainOutcome::Rebuilt, "{p:?}");
        assert!(drain.rebuilt_ms.is_some(), "{p:?}");
        assert_eq!(events(events_file), ["ready", "released", "rebuilt"]);
        assert!(!shows(target.pid, "cudackpt-drain1"), "the marker went");
        wait_until("the watchdog back", || shows(target.pid, "pt_nccl_watchdg"));
    }

    // For people: the result column says it.
    let output = fx
        .cudackpt(&["suspend", "--drain", &pa, &pb])
        .assert()
        .code(0)
        .get_output()
        .clone();
    let (stdout, _) = texts(&output);
    assert!(
        stdout.contains("running → checkpointed; drained ("),
        "{stdout}"
    );
    fx.cudackpt(&["resume", &pa, &pb]).assert().code(0);
}

#[test]
fn a_rank_that_does_not_catch_the_signal_refuses_the_group_before_any_call_or_signal() {
    let fx = Fixture::new();
    let (rank, rank_events) = rank(&fx, "ack");
    // A rank (its launcher's WORLD_SIZE) in `sleep`, which does not catch
    // signal 40, whose default action kills it.
    let bystander = fx.nccl_cuda_target_with(&RANK);
    fx.take_calls();

    let doc: ProcessCommandDoc = fx.json(&["suspend", "--drain", &rank.arg(), &bystander.arg()], 8);
    let refused = doc.process(bystander.pid);
    assert_eq!(refused.kind(), Kind::CannotDrain);
    let message = &refused.error.as_ref().expect("an error").message;
    assert!(
        message.contains("does not catch the drain signal, 40 (SIGRTMIN+6)")
            && message.contains(&format!("SigCgt in /proc/{}/status", bystander.pid))
            && message.contains("WORLD_SIZE=2")
            && message.contains("nothing was sent"),
        "{message}"
    );
    assert_eq!(outcome_of(refused), Some(DrainOutcome::CannotDrain));
    assert_eq!(doc.process(rank.pid).kind(), Kind::NotAttempted);
    fx.assert_no_calls("a process that cannot drain");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        events(&rank_events),
        ["ready"],
        "nothing was sent to the rank"
    );
    assert!(
        crate::support::proc_state(bystander.pid).is_some_and(|s| s != 'Z'),
        "the bystander was not signalled to death"
    );
}

#[test]
fn a_launcher_that_does_not_catch_the_signal_and_holds_nothing_is_left_out_and_checkpointed() {
    let fx = Fixture::new();
    // torchrun's agent: a CUDA process to the driver, no handler, no rank.
    let launcher = fx.cuda_target();
    let (r, r_events) = rank(&fx, "ack");
    let doc: ProcessCommandDoc = fx.json(&["suspend", "--drain", &launcher.arg(), &r.arg()], 0);
    let left_out = doc.process(launcher.pid);
    assert_eq!(left_out.state, State::Checkpointed, "{left_out:?}");
    assert_eq!(outcome_of(left_out), Some(DrainOutcome::NotNeeded));
    assert_eq!(outcome_of(doc.process(r.pid)), Some(DrainOutcome::Drained));
    assert!(
        crate::support::proc_state(launcher.pid).is_some_and(|s| s != 'Z'),
        "nothing was sent to it: signal 40 would have killed it"
    );
    let doc: ProcessCommandDoc = fx.json(&["resume", &launcher.arg(), &r.arg()], 0);
    assert_eq!(doc.process(launcher.pid).state, State::Running);
    assert!(
        doc.process(launcher.pid).drain.is_none(),
        "no marker, no rebuild"
    );
    assert_eq!(events(&r_events), ["ready", "released", "rebuilt"]);
}

#[test]
fn a_rank_that_never_acknowledges_calls_the_drain_off_and_nothing_is_locked() {
    let fx = Fixture::new();
    let (ready, ready_events) = rank(&fx, "ack");
    let (silent, _) = rank(&fx, "ignore");
    fx.take_calls();

    let doc: ProcessCommandDoc = fx.json(
        &[
            "suspend",
            "--drain",
            "--drain-timeout",
            "300ms",
            &ready.arg(),
            &silent.arg(),
        ],
        12,
    );
    let culprit = doc.process(silent.pid);
    assert_eq!(culprit.kind(), Kind::DrainTimeout);
    assert_eq!(outcome_of(culprit), Some(DrainOutcome::NotAcknowledged));
    assert!(
        culprit
            .error
            .as_ref()
            .expect("error")
            .message
            .contains("did not acknowledge the drain"),
        "{culprit:?}"
    );
    let other = doc.process(ready.pid);
    assert_eq!(other.kind(), Kind::NotAttempted);
    assert_eq!(
        outcome_of(other),
        Some(DrainOutcome::Rebuilt),
        "the rank that drained was asked to rebuild: {other:?}"
    );
    assert_eq!(events(&ready_events), ["ready", "released", "rebuilt"]);
    assert_eq!(fx.state_changes(), Vec::<String>::new(), "nothing locked");
    for target in [&ready, &silent] {
        assert_eq!(fx.state_of(target), "running");
    }
    assert!(!shows(ready.pid, "cudackpt-drain1"));
}

#[test]
fn a_rank_that_dies_mid_drain_calls_the_drain_off() {
    let fx = Fixture::new();
    let (survivor, survivor_events) = rank(&fx, "ack");
    let (dying, _) = rank(&fx, "die");
    fx.take_calls();
    let doc: ProcessCommandDoc = fx.json(&["suspend", "--drain", &survivor.arg(), &dying.arg()], 5);
    assert_eq!(doc.process(dying.pid).kind(), Kind::NoSuchProcess);
    let other = doc.process(survivor.pid);
    assert_eq!(other.kind(), Kind::NotAttempted);
    assert_eq!(outcome_of(other), Some(DrainOutcome::Rebuilt));
    assert_eq!(events(&survivor_events), ["ready", "released", "rebuilt"]);
    assert_eq!(fx.state_changes(), Vec::<String>::new(), "nothing locked");
    assert_eq!(fx.state_of(&survivor), "running");
}

#[test]
fn a_rank_that_acknowledges_but_keeps_its_nccl_thread_is_refused_on_evidence() {
    let fx = Fixture::new();
    let (liar, liar_events) = rank(&fx, "keep");
    let (honest, honest_events) = rank(&fx, "ack");
    fx.take_calls();
    let doc: ProcessCommandDoc = fx.json(&["suspend", "--drain", &liar.arg(), &honest.arg()], 8);
    let refused = doc.process(liar.pid);
    assert_eq!(refused.kind(), Kind::Unrestorable);
    let message = &refused.error.as_ref().expect("error").message;
    assert!(
        message.contains("it acknowledged the drain, yet")
            && message.contains("thread pt_nccl_watchdg")
            && !message.contains("WORLD_SIZE"),
        "the evidence, not the environment: {message}"
    );
    assert_eq!(doc.process(honest.pid).kind(), Kind::NotAttempted);
    for events_file in [&liar_events, &honest_events] {
        assert_eq!(events(events_file), ["ready", "released", "rebuilt"]);
    }
    assert_eq!(fx.state_changes(), Vec::<String>::new(), "nothing locked");
}

#[test]
fn a_marker_planted_before_any_request_gets_no_lie_past_the_evidence() {
    let fx = Fixture::new();
    let (liar, liar_events) = rank(&fx, "plant");
    wait_until("the planted marker", || shows(liar.pid, "cudackpt-drain1"));
    fx.take_calls();
    let doc: ProcessCommandDoc = fx.json(&["suspend", "--drain", &liar.arg()], 8);
    let refused = doc.process(liar.pid);
    assert_eq!(refused.kind(), Kind::Unrestorable);
    let message = &refused.error.as_ref().expect("error").message;
    // No cudackpt asked it or drained it: the marker buys it nothing, and
    // its launcher environment is held against it with its threads.
    assert!(
        !message.contains("acknowledged")
            && message.contains("pt_nccl_watchdg")
            && message.contains("WORLD_SIZE=2"),
        "{message}"
    );
    assert_eq!(events(&liar_events), ["ready"]);
    assert_eq!(fx.state_changes(), Vec::<String>::new(), "nothing locked");
}

#[test]
fn a_resume_with_a_signal_the_drained_process_does_not_catch_sends_nothing() {
    let fx = Fixture::new();
    let (r, r_events) = rank(&fx, "ack");
    fx.json::<ProcessCommandDoc>(&["suspend", "--drain", &r.arg()], 0);
    let doc: ProcessCommandDoc = fx.json(&["resume", "--drain-signal", "42", &r.arg()], 8);
    let p = doc.process(r.pid);
    assert_eq!(p.state, State::Running, "resumed: {p:?}");
    assert_eq!(p.kind(), Kind::CannotDrain);
    assert!(
        p.error
            .as_ref()
            .expect("error")
            .message
            .contains("does not catch signal 42 (SIGRTMIN+8)"),
        "{p:?}"
    );
    assert!(shows(r.pid, "cudackpt-drain1"), "still waiting to rebuild");
    // Asked again with its own signal: already running, and rebuilt.
    let doc: ProcessCommandDoc = fx.json(&["resume", &r.arg()], 0);
    assert_eq!(outcome_of(doc.process(r.pid)), Some(DrainOutcome::Rebuilt));
    assert_eq!(events(&r_events), ["ready", "released", "rebuilt"]);
}

#[test]
fn check_drain_predicts_and_sends_nothing() {
    let fx = Fixture::new();
    let (a, a_events) = rank(&fx, "ack");
    let (b, _) = rank(&fx, "ack");
    let doc: ProcessCommandDoc = fx.json(&["check", "--drain", &a.arg(), &b.arg()], 0);
    for target in [&a, &b] {
        let p = doc.process(target.pid);
        assert_eq!(outcome_of(p), Some(DrainOutcome::WouldDrain), "{p:?}");
        let note = p.note.as_deref().unwrap_or_default();
        assert!(
            note.contains("would drain (signal 40 (SIGRTMIN+6)), then lock"),
            "{note}"
        );
        assert!(
            p.warnings
                .iter()
                .any(|w| w.starts_with("the drain must release") && w.contains("pt_nccl_watchdg")),
            "what it must release: {p:?}"
        );
    }
    let bystander = fx.nccl_cuda_target_with(&RANK);
    let doc: ProcessCommandDoc = fx.json(&["check", "--drain", &a.arg(), &bystander.arg()], 8);
    assert_eq!(doc.process(bystander.pid).kind(), Kind::CannotDrain);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(events(&a_events), ["ready"], "a prediction sends nothing");
    assert_eq!(fx.state_changes(), Vec::<String>::new());
}

#[test]
fn a_rebuild_that_does_not_finish_is_reported_and_not_rolled_back() {
    let fx = Fixture::new();
    let (stuck, stuck_events) = rank(&fx, "stuck-rebuild");
    fx.json::<ProcessCommandDoc>(&["suspend", "--drain", &stuck.arg()], 0);
    let doc: ProcessCommandDoc = fx.json(&["resume", "--drain-timeout", "300ms", &stuck.arg()], 12);
    let p = doc.process(stuck.pid);
    assert_eq!(p.state, State::Running, "resumed, not rolled back: {p:?}");
    assert!(!p.rolled_back);
    assert_eq!(p.kind(), Kind::DrainTimeout);
    assert_eq!(outcome_of(p), Some(DrainOutcome::NotRebuilt));
    assert_eq!(events(&stuck_events), ["ready", "released"]);
}

#[test]
fn a_rank_drained_at_its_lock_is_checkpointed_by_the_single_step() {
    let fx = Fixture::new();
    let (r, r_events) = rank(&fx, "ack");
    let doc: ProcessCommandDoc = fx.json(&["lock", "--drain", &r.arg()], 0);
    assert_eq!(doc.process(r.pid).state, State::Locked);
    // The marker is the evidence the single step reads: no --drain needed.
    let doc: ProcessCommandDoc = fx.json(&["checkpoint", &r.arg()], 0);
    let p = doc.process(r.pid);
    assert_eq!(p.state, State::Checkpointed, "{p:?}");
    fx.json::<ProcessCommandDoc>(&["restore", &r.arg()], 0);
    let doc: ProcessCommandDoc = fx.json(&["unlock", &r.arg()], 0);
    assert_eq!(outcome_of(doc.process(r.pid)), Some(DrainOutcome::Rebuilt));
    assert_eq!(events(&r_events), ["ready", "released", "rebuilt"]);
}

#[test]
fn toggle_drain_suspends_a_running_rank_and_rebuilds_a_checkpointed_one() {
    let fx = Fixture::new();
    let (r, r_events) = rank(&fx, "ack");
    let doc: ProcessCommandDoc = fx.json(&["toggle", "--drain", &r.arg()], 0);
    assert_eq!(doc.process(r.pid).state, State::Checkpointed);
    assert_eq!(outcome_of(doc.process(r.pid)), Some(DrainOutcome::Drained));
    let doc: ProcessCommandDoc = fx.json(&["toggle", "--drain", &r.arg()], 0);
    assert_eq!(doc.process(r.pid).state, State::Running);
    assert_eq!(outcome_of(doc.process(r.pid)), Some(DrainOutcome::Rebuilt));
    assert_eq!(events(&r_events), ["ready", "released", "rebuilt"]);
}

#[test]
fn a_locked_process_that_has_not_drained_cannot_drain() {
    let fx = Fixture::new();
    let (r, r_events) = rank(&fx, "ack");
    fx.put_in(&r, "locked");
    fx.take_calls();
    let doc: ProcessCommandDoc = fx.json(&["suspend", "--drain", &r.arg()], 8);
    let p = doc.process(r.pid);
    assert_eq!(p.kind(), Kind::CannotDrain);
    assert!(p
        .error
        .as_ref()
        .expect("error")
        .message
        .contains("is locked"));
    assert_eq!(events(&r_events), ["ready"]);
    assert_eq!(fx.state_changes(), Vec::<String>::new());
}

/// `suspend --drain` of `group` in the background, its output discarded.
fn drain_in_background(fx: &Fixture, group: &[&Target]) -> crate::support::Guard {
    let mut args = vec!["suspend".to_string(), "--drain".to_string()];
    args.extend(group.iter().map(|t| t.arg()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fx.std_command(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn_guarded()
}

#[test]
fn a_cudackpt_killed_mid_drain_leaves_a_record_and_recover_calls_the_drain_off() {
    let fx = Fixture::new();
    let (ready, ready_events) = rank(&fx, "ack");
    let (silent, _) = rank(&fx, "ignore");
    let mut cudackpt = drain_in_background(&fx, &[&ready, &silent]);
    wait_until("the first rank to acknowledge", || {
        shows(ready.pid, "cudackpt-drain1")
    });
    cudackpt.kill().expect("SIGKILL cudackpt");
    cudackpt.wait().expect("reaped");

    let left = fx.intents();
    assert_eq!(left.len(), 1, "{left:?}");
    let record = fs::read_to_string(&left[0]).expect("the record");
    assert!(
        record.contains("\"drain\"") && record.contains("\"requested\""),
        "the record says a drain was under way: {record}"
    );
    // Every other cudackpt refuses the group until it is recovered, and
    // says so first: the rank still holding its NCCL thread would be
    // refused by the pre-flight too, whose advice (drain it) cannot help.
    let refused: ProcessCommandDoc = fx.json(&["suspend", &ready.arg(), &silent.arg()], 10);
    let reason = refused
        .process(ready.pid)
        .error
        .as_ref()
        .expect("a refusal");
    assert!(reason.message.contains("died mid-change"), "{refused:?}");

    let doc: ProcessCommandDoc = fx.json(&["recover"], 0);
    let p = doc.process(ready.pid);
    assert_eq!(outcome_of(p), Some(DrainOutcome::Rebuilt), "{doc:?}");
    assert_eq!(events(&ready_events), ["ready", "released", "rebuilt"]);
    assert!(!shows(ready.pid, "cudackpt-drain1"));
    assert!(fx.intents().is_empty(), "recover removes the record");
    for target in [&ready, &silent] {
        assert_eq!(fx.state_of(target), "running");
    }
}

#[test]
fn a_signal_to_cudackpt_mid_drain_calls_the_drain_off() {
    let fx = Fixture::new();
    let (ready, ready_events) = rank(&fx, "ack");
    let (silent, _) = rank(&fx, "ignore");
    let mut cudackpt = drain_in_background(&fx, &[&ready, &silent]);
    wait_until("the first rank to acknowledge", || {
        shows(ready.pid, "cudackpt-drain1")
    });
    send_signal(i32::try_from(cudackpt.id()).expect("pid"), "TERM");
    let status = cudackpt.wait().expect("reaped");
    assert_eq!(status.code(), Some(143), "SIGTERM (128 + 15): called off");
    assert_eq!(events(&ready_events), ["ready", "released", "rebuilt"]);
    assert!(fx.intents().is_empty(), "it ended: no record left");
    assert_eq!(fx.state_of(&ready), "running");
}

#[test]
fn a_drain_signal_nobody_can_catch_and_an_endless_wait_are_usage_errors() {
    let fx = Fixture::new();
    for args in [
        ["suspend", "--drain", "--drain-signal", "KILL", "1"],
        ["suspend", "--drain", "--drain-timeout", "0", "1"],
        ["suspend", "--drain", "--drain-signal", "33", "1"],
        // cudackpt's own durations need their unit (SPEC section 3).
        ["suspend", "--drain", "--drain-timeout", "5000", "1"],
    ] {
        let output = fx.cudackpt(&args).assert().code(2).get_output().clone();
        let (_, stderr) = texts(&output);
        assert!(
            stderr.contains(args[3]),
            "the offending text is quoted: {stderr}"
        );
        if args[3] == "5000" {
            assert!(
                stderr.contains("5000s") && stderr.contains("5000ms"),
                "the fix is named: {stderr}"
            );
        }
    }
}

/// cudackpt with no arguments, as CRIU runs an action script, with
/// `CUDACKPT_DRAIN=1` when `drain`.
fn criu_hook(fx: &Fixture, action: &str, init_pid: i32, drain: bool) -> std::process::Output {
    let mut command = fx.std_command(&[]);
    command
        .env("CRTOOLS_SCRIPT_ACTION", action)
        .env("CRTOOLS_INIT_PID", init_pid.to_string());
    if drain {
        command.env("CUDACKPT_DRAIN", "1");
    }
    command.output().expect("run the hook")
}

#[test]
fn criu_s_action_script_drains_at_pre_dump_and_rebuilds_at_post_resume() {
    let fx = Fixture::new();
    let (r, r_events) = rank(&fx, "ack");
    let refused = criu_hook(&fx, "pre-dump", r.pid, false);
    assert_eq!(refused.status.code(), Some(8), "{refused:?}");
    assert_eq!(fx.state_of(&r), "running");

    // The drain serves a dump: the process is told so first (the dump
    // notice, which it catches), and releases what only a dump needs gone.
    let drained = criu_hook(&fx, "pre-dump", r.pid, true);
    assert_eq!(drained.status.code(), Some(0), "{drained:?}");
    assert_eq!(fx.state_of(&r), "checkpointed");
    assert_eq!(events(&r_events), ["ready", "dump-notice", "released"]);

    // post-resume asks for the rebuild with or without the variable: the
    // marker says the process waits for it.
    let resumed = criu_hook(&fx, "post-resume", r.pid, false);
    assert_eq!(resumed.status.code(), Some(0), "{resumed:?}");
    assert_eq!(fx.state_of(&r), "running");
    assert_eq!(
        events(&r_events),
        ["ready", "dump-notice", "released", "rebuilt"]
    );

    // A suspend's drain is no dump: no notice, and the rebuild forgot the
    // last one.
    fx.json::<ProcessCommandDoc>(&["suspend", "--drain", &r.arg()], 0);
    fx.json::<ProcessCommandDoc>(&["resume", &r.arg()], 0);
    assert_eq!(
        events(&r_events)[4..],
        ["released".to_string(), "rebuilt".to_string()]
    );
    // Only the drain signal itself counted: the notice changed no count.
    assert_eq!(signals(&r_events), 4);
}

/// NVIDIA's grammar, as CRIU's CUDA plugin runs it, with CUDACKPT_DRAIN=1.
fn compat(fx: &Fixture, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut command = fx.std_command(args);
    command.env("CUDACKPT_DRAIN", "1").envs(env.iter().copied());
    command.output().expect("run cudackpt")
}

#[test]
fn the_compatible_grammar_honours_cudackpt_drain() {
    let fx = Fixture::new();
    let (r, r_events) = rank(&fx, "ack");
    let pid = r.arg();
    for action in ["lock", "checkpoint", "restore", "unlock"] {
        let output = compat(&fx, &["--action", action, "--pid", &pid], &[]);
        assert_eq!(output.status.code(), Some(0), "{action}: {output:?}");
        assert!(output.stdout.is_empty(), "NVIDIA's grammar prints nothing");
    }
    assert_eq!(events(&r_events), ["ready", "released", "rebuilt"]);
    assert_eq!(fx.state_of(&r), "running");

    // A signal the process does not catch: refused, exit 1, one line.
    let output = compat(
        &fx,
        &["--toggle", "--pid", &pid],
        &[("CUDACKPT_DRAIN_SIGNAL", "42")],
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let (_, stderr) = texts(&output);
    assert!(
        stderr.starts_with("cuda-checkpoint: ")
            && stderr.contains("does not catch the drain signal, 42 (SIGRTMIN+8)"),
        "{stderr}"
    );
    let output = compat(
        &fx,
        &["--toggle", "--pid", &pid],
        &[("CUDACKPT_DRAIN_SIGNAL", "nonsense")],
    );
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(texts(&output).1.contains("CUDACKPT_DRAIN_SIGNAL"));
    assert_eq!(fx.state_of(&r), "running");
    assert_eq!(events(&r_events), ["ready", "released", "rebuilt"]);
}

#[test]
fn a_stopped_process_cannot_drain_and_is_not_waited_for() {
    let fx = Fixture::new();
    let (r, r_events) = rank(&fx, "ack");
    send_signal(r.pid, "STOP");
    wait_until("the rank to stop", || {
        crate::support::proc_state(r.pid) == Some('T')
    });
    fx.take_calls();
    let output = compat(&fx, &["--action", "lock", "--pid", &r.arg()], &[]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let (_, stderr) = texts(&output);
    assert!(stderr.contains("is stopped"), "{stderr}");
    send_signal(r.pid, "CONT");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(events(&r_events), ["ready"], "nothing was sent");
    assert_eq!(fx.state_changes(), Vec::<String>::new());
}

/// A rank whose rebuild fails says so through the protocol (its marker
/// thread renamed `cudackpt-fail1`): cudackpt reports it `rebuild_failed`
/// (exit 13) with the reason, never `rebuilt`, and rolls nothing back.
#[test]
fn a_rank_whose_rebuild_fails_is_reported_as_such() {
    let fx = Fixture::new();
    let (target, log) = rank(&fx, "fail-rebuild");
    let doc: ProcessCommandDoc = fx.json(&["suspend", "--drain", &target.arg()], 0);
    assert_eq!(
        outcome_of(doc.process(target.pid)),
        Some(DrainOutcome::Drained)
    );
    let doc: ProcessCommandDoc = fx.json(&["resume", &target.arg()], 13);
    let process = doc.process(target.pid);
    assert_eq!(
        outcome_of(process),
        Some(DrainOutcome::RebuildFailed),
        "{doc:?}"
    );
    let error = process.error.clone().expect("a failure");
    assert_eq!(error.kind, Kind::RebuildFailed);
    assert!(error.message.contains("cudackpt-fail1"), "{error:?}");
    // The rank's own words (its error memfd), whole in JSON, escaped in
    // the message a terminal may show.
    let said = "NCCL error: remote process exited\u{1b}[2J";
    let drain = process.drain.as_ref().expect("a drain report");
    assert_eq!(drain.rebuild_error.as_deref(), Some(said), "{doc:?}");
    assert!(
        error
            .message
            .contains(r#"failed: "NCCL error: remote process exited\x1b[2J""#),
        "{error:?}"
    );
    assert_eq!(
        process.state,
        crate::wire::State::Running,
        "nothing rolled back"
    );
    assert!(events(&log).iter().any(|e| e == "rebuild-failed"));
    assert!(shows(target.pid, "cudackpt-fail1"));
}
