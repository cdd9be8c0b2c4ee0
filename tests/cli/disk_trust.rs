//! `dump` and `undump` as root on a directory a user controls (SPEC
//! section 14, "Trust"), each test playing that user: nobody (uid 65534)
//! owns the directory above the images and swaps what is there at an
//! inotify event (`support/swapper.c`, `renameat2(RENAME_EXCHANGE)`), not
//! after a sleep. Each attack won against cudackpt before it reached the
//! images by descriptor: CRIU loaded the user's plugin and ran their
//! action script as root, root chmodded a file of its own through their
//! link, and killed a process tree a pidfile named.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::disk::{alive, criu, dump, dumped_and_gone, undump, undump_with, Orphan};
use crate::support::{running_as_root, wait_until, Fixture};

/// The attacker's uid.
const NOBODY: u32 = 65534;

/// The attacker's home in the fixture (theirs, 0755), the fixture's
/// directory made passable to them.
fn attackers_home(fx: &Fixture) -> PathBuf {
    std::fs::set_permissions(fx.dir(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
    let home = fx.dir().join("home");
    std::fs::create_dir(&home).expect("mkdir");
    std::os::unix::fs::chown(&home, Some(NOBODY), Some(NOBODY)).expect("chown");
    home
}

/// A directory of the attacker's in their home.
fn attackers_dir(home: &Path, name: &str) -> PathBuf {
    let dir = home.join(name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY)).expect("chown");
    dir
}

/// Compiles C `source` with gcc into `out` (0755).
fn compiled(source: &str, out: &Path, extra: &[&str]) {
    let status = Command::new("gcc")
        .args(["-O1", "-o"])
        .arg(out)
        .arg(source)
        .args(extra)
        .status()
        .expect("gcc runs (CI has it)");
    assert!(status.success(), "gcc {source}");
    std::fs::set_permissions(out, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// The swapper, watching `parent` for `event` on `name`, then doing
/// `action` `arg`, as nobody (or as root where `as_root`), once it watches.
fn swapper(
    fx: &Fixture,
    parent: &Path,
    watch: (&str, &str),
    action: (&str, &str),
    as_root: bool,
) -> Child {
    let binary = fx.dir().join("swapper");
    if !binary.exists() {
        let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cli/support/swapper.c");
        compiled(source, &binary, &[]);
    }
    let ready = parent.join(".watching");
    let mut command = if as_root {
        Command::new(&binary)
    } else {
        let mut setpriv = Command::new("setpriv");
        setpriv
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
            .arg(&binary);
        setpriv
    };
    let child = command
        .arg(parent)
        .args([watch.0, watch.1])
        .arg(&ready)
        .args([action.0, action.1])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the swapper starts");
    wait_until("the swapper to watch", || ready.exists());
    std::fs::remove_file(&ready).expect("rm");
    child
}

/// Whether the swapper swapped (it says so and exits 0).
fn swapped(child: Child) -> bool {
    let out = child.wait_with_output().expect("the swapper ends");
    out.status.success() && String::from_utf8_lossy(&out.stdout).contains("swapped")
}

/// The file names in `dir`.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// A CRIU plugin whose constructor notes who loaded it in `marker`.
fn evil_plugin(fx: &Fixture, into: &Path, marker: &Path) {
    let source = fx.dir().join("evil.c");
    std::fs::write(
        &source,
        "#include <stdio.h>\n#include <unistd.h>\n__attribute__((constructor)) static void owned(void) { FILE *f = fopen(MARKER, \"w\"); if (f) { fprintf(f, \"uid=%d euid=%d\\n\", getuid(), geteuid()); fclose(f); } }\n",
    )
    .expect("write");
    let define = format!("-DMARKER=\"{}\"", marker.display());
    compiled(
        source.to_str().expect("UTF-8"),
        &into.join("evil.so"),
        &["-shared", "-fPIC", &define],
    );
}

/// The user swaps the images directory a root dump made in their home for
/// a directory of theirs holding a CRIU plugin, once cudackpt has checked
/// it: CRIU loads nothing of theirs and writes nothing into their
/// directory; the images are in the directory cudackpt made and held.
#[test]
fn a_directory_swapped_under_a_dump_gets_nothing_of_roots() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let job = Orphan::cuda(&fx);
    let home = attackers_home(&fx);
    let evil = attackers_dir(&home, "evil");
    let plugins = attackers_dir(&evil, "no-plugins");
    let marker = fx.dir().join("owned");
    evil_plugin(&fx, &plugins, &marker);
    let watcher = swapper(&fx, &home, ("job1", "close"), ("exchange", "evil"), false);
    let (code, dumped) = dump(&fx, &home.join("job1"), &criu, job.0, &[]);
    assert!(swapped(watcher), "the attacker never got to swap");
    assert!(!marker.exists(), "CRIU loaded the user's plugin as root");
    assert_eq!(code, 0, "{dumped:#}");
    // job1 is the attacker's directory now: nothing of the dump's in it.
    assert_eq!(names(&home.join("job1")), ["no-plugins"]);
    // The directory cudackpt made, renamed by the attacker, holds it all.
    let made = names(&home.join("evil"));
    for written in ["cudackpt-manifest.json", "dump.log", "inventory.img"] {
        assert!(made.iter().any(|n| n == written), "{written}: {made:?}");
    }
    let mode = std::fs::metadata(home.join("evil"))
        .expect("made")
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o700);
}

/// The user swaps the new images directory for a link to a setuid file of
/// root's as soon as it is made: cudackpt never chmods through the link.
#[test]
fn a_link_swapped_in_as_the_directory_is_made_is_never_chmodded_through() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let job = Orphan::cuda(&fx);
    let home = attackers_home(&fx);
    let victim = fx.dir().join("victim");
    std::fs::write(&victim, "#!/bin/sh\n").expect("write");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
    let victim_text = victim.to_str().expect("UTF-8").to_string();
    let watcher = swapper(
        &fx,
        &home,
        ("job1", "create"),
        ("link", &victim_text),
        false,
    );
    let (code, dumped) = dump(&fx, &home.join("job1"), &criu, job.0, &[]);
    assert!(swapped(watcher), "the attacker never got to swap");
    let mode = std::fs::metadata(&victim)
        .expect("victim")
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o7777,
        0o4755,
        "root's file was chmodded: {dumped:#}"
    );
    // Either the dump went on in the directory it made and holds (moved
    // away, as `job1.moved`), or refused what it found: never both.
    if code == 0 {
        assert!(names(&home.join("job1.moved")).contains(&"inventory.img".to_string()));
    } else {
        assert_eq!(dumped["error"]["kind"], "images_dir", "{dumped:#}");
    }
}

