//! `doctor`: every check, in JSON and for people; exit 0 only when
//! checkpointing can work, exit 7 when the driver cannot be used.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use crate::support::{fake_libcuda, fake_uuid, running_as_root, texts, Fixture, NOBODY};
use crate::wire::{CheckStatus, DoctorDoc};

/// The checks that do not need the driver, always present.
const HOST_CHECKS: [&str; 4] = ["NVML", "privileges", "ptrace scope", "criu"];

/// With the fake driver nothing fails: a user without privileges can still
/// checkpoint their own processes, which doctor says as a warning.
fn expected_status() -> i32 {
    0
}

#[test]
fn doctor_with_the_fake_driver_passes() {
    let fx = Fixture::with_devices("GPU A:1000,GPU B:2000");
    let doc: DoctorDoc = fx.json(&["doctor"], expected_status());
    let fake = fake_libcuda().to_string_lossy().into_owned();
    let library = doc.check_named("driver library");
    assert_eq!(
        (library.status, library.detail.as_str()),
        (CheckStatus::Ok, fake.as_str())
    );
    let version = doc.check_named("driver version");
    assert_eq!(
        (version.status, version.detail.as_str()),
        (CheckStatus::Ok, "CUDA 13.0")
    );
    assert_eq!(doc.check_named("checkpoint API").status, CheckStatus::Ok);
    let gpus = doc.check_named("GPUs");
    assert_eq!(gpus.status, CheckStatus::Ok);
    assert!(gpus.detail.starts_with("2: 0 GPU A; 1 GPU B"), "{gpus:?}");
    for name in HOST_CHECKS {
        doc.check_named(name);
    }
    assert_eq!(doc.driver.path.as_deref(), Some(fake.as_str()));
    assert_eq!(doc.driver.cuda_version.as_deref(), Some("13.0"));
    let uuids: Vec<&str> = doc.gpus.iter().map(|g| g.uuid.as_str()).collect();
    assert_eq!(
        uuids,
        [
            format!("GPU-{}", fake_uuid(0)),
            format!("GPU-{}", fake_uuid(1))
        ]
    );
    assert_eq!(doc.gpus[1].name, "GPU B");
    assert_eq!(doc.gpus[1].memory_total_bytes, 2000 << 20);
    assert_eq!(doc.gpus[1].pci_bus_id.as_deref(), Some("00000000:11:00.0"));
    fx.assert_no_calls("doctor");
}

#[test]
fn doctor_for_people_lists_every_check_and_a_verdict() {
    let fx = Fixture::new();
    let output = fx
        .cudackpt(&["doctor"])
        .assert()
        .code(expected_status())
        .get_output()
        .clone();
    let (stdout, stderr) = texts(&output);
    assert_eq!(stderr, "");
    for name in ["driver library", "driver version", "checkpoint API", "GPUs"]
        .into_iter()
        .chain(HOST_CHECKS)
    {
        assert!(stdout.contains(name), "{name}:\n{stdout}");
    }
    assert!(
        stdout.ends_with("checkpointing can work on this host\n"),
        "{stdout}"
    );
}

#[test]
fn doctor_without_a_driver_exits_7_and_still_checks_the_host() {
    let fx = Fixture::new();
    let doc: DoctorDoc = fx.json(&["--libcuda", "/nonexistent/libcuda.so", "doctor"], 7);
    let library = doc.check_named("driver library");
    assert_eq!(library.status, CheckStatus::Fail);
    assert!(
        library.detail.contains("/nonexistent/libcuda.so"),
        "{library:?}"
    );
    assert!(library.hint.is_some());
    for name in HOST_CHECKS {
        doc.check_named(name);
    }
    assert!(doc.driver.path.is_none() && doc.gpus.is_empty());

    let output = fx
        .cudackpt(&["--libcuda", "/nonexistent/libcuda.so", "doctor"])
        .assert()
        .code(7)
        .get_output()
        .clone();
    let (stdout, _) = texts(&output);
    for name in ["driver library"].into_iter().chain(HOST_CHECKS) {
        assert!(stdout.contains(name), "{name}:\n{stdout}");
    }
    assert!(
        stdout.contains("FAIL") && stdout.contains("fix the checks marked FAIL"),
        "{stdout}"
    );
}

