//! cudackpt's CRIU plugin loaded into CRIU 4.2.1, with the fake driver:
//! CRIU calls its hooks, the plugin's helper (forked from CRIU) makes the
//! driver calls, and they are the fake's (its calls.log and state files).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::disk::{alive, criu, Orphan};
use crate::support::{criu_plugin, wait_until, Fixture};

/// A directory holding only the plugin: CRIU loads every `*.so` of its
/// `--libdir`.
fn plugin_dir(fx: &Fixture) -> PathBuf {
    let dir = fx.dir().join("criu-lib");
    if !dir.exists() {
        fs::create_dir(&dir).expect("the plugin directory");
        fs::copy(criu_plugin(), dir.join("cudackpt_plugin.so")).expect("copy the plugin");
    }
    dir
}

/// `criu ARGS -D IMAGES --libdir PLUGIN -v4 -o LOG`, with the fixture's
/// environment (the fake as the driver, its state directory, `extra`).
fn criu_command(fx: &Fixture, criu: &Path, args: &[&str], images: &Path, log: &str) -> Command {
    fs::create_dir_all(images).expect("the images directory");
    let mut command = Command::new(criu);
    command.args(args).arg("-D").arg(images).arg("--libdir");
    command.arg(plugin_dir(fx)).args(["-v4", "-o", log]);
    fx.configure_for(&mut command);
    command.stdout(Stdio::null()).stderr(Stdio::piped());
    command
}

fn run_criu(
    fx: &Fixture,
    criu: &Path,
    args: &[&str],
    images: &Path,
    log: &str,
) -> (Output, String) {
    let output = criu_command(fx, criu, args, images, log)
        .output()
        .expect("run criu");
    let log = fs::read_to_string(images.join(log)).unwrap_or_default();
    (output, log)
}

/// The plugin's lines in a CRIU log.
fn plugin_lines(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains("cudackpt:")).collect()
}

fn dump(fx: &Fixture, criu: &Path, pid: i32, images: &Path) -> (Output, String) {
    let pid = pid.to_string();
    run_criu(fx, criu, &["dump", "-t", &pid], images, "dump.log")
}

#[test]
fn a_cuda_process_goes_to_disk_and_back_through_the_plugin() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let job = Orphan::cuda(&fx);
    let images = fx.dir().join("images");
    fx.take_calls();

    let (dumped, log) = dump(&fx, &criu, job.0, &images);
    assert!(
        dumped.status.success(),
        "criu dump: {}\n{log}",
        String::from_utf8_lossy(&dumped.stderr)
    );
    let lines = plugin_lines(&log);
    for said in [
        format!("lock: PID {} (sleep) locked", job.0),
        format!("checkpoint: PID {} (sleep) checkpointed", job.0),
    ] {
        assert!(
            lines.iter().any(|l| l.contains(&said)),
            "the plugin says what it did ({said}): {lines:#?}"
        );
    }
    assert!(
        log.contains("Plugin \"cudackpt\" (version 512 hooks 13)"),
        "{log}"
    );
    wait_reaped(&[job.0]);
    assert_eq!(fx.fake_record(job.0).0, "checkpointed");
    let calls = op_pids(&fx);
    assert!(calls.contains(&format!("lock {}", job.0)), "{calls:?}");
    assert!(
        calls.contains(&format!("checkpoint {}", job.0)),
        "{calls:?}"
    );

    let (restored, log) = run_criu(&fx, &criu, &["restore", "-d"], &images, "restore.log");
    assert!(
        restored.status.success(),
        "criu restore: {}\n{log}",
        String::from_utf8_lossy(&restored.stderr)
    );
    let lines = plugin_lines(&log);
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&format!("resume: PID {} (sleep) running", job.0))),
        "{lines:#?}"
    );
    assert!(alive(job.0), "restored at its PID");
    assert_eq!(fx.fake_record(job.0).0, "running");
    assert!(
        fx.intents().is_empty(),
        "no intent record left: {:?}",
        fx.intents()
    );
}

