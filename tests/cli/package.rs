//! The Debian package (`scripts/build-deb`, from `[package.metadata.deb]`),
//! built around the test binary and inspected with `dpkg-deb`: what it
//! installs where, with which modes and owner, and what it never installs
//! (`cuda-checkpoint`: the compat link is opt-in, never NVIDIA's file).

use std::path::Path;
use std::process::Command;

use crate::support::{cudackpt_bin, workspace};

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `scripts/build-deb` around `binary`, into `out`, with `extra` options:
/// the path of the .deb it wrote.
fn build_deb(binary: &Path, out: &Path, extra: &[&str]) -> String {
    let built = Command::new(workspace().join("scripts").join("build-deb"))
        .arg("--binary")
        .arg(binary)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .expect("scripts/build-deb runs");
    assert!(
        built.status.success(),
        "build-deb: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    String::from_utf8_lossy(&built.stdout).trim().to_string()
}

#[test]
fn the_debian_package_installs_the_tool_its_docs_and_no_compat_link() {
    if !have("dpkg-deb") {
        crate::support::prerequisite("build a Debian package (no dpkg-deb here)", false);
        return;
    }
    let out = tempfile::tempdir().expect("tempdir");
    let deb = build_deb(&cudackpt_bin(), out.path(), &["--compress", "none"]);
    assert!(deb.ends_with(".deb"), "{deb}");

    let listing = Command::new("dpkg-deb")
        .args(["-c", &deb])
        .output()
        .expect("dpkg-deb -c");
    let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
    // "mode owner size date time path", one file a line.
    let entry = |path: &str| -> Option<(String, String)> {
        listing.lines().find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.last() == Some(&path)).then(|| (fields[0].to_string(), fields[1].to_string()))
        })
    };
    let expect = |path: &str, mode: &str| {
        let (got, owner) = entry(path).unwrap_or_else(|| panic!("{path} missing:\n{listing}"));
        assert_eq!(
            (got.as_str(), owner.as_str()),
            (mode, "root/root"),
            "{path}"
        );
    };
    expect("./usr/bin/cudackpt", "-rwxr-xr-x");
    expect("./usr/lib/tmpfiles.d/cudackpt.conf", "-rw-r--r--");
    expect(
        "./usr/share/bash-completion/completions/cudackpt",
        "-rw-r--r--",
    );
    expect("./usr/share/zsh/vendor-completions/_cudackpt", "-rw-r--r--");
    expect(
        "./usr/share/fish/vendor_completions.d/cudackpt.fish",
        "-rw-r--r--",
    );
    expect(
        "./usr/share/cudackpt/schema/process-command.schema.json",
        "-rw-r--r--",
    );
    expect("./usr/share/doc/cudackpt/copyright", "-rw-r--r--");
    for page in std::fs::read_dir(workspace().join("man")).expect("man/") {
        let name = page
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        expect(&format!("./usr/share/man/man1/{name}.gz"), "-rw-r--r--");
    }
    assert!(
        !listing.contains("cuda-checkpoint"),
        "no compat link:\n{listing}"
    );
    expect("./usr/share/doc/cudackpt/benchmarks.md", "-rw-r--r--");
    // The guide and the documents beside it, as installed: no link dead
    // (the guide's links to ../benchmarks.md and ../../schema/ were).
    let root = tempfile::tempdir().expect("tempdir");
    let unpacked = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(root.path())
        .status()
        .expect("dpkg-deb -x");
    assert!(unpacked.success());
    let checked = Command::new(workspace().join("scripts/doc-links"))
        .arg("check")
        .arg(root.path())
        .arg("usr/share/doc/cudackpt")
        .output()
        .expect("scripts/doc-links check");
    assert!(
        checked.status.success(),
        "dead links in the package's docs:\n{}",
        String::from_utf8_lossy(&checked.stdout)
    );
    let json = std::fs::read_to_string(root.path().join("usr/share/doc/cudackpt/guide/json.md"))
        .expect("json.md");
    assert!(
        json.contains("](../../../cudackpt/schema"),
        "the guide's schema link points at the installed schemas"
    );
    assert!(!listing.contains("/usr/local"), "{listing}");

    let tmpfiles = std::fs::read_to_string(workspace().join("packaging/tmpfiles.d-cudackpt.conf"))
        .expect("tmpfiles entry");
    assert!(
        tmpfiles
            .lines()
            .any(|l| l == "d /run/cudackpt 0700 root root -"),
        "{tmpfiles}"
    );
    let field = |name: &str| {
        let out = Command::new("dpkg-deb")
            .args(["-f", &deb, name])
            .output()
            .expect("dpkg-deb -f");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(field("Package"), "cudackpt");
    assert_eq!(field("Version"), env!("CARGO_PKG_VERSION"));
    assert_eq!(field("Section"), "admin");
    expect("./usr/share/doc/cudackpt/changelog.gz", "-rw-r--r--");
    expect("./usr/share/lintian/overrides/cudackpt", "-rw-r--r--");
    // The postinst makes /run/cudackpt at install, as the tmpfiles entry
    // says.
    let control = tempfile::tempdir().expect("tempdir");
    let extracted = Command::new("dpkg-deb")
        .args(["-e", &deb])
        .arg(control.path())
        .status()
        .expect("dpkg-deb -e");
    assert!(extracted.success());
    let postinst = std::fs::read_to_string(control.path().join("postinst")).expect("a postinst");
    assert!(
        postinst.contains("systemd-tmpfiles --create cudackpt.conf"),
        "{postinst}"
    );
}

