//! GPU maps on restore: UUIDs in every accepted spelling and device indexes
//! are resolved into pairs the driver receives as given; maps that can never
//! work are refused before any driver call (exit 8); what only the driver
//! can judge is reported as a rejected map (exit 1), the process still
//! checkpointed.

use crate::support::{check_document, fake_uuid, Fixture, Target};
use crate::wire::{Kind, ProcessCommandDoc, State, UsageDoc};

const TWO_GPUS: &str = "GPU A:1000,GPU B:1000";

fn two_gpus_with_checkpointed_process() -> (Fixture, Target) {
    let fx = Fixture::with_devices(TWO_GPUS);
    let target = fx.cuda_target();
    fx.put_in(&target, "checkpointed");
    (fx, target)
}

/// The map the fake received, as `old>new` pairs of device numbers.
fn received_map(fx: &Fixture) -> Vec<String> {
    let calls = fx.take_calls();
    let restore = calls
        .iter()
        .find(|c| c.op == "restore")
        .unwrap_or_else(|| panic!("no restore call: {calls:?}"));
    let (a, b) = (fake_uuid(0), fake_uuid(1));
    restore
        .map
        .as_deref()
        .unwrap_or_else(|| panic!("restore without a map: {restore:?}"))
        .split(',')
        .map(|pair| pair.replace(&a, "A").replace(&b, "B"))
        .collect()
}

#[test]
fn a_swap_of_two_gpus_moves_the_process() {
    let (fx, target) = two_gpus_with_checkpointed_process();
    let (a, b) = (fake_uuid(0), fake_uuid(1));
    let doc: ProcessCommandDoc = fx.json(
        &[
            "restore",
            "--map",
            &format!("GPU-{a}=GPU-{b},GPU-{b}=GPU-{a}"),
            &target.arg(),
        ],
        0,
    );
    assert_eq!(doc.only(target.pid).state, State::Locked);
    assert_eq!(received_map(&fx), ["A>B", "B>A"]);
    assert_eq!(fx.fake_record(target.pid), ("locked".to_string(), 1));
}

#[test]
fn new_gpus_may_be_given_as_indexes() {
    let (fx, target) = two_gpus_with_checkpointed_process();
    let (a, b) = (fake_uuid(0), fake_uuid(1));
    fx.cudackpt(&[
        "restore",
        "--map",
        &format!("GPU-{a}=1,GPU-{b}=0"),
        &target.arg(),
    ])
    .assert()
    .success();
    assert_eq!(received_map(&fx), ["A>B", "B>A"]);
    assert_eq!(fx.fake_record(target.pid).1, 1);
}

/// On the same host an index names one GPU unambiguously on either side:
/// users pair devices by index (`--map 0=1`), completed to the swap.
#[test]
fn old_gpus_may_be_given_as_indexes_too() {
    let (fx, target) = two_gpus_with_checkpointed_process();
    let doc: ProcessCommandDoc = fx.json(&["restore", "--map", "0=1", &target.arg()], 0);
    assert_eq!(received_map(&fx), ["A>B", "B>A"]);
    assert_eq!(fx.fake_record(target.pid).1, 1);
    let used = doc.map.as_ref().expect("the map used");
    let (a, b) = (fake_uuid(0), fake_uuid(1));
    assert!(
        used[0].old.ends_with(&a) && used[0].new.ends_with(&b),
        "{used:?}"
    );
}

#[test]
fn uuids_are_accepted_without_prefix_in_upper_case_and_in_repeated_flags() {
    let (fx, target) = two_gpus_with_checkpointed_process();
    let (a, b) = (fake_uuid(0), fake_uuid(1));
    let upper_b = format!("GPU-{}", b.to_uppercase());
    fx.cudackpt(&[
        "restore",
        "--map",
        &format!("{upper_b}={a}"),
        "-m",
        &format!("{}={upper_b}", a.to_uppercase()),
        &target.arg(),
    ])
    .assert()
    .success();
    assert_eq!(received_map(&fx), ["B>A", "A>B"]);
    assert_eq!(fx.fake_record(target.pid), ("locked".to_string(), 1));
}

#[test]
fn resume_and_toggle_take_a_map_too() {
    for command in ["resume", "toggle"] {
        let (fx, target) = two_gpus_with_checkpointed_process();
        let (a, b) = (fake_uuid(0), fake_uuid(1));
        fx.cudackpt(&[command, "--map", &format!("{a}={b},{b}={a}"), &target.arg()])
            .assert()
            .success();
        assert_eq!(received_map(&fx), ["A>B", "B>A"], "{command}");
        assert_eq!(fx.fake_record(target.pid), ("running".to_string(), 1));
    }
}