/// A dump of a root job into the user's home: the images directory is
/// root's, the home above it theirs.
fn root_job_dumped_into_a_users_home(fx: &Fixture, criu: &Path) -> (Orphan, PathBuf) {
    let job = Orphan::cuda(fx);
    let home = dumped_into_a_users_home(fx, criu, &job);
    (job, home)
}

/// `job` dumped into `home/job1`, the user's home: the job gone.
fn dumped_into_a_users_home(fx: &Fixture, criu: &Path, job: &Orphan) -> PathBuf {
    let home = attackers_home(fx);
    dumped_and_gone(fx, &home.join("job1"), criu, job);
    home
}

/// The manifest with CRIU's options replaced by `options`.
fn forged_manifest(images: &Path, options: &[&str]) -> String {
    let text =
        std::fs::read_to_string(images.join("cudackpt-manifest.json")).expect("the manifest");
    let mut manifest: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    manifest["criu_options"] = options
        .iter()
        .map(|o| serde_json::json!({"option": o, "why": "planted"}))
        .collect();
    manifest.to_string()
}

/// An action script that notes who ran it in `marker`.
fn pwn_script(dir: &Path, marker: &Path) -> PathBuf {
    let script = dir.join("pwn.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\nid -u > {}\n", marker.display()),
    )
    .expect("write");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    script
}

/// The user swaps the images a root undump checks for their own copy,
/// whose manifest asks CRIU for their action script: the script never
/// runs, and the root job those images are of is not restored from a
/// directory the user could write.
#[test]
fn a_forged_directory_swapped_under_an_undump_runs_nothing_of_the_users() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let (job, home) = root_job_dumped_into_a_users_home(&fx, &criu);
    let marker = fx.dir().join("owned");
    let script = pwn_script(&home, &marker);
    let forged = attackers_dir(&home, "forged");
    for name in names(&home.join("job1")) {
        let image = home.join("job1").join(&name);
        if image.is_file() {
            std::fs::copy(&image, forged.join(&name)).expect("copy");
        }
    }
    let action = format!("--action-script {}", script.display());
    std::fs::write(
        forged.join("cudackpt-manifest.json"),
        forged_manifest(&home.join("job1"), &[&action]),
    )
    .expect("forge");
    let status = Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(&forged)
        .status()
        .expect("chown");
    assert!(status.success());
    let watcher = swapper(&fx, &home, ("job1", "close"), ("exchange", "forged"), false);
    fx.take_calls();
    let (code, refused) = undump(&fx, &home.join("job1"), &criu, &[]);
    assert!(swapped(watcher), "the attacker never got to swap");
    assert!(!marker.exists(), "the user's action script ran as root");
    assert_eq!(code, 8, "{refused:#}");
    let kind = refused["error"]["kind"].as_str().expect("a kind");
    assert!(["manifest", "credentials"].contains(&kind), "{refused:#}");
    fx.assert_no_calls("a refused undump");
    assert!(!alive(job.0), "nothing restored");
}

