//! Resource limits a scheduler or container puts on cudackpt: a pids limit
//! (systemd's TasksMax, a container's pids.max) and a small open-file
//! limit. A group must still complete, or be refused with nothing moved
//! and the reason said; running out is never a verdict about a process.

use std::fs;
use std::path::{Path, PathBuf};

use crate::support::{cudackpt_bin, parse_one_document, Fixture, SpawnGuarded, Target};
use crate::wire::{Kind, ProcessCommandDoc, State};

/// A fresh cgroup with the pids controller (v2, or v1's pids hierarchy),
/// removed on drop; `None` (with the reason printed) where none can be made.
struct PidsCgroup {
    dir: PathBuf,
}

impl PidsCgroup {
    fn new(max: u32) -> Option<PidsCgroup> {
        static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let nth = MADE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let name = format!("cudackpt-test-{}-{nth}", std::process::id());
        let v2 = Path::new("/sys/fs/cgroup");
        let candidates = [
            (v2.join("pids"), false),
            (v2.to_path_buf(), true),
            (v2.join("unified"), true),
        ];
        for (root, is_v2) in candidates {
            if is_v2
                && !fs::read_to_string(root.join("cgroup.subtree_control"))
                    .is_ok_and(|c| c.split_whitespace().any(|c| c == "pids"))
            {
                continue;
            }
            if !root.join("pids.max").exists() && !is_v2 && !root.join("tasks").exists() {
                continue;
            }
            let dir = root.join(&name);
            if fs::create_dir(&dir).is_err() {
                continue;
            }
            if fs::write(dir.join("pids.max"), max.to_string()).is_ok() {
                return Some(PidsCgroup { dir });
            }
            let _ = fs::remove_dir(&dir);
        }
        // In CI a missing prerequisite fails: CI must run every test.
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must be able to write a pids cgroup (needs root and the pids controller)"
        );
        crate::support::skipped(
            "no writable pids cgroup on this machine (needs root and the pids controller)",
        );
        None
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.dir);
    }
}

fn exited_0(output: &std::process::Output) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
}

fn targets(fx: &Fixture, count: usize) -> Vec<Target> {
    (0..count).map(|_| fx.cuda_target()).collect()
}

#[test]
fn a_group_of_200_under_a_pids_limit_of_8_moves_together() {
    let Some(cgroup) = PidsCgroup::new(8) else {
        return;
    };
    let fx = Fixture::new();
    let group = targets(&fx, 200);
    let mut args = vec!["--json".to_string(), "suspend".to_string()];
    args.extend(group.iter().map(Target::arg));
    let output = run_in(&fx, &cgroup, &[], &args);
    exited_0(&output);
    let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
    assert!(doc.processes.iter().all(|p| p.state == State::Checkpointed));
    assert!(group.iter().all(|t| fx.fake_state(t.pid) == "checkpointed"));
}

