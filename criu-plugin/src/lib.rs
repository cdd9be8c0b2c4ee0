//! cudackpt as CRIU's CUDA plugin: CRIU loads this library from its plugin
//! directory (`--libdir`, `CRIU_LIBS_DIR`, or /usr/lib/criu) and calls its
//! hooks; each hook calls the driver through cudackpt's library, with its
//! pre-flights, group rollback, drain and intent records
//! (`cudackpt::internal::criu_plugin` says what each hook does), in a
//! helper process forked from CRIU (`helper` says why), not by running a
//! program per process per step.
//!
//! This crate is the ABI and the helper: `ffi` (the one module with
//! `unsafe`) is the descriptor CRIU reads, the hooks' C entry points, the
//! calls into CRIU (its log, its images' inventory, its options), the fork
//! and ptrace; `link` is what the two halves say to each other. The state
//! of one CRIU run lives here, between `init` and `fini`.

mod ffi;
mod helper;
mod link;

use std::sync::{Mutex, MutexGuard, PoisonError};

use cudackpt::internal::criu_plugin::{HookAnswer, Host, Level, Plugin};

use helper::Helper;
use link::{Hook, Request};

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

/// Runs `work`; a panic in it is said in CRIU's log (a bug), and `None`.
fn caught<T>(host: &dyn Host, what: &str, work: impl FnOnce() -> T) -> Option<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
        .map_err(|_| {
            host.log(
                Level::Error,
                &format!("{what} stopped on an internal error (a bug: please report it with the lines above); `cudackpt ps` shows where each CUDA process is, and `cudackpt recover` puts back a group its intent record names"),
            )
        })
        .ok()
}

/// CRIU's `init(stage)`: 0 to go on, -1 to stop CRIU.
fn init(host: &ffi::Criu, stage: i32, criu_version: Option<&str>) -> i32 {
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
fn hook(criu: &'static ffi::Criu, hook: Hook, pid: i32) -> i32 {
    caught(criu, hook.name(), || run_hook(criu, hook, pid))
        .unwrap_or_else(|| ffi::code(HookAnswer::Failed))
}

/// The first hook of a run the plugin acts in forks the helper that runs
/// it and every later one.
fn run_hook(criu: &'static ffi::Criu, hook: Hook, pid: i32) -> i32 {
    let mut slot = session();
    *slot = match std::mem::replace(&mut *slot, Session::Off) {
        Session::Ready(plugin) if !plugin.is_idle() => match ffi::fork_helper(plugin, criu) {
            Ok(helper) => Session::Helped(helper),
            Err(why) => {
                criu.log(
                    Level::Error,
                    &format!("could not start the plugin's helper ({why}); nothing was changed"),
                );
                return ffi::code(HookAnswer::Failed);
            }
        },
        // An idle run answers without a helper; a helper runs on.
        other => other,
    };
    let Session::Helped(helper) = &mut *slot else {
        return ffi::code(HookAnswer::NotMine);
    };
    match helper.call(criu, &Request::Hook { hook, pid }) {
        Ok(code) => code,
        Err(why) => {
            criu.log(Level::Error, &helper.gone(&why));
            ffi::code(HookAnswer::Failed)
        }
    }
}

/// CRIU's `fini(stage, ret)`.
fn fini(criu: &ffi::Criu, ret: i32) {
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
