//! A debug build's deliberate panic or kill, so tests can show what a bug
//! or a kill -9 in the middle of a group leaves behind:
//! `CUDACKPT_DEBUG_PANIC_AFTER=STEP` (`lock`, `checkpoint`, `restore`,
//! `unlock`) panics just after a STEP call succeeds. Release builds
//! compile it to nothing, so no variable can make an installed cudackpt
//! panic.

#[cfg(debug_assertions)]
use crate::environment::{debug, DEBUG_KILL_AT, DEBUG_PANIC_AFTER};
use crate::vocabulary::plan::DriverCall;

/// Whether the debug variable `name` is set to `value`.
#[cfg(debug_assertions)]
fn debug_says(name: &'static str, value: &str) -> bool {
    debug(name).is_some_and(|wanted| wanted == value)
}

/// Panics after a successful `step` when the variable names it (debug
/// builds only).
#[cfg(debug_assertions)]
pub fn after(step: DriverCall) {
    if debug_says(DEBUG_PANIC_AFTER, step.as_str()) {
        panic!("CUDACKPT_DEBUG_PANIC_AFTER={step}: a deliberate panic after a {step} call");
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn after(_step: DriverCall) {}

/// A debug build's SIGKILL of itself at a named point outside the drain
/// (`CUDACKPT_DEBUG_KILL_AT=before-watcher`: a CRIU pre-dump whose group is
/// suspended, before its watcher starts), so tests can show what such a
/// kill leaves. The kills around the drain's signals are the drain's own
/// (`crate::drain::sending`).
#[cfg(debug_assertions)]
pub fn kill_at(point: &str) {
    if debug_says(DEBUG_KILL_AT, point) {
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn kill_at(_point: &str) {}
