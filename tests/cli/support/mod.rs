//! What every test needs: the fake libcuda (built once per run), a per-test
//! fixture (its own fake-driver state directory and target processes that
//! are killed and reaped on drop), a `cudackpt` command wired to the fake,
//! readers for the fake's calls.log and state files, and snapshot filters.

pub mod criu_forge;
pub mod schema_check;
pub mod wire;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command as StdCommand, Output, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;

use crate::wire::Document;

/// The workspace root (this package's manifest directory).
pub fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The cudackpt binary cargo built for this test run.
pub fn cudackpt_bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("cudackpt")
}

/// The fake libcuda: `$FAKE_LIBCUDA` when set, else built once per test run
/// into its own target directory (so the build never waits on the lock of
/// the cargo that runs these tests).
pub fn fake_libcuda() -> &'static Path {
    static FAKE: OnceLock<PathBuf> = OnceLock::new();
    FAKE.get_or_init(|| built_library("FAKE_LIBCUDA", "fake-libcuda", "libfake_libcuda.so"))
}

/// cudackpt's CRIU plugin, built as [`fake_libcuda`] is
/// (`$CUDACKPT_CRIU_PLUGIN` when set).
pub fn criu_plugin() -> &'static Path {
    static PLUGIN: OnceLock<PathBuf> = OnceLock::new();
    PLUGIN.get_or_init(|| {
        built_library(
            "CUDACKPT_CRIU_PLUGIN",
            "cudackpt-criu-plugin",
            "libcudackpt_criu_plugin.so",
        )
    })
}

/// The library `file` of workspace package `package`: `$VAR` when set,
/// else built into a target directory of its own.
fn built_library(var: &str, package: &str, file: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(var) {
        let path = PathBuf::from(path);
        return path.canonicalize().unwrap_or_else(|e| {
            panic!("{var}={}: {e}", path.display());
        });
    }
    let target_dir = workspace().join("target").join(package);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = StdCommand::new(&cargo)
        .args(["build", "--quiet", "-p", package, "--target-dir"])
        .arg(&target_dir)
        .current_dir(workspace())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("could not run {cargo:?} to build {package}: {e}"));
    assert!(
        output.status.success(),
        "building {package} failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let path = target_dir.join("debug").join(file);
    path.canonicalize()
        .unwrap_or_else(|e| panic!("{package} is not at {}: {e}", path.display()))
}

/// The user others' files are given to, and attackers' commands run as.
pub const NOBODY: u32 = 65534;

/// A library whose constructor writes the file `MARK_FILE` names: the code
/// a user would have a root (or capable) cudackpt run by naming it in
/// `--libcuda`.
pub const MARKING_LIBRARY: &str = r#"
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void mark(void) {
    const char *path = getenv("MARK_FILE");
    if (path) { FILE *f = fopen(path, "w"); if (f) { fputs("ran with cudackpt's power", f); fclose(f); } }
}
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
"#;

/// The tests' effective uid.
pub fn own_uid() -> u32 {
    fs::metadata("/proc/self").expect("/proc/self").uid()
}

/// Whether the tests run as root (effective uid 0).
pub fn running_as_root() -> bool {
    own_uid() == 0
}

/// A prerequisite a test cannot do without. Where it is missing the test
/// says so and passes, except in CI (`CI` set), where it fails: CI must
/// run every attacker's test.
pub fn prerequisite(what: &str, met: bool) -> bool {
    if !met {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must be able to {what}"
        );
        skipped(&format!("cannot {what}"));
    }
    met
}

/// Says that a test passes here without doing its work, and why: on
/// stderr, which cargo's capture hides, and in the file the workspace's
/// test runner (`tests/run-telling-skips`) says back once the test
/// binary ends.
pub fn skipped(why: &str) {
    eprintln!("skipped: {why}");
    let Some(file) = std::env::var_os("CUDACKPT_TEST_SKIPS") else {
        return;
    };
    // One write of one line: tests run side by side.
    let line = format!("{why}\n");
    if let Ok(mut file) = fs::OpenOptions::new().append(true).open(file) {
        let _ = std::io::Write::write_all(&mut file, line.as_bytes());
    }
}

/// A real cgroup, made for one test in this host's cgroup v2 hierarchy
/// (or, where that cannot be written, the v1 `pids` one) and removed on
/// drop, its processes moved back to the root first.
pub struct RealCgroup {
    pub dir: PathBuf,
    root: PathBuf,
}

impl RealCgroup {
    /// A fresh cgroup; `None`, with the reason said, where none can be
    /// made (not root, or no writable hierarchy): [`prerequisite`] rules.
    pub fn new() -> Option<RealCgroup> {
        let made = running_as_root()
            .then(writable_cgroup_roots)
            .into_iter()
            .flatten()
            .find_map(RealCgroup::under);
        prerequisite(
            "make a cgroup (needs root and a cgroup hierarchy)",
            made.is_some(),
        );
        made
    }

    /// A fresh cgroup under the root of the hierarchy mounted at `root`;
    /// `None` where it cannot be made (the caller says why).
    pub fn under(root: PathBuf) -> Option<RealCgroup> {
        static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let nth = MADE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = root.join(format!("cudackpt-test-{}-{nth}", std::process::id()));
        fs::create_dir(&dir).ok()?;
        Some(RealCgroup { dir, root })
    }

    /// A child cgroup, removed with this one.
    pub fn child(&self, name: &str) -> PathBuf {
        let dir = self.dir.join(name);
        fs::create_dir(&dir).expect("a child cgroup");
        dir
    }

    /// Moves `pid` into the cgroup at `dir` (this one or a child).
    pub fn add(&self, dir: &Path, pid: i32) {
        fs::write(dir.join("cgroup.procs"), pid.to_string()).expect("join the cgroup");
    }
}

