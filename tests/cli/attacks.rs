//! cudackpt runs as root next to other users' processes: each test here
//! plays a user who plants something where root will write or read (a
//! symlink, a FIFO, a device, a directory of their own, a umask of 000) and
//! shows that root neither writes through it nor hangs on it, and that a
//! refusal comes before any driver call. These tests need root (as CI has);
//! as another user each says so and checks what it can.

use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::{cudackpt_bin, Fixture, SpawnGuarded, MARKING_LIBRARY, NOBODY};
use crate::wire::{Kind, ProcessCommandDoc, State};

fn is_root() -> bool {
    fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(1) == 0
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path)
        .expect("exists")
        .permissions()
        .mode()
        & 0o7777
}

fn victim(fx: &Fixture) -> std::path::PathBuf {
    let victim = fx.dir().join("victim");
    fs::write(&victim, "precious").expect("victim");
    victim
}

fn untouched(victim: &Path) {
    assert_eq!(fs::read_to_string(victim).expect("victim"), "precious");
}

#[test]
fn a_record_directory_of_another_user_is_refused_before_any_driver_call() {
    if !is_root() {
        crate::support::prerequisite("chown to another user (needs root)", false);
        return;
    }
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let victim = victim(&fx);
    // The user's CRIU images directory, with the links of the exploit.
    let images = fx.dir().join("images");
    fs::create_dir(&images).expect("images");
    symlink(&victim, images.join(format!(".{}.json.tmp", target.pid))).expect("link");
    symlink(&victim, images.join(format!("{}.json", target.pid))).expect("link");
    std::os::unix::fs::chown(&images, Some(NOBODY), Some(NOBODY)).expect("chown");
    let doc: ProcessCommandDoc = fx.json(
        &[
            "--record-dir",
            images.to_str().expect("utf-8"),
            "suspend",
            &target.arg(),
        ],
        6,
    );
    let error = doc.refusal(target.pid);
    assert_eq!(error.kind, Kind::UnsafePath);
    assert!(error.message.contains("uid 65534"), "{error:?}");
    fx.assert_no_calls("an unsafe record directory");
    untouched(&victim);
    assert_eq!(fx.fake_state(target.pid), "running");
}

#[test]
fn a_directory_anyone_can_write_is_refused_unless_sticky() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let open = fx.dir().join("open");
    fs::create_dir(&open).expect("dir");
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).expect("chmod");
    let record_dir = open.to_str().expect("utf-8");
    let doc: ProcessCommandDoc =
        fx.json(&["--record-dir", record_dir, "suspend", &target.arg()], 6);
    let error = doc.refusal(target.pid);
    assert!(error.message.contains("writable by everyone"), "{error:?}");
    fx.assert_no_calls("a world-writable record directory");
    // Sticky, like /tmp: others cannot replace cudackpt's files there.
    fs::set_permissions(&open, fs::Permissions::from_mode(0o1777)).expect("chmod");
    fx.json::<ProcessCommandDoc>(&["--record-dir", record_dir, "suspend", &target.arg()], 0);
    assert_eq!(mode(&open.join(format!("{}.json", target.pid))), 0o600);
}

#[test]
fn under_umask_000_directories_are_private_and_records_too() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let bin = cudackpt_bin();
    let script = format!("umask 000; exec {} suspend {}", bin.display(), target.pid);
    let status = fx
        .command_for(Path::new("/bin/sh"), &["-c", &script])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("sh");
    assert!(status.success());
    assert_eq!(mode(&fx.dir().join("records")), 0o700);
    assert_eq!(mode(&fx.dir().join("locks")), 0o700);
    assert_eq!(
        mode(&fx.dir().join(format!("records/{}.json", target.pid))),
        0o600
    );
    assert_eq!(
        mode(&fx.dir().join(format!("locks/{}.lock", target.pid))),
        0o600,
        "a live process's lock file stays, private"
    );
}