#[test]
fn a_dump_that_leaves_the_tree_running_resumes_the_group() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let job = Orphan::cuda(&fx);
    let pid = job.0.to_string();
    fx.take_calls();
    let images = fx.dir().join("images");
    let (dumped, log) = run_criu(&fx, &criu, &["dump", "-R", "-t", &pid], &images, "dump.log");
    assert!(dumped.status.success(), "{log}");
    assert!(
        plugin_lines(&log)
            .iter()
            .any(|l| l.contains("the dump leaves the tree running: resuming PID")),
        "{log}"
    );
    let calls = op_pids(&fx);
    for op in ["lock", "checkpoint", "restore", "unlock"] {
        assert!(
            calls.contains(&format!("{op} {}", job.0)),
            "{op}: {calls:?}"
        );
    }
    assert!(alive(job.0));
    assert_eq!(fx.fake_record(job.0).0, "running");
    assert!(fx.intents().is_empty(), "{:?}", fx.intents());
}

#[test]
fn a_tree_the_driver_could_not_restore_is_refused_at_the_first_hook_with_no_driver_call() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let program = fx.compile_program(
        "rank",
        "#define _GNU_SOURCE\n#include <pthread.h>\n#include <sys/prctl.h>\n#include <unistd.h>\n\
         static void *watch(void *arg) { (void)arg; prctl(PR_SET_NAME, \"pt_nccl_watchdg\"); for (;;) pause(); return 0; }\n\
         int main(void) { pthread_t t; pthread_create(&t, 0, watch, 0); for (;;) pause(); }\n",
    );
    let rank = Orphan::start(
        &fx,
        &format!(
            "LD_PRELOAD=$CUDA setsid {} </dev/null >/dev/null 2>&1",
            program.display()
        ),
    );
    wait_until("the watchdog thread", || {
        fs::read_dir(format!("/proc/{}/task", rank.0)).is_ok_and(|tasks| {
            tasks.flatten().any(|t| {
                fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|c| c.trim_end() == "pt_nccl_watchdg")
            })
        })
    });
    fx.take_calls();
    let (refused, log) = dump(&fx, &criu, rank.0, &fx.dir().join("images"));
    assert!(!refused.status.success(), "the dump stops: {log}");
    assert!(
        log.contains("Error (cudackpt plugin): cudackpt: suspend: PID"),
        "{log}"
    );
    assert!(
        log.contains("--force") || log.contains("CUDACKPT_FORCE"),
        "the way on is named: {log}"
    );
    // Nothing changed: the one query a tree's processes get is the one
    // that tells which of them have CUDA (as for the action script).
    let calls = fx.take_calls();
    assert!(
        calls.iter().all(|c| c.op == "get_state"),
        "a rank refused at the first hook: {calls:?}"
    );
    assert!(alive(rank.0), "the rank runs on");
    assert_eq!(fx.fake_record(rank.0).0, "running", "{log}");
}

/// A user maps a file named as the driver names its IPC files, with a
/// terminal's escapes in the name (a title, a clear screen, a carriage
/// return): the plugin refuses the tree and names the file in CRIU's log,
/// which root reads, with every control character escaped.
#[test]
fn a_file_name_with_a_terminals_escapes_reaches_criu_s_log_escaped() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let program = fx.compile_program(
        "mapper",
        "#include <fcntl.h>\n#include <sys/mman.h>\n#include <unistd.h>\n\
         int main(int argc, char **argv) { (void)argc; int fd = open(argv[1], O_RDWR | O_CREAT, 0600);\n\
         if (fd < 0 || ftruncate(fd, 4096) || mmap(0, 4096, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED) return 1;\n\
         unlink(argv[1]); for (;;) pause(); }\n",
    );
    let planted = format!(
        "/dev/shm/cuda.shm.1.\x1b]0;OWNED\x07\x1b[2J\r.{}",
        std::process::id()
    );
    let name_file = fx.dir().join("name");
    fs::write(&name_file, &planted).expect("write");
    let job = Orphan::start(
        &fx,
        &format!(
            "LD_PRELOAD=$CUDA setsid {} \"$(cat {})\" </dev/null >/dev/null 2>&1",
            program.display(),
            name_file.display()
        ),
    );
    wait_until("the file to be mapped", || {
        fs::read(format!("/proc/{}/maps", job.0))
            .is_ok_and(|maps| String::from_utf8_lossy(&maps).contains("OWNED"))
    });
    let images = fx.dir().join("images");
    let (refused, _) = dump(&fx, &criu, job.0, &images);
    assert!(!refused.status.success(), "the dump stops");
    let log = fs::read(images.join("dump.log")).expect("CRIU's log");
    let text = String::from_utf8_lossy(&log);
    assert!(
        text.contains("cuda.shm.1.\\x1b]0;OWNED\\x07\\x1b[2J\\x0d"),
        "the name, escaped: {text}"
    );
    for control in [0x1b_u8, 0x07, b'\r'] {
        assert!(
            !log.contains(&control),
            "CRIU's log holds {control:#04x} raw: {text:?}"
        );
    }
    assert!(alive(job.0), "the job runs on");
}

