//! CRIU's action-script mode (docs/guide/criu.md, "NVIDIA-compatible mode and CRIU"): run with no arguments and
//! `CRTOOLS_SCRIPT_ACTION` set (or as `cudackpt criu-hook`), cudackpt
//! suspends the CUDA processes of the tree of `CRTOOLS_INIT_PID` at
//! `pre-dump`, resumes them once CRIU thaws the tree after `post-dump` (a
//! detached waiter), and at `post-resume`; every other action is a no-op.
//! The hook takes the driver from `CUDACKPT_LIBCUDA` (it has no arguments).

use std::fs;
use std::process::{Command as StdCommand, Output};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::{
    parse_one_document, proc_state, texts, wait_until, waiters_for, Fixture, Member, Tree,
};
use crate::wire::{Kind, ProcessCommandDoc, State};

/// cudackpt with NO arguments, as CRIU runs an action script: the action,
/// and the tree root when given (`None` leaves CRTOOLS_INIT_PID unset).
fn hook(fx: &Fixture, action: &str, init_pid: Option<&str>) -> StdCommand {
    let mut command = fx.std_command(&[]);
    command.env("CRTOOLS_SCRIPT_ACTION", action);
    match init_pid {
        Some(pid) => command.env("CRTOOLS_INIT_PID", pid),
        None => command.env_remove("CRTOOLS_INIT_PID"),
    };
    command
}

