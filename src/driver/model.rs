//! A model of the driver for unit tests: the real state machine
//! (docs/driver-facts.md, F2) over per-PID states, without processes or a
//! GPU.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::driver::{CallError, CheckpointApi, CudaError, GpuPair, ProcessState};

/// A driver model: per-PID states with the real state machine, injectable
/// error codes per (pid, call), a per-call delay, and a log of calls.
#[derive(Default)]
pub(crate) struct Model {
    pub(crate) states: Mutex<HashMap<i32, ProcessState>>,
    pub(crate) failures: HashMap<(i32, &'static str), i32>,
    pub(crate) delay: Duration,
    pub(crate) calls: Mutex<Vec<String>>,
    pub(crate) lock_timeouts: Mutex<Vec<u32>>,
}

impl Model {
    pub(crate) fn with(states: &[(i32, ProcessState)]) -> Model {
        Model {
            states: Mutex::new(states.iter().copied().collect()),
            ..Model::default()
        }
    }

    pub(crate) fn failing(mut self, pid: i32, call: &'static str, code: i32) -> Model {
        self.failures.insert((pid, call), code);
        self
    }

    pub(crate) fn state(&self, pid: i32) -> ProcessState {
        self.states.lock().expect("model lock")[&pid]
    }

    pub(crate) fn calls(&self) -> Vec<String> {
        self.calls.lock().expect("model lock").clone()
    }

    fn transition(
        &self,
        pid: i32,
        call: &'static str,
        from: ProcessState,
        to: ProcessState,
    ) -> Result<(), CallError> {
        std::thread::sleep(self.delay);
        self.calls
            .lock()
            .expect("model lock")
            .push(format!("{call} {pid}"));
        let fail = |code| {
            Err(CallError::Cuda {
                function: call,
                error: CudaError { code },
            })
        };
        if let Some(&code) = self.failures.get(&(pid, call)) {
            return fail(code);
        }
        let mut states = self.states.lock().expect("model lock");
        let state = states.get_mut(&pid).ok_or(CallError::Cuda {
            function: call,
            error: CudaError { code: 304 },
        })?;
        if *state != from {
            return fail(401);
        }
        *state = to;
        Ok(())
    }
}

impl CheckpointApi for Model {
    fn get_state(&self, pid: i32) -> Result<ProcessState, CallError> {
        self.states
            .lock()
            .expect("model lock")
            .get(&pid)
            .copied()
            .ok_or(CallError::Cuda {
                function: "get_state",
                error: CudaError { code: 304 },
            })
    }
    fn restore_thread_id(&self, pid: i32) -> Result<i32, CallError> {
        Ok(pid + 1)
    }
    fn lock(&self, pid: i32, timeout_ms: u32) -> Result<(), CallError> {
        self.lock_timeouts
            .lock()
            .expect("model lock")
            .push(timeout_ms);
        self.transition(pid, "lock", ProcessState::Running, ProcessState::Locked)
    }
    fn checkpoint(&self, pid: i32) -> Result<(), CallError> {
        self.transition(
            pid,
            "checkpoint",
            ProcessState::Locked,
            ProcessState::Checkpointed,
        )
    }
    fn restore(&self, pid: i32, _map: &[GpuPair]) -> Result<(), CallError> {
        self.transition(
            pid,
            "restore",
            ProcessState::Checkpointed,
            ProcessState::Locked,
        )
    }
    fn unlock(&self, pid: i32) -> Result<(), CallError> {
        self.transition(pid, "unlock", ProcessState::Locked, ProcessState::Running)
    }
}