/// Images of a root job in a directory another user could have written
/// (theirs above it) are refused before CRIU starts: CRIU would restore
/// the job as root, as its images say; the message names what is beyond
/// that user, read from CRIU's own images.
#[test]
fn images_another_user_could_have_written_restore_only_as_that_user() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    // The job holds a file only root may read: CRIU would open it again,
    // as root, for the restored job.
    let secret = fx.dir().join("secret");
    std::fs::write(&secret, "root's").expect("write");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let job = Orphan::start(
        &fx,
        &format!(
            "exec 3<{}; FAKE_CUDA_IDENTITY=$$-$(date +%s%N) LD_PRELOAD=$CUDA setsid sleep 600 </dev/null >/dev/null 2>&1",
            secret.display()
        ),
    );
    let home = dumped_into_a_users_home(&fx, &criu, &job);
    fx.take_calls();
    let (code, refused) = undump(&fx, &home.join("job1"), &criu, &[]);
    let message = crate::disk::refusal_message(code, &refused, "credentials");
    assert!(message.contains("uid 65534"), "{message}");
    assert!(message.contains("euid 0"), "{message}");
    assert!(
        message.contains(&format!(
            "{} is opened for the job (to read) and uid 65534 may not open it so",
            secret.display()
        )),
        "{message}"
    );
    fx.assert_no_calls("a refused undump");
    assert!(!alive(job.0));
    // Moved where only root writes, all the way up, the same images are
    // root's to restore as recorded.
    let roots = fx.dir().join("roots");
    std::fs::rename(home.join("job1"), &roots).expect("mv");
    let (code, undumped) = undump(&fx, &roots, &criu, &[]);
    assert_eq!(code, 0, "{undumped:#}");
    assert_eq!(undumped["restored_root_pid"], job.0);
    assert!(alive(job.0));
}

/// A manifest whose CRIU options are not those a dump chooses is refused,
/// even in root's own directory, and its action script never runs.
#[test]
fn a_manifest_asking_criu_for_more_than_a_dump_chooses_is_refused() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let job = Orphan::cuda(&fx);
    let images = fx.dir().join("images");
    dumped_and_gone(&fx, &images, &criu, &job);
    let marker = fx.dir().join("owned");
    let script = pwn_script(fx.dir(), &marker);
    for planted in [
        format!("--action-script {}", script.display()),
        format!("--shell-job --action-script {}", script.display()),
        format!("--libdir {}", fx.dir().display()),
    ] {
        std::fs::write(
            images.join("cudackpt-manifest.json"),
            forged_manifest(&images, &["--tcp-established", &planted]),
        )
        .expect("forge");
        let (code, refused) = undump(&fx, &images, &criu, &[]);
        let message = crate::disk::refusal_message(code, &refused, "manifest");
        assert!(
            message.contains("--tcp-established, --network-lock skip"),
            "{message}"
        );
        assert!(!marker.exists(), "{planted}: the action script ran");
    }
    assert!(!alive(job.0), "nothing restored");
}

/// A restore that fails with a pidfile naming another process tree (put
/// there while CRIU ran) kills what CRIU restored and nothing else.
#[test]
fn a_failed_restore_never_kills_a_tree_a_pidfile_names() {
    let Some(criu) = criu() else { return };
    if !running_as_root() {
        return;
    }
    let fx = Fixture::new();
    let job = Orphan::cuda(&fx);
    let images = fx.dir().join("images");
    dumped_and_gone(&fx, &images, &criu, &job);
    let mut victim = Command::new("sleep").arg("600").spawn().expect("sleep");
    let planted = format!("restore.pid={}", victim.id());
    let watcher = swapper(
        &fx,
        &images,
        ("restore.log", "create"),
        ("plant", &planted),
        true,
    );
    let (code, failed) = undump_with(
        &fx,
        &images,
        &criu,
        &[("FAKE_CUDA_INJECT", "restore=error:2")],
    );
    assert!(swapped(watcher), "the pidfile was never planted");
    assert_eq!(
        (code, failed["error"]["kind"].as_str()),
        (1, Some("criu_failed")),
        "{failed:#}"
    );
    assert!(
        alive(victim.id() as i32),
        "the planted PID was killed: {failed:#}"
    );
    wait_until("the half-restored job to be gone", || !alive(job.0));
    let _ = victim.kill();
    let _ = victim.wait();
}