/// Runs a command and asserts its exit status.
fn run(mut command: StdCommand, code: i32) -> Output {
    let output = command.output().expect("run cudackpt");
    assert_eq!(
        output.status.code(),
        Some(code),
        "{command:?}: {output:?}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Under a plain root shell: a CUDA child, a plain child, and an
/// intermediate shell with a CUDA child of its own.
fn family(fx: &Fixture) -> Tree {
    fx.tree(
        r#"LD_PRELOAD=$CUDA sleep 600 & echo "a $!" >> "$PIDS"
sleep 600 & echo "plain $!" >> "$PIDS"
sh -c 'LD_PRELOAD=$CUDA sleep 600 & echo "g $!" >> "$PIDS"; wait' & echo "mid $!" >> "$PIDS"
wait"#,
        &[
            ("a", Member::Cuda),
            ("plain", Member::Plain),
            ("mid", Member::Shell),
            ("g", Member::Cuda),
        ],
    )
}

/// Asserts that since the log was last taken, nothing but GetState (and
/// the restore thread id) touched any process but `acted_on`.
fn only_acted_on(fx: &Fixture, acted_on: &[i32], what: &str) -> Vec<crate::support::Call> {
    let calls = fx.take_calls();
    for call in &calls {
        assert!(
            acted_on.contains(&call.pid) || call.op == "get_state" || call.op == "restore_tid",
            "{what}: {call:?} is on a process outside the tree's CUDA ones ({acted_on:?})"
        );
    }
    calls
}

#[test]
fn pre_dump_suspends_the_tree_and_post_resume_resumes_it() {
    let fx = Fixture::new();
    let tree = family(&fx);
    let outside = fx.cuda_target();
    let cuda = [tree.pid("a"), tree.pid("g")];
    let root = tree.root().to_string();

    let output = run(hook(&fx, "pre-dump", Some(&root)), 0);
    let (stdout, _) = texts(&output);
    for pid in cuda {
        assert_eq!(fx.fake_state(pid), "checkpointed");
        assert!(stdout.contains(&pid.to_string()), "{stdout}");
    }
    assert_eq!(fx.fake_state(outside.pid), "running");
    let calls = only_acted_on(&fx, &cuda, "pre-dump");
    assert!(calls.iter().all(|c| c.pid != outside.pid), "{calls:?}");
    for pid in cuda {
        for op in ["lock", "checkpoint"] {
            assert!(
                calls
                    .iter()
                    .any(|c| c.pid == pid && c.op == op && c.code == 0),
                "no {op} of {pid}: {calls:?}"
            );
        }
    }

    run(hook(&fx, "post-resume", Some(&root)), 0);
    for pid in cuda {
        assert_eq!(fx.fake_state(pid), "running");
    }
    assert_eq!(fx.fake_state(outside.pid), "running");
    only_acted_on(&fx, &cuda, "post-resume");

    // post-resume on a tree already running is a success too.
    run(hook(&fx, "post-resume", Some(&root)), 0);
    assert!(fx
        .take_calls()
        .iter()
        .all(|c| c.op == "get_state" || c.op == "restore_tid"));
}

#[test]
fn every_other_action_does_nothing() {
    let fx = Fixture::new();
    let tree = family(&fx);
    let cuda = [tree.pid("a"), tree.pid("g")];
    let root = tree.root().to_string();
    let others = [
        "pre-restore",
        "post-restore",
        "pre-resume",
        "network-lock",
        "network-unlock",
        "setup-namespaces",
        "post-setup-namespaces",
        "orphan-pts-master",
        "pre-stream",
        "query-ext-files",
        "status-ready",
        "no-such-action",
    ];
    for state in ["running", "checkpointed"] {
        for action in others {
            for init_pid in [Some(root.as_str()), Some(""), None] {
                let output = run(hook(&fx, action, init_pid), 0);
                let (stdout, _) = texts(&output);
                assert!(stdout.is_empty(), "{action}: {stdout}");
                fx.assert_no_calls(&format!("{action} with the tree {state}"));
            }
        }
        for pid in cuda {
            assert_eq!(fx.fake_state(pid), state, "{state}");
        }
        run(hook(&fx, "pre-dump", Some(&root)), 0);
        fx.take_calls();
    }
}

#[test]
fn post_dump_resumes_the_tree_once_it_is_thawed() {
    let fx = Fixture::new();
    let tree = family(&fx);
    let cuda = [tree.pid("a"), tree.pid("g")];
    let root = tree.root().to_string();
    run(hook(&fx, "pre-dump", Some(&root)), 0);

    // CRIU has the tree frozen at post-dump.
    tree.signal_all("STOP");
    wait_until("the tree to stop", || {
        cuda.iter().all(|&pid| proc_state(pid) == Some('T'))
    });
    fx.take_calls();
    let started = Instant::now();
    let output = run(hook(&fx, "post-dump", Some(&root)), 0);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "post-dump must return while the tree is frozen; it took {took:?}"
    );
    let (_, stderr) = texts(&output);
    assert!(stderr.contains("thaws"), "{stderr}");
    // A process just started may not show its arguments for a moment.
    wait_until("the detached waiter", || !waiters_for(&cuda).is_empty());
    assert_eq!(waiters_for(&cuda).len(), 1, "one waiter");

    // Still frozen: nothing is resumed.
    thread::sleep(Duration::from_millis(300));
    for pid in cuda {
        assert_eq!(fx.fake_state(pid), "checkpointed", "resumed while frozen");
    }
    let calls = fx.take_calls();
    assert!(
        calls
            .iter()
            .all(|c| c.op == "get_state" || c.op == "restore_tid"),
        "{calls:?}"
    );

    // CRIU thaws the tree (a --leave-running dump): the waiter resumes it.
    tree.signal_all("CONT");
    wait_until("the waiter to resume the tree", || {
        cuda.iter().all(|&pid| fx.fake_state(pid) == "running")
    });
    wait_until("the waiter to exit", || waiters_for(&cuda).is_empty());
    let calls = only_acted_on(&fx, &cuda, "the waiter");
    for pid in cuda {
        for op in ["restore", "unlock"] {
            assert!(
                calls
                    .iter()
                    .any(|c| c.pid == pid && c.op == op && c.code == 0),
                "no {op} of {pid}: {calls:?}"
            );
        }
    }
}

/// A plain dump kills the tree: the waiter has nothing to resume and does
/// not linger.
#[test]
fn the_post_dump_waiter_ends_when_the_processes_exit() {
    let fx = Fixture::new();
    let tree = family(&fx);
    let cuda = [tree.pid("a"), tree.pid("g")];
    let root = tree.root().to_string();
    run(hook(&fx, "pre-dump", Some(&root)), 0);
    tree.signal_all("STOP");
    wait_until("the tree to stop", || {
        cuda.iter().all(|&pid| proc_state(pid) == Some('T'))
    });
    run(hook(&fx, "post-dump", Some(&root)), 0);
    wait_until("the detached waiter", || !waiters_for(&cuda).is_empty());

    for pid in cuda {
        crate::support::send_signal(pid, "KILL");
    }
    wait_until("the waiter to give up", || waiters_for(&cuda).is_empty());
    fx.take_calls();
    thread::sleep(Duration::from_millis(100));
    assert!(
        fx.take_calls()
            .iter()
            .all(|c| c.op != "restore" && c.op != "unlock"),
        "nothing to resume"
    );
}

#[test]
fn post_dump_with_nothing_checkpointed_starts_no_waiter() {
    let fx = Fixture::new();
    let tree = family(&fx);
    let cuda = [tree.pid("a"), tree.pid("g")];
    run(hook(&fx, "post-dump", Some(&tree.root().to_string())), 0);
    // Give a waiter, were one started, time to show its arguments.
    thread::sleep(Duration::from_millis(100));
    assert!(waiters_for(&cuda).is_empty());
    for pid in cuda {
        assert_eq!(fx.fake_state(pid), "running");
    }
    assert!(fx
        .take_calls()
        .iter()
        .all(|c| c.op == "get_state" || c.op == "restore_tid"));
}

#[test]
fn the_tree_root_must_be_a_pid() {
    let fx = Fixture::new();
    let tree = family(&fx);
    let cuda = [tree.pid("a"), tree.pid("g")];
    for action in ["pre-dump", "post-dump", "post-resume"] {
        for init_pid in [
            None,
            Some(""),
            Some("abc"),
            Some("0"),
            Some("-3"),
            Some("12x"),
        ] {
            let output = run(hook(&fx, action, init_pid), 2);
            let (stdout, stderr) = texts(&output);
            assert!(stdout.is_empty(), "{action} {init_pid:?}: {stdout}");
            assert!(
                stderr.contains("CRTOOLS_INIT_PID"),
                "{action} {init_pid:?}: {stderr}"
            );
            fx.assert_no_calls(&format!("{action} with CRTOOLS_INIT_PID={init_pid:?}"));
        }
    }
    for pid in cuda {
        assert_eq!(fx.fake_state(pid), "running");
    }
}

/// A dead tree root fails pre-dump (CRIU aborts the dump on non-zero).
#[test]
fn a_dead_tree_root_fails_pre_dump() {
    let fx = Fixture::new();
    let dead = fx.cuda_target().kill_and_reap().to_string();
    let output = hook(&fx, "pre-dump", Some(&dead))
        .output()
        .expect("run cudackpt");
    assert_eq!(output.status.code(), Some(5), "{output:?}");
    let (_, stderr) = texts(&output);
    assert!(stderr.contains(&dead), "{stderr}");
    fx.assert_no_calls("pre-dump of a dead tree");
}

/// CRIU aborts the dump when pre-dump fails; the tree must be left running.
#[test]
fn a_failed_pre_dump_exits_non_zero_and_leaves_the_tree_running() {
    for rule in [
        "lock@{g}=error:999",
        "checkpoint@{a}=error:999",
        "lock@{g}=error:800",
    ] {
        let fx = Fixture::new();
        let tree = family(&fx);
        let (a, g) = (tree.pid("a"), tree.pid("g"));
        let rule = rule
            .replace("{a}", &a.to_string())
            .replace("{g}", &g.to_string());
        let mut command = hook(&fx, "pre-dump", Some(&tree.root().to_string()));
        command.env("FAKE_CUDA_INJECT", &rule);
        let output = command.output().expect("run cudackpt");
        let code = output.status.code().expect("an exit status");
        assert_ne!(code, 0, "{rule}: CRIU must see the failure");
        let (_, stderr) = texts(&output);
        assert!(stderr.contains("cudackpt:"), "{rule}: {stderr}");
        for pid in [a, g] {
            assert_eq!(fx.fake_state(pid), "running", "{rule}: PID {pid}");
        }
    }
}

#[test]
fn the_criu_hook_subcommand_needs_the_action() {
    let fx = Fixture::new();
    let output = run(fx.std_command(&["criu-hook"]), 2);
    let (stdout, stderr) = texts(&output);
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("CRTOOLS_SCRIPT_ACTION"), "{stderr}");

    let output = run(fx.std_command(&["--json", "criu-hook"]), 2);
    let doc: crate::wire::UsageDoc = parse_one_document(&output.stdout);
    crate::wire::Document::check(&doc, 2);
    assert_eq!(doc.command.as_deref(), Some("criu-hook"));
    let error = &doc.error;
    assert_eq!(error.kind, Kind::Usage);
    assert!(error.message.contains("CRTOOLS_SCRIPT_ACTION"), "{error:?}");

    // An empty action is no action.
    let mut command = fx.std_command(&["criu-hook"]);
    command.env("CRTOOLS_SCRIPT_ACTION", "");
    run(command, 2);
    fx.assert_no_calls("criu-hook without an action");
}