/// The cgroup hierarchies mounted whole (root `/`) where tests may make
/// cgroups: v2 first, then v1 `pids`.
fn writable_cgroup_roots() -> Vec<PathBuf> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut roots: Vec<(bool, PathBuf)> = cudackpt::internal::mounts(&mountinfo)
        .filter_map(|m| {
            let options = || m.options.split(',');
            let v2 = m.fstype == "cgroup2";
            let pids = m.fstype == "cgroup" && options().any(|o| o == "pids");
            (m.root == "/" && (v2 || pids) && !options().any(|o| o == "ro"))
                .then(|| (!v2, PathBuf::from(m.point)))
        })
        .collect();
    roots.sort();
    roots.into_iter().map(|(_, point)| point).collect()
}

impl Drop for RealCgroup {
    fn drop(&mut self) {
        let mut dirs: Vec<PathBuf> = walk_dirs(&self.dir);
        // Deepest first: a cgroup is removed only once it is empty.
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for dir in dirs {
            let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines() {
                let _ = fs::write(self.root.join("cgroup.procs"), pid);
            }
            let _ = fs::remove_dir(&dir);
        }
    }
}

/// `dir` and every directory below it.
fn walk_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut found = vec![dir.to_path_buf()];
    let mut next = 0;
    while next < found.len() {
        if let Ok(entries) = fs::read_dir(&found[next]) {
            found.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
        next += 1;
    }
    found
}

/// Whether the tests may act on any process: root or CAP_SYS_PTRACE (what
/// `doctor` checks).
pub fn privileged() -> bool {
    let status = fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let cap_eff = status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    running_as_root() || cap_eff & (1 << 19) != 0
}

/// Polls `condition` until it holds, panicking with `what` after 10 s.
pub fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(2));
    }
}

/// One line of the fake's calls.log: `<op> <pid> <code>[ map=...]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub op: String,
    pub pid: i32,
    pub code: i32,
    pub map: Option<String>,
}

impl Call {
    fn parse(line: &str) -> Call {
        let mut fields = line.split(' ');
        let mut next = || {
            fields
                .next()
                .unwrap_or_else(|| panic!("short calls.log line {line:?}"))
        };
        let op = next().to_string();
        let pid = next().parse().expect("calls.log pid");
        let code = next().parse().expect("calls.log code");
        let map = fields.next().map(|m| {
            m.strip_prefix("map=")
                .unwrap_or_else(|| panic!("odd calls.log line {line:?}"))
                .to_string()
        });
        Call { op, pid, code, map }
    }

    /// `op code`, the form most assertions compare.
    pub fn short(&self) -> String {
        format!("{} {}", self.op, self.code)
    }
}

/// The `op code` forms of some calls.
pub fn shorts(calls: &[Call]) -> Vec<String> {
    calls.iter().map(Call::short).collect()
}

/// A child process a test started, killed and reaped when dropped unless
/// the test waited for it: a failing test leaves nothing running, and
/// nothing holding the test runner's output pipe.
pub struct Guard(Option<Child>);

/// `spawn_guarded`: `spawn` whose child is a [`Guard`].
pub trait SpawnGuarded {
    fn spawn_guarded(&mut self) -> Guard;
}

impl SpawnGuarded for StdCommand {
    fn spawn_guarded(&mut self) -> Guard {
        let child = self
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {self:?}: {e}"));
        Guard(Some(child))
    }
}

impl Guard {
    /// Waits for it and collects its output (it is then not killed).
    pub fn wait_with_output(mut self) -> std::io::Result<Output> {
        self.0.take().expect("a child").wait_with_output()
    }
}

impl std::ops::Deref for Guard {
    type Target = Child;
    fn deref(&self) -> &Child {
        self.0.as_ref().expect("a child")
    }
}

impl std::ops::DerefMut for Guard {
    fn deref_mut(&mut self) -> &mut Child {
        self.0.as_mut().expect("a child")
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A spawned target process, killed and reaped on drop.
pub struct Target {
    child: Child,
    pub pid: i32,
}

impl Target {
    /// The PID as a command-line argument.
    pub fn arg(&self) -> String {
        self.pid.to_string()
    }

    /// The ids of this process's threads, the main thread included.
    pub fn threads(&self) -> Vec<i32> {
        let mut tids: Vec<i32> = fs::read_dir(format!("/proc/{}/task", self.pid))
            .expect("/proc/PID/task")
            .map(|e| {
                e.expect("task entry")
                    .file_name()
                    .to_string_lossy()
                    .parse()
                    .expect("tid")
            })
            .collect();
        tids.sort_unstable();
        tids
    }

    /// Kills the process and leaves it unreaped: a zombie until drop.
    pub fn kill_leaving_zombie(&mut self) {
        self.child.kill().expect("kill target");
        let pid = self.pid;
        wait_until("the target to become a zombie", || {
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|s| s.starts_with(" Z")))
        });
    }

    /// Kills and reaps the process; its PID then names no process.
    pub fn kill_and_reap(mut self) -> i32 {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.pid
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a member of a [`Tree`] is, so that the tree waits until it is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Member {
    /// `LD_PRELOAD=$CUDA sleep ...`: ready once its maps show the fake.
    Cuda,
    /// `sleep ...` without the driver: ready once it runs `sleep`.
    Plain,
    /// Anything else (an intermediate shell): ready once recorded.
    Shell,
}

/// A process tree started by [`Fixture::tree`]; its whole process group is
/// killed on drop.
pub struct Tree {
    root: Target,
    members: Vec<(String, i32)>,
}

impl Tree {
    /// The root shell's PID.
    pub fn root(&self) -> i32 {
        self.root.pid
    }

    /// The PID of the member recorded as `name`.
    pub fn pid(&self, name: &str) -> i32 {
        self.members
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, pid)| *pid)
            .unwrap_or_else(|| panic!("no tree member {name:?}: {:?}", self.members))
    }

