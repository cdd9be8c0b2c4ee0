//! Failure injection: parsing the rules of `$FAKE_CUDA_INJECT` and of the
//! state directory's `inject` file, and picking the rule that applies to a
//! call (the first that matches its op and PID).

use std::sync::Mutex;

use crate::state::{ProcOp, ProcState, Store};

/// The `OP` of a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleOp {
    Proc(ProcOp),
    Init,
    DriverVersion,
}

impl RuleOp {
    fn from_name(name: &str) -> Option<RuleOp> {
        match name {
            "init" => Some(RuleOp::Init),
            "driver_version" => Some(RuleOp::DriverVersion),
            _ => ProcOp::from_name(name).map(RuleOp::Proc),
        }
    }
}

/// The `EFFECT` of a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Return `code`; move the process to `state` first when given.
    Error { code: i32, state: Option<ProcState> },
    /// Sleep this many milliseconds, then behave normally.
    Delay(u64),
    /// Lock only: the process needs this many milliseconds to drain.
    Busy(u64),
    /// Restore only: succeed but leave the caller's allocations scrambled.
    Corrupt,
    /// Checkpoint only: the kernel's OOM killer takes the process (its
    /// cgroup's host copy went over the limit); see `oom`.
    OomKill,
    /// Do the call, then abort the *calling* process before it returns: a
    /// driver that crashes its caller, or a cudackpt built with
    /// `panic = "abort"` dying just after the call.
    AbortCaller,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub op: RuleOp,
    /// `@PID`: the rule matches this PID only.
    pub pid: Option<i32>,
    pub effect: Effect,
}

/// Parses one rule, `OP[@PID]=EFFECT`.
pub fn parse_rule(text: &str) -> Result<Rule, String> {
    let (lhs, rhs) = text.split_once('=').ok_or("expected OP[@PID]=EFFECT")?;
    let (op_name, pid) = match lhs.trim().split_once('@') {
        Some((op, pid)) => {
            let pid = pid
                .trim()
                .parse::<i32>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("bad PID `{}`", pid.trim()))?;
            (op.trim(), Some(pid))
        }
        None => (lhs.trim(), None),
    };
    let op = RuleOp::from_name(op_name).ok_or_else(|| format!("unknown op `{op_name}`"))?;
    let effect = parse_effect(rhs.trim())?;
    match (effect, op) {
        (Effect::Busy(_), RuleOp::Proc(ProcOp::Lock)) => {}
        (Effect::Busy(_), _) => return Err("busy applies to lock only".into()),
        (Effect::Corrupt, RuleOp::Proc(ProcOp::Restore)) => {}
        (Effect::Corrupt, _) => return Err("corrupt applies to restore only".into()),
        (Effect::OomKill, RuleOp::Proc(ProcOp::Checkpoint)) => {}
        (Effect::OomKill, _) => return Err("oom_kill applies to checkpoint only".into()),
        _ => {}
    }
    Ok(Rule { op, pid, effect })
}

fn parse_effect(text: &str) -> Result<Effect, String> {
    match text {
        "corrupt" => return Ok(Effect::Corrupt),
        "oom_kill" => return Ok(Effect::OomKill),
        "abort" => return Ok(Effect::AbortCaller),
        _ => {}
    }
    let (kind, arg) = text
        .split_once(':')
        .ok_or_else(|| format!("unknown effect `{text}`"))?;
    let millis = |ms: &str| {
        ms.parse::<u64>()
            .map_err(|_| format!("bad milliseconds `{ms}`"))
    };
    match kind {
        "error" => {
            let (code, state) = match arg.split_once(':') {
                Some((code, state)) => {
                    let state = ProcState::from_name(state)
                        .ok_or_else(|| format!("unknown state `{state}`"))?;
                    (code, Some(state))
                }
                None => (arg, None),
            };
            let code = code
                .parse::<i32>()
                .map_err(|_| format!("bad error code `{code}`"))?;
            Ok(Effect::Error { code, state })
        }
        "delay" => millis(arg).map(Effect::Delay),
        "busy" => millis(arg).map(Effect::Busy),
        _ => Err(format!("unknown effect `{text}`")),
    }
}

/// Parses a list of rules separated by `;` or newlines; blank entries are
/// skipped. Returns the good rules in order and a message per malformed one.
pub fn parse_rules(text: &str) -> (Vec<Rule>, Vec<String>) {
    let mut rules = Vec::new();
    let mut errors = Vec::new();
    for entry in text.split([';', '\n']).map(str::trim) {
        if entry.is_empty() {
            continue;
        }
        match parse_rule(entry) {
            Ok(rule) => rules.push(rule),
            Err(why) => errors.push(format!("ignoring injection rule `{entry}`: {why}")),
        }
    }
    (rules, errors)
}

/// The first rule for `op` that matches one of `pids` (a rule without `@PID`
/// matches every PID).
pub fn find(rules: &[Rule], op: RuleOp, pids: &[i32]) -> Option<Rule> {
    rules
        .iter()
        .find(|r| r.op == op && r.pid.is_none_or(|p| pids.contains(&p)))
        .copied()
}

