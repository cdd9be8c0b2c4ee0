//! Every environment variable cudackpt reads is named here and read here,
//! nowhere else (`tests/house/environment.rs` holds the crate to it): one
//! reading for each kind of value. An empty value is an unset one; text
//! that is not UTF-8 is said to be, never guessed at or replaced by a
//! default; a yes-or-no flag says yes with `1`, `true`, `yes` or `on`.
//! What a value means is for the room that asks.
//!
//! The `CUDACKPT_DEBUG_*` variables stand in for the host in tests:
//! [`debug`] reads them in debug builds only, so no environment can steer
//! a release build (a root cudackpt started with a user's environment).
//!
//! A floor of its own at the bottom of the house: every room may read the
//! environment through it.

use std::ffi::OsString;

// The user's settings.
pub const DRAIN: &str = "CUDACKPT_DRAIN";
pub const DRAIN_SIGNAL: &str = "CUDACKPT_DRAIN_SIGNAL";
pub const DRAIN_TIMEOUT: &str = "CUDACKPT_DRAIN_TIMEOUT";
pub const LIBCUDA: &str = "CUDACKPT_LIBCUDA";
pub const LIBCUDA_UNSAFE: &str = "CUDACKPT_LIBCUDA_UNSAFE";
pub const RECORD_DIR: &str = "CUDACKPT_RECORD_DIR";
pub const LOCK_DIR: &str = "CUDACKPT_LOCK_DIR";
pub const FORCE: &str = "CUDACKPT_FORCE";
pub const YES: &str = "CUDACKPT_YES";
pub const LOCK_TIMEOUT: &str = "CUDACKPT_LOCK_TIMEOUT";
pub const CGROUP_ROOT: &str = "CUDACKPT_CGROUP_ROOT";
pub const MAP: &str = "CUDACKPT_MAP";

// Set by CRIU for its action script.
pub const CRIU_ACTION: &str = "CRTOOLS_SCRIPT_ACTION";
pub const CRIU_INIT_PID: &str = "CRTOOLS_INIT_PID";

// The session's: where a user's runtime directory is, who ran sudo, pkexec
// or doas (these only ever take power away), where programs are, and the
// loader's path (read by the loader, named here for the man page).
pub const XDG_RUNTIME_DIR: &str = "XDG_RUNTIME_DIR";
pub const SUDO_UID: &str = "SUDO_UID";
pub const SUDO_GID: &str = "SUDO_GID";
pub const PKEXEC_UID: &str = "PKEXEC_UID";
pub const DOAS_USER: &str = "DOAS_USER";
pub const PATH: &str = "PATH";
pub const LD_LIBRARY_PATH: &str = "LD_LIBRARY_PATH";

// Logs and colour, by the usual conventions.
pub const RUST_LOG: &str = "RUST_LOG";
pub const NO_COLOR: &str = "NO_COLOR";
pub const CLICOLOR_FORCE: &str = "CLICOLOR_FORCE";
pub const CLICOLOR: &str = "CLICOLOR";
pub const TERM: &str = "TERM";

// Stand-ins for the host, for tests: read by [`debug`], so by debug builds only.
pub const DEBUG_DRIVER_GPUS_DIR: &str = "CUDACKPT_DEBUG_DRIVER_GPUS_DIR";
pub const DEBUG_CGROUP_TREE: &str = "CUDACKPT_DEBUG_CGROUP_TREE";
pub const DEBUG_PANIC_AFTER: &str = "CUDACKPT_DEBUG_PANIC_AFTER";
pub const DEBUG_PAUSE_AFTER_CHECKS: &str = "CUDACKPT_DEBUG_PAUSE_AFTER_CHECKS";
pub const DEBUG_PAUSE_AFTER_WALK: &str = "CUDACKPT_DEBUG_PAUSE_AFTER_WALK";
pub const DEBUG_DEVICE_PREFIX: &str = "CUDACKPT_DEBUG_DEVICE_PREFIX";
pub const DEBUG_USER_RUNTIME_BASE: &str = "CUDACKPT_DEBUG_USER_RUNTIME_BASE";
pub const DEBUG_KILL_AT: &str = "CUDACKPT_DEBUG_KILL_AT";
pub const DEBUG_RESUME_WAIT_MS: &str = "CUDACKPT_DEBUG_RESUME_WAIT_MS";
pub const DEBUG_STAGE_ALWAYS: &str = "CUDACKPT_DEBUG_STAGE_ALWAYS";

/// How the stand-ins' names begin.
const DEBUG_PREFIX: &str = "CUDACKPT_DEBUG_";

