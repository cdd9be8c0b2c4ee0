//! What `dump` and `undump` report: one value, rendered by `output`.

use std::path::PathBuf;

use crate::exit::ExitStatus;

use super::manifest::Manifest;

/// Why a dump or an undump stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskFailure {
    /// `no_such_process`, `criu_unusable`, `images_dir`, `no_room`,
    /// `refused`, `pid_in_use`, `files_changed`, `driver_mismatch`, `no_gpu_room`,
    /// `manifest`, `credentials`, `dump_incomplete`, `criu_failed`.
    pub kind: &'static str,
    pub message: String,
    pub hint: String,
    /// Whether anything had changed when it stopped.
    pub changed: bool,
}

impl DiskFailure {
    /// A refusal before any change.
    pub fn refused(
        kind: &'static str,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> DiskFailure {
        DiskFailure {
            kind,
            message: message.into(),
            hint: hint.into(),
            changed: false,
        }
    }
}

/// A dump's or an undump's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct DiskReport {
    /// `dump` or `undump`.
    pub command: &'static str,
    pub images_dir: PathBuf,
    pub failure: Option<DiskFailure>,
    /// What the dump wrote, or the undump read.
    pub manifest: Option<Manifest>,
    /// The undump: the restored tree's root, and the GPUs it moved to
    /// (old, new).
    pub restored_root: Option<i32>,
    pub gpu_map: Vec<(String, String)>,
    pub remarks: Vec<String>,
    /// CRIU's log, and its error lines when it failed.
    pub criu_log: Option<PathBuf>,
    pub criu_errors: Vec<String>,
    pub elapsed_ms: f64,
}

impl DiskReport {
    pub fn new(command: &'static str, images_dir: PathBuf) -> DiskReport {
        DiskReport {
            command,
            images_dir,
            failure: None,
            manifest: None,
            restored_root: None,
            gpu_map: Vec::new(),
            remarks: Vec::new(),
            criu_log: None,
            criu_errors: Vec::new(),
            elapsed_ms: 0.0,
        }
    }

    /// The failure of a CRIU at `path` that could not be started.
    pub fn not_started(path: &std::path::Path, why: &std::io::Error) -> DiskFailure {
        DiskFailure {
            kind: "criu_unusable",
            message: format!("could not start {}: {why}", path.display()),
            hint: "check the CRIU binary (--criu PATH)".to_string(),
            changed: false,
        }
    }

    /// The exit status: 0; 5 for a process that is not there; 8 for a
    /// refusal before any change; 1 for CRIU failing. (Exit 2 is the
    /// usage-error document's alone: the command line, before any of this.)
    pub fn exit_status(&self) -> ExitStatus {
        match self.failure.as_ref().map(|f| f.kind) {
            None => ExitStatus::Success,
            Some("no_such_process") => ExitStatus::NoProcess,
            Some("criu_failed") => ExitStatus::Failed,
            Some(_) => ExitStatus::PreflightRefused,
        }
    }
}
