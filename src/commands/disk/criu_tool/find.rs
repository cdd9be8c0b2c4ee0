//! Which CRIU runs a dump or an undump: `--criu PATH`, else the first
//! `criu` on `PATH`; its version read from `criu --version`, and `criu
//! check` run to see that it can start on this kernel. As root the binary
//! must be owned by root and writable by nobody else: a CRIU anyone could
//! replace would run as root with the job's memory in hand.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The oldest CRIU cudackpt drives: action scripts with
/// `CRTOOLS_INIT_PID` and `--network-lock skip` (3.16).
pub const OLDEST: (u32, u32) = (3, 16);

/// A CRIU found and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Criu {
    pub path: PathBuf,
    /// `4.2.1`, as `criu --version` says it.
    pub version: String,
}

/// Why no CRIU can be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CriuUnusable {
    #[error("no `criu` on PATH")]
    NotFound,
    #[error("{path}: {why}")]
    Untrusted { path: PathBuf, why: String },
    #[error("{path} did not say its version ({why})")]
    NoVersion { path: PathBuf, why: String },
    #[error("{path} is CRIU {version}; cudackpt needs {}.{} or newer", OLDEST.0, OLDEST.1)]
    TooOld { path: PathBuf, version: String },
    #[error("{path} (CRIU {version}) cannot start on this kernel: `criu check` says {why}")]
    CannotStart {
        path: PathBuf,
        version: String,
        why: String,
    },
}

/// How to get a CRIU that starts here.
pub const BUILD_HINT: &str = "build CRIU 4.2.1 or newer from source: `scripts/build-criu` in cudackpt's source does it (Debian 12's `apt install criu` gives 3.17, which cannot start on kernels from 6.13 on; the guide's Install chapter says more), then name it with --criu PATH or put it first on PATH";

impl CriuUnusable {
    /// What to do about it.
    pub fn hint(&self) -> &'static str {
        match self {
            CriuUnusable::NotFound | CriuUnusable::CannotStart { .. } => BUILD_HINT,
            CriuUnusable::Untrusted { .. } => {
                "use a CRIU that only root can replace: owned by root and writable by nobody else, in directories that are too (chown root; chmod go-w)"
            }
            CriuUnusable::NoVersion { .. } => {
                "name a working CRIU binary with --criu PATH (`criu --version` must answer)"
            }
            CriuUnusable::TooOld { .. } => BUILD_HINT,
        }
    }
}

/// [`find`] on this process's `PATH`.
pub fn find_on_path(named: Option<&Path>) -> Result<Criu, CriuUnusable> {
    let path = crate::environment::text(crate::environment::PATH)
        .ok()
        .flatten();
    find(named, path.as_deref())
}

/// Finds and checks CRIU: `named`, else the first `criu` on `search_path`.
pub fn find(named: Option<&Path>, search_path: Option<&str>) -> Result<Criu, CriuUnusable> {
    let path = match named {
        Some(path) => path.to_path_buf(),
        None => on_path(search_path.unwrap_or_default()).ok_or(CriuUnusable::NotFound)?,
    };
    trusted(&path)?;
    let version = version_of(&path)?;
    match parse_version(&version) {
        Some(found) if found >= OLDEST => {}
        _ => return Err(CriuUnusable::TooOld { path, version }),
    }
    match starts(&path) {
        Ok(()) => Ok(Criu { path, version }),
        Err(why) => Err(CriuUnusable::CannotStart { path, version, why }),
    }
}

/// What says that CRIU could not even start: its detection of the
/// kernel's features failed (a CRIU older than the kernel: 3.17 on 6.13
/// and later reads the vDSO wrongly), so every dump and restore would stop
/// there too.
const KERNDAT_FAILED: &str = "Could not initialize kernel features detection";

