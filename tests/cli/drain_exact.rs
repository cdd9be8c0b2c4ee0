//! The drain under crashes, deadlines and signals is exact (issue 23,
//! item 7): a kill -9 at every instant of a drain leaves an intent record
//! from which `recover` sends each rank what undoes its drain (nothing to
//! one never asked, one signal to one asked once); two `recover`s at once
//! act once; `--deadline` bounds the drain's waits; a signal during a
//! call-off is acted on at once; and the drain marker is believed only of a
//! process a cudackpt asked.
//!
//! Each rank (tests/fixtures/drain-target) writes a line per drain signal it takes,
//! so a test counts what each was sent: an even count is a rank whose
//! drain was undone (or never started).

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::drain::signals;
use crate::support::{send_signal, texts, thread_names, wait_until, Fixture, SpawnGuarded, Target};
use crate::wire::{Kind, ProcessCommandDoc};

const MARKER: &str = "cudackpt-drain1";

/// The launcher environment of a rank of a two-rank job.
const RANK: [(&str, &str); 1] = [("WORLD_SIZE", "2")];

fn shows_marker(pid: i32) -> bool {
    thread_names(pid).iter().any(|n| n == MARKER)
}

/// A rank whose watchdog thread is named, and its events file.
fn rank(fx: &Fixture, mode: &str) -> (Target, PathBuf) {
    let (target, events) = fx.drain_target(mode, &RANK);
    wait_until("the rank's watchdog thread", || {
        thread_names(target.pid)
            .iter()
            .any(|n| n == "pt_nccl_watchdg")
    });
    (target, events)
}

/// Runs `args` with a SIGKILL of cudackpt at `point` (see
/// `CUDACKPT_DEBUG_KILL_AT`), and checks that it died there.
fn killed_at(fx: &Fixture, point: &str, args: &[&str]) {
    let output = fx
        .std_command(args)
        .env("CUDACKPT_DEBUG_KILL_AT", point)
        .output()
        .expect("run cudackpt");
    assert_eq!(
        output.status.signal(),
        Some(9),
        "{point}: {args:?} was to die there: {output:?}"
    );
}

/// What a kill at each instant of a called-off drain must leave, once
/// `recover` has run: the signals each rank took in all, and whether
/// `recover` must say it could not settle one rank from its behaviour.
struct Expected {
    point: &'static str,
    ack: usize,
    ignore: usize,
    /// The rank `recover` names as a doubt (`Some("ack")`, `Some("ignore")`),
    /// `None` for none, `Some("either")` where it depends on timing.
    doubt: Option<&'static str>,
}

/// A kill -9 at each instant of `suspend --drain` of two ranks, one that
/// acknowledges and one that never reaches a safe point (so the drain is
/// called off): four signals, a kill before and after each. Before, the
/// record said only "requested", and `recover` sent the *first* request to
/// ranks never asked (a kill before the sends), which then drained and
/// stalled. Now the record is written before each send and says which one
/// was going, and every rank ends balanced, save where no record can know:
/// a rank that took a signal whose send cudackpt died in, and that never
/// reaches a safe point, cannot be told from one that did not; `recover`
/// then says so by name.
#[test]
fn a_kill_at_any_instant_of_a_drain_leaves_recover_an_exact_account() {
    let cases = [
        // The request to `ack` in doubt: it does not drain, so never asked.
        Expected {
            point: "before-signal:1",
            ack: 0,
            ignore: 0,
            doubt: Some("ack"),
        },
        // It drained: it had the request, and gets its rebuild.
        Expected {
            point: "after-signal:1",
            ack: 2,
            ignore: 0,
            doubt: None,
        },
        Expected {
            point: "before-signal:2",
            ack: 2,
            ignore: 0,
            doubt: Some("ignore"),
        },
        // The one instant no record can settle: `ignore` took the request
        // and never drains.
        Expected {
            point: "after-signal:2",
            ack: 2,
            ignore: 1,
            doubt: Some("ignore"),
        },
        // The call-off to `ack` did not go: its marker stays, so it is sent.
        Expected {
            point: "before-signal:3",
            ack: 2,
            ignore: 2,
            doubt: None,
        },
        Expected {
            point: "after-signal:3",
            ack: 2,
            ignore: 2,
            doubt: Some("either"),
        },
        // The call-off to `ignore`, which never drains: cannot be told.
        Expected {
            point: "before-signal:4",
            ack: 2,
            ignore: 1,
            doubt: Some("ignore"),
        },
        Expected {
            point: "after-signal:4",
            ack: 2,
            ignore: 2,
            doubt: Some("ignore"),
        },
    ];
    std::thread::scope(|scope| {
        for case in &cases {
            scope.spawn(move || kill_and_recover(case));
        }
    });
}