/// A cgroup's name is its creator's (a user's delegated subtree, a
/// container runtime's; the kernel refuses a newline in one): a job in one
/// named with a terminal's escapes, whose GPU memory its limit cannot
/// hold, is refused at the first hook, and CRIU's log names the cgroup
/// with every control character escaped.
#[test]
fn a_cgroup_s_name_reaches_criu_s_log_escaped() {
    let Some(criu) = criu() else { return };
    let Some(real) = crate::support::RealCgroup::new() else {
        return;
    };
    let fx = Fixture::new().with_nvml().with_cgroup_tree();
    let job = Orphan::cuda(&fx);
    let planted = real.child("job\x1b]0;OWNED\x07\x1b[2J");
    real.add(&planted, job.0);
    fx.set_footprints(&[(job.0, 4096)]);
    let cgroup = fx.cgroup_of(job.0, 1);
    fs::write(cgroup.join("memory.max"), format!("{}\n", 2u64 << 30)).expect("memory.max");
    let images = fx.dir().join("images");
    let (refused, _) = dump(&fx, &criu, job.0, &images);
    assert!(!refused.status.success(), "the dump stops");
    let log = fs::read(images.join("dump.log")).expect("CRIU's log");
    let text = String::from_utf8_lossy(&log);
    assert!(
        text.contains("job\\x1b]0;OWNED\\x07\\x1b[2J has"),
        "the cgroup, escaped: {text}"
    );
    for control in [0x1b_u8, 0x07] {
        assert!(!log.contains(&control), "{control:#04x} raw: {text:?}");
    }
    assert!(alive(job.0), "the job runs on");
}

#[test]
fn a_group_whose_checkpoint_fails_is_rolled_back_and_the_dump_stops() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let root = Orphan::start(
        &fx,
        "LD_PRELOAD=$CUDA setsid sh -c 'LD_PRELOAD=$CUDA sleep 600 & exec sleep 600' </dev/null >/dev/null 2>&1",
    );
    let kin = cuda_child_of(&root);
    let child = kin.0;
    fs::write(
        fx.dir().join("inject"),
        format!("checkpoint@{child}=error:2\n"),
    )
    .expect("inject");
    fx.take_calls();
    let (failed, log) = dump(&fx, &criu, root.0, &fx.dir().join("images"));
    assert!(!failed.status.success(), "{log}");
    let calls = op_pids(&fx);
    assert!(
        calls.contains(&format!("checkpoint {}", root.0)),
        "{calls:?}"
    );
    assert!(
        calls.contains(&format!("restore {}", root.0)),
        "rolled back: {calls:?}"
    );
    for pid in [root.0, child] {
        assert!(alive(pid));
        assert_eq!(fx.fake_record(pid).0, "running", "PID {pid}: {log}");
    }
    assert!(fx.intents().is_empty(), "{:?}", fx.intents());
}

