//! The host-memory pre-flight and the OOM post-mortem (docs/guide/safety.md, "Before a checkpoint: what the driver cannot restore"), with the
//! fake NVML telling each target's GPU footprint and a cgroup tree of the
//! fixture's own standing in for /sys/fs/cgroup. A checkpoint copies a
//! target's GPU memory into its host memory, charged to its cgroup: one that
//! does not fit is refused before any driver call (exit 8,
//! `insufficient_host_memory`); forced, the kernel kills the process, and the
//! report says `oom_killed` (exit 5) with the cgroup and its limit.

use std::fs;

use crate::support::{texts, Fixture, RealCgroup};
use crate::wire::{CheckStatus, DoctorDoc, Kind, ProcessCommandDoc, State};

const GIB: u64 = 1 << 30;

/// The GPU memory a process's checkpoint record keeps, in MiB.
fn recorded_mib(fx: &Fixture, pid: i32) -> Option<u64> {
    let text = fs::read_to_string(fx.dir().join("records").join(format!("{pid}.json"))).ok()?;
    let record: serde_json::Value = serde_json::from_str(&text).ok()?;
    let bytes: u64 = record["gpu_memory"]
        .as_array()?
        .iter()
        .filter_map(|u| u["bytes"].as_u64())
        .sum();
    Some(bytes >> 20)
}

#[test]
fn a_target_whose_cgroup_cannot_hold_its_gpu_memory_is_refused_then_oom_killed_when_forced() {
    let fx = Fixture::new().with_nvml().with_cgroup_tree();
    let target = fx.cuda_target();
    fx.set_footprints(&[(target.pid, 4096)]);
    let cgroup = fx.cgroup_of(target.pid, 1);
    fs::write(cgroup.join("memory.max"), format!("{}\n", 2 * GIB)).expect("memory.max");
    fx.take_calls();

    let pid = target.arg();
    for command in ["suspend", "checkpoint", "check"] {
        if command == "check" {
            fx.assert_no_calls("a checkpoint its cgroup cannot hold");
        }
        let doc: ProcessCommandDoc = fx.json(&[command, &pid], 8);
        let error = doc.refusal(target.pid);
        assert_eq!(error.kind, Kind::InsufficientHostMemory, "{command:?}");
        for figure in [
            "2047 MiB of room under its memory.max",
            "charge it 4096 MiB",
        ] {
            assert!(error.message.contains(figure), "{command:?}: {error:?}");
        }
        assert!(
            error.hint.as_deref().is_some_and(|h| h.contains("--force")),
            "{error:?}"
        );
    }
    // check asks the state, and nothing else.
    let calls = fx.take_calls();
    assert!(calls.iter().all(|c| c.op == "get_state"), "{calls:?}");
    assert_eq!(fx.state_of(&target), "running");

    // Forced: the fake driver plays the kernel, killing the process and
    // counting it in the cgroup's memory.events.
    fs::write(fx.dir().join("inject"), "checkpoint=oom_kill\n").expect("inject");
    let doc: ProcessCommandDoc = fx.json(&["suspend", "--force", &target.arg()], 5);
    let error = doc.process(target.pid).error();
    assert_eq!(error.kind, Kind::OomKilled, "{doc:?}");
    assert!(
        error.message.contains("memory limit 2048 MiB")
            && error.message.contains("oom_kill 0 -> 1")
            && error.message.contains("copies its 4096 MiB of GPU memory"),
        "{error:?}"
    );
}

#[test]
fn the_footprints_of_a_group_are_summed_per_cgroup() {
    let fx = Fixture::new().with_nvml().with_cgroup_tree();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    fx.set_footprints(&[(a.pid, 1536), (b.pid, 1536)]);
    let cgroup = fx.cgroup_of(a.pid, 0);
    assert_eq!(cgroup, fx.cgroup_of(b.pid, 0), "siblings share a cgroup");
    fs::write(cgroup.join("memory.high"), format!("{}\n", 2 * GIB)).expect("memory.high");
    fx.take_calls();

    // Each fits alone; together they do not.
    let doc: ProcessCommandDoc = fx.json(&["suspend", &a.arg(), &b.arg()], 8);
    let error = doc.refusal(a.pid);
    assert_eq!(error.kind, Kind::InsufficientHostMemory);
    assert!(error.message.contains("memory.high"), "{error:?}");
    assert!(error.message.contains("charge it 3072 MiB"), "{error:?}");
    fx.assert_no_calls("a group over its cgroup's memory.high");

    let doc: ProcessCommandDoc = fx.json(&["suspend", &a.arg()], 0);
    assert_eq!(doc.process(a.pid).state, State::Checkpointed);
    // Checkpointed, a holds no GPU memory (NVML no longer lists it), so
    // b now fits, and resume never weighs anything.
    fx.json::<ProcessCommandDoc>(&["suspend", &b.arg()], 0);
    // The checkpoint record keeps what NVML said before the checkpoint
    // (read once, by the pre-flight).
    assert_eq!(recorded_mib(&fx, b.pid), Some(1536));
    fx.json::<ProcessCommandDoc>(&["resume", &a.arg(), &b.arg()], 0);
    // Without the pre-flight (--force), the record still has it.
    fx.json::<ProcessCommandDoc>(&["suspend", "--force", &a.arg()], 0);
    assert_eq!(recorded_mib(&fx, a.pid), Some(1536));
}