/// `cudackpt criu-hook` does what the no-argument form does, and can answer
/// in JSON.
#[test]
fn the_criu_hook_subcommand_runs_the_action() {
    let fx = Fixture::new();
    let tree = family(&fx);
    let cuda = [tree.pid("a"), tree.pid("g")];
    let root = tree.root().to_string();
    for (action, state) in [
        ("pre-dump", State::Checkpointed),
        ("post-resume", State::Running),
    ] {
        let mut command = fx.std_command(&["--json", "criu-hook"]);
        command
            .env("CRTOOLS_SCRIPT_ACTION", action)
            .env("CRTOOLS_INIT_PID", &root);
        let output = run(command, 0);
        let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
        crate::wire::Document::check(&doc, 0);
        assert_eq!(doc.command, "criu-hook");
        let mut pids = doc.pids();
        pids.sort_unstable();
        let mut expected = cuda.to_vec();
        expected.sort_unstable();
        assert_eq!(pids, expected, "{doc:?}");
        for pid in cuda {
            assert_eq!(doc.process(pid).state, state);
            assert_eq!(fx.fake_state(pid), state.as_str());
        }
    }
}

/// With arguments cudackpt is a plain command line, whatever CRIU's
/// variables say (a CRIU action script may run other commands).
#[test]
fn arguments_turn_the_hook_mode_off() {
    let fx = Fixture::new();
    let tree = family(&fx);
    let a = tree.pid("a");
    let mut command = fx.std_command(&["--json", "state", &a.to_string()]);
    command
        .env("CRTOOLS_SCRIPT_ACTION", "pre-dump")
        .env("CRTOOLS_INIT_PID", tree.root().to_string());
    let output = run(command, 0);
    let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
    assert_eq!(doc.command, "state");
    assert_eq!(doc.only(a).state, State::Running);
    assert_eq!(fx.fake_state(a), "running");
    assert_eq!(fx.fake_state(tree.pid("g")), "running");
}

