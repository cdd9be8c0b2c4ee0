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

use std::sync::Mutex;

use cudackpt::internal::criu_plugin::{HookAnswer, Host, Plugin};

/// The plugin of this CRIU run, from `init` to `fini`.
static PLUGIN: Mutex<Option<Plugin>> = Mutex::new(None);

/// Runs `hook` on the plugin of this run, if `init` made one; a panic is
/// a failure CRIU sees (the dump or the restore stops), said in its log.
fn with_plugin(
    host: &dyn Host,
    what: &str,
    hook: impl FnOnce(&mut Plugin) -> HookAnswer,
) -> HookAnswer {
    let run = std::panic::AssertUnwindSafe(|| {
        let mut held = PLUGIN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        held.as_mut().map_or(HookAnswer::NotMine, hook)
    });
    std::panic::catch_unwind(run).unwrap_or_else(|_| {
        host.log(
            cudackpt::internal::criu_plugin::Level::Error,
            &format!("{what} stopped on an internal error (a bug: please report it with the lines above); `cudackpt ps` shows where each CUDA process is, and `cudackpt recover` puts back a group its intent record names"),
        );
        HookAnswer::Failed
    })
}

/// CRIU's `init(stage)`: 0 to go on, -1 to stop CRIU.
fn init(host: &dyn Host, stage: i32, criu_version: Option<&str>) -> i32 {
    let settings = cudackpt::internal::criu_plugin_settings();
    let plugin = Plugin::init(host, stage, criu_version, settings);
    let ok = plugin.is_some();
    *PLUGIN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = plugin;
    if ok {
        0
    } else {
        -1
    }
}

/// CRIU's `fini(stage, ret)`.
fn fini(host: &dyn Host, ret: i32) {
    let plugin = PLUGIN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    if let Some(plugin) = plugin {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| plugin.fini(host, ret)));
    }
}