/// Runs `criu check` (about 70 ms), in the caller's environment as
/// [`version_of`] does: `Err` with CRIU's words when it cannot start here.
/// A check that fails for another reason (a feature this kernel lacks)
/// is no refusal: dumps that do not need that feature still work.
pub fn starts(path: &Path) -> Result<(), String> {
    let out = Command::new(path)
        .arg("check")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("it could not be run ({e})"))?;
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    match cannot_start(out.status.success(), &said) {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

/// Why `criu check` shows that CRIU cannot start, from what it printed
/// (pure): its error lines up to the failed feature detection, without
/// their source positions, made printable and cut.
pub fn cannot_start(succeeded: bool, said: &str) -> Option<String> {
    if succeeded || !said.contains(KERNDAT_FAILED) {
        return None;
    }
    let errors: Vec<String> = said
        .lines()
        .filter_map(|line| line.trim().strip_prefix("Error ("))
        .filter_map(|rest| rest.split_once("): ").map(|(_, text)| text.trim()))
        // A helper's exit says nothing of why.
        .filter(|text| !text.starts_with("exited, status="))
        .take(3)
        .map(|text| {
            crate::targets::name::printable(text)
                .chars()
                .take(200)
                .collect()
        })
        .collect();
    Some(if errors.is_empty() {
        format!("{KERNDAT_FAILED:?}")
    } else {
        format!("\"{}\"", errors.join("; "))
    })
}

/// The first executable `criu` among the directories of `search_path`
/// (absolute ones only: a relative entry would depend on where cudackpt
/// was started).
fn on_path(search_path: &str) -> Option<PathBuf> {
    search_path
        .split(':')
        .filter(|dir| dir.starts_with('/'))
        .map(|dir| Path::new(dir).join("criu"))
        .find(|candidate| {
            candidate
                .metadata()
                .is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
        })
}

/// As root, the binary and every directory on the way to it must be root's
/// and writable by nobody else.
fn trusted(path: &Path) -> Result<(), CriuUnusable> {
    let untrusted = |why: String| CriuUnusable::Untrusted {
        path: path.to_path_buf(),
        why,
    };
    let metadata = path.metadata().map_err(|e| untrusted(e.to_string()))?;
    if !metadata.is_file() {
        return Err(untrusted("not a regular file".into()));
    }
    let me = rustix::process::geteuid().as_raw();
    if me != 0 {
        return Ok(()); // without extra power, what the user names is theirs
    }
    judge(metadata.uid(), metadata.mode()).map_err(untrusted)?;
    // Root runs it by its path: nobody but root may be able to put another
    // binary there, through any directory on the way.
    let parent = path.parent().unwrap_or(Path::new("/"));
    let reached =
        crate::files::dir_chain::reach(parent, crate::files::dir_chain::Links::FollowedBeforeLast)
            .map_err(|why| untrusted(why.to_string()))?;
    let file = crate::files::dir_chain::FileStep {
        owner: metadata.uid(),
        mode: metadata.mode(),
    };
    match crate::files::dir_chain::writers(&reached.steps, &[file]) {
        crate::files::dir_chain::Writers::Root => Ok(()),
        crate::files::dir_chain::Writers::User(uid) => Err(untrusted(format!(
            "uid {uid} owns a directory on the way to it, and could put another binary there"
        ))),
        crate::files::dir_chain::Writers::Many(why) => Err(untrusted(format!(
            "{why}: others could put another binary there"
        ))),
    }
}

/// The verdict on a CRIU binary's owner and mode when cudackpt is root
/// (pure).
pub fn judge(owner: u32, mode: u32) -> Result<(), String> {
    if owner != 0 {
        return Err(format!("owned by UID {owner}, not root"));
    }
    if mode & 0o022 != 0 {
        return Err(format!("writable by others (mode {:o})", mode & 0o7777));
    }
    Ok(())
}

/// What `criu --version` says: the text after `Version:`. CRIU is asked
/// in the environment the dump or undump will run it in (the caller's own):
/// a CRIU built elsewhere finds its libraries through `LD_LIBRARY_PATH`,
/// and a check in an emptied environment refused a CRIU the run itself
/// could start. As root that environment is root's; a cudackpt holding
/// file capabilities raises no ambient ones, so the CRIU it starts, and
/// whatever library the caller names to it, runs with the caller's own
/// rights.
fn version_of(path: &Path) -> Result<String, CriuUnusable> {
    let no_version = |why: String| CriuUnusable::NoVersion {
        path: path.to_path_buf(),
        why,
    };
    let out = Command::new(path)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| no_version(e.to_string()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    version_line(&text).ok_or_else(|| {
        no_version(why_no_version(
            &text,
            &crate::commands::disk::criu_tool::run::in_words(out.status),
            &String::from_utf8_lossy(&out.stderr),
        ))
    })
}

/// Why `criu --version` gave no version, in a line: what it printed, or
/// how it ended and the first line it wrote to stderr (a library it could
/// not load, say), made printable and cut (pure).
fn why_no_version(printed: &str, ended: &str, complaint: &str) -> String {
    const CUT: usize = 200;
    let first = |text: &str| -> String {
        let line = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("");
        crate::targets::name::printable(line)
            .chars()
            .take(CUT)
            .collect()
    };
    let was = if ended.starts_with("killed") {
        "was "
    } else {
        ""
    };
    let ended = format!("{was}{ended}");
    match (first(printed), first(complaint)) {
        (out, _) if !out.is_empty() => format!("it printed {out:?}"),
        (_, err) if !err.is_empty() => format!("it {ended}, saying {err:?}"),
        _ => format!("it {ended} and printed nothing"),
    }
}

/// `4.2.1` from `Version: 4.2.1\nGitID: ...` (pure).
pub fn version_line(text: &str) -> Option<String> {
    text.lines()
        .find_map(|line| line.trim().strip_prefix("Version:"))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// `(major, minor)` of a CRIU version (pure).
pub fn parse_version(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split(['.', '-']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_read_from_criu_s_words() {
        assert_eq!(
            version_line("Version: 4.2.1\nGitID: v4.2.1\n").as_deref(),
            Some("4.2.1")
        );
        assert_eq!(version_line("Version: \n"), None);
        assert_eq!(version_line("criu 4\n"), None);
        assert_eq!(parse_version("3.17.1"), Some((3, 17)));
        assert_eq!(parse_version("4"), Some((4, 0)));
        assert_eq!(parse_version("x"), None);
        assert!(parse_version("3.15").unwrap() < OLDEST);
        assert!(parse_version("4.0").unwrap() >= OLDEST);
    }

    /// What Debian 12's CRIU 3.17.1 printed for `criu check` on kernel 6.18
    /// (exit 1).
    const CRIU_3_17_ON_6_18: &str = "Error (criu/util.c:642): exited, status=1\nError (criu/util.c:642): exited, status=1\nError (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds\nError (criu/vdso.c:613): vdso: Failed to fill self vdso symtable\nError (criu/kerndat.c:1615): kerndat_vdso_fill_symtable failed when initializing kerndat.\nError (criu/crtools.c:260): Could not initialize kernel features detection.\n";

    #[test]
    fn a_criu_that_cannot_detect_the_kernel_s_features_cannot_start() {
        assert_eq!(
            cannot_start(false, CRIU_3_17_ON_6_18).as_deref(),
            Some("\"vdso: Unexpected rt vDSO area bounds; vdso: Failed to fill self vdso symtable; kerndat_vdso_fill_symtable failed when initializing kerndat.\"")
        );
        assert_eq!(cannot_start(true, "Looks good.\n"), None);
        // A check that fails for a feature is no refusal.
        assert_eq!(
            cannot_start(
                false,
                "Error (criu/cr-check.c:100): Kernel doesn't support PTRACE_O_SUSPEND_SECCOMP\n"
            ),
            None
        );
        let hostile = "Error (x.c:1): \x1b[2J\nCould not initialize kernel features detection";
        assert!(!cannot_start(false, hostile).unwrap().contains('\x1b'));
    }

    #[test]
    fn a_criu_without_a_version_is_said_by_what_it_wrote() {
        let loader = "criu: error while loading shared libraries: libnet.so.1: cannot open shared object file\n";
        assert_eq!(
            why_no_version("", "exited 127", loader),
            format!("it exited 127, saying {:?}", loader.trim())
        );
        assert_eq!(
            why_no_version("criu 4\n", "exited 0", ""),
            "it printed \"criu 4\""
        );
        assert_eq!(
            why_no_version("", "killed by signal 9", ""),
            "it was killed by signal 9 and printed nothing"
        );
        let long = "x".repeat(1000);
        assert!(why_no_version("", "exited 1", &long).len() < 260);
        assert!(!why_no_version("", "exited 1", "\x1b[31mred").contains('\x1b'));
    }

    #[test]
    fn as_root_a_criu_others_could_replace_is_refused() {
        assert_eq!(judge(0, 0o100755), Ok(()));
        assert!(judge(1000, 0o100755).unwrap_err().contains("UID 1000"));
        assert!(judge(0, 0o100777)
            .unwrap_err()
            .contains("writable by others"));
    }

    #[test]
    fn only_absolute_directories_of_path_are_searched() {
        let dir = tempfile::tempdir().expect("tempdir");
        let criu = dir.path().join("criu");
        std::fs::write(&criu, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&criu, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let path = format!("relative:{}", dir.path().display());
        assert_eq!(on_path(&path), Some(criu));
        assert_eq!(on_path("relative:/nonexistent"), None);
    }
}
