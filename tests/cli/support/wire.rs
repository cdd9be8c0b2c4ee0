//! The JSON contract (schema_version 1) as the tests read it: declared here,
//! apart from the tool's own wire types, so that a change to the document
//! breaks these tests unless it is additive. Unknown fields are allowed
//! (the contract grows by adding fields); every promised field is declared,
//! and enumerations are closed, so an unknown state or kind is a failure.
//! Each document has a `check` that asserts the contract's invariants.

use serde::de::DeserializeOwned;
use serde::Deserialize;

/// A top-level document: parsed from stdout, then checked against the exit
/// status the process returned.
pub trait Document: DeserializeOwned {
    fn check(&self, exit_code: i32);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Running,
    Locked,
    Checkpointed,
    Failed,
    Unknown,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Locked => "locked",
            State::Checkpointed => "checkpointed",
            State::Failed => "failed",
            State::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    NoSuchProcess,
    ThreadNotProcess,
    NotCudaProcess,
    PermissionDenied,
    LockTimeout,
    WrongState,
    MapRejected,
    InvalidMap,
    OutOfMemory,
    DriverError,
    DriverUnavailable,
    WaitTimeout,
    NotAttempted,
    RolledBack,
    RollbackFailed,
    Interrupted,
    DeadlineExceeded,
    ProcessStopped,
    InsufficientGpuMemory,
    VerifyFailed,
    InUse,
    ProcUnreadable,
    UnsafePath,
    Unrestorable,
    Undumpable,
    InsufficientHostMemory,
    OomKilled,
    NeedsRecovery,
    LockUnavailable,
    SpawnFailed,
    CannotDrain,
    DrainTimeout,
    RebuildFailed,
    Usage,
}

/// Where the drain handshake left a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DrainOutcome {
    WouldDrain,
    CannotDrain,
    NotAcknowledged,
    Drained,
    Rebuilt,
    NotRebuilt,
    RebuildFailed,
    RebuildAsked,
    NotNeeded,
}