    /// Sends `signal` (a name such as `STOP`) to every process of the tree
    /// (its process group).
    pub fn signal_all(&self, signal: &str) {
        send_signal(-self.root.pid, signal);
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        // The group's id is the root's PID; SIGKILL also ends stopped members.
        let _ = StdCommand::new("sh")
            .args(["-c", &format!("kill -KILL -{}", self.root.pid)])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The names of a process's threads, from /proc (none once it is gone).
pub fn thread_names(pid: i32) -> Vec<String> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .filter_map(|task| fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_string())
        .collect()
}

/// Sends `signal` (a name such as `STOP`) to `pid` (a negative PID names a
/// process group).
pub fn send_signal(pid: i32, signal: &str) {
    let status = StdCommand::new("sh")
        .args(["-c", &format!("kill -{signal} {pid}")])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid} failed");
}

/// The state letter of a process (field 3 of `/proc/PID/stat`: `R`, `S`,
/// `T`, `Z`...), `None` when it is gone.
pub fn proc_state(pid: i32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')').next()?.trim_start().chars().next()
}

/// The PIDs of running `criu-hook --resume-when-thawed` waiters that wait
/// for any of `pids`.
pub fn waiters_for(pids: &[i32]) -> Vec<i32> {
    let wanted: Vec<String> = pids.iter().map(ToString::to_string).collect();
    fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|entry| {
            let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args: Vec<String> = cmdline
                .split(|&b| b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let flag = args.iter().position(|a| a == "--resume-when-thawed")?;
            // Each is PID@START.
            args[flag + 1..]
                .iter()
                .any(|a| wanted.iter().any(|w| a.split('@').next() == Some(w)))
                .then_some(pid)
        })
        .filter(|&pid| proc_state(pid).is_some_and(|s| s != 'Z'))
        .collect()
}

/// One test's world: its own fake-driver state directory, its devices, and
/// a way to run cudackpt against the fake.
pub struct Fixture {
    dir: tempfile::TempDir,
    devices: Option<String>,
    /// Whether the host shows its GPUs the way the kernel driver does
    /// (`/proc/driver/nvidia/gpus`), as every host with the driver does.
    kernel_gpus: bool,
    /// Whether cudackpt finds NVML: the fake, copied as
    /// `libnvidia-ml.so.1` into a directory on its library path.
    nvml: bool,
    /// Whether cudackpt (and the fake's `oom_kill`) read a cgroup tree under
    /// the fixture instead of /sys/fs/cgroup.
    cgroup_tree: bool,
    /// The fake libcuda copied where every user can read it, once a test
    /// runs cudackpt as another user (the checkout may be private: a clone
    /// under a 0700 directory).
    world_fake: OnceLock<PathBuf>,
    /// Kills what the test left running, when the fixture goes.
    _left_running: LeftRunning,
}

/// A test is over when its fixture goes: any process still running with
/// the fixture's state directory in its environment (a job a test started,
/// or that CRIU restored for it, and did not end) is killed then, and said
/// on stderr, so no test leaves one behind whatever its path through.
struct LeftRunning(PathBuf);