#[test]
fn doctor_with_an_old_driver_names_what_is_missing() {
    let fx = Fixture::new();
    let library = fx.compile_library(
        "olddriver",
        "int cuDriverGetVersion(int *v) { *v = 12020; return 0; }\n",
    );
    let doc: DoctorDoc = fx.json(&["--libcuda", &library.to_string_lossy(), "doctor"], 7);
    assert_eq!(doc.check_named("driver library").status, CheckStatus::Ok);
    assert_eq!(doc.check_named("driver version").detail, "CUDA 12.2");
    let api = doc.check_named("checkpoint API");
    assert_eq!(api.status, CheckStatus::Fail);
    assert!(api.detail.contains("cuCheckpointProcessLock"), "{api:?}");
    assert!(
        api.hint.as_deref().is_some_and(|h| h.contains("570")),
        "{api:?}"
    );
    assert_eq!(doc.driver.cuda_version.as_deref(), Some("12.2"));
}

#[test]
fn doctor_weighs_a_cgroups_memory_limits_against_the_gpu_memory_in_it() {
    let fx = Fixture::new().with_nvml().with_cgroup_tree();
    let target = fx.cuda_target();
    fx.set_footprints(&[(target.pid, 4096)]);
    let cgroup = fx.cgroup_of(target.pid, 1024);
    fs::write(cgroup.join("cgroup.procs"), format!("{}\n", target.pid)).expect("procs");
    fs::write(cgroup.join("memory.max"), format!("{}\n", 2u64 << 30)).expect("max");
    let path = cgroup.to_string_lossy().into_owned();

    let doc: DoctorDoc = fx.json(&["doctor", "--cgroup", &path], expected_status());
    let check = doc.check_named("cgroup memory");
    assert_eq!(check.status, CheckStatus::Warn, "{check:?}");
    assert!(
        check
            .detail
            .contains("memory.max 2048 MiB, memory.high none, 1024 MiB in use")
            && check.detail.contains("1 CUDA process(es) hold 4096 MiB"),
        "{check:?}"
    );
    assert!(
        check.hint.as_deref().is_some_and(
            |h| h.contains("would be refused (exit 8)") && h.contains("1024 MiB of room")
        ),
        "{check:?}"
    );

    fs::write(cgroup.join("memory.max"), format!("{}\n", 8u64 << 30)).expect("max");
    let doc: DoctorDoc = fx.json(&["doctor", "--cgroup", &path], expected_status());
    assert_eq!(doc.check_named("cgroup memory").status, CheckStatus::Ok);

    let missing = fx
        .dir()
        .join("cgroup/no-such-pod")
        .to_string_lossy()
        .into_owned();
    let doc: DoctorDoc = fx.json(&["doctor", "--cgroup", &missing], 2);
    assert_eq!(doc.check_named("cgroup memory").status, CheckStatus::Fail);
    fx.assert_no_calls("doctor --cgroup");
}

#[test]
fn doctor_without_nvml_says_the_gpu_footprint_of_a_cgroup_is_unknown() {
    let fx = Fixture::new().with_cgroup_tree();
    let target = fx.cuda_target();
    let cgroup = fx.cgroup_of(target.pid, 0);
    fs::write(cgroup.join("cgroup.procs"), format!("{}\n", target.pid)).expect("procs");
    let doc: DoctorDoc = fx.json(
        &["doctor", "--cgroup", &cgroup.to_string_lossy()],
        expected_status(),
    );
    let check = doc.check_named("cgroup memory");
    assert_eq!(check.status, CheckStatus::Info);
    assert!(
        check.detail.contains("GPU memory of its processes unknown"),
        "{check:?}"
    );
    assert!(
        check
            .hint
            .as_deref()
            .is_some_and(|h| h.contains("NVML is not available")),
        "{check:?}"
    );
}