#[test]
fn a_fifo_or_a_device_as_a_record_neither_hangs_nor_grows() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let record = fx.dir().join(format!("records/{}.json", target.pid));
    for plant in ["fifo", "/dev/zero"] {
        fx.json::<ProcessCommandDoc>(&["suspend", &target.arg()], 0);
        fs::remove_file(&record).expect("the record to replace");
        if plant == "fifo" {
            let made = std::process::Command::new("mkfifo")
                .arg(&record)
                .status()
                .expect("mkfifo");
            assert!(made.success());
        } else {
            symlink(plant, &record).expect("link");
        }
        // --map auto needs the record: the refusal says why it was not used.
        let auto: ProcessCommandDoc = fx.json(&["restore", "--map", "auto", &target.arg()], 8);
        let error = auto.refusal(target.pid);
        assert!(
            error
                .message
                .contains(&format!("checkpoint record {} ignored: ", record.display())),
            "{plant}: {error:?}"
        );
        let started = Instant::now();
        let doc: ProcessCommandDoc = fx.json(&["restore", &target.arg()], 0);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{plant}: restore took {:?}",
            started.elapsed()
        );
        assert_eq!(doc.process(target.pid).state, State::Locked);
        assert!(
            doc.warnings.iter().any(|w| w.contains("no checkpoint record")),
            "{plant}: the planted record is ignored, and the report says what was not checked: {doc:?}"
        );
        let ignored = format!("checkpoint record {} ignored: ", record.display());
        assert!(
            doc.warnings.iter().any(|w| w.starts_with(&ignored)),
            "{plant}: and why the record there was not used: {doc:?}"
        );
        fx.json::<ProcessCommandDoc>(&["unlock", &target.arg()], 0);
        let _ = fs::remove_file(&record);
    }
}

#[test]
fn a_planted_lock_link_fails_closed_and_the_victim_is_untouched() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let victim = victim(&fx);
    let locks = fx.dir().join("locks");
    fs::create_dir(&locks).expect("locks");
    symlink(&victim, locks.join(format!("{}.lock", target.pid))).expect("link");
    let doc: ProcessCommandDoc = fx.json(&["suspend", &target.arg()], 1);
    let error = doc.refusal(target.pid);
    assert_eq!(error.kind, Kind::LockUnavailable);
    assert!(
        error
            .hint
            .as_deref()
            .is_some_and(|h| h.contains("--no-lock")),
        "{error:?}"
    );
    fx.assert_no_calls("an unusable lock");
    untouched(&victim);
    // The way out, when nothing else acts on the process.
    fx.json::<ProcessCommandDoc>(&["--no-lock", "suspend", &target.arg()], 0);
    untouched(&victim);
    assert_eq!(fx.fake_state(target.pid), "checkpointed");
}

#[test]
fn an_unusable_lock_directory_fails_closed() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let not_a_dir = fx.dir().join("file");
    fs::write(&not_a_dir, "").expect("file");
    let doc: ProcessCommandDoc = fx
        .cudackpt(&["--json", "lock", &target.arg()])
        .env("CUDACKPT_LOCK_DIR", &not_a_dir)
        .assert()
        .code(1)
        .get_output()
        .stdout
        .clone()
        .pipe(|out| crate::support::parse_one_document(&out));
    assert_eq!(doc.refusal(target.pid).kind, Kind::LockUnavailable);
    fx.assert_no_calls("an unusable lock directory");
}

#[test]
fn a_resume_that_rolls_back_keeps_its_record_for_the_retry() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let record = fx.dir().join(format!("records/{}.json", target.pid));
    fx.json::<ProcessCommandDoc>(&["suspend", &target.arg()], 0);
    assert!(record.exists());
    let doc: ProcessCommandDoc =
        fx.json_with_inject(&["resume", &target.arg()], "unlock=error:999", 1);
    let p = doc.process(target.pid);
    assert!(p.rolled_back, "{p:?}");
    assert_eq!(p.state, State::Checkpointed);
    assert!(
        record.exists(),
        "the record stays while the process is checkpointed"
    );
    fx.json::<ProcessCommandDoc>(&["resume", &target.arg()], 0);
    assert!(!record.exists(), "and goes once it runs");
}

/// `value.pipe(f)`: f(value), to keep a chain readable.
trait Pipe: Sized {
    fn pipe<R>(self, f: impl FnOnce(Self) -> R) -> R {
        f(self)
    }
}

impl<T> Pipe for T {}

