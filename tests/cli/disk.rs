//! `dump` and `undump` with a real CRIU and the fake driver: a CUDA process
//! (the fake, preloaded into `sleep`) to disk and back through CRIU, with
//! cudackpt as its action script; what is refused before any change; a
//! dump that fails leaving the process running; a restore onto PIDs still
//! taken refused.
//!
//! CRIU is `CUDACKPT_TEST_CRIU` (CI builds CRIU 4.2.1 from Debian's source
//! package: Debian 12's CRIU 3.17 cannot start on kernels from 6.13 on,
//! "Unexpected rt vDSO area bounds"); without it, or without root, these
//! tests say so and do nothing, and CI sets it, so there they run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::schema_check::validate;
use crate::support::{fake_libcuda, running_as_root, wait_until, Fixture};

/// The CRIU to test with, or why these tests cannot run here.
pub(crate) fn criu() -> Option<PathBuf> {
    let Some(path) = std::env::var_os("CUDACKPT_TEST_CRIU") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set CUDACKPT_TEST_CRIU (.ci/run builds CRIU)"
        );
        crate::support::skipped(
            "CUDACKPT_TEST_CRIU is not set: a CRIU test (scripts/build-criu builds CRIU 4.2.1)",
        );
        return None;
    };
    if !running_as_root() {
        crate::support::skipped("not root: CRIU cannot dump; a CRIU test");
        return None;
    }
    Some(PathBuf::from(path))
}

/// A fake CUDA process orphaned at once (its parent is init, which reaps
/// it when CRIU's dump kills it), killed when dropped: the process at its
/// PID then, if it is this one or its CRIU-restored self (its environment,
/// restored with its memory, carries this orphan's mark), never a process
/// that took the PID over once it was gone.
pub(crate) struct Orphan(pub(crate) i32, String);

impl Orphan {
    /// `sh -c SCRIPT`'s last background process; the script gets `$CUDA`.
    pub(crate) fn start(fx: &Fixture, script: &str) -> Orphan {
        let started = Orphan::launch(fx, script);
        started.wait_for_the_fake();
        started
    }

    /// A shell leading a session of its own, and the fake CUDA job it
    /// started in that session: `(job, shell)`.
    fn in_a_shell_session(fx: &Fixture) -> (Orphan, Orphan) {
        let pid_file = fx.dir().join("job.pid");
        let shell = Orphan::launch(
            fx,
            &format!(
                "setsid sh -c 'FAKE_CUDA_IDENTITY=$$-$(date +%s%N) LD_PRELOAD=$CUDA sleep 600 </dev/null >/dev/null 2>&1 & echo $! > \"{0}.new\" && mv \"{0}.new\" \"{0}\"; exec sleep 600' </dev/null >/dev/null 2>&1",
                pid_file.display()
            ),
        );
        wait_until("the shell to start its job", || pid_file.exists());
        let pid = std::fs::read_to_string(&pid_file)
            .expect("the job's PID")
            .trim()
            .parse()
            .expect("a PID");
        let job = Orphan(pid, shell.1.clone());
        job.wait_for_the_fake();
        (job, shell)
    }

    /// Runs `sh -c "SCRIPT & echo $!"` with this orphan's mark: the PID it
    /// printed.
    pub(crate) fn launch(fx: &Fixture, script: &str) -> Orphan {
        static ORPHANS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let mark = format!(
            "{}-{}",
            std::process::id(),
            ORPHANS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let out = Command::new("sh")
            .args(["-c", &format!("{script} & echo $!")])
            .env("CUDACKPT_TEST_ORPHAN", &mark)
            .env("FAKE_CUDA_STATE_DIR", fx.dir())
            .env("CUDA", fake_libcuda())
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .expect("start the orphan");
        let pid: i32 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("its PID");
        Orphan(pid, mark)
    }

    /// Another process this orphan's script started (it carries the same
    /// mark), killed when dropped as this one is.
    pub(crate) fn kin(&self, pid: i32) -> Orphan {
        Orphan(pid, self.1.clone())
    }

    fn wait_for_the_fake(&self) {
        let fake = fake_libcuda().to_string_lossy().into_owned();
        wait_until("the orphan to map the fake", || {
            std::fs::read_to_string(format!("/proc/{}/maps", self.0))
                .is_ok_and(|m| m.contains(&fake))
        });
    }

    /// Kills the process at its PID if it is this orphan (or its restored
    /// self).
    fn kill(&self) {
        let mark = format!("CUDACKPT_TEST_ORPHAN={}", self.1);
        let ours = std::fs::read(format!("/proc/{}/environ", self.0)).is_ok_and(|environ| {
            environ
                .split(|b| *b == 0)
                .any(|entry| entry == mark.as_bytes())
        });
        if ours {
            let _ = Command::new("kill")
                .args(["-9", &self.0.to_string()])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }

    /// A fake CUDA process holding a deleted file of 4 MiB open: a CRIU
    /// held to a ghost limit under it ([`criu_with_a_tight_ghost_limit`])
    /// stops at it after the pre-dump has suspended the process.
    fn cuda_that_criu_cannot_dump(fx: &Fixture) -> Orphan {
        let ghost = fx.dir().join("ghost");
        Orphan::start(
            fx,
            &format!(
                "head -c 4194304 /dev/zero > {g}; exec 3<{g}; rm {g}; LD_PRELOAD=$CUDA setsid sleep 600 </dev/null >/dev/null 2>&1",
                g = ghost.display()
            ),
        )
    }

    pub(crate) fn cuda(fx: &Fixture) -> Orphan {
        // Its identity follows it through CRIU, and the fake's record with it.
        Orphan::start(
            fx,
            "FAKE_CUDA_IDENTITY=$$-$(date +%s%N) LD_PRELOAD=$CUDA setsid sleep 600 </dev/null >/dev/null 2>&1",
        )
    }
}

impl Drop for Orphan {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `criu` with a ghost limit of one byte after whatever it is given (CRIU
/// takes the last): it fails on any deleted file, after the pre-dump,
/// where cudackpt chose a limit that fits.
fn criu_with_a_tight_ghost_limit(fx: &Fixture, criu: &Path) -> PathBuf {
    let wrapper = fx.dir().join("criu-tight");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh
if [ \"$1\" = dump ]; then exec '{}' \"$@\" --ghost-limit 1; fi
exec '{}' \"$@\"
",
            criu.display(),
            criu.display()
        ),
    )
    .expect("write");
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    wrapper
}

pub(crate) fn document(output: &std::process::Output) -> serde_json::Value {
    let doc: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("one JSON document on stdout");
    validate(&doc);
    doc
}

pub(crate) fn run(fx: &Fixture, args: &[&str]) -> (i32, serde_json::Value) {
    let output = fx.std_command(args).output().expect("run cudackpt");
    (output.status.code().unwrap_or(-1), document(&output))
}

/// `cudackpt --json dump [EXTRA] --to IMAGES --criu CRIU PID`.
pub(crate) fn dump(
    fx: &Fixture,
    images: &Path,
    criu: &Path,
    pid: i32,
    extra: &[&str],
) -> (i32, serde_json::Value) {
    let args = dump_args(images, criu, pid, extra);
    run(fx, &args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// The arguments of `cudackpt --json dump [EXTRA] --to IMAGES --criu CRIU
/// PID`, for a test that sets the command's environment itself.
pub(crate) fn dump_args(images: &Path, criu: &Path, pid: i32, extra: &[&str]) -> Vec<String> {
    let utf8 = |path: &Path| path.to_str().expect("a UTF-8 path").to_string();
    let mut args = vec!["--json".to_string(), "dump".to_string()];
    args.extend(extra.iter().map(|e| e.to_string()));
    args.extend([
        "--to".to_string(),
        utf8(images),
        "--criu".to_string(),
        utf8(criu),
        pid.to_string(),
    ]);
    args
}

/// The arguments of `cudackpt --json dump --to IMAGES --criu CRIU PID`,
/// for a test that sets the command's environment itself.
fn plain_dump<'a>(images: &'a Path, criu: &'a Path, pid: &'a str) -> [&'a str; 7] {
    let utf8 = |path: &'a Path| path.to_str().expect("a UTF-8 path");
    [
        "--json",
        "dump",
        "--to",
        utf8(images),
        "--criu",
        utf8(criu),
        pid,
    ]
}

/// `job` dumped to `images` (the dump must succeed), and gone: its
/// document.
pub(crate) fn dumped_and_gone(
    fx: &Fixture,
    images: &Path,
    criu: &Path,
    job: &Orphan,
) -> serde_json::Value {
    let (code, dumped) = dump(fx, images, criu, job.0, &[]);
    assert_eq!(code, 0, "{dumped:#}");
    wait_until("the dumped job to be gone", || !alive(job.0));
    dumped
}

/// `cudackpt --json undump IMAGES --criu CRIU [EXTRA]`.
pub(crate) fn undump(
    fx: &Fixture,
    images: &Path,
    criu: &Path,
    extra: &[&str],
) -> (i32, serde_json::Value) {
    let mut args = vec![
        "--json",
        "undump",
        images.to_str().expect("a UTF-8 path"),
        "--criu",
        criu.to_str().expect("a UTF-8 path"),
    ];
    args.extend_from_slice(extra);
    run(fx, &args)
}

/// The message of a document refused before any change (exit 8) with
/// `kind`; the assertion quotes the whole document.
pub(crate) fn refusal_message(code: i32, refused: &serde_json::Value, kind: &str) -> String {
    assert_eq!(
        (code, refused["error"]["kind"].as_str()),
        (8, Some(kind)),
        "{refused:#}"
    );
    refused["error"]["message"]
        .as_str()
        .expect("a message")
        .to_string()
}

/// An undump that must be refused before any change, with `kind`: its
/// error's message and hint.
fn undump_refused(fx: &Fixture, images: &Path, criu: &Path, kind: &str) -> (String, String) {
    fx.take_calls();
    let (code, refused) = undump(fx, images, criu, &[]);
    let message = refusal_message(code, &refused, kind);
    fx.assert_no_calls("a refused undump");
    let hint = refused["error"]["hint"].as_str().expect("a hint");
    (message, hint.to_string())
}

pub(crate) fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.rsplit(')').next().is_some_and(|s| s.starts_with(" Z")))
}

#[test]
fn a_cuda_process_goes_to_disk_and_back_through_criu() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let target = Orphan::cuda(&fx);
    let images = fx.dir().join("images");
    // A scheduler follows it on descriptor 3.
    let events_file = fx.dir().join("events.jsonl");
    let line = format!(
        "exec '{}' --json --progress-fd 3 dump --to '{}' --criu '{}' {} 3>'{}'",
        crate::support::cudackpt_bin().display(),
        images.display(),
        criu.display(),
        target.0,
        events_file.display()
    );
    let output = fx
        .command_for(Path::new("/bin/sh"), &["-c", &line])
        .output()
        .expect("sh runs");
    let (code, dumped) = (output.status.code().unwrap_or(-1), document(&output));
    assert_eq!(code, 0, "{dumped:#}");
    let events: Vec<serde_json::Value> = std::fs::read_to_string(&events_file)
        .expect("the events")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let images_events: Vec<&serde_json::Value> =
        events.iter().filter(|e| e["event"] == "images").collect();
    assert!(!images_events.is_empty(), "{events:?}");
    for event in &events {
        validate(event);
    }
    assert_eq!(images_events[0]["command"], "dump");
    // The action script suspended it at pre-dump (lock, checkpoint) before
    // CRIU wrote it, and CRIU's dump ended it.
    let calls = crate::support::shorts(&fx.take_calls());
    assert!(
        calls.iter().any(|c| c.starts_with("checkpoint")),
        "{calls:?}"
    );
    wait_until("the dumped process to be gone", || !alive(target.0));
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(images.join("cudackpt-manifest.json")).expect("the manifest"),
    )
    .expect("JSON");
    assert_eq!(manifest, dumped["manifest"]);
    assert_eq!(manifest["root_pid"], target.0);
    assert_eq!(manifest["processes"][0]["name"], "sleep");
    assert!(manifest["image_bytes"].as_u64().expect("a number") > 0);
    assert!(manifest["criu"]["version"]
        .as_str()
        .unwrap()
        .starts_with('4'));
    // Back: CRIU restores it with its PID, the action script restores its
    // GPU state at post-resume.
    let (code, undumped) = undump(&fx, &images, &criu, &[]);
    assert_eq!(code, 0, "{undumped:#}");
    assert_eq!(undumped["restored_root_pid"], target.0);
    assert!(alive(target.0));
    assert_eq!(fx.fake_state(target.0), "running", "{undumped:#}");
    let calls = crate::support::shorts(&fx.take_calls());
    let record = std::fs::read_to_string(fx.dir().join(format!("{}.json", target.0)));
    assert!(
        calls.iter().any(|c| c.starts_with("restore")),
        "{calls:?} {record:?} {undumped:#}"
    );
    // Where the undump's time went: the phases follow one another and
    // add up to (nearly) the whole.
    let phases = &undumped["phases"];
    let ms = |name: &str| phases[name].as_f64().unwrap_or(-1.0);
    let parts = [
        "checks_ms",
        "criu_memory_ms",
        "criu_resume_ms",
        "gpu_restore_ms",
        "after_criu_ms",
    ];
    assert!(parts.iter().all(|p| ms(p) >= 0.0), "{phases:#}");
    let sum: f64 = parts.iter().map(|p| ms(p)).sum();
    let elapsed = undumped["elapsed_ms"].as_f64().expect("elapsed_ms");
    assert!(
        sum <= elapsed && sum > elapsed * 0.9,
        "{sum} of {elapsed}: {phases:#}"
    );
    assert!(
        ms("criu_memory_ms") > 0.0,
        "CRIU's log was read: {phases:#}"
    );
}