/// A CRIU of root's in a directory the user owns is never run by a root
/// dump: they could put another binary at its path (its `--version` would
/// already run as root).
#[test]
fn a_criu_in_a_directory_a_user_owns_is_never_run() {
    if !running_as_root() {
        return;
    }
    let fx = Fixture::new();
    let job = Orphan::cuda(&fx);
    let home = attackers_home(&fx);
    let bin = attackers_dir(&home, "bin");
    let marker = fx.dir().join("owned");
    let criu = bin.join("criu");
    std::fs::write(
        &criu,
        format!(
            "#!/bin/sh\nid -u > {}\necho 'Version: 4.2.1'\n",
            marker.display()
        ),
    )
    .expect("write");
    std::fs::set_permissions(&criu, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let (code, refused) = dump(&fx, &fx.dir().join("images"), &criu, job.0, &[]);
    let message = crate::disk::refusal_message(code, &refused, "criu_unusable");
    assert!(message.contains("uid 65534"), "{message}");
    assert!(!marker.exists(), "the user's binary ran as root");
}

/// Another user's job, dumped by a root cudackpt without CAP_SYS_RESOURCE
/// (root in a container whose bounding set drops it, as on this project's
/// machines; here dropped by setpriv, so the test means the same
/// everywhere): CRIU cannot read the job's resource limits, which is known
/// before any change. Forced, CRIU fails ("Can't get rlimit"); not forced,
/// refused with no driver call.
#[test]
fn another_users_job_without_cap_sys_resource_is_refused_before_any_change() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let job = Orphan::launch(
        &fx,
        "setpriv --reuid 65534 --regid 65534 --clear-groups setsid sleep 600 </dev/null >/dev/null 2>&1",
    );
    wait_until("the job to run as nobody", || {
        std::fs::read_to_string(format!("/proc/{}/status", job.0)).is_ok_and(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.contains("65534"))
        })
    });
    let without_the_capability = |images: &Path, extra: &[&str]| {
        let mut args = vec![
            "--bounding-set".to_string(),
            "-sys_resource".to_string(),
            crate::support::cudackpt_bin().display().to_string(),
            "--json".to_string(),
            "dump".to_string(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        args.extend([
            "--to".to_string(),
            images.display().to_string(),
            "--criu".to_string(),
            criu.display().to_string(),
            job.0.to_string(),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = fx
            .command_for(Path::new("/usr/bin/setpriv"), &args)
            .output()
            .expect("setpriv runs");
        (
            output.status.code().unwrap_or(-1),
            crate::disk::document(&output),
        )
    };
    // The harm: forced, CRIU fails after the pre-dump.
    let (code, failed) = without_the_capability(&fx.dir().join("forced"), &["--force"]);
    assert_eq!(
        (code, failed["error"]["kind"].as_str()),
        (1, Some("criu_failed")),
        "{failed:#}"
    );
    assert!(
        failed["criu_errors"].to_string().contains("rlimit"),
        "{failed:#}"
    );
    // Not forced: refused before any change.
    fx.take_calls();
    let (code, refused) = without_the_capability(&fx.dir().join("refused"), &[]);
    let message = crate::disk::refusal_message(code, &refused, "refused");
    assert!(
        message.contains("CAP_SYS_RESOURCE") && message.contains("uid 65534"),
        "{message}"
    );
    fx.assert_no_calls("a refused dump");
    assert!(alive(job.0));
}

/// The stage end to end with CRIU 4.2.1: an undump that gives CRIU a
/// private stage (links to the images held, as for images another user
/// could have written; here forced on root's own, since no machine of this
/// project lets root dump another user's job) restores the job, and CRIU
/// writes its log and stats in the stage, nothing in the images directory.
#[test]
fn criu_restores_through_a_private_stage_of_the_images() {
    let Some(criu) = criu() else { return };
    let fx = Fixture::new();
    let job = Orphan::cuda(&fx);
    let images = fx.dir().join("images");
    dumped_and_gone(&fx, &images, &criu, &job);
    let before = names(&images);
    let (code, undumped) =
        crate::disk::undump_with(&fx, &images, &criu, &[("CUDACKPT_DEBUG_STAGE_ALWAYS", "1")]);
    assert_eq!(code, 0, "{undumped:#}");
    assert!(alive(job.0));
    assert_eq!(fx.fake_state(job.0), "running", "{undumped:#}");
    assert_eq!(
        names(&images),
        before,
        "CRIU wrote nothing beside the images"
    );
    let log = PathBuf::from(undumped["criu_log"].as_str().expect("a log"));
    assert!(
        log.starts_with("/run/cudackpt/undumps"),
        "{}",
        log.display()
    );
    let stage = log.parent().expect("the stage");
    assert_eq!(
        names(stage),
        ["restore.log"],
        "the stage keeps only the log"
    );
    std::fs::remove_dir_all(stage).expect("clean up");
}