#[test]
fn root_refuses_a_library_another_user_could_have_written() {
    if !is_root() {
        crate::support::prerequisite("make a library of another user (needs root)", false);
        return;
    }
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let library = fx.compile_library("evil", MARKING_LIBRARY);
    std::os::unix::fs::chown(&library, Some(NOBODY), Some(NOBODY)).expect("chown");
    let mark = fx.dir().join("mark");
    let run = |extra: &[&str], env: &[(&str, &str)]| {
        let mut args = vec!["--json", "--libcuda", library.to_str().expect("utf-8")];
        args.extend_from_slice(extra);
        args.extend(["state", "--pid"]);
        let pid = target.arg();
        let mut command = fx.cudackpt(&[&args[..], &[pid.as_str()]].concat());
        command.env("MARK_FILE", &mark).envs(env.iter().copied());
        command.assert().get_output().clone()
    };
    // The harm, on purpose: loaded, the library runs its constructor (here
    // in a throwaway shell; in cudackpt it would run as root).
    let shell = std::process::Command::new("sh")
        .args(["-c", "true"])
        .env("LD_PRELOAD", &library)
        .env("MARK_FILE", &mark)
        .status()
        .expect("sh");
    assert!(
        shell.success() && mark.exists(),
        "the library marks when loaded"
    );
    fs::remove_file(&mark).expect("reset");
    // cudackpt refuses before loading anything, with or without the old
    // override, and whichever way root was reached: sudo, doas, pkexec, or
    // a scheduler's hook that passes the user's environment.
    for (extra, env) in [
        (&[][..], &[][..]),
        (&["--libcuda-unsafe"][..], &[][..]),
        (&[][..], &[("CUDACKPT_LIBCUDA_UNSAFE", "1")][..]),
        (&["--libcuda-unsafe"][..], &[("SUDO_UID", "65534")][..]),
        (&["--libcuda-unsafe"][..], &[("DOAS_USER", "nobody")][..]),
        (&["--libcuda-unsafe"][..], &[("PKEXEC_UID", "65534")][..]),
    ] {
        let output = run(extra, env);
        assert_eq!(
            output.status.code(),
            Some(6),
            "{extra:?} {env:?}: {output:?}"
        );
        let doc: ProcessCommandDoc = crate::support::parse_one_document(&output.stdout);
        let error = doc.refusal(target.pid);
        assert_eq!(error.kind, Kind::UnsafePath);
        assert!(error.message.contains("uid 65534"), "{error:?}");
        assert!(
            !mark.exists(),
            "{extra:?} {env:?}: its constructor ran as root"
        );
        if !extra.is_empty() || !env.is_empty() {
            assert!(
                String::from_utf8_lossy(&output.stderr)
                    .contains("--libcuda-unsafe (CUDACKPT_LIBCUDA_UNSAFE) has no effect"),
                "the old override is named as powerless: {output:?}"
            );
        }
    }
    // NVIDIA's grammar and CRIU's action script, told by the environment
    // alone, refuse it too.
    let lib = library.to_str().expect("utf-8");
    let pid = target.arg();
    for (args, env, code) in [
        (&["--get-state", "--pid", pid.as_str()][..], &[][..], 1),
        (
            &[][..],
            &[
                ("CRTOOLS_SCRIPT_ACTION", "pre-dump"),
                ("CRTOOLS_INIT_PID", pid.as_str()),
            ][..],
            6,
        ),
    ] {
        let output = fx
            .cudackpt(args)
            .env("CUDACKPT_LIBCUDA", lib)
            .env("CUDACKPT_LIBCUDA_UNSAFE", "1")
            .env("DOAS_USER", "nobody")
            .env("MARK_FILE", &mark)
            .envs(env.iter().copied())
            .assert()
            .get_output()
            .clone();
        assert_eq!(output.status.code(), Some(code), "{args:?}: {output:?}");
        assert!(!mark.exists(), "{args:?}: its constructor ran as root");
    }
    fx.assert_no_calls("a library another user could have written");
    // Writable by others is as bad as owned by them.
    std::os::unix::fs::chown(&library, Some(0), Some(0)).expect("chown");
    fs::set_permissions(&library, fs::Permissions::from_mode(0o666)).expect("chmod");
    assert_eq!(run(&["--libcuda-unsafe"], &[]).status.code(), Some(6));
    assert!(!mark.exists());
}

