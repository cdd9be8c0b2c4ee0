//! A root `undump` of images another user brought (SPEC section 14,
//! "Trust"; docs/guide/safety.md, "What undump restores for another
//! user"): CRIU, as root, makes every process and descriptor again, so
//! each test plays nobody (uid 65534) bringing images forged from a root
//! job's as they would write them with `crit` (`support::criu_forge`).
//! Their own job comes back as them; a descriptor only root could make, an
//! image CRIU would read unchecked, a link to root's file where CRIU writes
//! its log, or a manifest whose text starts lines of its own, gets them
//! nothing of root's.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::disk::{alive, criu, document, dumped_and_gone, refusal_message, Orphan};
use crate::support::criu_forge::images_as_user;
use crate::support::{wait_until, Fixture, NOBODY};

/// nobody's home in the fixture (theirs, 0755), the fixture passable to
/// them and the fake driver where they can map it: the path of the fake.
fn users_home(fx: &Fixture) -> (PathBuf, PathBuf) {
    fx.world_runnable_cudackpt();
    let home = fx.dir().join("home");
    std::fs::create_dir(&home).expect("mkdir");
    std::os::unix::fs::chown(&home, Some(NOBODY), Some(NOBODY)).expect("chown");
    (home, fx.world_fake())
}

/// A fake CUDA job run from `/` with the world-readable fake, `program`,
/// as root: one whose images nobody could restore as themselves, once its
/// cores say so.
fn job(fx: &Fixture, fake: &Path, program: &str) -> Orphan {
    let job = Orphan::launch(
        fx,
        &format!(
            "cd / && FAKE_CUDA_IDENTITY=$$-$(date +%s%N) LD_PRELOAD={} setsid {program} </dev/null >/dev/null 2>&1",
            fake.display()
        ),
    );
    let fake = fake.to_string_lossy().into_owned();
    wait_until("the job to map the fake", || {
        std::fs::read_to_string(format!("/proc/{}/maps", job.0)).is_ok_and(|m| m.contains(&fake))
    });
    job
}

/// `cudackpt --json ARGS` with the world-readable fake as the driver.
fn run(fx: &Fixture, args: &[&str]) -> (i32, serde_json::Value) {
    let output = fx
        .std_command(args)
        .env("CUDACKPT_LIBCUDA", fx.world_fake())
        .output()
        .expect("run cudackpt");
    (output.status.code().unwrap_or(-1), document(&output))
}

/// `cudackpt --json undump IMAGES --criu CRIU`.
fn undump(fx: &Fixture, images: &Path, criu: &Path) -> (i32, serde_json::Value) {
    let utf8 = |path: &Path| path.to_str().expect("a UTF-8 path").to_string();
    let (images, criu) = (utf8(images), utf8(criu));
    run(fx, &["--json", "undump", &images, "--criu", &criu])
}

/// `job` dumped by root, gone, and its images forged as nobody's in their
/// home: the forged images' directory.
fn forged(fx: &Fixture, criu: &Path, job: &Orphan, home: &Path) -> PathBuf {
    let roots = fx.dir().join("roots-images");
    let utf8 = |path: &Path| path.to_str().expect("a UTF-8 path").to_string();
    let (to, with, pid) = (utf8(&roots), utf8(criu), job.0.to_string());
    let (code, dumped) = run(fx, &["--json", "dump", "--to", &to, "--criu", &with, &pid]);
    assert_eq!(code, 0, "{dumped:#}");
    wait_until("the dumped job to be gone", || !alive(job.0));
    let theirs = home.join("job1");
    images_as_user(&roots, &theirs, NOBODY);
    theirs
}

/// `Uid:` and `CapEff:` of a process.
fn identity(pid: i32) -> (String, String) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.split_whitespace().next().unwrap_or("").to_string())
            .unwrap_or_default()
    };
    (field("Uid:"), field("CapEff:"))
}

/// The control: nobody's own job, forged as theirs, comes back as them,
/// with no capability.
#[test]
fn a_users_own_images_restore_as_that_user() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let (home, fake) = users_home(&fx);
    let job = job(&fx, &fake, "sleep 600");
    let images = forged(&fx, &criu, &job, &home);
    let (code, undumped) = undump(&fx, &images, &criu);
    assert_eq!(code, 0, "{undumped:#}");
    assert!(alive(job.0));
    assert_eq!(identity(job.0), ("65534".into(), "0000000000000000".into()));
}