/// The Debian changelog names the version the crate has, first.
#[test]
fn the_debian_changelog_is_for_this_version() {
    let changelog = std::fs::read_to_string(workspace().join("packaging/changelog"))
        .expect("packaging/changelog");
    let first = changelog.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!("cudackpt ({}) ", env!("CARGO_PKG_VERSION"))),
        "packaging/changelog starts {first:?}: add an entry for this version"
    );
    let copyright = std::fs::read_to_string(workspace().join("packaging/copyright"))
        .expect("packaging/copyright");
    assert!(copyright
        .starts_with("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"));
    assert!(copyright.contains("/usr/share/common-licenses/Apache-2.0"));
}

/// lintian (Debian's package checker) finds no error in the package, as
/// released: the binary stripped (the release profile strips), the data
/// compressed. CI installs lintian; elsewhere it is a prerequisite.
#[test]
fn lintian_finds_no_error_in_the_package() {
    if !have("dpkg-deb")
        || !crate::support::prerequisite("run lintian (not installed here)", have("lintian"))
    {
        return;
    }
    let work = tempfile::tempdir().expect("tempdir");
    let binary = work.path().join("cudackpt");
    std::fs::copy(cudackpt_bin(), &binary).expect("copy the binary");
    let stripped = Command::new("strip").arg(&binary).status();
    if !crate::support::prerequisite(
        "strip a binary (binutils)",
        stripped.is_ok_and(|s| s.success()),
    ) {
        return;
    }
    let deb = build_deb(&binary, work.path(), &[]);
    let checked = Command::new("lintian")
        .args(["--fail-on", "error", "-I", "--pedantic", &deb])
        .output()
        .expect("lintian runs");
    let said = String::from_utf8_lossy(&checked.stdout).into_owned();
    let errors: Vec<&str> = said.lines().filter(|l| l.starts_with("E: ")).collect();
    assert!(
        checked.status.success() && errors.is_empty(),
        "lintian: {errors:?}\n{said}{}",
        String::from_utf8_lossy(&checked.stderr)
    );
}

/// The package says what the binary links besides libc (libgcc_s, for
/// unwinding) and what it works with (CRIU); it lands in
/// `$CARGO_TARGET_DIR/debian` when cargo builds elsewhere, and a binary
/// that is not there is an error, never an older file packaged in silence.
#[test]
fn the_package_names_its_dependencies_and_follows_cargo_s_target_dir() {
    if !have("dpkg-deb") {
        crate::support::prerequisite("build a Debian package (no dpkg-deb here)", false);
        return;
    }
    let target = tempfile::tempdir().expect("tempdir");
    let built = Command::new(workspace().join("scripts").join("build-deb"))
        .args(["--compress", "none", "--binary"])
        .arg(cudackpt_bin())
        .env("CARGO_TARGET_DIR", target.path())
        .output()
        .expect("scripts/build-deb runs");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let deb = String::from_utf8_lossy(&built.stdout).trim().to_string();
    assert!(
        Path::new(&deb).starts_with(target.path().join("debian")),
        "{deb} is not under $CARGO_TARGET_DIR/debian"
    );
    let fields = Command::new("dpkg-deb")
        .args(["-f", &deb, "Depends", "Suggests", "Description"])
        .output()
        .expect("dpkg-deb -f");
    let fields = String::from_utf8_lossy(&fields.stdout);
    assert!(
        fields.contains("Depends: libc6 (>= 2.34), libgcc-s1"),
        "{fields}"
    );
    // Debian 12's criu cannot start on new kernels: the package does not
    // point at it, and says the way that works.
    assert!(!fields.contains("Suggests: criu"), "{fields}");
    assert!(fields.contains("scripts/build-criu"), "{fields}");

    let missing = Command::new(workspace().join("scripts").join("build-deb"))
        .args(["--binary", "/nonexistent/cudackpt", "--out"])
        .arg(target.path())
        .output()
        .expect("scripts/build-deb runs");
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("no binary at /nonexistent/cudackpt"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
}