/// What the drain handshake did with one process.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainDoc {
    pub signal: i32,
    pub outcome: DrainOutcome,
    pub acknowledged_ms: Option<f64>,
    pub rebuilt_ms: Option<f64>,
    pub exempted: Option<String>,
    pub released_bytes: Option<u64>,
    pub footprint_bytes: Option<u64>,
    pub rebuild_error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepName {
    Lock,
    Checkpoint,
    Restore,
    Unlock,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ErrorDoc {
    pub kind: Kind,
    pub message: String,
    pub hint: Option<String>,
    pub cuda_error: Option<String>,
    pub code: Option<i32>,
}

impl ErrorDoc {
    pub fn check(&self) {
        assert!(!self.message.is_empty(), "an error has a message: {self:?}");
        assert!(
            self.hint.as_deref().is_none_or(|h| !h.is_empty()),
            "a hint is never empty: {self:?}"
        );
        assert_eq!(
            self.cuda_error.is_some(),
            self.code.is_some(),
            "cuda_error and code come together: {self:?}"
        );
        if let Some(name) = &self.cuda_error {
            assert!(name.starts_with("CUDA_"), "{name}");
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct StepDoc {
    pub step: StepName,
    pub ok: bool,
    pub rollback: bool,
    pub duration_ms: f64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ProcessDoc {
    pub pid: i32,
    pub name: Option<String>,
    pub ok: bool,
    pub state_before: Option<State>,
    pub state: State,
    pub restore_tid: Option<i32>,
    pub duration_ms: f64,
    pub steps: Vec<StepDoc>,
    pub note: Option<String>,
    pub rolled_back: bool,
    pub error: Option<ErrorDoc>,
    pub rollback_error: Option<ErrorDoc>,
    /// Whether NCCL is mapped: known for processes found by a selector or
    /// scanned because the command warns about NCCL; absent otherwise.
    pub nccl: Option<bool>,
    /// Remarks on this process (e.g. NCCL loaded); absent when none.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Its restore thread is stopped, so the driver was not asked; absent
    /// when false.
    #[serde(default)]
    pub stopped: bool,
    /// GPU memory held, from NVML (`ps`); absent when NVML is not there,
    /// as on the fake host.
    pub gpu_memory_bytes: Option<u64>,
    /// The same figure when it is what the process holds now.
    pub gpu_memory_held_bytes: Option<u64>,
    /// The same figure when it is what a checkpoint moved to host memory.
    pub gpu_memory_moved_bytes: Option<u64>,
    /// The checkpoint record written for it (checkpointing commands).
    pub record: Option<String>,
    /// A cudackpt that died while changing it (`ps`).
    pub abandoned_by: Option<i32>,
    /// The drain handshake, when it touched the process.
    pub drain: Option<DrainDoc>,
}

impl ProcessDoc {
    fn check(&self) {
        assert!(self.pid > 0, "{self:?}");
        assert!(self.abandoned_by.is_none_or(|owner| owner > 0), "{self:?}");
        // One figure, named once more by what it means.
        let named = self.gpu_memory_held_bytes.or(self.gpu_memory_moved_bytes);
        assert!(
            named.is_none() || named == self.gpu_memory_bytes,
            "{self:?}"
        );
        assert!(
            self.gpu_memory_held_bytes.is_none() || self.gpu_memory_moved_bytes.is_none(),
            "{self:?}"
        );
        assert!(self.name.as_deref().is_none_or(|n| !n.is_empty()));
        assert!(self.restore_tid.is_none_or(|tid| tid > 0), "{self:?}");
        assert!(self.duration_ms.is_finite() && self.duration_ms >= 0.0);
        assert_eq!(
            self.ok,
            self.error.is_none() && self.rollback_error.is_none(),
            "ok means no error: {self:?}"
        );
        assert!(
            self.note.is_none() || self.ok,
            "a note is a remark on success: {self:?}"
        );
        for step in &self.steps {
            assert!(step.duration_ms.is_finite() && step.duration_ms >= 0.0);
        }
        if self.rolled_back {
            assert!(
                self.steps.iter().any(|s| s.rollback && s.ok),
                "rolled back without a rollback step: {self:?}"
            );
        }
        for error in [&self.error, &self.rollback_error].into_iter().flatten() {
            error.check();
        }
        for warning in &self.warnings {
            assert!(!warning.is_empty(), "a warning is never empty: {self:?}");
        }
        if let Some(drain) = &self.drain {
            assert!((1..=64).contains(&drain.signal), "{self:?}");
            for ms in [drain.acknowledged_ms, drain.rebuilt_ms]
                .into_iter()
                .flatten()
            {
                assert!(ms.is_finite() && ms >= 0.0, "{self:?}");
            }
            assert!(
                drain.rebuilt_ms.is_none() || drain.outcome == DrainOutcome::Rebuilt,
                "only a rebuild has a rebuild time: {self:?}"
            );
        }
    }

    /// The error's kind, panicking when the process succeeded.
    pub fn kind(&self) -> Kind {
        self.error
            .as_ref()
            .unwrap_or_else(|| panic!("expected an error: {self:?}"))
            .kind
    }

    pub fn error(&self) -> &ErrorDoc {
        self.error
            .as_ref()
            .unwrap_or_else(|| panic!("expected an error: {self:?}"))
    }

    /// The steps as `name` or `name(rollback)`, with `!` for a failed one.
    pub fn step_names(&self) -> Vec<String> {
        self.steps
            .iter()
            .map(|s| {
                let name = format!("{:?}", s.step).to_lowercase();
                let name = if s.rollback {
                    format!("{name}(rollback)")
                } else {
                    name
                };
                if s.ok {
                    name
                } else {
                    format!("{name}!")
                }
            })
            .collect()
    }
}

/// A process command's document.
#[derive(Debug, Clone, Deserialize)]
pub struct ProcessCommandDoc {
    pub schema_version: u32,
    pub command: String,
    pub ok: bool,
    pub exit_code: i32,
    pub duration_ms: f64,
    /// A failure of the command as a whole, before any process was acted
    /// on (e.g. `--all` without `--yes`, a dead `--tree` root).
    pub error: Option<ErrorDoc>,
    /// Remarks on the command as a whole (e.g. no CUDA process found);
    /// absent when none.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// The GPU map passed to the driver, after completion; absent without
    /// --map.
    pub map: Option<Vec<MapPairDoc>>,
    pub processes: Vec<ProcessDoc>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct MapPairDoc {
    pub old: String,
    pub new: String,
}

impl Document for ProcessCommandDoc {
    /// Asserts the contract's invariants, given the process's exit status.
    fn check(&self, exit_code: i32) {
        assert_eq!(self.schema_version, 1);
        assert!(!self.command.is_empty());
        assert_eq!(self.exit_code, exit_code, "exit_code is the exit status");
        assert_eq!(self.ok, exit_code == 0, "ok is true only on success");
        assert_eq!(
            self.ok,
            self.error.is_none() && self.processes.iter().all(|p| p.ok),
            "ok is true only if the command and every process succeeded"
        );
        assert!(self.duration_ms.is_finite() && self.duration_ms >= 0.0);
        if let Some(error) = &self.error {
            error.check();
            // Said once: a refusal of the whole group is not repeated on
            // each process, which is only not attempted.
            for process in &self.processes {
                if let Some(own) = &process.error {
                    assert_eq!(own.kind, Kind::NotAttempted, "{self:?}");
                }
            }
        }
        for warning in &self.warnings {
            assert!(!warning.is_empty(), "a warning is never empty: {self:?}");
        }
        for process in &self.processes {
            process.check();
        }
    }
}

impl ProcessCommandDoc {
    /// The report on `pid`.
    pub fn process(&self, pid: i32) -> &ProcessDoc {
        self.processes
            .iter()
            .find(|p| p.pid == pid)
            .unwrap_or_else(|| panic!("no report on PID {pid}: {self:?}"))
    }

    /// The error that refused `pid`: the command's, when the whole group
    /// was refused (said once, at the top; the process is then only not
    /// attempted), else the process's own.
    pub fn refusal(&self, pid: i32) -> &ErrorDoc {
        match &self.error {
            Some(error) => {
                assert_eq!(self.process(pid).kind(), Kind::NotAttempted, "{self:?}");
                error
            }
            None => self.process(pid).error(),
        }
    }

    /// The report on `pid`, which must be the only one.
    pub fn only(&self, pid: i32) -> &ProcessDoc {
        assert_eq!(self.processes.len(), 1, "{self:?}");
        self.process(pid)
    }

    pub fn pids(&self) -> Vec<i32> {
        self.processes.iter().map(|p| p.pid).collect()
    }
}

/// The document for arguments that could not be parsed.
#[derive(Debug, Clone, Deserialize)]
pub struct UsageDoc {
    pub schema_version: u32,
    /// What marks it: `usage-error`.
    pub document: String,
    pub command: Option<String>,
    pub ok: bool,
    pub exit_code: i32,
    pub error: ErrorDoc,
    pub processes: Vec<serde_json::Value>,
}

impl Document for UsageDoc {
    fn check(&self, exit_code: i32) {
        assert_eq!(self.schema_version, 1);
        assert_eq!(self.document, "usage-error");
        assert!(!self.ok);
        assert_eq!(exit_code, 2);
        assert_eq!(self.exit_code, 2);
        assert_eq!(self.error.kind, Kind::Usage);
        assert!(self.processes.is_empty());
        assert!(
            self.command.as_deref().is_none_or(|c| !c.is_empty()),
            "{self:?}"
        );
        assert!(
            !self.error.message.contains("For more information")
                && !self.error.message.starts_with("error:"),
            "the message is clap's, without its prefix and tail: {self:?}"
        );
        self.error.check();
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    Ok,
    Warn,
    Fail,
    Info,
}

#[derive(Debug, Clone, Deserialize)]
pub struct CheckDoc {
    pub name: String,
    pub status: CheckStatus,
    pub detail: String,
    pub hint: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct DriverDoc {
    pub path: Option<String>,
    pub cuda_version: Option<String>,
    pub kernel_module_version: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct GpuDoc {
    pub index: i32,
    pub uuid: String,
    pub name: String,
    pub memory_total_bytes: u64,
    pub pci_bus_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct DoctorDoc {
    pub schema_version: u32,
    pub command: String,
    pub ok: bool,
    pub exit_code: i32,
    pub checks: Vec<CheckDoc>,
    pub driver: DriverDoc,
    pub gpus: Vec<GpuDoc>,
}

impl Document for DoctorDoc {
    fn check(&self, exit_code: i32) {
        assert_eq!(self.schema_version, 1);
        assert_eq!(self.command, "doctor");
        assert_eq!(self.exit_code, exit_code);
        assert_eq!(self.ok, exit_code == 0);
        assert_eq!(
            self.ok,
            self.checks.iter().all(|c| c.status != CheckStatus::Fail),
            "ok means no failed check: {self:?}"
        );
        for check in &self.checks {
            assert!(
                !check.name.is_empty() && !check.detail.is_empty(),
                "{check:?}"
            );
            assert!(check.hint.as_deref().is_none_or(|h| !h.is_empty()));
        }
        assert!(self.driver.path.as_deref().is_none_or(|p| !p.is_empty()));
        assert!(self
            .driver
            .kernel_module_version
            .as_deref()
            .is_none_or(|v| !v.is_empty()));
        for (i, gpu) in self.gpus.iter().enumerate() {
            assert_eq!(gpu.index, i32::try_from(i).expect("index"));
            assert!(gpu.uuid.starts_with("GPU-"), "{gpu:?}");
            assert!(
                !gpu.name.is_empty() && gpu.memory_total_bytes > 0,
                "{gpu:?}"
            );
        }
    }
}

impl DoctorDoc {
    pub fn check_named(&self, name: &str) -> &CheckDoc {
        self.checks
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no check {name:?}: {self:?}"))
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct DemoStepDoc {
    pub step: String,
    pub ok: bool,
    pub state: Option<State>,
    pub duration_ms: f64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct DemoDoc {
    pub schema_version: u32,
    pub command: String,
    pub ok: bool,
    pub exit_code: i32,
    pub pid: i32,
    pub size_bytes: u64,
    pub gpu: Option<GpuDoc>,
    pub steps: Vec<DemoStepDoc>,
    pub data_intact: Option<bool>,
    /// The buffer's hash as written and as read back (16 hex digits).
    pub hash_before: Option<String>,
    pub hash_after: Option<String>,
    pub error: Option<ErrorDoc>,
}

impl Document for DemoDoc {
    fn check(&self, exit_code: i32) {
        assert_eq!(self.schema_version, 1);
        assert_eq!(self.command, "demo");
        assert_eq!(self.exit_code, exit_code);
        assert_eq!(self.ok, exit_code == 0);
        assert_eq!(
            self.ok,
            self.error.is_none() && self.data_intact == Some(true)
        );
        assert!(self.pid > 0);
        for step in &self.steps {
            assert!(!step.step.is_empty() && step.duration_ms >= 0.0, "{step:?}");
        }
        if let Some(error) = &self.error {
            error.check();
        }
    }
}

impl DemoDoc {
    /// The steps as `name` (`name!` when failed) with the state reached.
    pub fn step_names(&self) -> Vec<String> {
        self.steps
            .iter()
            .map(|s| {
                let mark = if s.ok { "" } else { "!" };
                match s.state {
                    Some(state) => format!("{}{mark}→{}", s.step, state.as_str()),
                    None => format!("{}{mark}", s.step),
                }
            })
            .collect()
    }
}