/// The case was 1,100 targets under `ulimit -n 1024`; the same
/// proportion, more targets than descriptors, at a third of the load so
/// that the timing tests running beside it on a 2-core CI stay honest.
#[test]
fn with_fewer_open_files_than_targets_none_is_reported_as_exited() {
    let fx = Fixture::new();
    let group = targets(&fx, 330);
    let pids: Vec<String> = group.iter().map(Target::arg).collect();
    let run = |command: &str| {
        let script = format!(
            "ulimit -n 300 && exec {} --json {command} {}",
            cudackpt_bin().display(),
            pids.join(" ")
        );
        let output = fx
            .command_for(Path::new("/bin/sh"), &["-c", &script])
            .output()
            .expect("sh");
        (
            output.status.code(),
            parse_one_document::<ProcessCommandDoc>(&output.stdout),
        )
    };
    let first_error = |doc: &ProcessCommandDoc| {
        doc.processes
            .iter()
            .find_map(|p| p.error.as_ref().map(|e| format!("PID {}: {e:?}", p.pid)))
    };
    let (code, doc) = run("state");
    assert_eq!(code, Some(0), "{:?}", first_error(&doc));
    assert_eq!(doc.processes.len(), 330);
    assert!(doc.processes.iter().all(|p| p.state == State::Running));
    // A group holds a lock file per process: it either fits, or is refused
    // with nothing moved and the reason given; no process is called gone.
    let (code, doc) = run("suspend");
    let gone = doc
        .processes
        .iter()
        .filter(|p| {
            p.error
                .as_ref()
                .is_some_and(|e| e.kind == Kind::NoSuchProcess)
        })
        .count();
    assert_eq!(gone, 0, "{:?}", first_error(&doc));
    eprintln!(
        "suspend of 330 under 300 open files: exit {code:?}, {:?}",
        first_error(&doc)
    );
    match code {
        Some(0) => assert!(group.iter().all(|t| fx.fake_state(t.pid) == "checkpointed")),
        _ => {
            let error = doc
                .error
                .as_ref()
                .or_else(|| doc.processes.iter().find_map(|p| p.error.as_ref()))
                .expect("a reason");
            assert_eq!(error.kind, Kind::LockUnavailable, "{error:?}");
            assert!(error.message.contains("open files"), "{error:?}");
            assert!(
                error
                    .hint
                    .as_deref()
                    .is_some_and(|h| h.contains("ulimit -n")),
                "{error:?}"
            );
            assert!(group.iter().all(|t| fx.fake_state(t.pid) == "running"));
        }
    }
}

/// Runs `cudackpt ARGS` (no ARGS: CRIU's action-script mode, with `env`)
/// inside `cgroup`, whose pids.max bounds its threads and children.
fn run_in(
    fx: &Fixture,
    cgroup: &PidsCgroup,
    env: &[(&str, String)],
    args: &[String],
) -> std::process::Output {
    let script = format!(
        "echo $$ > {}/cgroup.procs && exec {} {}",
        cgroup.dir.display(),
        cudackpt_bin().display(),
        args.join(" ")
    );
    let mut command = fx.command_for(Path::new("/bin/sh"), &["-c", &script]);
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("sh")
}

/// Discovery reads many /proc maps in threads; where none may start
/// (pids.max 1), it reads them itself. It used to panic on the refused
/// thread, which the release build turns into an abort.
#[test]
fn discovery_with_no_thread_allowed_reads_every_process_itself() {
    let Some(cgroup) = PidsCgroup::new(1) else {
        return;
    };
    let fx = Fixture::new();
    // More than the 64 below which discovery never starts a thread.
    let group = targets(&fx, 70);
    let output = run_in(&fx, &cgroup, &[], &["--json".into(), "ps".into()]);
    exited_0(&output);
    let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
    for target in &group {
        assert!(
            doc.processes.iter().any(|p| p.pid == target.pid),
            "ps lists {}",
            target.pid
        );
    }
}

/// CRIU's hook starts detached helpers: at pre-dump a watcher that resumes
/// the tree should the dump fail, at post-dump a waiter that resumes it
/// once thawed. Where neither can start, the hook says so and names the
/// command that brings the tree back; the tree is where it says.
#[test]
fn a_criu_hook_that_cannot_start_its_helpers_says_how_to_resume() {
    let Some(cgroup) = PidsCgroup::new(1) else {
        return;
    };
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let action = |name: &str| {
        vec![
            ("CRTOOLS_SCRIPT_ACTION", name.to_string()),
            ("CRTOOLS_INIT_PID", target.arg()),
        ]
    };
    let resume = format!("`cudackpt resume {}`", target.pid);

    let output = run_in(&fx, &cgroup, &action("pre-dump"), &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(0),
        "pre-dump still suspends: {stderr}"
    );
    assert_eq!(fx.fake_state(target.pid), "checkpointed");
    assert!(
        stderr.contains("could not start the watcher") && stderr.contains(&resume),
        "{stderr}"
    );

    let output = run_in(&fx, &cgroup, &action("post-dump"), &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("could not start the waiter") && stderr.contains(&resume),
        "{stderr}"
    );
    assert_eq!(fx.fake_state(target.pid), "checkpointed", "left as it says");
    fx.cudackpt(&["resume", &target.arg()]).assert().success();
    assert_eq!(fx.fake_state(target.pid), "running");
}