/// Runs `script` in a shell that stands in for CRIU: it runs the hook as
/// CRIU does (fork and exec, itself the hook's parent), then ends.
fn as_criu(fx: &Fixture, script: &str) -> Output {
    fx.command_for(std::path::Path::new("/bin/sh"), &["-c", script])
        .output()
        .expect("the stand-in CRIU")
}

/// CRIU's failing dump, replayed: CRIU runs `pre-dump` (cudackpt suspends
/// the tree), then the dump fails, CRIU thaws the tree and exits without
/// any further hook that cudackpt acts on. A watcher bound to the CRIU
/// process (the hook's parent) sees it end and resumes the tree; what it
/// did is logged (syslog, else `criu-hook.log` beside the records).
#[test]
fn a_dump_that_fails_after_pre_dump_gets_its_tree_resumed() {
    let fx = Fixture::new();
    let tree = family(&fx);
    let cuda = [tree.pid("a"), tree.pid("g")];
    // The stand-in for CRIU: runs the hook as CRIU does (fork and exec,
    // itself the parent), then fails and exits.
    let criu = format!(
        "CRTOOLS_SCRIPT_ACTION=pre-dump CRTOOLS_INIT_PID={} {}; exit 1",
        tree.root(),
        crate::support::cudackpt_bin().display()
    );
    let output = as_criu(&fx, &criu);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let (stdout, stderr) = texts(&output);
    assert!(
        stderr.contains("if CRIU") && stderr.contains("ends without dumping"),
        "the hook says a watcher is there: {stdout}{stderr}"
    );
    wait_until("the watcher to resume the tree", || {
        cuda.iter().all(|&pid| fx.fake_state(pid) == "running")
    });
    if !std::path::Path::new("/dev/log").exists() {
        let log = fx.dir().join("records").join("criu-hook.log");
        wait_until("the watcher's log line", || {
            fs::read_to_string(&log).is_ok_and(|text| text.contains("criu-hook done"))
        });
        let text = fs::read_to_string(&log).expect("the log");
        for pid in cuda {
            assert!(text.contains(&format!("PID {pid} running")), "{text}");
        }
    }
    // Nothing is left behind: the record pre-dump handed to CRIU, and what
    // it left for a post-dump that never ran, both go.
    wait_until("the watcher to clear up", || {
        fx.intents().is_empty() && handoffs(&fx).is_empty()
    });
}