fn kill_and_recover(case: &Expected) {
    let point = case.point;
    let fx = Fixture::new();
    let (ack, ack_events) = rank(&fx, "ack");
    let (ignore, ignore_events) = rank(&fx, "ignore");
    killed_at(
        &fx,
        point,
        &[
            "suspend",
            "--drain",
            "--drain-timeout",
            "1s",
            &ack.arg(),
            &ignore.arg(),
        ],
    );
    assert_eq!(fx.intents().len(), 1, "{point}: the record stays");

    let output = fx
        .std_command(&["recover", "--json"])
        .output()
        .expect("recover");
    let (stdout, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(0), "{point}: {stdout}{stderr}");
    let doc: ProcessCommandDoc = serde_json::from_str(&stdout).expect("recover's document");
    assert!(fx.intents().is_empty(), "{point}: recovered");

    // Whatever is still on its way: the ack rank's rebuild.
    wait_until("the ack rank to drop its marker", || !shows_marker(ack.pid));
    assert_eq!(
        signals(&ack_events),
        case.ack,
        "{point}: the ack rank's signals"
    );
    assert_eq!(
        signals(&ignore_events),
        case.ignore,
        "{point}: the ignoring rank's signals"
    );
    let doubt_about = |pid: i32| {
        doc.warnings
            .iter()
            .any(|w| w.starts_with(&format!("PID {pid}: cudackpt died as it sent")))
    };
    match case.doubt {
        None => assert!(
            !doubt_about(ack.pid) && !doubt_about(ignore.pid),
            "{point}: {:?}",
            doc.warnings
        ),
        Some("ack") => assert!(doubt_about(ack.pid), "{point}: {:?}", doc.warnings),
        Some("ignore") => assert!(doubt_about(ignore.pid), "{point}: {:?}", doc.warnings),
        Some(_) => assert!(!doubt_about(ignore.pid), "{point}: {:?}", doc.warnings),
    }
    for target in [&ack, &ignore] {
        assert_eq!(fx.state_of(target), "running", "{point}");
    }
}

/// `recover` itself killed while it sends the rebuilds leaves the record
/// written as far as it got, and the next `recover` finishes the job: no
/// rank asked twice.
#[test]
fn a_recover_killed_midway_leaves_the_next_one_an_exact_account() {
    let fx = Fixture::new();
    let (a, a_events) = rank(&fx, "ack");
    let (b, b_events) = rank(&fx, "ack");
    // Both asked; both drain.
    killed_at(
        &fx,
        "after-signal:2",
        &["suspend", "--drain", &a.arg(), &b.arg()],
    );
    wait_until("both ranks to drain", || {
        shows_marker(a.pid) && shows_marker(b.pid)
    });
    // The first recover dies just after its first rebuild.
    killed_at(&fx, "after-signal:1", &["recover"]);
    assert_eq!(fx.intents().len(), 1, "the record stays for the next one");
    let doc: ProcessCommandDoc = fx.json(&["recover"], 0);
    assert!(fx.intents().is_empty(), "{doc:?}");
    wait_until("both ranks to rebuild", || {
        !shows_marker(a.pid) && !shows_marker(b.pid)
    });
    assert_eq!((signals(&a_events), signals(&b_events)), (2, 2));
}

