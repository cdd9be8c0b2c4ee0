//! The CRIU hook's grammar (`--action-script` mode): CRIU runs cudackpt
//! with no arguments and `CRTOOLS_SCRIPT_ACTION` and `CRTOOLS_INIT_PID`
//! set; cudackpt's own variables (`CUDACKPT_MAP`, `CUDACKPT_LOCK_TIMEOUT`,
//! `CUDACKPT_YES`, `CUDACKPT_FORCE`, the drain's) say the rest, read once
//! by `commands::criu::settings`. This is the grammar: which action, into
//! the command's [`HookPlan`]; what each action does is
//! `commands::criu::action_script`.

use std::path::Path;

use crate::commands::criu::action_script::{self as hook, HookPlan, HookStep};
use crate::commands::criu::settings::{
    init_pid, lock_timeout, map_from_env, settings, HookSettings, Unusable,
};
use crate::targets::identity::Identity;
use crate::vocabulary::report::CommandReport;

/// The environment CRIU sets for action scripts.
pub const ACTION_VAR: &str = crate::environment::CRIU_ACTION;

/// What each CRIU action asks of cudackpt, by name (pure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CriuAction {
    PreDump,
    PostDump,
    PostResume,
    Other,
}

fn action_named(action: &str) -> CriuAction {
    match action {
        "pre-dump" => CriuAction::PreDump,
        "post-dump" => CriuAction::PostDump,
        "post-resume" => CriuAction::PostResume,
        _ => CriuAction::Other,
    }
}

/// Whether this invocation is CRIU running cudackpt as its action script:
/// no arguments, and CRIU's variable set.
pub fn is_hook_invocation(args_after_program: usize) -> bool {
    args_after_program == 0 && crate::environment::os(ACTION_VAR).is_some()
}

/// The action CRIU names, or why it cannot be read.
pub fn action_from_env() -> Result<String, ActionNotText> {
    match crate::environment::text(ACTION_VAR) {
        Ok(action) => Ok(action.unwrap_or_default()),
        Err(not_text) => Err(ActionNotText(not_text.raw)),
    }
}

/// CRIU's action variable holds bytes that are not text (shown lossily).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{ACTION_VAR} is not UTF-8 text ({0}), so it names no CRIU action")]
pub struct ActionNotText(pub String);

/// The hook's one conversion: CRIU's action (the value of
/// `CRTOOLS_SCRIPT_ACTION`, or why it could not be read) and the
/// environment, into the command's plan.
pub fn plan(action: Result<String, ActionNotText>) -> Result<HookPlan, Unusable> {
    let action = action.map_err(Unusable::criu)?;
    if action.is_empty() {
        return Err(Unusable::criu(format!(
            "{ACTION_VAR} is not set: this is CRIU's action-script mode"
        )));
    }
    let step = match action_named(&action) {
        CriuAction::Other => {
            return Ok(HookPlan {
                step: HookStep::Nothing,
                settings: HookSettings::default(),
            })
        }
        CriuAction::PreDump => HookStep::SuspendTree {
            root: init_pid().map_err(Unusable::criu)?,
            lock_timeout: lock_timeout().map_err(Unusable::criu)?,
        },
        CriuAction::PostDump => HookStep::ResumeWhenThawed {
            root: init_pid().map_err(Unusable::criu)?,
        },
        CriuAction::PostResume => HookStep::ResumeTree {
            root: init_pid().map_err(Unusable::criu)?,
            map: map_from_env().map_err(Unusable::criu)?,
        },
    };
    Ok(HookPlan {
        step,
        settings: settings()?,
    })
}

/// Runs the action CRIU's environment names, or says why it cannot.
pub fn run_action(libcuda: Option<&Path>) -> CommandReport {
    match plan(action_from_env()) {
        Ok(plan) => hook::run(libcuda, plan),
        Err(unusable) => hook::unusable(unusable),
    }
}

/// Runs a detached helper the hook started (`--after-criu CRIU PIDS`, or
/// `--resume-when-thawed PIDS`) with the settings it inherited.
pub fn run_helper(
    libcuda: Option<&Path>,
    resume_when_thawed: &[Identity],
    after_criu: &[Identity],
) -> CommandReport {
    let settings = match settings() {
        Ok(settings) => settings,
        Err(unusable) => return hook::unusable(unusable),
    };
    match (resume_when_thawed, after_criu) {
        ([], [criu, pids @ ..]) => hook::after_criu(libcuda, &settings, *criu, pids),
        (pids, _) => hook::resume_when_thawed(libcuda, &settings, pids),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_action_has_its_step() {
        assert_eq!(action_named("pre-dump"), CriuAction::PreDump);
        assert_eq!(action_named("post-dump"), CriuAction::PostDump);
        assert_eq!(action_named("post-resume"), CriuAction::PostResume);
        for other in [
            "pre-restore",
            "post-restore",
            "pre-resume",
            "network-lock",
            "setup-namespaces",
            "",
        ] {
            assert_eq!(action_named(other), CriuAction::Other, "{other}");
        }
    }
}