/// What pre-dumps left for post-dumps (`criu-hook/*.json`).
fn handoffs(fx: &Fixture) -> Vec<std::path::PathBuf> {
    fs::read_dir(fx.dir().join("records").join("criu-hook"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect()
        })
        .unwrap_or_default()
}

/// A pre-dump hook killed after its group was suspended but before its
/// watcher started once left the tree checkpointed with no trace anyone
/// read: the intent record was gone, and `recover` said success while the
/// processes stayed checkpointed. The record now outlives the hand-off
/// (handed to CRIU): once CRIU has ended, every cudackpt refuses those
/// processes and `recover` resumes them, and clears what was left for the
/// post-dump.
#[test]
fn a_pre_dump_hook_killed_before_its_watcher_leaves_recover_the_tree() {
    let fx = Fixture::new();
    let tree = family(&fx);
    let cuda = [tree.pid("a"), tree.pid("g")];
    let criu = format!(
        "CRTOOLS_SCRIPT_ACTION=pre-dump CRTOOLS_INIT_PID={} CUDACKPT_DEBUG_KILL_AT=before-watcher {}; exit 1",
        tree.root(),
        crate::support::cudackpt_bin().display()
    );
    let output = as_criu(&fx, &criu);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    for pid in cuda {
        assert_eq!(
            fx.fake_state(pid),
            "checkpointed",
            "the hook died after the suspend"
        );
    }
    assert_eq!(fx.intents().len(), 1, "the record outlived the hook");
    // CRIU is gone: the processes are refused until recovered.
    let doc: ProcessCommandDoc = fx.json(&["resume", &cuda[0].to_string()], 10);
    assert_eq!(doc.refusal(cuda[0]).kind, Kind::NeedsRecovery);
    let doc: ProcessCommandDoc = fx.json(&["recover"], 0);
    assert!(doc.ok, "{doc:?}");
    for pid in cuda {
        assert_eq!(fx.fake_state(pid), "running", "{doc:?}");
    }
    assert!(fx.intents().is_empty());
    assert!(
        handoffs(&fx).is_empty(),
        "recover cleared the pre-dump's hand-off"
    );
}

