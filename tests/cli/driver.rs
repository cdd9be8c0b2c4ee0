//! Loading the driver: `--libcuda` and `CUDACKPT_LIBCUDA`, and exit 7 when
//! the library is missing, is not a CUDA driver, or is too old for the
//! checkpoint API.

use crate::support::{fake_uuid, texts, Fixture};
use crate::wire::{Kind, ProcessCommandDoc, State};

/// Runs `state` on a CUDA process with the driver from `libcuda` (as a flag
/// or the environment) and returns the failure message, checking exit 7.
fn driver_failure(fx: &Fixture, libcuda: &str, as_flag: bool) -> String {
    let target = fx.cuda_target();
    let pid = target.arg();
    let mut command = if as_flag {
        // The flag wins over the environment, which names the fake.
        fx.cudackpt(&["--json", "--libcuda", libcuda, "state", &pid])
    } else {
        let mut command = fx.cudackpt(&["--json", "state", &pid]);
        command.env("CUDACKPT_LIBCUDA", libcuda);
        command
    };
    let doc: ProcessCommandDoc = crate::support::check_document(&mut command, 7);
    let p = doc.only(target.pid);
    let error = doc.refusal(target.pid);
    assert_eq!(error.kind, Kind::DriverUnavailable);
    assert_eq!(p.state, State::Unknown);
    assert!(error.hint.is_some());
    fx.assert_no_calls(libcuda);

    // The same failure for people, on stderr.
    let mut human = if as_flag {
        fx.cudackpt(&["--libcuda", libcuda, "lock", &pid])
    } else {
        let mut command = fx.cudackpt(&["lock", &pid]);
        command.env("CUDACKPT_LIBCUDA", libcuda);
        command
    };
    let output = human.assert().code(7).get_output().clone();
    let (_, stderr) = texts(&output);
    assert!(stderr.contains(&error.message), "{stderr}");
    assert_eq!(fx.fake_state(target.pid), "running");
    error.message.clone()
}

#[test]
fn a_missing_library_named_by_the_flag_lists_the_path_tried() {
    let fx = Fixture::new();
    let message = driver_failure(&fx, "/nonexistent/libcuda.so", true);
    assert!(message.contains("could not be loaded"), "{message}");
    assert!(message.contains("/nonexistent/libcuda.so"), "{message}");
}

#[test]
fn a_missing_library_named_by_the_environment_lists_the_path_tried() {
    let fx = Fixture::new();
    let message = driver_failure(&fx, "/nonexistent/env/libcuda.so.1", false);
    assert!(
        message.contains("/nonexistent/env/libcuda.so.1"),
        "{message}"
    );
}

#[test]
fn a_library_that_is_not_a_driver_is_named() {
    let fx = Fixture::new();
    let library = fx.compile_library("notcuda", "int not_cuda(void) { return 1; }\n");
    let message = driver_failure(&fx, &library.to_string_lossy(), true);
    assert!(
        message.contains(&*library.to_string_lossy()) && message.contains("not a CUDA driver"),
        "{message}"
    );
}

#[test]
fn an_old_driver_names_the_missing_checkpoint_functions() {
    let fx = Fixture::new();
    let library = fx.compile_library(
        "olddriver",
        "int cuDriverGetVersion(int *v) { *v = 12020; return 0; }\n",
    );
    let message = driver_failure(&fx, &library.to_string_lossy(), false);
    assert!(message.contains("CUDA 12.2"), "{message}");
    for function in [
        "cuCheckpointProcessGetState",
        "cuCheckpointProcessGetRestoreThreadId",
        "cuCheckpointProcessLock",
        "cuCheckpointProcessCheckpoint",
        "cuCheckpointProcessRestore",
        "cuCheckpointProcessUnlock",
    ] {
        assert!(message.contains(function), "{function}: {message}");
    }
}

/// docs/driver-facts.md, F1: no process command *calls* `cuInit`, on a host without
/// NVML (as here) whether or not the kernel driver lists the GPUs. Before
/// the GPU inventory was one, `suspend` listed the GPUs for its record
/// through the CUDA driver, a second libcuda load and a `cuInit`. With the
/// kernel listing, a map (given, or `auto`) needs no `cuInit` either.
#[test]
fn no_process_command_calls_cuinit() {
    for (fx, with_kernel_listing) in [
        (Fixture::with_devices("GPU A:1000,GPU B:1000"), true),
        (Fixture::without_kernel_gpus(), false),
    ] {
        let target = fx.cuda_target();
        let pid = target.arg();
        let (a, b) = (fake_uuid(0), fake_uuid(1));
        let swap = format!("{a}={b},{b}={a}");
        let mut commands: Vec<Vec<&str>> = vec![
            vec!["state", &pid],
            vec!["restore-tid", &pid],
            vec!["lock", &pid],
            vec!["checkpoint", &pid],
            vec!["restore", &pid],
            vec!["unlock", &pid],
            vec!["suspend", &pid],
            vec!["resume", &pid],
            vec!["toggle", &pid],
            vec!["toggle", &pid],
            vec!["wait", "--state", "running", &pid],
            vec!["ps"],
        ];
        if with_kernel_listing {
            commands.extend([
                vec!["suspend", &pid],
                vec!["resume", "--map", &swap, &pid],
                vec!["suspend", &pid],
                vec!["resume", "--map", "auto", &pid],
            ]);
        }
        for args in &commands {
            fx.cudackpt(args).assert().success();
            assert_eq!(
                fx.init_calls(),
                0,
                "`cudackpt {}` called cuInit (kernel listing: {with_kernel_listing})",
                args.join(" ")
            );
        }
        assert_eq!(fx.fake_state(target.pid), "running");
    }
}

/// docs/driver-facts.md, F1: the process path never calls `cuInit`, so a driver whose
/// cuInit fails still checkpoints (a UUID-only map needs no device list).
#[test]
fn the_process_path_never_needs_cuinit() {
    let fx = Fixture::with_devices("GPU A:1000,GPU B:1000");
    let target = fx.cuda_target();
    let pid = target.arg();
    let (a, b) = (fake_uuid(0), fake_uuid(1));
    let swap = format!("{a}={b},{b}={a}");
    for args in [
        &["state", &pid][..],
        &["restore-tid", &pid],
        &["suspend", &pid],
        &["resume", "--map", &swap, &pid],
        &["toggle", &pid],
        &["toggle", &pid],
    ] {
        fx.cudackpt(args)
            .env("FAKE_CUDA_INJECT", "init=error:999")
            .assert()
            .success();
    }
    assert_eq!(fx.fake_record(target.pid), ("running".to_string(), 1));
    // Doctor does need it, and says so.
    let output = fx
        .cudackpt(&["doctor"])
        .env("FAKE_CUDA_INJECT", "init=error:999")
        .assert()
        .failure()
        .get_output()
        .clone();
    assert!(texts(&output).0.contains("cuInit"));
}