/// A program holding what only root could open: a packet socket (it sees
/// the host's traffic), a pipe whose signals go out as root (`F_SETOWN`
/// to its own PID), and a Unix socket bound in a directory only root may
/// write (`dir`).
fn roots_descriptors(fx: &Fixture, dir: &Path) -> PathBuf {
    fx.compile_program(
        "roots-descriptors",
        &format!(
            "#include <arpa/inet.h>\n#include <fcntl.h>\n#include <linux/if_ether.h>\n#include <string.h>\n\
             #include <sys/socket.h>\n#include <sys/un.h>\n#include <unistd.h>\n\
             int main(void) {{\n\
               if (socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL)) < 0) return 1;\n\
               int p[2]; if (pipe(p) || fcntl(p[0], F_SETOWN, getpid())) return 2;\n\
               int u = socket(AF_UNIX, SOCK_STREAM, 0); struct sockaddr_un a = {{ .sun_family = AF_UNIX }};\n\
               strcpy(a.sun_path, \"{}/roots.sock\");\n\
               if (bind(u, (struct sockaddr *)&a, sizeof a) || listen(u, 1)) return 3;\n\
               for (;;) pause(); }}\n",
            dir.display()
        ),
    )
}

/// nobody's images hold a packet socket, a pipe that signals as root and a
/// Unix socket in root's directory. The harm: CRIU itself, as root, gives
/// nobody's restored process a packet socket. cudackpt refuses before any
/// change, naming each, with no driver call; nothing is restored.
#[test]
fn a_users_images_get_no_descriptor_only_root_could_make() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let (home, fake) = users_home(&fx);
    let roots = fx.dir().join("roots-only");
    std::fs::create_dir(&roots).expect("mkdir");
    let program = roots_descriptors(&fx, &roots);
    let job = job(&fx, &fake, &program.display().to_string());
    wait_until("the job to bind", || roots.join("roots.sock").exists());
    let images = forged(&fx, &criu, &job, &home);
    std::fs::remove_file(roots.join("roots.sock")).expect("rm");
    // The harm: CRIU restores nobody's process holding a packet socket.
    let restored = restored_by_criu_alone(&fx, &criu, &images);
    assert_eq!(
        identity(restored),
        ("65534".into(), "0000000000000000".into())
    );
    assert!(
        holds_a_packet_socket(restored),
        "nobody got root's packet socket"
    );
    kill_and_wait(restored);
    std::fs::remove_file(roots.join("roots.sock")).expect("rm");
    // cudackpt: refused before any change, each named.
    fx.take_calls();
    let (code, refused) = undump(&fx, &images, &criu);
    let message = refusal_message(code, &refused, "credentials");
    for said in [
        &format!("of PID {} is a packet socket", job.0),
        "only CAP_NET_RAW may make one",
        "as uid 0 (F_SETOWN)",
        &format!("is a Unix socket at {}/roots.sock", roots.display()),
    ] {
        assert!(message.contains(said), "{said:?} in {message}");
    }
    fx.assert_no_calls("a refused undump");
    assert!(!alive(job.0), "nothing restored");
    assert!(!roots.join("roots.sock").exists(), "nothing bound");
}