#[test]
fn more_gpu_memory_than_the_host_has_available_is_refused_without_any_limit() {
    let fx = Fixture::new().with_nvml().with_cgroup_tree();
    let target = fx.cuda_target();
    // 64 PiB: more than any test machine's MemAvailable.
    fx.set_footprints(&[(target.pid, 64 << 30)]);
    fx.take_calls();
    let doc: ProcessCommandDoc = fx.json(&["suspend", &target.arg()], 8);
    let error = doc.refusal(target.pid);
    assert_eq!(error.kind, Kind::InsufficientHostMemory);
    assert!(error.message.contains("(MemAvailable)"), "{error:?}");
    fx.assert_no_calls("a checkpoint the host cannot hold");
    // NVML shows the footprint in ps.
    let doc: ProcessCommandDoc = fx.json(&["ps", "--tree", &target.arg()], 0);
    assert_eq!(
        doc.process(target.pid).gpu_memory_bytes,
        Some((64u64 << 30) << 20)
    );
}

#[test]
fn without_nvml_a_target_under_a_memory_limit_is_checkpointed_with_a_remark() {
    let fx = Fixture::new().with_cgroup_tree();
    let target = fx.cuda_target();
    let cgroup = fx.cgroup_of(target.pid, 0);
    fs::write(cgroup.join("memory.max"), format!("{}\n", GIB)).expect("memory.max");
    let output = fx
        .cudackpt(&["suspend", &target.arg()])
        .output()
        .expect("run");
    let (stdout, stderr) = texts(&output);
    assert_eq!(output.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stderr.contains("not checked against the memory limits")
            && stderr.contains("NVML is not available"),
        "{stderr}"
    );
    assert_eq!(fx.state_of(&target), "checkpointed");
}

#[test]
fn every_checkpoint_says_when_host_memory_could_not_be_weighed() {
    let without = Fixture::new();
    let target = without.cuda_target();
    for args in [vec!["check"], vec!["suspend", "--dry-run"]] {
        let args: Vec<String> = args
            .iter()
            .map(|a| a.to_string())
            .chain([target.arg()])
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let doc: ProcessCommandDoc = without.json(&args, 0);
        assert!(
            doc.warnings
                .iter()
                .any(|w| w.contains("not weighed") && w.contains("NVML is not available")),
            "{args:?}: {doc:?}"
        );
    }
    // So does the real thing: what was not checked is never assumed safe
    // in silence (docs/guide/safety.md, "Before a checkpoint: what the driver cannot restore").
    let doc: ProcessCommandDoc = without.json(&["suspend", &target.arg()], 0);
    assert!(
        doc.warnings.iter().any(|w| w.contains("not weighed")),
        "{doc:?}"
    );

    let with = Fixture::new().with_nvml();
    let weighed = with.cuda_target();
    with.set_footprints(&[(weighed.pid, 512)]);
    let doc: ProcessCommandDoc = with.json(&["check", &weighed.arg()], 0);
    assert!(doc.warnings.is_empty(), "weighed, and it fits: {doc:?}");
}

/// A group refused as a whole keeps what selection learnt: processes found
/// by `--tree` were confirmed with the driver's state query, so their
/// state is known (`running`), while a PID named and never asked stays
/// unknown in JSON ("unchanged" for people).
#[test]
fn a_refused_group_reports_the_states_selection_learnt() {
    let fx = Fixture::new().with_nvml().with_cgroup_tree();
    let target = fx.cuda_target();
    fx.set_footprints(&[(target.pid, 4096)]);
    let cgroup = fx.cgroup_of(target.pid, 0);
    fs::write(cgroup.join("memory.max"), format!("{}\n", GIB)).expect("memory.max");

    let found: ProcessCommandDoc = fx.json(&["suspend", "--tree", &target.arg()], 8);
    let p = found.process(target.pid);
    assert_eq!(p.kind(), Kind::NotAttempted, "{found:?}");
    assert_eq!(p.state, State::Running, "known from selection: {found:?}");

    let named: ProcessCommandDoc = fx.json(&["suspend", &target.arg()], 8);
    assert_eq!(
        named.process(target.pid).state,
        State::Unknown,
        "never asked"
    );
    let output = fx
        .cudackpt(&["suspend", "--tree", &target.arg()])
        .output()
        .expect("run");
    let (stdout, _) = texts(&output);
    assert!(stdout.contains("not attempted (still running)"), "{stdout}");
    let calls = fx.take_calls();
    assert!(calls.iter().all(|c| c.op == "get_state"), "{calls:?}");
}