#[test]
fn a_dump_that_fails_after_the_suspend_leaves_the_process_running() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let target = Orphan::cuda_that_criu_cannot_dump(&fx);
    let criu = criu_with_a_tight_ghost_limit(&fx, &criu);
    let (code, failed) = dump(&fx, &fx.dir().join("images"), &criu, target.0, &[]);
    assert_eq!(code, 1, "{failed:#}");
    assert_eq!(failed["error"]["kind"], "criu_failed");
    assert_eq!(failed["error"]["changed"], true);
    let errors = failed["criu_errors"].to_string();
    assert!(errors.to_lowercase().contains("ghost"), "{errors}");
    // The action script's watcher resumes it once CRIU has gone, and the
    // dump reports once it has: running when the document comes.
    assert!(alive(target.0));
    assert_eq!(fx.fake_state(target.0), "running", "{failed:#}");
    let hint = failed["error"]["hint"].as_str().expect("a hint");
    assert!(hint.starts_with("the tree is running again"), "{hint}");
}

/// A fake CUDA job whose output goes to `log` (`redirect`: `>` or `>>`),
/// dumped to `images` and gone, its PID free for the undump.
fn dumped_job_writing_to(
    fx: &Fixture,
    criu: &Path,
    log: &Path,
    redirect: &str,
    images: &Path,
) -> Orphan {
    let job = Orphan::start(
        fx,
        &format!(
            "FAKE_CUDA_IDENTITY=$$-$(date +%s%N) LD_PRELOAD=$CUDA setsid sleep 600 </dev/null {redirect}'{}' 2>&1",
            log.display()
        ),
    );
    let (code, dumped) = dump(fx, images, criu, job.0, &[]);
    assert_eq!(code, 0, "{dumped:#}");
    wait_until("the dumped job to be gone", || {
        !Path::new(&format!("/proc/{}", job.0)).exists()
    });
    job
}

/// A job writing to a log: after its dump the log grows (the job went on
/// with `--leave-running`, or an earlier undump of the same images ran).
/// CRIU restores an open file only at its dumped size: a file the job
/// wrote to that grew is cut back to it, what was written since kept
/// beside it and named (nothing lost, no hand work); a file whose mode
/// moved, which CRIU checks too, is refused before any change, naming it.
#[test]
fn an_undump_cuts_back_a_grown_log_keeping_what_was_cut_and_refuses_a_moved_mode() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    // `>`: the log opened for writing, not appending (CRIU records no
    // size for a file opened write-only with O_APPEND, and checks none).
    let log = fx.dir().join("job.log");
    let images = fx.dir().join("images");
    let job = dumped_job_writing_to(&fx, &criu, &log, ">", &images);
    // Its mode, first: refused, and restored once it is given back.
    let mode = |m| std::os::unix::fs::PermissionsExt::from_mode(m);
    let was = std::os::unix::fs::MetadataExt::mode(&std::fs::metadata(&log).expect("the log"));
    std::fs::set_permissions(&log, mode(0o600)).expect("chmod");
    let (message, _) = undump_refused(&fx, &images, &criu, "files_changed");
    assert!(
        message.contains(&format!("had mode {was:o} at the dump and has 100600 now")),
        "{message}"
    );
    assert!(!alive(job.0), "nothing restored");
    std::fs::set_permissions(&log, mode(was)).expect("chmod back");
    // The log grew since: cut back, the rest kept.
    std::fs::write(&log, "the job went on after the dump\n").expect("the log grows");
    let (code, undumped) = undump(&fx, &images, &criu, &[]);
    assert_eq!(code, 0, "{undumped:#}");
    assert_eq!(fx.fake_state(job.0), "running");
    assert_eq!(std::fs::read(&log).expect("the log"), b"", "as at the dump");
    let said = undumped["warnings"].to_string();
    let kept = std::fs::read_dir(fx.dir())
        .expect("the fixture")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("job.log.after-snapshot-"))
        })
        .expect("what was cut, kept beside the log");
    assert_eq!(
        std::fs::read_to_string(&kept).expect("kept"),
        "the job went on after the dump\n"
    );
    assert!(
        said.contains(&format!(
            "cut {} back to its 0 bytes at the snapshot; the 31 bytes written to it since are kept in {}",
            log.display(),
            kept.display()
        )),
        "{undumped:#}"
    );
}

