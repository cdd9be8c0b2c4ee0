//! Crash-safe groups: `kill -9` of cudackpt at varied moments of a
//! 4-process suspend, many times. Each time: the intent record stays, any
//! later cudackpt on those processes refuses (`needs_recovery`, exit 10)
//! until `cudackpt recover`, which brings every process back to running and
//! removes the record. Nobody is left locked or checkpointed.

use std::process::Stdio;
use std::time::Duration;

use crate::support::{send_signal, wait_until, Fixture, SpawnGuarded, Target};
use crate::wire::{Kind, ProcessCommandDoc, State};

/// The fake's state of `pid`: its record is replaced whole, so a caller
/// killed at any instant leaves one that reads.
fn state(fx: &Fixture, pid: i32) -> String {
    fx.fake_state(pid)
}

/// How many entries `dir` holds (none when it is not there).
fn entries(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

/// The intent records in `dir`: `PID.json`, not a writer's temporary.
fn records(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(".json") && !n.starts_with('.'))
        })
        .collect()
}

#[test]
fn kill_9_at_every_step_of_a_group_suspend_then_recover() {
    let fx = Fixture::new();
    let group: Vec<Target> = (0..4).map(|_| fx.cuda_target()).collect();
    let pids: Vec<String> = group.iter().map(Target::arg).collect();
    let intents = fx.dir().join("records").join("intents");
    let (mut killed, mut finished) = (0, 0);
    for run in 0..20u64 {
        fx.take_calls();
        let mut args = vec!["--json", "suspend"];
        args.extend(pids.iter().map(String::as_str));
        let child = fx
            .std_command(&args)
            .env("FAKE_CUDA_INJECT", "checkpoint=delay:150;lock=delay:40")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn_guarded();
        // Somewhere between the first lock and the last checkpoint.
        wait_until("the first lock", || {
            fx.calls().iter().any(|c| c.op == "lock")
        });
        std::thread::sleep(Duration::from_millis((run * 13) % 200));
        send_signal(i32::try_from(child.id()).expect("pid"), "KILL");
        let status = child.wait_with_output().expect("exits").status;
        if status.success() {
            // It finished before the kill: done as asked, its record gone.
            assert!(entries(&intents) == 0);
            let mut back = vec!["resume"];
            back.extend(pids.iter().map(String::as_str));
            fx.cudackpt(&back).assert().success();
            finished += 1;
            continue;
        }
        // The records: a kill between a record's temporary file and its
        // rename leaves the temporary too, which recover sweeps.
        let records = records(&intents);
        let left = records.len();
        let states: Vec<String> = group.iter().map(|t| state(&fx, t.pid)).collect();
        let all = |s: &str| states.iter().all(|x| x == s);
        // Either the record is there, or the group is whole: nothing moved,
        // or all done (killed after its work and its record's removal).
        assert!(
            left == 1 || all("running") || all("checkpointed"),
            "run {run}: processes left {states:?} with no intent record"
        );
        if left == 0 && all("checkpointed") {
            let mut back = vec!["resume"];
            back.extend(pids.iter().map(String::as_str));
            fx.cudackpt(&back).assert().success();
            finished += 1;
            continue;
        }
        killed += 1;
        if left == 1 {
            let record = &records[0];
            let intent: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(record).expect("read"))
                    .expect("json");
            assert_eq!(intent["command"], "suspend", "run {run}: {intent}");
            assert!(
                intent["owner_pid"].as_i64().is_some_and(|p| p > 0),
                "{intent}"
            );
            assert!(intent["owner_starttime"].as_u64().is_some(), "{intent}");
            let members = intent["members"].as_array().expect("members");
            assert_eq!(members.len(), group.len(), "{intent}");
            for member in members {
                assert_eq!(member["start"], "running", "{intent}");
                assert_eq!(
                    member["plan"],
                    serde_json::json!(["lock", "checkpoint"]),
                    "{intent}"
                );
            }
            let listing: ProcessCommandDoc = fx.json(&["ps", "--tree", &pids[0]], 0);
            let owner = listing.process(group[0].pid).abandoned_by;
            assert!(owner.is_some(), "run {run}: ps marks it: {listing:?}");
            let doc: ProcessCommandDoc = fx.json(&["lock", &pids[0]], 10);
            let error = doc.process(group[0].pid).error();
            assert_eq!(error.kind, Kind::NeedsRecovery, "run {run}: {error:?}");
            assert!(error
                .hint
                .as_deref()
                .is_some_and(|h| h.contains("cudackpt recover")));
        }
        let doc: ProcessCommandDoc = fx.json(&["recover"], 0);
        // Killed after its last driver call returned, before it removed
        // its record: recover finishes it forward (the group stays where
        // the suspend put it, as asked), and says so.
        let forward = doc.warnings.iter().any(|w| w.contains("finished forward"));
        let (want, want_state) = if forward {
            ("checkpointed", State::Checkpointed)
        } else {
            ("running", State::Running)
        };
        for t in &group {
            assert_eq!(state(&fx, t.pid), want, "run {run}: {doc:?}");
        }
        assert!(
            doc.processes.iter().all(|p| p.state == want_state),
            "run {run}"
        );
        if forward {
            let mut back = vec!["resume"];
            back.extend(pids.iter().map(String::as_str));
            fx.cudackpt(&back).assert().success();
        }
        assert_eq!(entries(&intents), 0, "run {run}: the record is removed");
    }
    eprintln!("kill -9: {killed} killed mid-change and recovered, {finished} finished first");
    assert!(
        killed >= 10,
        "most runs must be killed mid-change ({killed} of 20)"
    );
}