/// The rules in force now: `$FAKE_CUDA_INJECT`, then the store's `inject`
/// file. Malformed rules are reported on stderr, once per process each.
pub fn load(store: &Store) -> Vec<Rule> {
    let mut text = std::env::var("FAKE_CUDA_INJECT").unwrap_or_default();
    if let Some(file) = store.inject_rules() {
        text.push('\n');
        text.push_str(&file);
    }
    let (rules, errors) = parse_rules(&text);
    static REPORTED: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut reported = REPORTED.lock().unwrap_or_else(|e| e.into_inner());
    for error in errors {
        if !reported.contains(&error) {
            crate::warn(&error);
            reported.push(error);
        }
    }
    rules
}

/// The effect of the rule for a call that does not name a process
/// (`init`, `driver_version`): `@PID` is matched against the caller.
pub fn for_caller(op: RuleOp) -> Option<Effect> {
    let me = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    find(&load(&Store::from_env()), op, &[me]).map(|r| r.effect)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> Rule {
        match parse_rule(text) {
            Ok(rule) => rule,
            Err(why) => panic!("`{text}`: {why}"),
        }
    }

    #[test]
    fn parses_every_effect() {
        assert_eq!(
            rule("lock=error:600"),
            Rule {
                op: RuleOp::Proc(ProcOp::Lock),
                pid: None,
                effect: Effect::Error {
                    code: 600,
                    state: None
                }
            }
        );
        assert_eq!(
            rule(" restore@1234 = error:304:failed "),
            Rule {
                op: RuleOp::Proc(ProcOp::Restore),
                pid: Some(1234),
                effect: Effect::Error {
                    code: 304,
                    state: Some(ProcState::Failed)
                }
            }
        );
        assert_eq!(rule("checkpoint=delay:250").effect, Effect::Delay(250));
        assert_eq!(rule("lock@9=busy:1000").effect, Effect::Busy(1000));
        assert_eq!(rule("restore=corrupt").effect, Effect::Corrupt);
        assert_eq!(rule("checkpoint=oom_kill").effect, Effect::OomKill);
        assert_eq!(rule("unlock@7=abort").effect, Effect::AbortCaller);
        assert_eq!(rule("init=error:100").op, RuleOp::Init);
        assert_eq!(rule("driver_version=error:34").op, RuleOp::DriverVersion);
        assert_eq!(rule("get_state=delay:0").op, RuleOp::Proc(ProcOp::GetState));
        assert_eq!(
            rule("restore_tid=error:1").op,
            RuleOp::Proc(ProcOp::RestoreTid)
        );
        assert_eq!(
            rule("unlock=error:401:locked").op,
            RuleOp::Proc(ProcOp::Unlock)
        );
    }

    #[test]
    fn rejects_malformed_rules() {
        for bad in [
            "lock",
            "lock=",
            "toggle=error:1",
            "lock@=error:1",
            "lock@abc=error:1",
            "lock@-5=error:1",
            "lock=error:",
            "lock=error:x",
            "lock=error:1:sleeping",
            "lock=delay:-1",
            "lock=delay:1.5",
            "lock=pause:5",
            "checkpoint=busy:100",
            "lock=corrupt",
            "restore=corrupt:1",
        ] {
            assert!(parse_rule(bad).is_err(), "`{bad}` was accepted");
        }
    }

    #[test]
    fn lists_split_on_semicolons_and_newlines_and_keep_going_past_bad_rules() {
        let (rules, errors) = parse_rules("lock=error:600; bogus\n\ncheckpoint=delay:5;;");
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[1].effect, Effect::Delay(5));
        assert_eq!(errors.len(), 1);
        assert!(errors[0].contains("`bogus`"), "{}", errors[0]);
    }

    #[test]
    fn the_first_matching_rule_wins() {
        let (rules, _) =
            parse_rules("lock@10=error:600; lock=delay:5; lock=error:1; checkpoint@11=error:304");
        let lock = RuleOp::Proc(ProcOp::Lock);
        let checkpoint = RuleOp::Proc(ProcOp::Checkpoint);
        assert_eq!(
            find(&rules, lock, &[10]).map(|r| r.effect),
            Some(Effect::Error {
                code: 600,
                state: None
            })
        );
        assert_eq!(
            find(&rules, lock, &[12]).map(|r| r.effect),
            Some(Effect::Delay(5))
        );
        // A thread id and its process: either PID matches.
        assert_eq!(
            find(&rules, lock, &[13, 10]).map(|r| r.effect),
            Some(Effect::Error {
                code: 600,
                state: None
            })
        );
        assert_eq!(find(&rules, checkpoint, &[10]), None);
        assert!(find(&rules, checkpoint, &[11]).is_some());
        assert_eq!(find(&rules, RuleOp::Init, &[10]), None);
    }
}
