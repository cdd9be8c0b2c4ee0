//! What a checkpoint-API call does to its target process: resolve the PID,
//! apply the injection rule that matches, run the state machine against the
//! store (restore also checks its GPU map), scramble or unscramble the
//! caller's own memory when it checkpoints itself, and log the call.

use std::thread::sleep;
use std::time::Duration;

use crate::codes::{
    CUDA_ERROR_ILLEGAL_STATE, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_READY,
    CUDA_ERROR_OPERATING_SYSTEM, CUDA_ERROR_UNKNOWN, CUDA_SUCCESS,
};
use crate::devices::{self, Uuid};
use crate::inject::{self, Effect, RuleOp};
use crate::memory;
use crate::procfs::{self, Target};
use crate::state::{Drain, ProcOp, ProcState, Store};

/// A call with its arguments, already read from C memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    GetState,
    RestoreTid,
    /// `timeout_ms` 0: wait forever.
    Lock {
        timeout_ms: u32,
    },
    Checkpoint,
    /// `pairs` empty: no remap.
    Restore {
        pairs: Vec<(Uuid, Uuid)>,
    },
    Unlock,
}

impl Request {
    pub fn op(&self) -> ProcOp {
        match self {
            Request::GetState => ProcOp::GetState,
            Request::RestoreTid => ProcOp::RestoreTid,
            Request::Lock { .. } => ProcOp::Lock,
            Request::Checkpoint => ProcOp::Checkpoint,
            Request::Restore { .. } => ProcOp::Restore,
            Request::Unlock => ProcOp::Unlock,
        }
    }
}

/// The result code and, for queries that succeed, the value to write out
/// (the `CUprocessState` or the restore thread id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    pub code: i32,
    pub value: Option<i32>,
}

impl Reply {
    fn code(code: i32) -> Reply {
        Reply { code, value: None }
    }
}

/// Performs `request` on `pid` and logs it.
pub fn call(pid: i32, request: &Request) -> Reply {
    let reply = perform(pid, request);
    log(pid, request, reply.code);
    reply
}

/// Logs a call refused before it reached the process (a bad argument).
pub fn refuse(pid: i32, request: &Request, code: i32) -> i32 {
    log(pid, request, code);
    code
}

/// The `calls.log` line: `<op> <pid> <code>[ map=OLD>NEW,...]`.
pub fn log_line(pid: i32, request: &Request, code: i32) -> String {
    let mut line = format!("{} {pid} {code}", request.op().name());
    if let Request::Restore { pairs } = request {
        if !pairs.is_empty() {
            let map: Vec<String> = pairs
                .iter()
                .map(|(old, new)| {
                    format!(
                        "{}>{}",
                        devices::format_uuid(old),
                        devices::format_uuid(new)
                    )
                })
                .collect();
            line.push_str(&format!(" map={}", map.join(",")));
        }
    }
    line
}

fn log(pid: i32, request: &Request, code: i32) {
    if let Err(e) = Store::from_env().log_call(&log_line(pid, request, code)) {
        crate::warn(&format!("cannot append to calls.log: {e}"));
    }
}

fn perform(pid: i32, request: &Request) -> Reply {
    let target = match procfs::resolve(pid) {
        Ok(target) => target,
        Err(code) => return Reply::code(code),
    };
    let store = Store::from_env();
    let op = request.op();
    let rules = inject::load(&store);
    let effect = inject::find(&rules, RuleOp::Proc(op), &[pid, target.tgid]).map(|r| r.effect);
    let mut busy_ms = None;
    let mut corrupt = false;
    let mut abort_caller = false;
    match effect {
        Some(Effect::Error { code, state }) => {
            if let Some(state) = state {
                if let Err(code) = set_state(&store, target, state) {
                    return Reply::code(code);
                }
            }
            return Reply::code(code);
        }
        Some(Effect::Delay(ms)) => {
            sleep(Duration::from_millis(ms));
            // Like the real driver, notice a process that died meanwhile.
            if let Err(code) = procfs::resolve(pid) {
                return Reply::code(code);
            }
        }
        Some(Effect::Busy(ms)) => busy_ms = Some(ms),
        Some(Effect::Corrupt) => corrupt = true,
        Some(Effect::AbortCaller) => abort_caller = true,
        Some(Effect::OomKill) => {
            crate::oom::kill(target.tgid);
            // What the real driver answered for a process the kernel was
            // tearing down (docs/driver-facts.md).
            return Reply::code(CUDA_ERROR_OPERATING_SYSTEM);
        }
        None => {}
    }
    let result = match request {
        Request::GetState => store
            .read(target.tgid, target.starttime)
            .map(|record| Reply {
                code: CUDA_SUCCESS,
                value: Some(record.state.code()),
            })
            .map_err(|e| store_error(&e)),
        Request::RestoreTid => procfs::threads(target.tgid)
            .map(|tids| Reply {
                code: CUDA_SUCCESS,
                value: Some(procfs::restore_tid(target.tgid, &tids)),
            })
            .map_err(|_| CUDA_ERROR_OPERATING_SYSTEM),
        Request::Lock { timeout_ms } => lock(&store, target, *timeout_ms, busy_ms).map(Reply::code),
        Request::Checkpoint | Request::Unlock => transition(&store, target, op).map(Reply::code),
        Request::Restore { pairs } => restore(&store, target, pairs).map(Reply::code),
    };
    let reply = result.unwrap_or_else(Reply::code);
    if reply.code == CUDA_SUCCESS && is_self(target) {
        match op {
            ProcOp::Checkpoint => memory::scramble_all(),
            ProcOp::Restore => memory::unscramble_all(corrupt),
            _ => {}
        }
    }
    if abort_caller {
        log(pid, request, reply.code);
        std::process::abort();
    }
    reply
}