/// The attacker's link: after the dump, the job's log is replaced by a
/// link to a file the job's user could never open (a job's user owns its
/// log's directory). CRIU restores as root and follows it: forced, the
/// restored job holds the link's target open where its log was (the harm;
/// CRIU checks no size on a file opened for appending). Without `--force`
/// the undump refuses before any change, naming both.
#[test]
fn an_undump_refuses_a_link_put_in_the_place_of_a_file_the_job_had_open() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let theirs = fx.dir().join("theirs");
    std::fs::create_dir(&theirs).expect("mkdir");
    let log = theirs.join("job.log");
    let secret = fx.dir().join("secret");
    std::fs::write(&secret, "root's alone\n").expect("the secret");
    // Readable by all, in a directory only root can enter (the fixture's):
    // out of the job's user's reach, and of the log's mode, which CRIU
    // checks.
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("chmod");
    let images = fx.dir().join("images");
    let job = dumped_job_writing_to(&fx, &criu, &log, ">>", &images);
    std::fs::remove_file(&log).expect("the log goes");
    std::os::unix::fs::symlink(&secret, &log).expect("and a link takes its place");
    // The harm, forced: the restored job holds root's file.
    let (code, forced) = undump(&fx, &images, &criu, &["--force"]);
    assert_eq!(code, 0, "{forced:#}");
    assert!(
        forced["warnings"].to_string().contains("going on: --force"),
        "{forced:#}"
    );
    let held = std::fs::read_link(format!("/proc/{}/fd/1", job.0)).expect("its stdout");
    assert_eq!(
        held, secret,
        "the restored job writes to where the link led"
    );
    job.kill();
    wait_until("the restored job to be gone", || {
        !Path::new(&format!("/proc/{}", job.0)).exists()
    });
    // The refusal: before any change, both named.
    let (message, _) = undump_refused(&fx, &images, &criu, "files_changed");
    assert!(
        message.contains(&format!(
            "{} leads to {} now",
            log.display(),
            secret.display()
        )),
        "{message}"
    );
    assert!(!alive(job.0), "nothing restored");
}

/// Where the watcher cannot resume the tree after CRIU fails (the driver
/// refuses the restore), the dump says which process is not running and
/// the command that puts it back (the watcher's intent record is there for
/// `recover`), and that command does.
#[test]
fn a_failed_dump_whose_tree_was_not_resumed_says_how_to_put_it_back() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let target = Orphan::cuda_that_criu_cannot_dump(&fx);
    let criu = criu_with_a_tight_ghost_limit(&fx, &criu);
    let images = fx.dir().join("images");
    let pid = target.0.to_string();
    let output = fx
        .std_command(&plain_dump(&images, &criu, &pid))
        // The watcher, started by CRIU with this environment, cannot restore.
        .env("FAKE_CUDA_INJECT", "restore=error:2")
        .env("CUDACKPT_DEBUG_RESUME_WAIT_MS", "1500")
        .output()
        .expect("run cudackpt");
    let failed = document(&output);
    assert_eq!(output.status.code(), Some(1), "{failed:#}");
    let hint = failed["error"]["hint"].as_str().expect("a hint");
    assert!(
        hint.starts_with(&format!("PID {} (checkpointed) is not running", target.0))
            && hint.contains("`cudackpt recover` puts the tree back"),
        "{hint}"
    );
    assert_eq!(fx.fake_state(target.0), "checkpointed");
    fx.cudackpt(&["recover"]).assert().success();
    assert_eq!(fx.fake_state(target.0), "running");
}

#[test]
fn what_cannot_work_is_refused_before_any_change() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let target = Orphan::cuda(&fx);
    let kind = |(code, doc): (i32, serde_json::Value)| {
        assert_eq!(doc["error"]["changed"], false, "{doc:#}");
        (
            code,
            doc["error"]["kind"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            doc,
        )
    };
    // A directory with something in it.
    let full = fx.dir().join("full");
    std::fs::create_dir(&full).expect("mkdir");
    std::fs::write(full.join("x"), "y").expect("write");
    let (code, why, _) = kind(dump(&fx, &full, &criu, target.0, &[]));
    assert_eq!((code, why.as_str()), (8, "images_dir"));
    // A CRIU another user could replace.
    let planted = fx.dir().join("criu");
    std::fs::copy(&criu, &planted).expect("copy CRIU");
    std::os::unix::fs::chown(&planted, Some(65534), None).expect("chown");
    let images = fx.dir().join("images");
    let (code, why, refused) = kind(dump(&fx, &images, &planted, target.0, &[]));
    assert_eq!((code, why.as_str()), (8, "criu_unusable"));
    assert!(refused["error"]["message"]
        .as_str()
        .unwrap()
        .contains("UID 65534"));
    fx.assert_no_calls("refused dumps");
    assert!(!images.exists(), "nothing was created");
    // Dumped and left running: an undump onto its own, still taken, PID
    // is refused before CRIU runs.
    let (code, dumped) = dump(&fx, &images, &criu, target.0, &["--leave-running"]);
    assert_eq!(code, 0, "{dumped:#}");
    assert!(alive(target.0));
    assert_eq!(
        fx.fake_state(target.0),
        "running",
        "running when the dump reports"
    );
    // The waiter's last state check may come after that.
    wait_until("the waiter to exit", || {
        crate::support::waiters_for(&[target.0]).is_empty()
    });
    fx.take_calls();
    let (code, why, _) = kind(undump(&fx, &images, &criu, &[]));
    assert_eq!((code, why.as_str()), (8, "pid_in_use"));
    fx.assert_no_calls("a refused undump");
    assert!(!images.join("restore.log").exists(), "CRIU never ran");
}

/// A CRIU built elsewhere finds its libraries through the caller's
/// `LD_LIBRARY_PATH`, as the dump's own run of it does: the version check
/// asks it in the same environment (an emptied one refused such a CRIU on
/// the GPU host), and one that cannot start says what it wrote.
#[test]
fn a_carried_criu_is_asked_its_version_in_the_callers_environment() {
    let fx = Fixture::new();
    let target = Orphan::cuda(&fx);
    let libs = fx.dir().join("criu-libs");
    std::fs::create_dir(&libs).expect("mkdir");
    let criu = fx.dir().join("criu");
    std::fs::write(
        &criu,
        format!(
            "#!/bin/sh\n[ \"$LD_LIBRARY_PATH\" = '{}' ] || {{ echo 'criu: error while loading shared libraries: libnet.so.1: cannot open shared object file' >&2; exit 127; }}\n[ \"$1\" = --version ] && echo 'Version: 4.2.1' && exit 0\nexit 1\n",
            libs.display()
        ),
    )
    .expect("write the stand-in");
    std::fs::set_permissions(&criu, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    // A directory with something in it: the refusal that comes right after
    // CRIU's check, so reaching it proves the check passed.
    let full = fx.dir().join("full");
    std::fs::create_dir(&full).expect("mkdir");
    std::fs::write(full.join("x"), "y").expect("write");
    let pid = target.0.to_string();
    let args = plain_dump(&full, &criu, &pid);
    let without = fx
        .std_command(&args)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("run cudackpt");
    let refused = document(&without);
    assert_eq!(refused["error"]["kind"], "criu_unusable", "{refused:#}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("exited 127") && message.contains("libnet.so.1"),
        "says how CRIU ended and what it wrote: {message}"
    );
    let with = fx
        .std_command(&args)
        .env("LD_LIBRARY_PATH", &libs)
        .output()
        .expect("run cudackpt");
    let past = document(&with);
    assert_eq!(past["error"]["kind"], "images_dir", "{past:#}");
    fx.assert_no_calls("refused dumps");
}

/// The UUIDs of the fixture's GPUs, in order.
fn uuids(fx: &Fixture) -> Vec<String> {
    let (code, doc) = {
        let output = fx
            .std_command(&["--json", "devices"])
            .output()
            .expect("devices");
        (
            output.status.code(),
            serde_json::from_slice::<serde_json::Value>(&output.stdout).expect("JSON"),
        )
    };
    assert_eq!(code, Some(0), "{doc:#}");
    doc["gpus"]
        .as_array()
        .expect("gpus")
        .iter()
        .map(|g| g["uuid"].as_str().expect("uuid").to_string())
        .collect()
}

#[test]
fn a_job_whose_gpu_is_busy_at_the_undump_moves_to_one_with_room() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::with_devices("GPU A:8000,GPU B:8000").with_nvml();
    let [a, b] = <[String; 2]>::try_from(uuids(&fx)).expect("two GPUs");
    let job = Orphan::cuda(&fx);
    fx.set_footprints(&[(job.0, 4000)]);
    let images = fx.dir().join("images");
    let (code, dumped) = dump(&fx, &images, &criu, job.0, &[]);
    assert_eq!(code, 0, "{dumped:#}");
    // The manifest has what the job held, and where.
    let manifest = &dumped["manifest"];
    assert_eq!(manifest["gpus"][0]["uuid"], a.as_str());
    assert_eq!(
        manifest["processes"][0]["gpu_memory"][0]["bytes"],
        4000u64 << 20
    );
    // What the pre-dump's checkpoint moved, from its record.
    assert_eq!(
        manifest["processes"][0]["checkpointed_bytes"],
        4000u64 << 20
    );
    assert_eq!(manifest["drain_released_bytes"], serde_json::Value::Null);
    wait_until("the dumped job to be gone", || !alive(job.0));
    // Another process now fills GPU A: 6000 of its 8000 MiB.
    let other = fx.cuda_target();
    fx.set_footprints(&[(other.pid, 6000)]);
    let (code, undumped) = undump(&fx, &images, &criu, &[]);
    assert_eq!(code, 0, "{undumped:#}");
    assert_eq!(
        undumped["gpu_map"],
        serde_json::json!([{"from": a, "to": b}])
    );
    assert_eq!(
        fx.fake_record(job.0),
        ("running".to_string(), 1),
        "restored onto GPU B"
    );
    // A map onto the busy GPU is refused before CRIU runs.
    job.kill();
    wait_until("the restored job to be gone", || !alive(job.0));
    let _ = std::fs::remove_file(images.join("restore.log"));
    let (code, refused) = undump(&fx, &images, &criu, &["--map", &format!("{a}={a}")]);
    let message = refusal_message(code, &refused, "no_gpu_room");
    assert!(message.contains("2000 MiB free"), "{refused:#}");
    assert!(!images.join("restore.log").exists(), "CRIU never ran");
}