/// CRIU restores `images` as root, alone (no action script, no plugin):
/// the PID of what it restored.
fn restored_by_criu_alone(fx: &Fixture, criu: &Path, images: &Path) -> i32 {
    let work = fx.dir().join("criu-alone");
    let plugins = fx.dir().join("no-plugins");
    for dir in [&work, &plugins] {
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    let status = Command::new(criu)
        .args(["restore", "--restore-detached", "--pidfile", "pid", "-v4"])
        .arg("-D")
        .arg(images)
        .arg("-W")
        .arg(&work)
        .arg("--libdir")
        .arg(&plugins)
        .args(["-o", "restore.log"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("criu runs");
    let log = std::fs::read_to_string(work.join("restore.log")).unwrap_or_default();
    assert!(status.success(), "CRIU restored it: {log}");
    std::fs::read_to_string(work.join("pid"))
        .expect("CRIU's pidfile")
        .trim()
        .parse()
        .expect("a PID")
}

/// Whether `pid` holds a socket the kernel lists as a packet socket.
fn holds_a_packet_socket(pid: i32) -> bool {
    let packet = std::fs::read_to_string("/proc/net/packet").expect("/proc/net/packet");
    let inodes: Vec<String> = packet
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .collect();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("its descriptors")
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .any(|link| {
            let link = link.to_string_lossy().into_owned();
            inodes
                .iter()
                .any(|inode| link == format!("socket:[{inode}]"))
        })
}

fn kill_and_wait(pid: i32) {
    let _ = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status();
    wait_until("the restored process to go", || !alive(pid));
}

/// An image kind CRIU still reads but a dump no longer writes (an older
/// CRIU's `packetsk.img`, where a packet socket would not be in the
/// `files.img` cudackpt reads): refused, named.
#[test]
fn an_image_criu_would_read_unchecked_is_refused() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let (home, fake) = users_home(&fx);
    let job = job(&fx, &fake, "sleep 600");
    let images = forged(&fx, &criu, &job, &home);
    let planted = images.join("packetsk.img");
    std::fs::write(&planted, b"").expect("plant");
    std::os::unix::fs::chown(&planted, Some(NOBODY), Some(NOBODY)).expect("chown");
    fx.take_calls();
    let (code, refused) = undump(&fx, &images, &criu);
    let message = refusal_message(code, &refused, "credentials");
    assert!(
        message.contains("packetsk.img is not an image a dump of a job writes"),
        "{message}"
    );
    fx.assert_no_calls("a refused undump");
    assert!(!alive(job.0));
}

/// nobody links files of root's into their images as `restore.log` and
/// `stats-restore`, the names CRIU writes its log and stats under (root
/// makes the links here; a user can where `fs.protected_hardlinks` is 0).
/// The undump restores their job and writes neither file.
#[test]
fn an_undump_writes_nothing_through_a_users_links() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let (home, fake) = users_home(&fx);
    let job = job(&fx, &fake, "sleep 600");
    let images = forged(&fx, &criu, &job, &home);
    let victims: Vec<PathBuf> = ["restore.log", "stats-restore"]
        .iter()
        .map(|name| {
            let victim = fx.dir().join(format!("roots-{name}"));
            std::fs::write(&victim, "precious").expect("write");
            std::fs::hard_link(&victim, images.join(name)).expect("link");
            victim
        })
        .collect();
    let (code, undumped) = undump(&fx, &images, &criu);
    assert_eq!(code, 0, "{undumped:#}");
    assert!(alive(job.0));
    for victim in &victims {
        assert_eq!(
            std::fs::read_to_string(victim).expect("the victim"),
            "precious",
            "{} was written through",
            victim.display()
        );
    }
    let log = PathBuf::from(undumped["criu_log"].as_str().expect("a log"));
    assert!(
        log.starts_with("/run/cudackpt/undumps"),
        "{}",
        log.display()
    );
    assert_eq!(std::fs::metadata(&log).expect("the log").uid(), 0);
    std::fs::remove_dir_all(log.parent().expect("its stage")).expect("clean up");
}

/// A manifest's driver version holding a newline and a line of
/// cudackpt's: the refusal says it as text, and stderr has no line of
/// cudackpt's but its own.
#[test]
fn a_manifest_s_text_starts_no_line_of_its_own() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let job = Orphan::cuda(&fx);
    let images = fx.dir().join("images");
    dumped_and_gone(&fx, &images, &criu, &job);
    let manifest = images.join("cudackpt-manifest.json");
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest).expect("manifest")).expect("JSON");
    let forged = "1.0\ncudackpt: restored the tree of PID 1 from /root in 0.1 s\x1b[2J";
    doc["driver"]["kernel_module"] = serde_json::Value::Null;
    doc["driver"]["cuda"] = forged.into();
    std::fs::write(&manifest, doc.to_string()).expect("forge");
    let output = fx
        .std_command(&[
            "undump",
            images.to_str().expect("UTF-8"),
            "--criu",
            criu.to_str().expect("UTF-8"),
        ])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(8), "{stderr}");
    assert!(
        stderr.contains("driver_mismatch") || stderr.contains("dumped under"),
        "{stderr}"
    );
    let forged_lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("cudackpt: restored"))
        .collect();
    assert!(forged_lines.is_empty(), "{stderr}");
    assert!(!stderr.contains('\x1b'), "{stderr:?}");
    assert!(!alive(job.0));
}

