//! The CRIU hook's grammar (`--action-script` mode): CRIU runs cudackpt
//! with no arguments and `CRTOOLS_SCRIPT_ACTION` and `CRTOOLS_INIT_PID`
//! set; cudackpt's own variables (`CUDACKPT_MAP`, `CUDACKPT_LOCK_TIMEOUT`,
//! `CUDACKPT_YES`, `CUDACKPT_FORCE`, the drain's) say the rest. They are
//! read here once, into the command's [`HookPlan`]; what each action does
//! is `commands::criu_hook`.

use std::path::Path;
use std::time::Duration;

use super::env::EnvError;
use crate::commands::criu_hook::{self as hook, hook_failure, HookPlan, HookSettings, HookStep};
use crate::gpu::map::MapSpec;
use crate::targets::identity::Identity;
use crate::targets::process::parse_pid;
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::report::CommandReport;
use crate::vocabulary::timeout::Timeout;

/// The environment CRIU sets for action scripts.
pub const ACTION_VAR: &str = crate::environment::CRIU_ACTION;
pub const INIT_PID_VAR: &str = crate::environment::CRIU_INIT_PID;

/// The GPUs a post-resume restores onto.
const MAP_VAR: &str = crate::environment::MAP;

/// The lock timeout of pre-dump, unless `CUDACKPT_LOCK_TIMEOUT` says.
const LOCK_TIMEOUT_VAR: &str = crate::environment::LOCK_TIMEOUT;
const DEFAULT_LOCK_TIMEOUT: Timeout = Timeout::from_millis(10_000);

/// What a CRIU action script's caller confirms by setting it: acting on the
/// whole host (a tree rooted at PID 1).
const YES_VAR: &str = crate::environment::YES;

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

/// Why the hook's environment cannot be used: said as the command's
/// usage failure, before anything is done.
#[derive(Debug)]
pub struct Unusable {
    message: String,
    /// What to set; `None`: how CRIU runs the hook.
    hint: Option<&'static str>,
}

impl Unusable {
    fn criu(why: impl std::fmt::Display) -> Unusable {
        Unusable {
            message: why.to_string(),
            hint: None,
        }
    }

    /// The hook's report of it.
    pub fn report(self) -> CommandReport {
        match self.hint {
            None => hook_failure(self.message),
            Some(hint) => CommandReport {
                failure: Some(Fault::new(FaultKind::Usage, self.message, hint)),
                ..CommandReport::new("criu-hook", Duration::ZERO)
            },
        }
    }
}

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
        Err(unusable) => unusable.report(),
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
        Err(unusable) => return unusable.report(),
    };
    match (resume_when_thawed, after_criu) {
        ([], [criu, pids @ ..]) => hook::after_criu(libcuda, &settings, *criu, pids),
        (pids, _) => hook::resume_when_thawed(libcuda, &settings, pids),
    }
}

/// What the environment sets for every group the hook (or a detached
/// helper it started, which inherits it) runs.
pub fn settings() -> Result<HookSettings, Unusable> {
    let drain = super::env::drain_from_env().map_err(|problem| Unusable {
        message: problem.to_string(),
        hint: Some("set CUDACKPT_DRAIN_SIGNAL to a real-time signal (40, RTMIN+6) and CUDACKPT_DRAIN_TIMEOUT to a limit (30s)"),
    })?;
    Ok(HookSettings {
        confirmed: super::env::flag(YES_VAR),
        force: super::env::force_from_env(),
        drain,
    })
}

/// The tree root CRIU names in CRTOOLS_INIT_PID.
fn init_pid() -> Result<i32, EnvError> {
    let text = crate::environment::text(INIT_PID_VAR)?.unwrap_or_default();
    parse_pid(&text).map_err(EnvError::invalid(INIT_PID_VAR))
}

/// The GPUs a post-resume restores onto: `CUDACKPT_MAP` (as `--map` takes
/// it; `cudackpt undump` sets it for the GPUs it chose), else in place.
fn map_from_env() -> Result<MapSpec, String> {
    let text = crate::environment::text(MAP_VAR)
        .map_err(|e| e.to_string())?
        .unwrap_or_default();
    if text.trim().is_empty() {
        return Ok(MapSpec::None);
    }
    MapSpec::parse(&[text]).map_err(|why| format!("{MAP_VAR}: {why}"))
}

/// What cudackpt's CRIU plugin reads from CRIU's environment: what the
/// action script reads, the driver library, the lock timeout and the map.
pub fn plugin_settings() -> Result<crate::commands::criu_plugin::PluginSettings, String> {
    let hook = settings().map_err(|unusable| match unusable.hint {
        Some(hint) => format!("{} ({hint})", unusable.message),
        None => unusable.message,
    })?;
    Ok(crate::commands::criu_plugin::PluginSettings {
        libcuda: super::env::libcuda_from_env(),
        hook,
        lock_timeout: lock_timeout().map_err(|e| e.to_string())?,
        map: map_from_env()?,
    })
}

/// The lock timeout for pre-dump: `CUDACKPT_LOCK_TIMEOUT`, else 10 s.
fn lock_timeout() -> Result<Timeout, EnvError> {
    match crate::environment::text(LOCK_TIMEOUT_VAR)? {
        Some(text) if !text.trim().is_empty() => crate::vocabulary::timeout::parse_timeout(&text)
            .map_err(EnvError::invalid(LOCK_TIMEOUT_VAR)),
        _ => Ok(DEFAULT_LOCK_TIMEOUT),
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