/// `cudackpt --json undump IMAGES --criu CRIU` with `FAKE_*` settings.
pub(crate) fn undump_with(
    fx: &Fixture,
    images: &Path,
    criu: &Path,
    env: &[(&str, &str)],
) -> (i32, serde_json::Value) {
    let mut command = fx.std_command(&[
        "--json",
        "undump",
        images.to_str().expect("a UTF-8 path"),
        "--criu",
        criu.to_str().expect("a UTF-8 path"),
    ]);
    command.envs(env.iter().copied());
    let output = command.output().expect("run cudackpt");
    (output.status.code().unwrap_or(-1), document(&output))
}

#[test]
fn another_driver_is_refused_and_a_restore_that_fails_is_killed_whole() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let job = Orphan::cuda(&fx);
    let images = fx.dir().join("images");
    let dumped = dumped_and_gone(&fx, &images, &criu, &job);
    assert_eq!(dumped["manifest"]["driver"]["cuda"], "13.0");
    fx.take_calls();
    // A host whose driver answers 12.8: refused before CRIU.
    let (code, refused) = undump_with(
        &fx,
        &images,
        &criu,
        &[("FAKE_CUDA_DRIVER_VERSION", "12080")],
    );
    let message = refusal_message(code, &refused, "driver_mismatch");
    assert!(message.contains("13.0"), "{message}");
    assert!(!images.join("restore.log").exists(), "CRIU never ran");
    fx.assert_no_calls("a refused undump");
    // The driver cannot restore its GPU state: CRIU had restored the
    // process, which is killed rather than left stuck.
    let (code, failed) = undump_with(
        &fx,
        &images,
        &criu,
        &[("FAKE_CUDA_INJECT", "restore=error:2")],
    );
    assert_eq!(
        (code, failed["error"]["kind"].as_str()),
        (1, Some("criu_failed")),
        "{failed:#}"
    );
    assert_eq!(failed["error"]["changed"], true);
    let message = failed["error"]["message"].as_str().expect("a message");
    assert!(message.contains("killed"), "{message}");
    wait_until("the half-restored job to be gone", || !alive(job.0));
}

#[test]
fn a_cgroup_is_dumped_when_it_holds_one_tree() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new().with_cgroup_tree();
    let (job, stray) = (Orphan::cuda(&fx), Orphan::cuda(&fx));
    let cgroup = fx.cgroup_of(job.0, 0);
    let procs = |pids: &[i32]| {
        let lines: Vec<String> = pids.iter().map(|p| format!("{p}\n")).collect();
        std::fs::write(cgroup.join("cgroup.procs"), lines.concat()).expect("cgroup.procs");
    };
    let path = cgroup.to_str().expect("a UTF-8 path");
    let images = fx.dir().join("images");
    let args = |images: &Path| {
        vec![
            "--json".to_string(),
            "dump".into(),
            "--to".into(),
            images.display().to_string(),
            "--criu".into(),
            criu.display().to_string(),
            "--cgroup".into(),
            path.to_string(),
        ]
    };
    // Two trees: refused, naming both roots.
    procs(&[job.0, stray.0]);
    let two = args(&images);
    let (code, refused) = run(&fx, &two.iter().map(String::as_str).collect::<Vec<_>>());
    let message = refusal_message(code, &refused, "refused");
    assert!(message.contains("2 trees"), "{message}");
    fx.assert_no_calls("a refused cgroup");
    // One tree: dumped from its root.
    procs(&[job.0]);
    let (code, dumped) = run(&fx, &two.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{dumped:#}");
    assert_eq!(dumped["manifest"]["root_pid"], job.0);
    assert!(alive(stray.0), "only the cgroup's tree was dumped");
}

/// A job started from a shell without `setsid` (the usual server or
/// script): its session is led from outside the tree, which CRIU refuses
/// without `--shell-job` ("The root process ... is not a session leader").
/// The dump chooses it, says why, and the undump passes it on (once the
/// PID the dumped job's zombie held is free). The shell
/// here leads a session of its own, so the test does not depend on where
/// the test runner's session is led (a CI container's is outside its PID
/// namespace: the refusal below).
#[test]
fn a_job_started_from_a_shell_is_dumped_as_a_shell_job() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let (job, shell) = Orphan::in_a_shell_session(&fx);
    let images = fx.dir().join("images");
    let (code, dumped) = dump(&fx, &images, &criu, job.0, &[]);
    assert_eq!(code, 0, "{dumped:#}");
    let options = &dumped["manifest"]["criu_options"];
    assert_eq!(options[0]["option"], "--shell-job", "{options:#}");
    assert!(options[0]["why"]
        .as_str()
        .expect("why")
        .contains("led from outside the tree"));
    // This shell never reaps: the dumped job stays a zombie holding its
    // PID, which CRIU cannot restore ("Can't fork ...: File exists"). The
    // undump says so before any change, naming the parent.
    assert!(
        dumped["warnings"].to_string().contains("still taken"),
        "{dumped:#}"
    );
    fx.take_calls();
    let (code, refused) = undump(&fx, &images, &criu, &[]);
    let message = refusal_message(code, &refused, "pid_in_use");
    assert!(
        message.contains(&format!(
            "zombie that its parent, PID {}, has not reaped",
            shell.0
        )),
        "{message}"
    );
    fx.assert_no_calls("a refused undump");
    // With the shell gone, init reaps the zombie and the PID is free.
    shell.kill();
    wait_until("the zombie to be reaped", || {
        !Path::new(&format!("/proc/{}", job.0)).exists()
    });
    let (code, undumped) = undump(&fx, &images, &criu, &[]);
    assert_eq!(code, 0, "{undumped:#}");
    assert!(alive(job.0));
    assert_eq!(fx.fake_state(job.0), "running");
}