/// What the man page's ENVIRONMENT section says of each variable a user
/// may set or meet, in its order.
pub const DOCUMENTED: [(&str, &str); 36] = [
    (
        MAP,
        "a GPU map (as --map takes it: OLD=NEW,... or auto) for the CRIU hook's post-resume: the restored tree is resumed onto these GPUs. `cudackpt undump` sets it for the GPUs it chose.",
    ),
    (
        DRAIN,
        "1: drain before the lock (as --drain), for NVIDIA's grammar (--action lock, --toggle) and the CRIU hook's pre-dump, which have no --drain. Drained processes are asked to rebuild after a resume whether or not it is set. CRIU's CUDA plugin locks a frozen tree, which cannot drain: use the action-script mode.",
    ),
    (
        DRAIN_SIGNAL,
        "The drain signal (as --drain-signal): a number, RTMIN+N or a name; also for the compatible grammar and the CRIU hook.",
    ),
    (
        DRAIN_TIMEOUT,
        "How long a drain, and a rebuild, is waited for, a duration with its unit such as 30s (as --drain-timeout); also for the compatible grammar and the CRIU hook.",
    ),
    (
        LIBCUDA,
        "The CUDA driver library to load (as --libcuda). As root, only a library owned by root and writable by nobody else.",
    ),
    (
        LIBCUDA_UNSAFE,
        "No effect (as --libcuda-unsafe, which once let root load a library anyone owned): a root or capable cudackpt loads only a library owned by root and writable by nobody else, however root was reached; without extra power cudackpt loads what its user names anyway. Accepted, with a warning, so that scripts passing it still run.",
    ),
    (
        RECORD_DIR,
        "Where checkpoint records are kept (as --record-dir).",
    ),
    (
        LOCK_DIR,
        "Where the per-process lock files are kept (default: locks/ in /run/cudackpt, or in $XDG_RUNTIME_DIR/cudackpt when not root).",
    ),
    (
        FORCE,
        "1 (or true, yes, on): checkpoint despite the pre-flights (as --force), for NVIDIA's grammar and the CRIU hook, which have no --force.",
    ),
    (
        YES,
        "1 (or true, yes, on): confirm a change of every CUDA process on the host (as --yes), for CRIU's action script when CRTOOLS_INIT_PID is 1.",
    ),
    (
        LOCK_TIMEOUT,
        "The lock timeout of the CRIU hook's pre-dump (milliseconds, or a duration such as 10s; default 10s).",
    ),
    (
        CRIU_ACTION,
        "Set by CRIU for its action script: pre-dump, post-dump, pre-restore, post-restore, post-resume, ... cudackpt run with no arguments and this set acts as the hook (criu-hook).",
    ),
    (
        CRIU_INIT_PID,
        "Set by CRIU: the root of the process tree it dumps or restores; the hook acts on the CUDA processes of that tree.",
    ),
    (
        XDG_RUNTIME_DIR,
        "When not root, the run directory is $XDG_RUNTIME_DIR/cudackpt.",
    ),
    (
        SUDO_UID,
        "Under sudo, --map-file is opened with this user's credentials (and SUDO_GID's).",
    ),
    (
        SUDO_GID,
        "Under sudo, the group whose credentials --map-file is opened with (with SUDO_UID).",
    ),
    (
        PKEXEC_UID,
        "Under pkexec, the user whose credentials --map-file is opened with.",
    ),
    (
        DOAS_USER,
        "Under doas, the user (by name) whose credentials --map-file is opened with.",
    ),
    (
        PATH,
        "Where doctor looks for criu, and where install-compat checks which cuda-checkpoint a shell would run.",
    ),
    (
        LD_LIBRARY_PATH,
        "Where the dynamic loader looks for libcuda.so.1 and libnvidia-ml.so.1 (NVML), as for any program.",
    ),
    (
        DEBUG_DRIVER_GPUS_DIR,
        "Debug builds only (tests): a directory read instead of /proc/driver/nvidia/gpus. Release builds ignore it.",
    ),
    (
        CGROUP_ROOT,
        "The cgroup v2 mount to use instead of the one in /proc/self/mountinfo. It must be a cgroup2 filesystem: anything else is refused (exit 2) before any driver call.",
    ),
    (
        DEBUG_CGROUP_TREE,
        "Debug builds only (tests): a plain directory read as the cgroup v2 mount, whose memory files the tests write; it turns off the cgroup v1 memory hierarchy. Release builds ignore it.",
    ),
    (
        DEBUG_PANIC_AFTER,
        "Debug builds only (tests): panic just after a lock, checkpoint, restore or unlock call succeeds. Release builds ignore it.",
    ),
    (
        DEBUG_PAUSE_AFTER_CHECKS,
        "Debug builds only (tests): create this file just after a target's /proc checks and wait until it is removed (a minute at most). Release builds ignore it.",
    ),
    (
        DEBUG_PAUSE_AFTER_WALK,
        "Debug builds only (tests): create this file just after the walk of the trees `--tree` names, before any of their processes is checked, and wait until it is removed (a minute at most). Release builds ignore it.",
    ),
    (
        DEBUG_DEVICE_PREFIX,
        "Debug builds only (tests): the path prefix taken for GPU device nodes (/dev/nvidia) by the check of what CRIU could not dump, so that a file can stand in for /dev/nvidia0. Release builds ignore it.",
    ),
    (
        DEBUG_USER_RUNTIME_BASE,
        "Debug builds only (tests): the directory read instead of /run/user, where root finds users' runtime directories (and writes the intent record of a group of one user's processes). Release builds ignore it.",
    ),
    (
        DEBUG_KILL_AT,
        "Debug builds only (tests): SIGKILL cudackpt itself just before (before-signal:N) or just after (after-signal:N) the Nth drain signal it sends, or at a CRIU pre-dump whose group is suspended, before its watcher starts (before-watcher). Release builds ignore it.",
    ),
    (
        DEBUG_RESUME_WAIT_MS,
        "Debug builds only (tests): how long a failed dump waits for the action script's watcher to resume the tree, in milliseconds (else 60 s). Release builds ignore it.",
    ),
    (
        DEBUG_STAGE_ALWAYS,
        "Debug builds only (tests): 1 makes undump give CRIU a private stage of root's own images too, as it does for images another user could have written (whose jobs root cannot dump without CAP_SYS_RESOURCE, which the test machines lack). Release builds ignore it.",
    ),
    (
        RUST_LOG,
        "Tracing filter for logs on stderr (as -v), e.g. cudackpt=debug.",
    ),
    (
        NO_COLOR,
        "When set and not empty, --color=auto never colours.",
    ),
    (
        CLICOLOR_FORCE,
        "When set and not 0, --color=auto colours even when stdout is not a terminal (NO_COLOR still wins).",
    ),
    (
        CLICOLOR,
        "0: --color=auto does not colour.",
    ),
    (
        TERM,
        "dumb: --color=auto does not colour.",
    ),
];

