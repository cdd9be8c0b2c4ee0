//! Checkpoint records: written when cudackpt checkpoints a process, read
//! by restore for `--map auto` and the memory pre-flight, removed once the
//! process is restored. The fake host has no NVML, so records carry no
//! memory figures and the pre-flight says what it could not check.

use std::fs;

use crate::support::{fake_uuid, Fixture, SpawnGuarded};
use crate::wire::{Kind, ProcessCommandDoc, State};

fn record_of(fx: &Fixture, pid: i32) -> serde_json::Value {
    let text =
        fs::read_to_string(fx.dir().join("records").join(format!("{pid}.json"))).expect("a record");
    serde_json::from_str(&text).expect("a JSON record")
}

#[test]
fn suspend_writes_a_record_and_resume_removes_it() {
    let fx = Fixture::with_devices("GPU A:1000,GPU B:2000");
    let target = fx.cuda_target();
    let doc: ProcessCommandDoc = fx.json(&["suspend", &target.arg()], 0);
    let path = doc
        .process(target.pid)
        .record
        .clone()
        .expect("the record's path");
    assert!(
        path.ends_with(&format!("records/{}.json", target.pid)),
        "{path}"
    );
    let record = record_of(&fx, target.pid);
    assert_eq!(record["pid"], target.pid);
    assert_eq!(record["name"], "sleep");
    assert_eq!(
        record["host_gpus"][1]["uuid"],
        format!("GPU-{}", fake_uuid(1))
    );
    assert_eq!(record["host_gpus"][1]["name"], "GPU B");
    assert!(record["gpu_memory"].is_null(), "no NVML, no figures");
    let doc: ProcessCommandDoc = fx.json(&["resume", &target.arg()], 0);
    assert!(
        doc.warnings.iter().any(|w| w.contains("not checked")),
        "{doc:?}"
    );
    assert!(!fx
        .dir()
        .join("records")
        .join(format!("{}.json", target.pid))
        .exists());
}

#[test]
fn record_dir_puts_records_where_asked() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let elsewhere = fx.dir().join("criu-images");
    fx.cudackpt(&[
        "--record-dir",
        elsewhere.to_str().expect("utf-8"),
        "suspend",
        &target.arg(),
    ])
    .assert()
    .success();
    assert!(elsewhere.join(format!("{}.json", target.pid)).is_file());
}

#[test]
fn map_auto_on_the_same_gpus_moves_nothing() {
    let fx = Fixture::with_devices("GPU A:1000,GPU B:1000");
    let target = fx.cuda_target();
    fx.json::<ProcessCommandDoc>(&["suspend", &target.arg()], 0);
    fx.take_calls();
    let doc: ProcessCommandDoc = fx.json(&["resume", "--map", "auto", &target.arg()], 0);
    assert!(fx.calls().iter().all(|c| c.map.is_none()), "no map passed");
    assert!(
        doc.warnings
            .iter()
            .any(|w| w.contains("--map auto") && w.contains("nothing moves")),
        "{doc:?}"
    );
    assert_eq!(doc.process(target.pid).state, State::Running);
}

#[test]
fn map_auto_refuses_other_gpu_models_and_missing_records() {
    let fx = Fixture::with_devices("GPU A:1000,GPU B:1000");
    let target = fx.cuda_target();
    fx.json::<ProcessCommandDoc>(&["suspend", &target.arg()], 0);
    fx.take_calls();
    let other_host = fx
        .cudackpt(&["--json", "resume", "--map", "auto", &target.arg()])
        .env("FAKE_CUDA_DEVICES", "GPU X:1000,GPU B:1000")
        .env(
            "CUDACKPT_DEBUG_DRIVER_GPUS_DIR",
            fx.kernel_gpus_dir("GPU X:1000,GPU B:1000"),
        )
        .assert()
        .code(8)
        .get_output()
        .clone();
    let doc: ProcessCommandDoc = crate::support::parse_one_document(&other_host.stdout);
    let error = doc.refusal(target.pid);
    assert_eq!(error.kind, Kind::InvalidMap);
    assert!(
        error.message.contains("was a GPU A and is a GPU X"),
        "{error:?}"
    );
    assert!(
        fx.calls()
            .iter()
            .all(|c| c.op == "get_state" || c.op == "restore_tid"),
        "nothing changed"
    );
    assert_eq!(fx.fake_state(target.pid), "checkpointed");

    let unrecorded = fx.cuda_target();
    fx.put_in(&unrecorded, "checkpointed");
    // put_in checkpoints through cudackpt, which records; forget it.
    fs::remove_file(
        fx.dir()
            .join("records")
            .join(format!("{}.json", unrecorded.pid)),
    )
    .expect("a record to remove");
    let doc: ProcessCommandDoc = fx.json(&["resume", "--map", "auto", &unrecorded.arg()], 8);
    assert!(
        doc.refusal(unrecorded.pid)
            .message
            .contains("checkpoint record"),
        "{doc:?}"
    );
}

#[test]
fn verify_without_nvml_fails_and_says_so_but_undoes_nothing() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let doc: ProcessCommandDoc = fx.json(&["suspend", "--verify", &target.arg()], 1);
    let p = doc.process(target.pid);
    assert_eq!(p.error().kind, Kind::VerifyFailed);
    assert!(p.error().message.contains("NVML"), "{p:?}");
    assert_eq!(
        p.state,
        State::Checkpointed,
        "verification reports, it does not roll back"
    );
    assert_eq!(fx.fake_state(target.pid), "checkpointed");
    // Without --verify the same command succeeds.
    let doc: ProcessCommandDoc = fx.json(&["resume", &target.arg()], 0);
    assert_eq!(doc.process(target.pid).state, State::Running);
}

