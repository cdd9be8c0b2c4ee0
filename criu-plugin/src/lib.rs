//! cudackpt as CRIU's CUDA plugin: CRIU loads this library from its plugin
//! directory (`--libdir`, `CRIU_LIBS_DIR`, or /usr/lib/criu) and calls its
//! hooks; each hook calls the driver through cudackpt's library, with its
//! pre-flights, group rollback, drain and intent records
//! (`cudackpt::internal::criu_plugin` says what each hook does), in a
//! helper process forked from CRIU (`helper` says why), not by running a
//! program per process per step.
//!
//! This crate reads top to bottom: `entries` (the descriptor CRIU reads
//! and the hooks' C entry points) calls this file, the state of one CRIU
//! run between `init` and `fini`; the `helper` runs the hooks in a forked
//! process and talks to CRIU's half over a `link`; `host` is the bottom,
//! what the plugin calls of CRIU (its log, its images' inventory, its
//! options) and of the kernel for it (the fork, ptrace). Only `entries`
//! and `host` hold `unsafe`.

mod entries;
mod helper;
mod host;
mod link;

use std::sync::{Mutex, MutexGuard, PoisonError};

use cudackpt::internal::criu_plugin::{HookAnswer, Host, Level, Plugin};

use helper::{caught, Helper};
use host::Criu;
use link::{Hook, Link, Request};

/// The plugin of this CRIU run, from `init` to `fini`.
enum Session {
    /// No plugin: `init` refused, or `fini` came.
    Off,
    /// Made by `init`, no hook has acted yet.
    Ready(Plugin),
    /// Handed to a helper forked at the first hook that acts.
    Helped(Helper),
}

static SESSION: Mutex<Session> = Mutex::new(Session::Off);

/// The session slot, also after a panic in a hook that held it.
fn session() -> MutexGuard<'static, Session> {
    SESSION.lock().unwrap_or_else(PoisonError::into_inner)
}

/// CRIU's `init(stage)`: 0 to go on, -1 to stop CRIU.
fn init(host: &Criu, stage: i32, criu_version: Option<&str>) -> i32 {
    let settings = cudackpt::internal::criu_plugin_settings();
    let made = caught(host, "init", || {
        Plugin::init(host, stage, criu_version, settings)
    })
    .flatten();
    let ok = made.is_some();
    *session() = made.map_or(Session::Off, Session::Ready);
    if ok {
        0
    } else {
        -1
    }
}

/// A hook: CRIU's return code. A panic in CRIU's half is a failure CRIU
/// sees, said in its log (it must not unwind into CRIU).
fn hook(criu: &'static Criu, hook: Hook, pid: i32) -> i32 {
    caught(criu, hook.name(), || run_hook(criu, hook, pid))
        .unwrap_or_else(|| host::code(HookAnswer::Failed))
}

/// The first hook of a run the plugin acts in forks the helper that runs
/// it and every later one.
fn run_hook(criu: &'static Criu, hook: Hook, pid: i32) -> i32 {
    let mut slot = session();
    *slot = match std::mem::replace(&mut *slot, Session::Off) {
        Session::Ready(plugin) if !plugin.is_idle() => match start_helper(plugin, criu) {
            Ok(helper) => Session::Helped(helper),
            Err(why) => {
                criu.log(
                    Level::Error,
                    &format!("could not start the plugin's helper ({why}); nothing was changed"),
                );
                return host::code(HookAnswer::Failed);
            }
        },
        // An idle run answers without a helper; a helper runs on.
        other => other,
    };
    let Session::Helped(helper) = &mut *slot else {
        return host::code(HookAnswer::NotMine);
    };
    match helper.call(criu, &Request::Hook { hook, pid }) {
        Ok(code) => code,
        Err(why) => {
            criu.log(Level::Error, &helper.gone(&why));
            host::code(HookAnswer::Failed)
        }
    }
}

/// CRIU's `fini(stage, ret)`.
fn fini(criu: &Criu, ret: i32) {
    let taken = std::mem::replace(&mut *session(), Session::Off);
    match taken {
        Session::Off => {}
        // No hook acted, so nothing moved: `fini` needs no driver.
        Session::Ready(plugin) => {
            caught(criu, "fini", || plugin.fini(criu, ret));
        }
        Session::Helped(helper) => {
            caught(criu, "fini", || helper.finish(criu, ret));
        }
    }
}

/// Forks the helper that runs `plugin` (`helper` says why), and returns
/// CRIU's half of it. The child never returns into CRIU: it serves the
/// hooks and exits.
fn start_helper(plugin: Plugin, criu: &'static Criu) -> Result<Helper, String> {
    use std::os::fd::AsRawFd;
    let (ours, theirs) =
        std::os::unix::net::UnixStream::pair().map_err(|e| format!("a socket pair: {e}"))?;
    let not_its = [ours.as_raw_fd()];
    let link = Link::new(ours).map_err(|e| format!("a socket pair: {e}"))?;
    let helper_link = Link::new(theirs).map_err(|e| format!("a socket pair: {e}"))?;
    // The closure, with the plugin and the helper's end, goes with the
    // child; in CRIU's process it is dropped unrun.
    let pid = host::fork(&not_its, move || helper::serve(plugin, criu, helper_link))?;
    Ok(Helper::new(pid, link))
}