/// Where not even the signal watcher may start (pids.max 1), cudackpt reads
/// the signals itself between driver calls: a SIGTERM mid-suspend still
/// rolls the group back (exit 143, SIGTERM's 128 + 15), once the call in flight is done, and the
/// report says how signals were taken. (Handlers with nobody reading them
/// would swallow the signal: the command would go on as if nobody had asked
/// it to stop.)
#[test]
fn with_no_thread_for_the_signal_watcher_signals_are_read_between_calls() {
    let Some(cgroup) = PidsCgroup::new(1) else {
        return;
    };
    let fx = Fixture::new();
    let group = targets(&fx, 2);
    // Without a signal it goes as usual, and says how signals were taken.
    let pids = [group[0].arg(), group[1].arg()];
    let args = [
        "--json".to_string(),
        "suspend".to_string(),
        pids[0].clone(),
        pids[1].clone(),
    ];
    let output = run_in(&fx, &cgroup, &[], &args);
    exited_0(&output);
    let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
    assert!(
        doc.warnings
            .iter()
            .any(|w| w.starts_with("no thread could be started to watch for signals")),
        "{doc:?}"
    );
    fx.cudackpt(&["resume", &pids[0], &pids[1]])
        .assert()
        .success();
    fx.take_calls();

    let script = format!(
        "echo $$ > {}/cgroup.procs && exec {} --json suspend {} {}",
        cgroup.dir.display(),
        cudackpt_bin().display(),
        group[0].arg(),
        group[1].arg()
    );
    let child = fx
        .command_for(Path::new("/bin/sh"), &["-c", &script])
        .env("FAKE_CUDA_INJECT", "checkpoint=delay:400")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn_guarded();
    crate::support::wait_until("the first checkpoint to start", || {
        fx.calls().iter().filter(|c| c.op == "lock").count() == 2
    });
    crate::support::send_signal(i32::try_from(child.id()).expect("pid"), "TERM");
    let output = child.wait_with_output().expect("exits");
    assert_eq!(
        output.status.code(),
        Some(143),
        "SIGTERM, rolled back: {output:?}"
    );
    let intents = fx.dir().join("records").join("intents");
    assert_eq!(
        fs::read_dir(&intents).map(|d| d.count()).unwrap_or(0),
        0,
        "the command ended: no record left"
    );
    assert!(group.iter().all(|t| fx.fake_state(t.pid) == "running"));
}

/// `count` abandoned records, one a process: each a suspend of one CUDA
/// process whose cudackpt died inside its checkpoint call (SIGABRT),
/// leaving it moved and its intent record behind.
fn abandoned_records(fx: &Fixture, count: usize) -> Vec<Target> {
    let group = targets(fx, count);
    for target in &group {
        let output = fx
            .std_command(&["--json", "suspend", &target.arg()])
            .env(
                "FAKE_CUDA_INJECT",
                format!("checkpoint@{}=abort", target.pid),
            )
            .output()
            .expect("suspend");
        assert!(!output.status.success(), "the suspend died: {output:?}");
        assert_ne!(fx.fake_state(target.pid), "running");
    }
    assert_eq!(fx.intents().len(), count, "a record each");
    group
}

/// `recover` under a pids limit (a unit's `TasksMax`): with 20 records
/// and room for 12 tasks, and with one record and room for none but
/// itself, it puts every process back where it started in its calling
/// thread, instead of dying when a thread cannot start (it did: "failed
/// to spawn thread", exit 134).
#[test]
fn recover_under_a_pids_limit_puts_every_record_back() {
    for (records, limit) in [(20, 12), (1, 1)] {
        let Some(cgroup) = PidsCgroup::new(limit) else {
            return;
        };
        let fx = Fixture::new();
        let group = abandoned_records(&fx, records);
        let output = run_in(&fx, &cgroup, &[], &["--json".into(), "recover".into()]);
        exited_0(&output);
        let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
        assert_eq!(doc.processes.len(), records, "{doc:?}");
        for target in &group {
            assert_eq!(fx.fake_state(target.pid), "running", "{doc:?}");
        }
        assert!(fx.intents().is_empty(), "every record gone");
    }
}