/// A job a container's runtime started inside a PID namespace, in a session
/// led from outside it (session 0 in /proc/PID/stat): CRIU cannot dump it,
/// even with `--shell-job` ("A session leader of ... is outside of its pid
/// namespace"). Forced, CRIU fails after the pre-dump suspended the job
/// (the harm: a suspend and a resume for nothing, no images); without
/// `--force` the dump is refused before any change, with the fix.
#[test]
fn a_job_whose_session_is_led_from_outside_its_pid_namespace_is_refused() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let container = Container::start(&fx);
    let inside = |args: &[&str]| {
        let mut line = vec![
            "--target".to_string(),
            container.init.to_string(),
            "--pid".into(),
            "--mount".into(),
            "--".into(),
            crate::support::cudackpt_bin().display().to_string(),
        ];
        line.extend(args.iter().map(|a| a.to_string()));
        let line: Vec<&str> = line.iter().map(String::as_str).collect();
        let output = fx
            .command_for(Path::new("nsenter"), &line)
            .output()
            .expect("nsenter runs");
        (output.status.code().unwrap_or(-1), document(&output))
    };
    let (job, criu) = (container.job.to_string(), criu.display().to_string());
    let forced_dir = fx.dir().join("forced").display().to_string();
    let (code, forced) = inside(&[
        "--json",
        "dump",
        "--force",
        "--to",
        &forced_dir,
        "--criu",
        &criu,
        &job,
    ]);
    assert_eq!(
        (code, forced["error"]["kind"].as_str()),
        (1, Some("criu_failed")),
        "{forced:#}"
    );
    assert!(
        forced["criu_errors"]
            .to_string()
            .contains("outside of its pid namespace"),
        "CRIU's own reason: {forced:#}"
    );
    assert!(
        fx.take_calls().iter().any(|c| c.op == "checkpoint"),
        "the pre-dump suspended it"
    );
    wait_until("the watcher to resume the job", || {
        fx.fake_state(container.job) == "running"
    });
    let images = fx.dir().join("images");
    let images_arg = images.display().to_string();
    let (code, refused) = inside(&["--json", "dump", "--to", &images_arg, "--criu", &criu, &job]);
    let message = refusal_message(code, &refused, "refused");
    assert!(message.contains("outside its PID namespace"), "{message}");
    let hint = refused["error"]["hint"].as_str().expect("a hint");
    assert!(hint.contains("setsid"), "{hint}");
    fx.assert_no_calls("a refused dump");
    assert!(!images.exists(), "nothing was created");
    // From this test's namespace too, where /proc/PID/stat shows the
    // outer session's number: the job's own namespace says 0.
    let children = format!("/proc/{0}/task/{0}/children", container.init);
    let here: i32 = std::fs::read_to_string(children)
        .expect("the init's children")
        .split_whitespace()
        .next()
        .expect("the job")
        .parse()
        .expect("a PID");
    let (code, refused) = dump(&fx, &images, Path::new(&criu), here, &[]);
    let message = refusal_message(code, &refused, "refused");
    assert!(message.contains("outside its PID namespace"), "{message}");
    fx.assert_no_calls("a refused dump from outside");
}

/// A PID and mount namespace of its own with a fake CUDA job in it, started
/// by the namespace's init from this test's session (led outside it);
/// killed with its namespace when dropped.
struct Container {
    unshare: std::process::Child,
    /// The namespace's init, as this test sees it.
    init: i32,
    /// The job's PID inside the namespace.
    job: i32,
}

impl Container {
    fn start(fx: &Fixture) -> Container {
        let pid_file = fx.dir().join("inner.pid");
        let script = format!(
            "LD_PRELOAD=$CUDA sleep 600 </dev/null >/dev/null 2>&1 & j=$!; while ! grep -qF \"$CUDA\" /proc/$j/maps; do sleep 0.01; done; echo $j > '{0}.new' && mv '{0}.new' '{0}'; exec sleep 600",
            pid_file.display()
        );
        let unshare = Command::new("unshare")
            .args([
                "--pid",
                "--fork",
                "--kill-child",
                "--mount-proc",
                "sh",
                "-c",
            ])
            .arg(script)
            .env("FAKE_CUDA_STATE_DIR", fx.dir())
            .env("CUDA", fake_libcuda())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("unshare starts");
        let mut container = Container {
            init: 0,
            job: 0,
            unshare,
        };
        let children = format!("/proc/{0}/task/{0}/children", container.unshare.id());
        wait_until("the job inside to map the fake", || pid_file.exists());
        container.job = std::fs::read_to_string(&pid_file)
            .expect("the job's PID")
            .trim()
            .parse()
            .expect("a PID");
        container.init = std::fs::read_to_string(children)
            .expect("unshare's child")
            .trim()
            .parse()
            .expect("one child");
        container
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // The init dies with unshare (--kill-child), and the namespace's
        // every process with the init.
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
    }
}

/// A Unix socket connected to a process outside the tree (a daemon, as
/// journald's socket is for a service's output) cannot be dumped by CRIU.
/// Forced, CRIU fails after the pre-dump suspended the job (the harm: a
/// suspend and a resume for nothing, and no images); without `--force` the
/// dump is refused before any change, naming the socket.
#[test]
fn a_unix_socket_connected_outside_the_tree_is_refused_before_any_change() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let daemon_path = fx.dir().join("daemon.sock");
    let daemon = std::os::unix::net::UnixListener::bind(&daemon_path).expect("a listener");
    // The daemon accepts (an unaccepted connection waits in its queue, held
    // by nobody, and CRIU dumps it).
    let accepted = std::thread::spawn(move || daemon.accept().map(|(stream, _)| stream));
    let script = format!(
        "LD_PRELOAD=$CUDA setsid python3 -c 'import socket, time; s = socket.socket(socket.AF_UNIX); s.connect(\"{}\"); time.sleep(600)' </dev/null >/dev/null 2>&1",
        daemon_path.display()
    );
    let job = Orphan::start(&fx, &script);
    wait_until("the job to connect", || {
        std::fs::read_dir(format!("/proc/{}/fd", job.0)).is_ok_and(|fds| {
            fds.flatten().any(|fd| {
                std::fs::read_link(fd.path())
                    .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
            })
        })
    });
    let _held = accepted
        .join()
        .expect("the accept thread")
        .expect("accepted");
    // The harm, forced: CRIU fails after the suspend.
    let (code, forced) = dump(&fx, &fx.dir().join("forced"), &criu, job.0, &["--force"]);
    assert_eq!(
        (code, forced["error"]["kind"].as_str()),
        (1, Some("criu_failed")),
        "{forced:#}"
    );
    assert!(
        fx.take_calls().iter().any(|c| c.op == "checkpoint"),
        "the pre-dump suspended it"
    );
    wait_until("the watcher to resume the job", || {
        fx.fake_state(job.0) == "running"
    });
    // The refusal: before any change, the socket named.
    let images = fx.dir().join("images");
    let (code, refused) = dump(&fx, &images, &criu, job.0, &[]);
    let message = refusal_message(code, &refused, "refused");
    assert!(
        message.contains(&daemon_path.display().to_string()),
        "{message}"
    );
    fx.assert_no_calls("a refused dump");
    assert!(!images.exists(), "nothing was created");
}

/// The attacker's images directories: a link to another directory, and an
/// empty directory another user owns (who could plant files in it while
/// CRIU writes) are refused for a dump before any change.
#[test]
fn a_planted_images_directory_is_refused_for_a_dump() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let job = Orphan::cuda(&fx);
    let elsewhere = fx.dir().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    let link = fx.dir().join("link");
    std::os::unix::fs::symlink(&elsewhere, &link).expect("symlink");
    let theirs = fx.dir().join("theirs");
    std::fs::create_dir(&theirs).expect("mkdir");
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown");
    for planted in [&link, &theirs] {
        let (code, refused) = dump(&fx, planted, &criu, job.0, &[]);
        assert_eq!(
            (code, refused["error"]["kind"].as_str()),
            (8, Some("images_dir")),
            "{}: {refused:#}",
            planted.display()
        );
    }
    fx.assert_no_calls("refused dumps");
    assert_eq!(std::fs::read_dir(&elsewhere).expect("elsewhere").count(), 0);
    assert_eq!(std::fs::read_dir(&theirs).expect("theirs").count(), 0);
}

/// The attacker's manifests: in a directory another user owns, as a link
/// to a file of theirs, and as a FIFO (which would block a reader) are
/// refused before CRIU runs, and the FIFO is never waited on.
#[test]
fn a_planted_manifest_is_refused_for_an_undump() {
    if !running_as_root() {
        return;
    }
    let fx = Fixture::new();
    let manifest = r#"{"schema_version":1}"#;
    // Another user's directory.
    let theirs = fx.dir().join("theirs");
    std::fs::create_dir(&theirs).expect("mkdir");
    std::fs::write(theirs.join("cudackpt-manifest.json"), manifest).expect("write");
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown");
    // A link where the manifest should be.
    let linked = fx.dir().join("linked");
    std::fs::create_dir(&linked).expect("mkdir");
    std::os::unix::fs::symlink(
        theirs.join("cudackpt-manifest.json"),
        linked.join("cudackpt-manifest.json"),
    )
    .expect("symlink");
    // A FIFO where the manifest should be.
    let fifo = fx.dir().join("fifo");
    std::fs::create_dir(&fifo).expect("mkdir");
    let made = Command::new("mkfifo")
        .arg(fifo.join("cudackpt-manifest.json"))
        .status()
        .expect("mkfifo");
    assert!(made.success());
    for planted in [&theirs, &linked, &fifo] {
        let started = std::time::Instant::now();
        let (code, refused) = run(
            &fx,
            &["--json", "undump", planted.to_str().expect("a UTF-8 path")],
        );
        assert_eq!(
            (code, refused["error"]["kind"].as_str()),
            (8, Some("images_dir")),
            "{}: {refused:#}",
            planted.display()
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "not waited on"
        );
    }
    fx.assert_no_calls("refused undumps");
}