#[test]
fn a_map_file_the_invoking_user_cannot_read_is_not_echoed() {
    if !is_root() {
        crate::support::prerequisite("act for another user (needs root)", false);
        return;
    }
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let secret = fx.dir().join("secret.json");
    fs::write(&secret, r#"{"token": "hunter2-secret-token"}"#).expect("secret");
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).expect("chmod");
    let run = |sudo_uid: Option<&str>| {
        let mut command = fx.cudackpt(&[
            "restore",
            "--map-file",
            secret.to_str().expect("utf-8"),
            &target.arg(),
        ]);
        match sudo_uid {
            Some(uid) => command.env("SUDO_UID", uid),
            None => command.env_remove("SUDO_UID"),
        };
        command.assert().code(2).get_output().clone()
    };
    // Root itself asked: the entry is named by its position, not shown.
    let (_, err) = crate::support::texts(&run(None));
    assert!(!err.contains("hunter2"), "{err}");
    assert!(err.contains("entry 1 is not OLD=NEW"), "{err}");
    // Through sudo, for a user who could not read the file: no content.
    let (_, err) = crate::support::texts(&run(Some("65534")));
    assert!(!err.contains("hunter2"), "{err}");
    assert!(
        err.contains("uid 65534") && err.contains("may not read it"),
        "{err}"
    );
    fx.assert_no_calls("an unreadable map file");
    // A file the user may read is read, and its entries are still named
    // by position alone.
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o644)).expect("chmod");
    let (_, err) = crate::support::texts(&run(Some("65534")));
    assert!(!err.contains("hunter2"), "{err}");
    assert!(err.contains("entry 1 is not OLD=NEW"), "{err}");
}

#[test]
fn a_lock_directory_removed_mid_run_rolls_the_group_back() {
    let fx = Fixture::new();
    let target = fx.cuda_target();
    let child = fx
        .std_command(&["--json", "suspend", &target.arg()])
        .env("FAKE_CUDA_INJECT", "checkpoint=delay:600")
        .stdout(std::process::Stdio::piped())
        .spawn_guarded();
    crate::support::wait_until("the lock", || {
        fx.calls().iter().any(|c| c.short() == "lock 0")
    });
    // What a careless cleaner does: now a second cudackpt would make a
    // fresh directory and get in, so the first must not carry on.
    fs::remove_dir_all(fx.dir().join("locks")).expect("rm -rf");
    let output = child.wait_with_output().expect("suspend ends");
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let doc: ProcessCommandDoc = crate::support::parse_one_document(&output.stdout);
    let p = doc.process(target.pid);
    assert_eq!(p.error().kind, Kind::LockUnavailable, "{p:?}");
    assert!(p.error().message.contains("lost its locks"), "{p:?}");
    assert!(p.rolled_back);
    assert_eq!(fx.fake_state(target.pid), "running");
}

