//! The top fence: what CRIU calls. CRIU's plugin ABI
//! (`criu/include/criu-plugin.h`, version 0.2.0 of CRIU 4.x): the
//! descriptor CRIU reads after `dlopen`, and the hooks' C entry points,
//! each of which calls the crate's logic (`lib.rs`) with the CRIU it runs
//! in (`host`). With `host.rs`, the only `unsafe` of this crate.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::ptr;

use crate::host::Criu;
use crate::link::Hook;

/// `CRIU_PLUGIN_GEN_VERSION(0, 2, 0)`.
const ABI_VERSION: c_uint = 2 << 8;
/// `CR_PLUGIN_HOOK__MAX` of that ABI.
const HOOKS: usize = 13;
const HOOK_RESUME_DEVICES_LATE: usize = 9;
const HOOK_PAUSE_DEVICES: usize = 10;
const HOOK_CHECKPOINT_DEVICES: usize = 11;

/// `cr_plugin_desc_t`.
#[repr(C)]
pub struct PluginDescriptor {
    name: *const c_char,
    init: Option<unsafe extern "C" fn(c_int) -> c_int>,
    exit: Option<unsafe extern "C" fn(c_int, c_int)>,
    version: c_uint,
    max_hooks: c_uint,
    hooks: [*const c_void; HOOKS],
}

// SAFETY: the descriptor is immutable after load: pointers to a static
// string and to functions, read by CRIU's one thread.
unsafe impl Sync for PluginDescriptor {}

/// The plugin's name, as CRIU reads it.
const NAME_C: &CStr = c"cudackpt";

/// The descriptor CRIU looks up by name after `dlopen`.
#[no_mangle]
pub static CR_PLUGIN_DESC: PluginDescriptor = PluginDescriptor {
    name: NAME_C.as_ptr(),
    init: Some(plugin_init),
    exit: Some(plugin_exit),
    version: ABI_VERSION,
    max_hooks: HOOKS as c_uint,
    hooks: hooks(),
};

const fn hooks() -> [*const c_void; HOOKS] {
    let mut hooks = [ptr::null(); HOOKS];
    hooks[HOOK_RESUME_DEVICES_LATE] = resume_devices_late as *const c_void;
    hooks[HOOK_PAUSE_DEVICES] = pause_devices as *const c_void;
    hooks[HOOK_CHECKPOINT_DEVICES] = checkpoint_devices as *const c_void;
    hooks
}

unsafe extern "C" fn plugin_init(stage: c_int) -> c_int {
    let host = Criu::get();
    let version = host.version();
    crate::init(host, stage, version.as_deref())
}

unsafe extern "C" fn plugin_exit(_stage: c_int, ret: c_int) {
    crate::fini(Criu::get(), ret);
}

unsafe extern "C" fn pause_devices(pid: c_int) -> c_int {
    crate::hook(Criu::get(), Hook::PauseDevices, pid)
}

unsafe extern "C" fn checkpoint_devices(pid: c_int) -> c_int {
    crate::hook(Criu::get(), Hook::CheckpointDevices, pid)
}

unsafe extern "C" fn resume_devices_late(pid: c_int) -> c_int {
    crate::hook(Criu::get(), Hook::ResumeDevicesLate, pid)
}
