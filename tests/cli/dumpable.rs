//! What CRIU cannot dump is refused at pre-dump, before any change
//! (`src/ops/preflight/dumpable.rs`): a process of the tree that maps a GPU
//! device node without CUDA state (a DataLoader worker forked after CUDA
//! started), and an io_uring ring anywhere in the tree. A dry run and
//! `check` say it as a warning. CI has no /dev/nvidia0: a debug build takes
//! the device prefix from `CUDACKPT_DEBUG_DEVICE_PREFIX`, and a file in the
//! fixture's directory stands in for the device node.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Output};

use crate::support::{parse_one_document, prerequisite, texts, wait_until, Fixture, Member, Tree};
use crate::wire::{Document, Kind, ProcessCommandDoc, State};

/// Holds what it is told to, then says so in `<path>.ready` (or why not in
/// `<path>.failed`) and sleeps: `device PATH` maps PATH shared and keeps a
/// descriptor of it, as a forked child keeps its parent's `/dev/nvidia0`;
/// `device_forks PATH` does that and forks 5 children that keep it too (a
/// compile-worker pool's workers); `io_uring PATH` sets up an io_uring and maps its ring; `io_uring_fd
/// PATH` sets one up and only keeps its descriptor (as a ring set up with
/// IORING_SETUP_NO_MMAP, or unmapped); `wide PATH` maps one file with a
/// 3,800-character path 1,500 times, so its maps run past cudackpt's
/// 4 MiB cap (the attacker's file had 32,000 such lines).
const HOLDER: &str = r#"
import ctypes, mmap, os, sys, time
what, path = sys.argv[1], sys.argv[2]
if what in ("device", "device_forks"):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.ftruncate(fd, mmap.PAGESIZE)
    held = mmap.mmap(fd, mmap.PAGESIZE, mmap.MAP_SHARED)
    forks = 5 if what == "device_forks" else 0
    for _ in range(forks):
        if os.fork() == 0:
            ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL: gone with the pool
            time.sleep(600)
            os._exit(0)
elif what == "wide":
    deep = path + ".wide"
    while len(deep) < 3800:
        deep += "/" + "d" * 200
    os.makedirs(deep, exist_ok=True)
    fd = os.open(deep + "/f", os.O_RDWR | os.O_CREAT, 0o600)
    os.ftruncate(fd, mmap.PAGESIZE)
    # libc's mmap (Python's keeps a descriptor per mapping), alternating
    # protections so that the kernel merges no two neighbours.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    for i in range(1500):
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if i % 2 else 0)
        libc.mmap(None, mmap.PAGESIZE, prot, mmap.MAP_SHARED, fd, 0)