#[test]
fn a_criu_killed_mid_dump_leaves_a_record_that_recover_puts_back() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let (job, mut dumping, _) =
        dump_with_a_slow_checkpoint(&fx, &criu, &["locked", "checkpointed"]);
    // The plugin's helper, CRIU's child, calls the driver.
    let helper = wait_for_children(dumping.id() as i32, 1);
    dumping.kill().expect("kill -9 criu");
    let _ = dumping.wait();
    // The checkpoint in flight dies with CRIU, once the kernel has
    // delivered the helper its parent's death (until then the record's
    // owner lives, and `recover` rightly leaves it alone): the group stays
    // locked, and its intent record names it.
    wait_until("the helper to die with CRIU", || {
        helper.iter().all(|&pid| !alive(pid))
    });
    assert!(!fx.intents().is_empty(), "CRIU's intent record stays");

    recover_puts_back(&fx, &job);
    assert!(fx.intents().is_empty(), "{:?}", fx.intents());
}

/// A CUDA job whose checkpoint takes 3 s, and CRIU dumping it, returned
/// once the fake's record of the job is in one of `states`: (the job,
/// CRIU, the images directory).
fn dump_with_a_slow_checkpoint(
    fx: &Fixture,
    criu: &Path,
    states: &[&str],
) -> (Orphan, std::process::Child, PathBuf) {
    let job = Orphan::cuda(fx);
    fs::write(
        fx.dir().join("inject"),
        format!("checkpoint@{}=delay:3000\n", job.0),
    )
    .expect("inject");
    let images = fx.dir().join("images");
    let pid = job.0.to_string();
    let dumping = criu_command(fx, criu, &["dump", "-t", &pid], &images, "dump.log")
        .spawn()
        .expect("start criu");
    wait_until("the group to be locked", || {
        states.contains(&fx.fake_record(job.0).0.as_str())
    });
    (job, dumping, images)
}

/// `cudackpt recover` succeeds and the job runs again.
fn recover_puts_back(fx: &Fixture, job: &Orphan) {
    let recovered = fx
        .cudackpt(&["--json", "recover"])
        .output()
        .expect("recover");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&recovered.stdout),
        String::from_utf8_lossy(&recovered.stderr)
    );
    assert!(recovered.status.success(), "{said}");
    assert_eq!(fx.fake_record(job.0).0, "running", "{said}");
}