/// `cudackpt dump` killed once CRIU runs: CRIU finishes and the job is
/// gone, and the manifest written before CRIU started (marked incomplete)
/// lets `undump` bring it back, saying so; images whose CRIU log does not
/// say the dump finished are refused.
#[test]
fn a_dump_whose_cudackpt_is_killed_while_criu_runs_is_undumped() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let job = Orphan::cuda(&fx);
    let images = fx.dir().join("images");
    let pid = job.0.to_string();
    let mut dumping = fx
        .std_command(&plain_dump(&images, &criu, &pid))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("cudackpt dump starts");
    wait_until("CRIU to start", || images.join("dump.log").exists());
    dumping.kill().expect("SIGKILL");
    let _ = dumping.wait();
    wait_until("CRIU to finish the dump", || !alive(job.0));
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(images.join("cudackpt-manifest.json")).expect("a manifest"),
    )
    .expect("JSON");
    validate_manifest(&manifest);
    assert_eq!(manifest["complete"], false);
    wait_until("CRIU's log to say it finished", || {
        std::fs::read_to_string(images.join("dump.log"))
            .is_ok_and(|log| log.contains("Dumping finished successfully"))
    });
    let (code, undumped) = undump(&fx, &images, &criu, &[]);
    assert_eq!(code, 0, "{undumped:#}");
    let remarks = undumped["warnings"].to_string();
    assert!(remarks.contains("ended before it completed"), "{remarks}");
    assert!(alive(job.0));
    assert_eq!(fx.fake_state(job.0), "running", "{undumped:#}");
    // Images whose CRIU never said it finished are not whole.
    let log = std::fs::read_to_string(images.join("dump.log")).expect("the log");
    let cut: String = log
        .lines()
        .filter(|l| !l.contains("Dumping finished successfully"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(images.join("dump.log"), cut).expect("cut the log");
    let (code, refused) = undump(&fx, &images, &criu, &[]);
    let message = refusal_message(code, &refused, "dump_incomplete");
    assert!(message.contains("cut short"), "{message}");
}

/// The manifest validates against its committed schema.
fn validate_manifest(manifest: &serde_json::Value) {
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/schema/dump-manifest.schema.json"
        ))
        .expect("the schema"),
    )
    .expect("JSON");
    let validator = jsonschema::validator_for(&schema).expect("a schema");
    assert!(validator.is_valid(manifest), "{manifest:#}");
}

/// `cudackpt dump` with `signals` sent to it alone (50 ms apart) once CRIU
/// runs its pre-dump (the fake's checkpoint takes 3 s): its exit and
/// document.
fn dump_signalled(
    fx: &Fixture,
    criu: &Path,
    job: &Orphan,
    images: &Path,
    signals: usize,
) -> (i32, serde_json::Value) {
    let pid = job.0.to_string();
    let mut command = fx.std_command(&plain_dump(images, criu, &pid));
    command
        .env("FAKE_CUDA_INJECT", "checkpoint=delay:3000")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let dumping = command.spawn().expect("cudackpt dump starts");
    wait_until("CRIU to start", || images.join("dump.log").exists());
    for _ in 0..signals {
        let sent = Command::new("kill")
            .args(["-TERM", &dumping.id().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let output = dumping.wait_with_output().expect("cudackpt ends");
    (output.status.code().unwrap_or(-1), document(&output))
}

/// SIGTERM while CRIU dumps: cudackpt lets CRIU finish and says where the
/// tree is (exit 143), and the images undump; a second SIGTERM ends the
/// wait (exit 11), CRIU finishing alone, and its images undump as well.
#[test]
fn a_signal_during_a_dump_is_reported_with_where_the_tree_is() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let job = Orphan::cuda(&fx);
    let images = fx.dir().join("images");
    let (code, doc) = dump_signalled(&fx, &criu, &job, &images, 1);
    assert_eq!(
        (code, doc["error"]["kind"].as_str()),
        (143, Some("interrupted")),
        "{doc:#}"
    );
    let message = doc["error"]["message"].as_str().expect("a message");
    assert!(
        message.starts_with("SIGTERM came while CRIU ran")
            && message.contains("the dump completed"),
        "{message}"
    );
    assert_eq!(doc["manifest"]["complete"], true, "{doc:#}");
    wait_until("the dumped job to be gone", || !alive(job.0));
    let (code, undumped) = undump(&fx, &images, &criu, &[]);
    assert_eq!(code, 0, "{undumped:#}");
    assert!(alive(job.0));
    // Twice: cudackpt stops waiting; CRIU finishes alone.
    let again = fx.dir().join("again");
    let (code, doc) = dump_signalled(&fx, &criu, &job, &again, 2);
    assert_eq!(
        (code, doc["error"]["kind"].as_str()),
        (11, Some("abandoned")),
        "{doc:#}"
    );
    let hint = doc["error"]["hint"].as_str().expect("a hint");
    assert!(hint.contains("cudackpt undump"), "{hint}");
    wait_until("CRIU to finish alone", || {
        std::fs::read_to_string(again.join("dump.log"))
            .is_ok_and(|log| log.contains("Dumping finished successfully"))
    });
    wait_until("the dumped job to be gone", || !alive(job.0));
    let (code, undumped) = undump(&fx, &again, &criu, &[]);
    assert_eq!(code, 0, "{undumped:#}");
    assert!(alive(job.0));
}

/// A "CRIU" that answers its version and then fails before its pre-dump:
/// exiting at once, or after writing a log without an error line.
fn failing_criu(fx: &Fixture, name: &str, log_line: Option<&str>) -> PathBuf {
    let path = fx.dir().join(name);
    let writes = log_line.map_or(String::new(), |line| {
        format!(
            "while [ $# -gt 0 ]; do case $1 in -W) w=$2;; -o) o=$2;; esac; shift; done\necho '{line}' > \"$w/$o\"\n"
        )
    });
    std::fs::write(
        &path,
        format!("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'Version: 4.2.1'; exit 0; fi\n{writes}exit 1\n"),
    )
    .expect("write");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    path
}

/// A CRIU that fails before its pre-dump changed nothing, and the report
/// says so (changed: false, no driver call), quoting its log's last lines
/// as such rather than as errors, or saying it wrote no log.
#[test]
fn a_criu_that_fails_before_its_pre_dump_changed_nothing() {
    if !running_as_root() {
        return;
    }
    let fx = Fixture::new();
    let job = Orphan::cuda(&fx);
    for (criu, said) in [
        (failing_criu(&fx, "criu-silent", None), "CRIU wrote no log"),
        (
            failing_criu(&fx, "criu-chatty", Some("(00.000001) Version: 4.2.1")),
            "CRIU wrote no error line",
        ),
    ] {
        let images = fx.dir().join(format!(
            "images-{}",
            criu.file_name().expect("a name").to_string_lossy()
        ));
        fx.take_calls();
        let (code, failed) = dump(&fx, &images, &criu, job.0, &[]);
        assert_eq!(
            (code, failed["error"]["kind"].as_str()),
            (1, Some("criu_failed")),
            "{failed:#}"
        );
        assert_eq!(failed["error"]["changed"], false, "{failed:#}");
        let message = failed["error"]["message"].as_str().expect("a message");
        assert!(
            message.contains("before its pre-dump: nothing was changed"),
            "{message}"
        );
        let hint = failed["error"]["hint"].as_str().expect("a hint");
        assert!(
            hint.contains("never suspended") && hint.contains(said),
            "{hint}"
        );
        assert!(!hint.contains("errors are below"), "{hint}");
        assert!(
            !images.join("cudackpt-manifest.json").exists(),
            "no images, no manifest"
        );
        let calls = crate::support::shorts(&fx.take_calls());
        assert!(
            !calls
                .iter()
                .any(|c| c.starts_with("lock") || c.starts_with("checkpoint")),
            "{calls:?}"
        );
        assert_eq!(fx.fake_state(job.0), "running");
    }
}

/// What Debian 12's CRIU 3.17.1 says on a kernel from 6.13 on, for
/// anything but `--version`: it cannot detect the kernel's features.
const CRIU_3_17_ERRORS: &str = "Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds\nError (criu/vdso.c:613): vdso: Failed to fill self vdso symtable\nError (criu/kerndat.c:1615): kerndat_vdso_fill_symtable failed when initializing kerndat.\nError (criu/crtools.c:260): Could not initialize kernel features detection.";

/// A stand-in for that CRIU, noting each way it is run in `ran`; with
/// `honest_check` false its `criu check` says "Looks good." (as a CRIU
/// that is never asked).
fn criu_that_cannot_start(fx: &Fixture, honest_check: bool) -> (PathBuf, PathBuf) {
    let path = fx.dir().join(format!("criu-3.17-{honest_check}"));
    let ran = fx.dir().join(format!("ran-{honest_check}"));
    let check = if honest_check {
        format!("echo '{CRIU_3_17_ERRORS}' >&2; exit 1")
    } else {
        "echo 'Looks good.'; exit 0".to_string()
    };
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh
echo \"$1\" >> '{}'
case \"$1\" in --version) echo 'Version: 3.17.1'; exit 0;; check) {check};; esac
echo '{CRIU_3_17_ERRORS}' >&2
exit 1
",
            ran.display()
        ),
    )
    .expect("write");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    (path, ran)
}