/// A fresh cgroup in this host's cgroup v1 memory hierarchy with this
/// memory limit, removed on drop (its processes moved back to the root
/// first); `None`, said as a missing prerequisite, where there is none to
/// write (not root, or a v2-only host).
fn v1_memory_cgroup(limit: u64) -> Option<RealCgroup> {
    let made = cudackpt::internal::v1_memory_hierarchy()
        .filter(|(mount_root, _)| mount_root == "/")
        .and_then(|(_, mount_point)| RealCgroup::under(mount_point))
        .filter(|cgroup| {
            fs::write(cgroup.dir.join("memory.limit_in_bytes"), limit.to_string()).is_ok()
        });
    if made.is_none() {
        crate::support::prerequisite(
            "write a cgroup v1 memory hierarchy (needs root and a host that mounts one)",
            false,
        );
    }
    made
}

/// Hosts whose memory controller is still on cgroup v1 (this kind of CI
/// machine is one) limit memory in `memory.limit_in_bytes`: a target under
/// a v1 limit below its footprint is refused before any driver call,
/// naming that file, and one under a limit above it goes. Before, v1
/// limits were not read at all, and the checkpoint went ahead in silence.
#[test]
fn a_cgroup_v1_memory_limit_is_weighed_too() {
    let Some(cgroup) = v1_memory_cgroup(2 * GIB) else {
        return;
    };
    // No fixture cgroup tree: that stands in for cgroup v2 only.
    let fx = Fixture::new().with_nvml();
    let target = fx.cuda_target();
    cgroup.add(&cgroup.dir, target.pid);
    fx.set_footprints(&[(target.pid, 4096)]);
    fx.take_calls();

    let doc: ProcessCommandDoc = fx.json(&["suspend", &target.arg()], 8);
    let error = doc.refusal(target.pid);
    assert_eq!(error.kind, Kind::InsufficientHostMemory, "{error:?}");
    let name = cgroup
        .dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("name");
    assert!(
        error.message.contains(&format!("cgroup /{name} has"))
            && error
                .message
                .contains("under its memory.limit_in_bytes (2048 MiB")
            && error.message.contains("charge it 4096 MiB"),
        "{error:?}"
    );
    fx.assert_no_calls("a checkpoint its v1 cgroup cannot hold");
    assert_eq!(fx.state_of(&target), "running");

    // doctor --cgroup knows the v1 hierarchy too.
    let path = cgroup.dir.to_string_lossy().into_owned();
    let doc: DoctorDoc = fx.json(&["doctor", "--cgroup", &path], 0);
    let check = doc.check_named("cgroup memory");
    assert_eq!(check.status, CheckStatus::Warn, "{check:?}");
    assert!(
        check.detail.contains(&format!(
            "/{name} (cgroup v1): memory.limit_in_bytes 2048 MiB"
        )),
        "{check:?}"
    );

    fs::write(
        cgroup.dir.join("memory.limit_in_bytes"),
        (8 * GIB).to_string(),
    )
    .expect("raise");
    let doc: ProcessCommandDoc = fx.json(&["suspend", &target.arg()], 0);
    assert_eq!(doc.process(target.pid).state, State::Checkpointed);
}

/// A stand-in driver (the fake, as the README's "Try it without a GPU"
/// uses it) has no GPU NVML could describe: no command warns that NVML
/// is missing. The same commands against the fake passing for NVIDIA's
/// driver say it once each (above).
#[test]
fn a_stand_in_driver_is_not_warned_about_nvml() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    for args in [
        vec!["suspend", &*target.arg()],
        vec!["resume", &*target.arg()],
        vec!["devices"],
    ] {
        let output = fx
            .cudackpt(&args)
            .env_remove("FAKE_CUDA_AS_DRIVER")
            .output()
            .expect("run");
        let (stdout, stderr) = texts(&output);
        assert!(output.status.success(), "{args:?}: {stdout}{stderr}");
        assert!(!stderr.contains("NVML"), "{args:?}: {stderr}");
    }
    // Passing for NVIDIA's, the same suspend says it, once.
    let output = fx
        .cudackpt(&["suspend", &target.arg()])
        .output()
        .expect("run");
    let (_, stderr) = texts(&output);
    assert_eq!(
        stderr.matches("NVML is not available").count(),
        1,
        "{stderr}"
    );
}