/// The driver needs a bijection over every GPU; a move between this host's
/// GPUs given as `A=B` alone is completed to `A=B,B=A` before the driver
/// sees it, and the report says so.
#[test]
fn a_partial_map_of_local_gpus_is_completed_for_the_driver() {
    let (fx, target) = two_gpus_with_checkpointed_process();
    let (a, b) = (fake_uuid(0), fake_uuid(1));
    let doc: ProcessCommandDoc =
        fx.json(&["restore", "--map", &format!("{a}={b}"), &target.arg()], 0);
    assert_eq!(received_map(&fx), ["A>B", "B>A"]);
    assert_eq!(fx.fake_record(target.pid), ("locked".to_string(), 1));
    assert!(
        doc.warnings.iter().any(|w| w.contains("completed the map")),
        "{doc:?}"
    );
    let used = doc.map.as_ref().expect("the map used");
    assert_eq!(used.len(), 2);
    assert!(
        used[0].old.ends_with(&a) && used[0].new.ends_with(&b),
        "{used:?}"
    );
}

/// A resume of a process already running restores nothing: no word on a
/// map that was never used.
#[test]
fn a_map_unused_by_a_resume_of_a_running_process_is_not_remarked() {
    let fx = Fixture::with_devices(TWO_GPUS);
    let target = fx.cuda_target();
    let (a, b) = (fake_uuid(0), fake_uuid(1));
    let doc: ProcessCommandDoc =
        fx.json(&["resume", "--map", &format!("{a}={b}"), &target.arg()], 0);
    assert!(doc.warnings.is_empty(), "{doc:?}");
    assert!(doc.map.is_none(), "{doc:?}");
    assert_eq!(fx.fake_state(target.pid), "running");
    // A checkpointed one does use it, and is told it was completed.
    fx.put_in(&target, "checkpointed");
    let doc: ProcessCommandDoc =
        fx.json(&["resume", "--map", &format!("{a}={b}"), &target.arg()], 0);
    assert!(
        doc.warnings.iter().any(|w| w.contains("completed the map")),
        "{doc:?}"
    );
}

/// A driver too old to remap GPUs (doctor: `gpu_remapping: false`) would
/// fail the restore: the map is refused first, and in-place still works.
#[test]
fn a_map_on_a_driver_without_remapping_is_refused_before_the_driver() {
    let (fx, target) = two_gpus_with_checkpointed_process();
    let (a, b) = (fake_uuid(0), fake_uuid(1));
    let doc: ProcessCommandDoc = check_document(
        fx.cudackpt(&[
            "--json",
            "resume",
            "--map",
            &format!("{a}={b}"),
            &target.arg(),
        ])
        .env("FAKE_CUDA_DRIVER_VERSION", "12080"),
        8,
    );
    let error = doc.refusal(target.pid);
    assert_eq!(error.kind, Kind::InvalidMap);
    assert!(
        error.message.contains("CUDA 12.8") && error.message.contains("580"),
        "{error:?}"
    );
    assert_eq!(fx.state_changes(), Vec::<String>::new());
    assert_eq!(fx.fake_state(target.pid), "checkpointed");
    fx.cudackpt(&["resume", &target.arg()])
        .env("FAKE_CUDA_DRIVER_VERSION", "12080")
        .assert()
        .success();
    assert_eq!(fx.fake_state(target.pid), "running");
}

/// A map that moves nothing is dropped: the process is restored in place.
#[test]
fn a_map_that_moves_nothing_is_not_passed() {
    let (fx, target) = two_gpus_with_checkpointed_process();
    let a = fake_uuid(0);
    let doc: ProcessCommandDoc =
        fx.json(&["restore", "--map", &format!("{a}={a}"), &target.arg()], 0);
    assert!(fx.calls().iter().all(|c| c.map.is_none()), "no map passed");
    assert!(
        doc.warnings.iter().any(|w| w.contains("moves no GPU")),
        "{doc:?}"
    );
}

/// GPUs of another host cannot be completed: a map that leaves a GPU of
/// this host without a GPU to receive is refused before the driver (8);
/// one that covers them goes to the driver, whose refusal leaves the
/// process checkpointed for a retry.
#[test]
fn a_foreign_map_must_cover_this_host_and_the_driver_judges_the_rest() {
    let (fx, target) = two_gpus_with_checkpointed_process();
    let (a, b) = (fake_uuid(0), fake_uuid(1));
    let (f0, f1) = (
        "GPU-f0000000-0000-4000-8000-000000000000",
        "GPU-f1000000-0000-4000-8000-000000000000",
    );
    let doc: ProcessCommandDoc = fx.json(
        &["restore", "--map", &format!("{f0}={b}"), &target.arg()],
        8,
    );
    let error = doc.refusal(target.pid);
    assert_eq!(error.kind, Kind::InvalidMap);
    assert!(
        error.message.contains(&a) && error.message.contains("receive"),
        "{error:?}"
    );
    fx.assert_no_calls("an incomplete foreign map");

    let doc: ProcessCommandDoc = fx.json(
        &[
            "restore",
            "--map",
            &format!("{f0}={b},{f1}={a}"),
            &target.arg(),
        ],
        1,
    );
    let p = doc.only(target.pid);
    let error = p.error();
    assert_eq!(error.kind, Kind::MapRejected);
    assert_eq!(
        error.cuda_error.as_deref(),
        Some("CUDA_ERROR_INVALID_VALUE")
    );
    assert!(error.message.contains("still checkpointed"), "{error:?}");
    assert_eq!(p.state, State::Checkpointed);
    assert_eq!(fx.fake_record(target.pid), ("checkpointed".to_string(), 0));
}