/// Debian 12's CRIU answers its version and cannot start here. Unasked,
/// it is run, and fails (nothing changed, but the job was not dumped and
/// the user learns why only from CRIU's words); asked with `criu check`,
/// it is refused before it runs a dump, the hint says how to build one
/// that starts, and no driver call is made.
#[test]
fn a_criu_that_cannot_start_here_is_refused_before_it_runs() {
    if !running_as_root() {
        return;
    }
    let fx = Fixture::new();
    let job = Orphan::cuda(&fx);
    // The harm, with its check lying: a dump that fails in CRIU.
    let (lying, ran) = criu_that_cannot_start(&fx, false);
    let (code, failed) = dump(&fx, &fx.dir().join("images-lying"), &lying, job.0, &[]);
    assert_eq!(
        (code, failed["error"]["kind"].as_str()),
        (1, Some("criu_failed")),
        "{failed:#}"
    );
    assert!(
        std::fs::read_to_string(&ran)
            .unwrap_or_default()
            .contains("dump"),
        "CRIU's dump ran"
    );
    fx.take_calls();
    // Asked: refused before CRIU's dump, with what to do.
    let (honest, ran) = criu_that_cannot_start(&fx, true);
    let (code, refused) = dump(&fx, &fx.dir().join("images-honest"), &honest, job.0, &[]);
    assert_eq!(
        (code, refused["error"]["kind"].as_str()),
        (8, Some("criu_unusable")),
        "{refused:#}"
    );
    let message = refused["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains("(CRIU 3.17.1) cannot start on this kernel")
            && message.contains("vdso: Unexpected rt vDSO area bounds"),
        "{message}"
    );
    let hint = refused["error"]["hint"].as_str().expect("a hint");
    assert!(
        hint.contains("scripts/build-criu") && hint.contains("--criu PATH"),
        "{hint}"
    );
    assert_eq!(
        std::fs::read_to_string(&ran).expect("it was asked"),
        "--version\ncheck\n",
        "asked, never run"
    );
    assert!(fx.take_calls().is_empty(), "no driver call");
    assert_eq!(fx.fake_state(job.0), "running");
}

/// A dump's success line names the images directory with its control
/// characters escaped: a `--to` holding escape sequences never reaches a
/// terminal raw.
#[test]
fn a_dump_prints_its_images_directory_escaped() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let job = Orphan::cuda(&fx);
    let images = fx.dir().join("job\x1b]0;OWNED\x07\x1b[2J");
    let pid = job.0.to_string();
    let args = plain_dump(&images, &criu, &pid);
    let output = fx.std_command(&args[1..]).output().expect("run cudackpt");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("job\\x1b]0;OWNED\\x07\\x1b[2J"),
        "{stdout:?}"
    );
    assert!(
        !stdout.contains('\x1b') && !stdout.contains('\x07'),
        "{stdout:?}"
    );
}

/// A job holding a deleted 4 MiB file (a DataLoader worker's batch in
/// /dev/shm is one): CRIU's own ghost limit (1 MiB) would stop the dump
/// after the suspend, shown with that limit forced; cudackpt gives CRIU the
/// largest instead, and the job goes to disk and back with the file.
#[test]
fn a_deleted_file_above_criu_s_ghost_limit_is_dumped_and_restored() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    // The harm: held to CRIU's own limit, the dump fails after the suspend.
    let tight = criu_with_a_tight_ghost_limit(&fx, &criu);
    let job = Orphan::cuda_that_criu_cannot_dump(&fx);
    let (code, failed) = dump(&fx, &fx.dir().join("tight"), &tight, job.0, &[]);
    assert_eq!(
        (code, failed["error"]["kind"].as_str()),
        (1, Some("criu_failed")),
        "{failed:#}"
    );
    assert!(
        failed["criu_errors"].to_string().contains("ghost"),
        "{failed:#}"
    );
    assert_eq!(fx.fake_state(job.0), "running");
    // cudackpt's own choice.
    let images = fx.dir().join("images");
    let (code, dumped) = dump(&fx, &images, &criu, job.0, &[]);
    assert_eq!(code, 0, "{dumped:#}");
    let options = options_of(&dumped);
    assert!(
        options.iter().any(|o| o == "--ghost-limit 4194304"),
        "{options:?}"
    );
    wait_until("the dumped job to be gone", || !alive(job.0));
    let (code, undumped) = undump(&fx, &images, &criu, &[]);
    assert_eq!(code, 0, "{undumped:#}");
    let held = std::fs::read_link(format!("/proc/{}/fd/3", job.0)).expect("its fd 3");
    assert!(
        held.to_string_lossy().ends_with("ghost (deleted)"),
        "{}",
        held.display()
    );
    let size = std::fs::metadata(format!("/proc/{}/fd/3", job.0))
        .expect("the file")
        .len();
    assert_eq!(size, 4 << 20);
}

/// A small filesystem of its own (tmpfs), unmounted when dropped.
struct SmallFilesystem(PathBuf);

impl SmallFilesystem {
    fn mount(at: PathBuf, size: &str) -> Option<SmallFilesystem> {
        std::fs::create_dir_all(&at).expect("mkdir");
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&at)
            .status()
            .is_ok_and(|s| s.success());
        crate::support::prerequisite("mount a tmpfs", mounted).then_some(SmallFilesystem(at))
    }
}

impl Drop for SmallFilesystem {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// CRIU copies a deleted file the tree holds into the images (a ghost
/// file), so the room check counts it: forced past the check, a 4 MiB
/// filesystem runs out during the dump, after the suspend; unforced, the
/// dump is refused before any change, the deleted file counted.
#[test]
fn deleted_files_count_in_the_images_room() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let Some(small) = SmallFilesystem::mount(fx.dir().join("small"), "4m") else {
        return;
    };
    let job = Orphan::cuda_that_criu_cannot_dump(&fx);
    // The harm: forced, CRIU fills the filesystem after the suspend.
    let (code, failed) = dump(&fx, &small.0.join("forced"), &criu, job.0, &["--force"]);
    assert_eq!(
        (code, failed["error"]["kind"].as_str()),
        (1, Some("criu_failed")),
        "{failed:#}"
    );
    assert_eq!(failed["error"]["changed"], true, "{failed:#}");
    assert_eq!(fx.fake_state(job.0), "running", "resumed after the failure");
    let _ = std::fs::remove_dir_all(small.0.join("forced"));
    // Unforced: refused before any change, the deleted file counted.
    fx.take_calls();
    let (code, refused) = dump(&fx, &small.0.join("refused"), &criu, job.0, &[]);
    let message = refusal_message(code, &refused, "no_room");
    assert!(message.contains("4 MiB of deleted files"), "{message}");
    let calls = crate::support::shorts(&fx.take_calls());
    assert!(
        calls.iter().all(|c| c.starts_with("get_state")),
        "only reads: {calls:?}"
    );
    assert!(alive(job.0));
}

/// A job of two processes connected over TCP on this host's own address
/// (`$HOST`, else the address the default route leaves by, else
/// loopback), each end a
/// socket of the tree, listening on `$PORT` (0: one the kernel picks);
/// `$READY` names a file written once connected.
const CONNECTED_PAIR: &str = r#"
import os, socket, sys, time
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    probe.connect(("192.0.2.254", 9))
    host = probe.getsockname()[0]
except OSError:
    host = "127.0.0.1"
probe.close()
host = os.environ.get("HOST") or host
server = socket.socket()
server.bind((host, int(os.environ["PORT"])))
server.listen(1)
port = server.getsockname()[1]
if os.fork() == 0:
    client = socket.create_connection((host, port))
    while True:
        time.sleep(1)
peer, _ = server.accept()
outside = sys.argv[1] if len(sys.argv) > 1 else ""
if outside:
    held = socket.create_connection(("127.0.0.1", int(outside)))
# Whole or not at all: the test reads the address as soon as it is there.
open(os.environ["READY"] + ".tmp", "w").write(host)
os.rename(os.environ["READY"] + ".tmp", os.environ["READY"])
while True:
    time.sleep(1)