/// Whether the target is the calling process.
fn is_self(target: Target) -> bool {
    u32::try_from(target.tgid).ok() == Some(std::process::id())
}

fn store_error(error: &std::io::Error) -> i32 {
    crate::warn(&format!("state store: {error}"));
    CUDA_ERROR_UNKNOWN
}

fn set_state(store: &Store, target: Target, state: ProcState) -> Result<(), i32> {
    store
        .update(target.tgid, target.starttime, |record| record.state = state)
        .map_err(|e| store_error(&e))
}

/// Moves the process along `op`'s edge, or `CUDA_ERROR_ILLEGAL_STATE`.
fn transition(store: &Store, target: Target, op: ProcOp) -> Result<i32, i32> {
    store
        .update(target.tgid, target.starttime, |record| {
            match op.next_state(record.state) {
                Some(next) => {
                    record.state = next;
                    CUDA_SUCCESS
                }
                None => CUDA_ERROR_ILLEGAL_STATE,
            }
        })
        .map_err(|e| store_error(&e))
}

/// Lock; with a `busy:MS` rule the process needs `MS` ms to drain, and a
/// shorter non-zero timeout ends in `CUDA_ERROR_NOT_READY` (still running).
/// The drain is wall-clock time: lock attempts that follow each other
/// closely (a caller retrying in slices) keep waiting on the same drain, as
/// a real process's long kernel goes on between attempts; after a pause of
/// more than `DRAIN_RESTARTS_AFTER_MS` without an attempt, new work has come
/// in and the drain starts over.
fn lock(store: &Store, target: Target, timeout_ms: u32, busy_ms: Option<u64>) -> Result<i32, i32> {
    if let Some(drain_ms) = busy_ms {
        let now = now_ms();
        let until = store
            .update(target.tgid, target.starttime, |record| {
                if record.state != ProcState::Running {
                    return None;
                }
                let until = match record.drain {
                    Some(d) if now.saturating_sub(d.last_ms) <= DRAIN_RESTARTS_AFTER_MS => {
                        d.until_ms
                    }
                    _ => now + drain_ms,
                };
                record.drain = Some(Drain {
                    until_ms: until,
                    last_ms: now,
                });
                Some(until)
            })
            .map_err(|e| store_error(&e))?;
        let Some(until) = until else {
            return Ok(CUDA_ERROR_ILLEGAL_STATE);
        };
        let remaining = until.saturating_sub(now);
        if timeout_ms != 0 && u64::from(timeout_ms) < remaining {
            sleep(Duration::from_millis(u64::from(timeout_ms)));
            let ended = now_ms();
            store
                .update(target.tgid, target.starttime, |record| {
                    if let Some(drain) = &mut record.drain {
                        drain.last_ms = ended;
                    }
                })
                .map_err(|e| store_error(&e))?;
            return Ok(CUDA_ERROR_NOT_READY);
        }
        sleep(Duration::from_millis(remaining));
    }
    store
        .update(target.tgid, target.starttime, |record| record.drain = None)
        .map_err(|e| store_error(&e))?;
    transition(store, target, ProcOp::Lock)
}

/// How long without a lock attempt lets new work in (the drain restarts).
const DRAIN_RESTARTS_AFTER_MS: u64 = 250;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Restore, checking a non-empty GPU map against every fake device; a bad
/// map leaves the process checkpointed.
fn restore(store: &Store, target: Target, pairs: &[(Uuid, Uuid)]) -> Result<i32, i32> {
    let count = if pairs.is_empty() {
        0
    } else {
        match devices::configured() {
            Ok(devices) => devices.len(),
            Err(why) => {
                crate::warn(&why);
                return Ok(CUDA_ERROR_INVALID_VALUE);
            }
        }
    };
    store
        .update(target.tgid, target.starttime, |record| {
            if record.state != ProcState::Checkpointed {
                return CUDA_ERROR_ILLEGAL_STATE;
            }
            if !pairs.is_empty() {
                match devices::remap(pairs, count, record.device) {
                    Some(device) => record.device = device,
                    None => return CUDA_ERROR_INVALID_VALUE,
                }
            }
            record.state = ProcState::Locked;
            CUDA_SUCCESS
        })
        .map_err(|e| store_error(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_name_the_op_pid_code_and_map() {
        assert_eq!(log_line(42, &Request::GetState, 0), "get_state 42 0");
        assert_eq!(
            log_line(42, &Request::Lock { timeout_ms: 5 }, 600),
            "lock 42 600"
        );
        assert_eq!(
            log_line(7, &Request::Restore { pairs: vec![] }, 0),
            "restore 7 0"
        );
        let (a, b) = (devices::uuid(0), devices::uuid(1));
        assert_eq!(
            log_line(7, &Request::Restore { pairs: vec![(a, b), (b, a)] }, 1),
            "restore 7 1 map=fa4e0000-0000-4000-8000-000000000000>fa4e0000-0000-4000-8000-000000000001,\
             fa4e0000-0000-4000-8000-000000000001>fa4e0000-0000-4000-8000-000000000000"
        );
    }
}