else:
    params = (ctypes.c_ubyte * 120)()
    fd = ctypes.CDLL(None, use_errno=True).syscall(425, 4, params)
    if fd < 0:
        with open(path + ".failed", "w") as failed:
            failed.write(os.strerror(ctypes.get_errno()))
        sys.exit(1)
    if what == "io_uring":
        held = mmap.mmap(fd, mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
open(path + ".ready", "w").close()
time.sleep(600)
"#;

/// A tree as CRIU would dump it: a root shell with a CUDA child (`a`,
/// `sleep`), which forked a child holding `what` (see [`HOLDER`]) without
/// the driver, as a DataLoader worker. Returns the tree, the holder's PID
/// and the device prefix that makes its file a "device node", or None when
/// this kernel will not set up what was asked.
fn tree_with(fx: &Fixture, what: &str) -> Option<(Tree, i32, String)> {
    tree_with_holder_at(fx, what, &fx.dir().join("holder.py"))
}

/// [`tree_with`], the holder's script at `holder` (its command line names
/// it).
fn tree_with_holder_at(fx: &Fixture, what: &str, holder: &Path) -> Option<(Tree, i32, String)> {
    fs::create_dir_all(holder.parent().expect("a directory")).expect("mkdir");
    fs::write(holder, HOLDER).expect("write the holder");
    let device = fx.dir().join("nvidia0");
    let tree = fx.tree(
        &format!(
            r#"LD_PRELOAD=$CUDA sh -c 'env -u LD_PRELOAD python3 {} {what} {} & echo "holder $!" >> "$PIDS"; exec sleep 600' & echo "a $!" >> "$PIDS"
wait"#,
            holder.display(),
            device.display()
        ),
        &[("a", Member::Cuda), ("holder", Member::Shell)],
    );
    let a = tree.pid("a");
    wait_until("the CUDA process to run sleep", || {
        fs::read_to_string(format!("/proc/{a}/comm")).is_ok_and(|c| c.trim_end() == "sleep")
    });
    let (ready, failed) = (
        with_suffix(&device, ".ready"),
        with_suffix(&device, ".failed"),
    );
    wait_until("the holder to hold", || ready.exists() || failed.exists());
    let why = fs::read_to_string(&failed).unwrap_or_default();
    if !prerequisite(&format!("set up an io_uring here ({why})"), why.is_empty()) {
        return None;
    }
    let holder = tree.pid("holder");
    let prefix = fx.dir().join("nvidia").display().to_string();
    Some((tree, holder, prefix))
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The pre-dump hook on `root`'s tree, as JSON, with the device prefix.
fn pre_dump(fx: &Fixture, root: i32, prefix: &str, force: bool) -> Output {
    let mut command: StdCommand = fx.std_command(&["--json", "criu-hook"]);
    command
        .env("CRTOOLS_SCRIPT_ACTION", "pre-dump")
        .env("CRTOOLS_INIT_PID", root.to_string())
        .env("CUDACKPT_DEBUG_DEVICE_PREFIX", prefix);
    if force {
        command.env("CUDACKPT_FORCE", "1");
    }
    command.output().expect("run cudackpt")
}

fn post_resume(fx: &Fixture, root: i32) {
    let output = fx
        .std_command(&["criu-hook"])
        .env("CRTOOLS_SCRIPT_ACTION", "post-resume")
        .env("CRTOOLS_INIT_PID", root.to_string())
        .output()
        .expect("run cudackpt");
    assert!(output.status.success(), "{output:?}");
}

#[test]
fn pre_dump_refuses_a_tree_whose_forked_child_maps_the_gpu_and_changes_nothing() {
    let fx = Fixture::new();
    let (tree, holder, prefix) = tree_with(&fx, "device").expect("a file can be mapped");
    let (root, a) = (tree.root(), tree.pid("a"));

    // The same tree where the file is no device node: pre-dump suspends it.
    let output = pre_dump(&fx, root, "/nonexistent/nvidia", false);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(fx.fake_state(a), "checkpointed");
    post_resume(&fx, root);
    fx.take_calls();

    let output = pre_dump(&fx, root, &prefix, false);
    assert_eq!(output.status.code(), Some(8), "{output:?}");
    let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
    doc.check(8);
    // The holder is no target: the tree is refused as a whole.
    assert!(doc.pids().iter().all(|&pid| pid != holder), "{doc:?}");
    let error = doc.error.as_ref().expect("the tree is refused");
    assert_eq!(error.kind, Kind::Undumpable);
    assert!(
        error.message.starts_with(&format!(
            "CRIU could not dump this tree: PID {holder} (python3), a child of PID {a} (sleep), maps {}0 but holds no CUDA state",
            prefix
        )),
        "{}",
        error.message
    );
    let hint = error.hint.as_deref().unwrap_or_default();
    assert!(hint.contains("keep_forks_dumpable") && hint.contains("forkserver"));
    let cuda = doc.process(a);
    assert_eq!(
        cuda.error.as_ref().map(|e| e.kind),
        Some(Kind::NotAttempted)
    );
    assert_eq!(cuda.state, State::Running);
    assert_eq!(fx.fake_state(a), "running");
    assert_eq!(
        fx.state_changes(),
        Vec::<String>::new(),
        "refused before any change"
    );
}

/// torch.compile's compile-worker pool (a process running
/// `torch/_inductor/compile_worker`) maps the GPU's device nodes without
/// CUDA state: the refusal names the pool and its fix, not a DataLoader's.
#[test]
fn a_compile_worker_that_maps_the_gpu_is_refused_with_the_pool_s_fix() {
    let fx = Fixture::new();
    let holder = fx
        .dir()
        .join("site-packages/torch/_inductor/compile_worker/__main__.py");
    let (tree, pool, prefix) =
        tree_with_holder_at(&fx, "device", &holder).expect("a file can be mapped");
    let output = pre_dump(&fx, tree.root(), &prefix, false);
    assert_eq!(output.status.code(), Some(8), "{output:?}");
    let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
    doc.check(8);
    let error = doc.error.as_ref().expect("the tree is refused");
    assert!(
        error.message.contains(&format!("PID {pool} (python3)"))
            && error
                .message
                .contains("torch.compile's compile-worker pool"),
        "{}",
        error.message
    );
    let hint = error.hint.as_deref().unwrap_or_default();
    assert!(
        hint.contains("release_compile_workers()")
            && hint.contains("TORCHINDUCTOR_COMPILE_THREADS=1"),
        "{hint}"
    );
    assert!(!hint.contains("DataLoader"), "{hint}");
    assert_eq!(fx.state_changes(), Vec::<String>::new());
}

/// A pool with five workers that inherited its device mapping is told in
/// one sentence with the count (a pool of 32 was 11 KB of the same words).
#[test]
fn a_compile_pool_and_its_workers_are_refused_in_one_sentence() {
    let fx = Fixture::new();
    let holder = fx
        .dir()
        .join("site-packages/torch/_inductor/compile_worker/__main__.py");
    let (tree, pool, prefix) =
        tree_with_holder_at(&fx, "device_forks", &holder).expect("a file can be mapped");
    let output = pre_dump(&fx, tree.root(), &prefix, false);
    assert_eq!(output.status.code(), Some(8), "{output:?}");
    let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
    let error = doc.error.as_ref().expect("the tree is refused");
    assert_eq!(
        error.message.matches("compile-worker pool").count(),
        1,
        "{}",
        error.message
    );
    assert!(
        error.message.contains(&format!(
            "torch.compile's compile-worker pool, PID {pool} (python3)"
        )) && error
            .message
            .contains("and its workers, 6 processes (PIDs "),
        "{}",
        error.message
    );
    assert_eq!(fx.state_changes(), Vec::<String>::new());
}

/// A rank of a compiled job (tests/fixtures/drain-target in `mode`, fake CUDA)
/// that started torch.compile's compile-worker pool: a process of its
/// own with CUDA (the fake, as the real pool starts CUDA to read the GPUs'
/// properties) and five forked workers that map the "device" without it.
/// Returns the rank, its events file, the pool's PID and the device prefix.
fn rank_with_pool(fx: &Fixture, mode: &str) -> (crate::support::Target, PathBuf, i32, String) {
    let holder = fx
        .dir()
        .join("site-packages/torch/_inductor/compile_worker/__main__.py");
    fs::create_dir_all(holder.parent().expect("a directory")).expect("mkdir");
    fs::write(&holder, HOLDER).expect("write the holder");
    let device = fx.dir().join(format!("nvidia-{mode}"));
    let (holder_text, device_text) = (holder.display().to_string(), device.display().to_string());
    let (rank, events) = fx.drain_target(
        mode,
        &[
            ("WORLD_SIZE", "2"),
            ("DRAIN_TARGET_POOL", &holder_text),
            ("DRAIN_TARGET_POOL_DEVICE", &device_text),
        ],
    );
    wait_until("the pool and its workers", || {
        with_suffix(&device, ".ready").exists()
    });
    let pool = fs::read_to_string(format!("/proc/{}/task/{}/children", rank.pid, rank.pid))
        .expect("the rank's children")
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the pool");
    (
        rank,
        events,
        pool,
        fx.dir().join("nvidia").display().to_string(),
    )
}

/// The pre-dump hook with CUDACKPT_DRAIN=1, as `dump --drain` runs it.
fn pre_dump_drained(fx: &Fixture, root: i32, prefix: &str) -> Output {
    let mut command: StdCommand = fx.std_command(&["--json", "criu-hook"]);
    command
        .env("CRTOOLS_SCRIPT_ACTION", "pre-dump")
        .env("CRTOOLS_INIT_PID", root.to_string())
        .env("CUDACKPT_DEBUG_DEVICE_PREFIX", prefix)
        .env("CUDACKPT_DRAIN", "1");
    command.output().expect("run cudackpt")
}

/// A compiled job's pool cannot be dumped, and a drain that serves a
/// dump shuts it down: the harm without the dump notice (refused before
/// any change, though the job drains), the dump drained with it (the pool
/// gone before the first lock, the rank checkpointed), and a rank that
/// keeps its pool anyway (the drain called off, nothing locked).
#[test]
fn a_drain_for_a_dump_lets_the_rank_shut_its_compile_pool_down() {
    let fx = Fixture::new();
    // The harm: a rank that does not catch the notice keeps its pool, and
    // the dump is refused before any change.
    let (rank, events, pool, prefix) = rank_with_pool(&fx, "pool-no-notice");
    let refused = pre_dump_drained(&fx, rank.pid, &prefix);
    assert_eq!(refused.status.code(), Some(8), "{refused:?}");
    let doc: ProcessCommandDoc = parse_one_document(&refused.stdout);
    let error = doc.error.as_ref().expect("refused");
    assert!(
        error.message.contains(&format!(
            "compile-worker pool PID {pool} (python3), 5 processes"
        )),
        "{}",
        error.message
    );
    assert_eq!(crate::drain::events(&events), ["ready"], "never asked");
    assert_eq!(fx.state_changes(), Vec::<String>::new());
    drop(rank);

    // With the notice: the pool goes at the drain, the rank is checkpointed.
    let (rank, events, pool, prefix) = rank_with_pool(&fx, "pool");
    let dumped = pre_dump_drained(&fx, rank.pid, &prefix);
    assert_eq!(dumped.status.code(), Some(0), "{dumped:?}");
    assert_eq!(
        crate::drain::events(&events),
        ["ready", "dump-notice", "pool-released", "released"]
    );
    assert_eq!(fx.state_of(&rank), "checkpointed");
    assert!(
        !std::path::Path::new(&format!("/proc/{pool}")).exists(),
        "the pool is gone"
    );
    let doc: ProcessCommandDoc = parse_one_document(&dumped.stdout);
    assert!(
        doc.warnings
            .iter()
            .any(|w| w.contains("the drain shuts the pool down first")),
        "{:?}",
        doc.warnings
    );
    let left = doc.process(pool);
    assert!(left.steps.is_empty(), "the pool is no target: {left:?}");
    assert!(
        left.note
            .as_deref()
            .is_some_and(|n| n.starts_with("left out: torch.compile's compile-worker pool")),
        "{left:?}"
    );
    let changes = fx.state_changes();
    assert_eq!(
        changes.len(),
        2,
        "one lock, one checkpoint: the rank's: {changes:?}"
    );
    drop(rank);

    // A rank that keeps its pool all the same: looked at again after the
    // drain, the tree is refused and the drain called off (rebuilt).
    let (rank, events, pool, prefix) = rank_with_pool(&fx, "pool-kept");
    let called_off = pre_dump_drained(&fx, rank.pid, &prefix);
    assert_eq!(called_off.status.code(), Some(8), "{called_off:?}");
    let doc: ProcessCommandDoc = parse_one_document(&called_off.stdout);
    let failure = doc.process(rank.pid).error.as_ref().expect("called off");
    assert!(
        failure
            .message
            .contains(&format!("compile-worker pool, PID {pool} (python3)"))
            && failure.message.contains("6 processes")
            && failure.message.contains("nothing was locked"),
        "{failure:?}"
    );
    assert_eq!(
        crate::drain::events(&events),
        ["ready", "dump-notice", "released", "rebuilt"]
    );
    assert_eq!(fx.state_of(&rank), "running");
}

#[test]
fn pre_dump_refuses_an_io_uring_ring_unless_forced() {
    let fx = Fixture::new();
    let Some((tree, holder, prefix)) = tree_with(&fx, "io_uring") else {
        return;
    };
    let (root, a) = (tree.root(), tree.pid("a"));

    let output = pre_dump(&fx, root, &prefix, false);
    assert_eq!(output.status.code(), Some(8), "{output:?}");
    let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
    doc.check(8);
    let error = doc.error.clone().expect("refused");
    assert_eq!(error.kind, Kind::Undumpable);
    assert!(
        error.message.contains(&format!("PID {holder} (python3)"))
            && error.message.contains("holds an io_uring ring")
            && !error.message.contains("CUDA state"),
        "{}",
        error.message
    );
    assert_eq!(fx.state_changes(), Vec::<String>::new());

    let output = pre_dump(&fx, root, &prefix, true);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let (stdout, _) = texts(&output);
    assert!(
        stdout.contains("going on anyway: CUDACKPT_FORCE=1"),
        "{stdout}"
    );
    assert_eq!(fx.fake_state(a), "checkpointed");
    post_resume(&fx, root);
    assert_eq!(fx.fake_state(a), "running");
}

/// A ring held only as a descriptor (IORING_SETUP_NO_MMAP, or unmapped)
/// once passed pre-dump: only maps were read.
#[test]
fn pre_dump_refuses_an_io_uring_held_only_as_a_descriptor() {
    let fx = Fixture::new();
    let Some((tree, holder, prefix)) = tree_with(&fx, "io_uring_fd") else {
        return;
    };
    let maps = fs::read_to_string(format!("/proc/{holder}/maps")).expect("maps");
    assert!(!maps.contains("io_uring"), "no ring is mapped: {maps}");
    let output = pre_dump(&fx, tree.root(), &prefix, false);
    assert_eq!(output.status.code(), Some(8), "{output:?}");
    let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
    let error = doc.error.clone().expect("refused");
    assert_eq!(error.kind, Kind::Undumpable);
    assert!(
        error.message.contains(&format!("PID {holder} (python3)"))
            && error.message.contains("holds an io_uring ring"),
        "{}",
        error.message
    );
    assert_eq!(fx.state_changes(), Vec::<String>::new());
}

/// A process whose maps run past the cap is read only that far, and named:
/// `ps` lists what it can and says who it could not inspect whole, and
/// pre-dump refuses a tree it could not check whole.
#[test]
fn a_process_whose_maps_run_past_the_cap_is_named_not_skipped() {
    let fx = Fixture::new();
    let (tree, holder, prefix) = tree_with(&fx, "wide").expect("a file can be mapped");
    let size = fs::read(format!("/proc/{holder}/maps"))
        .expect("maps")
        .len();
    assert!(size > 4 << 20, "the maps run past 4 MiB: {size}");
    let root = tree.root().to_string();
    let output = fx
        .std_command(&["--json", "ps", "--tree", &root])
        .output()
        .expect("ps");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
    assert_eq!(
        doc.pids(),
        [tree.pid("a")],
        "the CUDA process is still listed"
    );
    assert!(
        doc.warnings.iter().any(|w| w.contains(&format!(
            "PID {holder} (python3) was inspected only in part"
        ))),
        "{:?}",
        doc.warnings
    );
    let output = pre_dump(&fx, tree.root(), &prefix, false);
    assert_eq!(output.status.code(), Some(8), "{output:?}");
    let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
    let error = doc.error.clone().expect("refused");
    assert!(
        error.message.contains(&format!("PID {holder} (python3)"))
            && error.message.contains("could not be checked whole"),
        "{}",
        error.message
    );
    assert_eq!(fx.state_changes(), Vec::<String>::new());
}

#[test]
fn a_dry_run_and_check_warn_of_what_a_dump_would_meet() {
    let fx = Fixture::new();
    let (tree, holder, prefix) = tree_with(&fx, "device").expect("a file can be mapped");
    let root = tree.root().to_string();
    let a = tree.pid("a").to_string();
    for args in [
        vec!["--json", "suspend", "--dry-run", "--tree", &root],
        vec!["--json", "check", "--tree", &root],
        // A named process: what a dump of its tree would meet.
        vec!["--json", "suspend", "--dry-run", &a],
        vec!["--json", "check", &a],
    ] {
        let output = fx
            .std_command(&args)
            .env("CUDACKPT_DEBUG_DEVICE_PREFIX", &prefix)
            .output()
            .expect("run cudackpt");
        assert_eq!(output.status.code(), Some(0), "{args:?}: {output:?}");
        let doc: ProcessCommandDoc = parse_one_document(&output.stdout);
        assert!(
            doc.warnings.iter().any(|w| {
                w.starts_with("a CRIU dump of this tree would fail:")
                    && w.contains(&format!("PID {holder} (python3)"))
            }),
            "{args:?}: {:?}",
            doc.warnings
        );
    }
    assert_eq!(fx.state_changes(), Vec::<String>::new());
}

/// A CUDA process whose maps run past the cap is checkpointed on what the
/// part read shows, and the report says what was not checked: never judged
/// on half its file in silence.
#[test]
fn a_checkpoint_says_what_it_could_not_check_past_the_cap() {
    let fx = Fixture::new();
    let holder = fx.dir().join("holder.py");
    fs::write(&holder, HOLDER).expect("write the holder");
    let path = fx.dir().join("wide");
    let target = fx.cuda_program(
        Path::new("python3"),
        &[
            holder.to_str().expect("utf-8"),
            "wide",
            path.to_str().expect("utf-8"),
        ],
    );
    wait_until("the holder to map", || {
        with_suffix(&path, ".ready").exists()
    });
    let doc: ProcessCommandDoc = fx.json(&["suspend", &target.arg()], 0);
    let warnings = &doc.process(target.pid).warnings;
    assert!(
        warnings.iter().any(|w| w.contains("goes on past 4 MiB")),
        "{warnings:?}"
    );
    fx.json::<ProcessCommandDoc>(&["resume", &target.arg()], 0);
}

/// A compiled job is drained as often as a scheduler asks: the rank
/// keeps its compile-worker pool through a suspend's drain, and the pool
/// (a process of its own with CUDA, its launcher's `WORLD_SIZE` in its
/// environment, no drain handler) is no rank of the job: it is
/// checkpointed as it is, beside the drained rank, three times running.
#[test]
fn a_compiled_job_is_drained_three_times_with_its_pool_kept() {
    let fx = Fixture::new();
    let (rank, events, pool, _) = rank_with_pool(&fx, "pool-kept");
    let tree = rank.pid.to_string();
    for round in 1..=3 {
        let suspended: ProcessCommandDoc = fx.json(&["suspend", "--drain", "--tree", &tree], 0);
        assert_eq!(fx.state_of(&rank), "checkpointed", "round {round}");
        assert_eq!(fx.fake_state(pool), "checkpointed", "round {round}");
        let left = suspended.process(pool);
        assert!(
            left.drain
                .as_ref()
                .is_some_and(|d| d.outcome == crate::wire::DrainOutcome::NotNeeded),
            "round {round}: the pool is never asked: {left:?}"
        );
        let _: ProcessCommandDoc = fx.json(&["resume", "--tree", &tree], 0);
        assert_eq!(fx.state_of(&rank), "running", "round {round}");
        assert_eq!(fx.fake_state(pool), "running", "round {round}");
    }
    assert_eq!(
        crate::drain::events(&events),
        ["ready", "released", "rebuilt", "released", "rebuilt", "released", "rebuilt"]
    );
    assert!(
        Path::new(&format!("/proc/{pool}")).exists(),
        "the pool kept"
    );
}