impl Drop for LeftRunning {
    fn drop(&mut self) {
        let mark = format!("FAKE_CUDA_STATE_DIR={}", self.0.display());
        let me = std::process::id().to_string();
        for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
            let pid = entry.file_name().to_string_lossy().into_owned();
            if pid == me || !pid.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let ours = fs::read(entry.path().join("environ"))
                .is_ok_and(|environ| environ.split(|b| *b == 0).any(|e| e == mark.as_bytes()));
            if ours {
                let comm = fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
                eprintln!(
                    "the fixture's end kills PID {pid} ({}), left running",
                    comm.trim()
                );
                // Gone already is as good: kill's complaint is no news.
                let _ = StdCommand::new("kill")
                    .args(["-9", &pid])
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
}

impl Fixture {
    pub fn new() -> Fixture {
        // Build (or find) the fake before anything else needs it.
        fake_libcuda();
        let dir = tempfile::Builder::new()
            .prefix("cudackpt-test-")
            .tempdir()
            .expect("tempdir");
        Fixture {
            _left_running: LeftRunning(dir.path().to_path_buf()),
            dir,
            devices: None,
            kernel_gpus: true,
            nvml: false,
            cgroup_tree: false,
            world_fake: OnceLock::new(),
        }
    }

    /// This fixture, with NVML on the host, as every host with NVIDIA's
    /// driver has: the fake NVML, which lists the processes given to
    /// [`Fixture::set_footprints`]. Without it, every checkpoint says that
    /// host memory could not be weighed.
    pub fn with_nvml(self) -> Fixture {
        let dir = self.dir().join("nvml-lib");
        fs::create_dir_all(&dir).expect("a library directory");
        fs::copy(fake_libcuda(), dir.join("libnvidia-ml.so.1")).expect("copy the fake as NVML");
        Fixture { nvml: true, ..self }
    }

    /// What the fake NVML says each process holds on the first GPU (MiB).
    pub fn set_footprints(&self, footprints: &[(i32, u64)]) {
        let lines: Vec<String> = footprints
            .iter()
            .map(|(pid, mib)| format!("{pid}:{mib}\n"))
            .collect();
        fs::write(self.dir().join("nvml-processes"), lines.concat()).expect("nvml-processes");
    }

    /// This fixture, with a cgroup v2 tree of its own standing in for
    /// /sys/fs/cgroup (see [`Fixture::cgroup_of`]).
    pub fn with_cgroup_tree(self) -> Fixture {
        fs::create_dir_all(self.cgroup_root()).expect("a cgroup root");
        Fixture {
            cgroup_tree: true,
            ..self
        }
    }

    fn cgroup_root(&self) -> PathBuf {
        self.dir().join("cgroup")
    }

    /// The directory that stands for `pid`'s cgroup in the fixture's tree
    /// (the path /proc/PID/cgroup names, made there), with `memory.events`
    /// counting no OOM kill yet and `memory.current` at `current_mib`.
    pub fn cgroup_of(&self, pid: i32, current_mib: u64) -> PathBuf {
        let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("/proc/PID/cgroup");
        let name = text
            .lines()
            .find_map(|line| line.strip_prefix("0::"))
            .expect("a cgroup v2 line");
        let dir = self.cgroup_root().join(name.trim_start_matches('/'));
        fs::create_dir_all(&dir).expect("the cgroup directory");
        fs::write(dir.join("memory.events"), "oom 0\noom_kill 0\n").expect("memory.events");
        fs::write(
            dir.join("memory.current"),
            format!("{}\n", current_mib << 20),
        )
        .expect("memory.current");
        dir
    }

    /// A fixture whose fake driver exposes these devices (`NAME:MIB,...`).
    pub fn with_devices(devices: &str) -> Fixture {
        Fixture {
            devices: Some(devices.to_string()),
            ..Fixture::new()
        }
    }

    /// A fixture whose host has no kernel driver listing of its GPUs (a
    /// container without /proc/driver/nvidia): only the CUDA driver lists
    /// them.
    pub fn without_kernel_gpus() -> Fixture {
        Fixture {
            kernel_gpus: false,
            ..Fixture::new()
        }
    }

    /// A stand-in for `/proc/driver/nvidia/gpus` listing these devices
    /// (`NAME:MIB,...`, the fake driver's format), as the kernel driver of
    /// a host with them would: one `<bus id>/information` file per GPU,
    /// with the UUIDs the fake driver gives them.
    pub fn kernel_gpus_dir(&self, devices: &str) -> PathBuf {
        let dir = self
            .dir()
            .join(format!("driver-gpus-{:x}", hash_text(devices)));
        for (i, entry) in devices.split(',').enumerate() {
            let model = entry.rsplit_once(':').map_or(entry, |(name, _)| name);
            let gpu = dir.join(format!("0000:{:02x}:00.0", 0x10 + i));
            fs::create_dir_all(&gpu).expect("a fake kernel GPU directory");
            let i = u8::try_from(i).expect("few devices");
            fs::write(
                gpu.join("information"),
                format!(
                    "Model: \t\t {model}\nIRQ:   \t\t 42\nGPU UUID: \t GPU-{}\nBus Type: \t PCIe\n",
                    fake_uuid(i)
                ),
            )
            .expect("a fake information file");
        }
        dir
    }

    /// How many times the fake driver's `cuInit` was called since the
    /// fixture began, by any process.
    pub fn init_calls(&self) -> usize {
        fs::read_to_string(self.dir().join("init.log"))
            .map(|log| log.lines().count())
            .unwrap_or(0)
    }

    /// The fake driver's state directory (also a scratch directory).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn spawn(&self, program: &OsStr, args: &[&str], cuda: bool) -> Target {
        let mut command = StdCommand::new(program);
        command
            .args(args)
            .env("FAKE_CUDA_STATE_DIR", self.dir())
            .env_remove("FAKE_CUDA_INJECT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if cuda {
            command.env("LD_PRELOAD", fake_libcuda());
        } else {
            command.env_remove("LD_PRELOAD");
        }
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {program:?}: {e}"));
        let pid = i32::try_from(child.id()).expect("pid fits i32");
        let target = Target { child, pid };
        let fake = fake_libcuda().to_string_lossy().into_owned();
        let expected = Path::new(program)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        wait_until("the target to start", || {
            if cuda {
                fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains(&fake))
            } else {
                fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|comm| expected.starts_with(comm.trim_end()))
            }
        });
        target
    }

    /// A CUDA process running `program` (with the fake preloaded).
    pub fn cuda_program(&self, program: &Path, args: &[&str]) -> Target {
        self.spawn(program.as_os_str(), args, true)
    }

    /// A CUDA process: `sleep 600` with the fake libcuda preloaded, returned
    /// once its maps show the fake.
    pub fn cuda_target(&self) -> Target {
        self.spawn(OsStr::new("sleep"), &["600"], true)
    }

    /// A live process that never loaded the driver.
    pub fn plain_target(&self) -> Target {
        self.spawn(OsStr::new("sleep"), &["600"], false)
    }

    /// A CUDA process with two threads besides its main one.
    pub fn threaded_cuda_target(&self) -> Target {
        let program = self.compile_program(
            "threads",
            "#include <pthread.h>\n#include <unistd.h>\n\
             static void *idle(void *arg) { (void)arg; for (;;) pause(); return 0; }\n\
             int main(void) { pthread_t t; for (int i = 0; i < 2; i++) pthread_create(&t, 0, idle, 0);\n\
             for (;;) pause(); }\n",
        );
        let target = self.spawn(program.as_os_str(), &[], true);
        wait_until("the target's threads", || target.threads().len() == 3);
        target
    }

    fn cc(&self, args: &[&str], source_name: &str, source: &str, out: &Path) {
        let source_path = self.dir().join(source_name);
        fs::write(&source_path, source).expect("write C source");
        let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
        let output = StdCommand::new(&cc)
            .args(args)
            .arg("-o")
            .arg(out)
            .arg(&source_path)
            .output()
            .unwrap_or_else(|e| panic!("could not run the C compiler {cc:?}: {e}"));
        assert!(
            output.status.success(),
            "{cc:?} failed on {source_name}:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// The fake libcuda copied into the fixture directory as
    /// `libnccl.so.2`: a process that preloads it maps a file named like
    /// NCCL's library.
    pub fn nccl_library(&self) -> PathBuf {
        let path = self.dir().join("libnccl.so.2");
        if !path.exists() {
            fs::copy(fake_libcuda(), &path).expect("copy the fake as libnccl.so.2");
        }
        path
    }

    /// A CUDA process that also has "NCCL" (see [`Fixture::nccl_library`])
    /// mapped, returned once its maps show both.
    pub fn nccl_cuda_target(&self) -> Target {
        self.nccl_cuda_target_with(&[])
    }

    /// [`Fixture::nccl_cuda_target`] with these environment variables (a
    /// launcher's `WORLD_SIZE`, NCCL's transport switches).
    pub fn nccl_cuda_target_with(&self, env: &[(&str, &str)]) -> Target {
        let nccl = self.nccl_library();
        let preload = format!("{}:{}", fake_libcuda().display(), nccl.display());
        let child = StdCommand::new("sleep")
            .arg("600")
            .envs(env.iter().copied())
            .env("FAKE_CUDA_STATE_DIR", self.dir())
            .env("LD_PRELOAD", preload)
            .env_remove("FAKE_CUDA_INJECT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start sleep");
        let pid = i32::try_from(child.id()).expect("pid fits i32");
        let target = Target { child, pid };
        let (fake, nccl) = (
            fake_libcuda().to_string_lossy().into_owned(),
            nccl.to_string_lossy().into_owned(),
        );
        wait_until("the NCCL target to start", || {
            fs::read_to_string(format!("/proc/{pid}/maps"))
                .is_ok_and(|m| m.contains(&fake) && m.contains(&nccl))
        });
        target
    }

    /// A process tree: `sh -c SCRIPT` in a process group of its own, every
    /// process of which is killed on drop. The script gets `$CUDA` (an
    /// `LD_PRELOAD` value that makes a CUDA process) and `$PIDS` (a file
    /// where it records `NAME PID` lines, e.g. `echo "a $!" >> "$PIDS"`),
    /// and should end in `wait`. Returns once every member is recorded and
    /// ready: a CUDA member maps the fake, a plain one runs `sleep`.
    pub fn tree(&self, script: &str, members: &[(&str, Member)]) -> Tree {
        use std::os::unix::process::CommandExt;
        use std::sync::atomic::{AtomicUsize, Ordering};
        static TREES: AtomicUsize = AtomicUsize::new(0);
        let pids_file = self.dir().join(format!(
            "tree-{}.pids",
            TREES.fetch_add(1, Ordering::Relaxed)
        ));
        let child = StdCommand::new("sh")
            .args(["-c", script])
            .env("FAKE_CUDA_STATE_DIR", self.dir())
            .env("CUDA", fake_libcuda())
            .env("PIDS", &pids_file)
            .env_remove("LD_PRELOAD")
            .env_remove("FAKE_CUDA_INJECT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start the tree's root shell");
        let pid = i32::try_from(child.id()).expect("pid fits i32");
        let mut tree = Tree {
            root: Target { child, pid },
            members: Vec::new(),
        };
        let recorded = |name: &str| -> Option<i32> {
            fs::read_to_string(&pids_file)
                .ok()?
                .lines()
                .find_map(|line| {
                    let (n, p) = line.split_once(' ')?;
                    (n == name).then(|| p.trim().parse().ok())?
                })
        };
        let fake = fake_libcuda().to_string_lossy().into_owned();
        for &(name, member) in members {
            let mut found = None;
            wait_until(&format!("tree member {name} to be recorded"), || {
                found = recorded(name);
                found.is_some()
            });
            let member_pid = found.expect("recorded");
            wait_until(
                &format!("tree member {name} to be ready"),
                || match member {
                    Member::Cuda => fs::read_to_string(format!("/proc/{member_pid}/maps"))
                        .is_ok_and(|m| m.contains(&fake)),
                    Member::Plain => fs::read_to_string(format!("/proc/{member_pid}/comm"))
                        .is_ok_and(|comm| comm.trim_end() == "sleep"),
                    Member::Shell => true,
                },
            );
            tree.members.push((name.to_string(), member_pid));
        }
        tree
    }

    /// The driver calls that changed state since the log was last taken,
    /// as `op pid` (queries left out).
    pub fn state_changes(&self) -> Vec<String> {
        self.take_calls()
            .iter()
            .filter(|c| c.op != "get_state" && c.op != "restore_tid")
            .map(|c| c.short())
            .collect()
    }

    /// The intent records left in the fixture's run directory.
    pub fn intents(&self) -> Vec<PathBuf> {
        fs::read_dir(self.dir().join("records").join("intents"))
            .into_iter()
            .flatten()
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect()
    }

    /// A fake rank speaking the drain protocol (tests/fixtures/drain-target), in
    /// `mode` (ack, keep, ignore, die, stuck-rebuild), with this
    /// environment and the fake preloaded; returned once it is ready, with
    /// the file where it writes what it does.
    pub fn drain_target(&self, mode: &str, env: &[(&str, &str)]) -> (Target, PathBuf) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static TARGETS: AtomicUsize = AtomicUsize::new(0);
        let program = self.dir().join("drain_target");
        if !program.exists() {
            let source = workspace().join("tests/fixtures/drain-target/drain_target.c");
            let include = workspace().join("clients/c");
            let output = StdCommand::new(std::env::var_os("CC").unwrap_or_else(|| "cc".into()))
                .args(["-pthread", "-Wall", "-Werror", "-I"])
                .arg(&include)
                .arg("-o")
                .arg(&program)
                .arg(&source)
                .output()
                .expect("run the C compiler");
            assert!(
                output.status.success(),
                "the drain target does not compile:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let events = self.dir().join(format!(
            "drain-{}.events",
            TARGETS.fetch_add(1, Ordering::Relaxed)
        ));
        let child = StdCommand::new(&program)
            .arg(mode)
            .arg(&events)
            .envs(env.iter().copied())
            .env("FAKE_CUDA_STATE_DIR", self.dir())
            .env("LD_PRELOAD", fake_libcuda())
            .env_remove("FAKE_CUDA_INJECT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the drain target");
        let pid = i32::try_from(child.id()).expect("pid fits i32");
        let target = Target { child, pid };
        wait_until("the drain target to be ready", || {
            fs::read_to_string(&events).is_ok_and(|e| e.contains("ready"))
        });
        (target, events)
    }

    /// Compiles a C program into the fixture directory.
    pub fn compile_program(&self, name: &str, source: &str) -> PathBuf {
        let out = self.dir().join(name);
        self.cc(&["-pthread"], &format!("{name}.c"), source, &out);
        out
    }

    /// Compiles a C shared library into the fixture directory.
    pub fn compile_library(&self, name: &str, source: &str) -> PathBuf {
        let out = self.dir().join(format!("{name}.so"));
        self.cc(&["-shared", "-fPIC"], &format!("{name}.c"), source, &out);
        out
    }

    /// The environment every cudackpt run gets: the fake as the driver, this
    /// fixture's state directory, and nothing from the caller that changes
    /// output (logs, colour, terminal width, injected failures).
    /// [`Fixture::configure`] for a command that runs cudackpt itself (a
    /// shell in a namespace of its own).
    pub fn configure_for(&self, command: &mut StdCommand) {
        self.configure(command);
    }

    fn configure(&self, command: &mut StdCommand) {
        command
            .env("CUDACKPT_LIBCUDA", fake_libcuda())
            // The fake passes for NVIDIA's driver, so the tests see what a
            // real host sees (a missing NVML warned of); the newcomer's
            // path, without it, is tested apart (`host_memory.rs`).
            .env("FAKE_CUDA_AS_DRIVER", "1")
            .env("FAKE_CUDA_STATE_DIR", self.dir())
            .env("CUDACKPT_RECORD_DIR", self.dir().join("records"))
            .env("CUDACKPT_LOCK_DIR", self.dir().join("locks"))
            .env_remove("RUST_LOG")
            .env_remove("NO_COLOR")
            .env_remove("CLICOLOR_FORCE")
            .env_remove("COLUMNS")
            .env_remove("FAKE_CUDA_INJECT")
            .env_remove("FAKE_CUDA_DRIVER_VERSION")
            .env_remove("CRTOOLS_SCRIPT_ACTION")
            .env_remove("LD_PRELOAD")
            // A `sudo cargo test` would otherwise make every run one that
            // acts for another user.
            .env_remove("SUDO_UID")
            .env_remove("PKEXEC_UID")
            .env_remove("DOAS_USER")
            // Users' runtime directories (/run/user/UID), which root reads
            // for records of their processes: the fixture's own.
            .env(
                "CUDACKPT_DEBUG_USER_RUNTIME_BASE",
                self.dir().join("run-user"),
            )
            .stdin(Stdio::null());
        match &self.devices {
            Some(devices) => command.env("FAKE_CUDA_DEVICES", devices),
            None => command.env_remove("FAKE_CUDA_DEVICES"),
        };
        if self.nvml {
            command.env("LD_LIBRARY_PATH", self.dir().join("nvml-lib"));
        } else {
            command.env_remove("LD_LIBRARY_PATH");
        }
        if self.cgroup_tree {
            command
                .env("CUDACKPT_DEBUG_CGROUP_TREE", self.cgroup_root())
                .env("FAKE_CUDA_CGROUP_ROOT", self.cgroup_root());
        } else {
            command
                .env_remove("CUDACKPT_DEBUG_CGROUP_TREE")
                .env_remove("CUDACKPT_CGROUP_ROOT")
                .env_remove("FAKE_CUDA_CGROUP_ROOT");
        }
        if self.kernel_gpus {
            let devices = self.devices.as_deref().unwrap_or(FAKE_DEFAULT_DEVICES);
            command.env(
                "CUDACKPT_DEBUG_DRIVER_GPUS_DIR",
                self.kernel_gpus_dir(devices),
            );
        } else {
            // A directory that does not exist: no kernel listing.
            command.env(
                "CUDACKPT_DEBUG_DRIVER_GPUS_DIR",
                self.dir().join("no-driver-gpus"),
            );
        }
    }

    /// cudackpt with these arguments, as a std command (for what assert_cmd
    /// cannot do: another uid, a pipe closed early, a run in the background).
    pub fn std_command(&self, args: &[&str]) -> StdCommand {
        self.command_for(&cudackpt_bin(), args)
    }

    /// Like [`Fixture::std_command`], for a copy of the binary at `program`.
    pub fn command_for(&self, program: &Path, args: &[&str]) -> StdCommand {
        let mut command = StdCommand::new(program);
        command.args(args);
        self.configure(&mut command);
        command
    }

    /// cudackpt with these arguments, wired to the fake. Add
    /// `.env("FAKE_CUDA_INJECT", ...)` for failures.
    pub fn cudackpt(&self, args: &[&str]) -> assert_cmd::Command {
        assert_cmd::Command::from_std(self.std_command(args))
    }

    /// Runs `cudackpt --json ARGS`, checks the exit status and that stdout
    /// holds exactly one JSON document, and parses it.
    /// The document is checked against the contract's invariants.
    pub fn json<T: Document>(&self, args: &[&str], code: i32) -> T {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        check_document(&mut self.cudackpt(&full), code)
    }

    /// [`Fixture::json`] with `FAKE_CUDA_INJECT` set to `rules`.
    pub fn json_with_inject<T: Document>(&self, args: &[&str], rules: &str, code: i32) -> T {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        check_document(self.cudackpt(&full).env("FAKE_CUDA_INJECT", rules), code)
    }

    /// Every call in calls.log, oldest first.
    pub fn calls(&self) -> Vec<Call> {
        match fs::read_to_string(self.dir().join("calls.log")) {
            Ok(text) => text.lines().map(Call::parse).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => panic!("calls.log: {e}"),
        }
    }

    /// Every call in calls.log, which is then emptied, so that the next
    /// reader sees only the calls of the commands run in between.
    pub fn take_calls(&self) -> Vec<Call> {
        let calls = self.calls();
        match fs::remove_file(self.dir().join("calls.log")) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("calls.log: {e}"),
        }
        calls
    }

    /// Asserts that no driver call on any process was made since the log was
    /// last taken.
    pub fn assert_no_calls(&self, what: &str) {
        let calls = self.take_calls();
        assert!(
            calls.is_empty(),
            "{what}: expected no driver call, calls.log has {calls:?}"
        );
    }

    /// The fake's record of a process: `(state, device)`; a process without
    /// a state file is running on device 0. The fake replaces a record whole
    /// (a rename), so this reads one whole whenever it is read, even while a
    /// detached cudackpt changes it: anything less is the fake's bug.
    pub fn fake_record(&self, pid: i32) -> (String, u64) {
        match fs::read_to_string(self.dir().join(format!("{pid}.json"))) {
            Ok(text) => {
                let value: serde_json::Value =
                    serde_json::from_str(&text).expect("fake state file is JSON");
                (
                    value["state"].as_str().expect("state").to_string(),
                    value["device"].as_u64().unwrap_or(0),
                )
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => ("running".to_string(), 0),
            Err(e) => panic!("fake state file of {pid}: {e}"),
        }
    }

    /// The fake's record of a process's state.
    pub fn fake_state(&self, pid: i32) -> String {
        self.fake_record(pid).0
    }

    /// The state `cudackpt --json state PID` reports, checked against the
    /// fake's own record. Leaves calls.log as it was before.
    pub fn state_of(&self, target: &Target) -> String {
        let before = self.calls();
        let doc: crate::wire::ProcessCommandDoc = self.json(&["state", &target.arg()], 0);
        let reported = doc.only(target.pid).state.as_str().to_string();
        assert_eq!(
            reported,
            self.fake_state(target.pid),
            "cudackpt and the fake disagree on the state of {}",
            target.pid
        );
        // Put the log back so that this check is invisible to the test.
        let log = before
            .iter()
            .map(|c| {
                let map = c
                    .map
                    .as_ref()
                    .map_or(String::new(), |m| format!(" map={m}"));
                format!("{} {} {}{map}\n", c.op, c.pid, c.code)
            })
            .collect::<String>();
        if before.is_empty() {
            let _ = fs::remove_file(self.dir().join("calls.log"));
        } else {
            fs::write(self.dir().join("calls.log"), log).expect("restore calls.log");
        }
        reported
    }

    /// Puts a process in `state` through cudackpt itself, and empties the log.
    pub fn put_in(&self, target: &Target, state: &str) {
        let pid = target.arg();
        match state {
            "running" => {}
            "locked" => {
                self.cudackpt(&["lock", &pid]).assert().success();
            }
            "checkpointed" => {
                self.cudackpt(&["suspend", &pid]).assert().success();
            }
            other => panic!("cannot put a process in {other}"),
        }
        assert_eq!(self.fake_state(target.pid), state);
        self.take_calls();
    }

    /// The world-readable copy of the fake libcuda that
    /// [`Fixture::world_runnable_cudackpt`] made, for processes and
    /// cudackpt runs of another user (give it as `LD_PRELOAD` and
    /// `CUDACKPT_LIBCUDA`: discovery knows a CUDA process by the library
    /// path it maps).
    pub fn world_fake(&self) -> PathBuf {
        self.world_fake
            .get()
            .cloned()
            .expect("world_runnable_cudackpt copies the fake first")
    }

    /// A directory every user may write (0777), where the fake driver keeps
    /// its state for root's and another user's cudackpt alike.
    pub fn shared_state(&self) -> PathBuf {
        let state = self.dir().join("shared-state");
        fs::create_dir_all(&state).expect("shared state");
        fs::set_permissions(&state, fs::Permissions::from_mode(0o777)).expect("chmod");
        state
    }

    /// A fake CUDA process (`sleep 600` with the world-readable fake
    /// preloaded, see [`Fixture::world_runnable_cudackpt`]) keeping its
    /// state in `state`, run as `uid` (`None`: as this test), returned once
    /// it maps the fake.
    pub fn world_cuda_target(&self, state: &Path, uid: Option<u32>) -> Guard {
        use std::os::unix::process::CommandExt;
        let fake = self.world_fake();
        let mut command = StdCommand::new("sleep");
        command
            .arg("600")
            .env("LD_PRELOAD", &fake)
            .env("FAKE_CUDA_STATE_DIR", state);
        if let Some(uid) = uid {
            command.uid(uid).gid(uid);
        }
        let target = command.spawn_guarded();
        let pid = target.id();
        let fake = fake.to_string_lossy().into_owned();
        wait_until("the target to map the fake", || {
            fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| m.contains(&fake))
        });
        target
    }

    /// The world-runnable copy `bin` run as nobody, with nothing of this
    /// environment but the fake driver, its `state`, and `env`.
    pub fn run_as_nobody(
        &self,
        bin: &Path,
        args: &[&str],
        state: &Path,
        env: &[(&str, &OsStr)],
    ) -> Output {
        use std::os::unix::process::CommandExt;
        StdCommand::new(bin)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("CUDACKPT_LIBCUDA", self.world_fake())
            .env("FAKE_CUDA_STATE_DIR", state)
            .envs(env.iter().copied())
            .current_dir("/")
            .uid(NOBODY)
            .gid(NOBODY)
            .output()
            .expect("cudackpt as nobody")
    }

    /// What a test of another user's cudackpt starts from: the binary
    /// every user may run, the fake's shared state, and a CUDA process of
    /// nobody's own; `None` (said as a missing prerequisite) unless root.
    pub fn nobody_with_own_target(&self) -> Option<(PathBuf, PathBuf, Guard)> {
        if !running_as_root() {
            prerequisite("run a process as another user (needs root)", false);
            return None;
        }
        let bin = self.world_runnable_cudackpt();
        let state = self.shared_state();
        let target = self.world_cuda_target(&state, Some(NOBODY));
        Some((bin, state, target))
    }

    /// Copies the cudackpt binary and the fake libcuda into a directory
    /// every user can enter, for runs under another uid (the build
    /// directory may be private, as in a clone under a 0700 directory).
    pub fn world_runnable_cudackpt(&self) -> PathBuf {
        let dir = self.dir().join("bin");
        fs::create_dir_all(&dir).expect("bin dir");
        let bin = dir.join("cudackpt");
        fs::copy(cudackpt_bin(), &bin).expect("copy cudackpt");
        let fake = dir.join("libfake_libcuda.so");
        fs::copy(fake_libcuda(), &fake).expect("copy the fake libcuda");
        for path in [self.dir(), dir.as_path(), bin.as_path(), fake.as_path()] {
            fs::set_permissions(path, fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        let _ = self.world_fake.set(fake);
        // A child another test thread forked while the copy was open for
        // writing holds it until that child execs; until then executing the
        // copy fails with ETXTBSY ("text file busy"). Wait that out.
        const TEXT_FILE_BUSY: i32 = 26;
        for _ in 0..100 {
            match StdCommand::new(&bin).arg("--version").output() {
                Err(e) if e.raw_os_error() == Some(TEXT_FILE_BUSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                _ => break,
            }
        }
        bin
    }
}

/// Runs a `--json` command, asserts its exit status, parses its one document
/// and checks the contract's invariants.
pub fn check_document<T: Document>(command: &mut assert_cmd::Command, code: i32) -> T {
    let assert = command.assert().code(code);
    let doc: T = parse_one_document(&assert.get_output().stdout);
    doc.check(code);
    doc
}

/// Parses stdout as exactly one JSON document followed by one newline.
pub fn parse_one_document<T: DeserializeOwned>(stdout: &[u8]) -> T {
    let text = std::str::from_utf8(stdout).expect("stdout is UTF-8");
    let documents: Vec<serde_json::Value> = serde_json::Deserializer::from_str(text)
        .into_iter::<serde_json::Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{text}"));
    assert_eq!(
        documents.len(),
        1,
        "expected exactly one JSON document on stdout:\n{text}"
    );
    assert!(
        text.ends_with("}\n") && text.matches('\n').count() == 1,
        "the document must be one line ending in a newline:\n{text:?}"
    );
    crate::schema_check::validate(&documents[0]);
    serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("stdout breaks the contract ({e}):\n{text}"))
}

/// stdout and stderr as text.
pub fn texts(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The UUID the fake gives device `i`.
/// The fake driver's devices when `FAKE_CUDA_DEVICES` is unset.
pub const FAKE_DEFAULT_DEVICES: &str = "NVIDIA Fake H100:81559";

fn hash_text(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

pub fn fake_uuid(i: u8) -> String {
    format!("fa4e0000-0000-4000-8000-0000000000{i:02x}")
}

/// Snapshot settings that make output deterministic: these PIDs become
/// `[PID]`, or `[PID1]`, `[PID2]`... when there are several, durations
/// `[DURATION]` (`[MS]` in JSON), the fixture directory `[TMP]` and the
/// fake's path `[FAKE]`.
pub fn snapshot_settings(fixture: &Fixture, pids: &[i32]) -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(false);
    // Durations first: a PID's digits may also appear inside one.
    settings.add_filter(r"\d+\.\d+ m?s\b", "[DURATION]");
    settings.add_filter(r#""duration_ms": ?[0-9.e-]+"#, r#""duration_ms": "[MS]""#);
    settings.add_filter(&regex_escape(&fake_libcuda().to_string_lossy()), "[FAKE]");
    settings.add_filter(&regex_escape(&fixture.dir().to_string_lossy()), "[TMP]");
    for (i, pid) in pids.iter().enumerate() {
        let label = if pids.len() == 1 {
            "[PID]".to_string()
        } else {
            format!("[PID{}]", i + 1)
        };
        settings.add_filter(&format!(r"\b{pid}\b"), label);
    }
    settings
}

/// [`snapshot_settings`] for human tables: column padding depends on the
/// PIDs' widths, so every gap between cells becomes two spaces (check the
/// alignment itself with [`assert_aligned`]).
pub fn table_snapshot_settings(fixture: &Fixture, pids: &[i32]) -> insta::Settings {
    let mut settings = snapshot_settings(fixture, pids);
    settings.add_filter(r"(\S)  +", "$1  ");
    settings
}

/// The offsets where the cells of a table line start: the first character,
/// and every character after a gap of two spaces or more.
fn cell_starts(line: &str) -> Vec<usize> {
    let chars: Vec<char> = line.chars().collect();
    (0..chars.len())
        .filter(|&i| {
            chars[i] != ' ' && (i == 0 || (i >= 2 && chars[i - 1] == ' ' && chars[i - 2] == ' '))
        })
        .collect()
}

/// Asserts that every line of a table starts its cells where the header
/// starts its columns.
pub fn assert_aligned(table: &str) {
    let mut lines = table.lines();
    let header = cell_starts(lines.next().expect("a header"));
    for line in lines {
        assert_eq!(cell_starts(line), header, "misaligned table:\n{table}");
    }
}

/// Pretty-prints one JSON document keeping its field order (serde_json's
/// own pretty printer would sort the keys).
pub fn pretty_json(text: &str) -> String {
    let mut out = String::new();
    let mut indent = 0usize;
    let (mut in_string, mut escaped) = (false, false);
    let chars: Vec<char> = text.trim_end().chars().collect();
    let newline = |out: &mut String, indent: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(indent));
    };
    for (i, &c) in chars.iter().enumerate() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' if matches!(chars.get(i + 1), Some('}' | ']')) => out.push(c),
            '{' | '[' => {
                out.push(c);
                indent += 1;
                newline(&mut out, indent);
            }
            '}' | ']' if matches!(chars.get(i.wrapping_sub(1)), Some('{' | '[')) => out.push(c),
            '}' | ']' => {
                indent -= 1;
                newline(&mut out, indent);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, indent);
            }
            ':' => out.push_str(": "),
            c => out.push(c),
        }
    }
    out.push('\n');
    out
}

fn regex_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// `text` without its colour codes (`ESC [ ... m`): what a terminal shows.
pub fn strip_colour(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    let mut in_code = false;
    for c in text.chars() {
        match (in_code, c) {
            (false, '\x1b') => in_code = true,
            (true, 'm') => in_code = false,
            (true, _) => {}
            (false, c) => shown.push(c),
        }
    }
    shown
}

/// The documents people read: the README, the CHANGELOG, the other
/// READMEs, and every Markdown file in docs/ and docs/guide/.
pub fn documents() -> Vec<PathBuf> {
    let root = workspace();
    let mut docs: Vec<PathBuf> = [
        "README.md",
        "CHANGELOG.md",
        "bench/README.md",
        "clients/python/README.md",
        "tests/fixtures/fake-libcuda/README.md",
    ]
    .iter()
    .map(|p| root.join(p))
    .collect();
    for dir in ["docs", "docs/guide"] {
        let mut found: Vec<PathBuf> = fs::read_dir(root.join(dir))
            .expect("a docs directory")
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        found.sort();
        docs.extend(found);
    }
    docs
}