/// Exit 8: maps that can never be a bijection, refused before the driver.
#[test]
fn impossible_maps_are_refused_before_any_driver_call() {
    let (fx, target) = two_gpus_with_checkpointed_process();
    let (a, b) = (fake_uuid(0), fake_uuid(1));
    // A GPU named twice on the left is a malformed argument: a usage
    // error of the command, not a process's refusal.
    let twice = format!("{a}={b},GPU-{a}={a}");
    let doc: UsageDoc = fx.json(&["restore", "--map", &twice, &target.arg()], 2);
    assert!(doc.error.message.contains("twice"), "{doc:?}");
    fx.assert_no_calls(&twice);
    let cases = [
        (format!("{a}={b},{b}={b}"), "both onto"),
        (format!("{a}=1,{b}=1"), "both onto"),
        (format!("{a}=5"), "index 5, but this host has 2 GPU(s)"),
    ];
    for (map, why) in cases {
        for command in ["restore", "resume"] {
            let doc: ProcessCommandDoc = fx.json(&[command, "--map", &map, &target.arg()], 8);
            let error = doc.refusal(target.pid);
            assert_eq!(error.kind, Kind::InvalidMap, "{map}");
            assert!(error.message.contains(why), "{map}: {error:?}");
            assert!(error.hint.is_some());
            fx.assert_no_calls(&map);
        }
    }
    assert_eq!(fx.fake_record(target.pid), ("checkpointed".to_string(), 0));
}

/// docs/guide/commands.md, "Restoring onto other GPUs": pre-flight checks that every NEW GPU exists on this host.
#[test]
fn a_new_gpu_that_is_not_on_this_host_is_refused_before_the_driver() {
    let (fx, target) = two_gpus_with_checkpointed_process();
    let (a, b) = (fake_uuid(0), fake_uuid(1));
    let elsewhere = "11111111-2222-3333-4444-555555555555";
    let doc: ProcessCommandDoc = fx.json(
        &[
            "restore",
            "--map",
            &format!("{a}={elsewhere},{b}={a}"),
            &target.arg(),
        ],
        8,
    );
    let error = doc.refusal(target.pid);
    assert_eq!(error.kind, Kind::InvalidMap);
    assert!(error.message.contains(elsewhere), "{error:?}");
    fx.assert_no_calls("a map onto a GPU this host lacks");
    assert_eq!(fx.fake_state(target.pid), "checkpointed");
}

#[test]
fn a_map_file_is_read_in_any_of_its_shapes() {
    let (a, b) = (fake_uuid(0), fake_uuid(1));
    for text in [
        format!(r#"{{"{a}": "{b}", "{b}": "{a}"}}"#),
        format!(r#"["{a}={b}", "{b}=0"]"#),
        format!(r#"[{{"old": "GPU-{a}", "new": "GPU-{b}"}}]"#),
    ] {
        let (fx, target) = two_gpus_with_checkpointed_process();
        let file = fx.dir().join("map.json");
        std::fs::write(&file, &text).expect("map file");
        fx.cudackpt(&[
            "restore",
            "--map-file",
            file.to_str().expect("utf-8"),
            &target.arg(),
        ])
        .assert()
        .success();
        assert_eq!(received_map(&fx), ["A>B", "B>A"], "{text}");
    }
}

#[test]
fn a_bad_map_file_is_a_usage_error_before_any_driver_call() {
    let (fx, target) = two_gpus_with_checkpointed_process();
    let file = fx.dir().join("map.json");
    std::fs::write(&file, "{not json").expect("map file");
    let output = fx
        .cudackpt(&[
            "restore",
            "--map-file",
            file.to_str().expect("utf-8"),
            &target.arg(),
        ])
        .assert()
        .code(2)
        .get_output()
        .clone();
    assert!(String::from_utf8_lossy(&output.stderr).contains("map.json"));
    fx.assert_no_calls("a bad map file");
    fx.cudackpt(&[
        "restore",
        "--map-file",
        "/nonexistent/map.json",
        &target.arg(),
    ])
    .assert()
    .code(2);
}