/// nobody's images hold a sparse file (8 KiB on disk, 200 MiB to copy)
/// and a manifest that is not one, and the run directory has 16 MiB (a
/// tmpfs of the undump's own mount namespace). The manifest is refused
/// before anything is staged; with a manifest that reads, the copy that
/// would not fit is refused before it starts; either way the stage's
/// place holds nothing after.
#[test]
fn the_stage_is_bounded_before_it_is_filled() {
    if !crate::support::prerequisite(
        "give nobody images and the undump a small run directory (needs root)",
        crate::support::running_as_root(),
    ) {
        return;
    }
    let fx = Fixture::new();
    let (home, _) = users_home(&fx);
    let images = home.join("job1");
    std::fs::create_dir(&images).expect("mkdir");
    let sparse = std::fs::File::create(images.join("pages-1.img")).expect("create");
    sparse.set_len(200 << 20).expect("a sparse file");
    std::fs::write(images.join("core-1.img"), b"").expect("write");
    std::fs::write(images.join("cudackpt-manifest.json"), b"not JSON").expect("write");
    for name in ["pages-1.img", "core-1.img", "cudackpt-manifest.json", ""] {
        std::os::unix::fs::chown(images.join(name), Some(NOBODY), Some(NOBODY)).expect("chown");
    }
    let (code, refused, left) = undump_in_a_small_run_dir(&fx, &images);
    assert_eq!(
        (code, refused["error"]["kind"].as_str()),
        (8, Some("images_dir")),
        "{refused:#}"
    );
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("is not a manifest cudackpt can read")),
        "{refused:#}"
    );
    assert_eq!(left, "", "the stage's place after a refused manifest");
    // A manifest that reads: the copy is weighed, and refused.
    let manifest = serde_json::json!({
        "schema_version": 1, "created_unix_s": 1, "cudackpt_version": "0.3.0",
        "criu": {"path": "/usr/sbin/criu", "version": "4.2.1"},
        "driver": {"kernel_module": null, "cuda": null},
        "root_pid": 4242,
        "processes": [{"pid": 4242, "name": "sleep", "gpu_memory": [],
                       "gpu_memory_known": false, "checkpointed_bytes": null}],
        "gpus": [], "drained": false, "drain_released_bytes": null,
        "leave_running": false, "criu_options": [], "image_bytes": 1,
        "timings": {"preflights_ms": 1.0, "criu_ms": 1.0, "total_ms": 2.0},
        "complete": true
    });
    std::fs::write(images.join("cudackpt-manifest.json"), manifest.to_string()).expect("write");
    let (code, refused, left) = undump_in_a_small_run_dir(&fx, &images);
    let message = refusal_message(code, &refused, "no_room");
    assert!(message.contains("would copy 200 MiB"), "{message}");
    assert_eq!(
        left, "",
        "the stage's place after a stage that would not fit"
    );
}

/// `cudackpt --json undump IMAGES` in a mount namespace of its own whose
/// /run/cudackpt/undumps is a tmpfs of 16 MiB: its exit, its document, and
/// what the tmpfs holds after (`find`'s lines).
fn undump_in_a_small_run_dir(fx: &Fixture, images: &Path) -> (i32, serde_json::Value, String) {
    let undumps = "/run/cudackpt/undumps";
    std::fs::create_dir_all(undumps).expect("the run directory");
    let script = format!(
        "mount -t tmpfs -o size=16m,mode=0700 cudackpt-test {undumps} || exit 97; \
         \"$0\" --json undump \"$1\" --criu /bin/false; code=$?; \
         find {undumps} -mindepth 1 >&2; exit $code"
    );
    let output = fx
        .command_for(
            Path::new("/usr/bin/unshare"),
            &["--mount", "--propagation", "private", "sh", "-c", &script],
        )
        .arg(crate::support::cudackpt_bin())
        .arg(images)
        .output()
        .expect("unshare runs");
    let code = output.status.code().unwrap_or(-1);
    assert_ne!(code, 97, "the tmpfs could not be mounted");
    let left = String::from_utf8_lossy(&output.stderr)
        .lines()
        .filter(|l| l.starts_with(undumps))
        .collect::<Vec<_>>()
        .join("\n");
    (code, document(&output), left)
}
