//! What `dump` and `undump` report: one value, rendered by `output`.

use std::path::PathBuf;
use std::time::Duration;

use crate::exit::ExitStatus;

use crate::commands::disk::manifest::Manifest;

/// Why a dump or an undump stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskFailure {
    /// `no_such_process`, `criu_unusable`, `images_dir`, `no_room`,
    /// `refused`, `pid_in_use`, `files_changed`, `port_in_use`, `address_missing`, `socket_dir`, `driver_mismatch`, `no_gpu_room`,
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

    /// What `why` says refuses the command before any change (`kind`,
    /// `hint`), unless `force`: then `why` is said in `remarks` and the
    /// command goes on.
    pub fn unless_forced(
        kind: &'static str,
        why: &str,
        hint: impl Into<String>,
        force: bool,
        remarks: &mut Vec<String>,
    ) -> Result<(), DiskFailure> {
        if force {
            remarks.push(format!("{why} (going on: --force)"));
            return Ok(());
        }
        Err(DiskFailure::refused(
            kind,
            format!("refused before any change: {why}"),
            hint,
        ))
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
    /// A signal that asked cudackpt to stop while CRIU ran, and whether a
    /// second one ended its wait for CRIU.
    pub signal: Option<i32>,
    pub abandoned: bool,
    /// The undump: where its time went, once CRIU ran.
    pub phases: Option<UndumpPhases>,
}

/// Where an undump's time went, in order, from CRIU's log and cudackpt's
/// own clock.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct UndumpPhases {
    /// cudackpt's checks before CRIU started.
    pub checks: Duration,
    /// CRIU, to its post-restore scripts: the tree and its memory (the
    /// page images, the host copies of the GPU memory among them).
    pub criu_memory: Duration,
    /// CRIU, from there to its post-resume scripts.
    pub criu_resume: Duration,
    /// The post-resume action script to CRIU's exit: the driver's restore
    /// of the GPU memory, and the resume.
    pub gpu_restore: Duration,
    /// After CRIU: the restored processes checked.
    pub after: Duration,
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
            phases: None,
            signal: None,
            abandoned: false,
        }
    }

    /// Notes what a CRIU run left for the report (its log, a signal that
    /// came while it ran); a run cudackpt stopped waiting for (a second
    /// signal) ends the command here.
    pub fn noted(
        &mut self,
        ran: crate::commands::disk::criu_tool::run::CriuRun,
    ) -> Result<crate::commands::disk::criu_tool::run::CriuRun, DiskFailure> {
        self.criu_log = Some(ran.log.clone());
        self.signal = ran.signal;
        self.abandoned = ran.abandoned;
        if ran.abandoned {
            return Err(DiskFailure {
                kind: "abandoned",
                message: ran.exit,
                hint: String::new(),
                changed: true,
            });
        }
        Ok(ran)
    }

    /// Says, once the command has ended, what a signal that came while CRIU
    /// ran left: cudackpt let CRIU finish (stopped mid-dump, CRIU could
    /// leave its parasite code in the job) and says where the tree is; after
    /// a second signal it stopped waiting, CRIU going on alone.
    pub fn note_signal(&mut self, done: &str, next: &str, if_abandoned: &str) {
        let Some(signal) = self.signal else { return };
        let name = crate::ops::doors::signals::signal_name(signal);
        if self.abandoned {
            let still = self.failure.take().map(|f| f.message).unwrap_or_default();
            self.failure = Some(DiskFailure {
                kind: "abandoned",
                message: format!(
                    "{name} came twice while CRIU ran: cudackpt stopped waiting, and CRIU {still}"
                ),
                hint: if_abandoned.to_string(),
                changed: true,
            });
            return;
        }
        self.failure = Some(match self.failure.take() {
            Some(failed) => DiskFailure {
                message: format!("{name} came while CRIU ran, and cudackpt let it finish: {}", failed.message),
                ..failed
            },
            None => DiskFailure {
                kind: "interrupted",
                message: format!("{name} came while CRIU ran, and cudackpt let it finish (stopped midway, CRIU could leave its code in the job): {done}"),
                hint: next.to_string(),
                changed: true,
            },
        });
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
    /// refusal before any change; 1 for CRIU failing; 128 + a signal's
    /// number when one came while CRIU ran (11 when two did). (Exit 2 is the
    /// usage-error document's alone: the command line, before any of this.)
    pub fn exit_status(&self) -> ExitStatus {
        if self.abandoned {
            return ExitStatus::Abandoned;
        }
        if let Some(signal) = self.signal {
            return ExitStatus::of_signal(signal);
        }
        match self.failure.as_ref().map(|f| f.kind) {
            None => ExitStatus::Success,
            Some("no_such_process") => ExitStatus::NoProcess,
            Some("criu_failed") => ExitStatus::Failed,
            Some(_) => ExitStatus::PreflightRefused,
        }
    }
}