/// A dump that went on (its post-dump ran) takes the record pre-dump
/// handed to CRIU: a CRIU that then ends leaves nothing to recover, and
/// nothing refused.
#[test]
fn a_post_dump_takes_the_record_handed_to_criu() {
    let fx = Fixture::new();
    let tree = family(&fx);
    let a = tree.pid("a");
    let bin = crate::support::cudackpt_bin();
    let criu = format!(
        // `; exit`: the shell stays the parent of both (no exec of the last).
        "CRTOOLS_INIT_PID={root} CRTOOLS_SCRIPT_ACTION=pre-dump {bin} && CRTOOLS_INIT_PID={root} CRTOOLS_SCRIPT_ACTION=post-dump {bin}; exit $?",
        root = tree.root(),
        bin = bin.display()
    );
    let output = as_criu(&fx, &criu);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    // Right after the post-dump (a record the watcher would recover only
    // after CRIU ends), no record handed to CRIU is left.
    for record in fx.intents() {
        let text = fs::read_to_string(&record).unwrap_or_default();
        assert!(!text.contains("handed_to_criu"), "{text}");
    }
    // The post-dump waiter resumes the (never frozen) tree.
    wait_until("the post-dump waiter to resume the tree", || {
        fx.fake_state(a) == "running"
    });
    // The waiter's own resume writes a record of its own while it runs.
    wait_until("the watcher and the waiter to finish", || {
        handoffs(&fx).is_empty() && fx.intents().is_empty()
    });
    // Nothing refuses the process: no record was left for recover.
    let doc: ProcessCommandDoc = fx.json(&["recover"], 0);
    assert!(doc.processes.is_empty(), "{doc:?}");
}

#[test]
fn pre_dump_locks_wait_at_most_the_hook_timeout() {
    let fx = Fixture::new();
    let tree = family(&fx);
    let mut command = hook(&fx, "pre-dump", Some(&tree.root().to_string()));
    command
        .env("CUDACKPT_LOCK_TIMEOUT", "300ms")
        .env("FAKE_CUDA_INJECT", "lock=busy:60000");
    let started = Instant::now();
    let output = run(command, 3);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let (_, stderr) = texts(&output);
    assert!(stderr.contains("within 300 ms"), "{stderr}");
    for pid in [tree.pid("a"), tree.pid("g")] {
        assert_eq!(fx.fake_state(pid), "running");
    }
    let mut bad = hook(&fx, "pre-dump", Some(&tree.root().to_string()));
    bad.env("CUDACKPT_LOCK_TIMEOUT", "soon");
    let (_, stderr) = texts(&run(bad, 2));
    assert!(stderr.contains("CUDACKPT_LOCK_TIMEOUT"), "{stderr}");
}

#[test]
fn a_non_utf8_action_is_named_as_such() {
    use std::os::unix::ffi::OsStrExt;
    let fx = Fixture::new();
    let mut command = fx.std_command(&[]);
    command.env(
        "CRTOOLS_SCRIPT_ACTION",
        std::ffi::OsStr::from_bytes(b"pre-\xffdump"),
    );
    let (_, stderr) = texts(&run(command, 2));
    assert!(stderr.contains("not UTF-8"), "{stderr}");
    fx.assert_no_calls("an unreadable action");
}

#[test]
fn the_tree_of_pid_1_is_the_whole_host_and_needs_confirming() {
    let fx = Fixture::new();
    let output = run(hook(&fx, "pre-dump", Some("1")), 2);
    let (_, stderr) = texts(&output);
    assert!(stderr.contains("the tree of PID 1"), "{stderr}");
    assert!(stderr.contains("CUDACKPT_YES=1"), "{stderr}");
    fx.assert_no_calls("the whole host, unconfirmed");
}

