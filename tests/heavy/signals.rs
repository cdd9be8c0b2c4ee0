//! Signals always end in a known state. One signal rolls the group back
//! and exits 128 + its number, as a shell reports a process a signal ended
//! (SIGTERM 143, SIGINT 130), whichever signal asks it to stop (SIGQUIT,
//! SIGUSR1, SIGXCPU...); a second signal stops at
//! once with a status of its own (11) after saying where each process was
//! left; and a lock with no timeout still notices a signal within about a
//! second.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{
    parse_one_document, send_signal, thread_names, wait_until, Fixture, Guard, SpawnGuarded, Target,
};
use crate::wire::{Kind, ProcessCommandDoc};

/// Starts `suspend` of the group with slow checkpoints, and waits until
/// every lock is done (the checkpoints then are in flight).
fn suspend_in_flight(fx: &Fixture, group: &[Target], delay_ms: u32) -> Guard {
    let mut args = vec!["--json".to_string(), "suspend".to_string()];
    args.extend(group.iter().map(Target::arg));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let child = fx
        .std_command(&args)
        .env("FAKE_CUDA_INJECT", format!("checkpoint=delay:{delay_ms}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_guarded();
    wait_until("every lock", || {
        fx.calls().iter().filter(|c| c.short() == "lock 0").count() == group.len()
    });
    child
}

/// Puts every process back to running, whatever a run left.
fn reset(fx: &Fixture, group: &[Target]) {
    let mut args = vec!["resume".to_string()];
    args.extend(group.iter().map(Target::arg));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fx.cudackpt(&args).assert().success();
    fx.take_calls();
}

#[test]
fn two_signals_0_to_98_ms_apart_always_say_where_every_process_is() {
    let fx = Fixture::new();
    let group: Vec<Target> = (0..3).map(|_| fx.cuda_target()).collect();
    let (mut rolled_back, mut abandoned) = (0, 0);
    for run in 0..50u64 {
        fx.take_calls();
        let child = suspend_in_flight(&fx, &group, 120);
        let pid = i32::try_from(child.id()).expect("pid");
        send_signal(pid, "TERM");
        std::thread::sleep(Duration::from_millis(run * 2));
        send_signal(pid, "TERM");
        let output = child.wait_with_output().expect("exits");
        let stderr = String::from_utf8_lossy(&output.stderr);
        match output.status.code() {
            Some(143) => {
                rolled_back += 1;
                for t in &group {
                    assert_eq!(fx.fake_state(t.pid), "running", "run {run}: {stderr}");
                }
                let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
                assert!(
                    doc.processes.iter().all(|p| p.rolled_back),
                    "run {run}: {doc:?}"
                );
            }
            Some(11) => {
                abandoned += 1;
                assert!(stderr.contains("SIGTERM again"), "run {run}: {stderr}");
                for t in &group {
                    let line = stderr
                        .lines()
                        .find(|l| l.contains(&format!("PID {} ", t.pid)))
                        .unwrap_or_else(|| panic!("run {run}: PID {} not named: {stderr}", t.pid));
                    let said = ["running", "locked", "checkpointed"]
                        .into_iter()
                        .find(|s| line.contains(&format!("): {s}")))
                        .unwrap_or_else(|| panic!("run {run}: no state in {line:?}"));
                    let now = fx.fake_state(t.pid);
                    // A call in flight died with cudackpt: it did not happen,
                    // or it had just happened.
                    let in_flight = line.contains("in flight");
                    assert!(
                        now == said || (in_flight && now != "running"),
                        "run {run}: PID {} said {said:?}, is {now:?}: {line}",
                        t.pid
                    );
                }
            }
            other => panic!("run {run}: exit {other:?}: {stderr}"),
        }
        if output.status.code() == Some(11) {
            // Abandoned mid-change: the intent record stays, and `recover`
            // puts everyone back where they started.
            assert!(stderr.contains("cudackpt recover"), "run {run}: {stderr}");
            let doc: ProcessCommandDoc = fx.json(&["recover"], 0);
            for t in &group {
                assert_eq!(fx.fake_state(t.pid), "running", "run {run}: {doc:?}");
            }
        }
        reset(&fx, &group);
    }
    eprintln!("two signals: {rolled_back} rolled back (143), {abandoned} abandoned (11)");
    assert!(rolled_back + abandoned == 50);
}

/// Every signal that asks cudackpt to stop, not only SIGTERM: batch
/// systems warn with SIGUSR1/SIGUSR2 or SIGXCPU, `timeout -s` sends any.
#[test]
fn every_stop_signal_rolls_back_like_sigterm() {
    let fx = Fixture::new();
    let group: Vec<Target> = (0..2).map(|_| fx.cuda_target()).collect();
    // Each with the status 128 + its number (x86-64 Linux's numbers).
    let signals = [
        ("QUIT", 131),
        ("USR1", 138),
        ("USR2", 140),
        ("ALRM", 142),
        ("XCPU", 152),
        ("XFSZ", 153),
        ("PWR", 158),
    ];
    for run in 0..49 {
        let (signal, status) = signals[run % signals.len()];
        fx.take_calls();
        let child = suspend_in_flight(&fx, &group, 60);
        send_signal(i32::try_from(child.id()).expect("pid"), signal);
        let output = child.wait_with_output().expect("exits");
        assert_eq!(
            output.status.code(),
            Some(status),
            "run {run}, SIG{signal}: {output:?}"
        );
        for t in &group {
            assert_eq!(fx.fake_state(t.pid), "running", "run {run}, SIG{signal}");
        }
        let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
        let named = format!("SIG{signal}");
        assert!(
            doc.processes
                .iter()
                .any(|p| p.error.as_ref().is_some_and(|e| e.message.contains(&named))),
            "run {run}: {doc:?}"
        );
    }
}

#[test]
fn a_lock_with_no_timeout_notices_a_signal_within_a_slice() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let child = fx
        .std_command(&["--json", "suspend", &target.arg()])
        .env("FAKE_CUDA_INJECT", "lock=busy:60000")
        .stdout(Stdio::piped())
        .spawn_guarded();
    wait_until("the first lock attempt", || {
        fx.calls().iter().any(|c| c.op == "lock")
    });
    std::thread::sleep(Duration::from_millis(300));
    let signalled = Instant::now();
    send_signal(i32::try_from(child.id()).expect("pid"), "TERM");
    let output = child.wait_with_output().expect("exits");
    let took = signalled.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "a signal waited {took:?} for a lock"
    );
    assert_eq!(output.status.code(), Some(143), "SIGTERM: 128 + 15");
    let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
    let error = doc.process(target.pid).error();
    assert_eq!(error.kind, Kind::Interrupted, "{error:?}");
    assert_eq!(fx.fake_state(target.pid), "running");
}