/// `cudackpt man --dir DIR` under a sudo rule once wrote man-page text
/// through a link the user planted in their own directory (`ln -s
/// /etc/shadow DIR/cudackpt.1`). Now every page is created exclusively,
/// never through a link, with the invoking user's credentials (sudo,
/// pkexec, doas), in a directory that was checked.
#[test]
fn man_pages_are_never_written_through_a_planted_link() {
    if !is_root() {
        crate::support::prerequisite("give a directory to another user (needs root)", false);
        return;
    }
    let fx = Fixture::new();
    fs::set_permissions(fx.dir(), fs::Permissions::from_mode(0o755)).expect("chmod");
    let victim = victim(&fx);
    let man = |dir: &Path, env: &[(&str, &str)]| {
        fx.cudackpt(&["man", "--dir", dir.to_str().expect("utf-8")])
            .envs(env.iter().copied())
            .assert()
            .get_output()
            .clone()
    };
    // The user's own directory, with the exploit's link.
    let theirs = fx.dir().join("theirs");
    fs::create_dir(&theirs).expect("dir");
    symlink(&victim, theirs.join("cudackpt.1")).expect("link");
    std::os::unix::fs::chown(&theirs, Some(NOBODY), Some(NOBODY)).expect("chown");
    let sudo: &[(&str, &str)] = &[("SUDO_UID", "65534"), ("SUDO_GID", "65534")];
    // Root itself (no variable) is refused too: the directory is not root's.
    for how in [
        sudo,
        &[("PKEXEC_UID", "65534")],
        &[("DOAS_USER", "nobody")],
        &[],
    ] {
        let output = man(&theirs, how);
        assert_eq!(output.status.code(), Some(6), "{how:?}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("cudackpt.1") || stderr.contains("uid 65534"),
            "{how:?}: the refusal names the link or the owner: {stderr}"
        );
        untouched(&victim);
        assert!(fs::symlink_metadata(theirs.join("cudackpt.1"))
            .is_ok_and(|m| m.file_type().is_symlink()));
    }
    // Without the link, the pages are written as the user: theirs.
    fs::remove_file(theirs.join("cudackpt.1")).expect("unplant");
    let output = man(&theirs, sudo);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let page = fs::symlink_metadata(theirs.join("cudackpt.1")).expect("written");
    assert!(page.file_type().is_file());
    assert_eq!(page.uid(), NOBODY, "written with the user's credentials");
    // A directory the user may not write is not written for them by root.
    let roots = fx.dir().join("roots");
    fs::create_dir(&roots).expect("dir");
    let output = man(&roots.join("man1"), sudo);
    assert_eq!(output.status.code(), Some(6), "{output:?}");
    assert!(
        !roots.join("man1").exists(),
        "root made nothing for the user"
    );
    untouched(&victim);
}

/// `install-compat` puts a program on root's PATH that CRIU runs as root.
/// It once linked whatever cudackpt ran it (the README's own steps linked
/// `/usr/local/bin/cuda-checkpoint` to `~/.cargo/bin/cudackpt`, a file the
/// user can rewrite), into any directory a sudo user named, and
/// `--uninstall` believed any link named `cudackpt` and renamed a planted
/// `.orig` over it. Each is refused now, before anything changes.
#[test]
fn install_compat_links_only_what_only_root_can_change() {
    if !is_root() {
        crate::support::prerequisite("give files to another user (needs root)", false);
        return;
    }
    let fx = Fixture::new();
    let bin = fx.world_runnable_cudackpt();
    let dir_arg = |dir: &Path| dir.to_str().expect("utf-8").to_string();
    let install = |program: &Path, args: &[&str], env: &[(&str, &str)]| {
        let mut command = fx.command_for(program, &[&["--json", "install-compat"], args].concat());
        command.envs(env.iter().copied());
        command.output().expect("install-compat")
    };
    // Root's own bin directory.
    let system_bin = fx.dir().join("usr-local-bin");
    fs::create_dir(&system_bin).expect("dir");
    let link = system_bin.join("cuda-checkpoint");

    // 1. The user's own copy (~/.cargo/bin/cudackpt), run through sudo.
    let home = fx.dir().join("home");
    fs::create_dir_all(home.join(".cargo/bin")).expect("home");
    let users_copy = home.join(".cargo/bin/cudackpt");
    fs::copy(&bin, &users_copy).expect("copy");
    for path in [
        &home,
        &home.join(".cargo"),
        &home.join(".cargo/bin"),
        &users_copy,
    ] {
        std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY)).expect("chown");
    }
    let sudo = [("SUDO_UID", "65534"), ("SUDO_GID", "65534")];
    let output = install(&users_copy, &[&dir_arg(&system_bin)], &sudo);
    assert_eq!(output.status.code(), Some(6), "{output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("uid 65534") && text.contains("sudo install"),
        "{text}"
    );
    assert!(fs::symlink_metadata(&link).is_err(), "nothing linked");
    // Root's own copy whose directory the user may write: the same.
    let shared = fx.dir().join("shared");
    fs::create_dir(&shared).expect("dir");
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o777)).expect("chmod");
    let roots_copy = shared.join("cudackpt");
    fs::copy(&bin, &roots_copy).expect("copy");
    let output = install(&roots_copy, &[&dir_arg(&system_bin)], &[]);
    assert_eq!(output.status.code(), Some(6), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("writable by everyone"));
    assert!(fs::symlink_metadata(&link).is_err(), "nothing linked");

    // 2. A directory of the user's, named through sudo, with --force.
    let users_dir = home.join("bin");
    fs::create_dir(&users_dir).expect("dir");
    fs::write(users_dir.join("cuda-checkpoint"), "#!/bin/sh\n").expect("theirs");
    std::os::unix::fs::chown(&users_dir, Some(NOBODY), Some(NOBODY)).expect("chown");
    let output = install(&bin, &["--force", &dir_arg(&users_dir)], &sudo);
    assert_eq!(output.status.code(), Some(6), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("uid 65534"));
    assert_eq!(
        fs::read_to_string(users_dir.join("cuda-checkpoint")).expect("untouched"),
        "#!/bin/sh\n"
    );

    // The control: root's own copy into root's own directory is linked.
    let output = install(&bin, &[&dir_arg(&system_bin)], &sudo);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(fs::read_link(&link).expect("linked"), bin);

    // 3. --uninstall: a planted .orig (another user's) is never renamed
    // over the link, and a link to another file named cudackpt is left.
    let planted = system_bin.join("cuda-checkpoint.orig");
    fs::write(&planted, "#!/bin/sh\nexec evil\n").expect("planted");
    std::os::unix::fs::chown(&planted, Some(NOBODY), Some(NOBODY)).expect("chown");
    let output = install(&bin, &["--uninstall", &dir_arg(&system_bin)], &[]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(fs::symlink_metadata(&link).is_err(), "the link went");
    assert!(planted.exists(), "the planted backup stayed where it was");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("uid 65534") && text.contains("left it alone"),
        "{text}"
    );
    std::os::unix::fs::symlink(&users_copy, &link).expect("another copy's link");
    let output = install(&bin, &["--uninstall", &dir_arg(&system_bin)], &[]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert_eq!(fs::read_link(&link).expect("left"), users_copy);
}