/// Post-dump resumes exactly what this dump's pre-dump suspended. Before,
/// its waiter resumed every CUDA process it found in the tree once thawed,
/// one that was checkpointed on purpose before the dump included (with
/// `CRTOOLS_INIT_PID=1`: every such process on the host).
#[test]
fn post_dump_resumes_only_what_pre_dump_suspended() {
    let fx = Fixture::new();
    let tree = family(&fx);
    let (mine, kept) = (tree.pid("a"), tree.pid("g"));
    let root = tree.root().to_string();
    // Someone checkpointed this one on purpose before the dump.
    fx.json::<crate::wire::ProcessCommandDoc>(&["suspend", &kept.to_string()], 0);
    run(hook(&fx, "pre-dump", Some(&root)), 0);
    tree.signal_all("STOP");
    wait_until("the tree to stop", || {
        [mine, kept].iter().all(|&pid| proc_state(pid) == Some('T'))
    });
    run(hook(&fx, "post-dump", Some(&root)), 0);
    wait_until("the detached waiter", || !waiters_for(&[mine]).is_empty());
    assert!(waiters_for(&[kept]).is_empty(), "nobody waits to resume it");
    tree.signal_all("CONT");
    wait_until("the waiter to resume what pre-dump suspended", || {
        fx.fake_state(mine) == "running"
    });
    wait_until("the waiter to exit", || waiters_for(&[mine]).is_empty());
    assert_eq!(
        fx.fake_state(kept),
        "checkpointed",
        "left as its owner left it"
    );
}

/// The tree of PID 1 is the whole host at post-dump too: without
/// `CUDACKPT_YES=1` it is refused, and no waiter starts.
#[test]
fn post_dump_of_the_tree_of_pid_1_needs_confirming() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    fx.json::<crate::wire::ProcessCommandDoc>(&["suspend", &target.arg()], 0);
    fx.take_calls();
    let output = run(hook(&fx, "post-dump", Some("1")), 2);
    let (_, stderr) = texts(&output);
    assert!(
        stderr.contains("the tree of PID 1 is the whole host") && stderr.contains("CUDACKPT_YES=1"),
        "{stderr}"
    );
    thread::sleep(Duration::from_millis(100));
    assert!(waiters_for(&[target.pid]).is_empty());
    fx.assert_no_calls("post-dump of the whole host, unconfirmed");
}

/// After a plain dump CRIU kills the tree; until its parent reaps it, each
/// process is a zombie with its PID and start time. The watcher that a
/// pre-dump started must take a zombie for what it is, an exited process,
/// and call nothing on it (the driver would fail, and an undump restoring
/// the job onto that PID meanwhile must find its state as the dump left it).
#[test]
fn the_watcher_leaves_a_dumped_process_that_is_a_zombie_alone() {
    let fx = Fixture::new();
    let mut target = fx.cuda_target();
    fx.cudackpt(&["suspend", &target.arg()]).assert().success();
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", target.pid)).expect("stat");
    let start: u64 = stat
        .rsplit(')')
        .next()
        .and_then(|rest| rest.split_whitespace().nth(19))
        .and_then(|field| field.parse().ok())
        .expect("the start time");
    target.kill_leaving_zombie();
    fx.take_calls();
    let mut gone = std::process::Command::new("true").spawn().expect("true");
    gone.wait().expect("reaped");
    let criu = gone.id().to_string();
    let zombie = format!("{}@{start}", target.pid);
    fx.cudackpt(&["criu-hook", "--after-criu", &criu, &zombie])
        .assert()
        .success();
    fx.assert_no_calls("the watcher, on a zombie");
    assert_eq!(fx.fake_state(target.pid), "checkpointed");
}