/// CRIU enters a container's mount namespace with `setns` to dump its
/// file systems, which the kernel refuses to a process with threads (on
/// the GPU, runc's dumps failed so while the driver ran in CRIU's
/// process): a group's side-by-side calls, and the driver's own threads,
/// are the plugin's helper's. CRIU's threads are counted all through a
/// dump of two CUDA processes whose checkpoints take a second and a half.
#[test]
fn criu_stays_single_threaded_while_the_plugin_calls_the_driver() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let shell = Orphan::launch(
        &fx,
        "setsid sh -c 'FAKE_CUDA_IDENTITY=$$-a-$(date +%s%N) LD_PRELOAD=$CUDA sleep 600 & FAKE_CUDA_IDENTITY=$$-b-$(date +%s%N) LD_PRELOAD=$CUDA sleep 600 & wait' </dev/null >/dev/null 2>&1",
    );
    let kids = wait_for_children(shell.0, 2);
    wait_to_map_the_fake(&kids);
    let inject: String = kids
        .iter()
        .map(|pid| format!("checkpoint@{pid}=delay:1500\n"))
        .collect();
    fs::write(fx.dir().join("inject"), inject).expect("inject");
    let images = fx.dir().join("images");
    let root = shell.0.to_string();
    let mut dumping = criu_command(&fx, &criu, &["dump", "-t", &root], &images, "dump.log")
        .spawn()
        .expect("start criu");
    let tasks = format!("/proc/{}/task", dumping.id());
    let mut most = 0;
    let status = loop {
        if let Ok(entries) = fs::read_dir(&tasks) {
            most = most.max(entries.count());
        }
        if let Some(status) = dumping.try_wait().expect("criu") {
            break status;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let log = fs::read_to_string(images.join("dump.log")).unwrap_or_default();
    assert!(status.success(), "criu dump: {log}");
    for pid in &kids {
        assert_eq!(fx.fake_record(*pid).0, "checkpointed");
    }
    assert_eq!(most, 1, "CRIU had {most} threads at once during the dump");
}

/// The plugin's helper killed mid-dump (the OOM killer, an operator):
/// CRIU's half says so in CRIU's log, the dump stops, CRIU ends, and
/// `recover` puts the group back from the record handed to CRIU.
#[test]
fn a_helper_killed_mid_dump_stops_the_dump_and_recover_puts_the_group_back() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let (job, mut dumping, images) = dump_with_a_slow_checkpoint(&fx, &criu, &["locked"]);
    let helper = wait_for_child(dumping.id() as i32);
    let killed = Command::new("kill")
        .args(["-9", &helper.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = dumping.wait().expect("criu ends");
    let log = fs::read_to_string(images.join("dump.log")).unwrap_or_default();
    assert!(!status.success(), "the dump stops: {log}");
    assert!(
        log.contains(&format!(
            "the plugin's helper (PID {helper}) did not answer"
        )),
        "{log}"
    );
    assert!(!fx.intents().is_empty(), "the record stays for recover");
    recover_puts_back(&fx, &job);
    assert!(alive(job.0), "the job runs on");
}

/// A rank speaking the drain protocol (tests/fixtures/drain-target, acknowledging),
/// in a session of its own, and the file where it says what it does.
fn drained_rank(fx: &Fixture) -> (Orphan, PathBuf) {
    // Builds the drain target in the fixture.
    drop(fx.drain_target("ack", &[]));
    let events = fx.dir().join("orphan.events");
    let rank = Orphan::start(
        fx,
        &format!(
            // Its identity follows it through CRIU, and the fake's record with it.
            "FAKE_CUDA_IDENTITY=$$-$(date +%s%N) LD_PRELOAD=$CUDA setsid {} ack {} </dev/null >/dev/null 2>&1",
            fx.dir().join("drain_target").display(),
            events.display()
        ),
    );
    wait_until("the rank to be ready", || {
        fs::read_to_string(&events).is_ok_and(|e| e.contains("ready"))
    });
    (rank, events)
}

/// The driver calls since the last look, as `OP PID`.
fn op_pids(fx: &Fixture) -> Vec<String> {
    fx.take_calls()
        .iter()
        .map(|c| format!("{} {}", c.op, c.pid))
        .collect()
}

/// The one child `root`'s script started, once it maps the fake driver,
/// killed with its root.
fn cuda_child_of(root: &Orphan) -> Orphan {
    let child = root.kin(wait_for_child(root.0));
    wait_to_map_the_fake(&[child.0]);
    child
}

/// Waits until each of `pids` maps the fake driver.
fn wait_to_map_the_fake(pids: &[i32]) {
    let fake = crate::support::fake_libcuda()
        .to_string_lossy()
        .into_owned();
    wait_until("the processes to map the fake", || {
        pids.iter().all(|pid| {
            fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains(&fake))
        })
    });
}

/// Waits until the dumped `pids` are gone and reaped: CRIU restores each
/// at its PID.
fn wait_reaped(pids: &[i32]) {
    wait_until("the dumped processes to be reaped", || {
        pids.iter()
            .all(|pid| !Path::new(&format!("/proc/{pid}")).exists())
    });
}

/// The first child of `pid`, once it has one.
fn wait_for_child(pid: i32) -> i32 {
    wait_for_children(pid, 1)[0]
}

/// The children of `pid`, once it has `count` of them.
fn wait_for_children(pid: i32, count: usize) -> Vec<i32> {
    let children = format!("/proc/{pid}/task/{pid}/children");
    let listed = || -> Vec<i32> {
        fs::read_to_string(&children)
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    };
    wait_until("the children", || listed().len() >= count);
    listed()
}

/// A program that loads a CRIU plugin as CRIU 4.x does (dlopen, the
/// descriptor, `init`), exports the log function plugins call, and says
/// `VERSION` when run with `--version`, as `criu --version` does.
fn plugin_host(fx: &Fixture, version: &str) -> PathBuf {
    // An empty version: a CRIU that cannot run again (as with a relative
    // LD_LIBRARY_PATH from CRIU's own directory), saying why on stderr.
    let answer = if version.is_empty() {
        r#"fprintf(stderr, "error while loading shared libraries: libnet.so.1\n"); return 127;"#
            .to_string()
    } else {
        format!(r#"printf("Version: {version}\n"); return 0;"#)
    };
    let source = format!(
        r#"
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
typedef struct {{ const char *name; int (*init)(int); void (*exit)(int, int);
  unsigned int version; unsigned int max_hooks; void *hooks[13]; }} desc_t;
void print_on_level(unsigned int level, const char *fmt, ...) {{
  va_list ap; va_start(ap, fmt); printf("log %u: ", level); vprintf(fmt, ap); va_end(ap);
}}
int main(int argc, char **argv) {{
  if (argc > 1 && strcmp(argv[1], "--version") == 0) {{ {answer} }}
  void *h = dlopen(argv[1], RTLD_LAZY);
  if (!h) {{ printf("dlopen: %s\n", dlerror()); return 2; }}
  desc_t *d = dlsym(h, "CR_PLUGIN_DESC");
  if (!d) {{ printf("no descriptor\n"); return 2; }}
  printf("descriptor %s version %u hooks %u\n", d->name, d->version, d->max_hooks);
  int ret = d->init(0);
  printf("init %d\n", ret);
  fflush(stdout);
  return ret == 0 ? 0 : 1;
}}
"#
    );
    let name = format!("criu-{}", version.replace('.', "-"));
    let program = fx.dir().join(&name);
    let c = fx.dir().join(format!("{name}.c"));
    fs::write(&c, source).expect("write the host");
    let built = Command::new("cc")
        .args(["-rdynamic", "-o"])
        .arg(&program)
        .arg(&c)
        .arg("-ldl")
        .status()
        .expect("run cc");
    assert!(built.success(), "cc");
    program
}

#[test]
fn a_criu_whose_plugin_abi_it_does_not_know_is_refused_at_init() {
    let fx = Fixture::new();
    let run = |version: &str| {
        let mut command = Command::new(plugin_host(&fx, version));
        command.arg(criu_plugin());
        fx.configure_for(&mut command);
        let output = command.output().expect("run the host");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    };
    let (code, said) = run("4.2.1");
    assert_eq!(code, Some(0), "the ABI it knows: {said}");
    assert!(
        said.contains("descriptor cudackpt version 512 hooks 13"),
        "{said}"
    );
    let loaded = format!("cudackpt {} loaded for Dump", env!("CARGO_PKG_VERSION"));
    assert!(said.contains(&loaded), "{said}");

    let (code, said) = run("5.0");
    assert_eq!(code, Some(1), "refused: {said}");
    assert!(
        said.contains("log 1: Error (cudackpt plugin): cudackpt: this CRIU is 5.0"),
        "{said}"
    );
    assert!(said.contains("init -1"), "{said}");

    let (code, said) = run("");
    assert_eq!(code, Some(1), "refused: {said}");
    assert!(
        said.contains("printed no version: error while loading shared libraries: libnet.so.1"),
        "why is said: {said}"
    );
}

#[test]
fn a_restore_moves_the_group_to_the_gpus_cudackpt_map_names() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::with_devices("GPU A:1000,GPU B:1000");
    let job = Orphan::cuda(&fx);
    let images = fx.dir().join("images");
    let (dumped, log) = dump(&fx, &criu, job.0, &images);
    assert!(dumped.status.success(), "{log}");
    assert_eq!(fx.fake_record(job.0), ("checkpointed".to_string(), 0));
    wait_reaped(&[job.0]);
    fx.take_calls();
    let restored = criu_command(&fx, &criu, &["restore", "-d"], &images, "restore.log")
        .env("CUDACKPT_MAP", "0=1")
        .output()
        .expect("criu restore");
    let log = fs::read_to_string(images.join("restore.log")).unwrap_or_default();
    assert!(restored.status.success(), "{log}");
    let restore = fx
        .take_calls()
        .into_iter()
        .find(|c| c.op == "restore" && c.pid == job.0)
        .expect("a restore call");
    assert!(restore.map.is_some(), "the driver got a map: {restore:?}");
    assert_eq!(fx.fake_record(job.0), ("running".to_string(), 1));
}

#[test]
fn a_drained_rank_goes_to_disk_and_rebuilds_after_the_restore() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let (rank, events) = drained_rank(&fx);
    let images = fx.dir().join("images");
    let pid = rank.0.to_string();
    let dumped = criu_command(&fx, &criu, &["dump", "-t", &pid], &images, "dump.log")
        .env("CUDACKPT_DRAIN", "1")
        .output()
        .expect("criu dump");
    let log = fs::read_to_string(images.join("dump.log")).unwrap_or_default();
    assert!(dumped.status.success(), "{log}");
    let said = fs::read_to_string(&events).expect("events");
    assert!(
        said.contains("dump-notice") && said.contains("released"),
        "{said}"
    );
    assert!(!said.contains("rebuilt"), "{said}");
    wait_reaped(&[rank.0]);
    let (restored, log) = run_criu(&fx, &criu, &["restore", "-d"], &images, "restore.log");
    assert!(restored.status.success(), "{log}");
    let said = fs::read_to_string(&events).expect("events");
    assert!(
        said.contains("rebuilt"),
        "rebuilt before CRIU ended: {said}\n{log}"
    );
    assert_eq!(fx.fake_record(rank.0).0, "running", "{log}");
}