/// Two `recover`s at once: the second finds the record taken and sends
/// nothing, saying who has it (exit 10, in use). Before, both signalled:
/// one rank was left drained and one drained twice.
#[test]
fn two_recovers_at_once_act_once() {
    let fx = Fixture::new();
    let (a, a_events) = rank(&fx, "ack");
    let (b, b_events) = rank(&fx, "ack");
    // The first asked (and drained); the record says the second request
    // was going (it was not), so the first recover watches that rank for
    // the drain timeout before it decides it was never asked.
    killed_at(
        &fx,
        "before-signal:2",
        &[
            "suspend",
            "--drain",
            "--drain-timeout",
            "3s",
            &a.arg(),
            &b.arg(),
        ],
    );
    let record = fx.intents().pop().expect("the record");
    let first = fx
        .std_command(&["recover"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn_guarded();
    let first_pid = first.id();
    let mut lock = record.into_os_string();
    lock.push(".lock");
    wait_until("the first recover to take the record", || {
        fs::read_to_string(&lock).is_ok_and(|t| t.trim() == first_pid.to_string())
    });
    let doc: ProcessCommandDoc = fx.json(&["recover"], 10);
    let error = doc.error.as_ref().expect("a command-level error");
    assert_eq!(error.kind, Kind::InUse, "{doc:?}");
    assert!(
        error.message.contains(&format!("cudackpt PID {first_pid}")),
        "{error:?}"
    );
    let output = first.wait_with_output().expect("the first recover");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    wait_until("the first rank to rebuild", || !shows_marker(a.pid));
    assert_eq!((signals(&a_events), signals(&b_events)), (2, 0));
}

/// `--deadline` bounds the drain's waits too: the wait for the
/// acknowledgements and the one for the rebuilds after the call-off.
/// Before, `suspend --drain --deadline 2s --drain-timeout 15s` took 17 s
/// and reported `drain_timeout`.
#[test]
fn the_deadline_bounds_the_drain_and_its_call_off() {
    let fx = Fixture::new();
    let (a, a_events) = rank(&fx, "stuck-rebuild");
    let (b, b_events) = rank(&fx, "ignore");
    let began = Instant::now();
    let doc: ProcessCommandDoc = fx.json(
        &[
            "suspend",
            "--drain",
            "--deadline",
            "2s",
            "--drain-timeout",
            "15s",
            &a.arg(),
            &b.arg(),
        ],
        1,
    );
    let took = began.elapsed();
    assert!(took < Duration::from_secs(10), "took {took:?}: {doc:?}");
    assert_eq!(doc.process(b.pid).kind(), Kind::DeadlineExceeded, "{doc:?}");
    // Each was still asked again: the call-off is sent whatever the time.
    assert_eq!((signals(&a_events), signals(&b_events)), (2, 2));
}

/// A signal to cudackpt while it waits for the rebuilds of a called-off
/// drain ends that wait at once (the call-offs are sent by then). Before,
/// it waited out the whole drain timeout.
#[test]
fn a_signal_during_a_call_off_is_acted_on_at_once() {
    let fx = Fixture::new();
    let (a, a_events) = rank(&fx, "stuck-rebuild");
    let (b, _) = rank(&fx, "ignore");
    let cudackpt = fx
        .std_command(&[
            "--json",
            "suspend",
            "--drain",
            "--drain-timeout",
            "4s",
            &a.arg(),
            &b.arg(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn_guarded();
    // The call-off: the stuck rank takes its second signal, and will never
    // drop its marker.
    wait_until("the call-off", || signals(&a_events) == 2);
    let signalled = Instant::now();
    send_signal(i32::try_from(cudackpt.id()).expect("pid"), "TERM");
    let output = cudackpt.wait_with_output().expect("reaped");
    let took = signalled.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "took {took:?} after SIGTERM; the wait had 4 s left"
    );
    // The drain's own failure stays the news (the rank that did not
    // answer), and the stuck rank's report says the wait was cut short.
    assert_eq!(output.status.code(), Some(12), "{output:?}");
    let doc: ProcessCommandDoc =
        serde_json::from_str(&String::from_utf8_lossy(&output.stdout)).expect("its document");
    let stuck = doc.process(a.pid);
    assert!(
        stuck
            .warnings
            .iter()
            .any(|w| w.starts_with("SIGTERM arrived while cudackpt waited for the rebuilds")),
        "{doc:?}"
    );
    assert!(fx.intents().is_empty(), "it ended: no record left");
}

/// The drain marker is a thread name any process can take. Before, a
/// plain `suspend` (no `--drain`) of a rank that named a thread
/// `cudackpt-drain1` set its launcher environment aside and checkpointed
/// it. Now the marker counts only where this command asked, or where a
/// cudackpt drained the process and left it drained (`lock --drain`, then
/// `checkpoint`).
#[test]
fn a_marker_nobody_asked_for_exempts_nothing() {
    let fx = Fixture::new();
    // No NCCL thread: only its launcher environment is held against it,
    // which only the marker could set aside.
    let (liar, _) = fx.drain_target("pretend", &RANK);
    let (honest, _) = rank(&fx, "ack");
    wait_until("the planted marker", || shows_marker(liar.pid));
    fx.take_calls();
    let doc: ProcessCommandDoc = fx.json(&["suspend", &liar.arg()], 8);
    let refused = doc.process(liar.pid);
    assert_eq!(refused.kind(), Kind::Unrestorable, "{doc:?}");
    assert!(
        refused
            .error
            .as_ref()
            .is_some_and(|e| e.message.contains("WORLD_SIZE=2")),
        "{doc:?}"
    );
    fx.assert_no_calls("a rank with a planted marker");

    // A rank drained at its lock by one command is checkpointed by the next.
    fx.json::<ProcessCommandDoc>(&["lock", "--drain", &honest.arg()], 0);
    let doc: ProcessCommandDoc = fx.json(&["checkpoint", &honest.arg()], 0);
    assert!(doc.process(honest.pid).error.is_none(), "{doc:?}");
    fx.json::<ProcessCommandDoc>(&["resume", &honest.arg()], 0);
    wait_until("the honest rank to rebuild", || !shows_marker(honest.pid));
}

/// Whether a target is stopped is asked again after the drain's wait,
/// before the first lock: the lock of a stopped process waits until it
/// runs (docs/driver-facts.md, F7). Before, it was asked only before the wait (up to the
/// drain timeout), and a rank stopped meanwhile was locked.
#[test]
fn a_rank_stopped_during_the_drain_calls_it_off_before_any_lock() {
    let fx = Fixture::new();
    let (quick, quick_events) = rank(&fx, "ack");
    let (late, _) = rank(&fx, "late");
    fx.take_calls();
    let cudackpt = fx
        .std_command(&["--json", "suspend", "--drain", &quick.arg(), &late.arg()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn_guarded();
    wait_until("the quick rank to drain", || shows_marker(quick.pid));
    send_signal(quick.pid, "STOP");
    let output = cudackpt.wait_with_output().expect("cudackpt");
    let doc: ProcessCommandDoc =
        serde_json::from_str(&String::from_utf8_lossy(&output.stdout)).expect("its document");
    assert_eq!(
        doc.process(quick.pid).kind(),
        Kind::ProcessStopped,
        "{doc:?}"
    );
    let changes = fx.state_changes();
    assert!(changes.is_empty(), "nothing locked: {changes:?}");
    // Continued, it takes the call-off and rebuilds.
    send_signal(quick.pid, "CONT");
    wait_until("the stopped rank to rebuild", || !shows_marker(quick.pid));
    assert_eq!(signals(&quick_events), 2);
}

/// Runs `resume` of a drained rank with a SIGKILL of cudackpt at `point`
/// of its rebuild, then `recover`: returns the rank, its events and
/// recover's exit status, with the driver calls made by `recover` alone.
fn resume_killed_then_recover(
    fx: &Fixture,
    mode: &str,
    point: &str,
) -> (Target, PathBuf, Option<i32>, Vec<String>) {
    let (rank, events) = rank(fx, mode);
    let doc: ProcessCommandDoc = fx.json(&["suspend", "--drain", &rank.arg()], 0);
    assert!(doc.ok, "{doc:?}");
    killed_at(fx, point, &["resume", "--drain-timeout", "2s", &rank.arg()]);
    assert_eq!(
        fx.state_of(&rank),
        "running",
        "{point}: the resume's calls were made"
    );
    assert_eq!(fx.intents().len(), 1, "{point}: the record stays");
    fx.take_calls();
    let output = fx
        .std_command(&["recover", "--json"])
        .output()
        .expect("recover");
    let changes = fx.state_changes();
    (rank, events, output.status.code(), changes)
}

/// A `resume` killed just after it sent the rebuild (and, before, while
/// the drained record still vouched for the marker) once let `recover`
/// lock and checkpoint a rank that was re-initialising NCCL: on a real
/// driver a checkpoint that never restores. Its driver calls had all
/// returned, so `recover` now finishes it forward: no driver call that
/// changes a state, the rank rebuilds once, the record goes, and nothing
/// vouches for a marker any more.
#[test]
fn a_resume_killed_after_its_rebuild_signal_is_finished_forward() {
    let fx = Fixture::new();
    let (rank, events, code, changes) = resume_killed_then_recover(&fx, "ack", "after-signal:1");
    assert_eq!(code, Some(0));
    assert_eq!(
        changes,
        Vec::<String>::new(),
        "nothing locked or checkpointed"
    );
    assert!(fx.intents().is_empty(), "the record is finished");
    wait_until("the rank to rebuild", || !shows_marker(rank.pid));
    assert_eq!(
        signals(&events),
        2,
        "a request and one rebuild: never asked twice"
    );
    assert_eq!(fx.state_of(&rank), "running");
    // Nothing vouches for a marker it might show again: a plain checkpoint
    // of it is refused like any rank's.
    let doc: ProcessCommandDoc = fx.json(&["suspend", &rank.arg()], 8);
    assert_eq!(doc.refusal(rank.pid).kind, Kind::Unrestorable);
}

/// A `resume` killed before its rebuild signal went (restore and unlock
/// had succeeded) once left a process nobody could touch: `recover` tried
/// to take it back to `checkpointed`, the pre-flight refused it as an NCCL
/// rank (exit 8), the record stayed, and every later command exited 10.
/// Now `recover` sends the rebuild the record says it is owed.
#[test]
fn a_resume_killed_before_its_rebuild_signal_is_finished_forward() {
    let fx = Fixture::new();
    let (rank, events, code, changes) = resume_killed_then_recover(&fx, "ack", "before-signal:1");
    assert_eq!(code, Some(0));
    assert_eq!(changes, Vec::<String>::new(), "nothing taken back");
    assert!(fx.intents().is_empty(), "the record is finished");
    wait_until("the rank to rebuild", || !shows_marker(rank.pid));
    assert_eq!(signals(&events), 2, "the rebuild went once");
    // And the rank is free for the next command.
    let doc: ProcessCommandDoc = fx.json(&["state", &rank.arg()], 0);
    assert!(doc.ok, "{doc:?}");
}

/// A record left by a `resume` of `rank` killed after its rebuild signal,
/// rewritten as a planted one would be: its drain waits 2^64 - 1 ms.
fn record_waiting_for_ever(fx: &Fixture, rank: &Target) -> PathBuf {
    let before: Vec<PathBuf> = fx.intents();
    let doc: ProcessCommandDoc = fx.json(&["suspend", "--drain", &rank.arg()], 0);
    assert!(doc.ok, "{doc:?}");
    killed_at(
        fx,
        "after-signal:1",
        &["resume", "--drain-timeout", "2s", &rank.arg()],
    );
    let record = fx
        .intents()
        .into_iter()
        .find(|p| !before.contains(p))
        .expect("the resume's record");
    let mut intent: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&record).expect("the record")).expect("JSON");
    intent["drain"]["timeout_ms"] = serde_json::json!(u64::MAX);
    fs::write(&record, intent.to_string()).expect("rewrite the record");
    record
}

/// A record whose drain would wait for ever (its rank never rebuilds) is
/// waited on no longer than `recover --drain-timeout` allows, and another
/// record beside it is finished all the same (records run side by side).
#[test]
fn a_record_that_would_wait_for_ever_holds_up_nothing() {
    let fx = Fixture::new();
    let (stuck, _) = rank(&fx, "stuck-rebuild");
    let planted = record_waiting_for_ever(&fx, &stuck);
    let (other, other_events) = rank(&fx, "ack");
    let doc: ProcessCommandDoc = fx.json(&["suspend", "--drain", &other.arg()], 0);
    assert!(doc.ok, "{doc:?}");
    killed_at(
        &fx,
        "after-signal:1",
        &["resume", "--drain-timeout", "2s", &other.arg()],
    );
    assert_eq!(fx.intents().len(), 2);
    let started = Instant::now();
    let output = fx
        .std_command(&["recover", "--json", "--drain-timeout", "1s"])
        .output()
        .expect("recover");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(20), "recover took {took:?}");
    let (stdout, _) = texts(&output);
    let doc: ProcessCommandDoc = serde_json::from_str(&stdout).expect("recover's document");
    // The stuck rank never rebuilt: said, exit 12.
    assert_eq!(output.status.code(), Some(12), "{stdout}");
    assert!(shows_marker(stuck.pid));
    assert!(doc.processes.iter().any(|p| p.pid == stuck.pid), "{stdout}");
    // The other record was finished: its rank rebuilt. Both records go
    // (one finished forward goes whatever the answers).
    wait_until("the other rank to rebuild", || !shows_marker(other.pid));
    assert_eq!(signals(&other_events), 2);
    assert!(!planted.exists());
    assert!(fx.intents().is_empty());
}

/// SIGTERM during `recover` ends it with its report (exit 143), saying it
/// stopped; the record it did not finish stays for the next one.
#[test]
fn a_signal_during_recover_ends_it_with_its_report() {
    let fx = Fixture::new();
    let (stuck, _) = rank(&fx, "stuck-rebuild");
    let planted = record_waiting_for_ever(&fx, &stuck);
    let recovering = fx
        .std_command(&["recover", "--json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("recover");
    // Once it waits for the rank's rebuild (it sent nothing new: the
    // record says the signal went).
    std::thread::sleep(Duration::from_millis(1500));
    send_signal(recovering.id() as i32, "TERM");
    let output = recovering.wait_with_output().expect("recover ends");
    let (stdout, _) = texts(&output);
    assert_eq!(output.status.code(), Some(143), "{stdout}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("one document");
    let message = doc["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("SIGTERM came: recover stopped"),
        "{doc:#}"
    );
    assert_eq!(fx.intents(), [planted], "the record stays");
}