#[test]
fn doctor_checks_nvml_and_what_depends_on_it() {
    let doc: DoctorDoc = Fixture::new().with_nvml().json(&["doctor"], 0);
    let nvml = doc.check_named("NVML");
    assert_eq!(nvml.status, CheckStatus::Ok, "{nvml:?}");
    assert_eq!(nvml.detail, "libnvidia-ml loaded (driver 580.159.04)");

    let doc: DoctorDoc = Fixture::new().json(&["doctor"], 0);
    let nvml = doc.check_named("NVML");
    assert_eq!(nvml.status, CheckStatus::Warn, "{nvml:?}");
    assert!(nvml.detail.contains("NVML is not available"), "{nvml:?}");
    assert!(
        nvml.hint
            .as_deref()
            .is_some_and(|h| h.contains("--verify") && h.contains("host memory")),
        "{nvml:?}"
    );
}

/// Debian 12's CRIU answers `--version` on a kernel from 6.13 on, and
/// cannot start there: doctor runs `criu check` and says so, with how to
/// build one that starts.
#[test]
fn doctor_says_when_criu_cannot_start_here() {
    let fx = Fixture::new();
    let dir = fx.dir().join("criu-3.17");
    fs::create_dir_all(&dir).expect("dir");
    let criu = dir.join("criu");
    fs::write(
        &criu,
        "#!/bin/sh
[ \"$1\" = --version ] && echo 'Version: 3.17.1' && exit 0
echo 'Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds' >&2
echo 'Error (criu/crtools.c:260): Could not initialize kernel features detection.' >&2
exit 1
",
    )
    .expect("criu");
    fs::set_permissions(&criu, fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = format!("{}:/usr/bin:/bin", dir.display());
    let doc: DoctorDoc =
        crate::support::check_document(fx.cudackpt(&["--json", "doctor"]).env("PATH", path), 0);
    let check = doc.check_named("criu");
    assert_eq!(check.status, CheckStatus::Warn, "{check:?}");
    assert!(
        check.detail.contains("cannot start on this kernel")
            && check.detail.contains("Unexpected rt vDSO area bounds"),
        "{check:?}"
    );
    assert!(
        check
            .hint
            .as_deref()
            .is_some_and(|h| h.contains("scripts/build-criu")),
        "{check:?}"
    );
}

/// A fake `criu` in a directory of its own that says `said` to
/// `--version` and passes `criu check`; the directory.
fn fake_criu(fx: &Fixture, name: &str, said: &str) -> std::path::PathBuf {
    let dir = fx.dir().join(name);
    fs::create_dir_all(&dir).expect("dir");
    let criu = dir.join("criu");
    fs::write(&criu, format!("#!/bin/sh\necho '{said}'\n")).expect("criu");
    fs::set_permissions(&criu, fs::Permissions::from_mode(0o755)).expect("chmod");
    dir
}

/// A `criu` on PATH is checked as `dump` would run it, against what the
/// CUDA plugin needs (4.x), and its whole version is said (4.2.1 was
/// reported as "4.2").
#[test]
fn doctor_checks_the_criu_version() {
    let fx = Fixture::new();
    for (said, status, hint) in [
        ("Version: 4.2.1", CheckStatus::Ok, None),
        ("Version: 3.19", CheckStatus::Warn, Some("4.0 or newer")),
        (
            "Version: 3.11",
            CheckStatus::Warn,
            Some("scripts/build-criu"),
        ),
        ("no version here", CheckStatus::Warn, Some("--criu PATH")),
    ] {
        let dir = fake_criu(&fx, &format!("criu-{}", said.len()), said);
        let path = format!("{}:/usr/bin:/bin", dir.display());
        let doc: DoctorDoc =
            crate::support::check_document(fx.cudackpt(&["--json", "doctor"]).env("PATH", path), 0);
        let check = doc.check_named("criu");
        assert_eq!(check.status, status, "{said}: {check:?}");
        if let Some(version) = said.strip_prefix("Version: ") {
            assert!(
                check.detail.contains(&format!("CRIU {version}")),
                "{check:?}"
            );
        }
        if let Some(hint) = hint {
            assert!(
                check.hint.as_deref().is_some_and(|h| h.contains(hint)),
                "{said}: {check:?}"
            );
        }
    }
}

/// `doctor --criu PATH` checks that CRIU, not the one on PATH, as `dump
/// --criu PATH` would; with none anywhere it leads to the one way that
/// works on a new kernel (`scripts/build-criu`), not to `apt install criu`.
#[test]
fn doctor_checks_the_criu_it_is_named_and_leads_to_one_that_starts() {
    let fx = Fixture::new();
    let on_path = fake_criu(&fx, "on-path", "Version: 3.19");
    let named = fake_criu(&fx, "named", "Version: 4.2.1").join("criu");
    let path = format!("{}:/usr/bin:/bin", on_path.display());
    let doc: DoctorDoc = crate::support::check_document(
        fx.cudackpt(&["--json", "doctor", "--criu", named.to_str().expect("utf-8")])
            .env("PATH", &path),
        0,
    );
    let check = doc.check_named("criu");
    assert_eq!(check.status, CheckStatus::Ok, "{check:?}");
    assert!(
        check.detail.contains(&named.display().to_string()) && check.detail.contains("4.2.1"),
        "{check:?}"
    );

    let missing = fx.dir().join("no-such-criu");
    let doc: DoctorDoc = crate::support::check_document(
        fx.cudackpt(&[
            "--json",
            "doctor",
            "--criu",
            missing.to_str().expect("utf-8"),
        ])
        .env("PATH", &path),
        0,
    );
    assert_eq!(
        doc.check_named("criu").status,
        CheckStatus::Warn,
        "{:?}",
        doc.check_named("criu")
    );

    let empty = fx.dir().join("empty-path");
    fs::create_dir_all(&empty).expect("dir");
    let doc: DoctorDoc =
        crate::support::check_document(fx.cudackpt(&["--json", "doctor"]).env("PATH", &empty), 0);
    let check = doc.check_named("criu");
    assert_eq!(check.status, CheckStatus::Info, "{check:?}");
    let hint = check.hint.clone().unwrap_or_default();
    assert!(
        hint.contains("scripts/build-criu") && hint.contains("3.17"),
        "{hint}"
    );
    assert!(!hint.contains("install CRIU 4.x"), "{hint}");
    assert!(crate::support::workspace()
        .join("scripts/build-criu")
        .is_file());
}

/// With no driver library anywhere, doctor leads to the tutorial, which
/// works without one (and names a file that is there).
#[test]
fn doctor_without_any_driver_leads_to_the_tutorial() {
    let fx = Fixture::new();
    let output = fx
        .cudackpt(&["--json", "doctor"])
        .env_remove("CUDACKPT_LIBCUDA")
        .env("LD_LIBRARY_PATH", fx.dir())
        .output()
        .expect("doctor");
    let doc: DoctorDoc = crate::support::parse_one_document(&output.stdout);
    let library = doc.check_named("driver library");
    if library.status != CheckStatus::Fail {
        crate::support::prerequisite("run on a host without libcuda", false);
        return;
    }
    assert_eq!(output.status.code(), Some(7));
    let hint = library.hint.clone().unwrap_or_default();
    assert!(
        hint.contains("docs/guide/tutorial.md") && hint.contains("fake driver"),
        "{hint}"
    );
    assert!(crate::support::workspace()
        .join("docs/guide/tutorial.md")
        .is_file());
    // A library named on purpose is not a host without a driver.
    let doc: DoctorDoc = fx.json(&["--libcuda", "/nonexistent/libcuda.so", "doctor"], 7);
    let hint = doc
        .check_named("driver library")
        .hint
        .clone()
        .unwrap_or_default();
    assert!(!hint.contains("tutorial"), "{hint}");
}

/// A user's own runtime directory for nobody (0700, theirs).
fn runtime_of_nobody(fx: &Fixture) -> std::path::PathBuf {
    let runtime = fx.dir().join("runtime-nobody");
    fs::create_dir_all(&runtime).expect("runtime dir");
    std::os::unix::fs::chown(&runtime, Some(NOBODY), Some(NOBODY)).expect("chown");
    fs::set_permissions(&runtime, fs::Permissions::from_mode(0o700)).expect("chmod");
    runtime
}

/// A user other than root without `XDG_RUNTIME_DIR` (a cron job, `su`
/// without `-l`): doctor once said "checkpointing can work on this host"
/// and the user's next `suspend` of their own process failed (exit 1, the
/// lock directory). The harm first; then doctor, which now checks the
/// lock and record directories as that user, fails and says what to set;
/// with a runtime directory of their own, doctor and suspend both work.
#[test]
fn doctor_checks_the_directories_a_user_s_own_commands_need() {
    let fx = Fixture::new();
    let Some((bin, state, target)) = fx.nobody_with_own_target() else {
        return;
    };
    let pid = target.id().to_string();
    let suspend = fx.run_as_nobody(&bin, &["suspend", &pid], &state, &[]);
    assert_eq!(suspend.status.code(), Some(1), "the harm: {suspend:?}");

    let doctor = fx.run_as_nobody(&bin, &["--json", "doctor"], &state, &[]);
    assert_eq!(doctor.status.code(), Some(1), "{doctor:?}");
    let doc: DoctorDoc = crate::support::parse_one_document(&doctor.stdout);
    for name in ["lock directory", "record directory"] {
        let check = doc.check_named(name);
        assert_eq!(check.status, CheckStatus::Fail, "{check:?}");
        assert!(
            check
                .hint
                .as_deref()
                .is_some_and(|h| h.contains("XDG_RUNTIME_DIR")),
            "{check:?}"
        );
    }

    let runtime = runtime_of_nobody(&fx);
    let env = [("XDG_RUNTIME_DIR", runtime.as_os_str())];
    let doctor = fx.run_as_nobody(&bin, &["--json", "doctor"], &state, &env);
    assert_eq!(doctor.status.code(), Some(0), "{doctor:?}");
    let doc: DoctorDoc = crate::support::parse_one_document(&doctor.stdout);
    for name in ["lock directory", "record directory"] {
        assert_eq!(
            doc.check_named(name).status,
            CheckStatus::Ok,
            "{:?}",
            doc.check_named(name)
        );
    }
    for command in ["suspend", "resume"] {
        let output = fx.run_as_nobody(&bin, &[command, &pid], &state, &env);
        assert_eq!(output.status.code(), Some(0), "{command}: {output:?}");
    }
}

/// A user without privileges is told what they can do: their own
/// processes. As root, doctor runs as nobody; otherwise as this user.
#[test]
fn doctor_tells_an_unprivileged_user_what_they_can_do() {
    let fx = Fixture::new();
    let output = if running_as_root() {
        let bin = fx.world_runnable_cudackpt();
        let state = fx.shared_state();
        let runtime = runtime_of_nobody(&fx);
        fx.run_as_nobody(
            &bin,
            &["--json", "doctor"],
            &state,
            &[("XDG_RUNTIME_DIR", runtime.as_os_str())],
        )
    } else if crate::support::privileged() {
        crate::support::prerequisite("drop CAP_SYS_PTRACE as this user", false);
        return;
    } else {
        fx.cudackpt(&["--json", "doctor"]).output().expect("doctor")
    };
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let doc: DoctorDoc = crate::support::parse_one_document(&output.stdout);
    let check = doc.check_named("privileges");
    assert_eq!(check.status, CheckStatus::Warn, "{check:?}");
    assert!(
        check
            .detail
            .contains("can checkpoint its own processes only"),
        "{check:?}"
    );
}