/// A lock of one process is one short call: no watcher thread starts (it
/// would cost a sixteenth of the command), and the signal is read between
/// the lock's slices, rolling back as ever.
#[test]
fn a_single_lock_reads_its_signal_without_a_watcher_thread() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let child = fx
        .std_command(&["--json", "lock", &target.arg()])
        .env("FAKE_CUDA_INJECT", "lock=busy:60000")
        .stdout(Stdio::piped())
        .spawn_guarded();
    wait_until("the first lock attempt", || {
        fx.calls().iter().any(|c| c.op == "lock")
    });
    let threads = thread_names(i32::try_from(child.id()).expect("pid"));
    assert!(
        !threads.iter().any(|t| t == "signals"),
        "no watcher thread for one short call: {threads:?}"
    );
    send_signal(i32::try_from(child.id()).expect("pid"), "TERM");
    let signalled = Instant::now();
    let output = child.wait_with_output().expect("exits");
    assert!(
        signalled.elapsed() < Duration::from_secs(3),
        "noticed within a slice"
    );
    assert_eq!(output.status.code(), Some(143), "SIGTERM: 128 + 15");
    let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
    assert_eq!(doc.process(target.pid).error().kind, Kind::Interrupted);
    assert_eq!(fx.fake_state(target.pid), "running");
}

/// Two signals during one short call: the slice in flight finishes, then
/// cudackpt stops without rolling back (exit 11) and says where the process
/// is, and that no intent record was written (there is nothing to recover).
#[test]
fn two_signals_during_a_single_lock_abandon_after_the_slice_and_say_where() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let child = fx
        .std_command(&["lock", &target.arg()])
        .env("FAKE_CUDA_INJECT", "lock=busy:60000")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn_guarded();
    // The first slice is logged when it ends; the second is then in flight.
    wait_until("the first lock slice", || {
        fx.calls().iter().any(|c| c.op == "lock")
    });
    let pid = i32::try_from(child.id()).expect("pid");
    send_signal(pid, "TERM");
    std::thread::sleep(Duration::from_millis(100));
    send_signal(pid, "INT");
    let signalled = Instant::now();
    let output = child.wait_with_output().expect("exits");
    assert!(
        signalled.elapsed() < Duration::from_secs(3),
        "within a slice"
    );
    assert_eq!(output.status.code(), Some(11), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("PID {} (sleep): ", target.pid))
            && stderr.contains("(lock was in flight")
            && stderr.contains("one call, so no intent record")
            && !stderr.contains("recover"),
        "{stderr}"
    );
    assert_eq!(fx.fake_state(target.pid), "running");
}

/// Anything longer than one short call has its signals watched by a thread
/// (a second signal must not wait for a checkpoint of many GiB).
#[test]
fn a_suspend_has_a_watcher_thread() {
    let fx = Fixture::new();
    let group: Vec<Target> = (0..1).map(|_| fx.cuda_target()).collect();
    let child = suspend_in_flight(&fx, &group, 600);
    let pid = i32::try_from(child.id()).expect("pid");
    // The thread names itself once it runs, which a loaded host may delay.
    wait_until("the watcher thread", || {
        thread_names(pid).iter().any(|t| t == "signals")
    });
    let output = child.wait_with_output().expect("exits");
    assert_eq!(output.status.code(), Some(0));
    reset(&fx, &group);
}
