//! The library's face, through its example program (`examples/checkpoint`):
//! it checkpoints a process and brings it back with the four driver calls
//! a `suspend` and a `resume` make, and stops, saying why, where the
//! process is not one it can act on.

use std::path::PathBuf;

use crate::support::{fake_libcuda, prerequisite, shorts, Fixture};

/// The example, which `cargo test` builds beside the test binaries.
fn example() -> Option<PathBuf> {
    let exe = std::env::current_exe().expect("the test binary's path");
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps")
        .join("examples")
        .join("checkpoint");
    prerequisite(
        "run examples/checkpoint (`cargo test` builds it, as does `cargo build --examples`)",
        path.is_file(),
    )
    .then_some(path)
}

fn changes(calls: Vec<String>) -> Vec<String> {
    calls
        .into_iter()
        .filter(|call| !call.starts_with("get_state") && !call.starts_with("restore_tid"))
        .collect()
}

/// With the driver named on its command line, or by `CUDACKPT_LIBCUDA`
/// (the fixture sets it, as "Try it without a GPU" does) as the
/// `cudackpt` command reads it.
#[test]
fn the_example_checkpoints_a_process_through_the_library_and_brings_it_back() {
    let Some(example) = example() else { return };
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let library = fake_libcuda().to_str().expect("a UTF-8 path");
    for args in [vec![target.arg(), library.to_string()], vec![target.arg()]] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = fx
            .command_for(&example, &args)
            .output()
            .expect("the example runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{args:?}: {}\n{stdout}",
            String::from_utf8_lossy(&output.stderr)
        );
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 3, "{stdout}");
        assert!(
            lines[0].starts_with(&format!("PID {}: running, restore thread ", target.pid)),
            "{stdout}"
        );
        assert!(
            lines[1].starts_with("suspended in ") && lines[1].ends_with(": checkpointed"),
            "{stdout}"
        );
        assert!(
            lines[2].starts_with("resumed in ") && lines[2].ends_with(": running"),
            "{stdout}"
        );
        assert_eq!(
            changes(shorts(&fx.take_calls())),
            ["lock 0", "checkpoint 0", "restore 0", "unlock 0"]
        );
        assert_eq!(fx.state_of(&target), "running");
    }
}

#[test]
fn the_example_changes_nothing_where_the_library_refuses_or_the_driver_cannot() {
    let Some(example) = example() else { return };
    let fx = Fixture::new();
    let library = fake_libcuda().to_str().expect("a UTF-8 path");
    let plain = fx.plain_target();
    let threaded = fx.threaded_cuda_target();
    let thread = threaded
        .threads()
        .into_iter()
        .find(|&tid| tid != threaded.pid)
        .expect("a second thread");
    for (pid, says) in [
        (plain.pid, "CUDA_ERROR_NOT_INITIALIZED".to_string()),
        (
            thread,
            format!("{thread} is a thread of process {}", threaded.pid),
        ),
        (i32::MAX, format!("no process has PID {}", i32::MAX)),
    ] {
        let output = fx
            .command_for(&example, &[&pid.to_string(), library])
            .output()
            .expect("the example runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(stderr.starts_with("checkpoint: "), "{stderr}");
        assert!(stderr.contains(&says), "{pid}: {stderr}");
        assert!(
            changes(shorts(&fx.take_calls())).is_empty(),
            "{pid}: a state changed"
        );
    }
    assert_eq!(fx.state_of(&threaded), "running");
}