"#;

/// A session whose every process is killed when this is dropped (CRIU
/// restores a session with its processes).
pub(crate) struct KilledSession(pub(crate) i32);

impl Drop for KilledSession {
    fn drop(&mut self) {
        let _ = Command::new("pkill")
            .args(["-9", "-s", &self.0.to_string()])
            .status();
    }
}

/// Starts [`CONNECTED_PAIR`] listening on `port` (0: the kernel's pick),
/// connected also to `outside`, a port of this test's, where given: the tree's root, leading a session of its own
/// that goes with the returned guard, and the address it used.
pub(crate) fn connected_pair(
    fx: &Fixture,
    port: u16,
    outside: Option<u16>,
) -> (Orphan, KilledSession, String) {
    connected_pair_on(fx, "", port, outside)
}

/// [`connected_pair`] on `host` (empty: the address the default route
/// leaves by, else loopback).
pub(crate) fn connected_pair_on(
    fx: &Fixture,
    host: &str,
    port: u16,
    outside: Option<u16>,
) -> (Orphan, KilledSession, String) {
    let script = fx.dir().join("pair.py");
    std::fs::write(&script, CONNECTED_PAIR).expect("write");
    let ready = fx.dir().join(format!("pair-{port}.ready"));
    let job = Orphan::launch(
        fx,
        &format!(
            "HOST='{host}' PORT={port} READY={} setsid python3 {} {} </dev/null >/dev/null 2>&1",
            ready.display(),
            script.display(),
            outside.map_or(String::new(), |p| p.to_string())
        ),
    );
    wait_until("the pair to connect", || ready.exists());
    let host = std::fs::read_to_string(&ready).expect("the address");
    let session = KilledSession(job.0);
    (job, session, host)
}

pub(crate) fn options_of(doc: &serde_json::Value) -> Vec<String> {
    doc["manifest"]["criu_options"]
        .as_array()
        .map(|options| {
            options
                .iter()
                .filter_map(|o| o["option"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Connections whose two ends are both the tree's need no network lock on
/// any address of the host (CRIU freezes the tree whole): the dump takes
/// `--network-lock skip` and the pair goes to disk and back, with no
/// iptables on PATH.
#[test]
fn connections_inside_the_tree_need_no_network_lock() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let (job, _session, host) = connected_pair(&fx, 0, None);
    let images = fx.dir().join("images");
    let pid = job.0.to_string();
    let output = fx
        .std_command(&plain_dump(&images, &criu, &pid))
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("run cudackpt");
    let dumped = document(&output);
    assert_eq!(output.status.code(), Some(0), "{host}: {dumped:#}");
    let options = options_of(&dumped);
    assert!(
        options.contains(&"--tcp-established".to_string())
            && options.contains(&"--network-lock skip".to_string()),
        "{host}: {options:?}"
    );
    wait_until("the dumped pair to be gone", || !alive(job.0));
    let (code, undumped) = undump(&fx, &images, &criu, &[]);
    assert_eq!(code, 0, "{undumped:#}");
    assert!(alive(job.0));
}

/// A "CRIU" that has no nftables lock (its `check` fails), the real one
/// otherwise.
fn criu_without_nftables(fx: &Fixture, criu: &Path) -> PathBuf {
    let wrapper = fx.dir().join("criu-no-nft");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ \"$1\" = check ]; then exit 1; fi\nexec '{}' \"$@\"\n",
            criu.display()
        ),
    )
    .expect("write");
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    wrapper
}

/// Once the pair is dumped, another socket of the host may take the port
/// its listener had. Forced, CRIU fails on it ("Address already in use");
/// unforced, the undump is refused before any change, naming the port;
/// once it is free, the pair comes back.
#[test]
fn a_port_the_job_listened_on_taken_since_is_refused_before_the_undump() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    // A port below the ephemeral range: no other test's connection can be
    // given it as its local end while this one waits to take it (one of
    // the kernel's picks was, for longer than any wait, in a CI run).
    let (job, _session, host) = connected_pair(&fx, a_free_port_below_the_ephemeral_range(), None);
    let listening = listening_port(job.0).expect("the pair listens");
    let images = fx.dir().join("images");
    let pid = job.0.to_string();
    let output = fx
        .std_command(&plain_dump(&images, &criu, &pid))
        .output()
        .expect("run cudackpt");
    assert_eq!(output.status.code(), Some(0), "{:#}", document(&output));
    wait_until("the dumped pair to be gone", || !alive(job.0));
    let squatter = std::net::TcpListener::bind((host.as_str(), listening))
        .expect("the port the dumped pair listened on is free to take");
    // The harm: forced, CRIU forks the tree and fails on the port.
    let (code, failed) = undump(&fx, &images, &criu, &["--force"]);
    assert_eq!(
        (code, failed["error"]["kind"].as_str()),
        (1, Some("criu_failed")),
        "{failed:#}"
    );
    assert!(
        failed["criu_errors"]
            .to_string()
            .contains("Address already in use"),
        "{failed:#}"
    );
    assert!(!alive(job.0));
    // Unforced: refused before CRIU runs, the port named.
    let (code, refused) = undump(&fx, &images, &criu, &[]);
    let message = refusal_message(code, &refused, "port_in_use");
    assert!(
        message.contains(&format!(
            "{host}:{listening} (a listener of this host holds"
        )),
        "{message}"
    );
    assert!(refused["criu_log"].is_null(), "CRIU never ran: {refused:#}");
    // Free again: the pair comes back.
    drop(squatter);
    let (code, undumped) = undump(&fx, &images, &criu, &[]);
    assert_eq!(code, 0, "{undumped:#}");
    assert!(alive(job.0));
}

/// A TCP port below /proc/sys/net/ipv4/ip_local_port_range that nothing
/// holds now, chosen at random so that tests running beside this one
/// rarely try the same.
pub(crate) fn a_free_port_below_the_ephemeral_range() -> u16 {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .expect("the ephemeral range");
    let low: u16 = range
        .split_whitespace()
        .next()
        .and_then(|l| l.parse().ok())
        .expect("the range's low end");
    let floor = 10_000.min(low / 2);
    let seed = std::process::id() as u64
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    (0..1000u64)
        .map(|i| floor + ((seed.wrapping_add(i * 7919)) % u64::from(low - floor)) as u16)
        .find(|&port| std::net::TcpListener::bind(("0.0.0.0", port)).is_ok())
        .expect("a free port below the ephemeral range")
}

/// The port `pid` listens on over TCP (IPv4), from its descriptors and
/// /proc/PID/net/tcp.
fn listening_port(pid: i32) -> Option<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            l.to_string_lossy()
                .strip_prefix("socket:[")
                .map(|i| i.trim_end_matches(']').to_string())
        })
        .collect();
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).ok()?;
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(3) == Some(&"0A") && inodes.iter().any(|i| Some(&i.as_str()) == fields.get(9)))
            .then(|| u16::from_str_radix(fields[1].split(':').nth(1)?, 16).ok())
            .flatten()
    })
}

/// A connection that leaves the tree must be locked while CRIU dumps; on a
/// host with neither CRIU's nftables lock nor iptables, CRIU fails after
/// the suspend (shown forced), so the dump is refused before any change,
/// naming the connection.
#[test]
fn a_connection_leaving_the_tree_without_a_lock_tool_is_refused() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("its address").port();
    let (job, _session, _) = connected_pair(&fx, 0, Some(port));
    let _accepted = listener.accept().expect("the job connects");
    let criu = criu_without_nftables(&fx, &criu);
    let no_tools = fx.dir().join("bin");
    std::fs::create_dir(&no_tools).expect("mkdir");
    let dump_with = |images: &Path, extra: &[&str]| {
        let args = dump_args(images, &criu, job.0, extra);
        let output = fx
            .std_command(&args.iter().map(String::as_str).collect::<Vec<_>>())
            .env("PATH", &no_tools)
            .output()
            .expect("run cudackpt");
        (output.status.code().unwrap_or(-1), document(&output))
    };
    // The harm: forced, CRIU cannot lock the connection.
    let (code, failed) = dump_with(&fx.dir().join("forced"), &["--force"]);
    assert_eq!(
        (code, failed["error"]["kind"].as_str()),
        (1, Some("criu_failed")),
        "{failed:#}"
    );
    assert!(alive(job.0), "{failed:#}");
    // Not forced: refused before any change, the connection named.
    fx.take_calls();
    let (code, refused) = dump_with(&fx.dir().join("refused"), &[]);
    let message = refusal_message(code, &refused, "refused");
    assert!(
        message.contains(&format!("127.0.0.1:{port}")) && message.contains("neither"),
        "{message}"
    );
    fx.assert_no_calls("a refused dump");
}
