//! cudackpt as CRIU's CUDA plugin: CRIU loads this library from its plugin
//! directory (`--libdir`, `CRIU_LIBS_DIR`, or /usr/lib/criu) and calls its
//! hooks; each hook calls the driver in CRIU's own process through
//! cudackpt's library, with its pre-flights, group rollback, drain and
//! intent records (`cudackpt::internal::criu_plugin` says what each hook
//! does).
//!
//! This crate is the ABI and nothing else: `ffi` (the one module with
//! `unsafe`) is the descriptor CRIU reads, the hooks' C entry points, the
//! calls into CRIU (its log, its images' inventory, its options) and the
//! ptrace that lets a stopped process's restore thread run. The state of
//! one CRIU run lives here, between `init` and `fini`.

mod ffi;

use std::sync::{Mutex, MutexGuard, PoisonError};

use cudackpt::internal::criu_plugin::{HookAnswer, Host, Plugin};

/// The plugin of this CRIU run, from `init` to `fini`.
static PLUGIN: Mutex<Option<Plugin>> = Mutex::new(None);

/// The plugin slot, also after a panic in a hook that held it.
fn plugin() -> MutexGuard<'static, Option<Plugin>> {
    PLUGIN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `work`; a panic in it is said in CRIU's log (a bug), and `None`.
fn caught<T>(host: &dyn Host, what: &str, work: impl FnOnce() -> T) -> Option<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
        .map_err(|_| {
            host.log(
                cudackpt::internal::criu_plugin::Level::Error,
                &format!("{what} stopped on an internal error (a bug: please report it with the lines above); `cudackpt ps` shows where each CUDA process is, and `cudackpt recover` puts back a group its intent record names"),
            )
        })
        .ok()
}

/// Runs `hook` on the plugin of this run, if `init` made one; a panic is
/// a failure CRIU sees (the dump or the restore stops), said in its log.
fn with_plugin(
    host: &dyn Host,
    what: &str,
    hook: impl FnOnce(&mut Plugin) -> HookAnswer,
) -> HookAnswer {
    caught(host, what, || {
        plugin().as_mut().map_or(HookAnswer::NotMine, hook)
    })
    .unwrap_or(HookAnswer::Failed)
}

/// CRIU's `init(stage)`: 0 to go on, -1 to stop CRIU.
fn init(host: &dyn Host, stage: i32, criu_version: Option<&str>) -> i32 {
    let settings = cudackpt::internal::criu_plugin_settings();
    let made = Plugin::init(host, stage, criu_version, settings);
    let ok = made.is_some();
    *plugin() = made;
    if ok {
        0
    } else {
        -1
    }
}

/// CRIU's `fini(stage, ret)`.
fn fini(host: &dyn Host, ret: i32) {
    let taken = plugin().take();
    if let Some(taken) = taken {
        caught(host, "fini", || taken.fini(host, ret));
    }
}