/// The value of `name`, unless it is unset or empty.
pub fn os(name: &str) -> Option<OsString> {
    std::env::var_os(name).filter(|value| !value.is_empty())
}

/// The text of `name`: `None` when unset or empty.
pub fn text(name: &'static str) -> Result<Option<String>, NotText> {
    os(name)
        .map(|value| {
            value.into_string().map_err(|raw| NotText {
                name,
                raw: raw.to_string_lossy().into_owned(),
            })
        })
        .transpose()
}

/// Whether a yes-or-no value says yes: `1`, `true`, `yes` or `on` (pure).
pub fn says_yes(value: &str) -> bool {
    matches!(value, "1" | "true" | "yes" | "on")
}

/// Whether `name` is set and says yes.
pub fn flag(name: &str) -> bool {
    os(name).is_some_and(|value| value.to_str().is_some_and(says_yes))
}

/// A stand-in for the host that a test named in `name`
/// (`CUDACKPT_DEBUG_*`): its value in a debug build, never in a release
/// build, which reads no such variable.
pub fn debug(name: &'static str) -> Option<OsString> {
    debug_assert!(
        name.starts_with(DEBUG_PREFIX),
        "{name} is not a debug variable"
    );
    if cfg!(debug_assertions) {
        os(name)
    } else {
        None
    }
}

/// A variable whose value is not UTF-8 text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name} is not UTF-8 text ({raw})")]
pub struct NotText {
    pub name: &'static str,
    /// The value, shown lossily.
    pub raw: String,
}

/// Why a variable cudackpt reads cannot be used; each names the variable.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error(transparent)]
    NotText(#[from] NotText),
    #[error("{name}: {why}")]
    Invalid {
        name: &'static str,
        #[source]
        why: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl EnvError {
    /// The error of a value of `name` that does not parse.
    pub fn invalid<E: std::error::Error + Send + Sync + 'static>(
        name: &'static str,
    ) -> impl FnOnce(E) -> EnvError {
        move |why| EnvError::Invalid {
            name,
            why: Box::new(why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yes_is_one_true_yes_or_on_and_nothing_else() {
        for yes in ["1", "true", "yes", "on"] {
            assert!(says_yes(yes), "{yes}");
        }
        for no in ["", "0", "false", "no", "off", "TRUE", " 1", "y"] {
            assert!(!says_yes(no), "{no:?}");
        }
    }

    #[test]
    fn every_constant_of_this_module_is_documented() {
        let code = include_str!("environment.rs");
        let consts = code.lines().filter_map(|l| {
            l.strip_prefix("pub const ")?
                .split("&str = \"")
                .nth(1)?
                .strip_suffix("\";")
        });
        let mut count = 0;
        for name in consts {
            count += 1;
            assert!(
                DOCUMENTED.iter().any(|(n, _)| *n == name),
                "{name} is read but not documented"
            );
        }
        assert_eq!(count, DOCUMENTED.len());
    }

    #[test]
    fn every_documented_name_is_a_constant_of_this_module() {
        let code = include_str!("environment.rs");
        for (name, _) in DOCUMENTED {
            assert!(code.contains(&format!("&str = \"{name}\";")), "{name}");
        }
    }
}
