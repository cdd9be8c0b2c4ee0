//! The Debian package (`scripts/build-deb`, from `[package.metadata.deb]`),
//! built around the test binary and inspected with `dpkg-deb`: what it
//! installs where, with which modes and owner, and what it never installs
//! (`cuda-checkpoint`: the compat link is opt-in, never NVIDIA's file).

use std::process::Command;

use crate::support::{cudackpt_bin, workspace};

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn the_debian_package_installs_the_tool_its_docs_and_no_compat_link() {
    if !have("dpkg-deb") {
        crate::support::prerequisite("build a Debian package (no dpkg-deb here)", false);
        return;
    }
    let out = tempfile::tempdir().expect("tempdir");
    let built = Command::new(workspace().join("scripts").join("build-deb"))
        .arg("--binary")
        .arg(cudackpt_bin())
        .arg("--out")
        .arg(out.path())
        .args(["--compress", "none"])
        .output()
        .expect("scripts/build-deb runs");
    assert!(
        built.status.success(),
        "build-deb: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let deb = String::from_utf8_lossy(&built.stdout).trim().to_string();
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
}