/// A record is about the process with its PID and start time. One written
/// for an earlier process with the same PID and name is used only for the
/// CRIU case (the same program restored as a new process, its CUDA state
/// still checkpointed, which the driver confirms); an unrelated process that
/// reused the PID and the name, running, does not inherit it.
#[test]
fn a_record_from_an_earlier_process_applies_only_to_a_criu_restored_one() {
    let fx = Fixture::with_devices("GPU A:1000,GPU B:2000");
    let write_stale = |pid: i32, from: &serde_json::Value| {
        let mut record = from.clone();
        record["pid"] = pid.into();
        record["starttime"] = 1.into();
        fs::write(
            fx.dir().join("records").join(format!("{pid}.json")),
            serde_json::to_string(&record).expect("JSON"),
        )
        .expect("a stale record");
    };

    // The CRIU case: checkpointed, another start time, the same name.
    let restored = fx.cuda_target();
    fx.json::<ProcessCommandDoc>(&["suspend", &restored.arg()], 0);
    let record = record_of(&fx, restored.pid);
    write_stale(restored.pid, &record);
    let doc: ProcessCommandDoc = fx.json(&["resume", "--map", "auto", &restored.arg()], 0);
    assert!(
        doc.warnings.iter().any(|w| w.contains("--map auto")),
        "the record was used: {doc:?}"
    );

    // PID reuse: the same name, running, another start time.
    let unrelated = fx.cuda_target();
    write_stale(unrelated.pid, &record);
    fx.take_calls();
    let doc: ProcessCommandDoc = fx.json(&["restore", "--map", "auto", &unrelated.arg()], 8);
    let error = doc.refusal(unrelated.pid);
    assert_eq!(error.kind, Kind::InvalidMap);
    assert!(error.message.contains("there is none"), "{error:?}");
    let calls = fx.take_calls();
    assert!(
        calls.iter().all(|c| c.op == "get_state"),
        "only asked: {calls:?}"
    );
    assert_eq!(fx.fake_state(unrelated.pid), "running");
}

/// A user who is not root keeps records and locks in their own runtime
/// directory (`$XDG_RUNTIME_DIR/cudackpt`), with no warning about
/// /run/cudackpt. As root, this runs as nobody against nobody's own CUDA
/// process; otherwise as this user.
#[test]
fn a_user_keeps_records_and_locks_in_their_runtime_directory() {
    use std::os::unix::fs::{chown, PermissionsExt};
    use std::os::unix::process::CommandExt;
    let fx = Fixture::new();
    let as_nobody = crate::support::running_as_root();
    let user = if as_nobody {
        65534
    } else {
        crate::support::own_uid()
    };
    let own = |path: &std::path::Path, mode: u32| {
        if as_nobody {
            chown(path, Some(user), Some(user)).expect("chown");
        }
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).expect("chmod");
    };
    let bin = fx.world_runnable_cudackpt();
    let (runtime, state) = (fx.dir().join("runtime"), fx.dir().join("state"));
    fs::create_dir(&runtime).expect("runtime dir");
    fs::create_dir(&state).expect("state dir");
    own(&runtime, 0o700);
    own(&state, 0o755);
    let mut sleeper = std::process::Command::new("sleep");
    sleeper
        .arg("600")
        .env("LD_PRELOAD", fx.world_fake())
        .env("FAKE_CUDA_STATE_DIR", &state);
    if as_nobody {
        sleeper.uid(user).gid(user);
    }
    let mut target = sleeper.spawn_guarded();
    let pid = target.id() as i32;
    crate::support::wait_until("the fake to be mapped", || {
        fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains("fake_libcuda"))
    });
    let run = |command: &str| {
        let mut cudackpt = fx.command_for(&bin, &["--json", command, &pid.to_string()]);
        cudackpt
            .env("CUDACKPT_LIBCUDA", fx.world_fake())
            .env("XDG_RUNTIME_DIR", &runtime)
            .env("FAKE_CUDA_STATE_DIR", &state)
            .env_remove("CUDACKPT_RECORD_DIR")
            .env_remove("CUDACKPT_LOCK_DIR")
            .current_dir("/");
        if as_nobody {
            cudackpt.uid(user).gid(user);
        }
        cudackpt.output().expect("cudackpt runs")
    };
    let suspended = run("suspend");
    let stderr = String::from_utf8_lossy(&suspended.stderr);
    assert_eq!(suspended.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("/run/cudackpt"), "{stderr}");
    let doc: ProcessCommandDoc = crate::support::parse_one_document(&suspended.stdout);
    assert!(
        doc.warnings.iter().all(|w| !w.contains("/run/cudackpt")),
        "{doc:?}"
    );
    assert!(runtime
        .join("cudackpt")
        .join(format!("{pid}.json"))
        .is_file());
    let resumed = run("resume");
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert!(
        !runtime
            .join("cudackpt")
            .join(format!("{pid}.json"))
            .exists(),
        "removed at resume"
    );
    let _ = target.kill();
    let _ = target.wait();
}
