//! Finding CUDA processes rather than naming them (docs/guide/commands.md, "Commands"): `ps`,
//! `--tree`, `--cgroup` and `--all`. Discovery is read-only: only GetState
//! (and the restore thread id `ps` shows) reach the driver.
//!
//! Every process that maps the fake counts as a CUDA process, so a scan of
//! the whole host also finds other tests' targets (and their cudackpt
//! runs, which load the fake): whole-host assertions are about this test's
//! own processes only. `--tree` and `--cgroup` pick exact sets.

use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use crate::support::{
    check_document, parse_one_document, running_as_root, texts, wait_until, Fixture, Member,
    RealCgroup, SpawnGuarded, Tree,
};
use crate::wire::{Document, Kind, ProcessCommandDoc, State, UsageDoc};

/// The driver calls discovery may make: read-only queries.
const READ_ONLY: [&str; 2] = ["get_state", "restore_tid"];

/// Asserts that every call since the log was last taken was a read-only
/// query, and returns the PIDs that were queried.
fn assert_read_only(fx: &Fixture, what: &str) -> BTreeSet<i32> {
    let calls = fx.take_calls();
    for call in &calls {
        assert!(
            READ_ONLY.contains(&call.op.as_str()),
            "{what}: discovery must only query, yet calls.log has {call:?} (all: {calls:?})"
        );
    }
    calls.iter().map(|c| c.pid).collect()
}

/// Runs a command over the whole host (`ps`, `--all`) and parses its
/// document, checking it against the exit status it returned. Processes of
/// other tests come and go meanwhile, and a row about one that has exited
/// since may fail (whether it should, and the exit status then, is for
/// `a_process_that_vanishes_during_ps_is_not_an_error` and
/// `ps_survives_processes_coming_and_going`); every row about one of `mine`
/// must be a success.
fn whole_host(fx: &Fixture, args: &[&str], mine: &[i32]) -> ProcessCommandDoc {
    let mut full = vec!["--json"];
    full.extend_from_slice(args);
    let output = fx.cudackpt(&full).output().expect("run cudackpt");
    let code = output.status.code().expect("an exit status");
    let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
    doc.check(code);
    assert!(doc.error.is_none(), "{args:?}: {doc:?}");
    for p in &doc.processes {
        if mine.contains(&p.pid) {
            assert!(p.ok, "{args:?}: {p:?}");
        } else if !p.ok {
            assert!(
                matches!(crate::support::proc_state(p.pid), None | Some('Z')),
                "{args:?}: only a process that has exited since may fail: {p:?}"
            );
        }
    }
    doc
}

/// The PIDs of a human table's rows (the first cell of each line after the
/// header).
fn table_pids(table: &str) -> Vec<i32> {
    table
        .lines()
        .skip(1)
        .map(|line| {
            line.split_whitespace()
                .next()
                .and_then(|cell| cell.parse().ok())
                .unwrap_or_else(|| panic!("a row starts with a PID: {line:?}\n{table}"))
        })
        .collect()
}