#[test]
fn a_tree_without_cuda_is_dumped_with_no_driver_on_the_host() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let plain = Orphan::launch(&fx, "setsid sleep 600 </dev/null >/dev/null 2>&1");
    wait_until("the orphan to run sleep", || {
        fs::read_to_string(format!("/proc/{}/comm", plain.0)).is_ok_and(|c| c.trim_end() == "sleep")
    });
    let pid = plain.0.to_string();
    let images = fx.dir().join("images");
    let dumped = criu_command(&fx, &criu, &["dump", "-t", &pid], &images, "dump.log")
        .env("CUDACKPT_LIBCUDA", fx.dir().join("no-such-libcuda.so"))
        .output()
        .expect("criu dump");
    let log = fs::read_to_string(images.join("dump.log")).unwrap_or_default();
    assert!(dumped.status.success(), "{log}");
    assert!(
        log.contains(&format!(
            "no process of the tree of PID {pid} maps the CUDA driver"
        )),
        "{log}"
    );
    assert!(
        !log.contains("Warn  (cudackpt plugin)") && !log.contains("Error (cudackpt plugin)"),
        "{log}"
    );
}

#[test]
fn a_drained_rank_left_running_by_its_dump_rebuilds_once_criu_lets_it_run() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let (rank, events) = drained_rank(&fx);
    let images = fx.dir().join("images");
    let pid = rank.0.to_string();
    let dumped = criu_command(&fx, &criu, &["dump", "-R", "-t", &pid], &images, "dump.log")
        .env("CUDACKPT_DRAIN", "1")
        .output()
        .expect("criu dump");
    let log = fs::read_to_string(images.join("dump.log")).unwrap_or_default();
    assert!(dumped.status.success(), "{log}");
    assert!(
        log.contains(&format!("asked PID {pid} to rebuild")),
        "{log}"
    );
    wait_until("the rank to rebuild", || {
        fs::read_to_string(&events).is_ok_and(|e| e.contains("rebuilt"))
    });
    assert_eq!(fx.fake_record(rank.0).0, "running");
}

#[test]
fn a_tree_whose_root_has_no_cuda_restores_its_cuda_child() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let shell = Orphan::launch(
        &fx,
        "setsid sh -c 'FAKE_CUDA_IDENTITY=$$-$(date +%s%N) LD_PRELOAD=$CUDA sleep 600 & wait' </dev/null >/dev/null 2>&1",
    );
    let child = cuda_child_of(&shell);
    let images = fx.dir().join("images");
    let (dumped, log) = dump(&fx, &criu, shell.0, &images);
    assert!(dumped.status.success(), "{log}");
    assert_eq!(fx.fake_record(child.0).0, "checkpointed");
    wait_reaped(&[shell.0, child.0]);
    let (restored, log) = run_criu(&fx, &criu, &["restore", "-d"], &images, "restore.log");
    assert!(restored.status.success(), "{log}");
    assert!(
        !log.contains("Error (cudackpt plugin)"),
        "the shell is not the plugin's: {log}"
    );
    assert_eq!(fx.fake_record(child.0).0, "running");
}