/// A user other than root without `XDG_RUNTIME_DIR` (no login session: a
/// cron job, `su` without `-l`) lands on root's `/run/cudackpt` and cannot
/// lock there: the refusal says why and what to set, not only "permission
/// denied".
#[test]
fn a_user_without_a_runtime_directory_is_told_what_to_set() {
    let fx = Fixture::new();
    let Some((bin, state, target)) = fx.nobody_with_own_target() else {
        return;
    };
    let pid = target.id().to_string();
    let output = fx.run_as_nobody(&bin, &["--json", "lock", &pid], &state, &[]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let doc: ProcessCommandDoc = crate::support::parse_one_document(&output.stdout);
    let error = doc.error.clone().expect("refused as a whole");
    assert_eq!(error.kind, Kind::LockUnavailable, "{error:?}");
    let hint = error.hint.unwrap_or_default();
    assert!(
        hint.contains("XDG_RUNTIME_DIR") && hint.contains("CUDACKPT_LOCK_DIR"),
        "{hint}"
    );
}

/// `recover` that could not read the record directory once said success
/// (`{"ok":true,"processes":[]}`, exit 0): a user who planted the
/// directory, or a broken one, hid every abandoned group from it.
#[test]
fn recover_that_cannot_look_says_so_and_fails() {
    let fx = Fixture::new();
    let records = fx.dir().join("records");
    fs::create_dir(&records).expect("records");
    // intents/ is a file, not a directory.
    fs::write(records.join("intents"), "").expect("a file");
    let output = fx
        .cudackpt(&["--json", "recover"])
        .assert()
        .get_output()
        .clone();
    assert_ne!(output.status.code(), Some(0), "{output:?}");
    let doc: ProcessCommandDoc = crate::support::parse_one_document(&output.stdout);
    assert!(!doc.ok);
    let error = doc.error.clone().expect("a failure of the command");
    assert!(error.message.contains("could not look"), "{error:?}");
    if !is_root() {
        return;
    }
    // intents/ belongs to another user.
    fs::remove_file(records.join("intents")).expect("rm");
    fs::create_dir(records.join("intents")).expect("dir");
    std::os::unix::fs::chown(records.join("intents"), Some(NOBODY), Some(NOBODY)).expect("chown");
    let output = fx
        .cudackpt(&["--json", "recover"])
        .assert()
        .get_output()
        .clone();
    assert_eq!(output.status.code(), Some(6), "{output:?}");
    let doc: ProcessCommandDoc = crate::support::parse_one_document(&output.stdout);
    let error = doc.error.clone().expect("a failure of the command");
    assert!(error.message.contains("uid 65534"), "{error:?}");
}

/// Root and the process's owner kept their intent records apart: after
/// root's `resume` of a user's process died mid-change, root refused the
/// PID (exit 10) while the owner's own `resume` went ahead, and root's
/// `recover` then planned to take the running job back. Root now writes the
/// record of a group of one user's processes in that user's runtime
/// directory, as that user: the owner's cudackpt refuses the process too,
/// and either one's `recover` puts it back, once.
#[test]
fn root_and_the_owner_see_one_record() {
    if !is_root() {
        crate::support::prerequisite("run a process as another user (needs root)", false);
        return;
    }
    let fx = Fixture::new();
    let bin = fx.world_runnable_cudackpt();
    let fake = fx.world_fake();
    let state = fx.shared_state();
    // The user's runtime directory, as logind makes it.
    let runtime = fx.dir().join("run-user").join(NOBODY.to_string());
    fs::create_dir_all(&runtime).expect("runtime dir");
    fs::set_permissions(fx.dir().join("run-user"), fs::Permissions::from_mode(0o755))
        .expect("chmod");
    fs::set_permissions(&runtime, fs::Permissions::from_mode(0o700)).expect("chmod");
    std::os::unix::fs::chown(&runtime, Some(NOBODY), Some(NOBODY)).expect("chown");
    let target = fx.world_cuda_target(&state, Some(NOBODY));
    let pid = target.id().to_string();
    let as_root = |args: &[&str], env: &[(&str, &str)]| {
        let mut command = fx.std_command(args);
        command
            .env("CUDACKPT_LIBCUDA", &fake)
            .env("FAKE_CUDA_STATE_DIR", &state)
            .envs(env.iter().copied());
        command.output().expect("root's cudackpt")
    };
    let as_owner = |args: &[&str]| {
        fx.run_as_nobody(
            &bin,
            args,
            &state,
            &[("XDG_RUNTIME_DIR", runtime.as_os_str())],
        )
    };
    assert_eq!(as_root(&["suspend", &pid], &[]).status.code(), Some(0));
    // Root's resume dies between its restore and its unlock.
    let died = as_root(
        &["resume", &pid],
        &[("CUDACKPT_DEBUG_PANIC_AFTER", "restore")],
    );
    assert_ne!(died.status.code(), Some(0), "{died:?}");
    let records: Vec<_> = fs::read_dir(runtime.join("cudackpt/intents"))
        .expect("the record is in the owner's directory")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        fs::metadata(records[0].path()).expect("record").uid(),
        NOBODY,
        "written as the owner, so theirs to read"
    );
    // The fake driver keeps its state in files root made: the owner's
    // cudackpt must write them too (the real driver has no such files).
    for entry in fs::read_dir(&state).expect("state").flatten() {
        let _ = fs::set_permissions(entry.path(), fs::Permissions::from_mode(0o666));
    }
    // The owner's own resume is refused, as root's is.
    let output = as_owner(&["--json", "resume", &pid]);
    assert_eq!(output.status.code(), Some(10), "{output:?}");
    let output = as_root(&["--json", "resume", &pid], &[]);
    assert_eq!(output.status.code(), Some(10), "{output:?}");
    // The owner's recover puts it back where root's resume started.
    let output = as_owner(&["--json", "recover"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let output = as_root(&["--json", "state", &pid], &[]);
    let doc: ProcessCommandDoc = crate::support::parse_one_document(&output.stdout);
    assert_eq!(
        doc.process(target.id() as i32).state,
        State::Checkpointed,
        "{doc:?}"
    );
    // Nothing is left for root to recover, and its resume goes.
    let doc: ProcessCommandDoc = crate::support::parse_one_document(
        &as_root(&["--json", "recover", "--dry-run"], &[]).stdout,
    );
    assert!(doc.processes.is_empty(), "{doc:?}");
    assert_eq!(as_root(&["resume", &pid], &[]).status.code(), Some(0));
}
