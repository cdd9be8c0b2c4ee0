//! A debug build's deliberate panic, so tests can show what a bug in the
//! middle of a group leaves behind: `CUDACKPT_DEBUG_PANIC_AFTER=STEP`
//! (`lock`, `checkpoint`, `restore`, `unlock`) panics just after a STEP
//! call succeeds. Release builds compile it to nothing, so no variable can
//! make an installed cudackpt panic.

#[cfg(debug_assertions)]
use crate::environment::{debug, DEBUG_KILL_AT, DEBUG_PANIC_AFTER};
use crate::ops::vocabulary::plan::DriverCall;

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

/// Where a drain signal send stands, for [`drain_signal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Send {
    /// The record says the signal is going; it has not gone.
    Before,
    /// It went; the record has not said so yet.
    After,
}

/// A debug build's SIGKILL of itself around the Nth drain signal it sends
/// (requests, rebuilds and call-offs alike, counted from 1):
/// `CUDACKPT_DEBUG_KILL_AT=before-signal:N` or `after-signal:N`, so tests
/// can put a kill -9 at every instant of a drain and show what `recover`
/// makes of the record.
#[cfg(debug_assertions)]
pub fn drain_signal(when: Send) {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SENT: AtomicU32 = AtomicU32::new(0);
    let Some(wanted) = debug(DEBUG_KILL_AT) else {
        return;
    };
    let nth = match when {
        Send::Before => SENT.load(Ordering::SeqCst) + 1,
        Send::After => SENT.fetch_add(1, Ordering::SeqCst) + 1,
    };
    let label = match when {
        Send::Before => "before-signal",
        Send::After => "after-signal",
    };
    if wanted == *format!("{label}:{nth}") {
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn drain_signal(_when: Send) {}

/// A debug build's SIGKILL of itself at a named point outside the drain
/// (`CUDACKPT_DEBUG_KILL_AT=before-watcher`: a CRIU pre-dump whose group is
/// suspended, before its watcher starts), so tests can show what such a
/// kill leaves.
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