/// A table row's cells, found by PID.
fn table_row(table: &str, pid: i32) -> Vec<String> {
    table
        .lines()
        .map(|line| {
            line.split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .find(|cells| cells.first().is_some_and(|c| *c == pid.to_string()))
        .unwrap_or_else(|| panic!("no row for PID {pid}:\n{table}"))
}

fn set(pids: &[i32]) -> BTreeSet<i32> {
    pids.iter().copied().collect()
}

/// The shell tree most tests use: under a plain root shell, a CUDA child, a
/// plain child, and an intermediate shell with a CUDA and a plain child of
/// its own.
fn family(fx: &Fixture) -> Tree {
    fx.tree(
        r#"LD_PRELOAD=$CUDA sleep 600 & echo "cuda_child $!" >> "$PIDS"
sleep 600 & echo "plain_child $!" >> "$PIDS"
sh -c 'LD_PRELOAD=$CUDA sleep 600 & echo "cuda_grandchild $!" >> "$PIDS"
sleep 600 & echo "plain_grandchild $!" >> "$PIDS"
wait' & echo "mid $!" >> "$PIDS"
wait"#,
        &[
            ("cuda_child", Member::Cuda),
            ("plain_child", Member::Plain),
            ("mid", Member::Shell),
            ("cuda_grandchild", Member::Cuda),
            ("plain_grandchild", Member::Plain),
        ],
    )
}

#[test]
fn ps_lists_this_tests_cuda_processes_and_no_plain_one() {
    let fx = Fixture::new();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    let plain = fx.plain_target();
    fx.put_in(&b, "checkpointed");

    let doc = whole_host(&fx, &["ps"], &[a.pid, b.pid]);
    assert_eq!(doc.command, "ps");
    let pids = doc.pids();
    assert!(
        !pids.contains(&plain.pid),
        "a plain process is listed: {doc:?}"
    );
    let mut sorted = pids.clone();
    sorted.sort_unstable();
    assert_eq!(pids, sorted, "rows in PID order");
    for (t, state) in [(&a, State::Running), (&b, State::Checkpointed)] {
        let p = doc.process(t.pid);
        assert_eq!(p.state, state, "{p:?}");
        assert_eq!(p.restore_tid, Some(t.pid), "{p:?}");
        assert_eq!(p.name.as_deref(), Some("sleep"), "{p:?}");
        assert_eq!(p.nccl, Some(false), "{p:?}");
        assert_eq!(p.gpu_memory_bytes, None, "no NVML on the fake host: {p:?}");
        assert!(p.steps.is_empty() && p.warnings.is_empty(), "{p:?}");
    }
    let queried = assert_read_only(&fx, "ps --json");
    assert!(queried.contains(&a.pid) && queried.contains(&b.pid));
    assert!(!queried.contains(&plain.pid), "GetState on a plain process");

    // The same for people: one row per CUDA process, with its NCCL column.
    let output = fx.cudackpt(&["ps"]).output().expect("run ps");
    let (stdout, _) = texts(&output);
    let header: Vec<&str> = stdout
        .lines()
        .next()
        .expect("a header")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["PID", "STATE", "RESTORE-TID", "GPU-MEM", "NCCL", "NAME"]
    );
    let rows = table_pids(&stdout);
    assert!(!rows.contains(&plain.pid), "{stdout}");
    let pid = |t: &crate::support::Target| t.pid.to_string();
    assert_eq!(
        table_row(&stdout, a.pid),
        [
            pid(&a),
            "running".into(),
            pid(&a),
            "-".into(),
            "no".into(),
            "sleep".into()
        ]
    );
    assert_eq!(
        table_row(&stdout, b.pid),
        [
            pid(&b),
            "checkpointed".into(),
            pid(&b),
            "-".into(),
            "no".into(),
            "sleep".into()
        ]
    );
    assert_read_only(&fx, "ps");
    assert_eq!(fx.fake_state(a.pid), "running");
    assert_eq!(fx.fake_state(b.pid), "checkpointed");
}

#[test]
fn tree_picks_the_cuda_processes_of_the_root_and_its_descendants() {
    let fx = Fixture::new();
    let tree = family(&fx);
    let outside = fx.cuda_target();
    let cuda = [tree.pid("cuda_child"), tree.pid("cuda_grandchild")];
    let root = tree.root().to_string();

    let doc: ProcessCommandDoc = fx.json(&["ps", "--tree", &root], 0);
    assert_eq!(set(&doc.pids()), set(&cuda), "{doc:?}");
    assert!(doc.warnings.is_empty(), "{doc:?}");
    assert!(doc.processes.iter().all(|p| p.state == State::Running));
    let queried = assert_read_only(&fx, "ps --tree");
    assert!(
        !queried.contains(&outside.pid),
        "a process outside the tree was queried"
    );

    let output = fx
        .cudackpt(&["ps", "--tree", &root])
        .assert()
        .code(0)
        .get_output()
        .clone();
    let (stdout, stderr) = texts(&output);
    assert_eq!(set(&table_pids(&stdout)), set(&cuda), "{stdout}");
    assert!(stderr.is_empty(), "{stderr}");
    fx.take_calls();

    // Below the root: an intermediate shell's tree, and a leaf's own tree
    // (the root itself counts).
    let doc: ProcessCommandDoc = fx.json(&["ps", "--tree", &tree.pid("mid").to_string()], 0);
    assert_eq!(doc.pids(), [tree.pid("cuda_grandchild")]);
    let doc: ProcessCommandDoc = fx.json(&["ps", "--tree", &outside.arg()], 0);
    assert_eq!(doc.pids(), [outside.pid]);
    fx.take_calls();

    // A command that changes state acts on exactly the tree's CUDA processes.
    let doc: ProcessCommandDoc = fx.json(&["suspend", "--tree", &root], 0);
    assert_eq!(set(&doc.pids()), set(&cuda), "{doc:?}");
    for &pid in &cuda {
        assert_eq!(doc.process(pid).state, State::Checkpointed);
        assert_eq!(fx.fake_state(pid), "checkpointed");
    }
    assert_eq!(fx.fake_state(outside.pid), "running");
    assert!(
        fx.take_calls()
            .iter()
            .all(|c| cuda.contains(&c.pid) || c.op == "get_state"),
        "only the tree's CUDA processes are acted on"
    );
    let doc: ProcessCommandDoc = fx.json(&["resume", "--tree", &root], 0);
    assert_eq!(set(&doc.pids()), set(&cuda));
    for &pid in &cuda {
        assert_eq!(fx.fake_state(pid), "running");
    }
}

#[test]
fn selectors_and_pids_combine_without_duplicates() {
    let fx = Fixture::new();
    let tree = family(&fx);
    let outside = fx.cuda_target();
    let grandchild = tree.pid("cuda_grandchild");
    let doc: ProcessCommandDoc = fx.json(
        &[
            "state",
            &outside.arg(),
            "--tree",
            &tree.pid("mid").to_string(),
            "--tree",
            &tree.root().to_string(),
            "-p",
            &grandchild.to_string(),
        ],
        0,
    );
    let pids = doc.pids();
    assert_eq!(
        set(&pids),
        set(&[outside.pid, grandchild, tree.pid("cuda_child")]),
        "{doc:?}"
    );
    assert_eq!(pids.len(), 3, "each process once: {pids:?}");
    assert_eq!(&pids[..2], [outside.pid, grandchild], "named PIDs first");
}

#[test]
fn cgroup_picks_exactly_the_cuda_processes_listed() {
    let Some(pod) = RealCgroup::new() else {
        return;
    };
    let fx = Fixture::new();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    let plain = fx.plain_target();
    let outside = fx.cuda_target();

    // A pod: a parent cgroup with a process of its own and a child cgroup
    // per container (one of them empty).
    let container = pod.child("container-a");
    pod.child("container-a/empty");
    pod.add(&pod.dir, a.pid);
    pod.add(&pod.dir, plain.pid);
    pod.add(&container, b.pid);
    let pod_arg = pod.dir.to_string_lossy().into_owned();

    let doc: ProcessCommandDoc = fx.json(&["ps", "--cgroup", &pod_arg], 0);
    let mut expected = vec![a.pid, b.pid];
    expected.sort_unstable();
    assert_eq!(doc.pids(), expected, "in PID order");
    let queried = assert_read_only(&fx, "ps --cgroup");
    assert!(!queried.contains(&outside.pid) && !queried.contains(&plain.pid));

    // The child cgroup alone.
    let doc: ProcessCommandDoc = fx.json(&["ps", "--cgroup", &container.to_string_lossy()], 0);
    assert_eq!(doc.pids(), [b.pid]);
    fx.take_calls();

    let doc: ProcessCommandDoc = fx.json(&["suspend", "--cgroup", &pod_arg], 0);
    assert_eq!(set(&doc.pids()), set(&[a.pid, b.pid]));
    for t in [&a, &b] {
        assert_eq!(fx.fake_state(t.pid), "checkpointed");
    }
    assert_eq!(fx.fake_state(outside.pid), "running");
    let doc: ProcessCommandDoc = fx.json(&["resume", "--cgroup", &pod_arg], 0);
    assert_eq!(set(&doc.pids()), set(&[a.pid, b.pid]));
    for t in [&a, &b] {
        assert_eq!(fx.fake_state(t.pid), "running");
    }
}

#[test]
fn a_missing_cgroup_is_a_usage_error() {
    let fx = Fixture::new();
    let a = fx.cuda_target();
    let missing = fx.dir().join("no-such-cgroup");
    let missing = missing.to_string_lossy();
    for args in [
        vec!["ps", "--cgroup", &missing],
        vec!["state", "--cgroup", &missing],
        vec!["suspend", "--cgroup", &missing],
    ] {
        // Exit 2's one document, as for a parse error.
        let doc: UsageDoc = fx.json(&args, 2);
        let error = &doc.error;
        assert_eq!(error.kind, Kind::Usage, "{doc:?}");
        assert!(error.message.contains(&*missing), "{error:?}");
        assert_eq!(doc.command.as_deref(), Some(args[0]));
        fx.assert_no_calls(&format!("{args:?}"));

        let output = fx.cudackpt(&args).assert().code(2).get_output().clone();
        let (stdout, stderr) = texts(&output);
        assert!(stdout.is_empty(), "{stdout}");
        assert!(stderr.contains(&*missing), "{stderr}");
    }
    // A directory without cgroup.procs is no cgroup either.
    let doc: UsageDoc = fx.json(&["ps", "--cgroup", &fx.dir().to_string_lossy()], 2);
    assert_eq!(doc.error.kind, Kind::Usage);
    assert_eq!(fx.fake_state(a.pid), "running");
}

#[test]
fn all_needs_yes_to_change_state() {
    let fx = Fixture::new();
    let a = fx.cuda_target();
    let pid = a.arg();
    for command in [
        "suspend",
        "resume",
        "toggle",
        "lock",
        "checkpoint",
        "restore",
        "unlock",
    ] {
        let doc: UsageDoc = fx.json(&[command, "--all"], 2);
        let error = &doc.error;
        assert_eq!(error.kind, Kind::Usage, "{command}: {doc:?}");
        let words = format!("{} {}", error.message, error.hint.as_deref().unwrap_or(""));
        assert!(words.contains("--yes"), "{command}: {error:?}");
        fx.assert_no_calls(&format!("{command} --all"));

        let output = fx
            .cudackpt(&[command, "--all"])
            .assert()
            .code(2)
            .get_output()
            .clone();
        let (stdout, stderr) = texts(&output);
        assert!(stdout.is_empty(), "{command}: {stdout}");
        assert!(stderr.contains("--yes"), "{command}: {stderr}");
        fx.assert_no_calls(&format!("{command} --all (human)"));

        // Naming a PID too changes nothing: the whole command is refused,
        // in the same one document.
        let doc: UsageDoc = fx.json(&[command, &pid, "--all"], 2);
        let words = format!(
            "{} {}",
            doc.error.message,
            doc.error.hint.as_deref().unwrap_or("")
        );
        assert!(words.contains("--yes"), "{doc:?}");
        fx.assert_no_calls(&format!("{command} PID --all"));
    }
    assert_eq!(fx.fake_state(a.pid), "running");
}

#[test]
fn all_with_yes_runs_a_read_only_command_on_every_cuda_process() {
    let fx = Fixture::new();
    let (a, b) = (fx.cuda_target(), fx.cuda_target());
    let plain = fx.plain_target();
    fx.put_in(&b, "locked");
    for args in [
        vec!["state", "--all", "--yes"],
        vec!["--yes", "state", "--all"],
        vec!["state", "--all"],
    ] {
        let doc = whole_host(&fx, &args, &[a.pid, b.pid]);
        assert_eq!(doc.command, "state");
        assert!(!doc.pids().contains(&plain.pid), "{args:?}: {doc:?}");
        assert_eq!(doc.process(a.pid).state, State::Running);
        assert_eq!(doc.process(b.pid).state, State::Locked);
        assert_read_only(&fx, &format!("{args:?}"));
    }
    assert_eq!(fx.fake_state(a.pid), "running");
    assert_eq!(fx.fake_state(b.pid), "locked");
}

#[test]
fn a_dead_tree_root_exits_5() {
    let fx = Fixture::new();
    let a = fx.cuda_target();
    let dead = fx.cuda_target().kill_and_reap().to_string();
    for command in ["ps", "state", "suspend"] {
        let doc: ProcessCommandDoc = fx.json(&[command, "--tree", &dead], 5);
        let error = doc.error.as_ref().expect("a command-level error");
        assert_eq!(error.kind, Kind::NoSuchProcess, "{doc:?}");
        assert!(error.message.contains(&dead), "{error:?}");
        assert!(doc.processes.is_empty());
        fx.assert_no_calls(&format!("{command} --tree DEAD"));
    }
    // A dead root fails the command even next to a live target.
    let doc: ProcessCommandDoc = fx.json(&["suspend", &a.arg(), "--tree", &dead], 5);
    assert!(!doc.ok);
    fx.assert_no_calls("suspend PID --tree DEAD");
    assert_eq!(fx.fake_state(a.pid), "running");
}

#[test]
fn a_tree_without_cuda_is_a_warning_not_an_error() {
    let fx = Fixture::new();
    let plain = fx.plain_target();
    let root = plain.arg();
    for command in ["ps", "state", "suspend", "resume"] {
        let doc: ProcessCommandDoc = fx.json(&[command, "--tree", &root], 0);
        assert!(doc.processes.is_empty(), "{command}: {doc:?}");
        assert!(
            doc.warnings
                .iter()
                .any(|w| w.contains("no CUDA process found") && w.contains(&root)),
            "{command}: {doc:?}"
        );
        fx.assert_no_calls(command);

        let output = fx
            .cudackpt(&[command, "--tree", &root])
            .assert()
            .code(0)
            .get_output()
            .clone();
        let (stdout, stderr) = texts(&output);
        assert!(stdout.is_empty(), "{command}: no empty table: {stdout:?}");
        assert!(
            stderr.contains("warning") && stderr.contains("no CUDA process found"),
            "{command}: {stderr}"
        );
        fx.assert_no_calls(command);
    }
    // So is a cgroup without a CUDA process.
    let Some(group) = RealCgroup::new() else {
        return;
    };
    group.add(&group.dir, plain.pid);
    let group = &group.dir;
    let doc: ProcessCommandDoc = fx.json(&["ps", "--cgroup", &group.to_string_lossy()], 0);
    assert!(doc.processes.is_empty());
    assert!(
        doc.warnings
            .iter()
            .any(|w| w.contains("no CUDA process found")),
        "{doc:?}"
    );
}

/// SPEC: processes vanish while the host is scanned; `ps` skips them. The
/// victim's GetState during discovery is held up (the fake delays it), and
/// the victim exits and is reaped meanwhile: once discovery is over it is
/// gone, and `ps` must neither list it as an error nor fail.
#[test]
fn a_process_that_vanishes_during_ps_is_not_an_error() {
    let fx = Fixture::new();
    let tree = fx.tree(
        r#"LD_PRELOAD=$CUDA sleep 600 & echo "canary $!" >> "$PIDS"
LD_PRELOAD=$CUDA sleep 600 & echo "victim $!" >> "$PIDS"
wait"#,
        &[("canary", Member::Cuda), ("victim", Member::Cuda)],
    );
    let (canary, victim) = (tree.pid("canary"), tree.pid("victim"));
    let child = fx
        .std_command(&["--json", "ps", "--tree", &tree.root().to_string()])
        .env("FAKE_CUDA_INJECT", format!("get_state@{victim}=delay:1000"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn_guarded();
    // Discovery queries every candidate at once: when the canary's answer is
    // logged, the victim's query is under way.
    wait_until("the canary's GetState", || {
        fx.calls()
            .iter()
            .any(|c| c.pid == canary && c.op == "get_state")
    });
    crate::support::send_signal(victim, "KILL");
    // The root shell reaps it.
    wait_until("the victim to be reaped", || {
        crate::support::proc_state(victim).is_none()
    });
    let output = child.wait_with_output().expect("ps exits");
    let code = output.status.code().expect("an exit status");
    let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
    doc.check(code);
    assert!(
        !doc.pids().contains(&victim),
        "PID {victim} vanished during the scan, yet ps reports on it: {doc:?}"
    );
    assert_eq!(code, 0, "a process that vanished fails ps: {doc:?}");
    assert_eq!(doc.pids(), [canary]);
}

/// Many short-lived CUDA processes come and go while `ps` scans the host:
/// every run succeeds and lists this test's long-lived target.
#[test]
fn ps_survives_processes_coming_and_going() {
    let fx = Fixture::new();
    let steady = fx.cuda_target();
    let churn = fx.tree(
        r#"i=0
while [ $i -lt 600 ]; do
  LD_PRELOAD=$CUDA sleep 0.0$((i % 5 + 1)) &
  i=$((i + 1))
done
wait"#,
        &[],
    );
    let started = Instant::now();
    let mut runs = 0;
    let mut failures = Vec::new();
    while runs < 12 && started.elapsed() < Duration::from_secs(20) {
        let output = fx.cudackpt(&["--json", "ps"]).output().expect("run ps");
        let code = output.status.code().expect("an exit status");
        let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
        doc.check(code);
        assert!(doc.process(steady.pid).ok, "{doc:?}");
        if code != 0 {
            failures.push(
                doc.processes
                    .iter()
                    .filter(|p| !p.ok)
                    .map(|p| format!("{}: {}", p.pid, p.error().message))
                    .collect::<Vec<_>>(),
            );
        }
        runs += 1;
    }
    drop(churn);
    assert!(
        failures.is_empty(),
        "{} of {runs} ps runs failed on processes that exited meanwhile: {failures:?}",
        failures.len()
    );
    assert_read_only(&fx, "ps under churn");
}

/// `ps` by a user who may not read other users' /proc/PID/maps does not
/// claim there is no CUDA process: it says how many processes it could not
/// inspect, and why. As root, run as nobody next to root's CUDA process;
/// otherwise as this user, next to root's PID 1.
#[test]
fn ps_says_how_many_processes_it_could_not_inspect() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let mut command = if running_as_root() {
        let bin = fx.world_runnable_cudackpt();
        let mut nobody = fx.command_for(&bin, &["--json", "ps"]);
        nobody
            .uid(65534)
            .gid(65534)
            .current_dir("/")
            .env("CUDACKPT_LIBCUDA", fx.world_fake());
        assert_cmd::Command::from_std(nobody)
    } else {
        fx.cudackpt(&["--json", "ps"])
    };
    let doc: ProcessCommandDoc = check_document(&mut command, 0);
    if running_as_root() {
        assert!(
            doc.processes.iter().all(|p| p.pid != target.pid),
            "nobody cannot see root's process: {doc:?}"
        );
    }
    let count = uninspected(&doc)
        .unwrap_or_else(|| panic!("no word on the processes it could not inspect: {doc:?}"));
    assert!(count >= 1, "{doc:?}");
    let remark = doc
        .warnings
        .iter()
        .find(|w| w.contains("could not be inspected"))
        .expect("remark");
    assert!(
        (remark.contains("may not read their /proc/PID/maps")
            || remark.contains("may not read its /proc/PID/maps"))
            && remark.contains("CAP_SYS_PTRACE"),
        "{remark}"
    );
    // Root sees more (at least the CUDA process nobody could not).
    if running_as_root() {
        let doc: ProcessCommandDoc = fx.json(&["ps"], 0);
        assert!(doc.processes.iter().any(|p| p.pid == target.pid), "{doc:?}");
        assert!(uninspected(&doc).unwrap_or(0) < count, "{doc:?}");
    }
}

/// The count of processes a `ps` document says it could not inspect:
/// "PID 7 could not…", "PIDs 7, 9 and 3 more could not…". Each one named
/// must be a real PID.
fn uninspected(doc: &ProcessCommandDoc) -> Option<usize> {
    let remark = doc
        .warnings
        .iter()
        .find(|w| w.contains("could not be inspected"))?;
    let listed = remark
        .strip_prefix("PIDs ")
        .or_else(|| remark.strip_prefix("PID "))?
        .split(" could not")
        .next()?;
    let (named, more) = match listed.split_once(" and ") {
        Some((named, more)) => (named, more.trim_end_matches(" more").parse::<usize>().ok()?),
        None => (listed, 0),
    };
    let pids: Vec<i32> = named
        .split(", ")
        .map(|pid| pid.parse().expect("a PID"))
        .collect();
    Some(pids.len() + more)
}
