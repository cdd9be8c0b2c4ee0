//! A debug build's deliberate panic, so tests can show what a bug in the
//! middle of a group leaves behind: `CUDACKPT_DEBUG_PANIC_AFTER=STEP`
//! (`lock`, `checkpoint`, `restore`, `unlock`) panics just after a STEP
//! call succeeds. Release builds compile it to nothing, so no variable can
//! make an installed cudackpt panic.

use crate::ops::plan::StepKind;

/// Panics after a successful `step` when the variable names it (debug
/// builds only).
#[cfg(debug_assertions)]
pub fn after(step: StepKind) {
    if std::env::var("CUDACKPT_DEBUG_PANIC_AFTER").is_ok_and(|wanted| wanted == step.as_str()) {
        panic!("CUDACKPT_DEBUG_PANIC_AFTER={step}: a deliberate panic after a {step} call");
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn after(_step: StepKind) {}
