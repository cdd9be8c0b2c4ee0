//! The drain shrinks a job before its checkpoint (the drain client empties
//! its caching allocator): cudackpt reads each process's GPU memory (NVML)
//! before the request and after the acknowledgement, reports what was
//! released and what is left to copy, and weighs host memory on what is
//! left. Fake ranks (tests/fixtures/drain-target) append their shrunk footprint to
//! the fake NVML when they release (`DRAIN_TARGET_SHRINK_TO_MIB`).

use std::fs;

use crate::drain::{events, shows};
use crate::support::{texts, wait_until, Fixture, Target};
use crate::wire::{DrainOutcome, Kind, ProcessCommandDoc, State};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// A rank of a two-rank job that shrinks to `to_mib` when it releases.
fn shrinking_rank(fx: &Fixture, to_mib: &str) -> (Target, std::path::PathBuf) {
    let (target, events) = fx.drain_target(
        "ack",
        &[("WORLD_SIZE", "2"), ("DRAIN_TARGET_SHRINK_TO_MIB", to_mib)],
    );
    wait_until("the rank's watchdog thread", || {
        shows(target.pid, "pt_nccl_watchdg")
    });
    (target, events)
}

#[test]
fn a_drain_reports_what_each_process_released_and_what_is_left_to_copy() {
    let fx = Fixture::new().with_nvml();
    let (a, _) = shrinking_rank(&fx, "1024");
    let (b, _) = shrinking_rank(&fx, "512");
    fx.set_footprints(&[(a.pid, 8192), (b.pid, 4096)]);

    let doc: ProcessCommandDoc = fx.json(&["suspend", "--drain", &a.arg(), &b.arg()], 0);
    for (target, released, left) in [(&a, 7168, 1024), (&b, 3584, 512)] {
        let p = doc.process(target.pid);
        assert!(p.ok && p.state == State::Checkpointed, "{p:?}");
        let drain = p.drain.as_ref().expect("a drain report");
        assert_eq!(drain.outcome, DrainOutcome::Drained, "{p:?}");
        assert_eq!(drain.released_bytes, Some(released * MIB), "{p:?}");
        assert_eq!(drain.footprint_bytes, Some(left * MIB), "{p:?}");
    }
    fx.cudackpt(&["resume", &a.arg(), &b.arg()])
        .assert()
        .code(0);

    // For people: the result column says it.
    fx.set_footprints(&[(a.pid, 8192), (b.pid, 4096)]);
    let output = fx
        .cudackpt(&["suspend", "--drain", &a.arg(), &b.arg()])
        .assert()
        .code(0)
        .get_output()
        .clone();
    let (stdout, _) = texts(&output);
    assert!(stdout.contains(", released 7.0 GiB)"), "{stdout}");
    assert!(stdout.contains(", released 3.5 GiB)"), "{stdout}");
    fx.cudackpt(&["resume", &a.arg(), &b.arg()])
        .assert()
        .code(0);
}

#[test]
fn without_nvml_a_drain_says_nothing_of_bytes() {
    let fx = Fixture::new();
    let (a, _) = shrinking_rank(&fx, "1024");
    let doc: ProcessCommandDoc = fx.json(&["suspend", "--drain", &a.arg()], 0);
    let drain = doc.process(a.pid).drain.clone().expect("a drain report");
    assert_eq!((drain.released_bytes, drain.footprint_bytes), (None, None));
    fx.cudackpt(&["resume", &a.arg()]).assert().code(0);
}

#[test]
fn a_job_that_fits_its_memory_limit_only_once_shrunk_is_checkpointed_with_a_drain() {
    let fx = Fixture::new().with_nvml().with_cgroup_tree();
    let (a, a_events) = shrinking_rank(&fx, "1024");
    let (b, _) = shrinking_rank(&fx, "1024");
    fx.set_footprints(&[(a.pid, 6144), (b.pid, 6144)]);
    // Both ranks share the test's cgroup: 12 GiB now, 2 GiB once shrunk,
    // under a 4 GiB limit.
    let cgroup = fx.cgroup_of(a.pid, 0);
    fs::write(cgroup.join("memory.max"), format!("{}\n", 4 * GIB)).expect("memory.max");

    // As it is now it would not fit: a dry run cannot know what the drain
    // releases, so it says so and leaves the verdict to the drain.
    let dry: ProcessCommandDoc =
        fx.json(&["suspend", "--drain", "--dry-run", &a.arg(), &b.arg()], 0);
    assert!(
        dry.warnings
            .iter()
            .any(|w| w.contains("weighed again after the drain")
                && w.contains("charge it 12288 MiB")),
        "{:?}",
        dry.warnings
    );
    fx.take_calls();

    let doc: ProcessCommandDoc = fx.json(&["suspend", "--drain", &a.arg(), &b.arg()], 0);
    for target in [&a, &b] {
        let p = doc.process(target.pid);
        assert!(p.ok && p.state == State::Checkpointed, "{p:?}");
        let drain = p.drain.as_ref().expect("a drain report");
        assert_eq!(drain.footprint_bytes, Some(GIB), "{p:?}");
    }
    assert_eq!(events(&a_events), ["ready", "released", "shrunk"]);
    fx.cudackpt(&["resume", &a.arg(), &b.arg()])
        .assert()
        .code(0);
}

#[test]
fn a_job_too_big_even_shrunk_is_refused_after_the_drain_which_is_called_off_before_any_lock() {
    let fx = Fixture::new().with_nvml().with_cgroup_tree();
    let (a, a_events) = shrinking_rank(&fx, "3072");
    let (b, b_events) = shrinking_rank(&fx, "3072");
    fx.set_footprints(&[(a.pid, 6144), (b.pid, 6144)]);
    let cgroup = fx.cgroup_of(a.pid, 0);
    fs::write(cgroup.join("memory.max"), format!("{}\n", 4 * GIB)).expect("memory.max");
    fx.take_calls();

    let doc: ProcessCommandDoc = fx.json(&["suspend", "--drain", &a.arg(), &b.arg()], 8);
    for (target, events_file) in [(&a, &a_events), (&b, &b_events)] {
        let p = doc.process(target.pid);
        assert_eq!(p.kind(), Kind::InsufficientHostMemory, "{p:?}");
        assert_eq!(p.state, State::Running, "{p:?}");
        let message = &p.error().message;
        for words in [
            "refused after the drain",
            "under its memory.max (4096 MiB",
            "charge it 6144 MiB",
            "nothing was locked",
        ] {
            assert!(message.contains(words), "{words:?}: {message}");
        }
        let drain = p.drain.as_ref().expect("a drain report");
        assert_eq!(drain.outcome, DrainOutcome::Rebuilt, "called off: {p:?}");
        assert_eq!(drain.released_bytes, Some(3072 * MIB), "{p:?}");
        assert_eq!(drain.footprint_bytes, Some(3072 * MIB), "{p:?}");
        assert_eq!(
            events(events_file),
            ["ready", "released", "shrunk", "rebuilt"]
        );
    }
    let changes = fx.state_changes();
    assert!(changes.is_empty(), "nothing was locked: {changes:?}");
}
