//! The JSON contract (schema_version 1), every document in this one file:
//! wire types kept apart from the internal reports so a document changes
//! only on purpose, and only by adding fields. Exactly one document per
//! invocation, on stdout.

use std::path::Path;

use schemars::JsonSchema;
use serde::Serialize;

use crate::commands::demo::DemoReport;
use crate::commands::devices::DevicesReport;
use crate::commands::doctor::{Check, DoctorReport, DriverInfo, Status};
use crate::gpu::inventory::{Gpu, Source};

use super::look::millis;
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::report::{CallRecord, CommandReport, GpuBytes, TargetReport};

pub const SCHEMA_VERSION: u32 = 1;

/// The names a failure `kind` takes.
fn kind_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let kinds: Vec<&str> = crate::vocabulary::failure::FaultKind::ALL
        .iter()
        .map(|k| k.as_str())
        .collect();
    schemars::json_schema!({ "type": "string", "enum": kinds })
}

/// Where the drain handshake left a process.
fn drain_outcome_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let outcomes: Vec<&str> = crate::drain::report::DrainVerdict::ALL
        .iter()
        .map(|o| o.as_str())
        .collect();
    schemars::json_schema!({ "type": "string", "enum": outcomes })
}

/// The names a process state takes (`unknown`: not known, or a state this
/// cudackpt does not know).
fn state_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    use crate::driver::{ProcessState, NAMED_STATES};
    let states: Vec<&str> = NAMED_STATES
        .iter()
        .chain(&[ProcessState::Unknown(0)])
        .map(|s| s.as_str())
        .collect();
    schemars::json_schema!({ "type": "string", "enum": states })
}

/// Every document kind and its JSON Schema, as committed under `schema/`.
pub fn schemas() -> Vec<(&'static str, serde_json::Value)> {
    fn schema<T: JsonSchema>() -> serde_json::Value {
        // What cudackpt writes: a field it may leave out is not required.
        schemars::generate::SchemaSettings::draft2020_12()
            .for_serialize()
            .into_generator()
            .into_root_schema_for::<T>()
            .to_value()
    }
    vec![
        ("process-command", schema::<ProcessCommandDoc<'static>>()),
        ("usage-error", schema::<UsageDoc<'static>>()),
        ("devices", schema::<DevicesDoc<'static>>()),
        ("doctor", schema::<DoctorDoc<'static>>()),
        ("demo", schema::<DemoDoc<'static>>()),
        ("install-compat", schema::<InstallDoc<'static>>()),
        ("progress-event", schema::<ProgressEventDoc<'static>>()),
        ("disk-command", schema::<DiskDoc<'static>>()),
        ("version", schema::<VersionDoc<'static>>()),
        (
            "dump-manifest",
            schema::<crate::commands::disk::manifest::Manifest>(),
        ),
    ]
}

/// One progress event (`--progress-fd`): a JSON line, its kind in `event`.
#[derive(Serialize, JsonSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ProgressEventDoc<'a> {
    /// A driver call on a process started.
    StepStarted {
        schema_version: u32,
        /// Milliseconds since the command started.
        at_ms: f64,
        pid: i32,
        name: &'a str,
        step: &'static str,
        /// A call undoing an earlier one.
        rollback: bool,
    },
    /// A driver call on a process ended.
    StepDone {
        schema_version: u32,
        at_ms: f64,
        pid: i32,
        name: &'a str,
        step: &'static str,
        rollback: bool,
        ok: bool,
        duration_ms: f64,
    },
    /// A pre-flight's remark, said before the work (the final document
    /// carries it too, in `warnings`).
    Remark {
        schema_version: u32,
        at_ms: f64,
        message: &'a str,
    },
    /// The drain's request went to a process (`--drain`); the wait for its
    /// acknowledgement starts.
    DrainAsked {
        schema_version: u32,
        at_ms: f64,
        pid: i32,
        name: &'a str,
    },
    /// A process asked to drain acknowledged after `after_ms`, or did not
    /// (`acknowledged` false: not in time, or gone).
    DrainAnswered {
        schema_version: u32,
        at_ms: f64,
        pid: i32,
        name: &'a str,
        acknowledged: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        after_ms: Option<f64>,
    },
    /// `dump` or `undump` while CRIU runs: the images' bytes written so far
    /// (0 for an undump, which reads them), against the size expected.
    Images {
        schema_version: u32,
        at_ms: f64,
        /// `dump` or `undump`.
        command: &'static str,
        bytes: u64,
        expected_bytes: u64,
    },
}

/// The `images` event of a dump or an undump (pure).
pub fn images_event(
    command: &'static str,
    bytes: u64,
    expected_bytes: u64,
    at: std::time::Duration,
) -> String {
    to_line(&ProgressEventDoc::Images {
        schema_version: SCHEMA_VERSION,
        at_ms: millis(at),
        command,
        bytes,
        expected_bytes,
    })
}

/// `event` as its JSON lines (one a process), `at` into the command (pure).
pub fn progress_event(event: &crate::ops::Progress<'_>, at: std::time::Duration) -> String {
    use crate::ops::Progress;
    let at_ms = millis(at);
    let doc = match event {
        Progress::DrainAsked { targets } => {
            return targets
                .iter()
                .map(|target| {
                    to_line(&ProgressEventDoc::DrainAsked {
                        schema_version: SCHEMA_VERSION,
                        at_ms,
                        pid: target.pid,
                        name: &target.name,
                    })
                })
                .collect();
        }
        Progress::DrainAnswered {
            target,
            acknowledged,
        } => ProgressEventDoc::DrainAnswered {
            schema_version: SCHEMA_VERSION,
            at_ms,
            pid: target.pid,
            name: &target.name,
            acknowledged: acknowledged.is_some(),
            after_ms: acknowledged.map(millis),
        },
        Progress::Started {
            target,
            step,
            rollback,
        } => ProgressEventDoc::StepStarted {
            schema_version: SCHEMA_VERSION,
            at_ms,
            pid: target.pid,
            name: &target.name,
            step: step.as_str(),
            rollback: *rollback,
        },
        Progress::Done(done) => ProgressEventDoc::StepDone {
            schema_version: SCHEMA_VERSION,
            at_ms,
            pid: done.target.pid,
            name: &done.target.name,
            step: done.step.as_str(),
            rollback: done.rollback,
            ok: done.ok,
            duration_ms: millis(done.took),
        },
        Progress::Remark(message) => ProgressEventDoc::Remark {
            schema_version: SCHEMA_VERSION,
            at_ms,
            message,
        },
    };
    to_line(&doc)
}

/// A process command's document.
#[derive(Serialize, JsonSchema)]
pub struct ProcessCommandDoc<'a> {
    pub schema_version: u32,
    pub command: &'a str,
    pub ok: bool,
    pub exit_code: u8,
    pub duration_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDoc<'a>>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub warnings: &'a [String],
    /// The GPU map passed to the driver, completed (restores with --map).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub map: Option<Vec<MapPairDoc>>,
    pub processes: Vec<ProcessDoc<'a>>,
}

#[derive(Serialize, JsonSchema)]
pub struct MapPairDoc {
    pub old: String,
    pub new: String,
}

#[derive(Serialize, JsonSchema)]
pub struct ProcessDoc<'a> {
    pub pid: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<&'a str>,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "state_schema")]
    pub state_before: Option<&'static str>,
    #[schemars(schema_with = "state_schema")]
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restore_tid: Option<i32>,
    pub duration_ms: f64,
    pub steps: Vec<StepDoc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<&'a str>,
    pub rolled_back: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDoc<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollback_error: Option<ErrorDoc<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl: Option<bool>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stopped: bool,
    /// Held now (`ps`, a verified restore) or moved at checkpoint: the two
    /// fields below say which.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_memory_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_memory_held_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_memory_moved_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<&'a str>,
    /// A cudackpt that died while changing it (`ps`): `recover` it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abandoned_by: Option<i32>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub warnings: &'a [String],
    /// The drain handshake (cudackpt(1), DRAIN PROTOCOL): `--drain`, or a rebuild on resume.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain: Option<DrainDoc<'a>>,
}

/// What the drain handshake did with one process.
#[derive(Serialize, JsonSchema)]
pub struct DrainDoc<'a> {
    /// The signal number that asked it to drain (and to rebuild).
    pub signal: i32,
    #[schemars(schema_with = "drain_outcome_schema")]
    pub outcome: &'static str,
    /// How long it took to acknowledge (its marker thread appeared).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acknowledged_ms: Option<f64>,
    /// How long its rebuild took (its marker thread went).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebuilt_ms: Option<f64>,
    /// The evidence not held against it because it acknowledged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exempted: Option<&'a str>,
    /// The GPU memory it gave back between the request and its
    /// acknowledgement, in bytes (NVML; absent without NVML).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub released_bytes: Option<u64>,
    /// The GPU memory it held once drained, in bytes: what its checkpoint
    /// copies (NVML; absent without NVML).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub footprint_bytes: Option<u64>,
    /// Why its rebuild failed, in the rank's own words (the first 200
    /// characters it stated), when it said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebuild_error: Option<&'a str>,
}

#[derive(Serialize, JsonSchema)]
pub struct StepDoc {
    pub step: String,
    pub ok: bool,
    pub rollback: bool,
    pub duration_ms: f64,
}

#[derive(Serialize, JsonSchema)]
pub struct ErrorDoc<'a> {
    #[schemars(schema_with = "kind_schema")]
    pub kind: &'static str,
    pub message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cuda_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
}

impl<'a> ErrorDoc<'a> {
    pub fn from_failure(failure: &'a Fault) -> ErrorDoc<'a> {
        ErrorDoc {
            kind: failure.kind.as_str(),
            message: &failure.message,
            hint: failure.hint.as_deref(),
            cuda_error: failure.cuda.map(|c| c.name()),
            code: failure.cuda.map(|c| c.code),
        }
    }
}

fn step_doc(step: &CallRecord) -> StepDoc {
    StepDoc {
        step: step.step.to_string(),
        ok: step.ok,
        rollback: step.rollback,
        duration_ms: millis(step.duration),
    }
}

fn process_doc(p: &TargetReport) -> ProcessDoc<'_> {
    ProcessDoc {
        pid: p.pid,
        name: p.name.as_deref(),
        ok: p.ok(),
        state_before: p.state_before.map(|s| s.as_str()),
        state: p.state.map_or("unknown", |s| s.as_str()),
        restore_tid: p.restore_tid,
        duration_ms: millis(p.duration),
        steps: p.steps.iter().map(step_doc).collect(),
        note: p.note.as_deref(),
        rolled_back: p.rolled_back,
        error: p.failure.as_ref().map(ErrorDoc::from_failure),
        rollback_error: p.rollback_failure.as_ref().map(ErrorDoc::from_failure),
        nccl: p.nccl,
        stopped: p.stopped,
        gpu_memory_bytes: p.gpu_memory.map(GpuBytes::bytes),
        gpu_memory_held_bytes: match p.gpu_memory {
            Some(GpuBytes::Held(bytes)) => Some(bytes),
            _ => None,
        },
        gpu_memory_moved_bytes: match p.gpu_memory {
            Some(GpuBytes::Moved(bytes)) => Some(bytes),
            _ => None,
        },
        record: p.record.as_deref(),
        abandoned_by: p.abandoned_by,
        warnings: &p.warnings,
        drain: p.drain.as_ref().map(|d| DrainDoc {
            signal: d.signal,
            outcome: d.outcome.as_str(),
            acknowledged_ms: d.acknowledged.map(millis),
            rebuilt_ms: d.rebuilt.map(millis),
            exempted: d.exempted.as_deref(),
            released_bytes: d.released_bytes,
            footprint_bytes: d.footprint_bytes,
            rebuild_error: d.rebuild_error.as_deref(),
        }),
    }
}

/// Renders a process command's report as one JSON document and a newline.
pub fn process_report(report: &CommandReport) -> String {
    // Exit 2 is one document, whoever found the usage error: clap, the
    // map's parser, or the command's own check (`--all` without `--yes`, a
    // cgroup that does not exist), which refuses before any process.
    if let Some(usage) = usage_refusal(report) {
        return usage_error(
            Some(report.command),
            &usage.message,
            usage.hint.as_deref().unwrap_or_default(),
        );
    }
    let doc = ProcessCommandDoc {
        schema_version: SCHEMA_VERSION,
        command: report.command,
        ok: report.ok(),
        exit_code: report.exit_status().code(),
        duration_ms: millis(report.duration),
        error: report.failure.as_ref().map(ErrorDoc::from_failure),
        warnings: &report.warnings,
        map: report.map.as_ref().map(|pairs| {
            pairs
                .iter()
                .map(|p| MapPairDoc {
                    old: p.old.to_string(),
                    new: p.new.to_string(),
                })
                .collect()
        }),
        processes: report.processes.iter().map(process_doc).collect(),
    };
    to_line(&doc)
}

/// Any wire document as one line of JSON.
pub fn to_line<T: Serialize>(doc: &T) -> String {
    // Serialising these plain structs cannot fail (no maps with non-string
    // keys, no custom serialisers); fall back to a valid document anyway.
    let mut text = serde_json::to_string(doc)
        .unwrap_or_else(|e| format!("{{\"schema_version\":{SCHEMA_VERSION},\"ok\":false,\"error\":{{\"kind\":\"internal\",\"message\":{:?}}}}}", e.to_string()));
    text.push('\n');
    text
}

/// What marks a usage-error document, so that a consumer can pick its
/// schema from the document alone: `"document": "usage-error"`.
#[derive(Serialize, JsonSchema)]
enum UsageMark {
    #[serde(rename = "usage-error")]
    UsageError,
}

#[derive(Serialize, JsonSchema)]
struct UsageDoc<'a> {
    schema_version: u32,
    document: UsageMark,
    command: Option<&'a str>,
    ok: bool,
    exit_code: u8,
    error: ErrorDoc<'a>,
    processes: [(); 0],
}

/// The document for arguments that could not be parsed or used: `command`
/// is the subcommand named, when one was; `message` says what is wrong and
/// `hint` what to do.
/// The usage error that refused a whole command, if one did: its own, or
/// the one every process was refused with (pure).
fn usage_refusal(report: &CommandReport) -> Option<&Fault> {
    let usage = |f: &&Fault| f.kind == FaultKind::Usage;
    if let Some(failure) = report.failure.as_ref().filter(usage) {
        return Some(failure);
    }
    let each: Vec<&Fault> = report
        .processes
        .iter()
        .map(|p| p.failure.as_ref().filter(usage))
        .collect::<Option<_>>()?;
    each.first().copied()
}

pub fn usage_error(command: Option<&str>, message: &str, hint: &str) -> String {
    to_line(&UsageDoc {
        schema_version: SCHEMA_VERSION,
        document: UsageMark::UsageError,
        command,
        ok: false,
        exit_code: crate::exit::ExitStatus::Usage.code(),
        error: ErrorDoc {
            kind: "usage",
            message,
            hint: Some(hint),
            cuda_error: None,
            code: None,
        },
        processes: [],
    })
}

#[derive(Serialize, JsonSchema)]
enum VersionMark {
    #[serde(rename = "version")]
    Version,
}

/// `cudackpt --json --version`: which cudackpt this is. `version` is the
/// crate's (`0.3.0`, or `0.3.0+dev` for a build after that release),
/// `release` the release it is or follows, `is_release` whether it is that
/// release itself.
#[derive(Serialize, JsonSchema)]
struct VersionDoc<'a> {
    schema_version: u32,
    document: VersionMark,
    name: &'static str,
    version: &'a str,
    release: &'a str,
    is_release: bool,
}

/// The version document for `version` (pure): its release is the version
/// without its build metadata (`+dev`).
pub fn version(version: &str) -> String {
    let release = version.split('+').next().unwrap_or(version);
    to_line(&VersionDoc {
        schema_version: SCHEMA_VERSION,
        document: VersionMark::Version,
        name: "cudackpt",
        version,
        release,
        is_release: release == version,
    })
}

#[derive(Serialize, JsonSchema)]
struct InstallDoc<'a> {
    schema_version: u32,
    command: &'static str,
    ok: bool,
    exit_code: u8,
    message: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

/// The document for `install-compat`.
pub fn install_compat(report: &crate::commands::install_compat::InstallReport) -> String {
    to_line(&InstallDoc {
        schema_version: SCHEMA_VERSION,
        command: "install-compat",
        ok: report.ok,
        exit_code: report.exit.code(),
        message: &report.message,
        warnings: &report.warnings,
    })
}

/// One GPU, as `devices`, `doctor` and `demo` show it; `null` fields could
/// not be known.
#[derive(Serialize, JsonSchema)]
pub struct GpuDoc {
    pub index: usize,
    pub uuid: String,
    pub name: String,
    pub pci_bus_id: Option<String>,
    pub memory_total_bytes: Option<u64>,
    pub memory_free_bytes: Option<u64>,
    pub mig_enabled: Option<bool>,
    pub persistence_mode: Option<bool>,
}

impl GpuDoc {
    fn from_gpu(gpu: &Gpu) -> GpuDoc {
        GpuDoc {
            index: gpu.index,
            uuid: gpu.uuid.to_string(),
            name: gpu.name.clone(),
            pci_bus_id: gpu.pci_bus_id.clone(),
            memory_total_bytes: gpu.memory_total_bytes,
            memory_free_bytes: gpu.memory_free_bytes,
            mig_enabled: gpu.mig_enabled,
            persistence_mode: gpu.persistence_mode,
        }
    }
}

fn source_name(source: Source) -> &'static str {
    match source {
        Source::KernelDriver => "kernel_driver",
        Source::Nvml => "nvml",
        Source::CudaDriver => "cuda_driver",
    }
}

#[derive(Serialize, JsonSchema)]
struct DevicesDoc<'a> {
    schema_version: u32,
    command: &'static str,
    ok: bool,
    exit_code: u8,
    source: Option<&'static str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorDoc<'a>>,
    gpus: Vec<GpuDoc>,
}

/// The document for `devices`.
pub fn devices(report: &DevicesReport) -> String {
    to_line(&DevicesDoc {
        schema_version: SCHEMA_VERSION,
        command: "devices",
        ok: report.error.is_none(),
        exit_code: report.exit_status().code(),
        source: report.source.map(source_name),
        warnings: &report.warnings,
        error: report.error.as_deref().map(|message| ErrorDoc {
            kind: "driver_unavailable",
            message,
            hint: Some(DevicesReport::HINT),
            cuda_error: None,
            code: None,
        }),
        gpus: report.gpus.iter().map(GpuDoc::from_gpu).collect(),
    })
}

#[derive(Serialize, JsonSchema)]
struct CheckDoc<'a> {
    name: &'static str,
    status: &'static str,
    detail: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    hint: Option<&'a str>,
}

fn status_name(status: Status) -> &'static str {
    match status {
        Status::Ok => "ok",
        Status::Warn => "warn",
        Status::Fail => "fail",
        Status::Info => "info",
    }
}

#[derive(Serialize, JsonSchema)]
struct DriverDoc<'a> {
    path: Option<&'a Path>,
    cuda_version: Option<&'a str>,
    kernel_module_version: Option<&'a str>,
    features: FeaturesDoc,
}

#[derive(Serialize, JsonSchema)]
struct FeaturesDoc {
    checkpoint_api: bool,
    lock_timeout: bool,
    gpu_remapping: bool,
}

impl<'a> DriverDoc<'a> {
    fn from_facts(facts: &'a DriverInfo) -> DriverDoc<'a> {
        DriverDoc {
            path: facts.path.as_deref(),
            cuda_version: facts.cuda_version.as_deref(),
            kernel_module_version: facts.kernel_module_version.as_deref(),
            features: FeaturesDoc {
                checkpoint_api: facts.features.checkpoint_api,
                lock_timeout: facts.features.lock_timeout,
                gpu_remapping: facts.features.gpu_remapping,
            },
        }
    }
}

#[derive(Serialize, JsonSchema)]
struct DoctorDoc<'a> {
    schema_version: u32,
    command: &'static str,
    ok: bool,
    exit_code: u8,
    checks: Vec<CheckDoc<'a>>,
    driver: DriverDoc<'a>,
    gpus: Vec<GpuDoc>,
}

fn check_doc(check: &Check) -> CheckDoc<'_> {
    CheckDoc {
        name: check.name,
        status: status_name(check.status),
        detail: &check.detail,
        hint: check.hint.as_deref(),
    }
}

/// The document for `doctor`.
pub fn doctor(report: &DoctorReport) -> String {
    to_line(&DoctorDoc {
        schema_version: SCHEMA_VERSION,
        command: "doctor",
        ok: report.ok(),
        exit_code: report.exit_status().code(),
        checks: report.checks.iter().map(check_doc).collect(),
        driver: DriverDoc::from_facts(&report.driver),
        gpus: report.gpus.iter().map(GpuDoc::from_gpu).collect(),
    })
}

#[derive(Serialize, JsonSchema)]
struct DemoDoc<'a> {
    schema_version: u32,
    command: &'static str,
    ok: bool,
    exit_code: u8,
    pid: i32,
    size_bytes: u64,
    gpu: Option<GpuDoc>,
    steps: Vec<DemoStepDoc>,
    data_intact: Option<bool>,
    /// The buffer's hash as written, before the checkpoint (16 hex digits).
    #[serde(skip_serializing_if = "Option::is_none")]
    hash_before: Option<String>,
    /// Its hash read back after the restore.
    #[serde(skip_serializing_if = "Option::is_none")]
    hash_after: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorDoc<'a>>,
}

#[derive(Serialize, JsonSchema)]
struct DemoStepDoc {
    step: &'static str,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<&'static str>,
    duration_ms: f64,
}

/// The document for `demo`.
pub fn demo(report: &DemoReport) -> String {
    to_line(&DemoDoc {
        schema_version: SCHEMA_VERSION,
        command: "demo",
        ok: report.ok(),
        exit_code: report.exit_status().code(),
        pid: report.pid,
        size_bytes: report.size_bytes,
        gpu: report.gpu.as_ref().map(GpuDoc::from_gpu),
        steps: report
            .steps
            .iter()
            .map(|s| DemoStepDoc {
                step: s.name,
                ok: s.ok,
                state: s.state.map(|st| st.as_str()),
                duration_ms: millis(s.duration),
            })
            .collect(),
        data_intact: report.data_intact(),
        hash_before: report.hash_before.map(|h| format!("{h:016x}")),
        hash_after: report.hash_after.map(|h| format!("{h:016x}")),
        error: report.failure.as_ref().map(ErrorDoc::from_failure),
    })
}

/// The document of a `dump` or an `undump`.
#[derive(Serialize, JsonSchema)]
pub struct DiskDoc<'a> {
    schema_version: u32,
    /// `dump` or `undump`.
    command: &'static str,
    ok: bool,
    exit_code: u8,
    images_dir: String,
    /// What the dump wrote (also `cudackpt-manifest.json` in the images
    /// directory), or what the undump read.
    #[serde(skip_serializing_if = "Option::is_none")]
    manifest: Option<&'a crate::commands::disk::manifest::Manifest>,
    /// The undump: the restored tree's root.
    #[serde(skip_serializing_if = "Option::is_none")]
    restored_root_pid: Option<i32>,
    /// The undump: the job's GPUs that moved, old UUID to new.
    #[serde(skip_serializing_if = "<[GpuMoveDoc]>::is_empty")]
    gpu_map: Vec<GpuMoveDoc>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    criu_log: Option<String>,
    /// CRIU's error lines, when it failed.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    criu_errors: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<DiskErrorDoc<'a>>,
    elapsed_ms: f64,
    /// The undump: where its time went, once CRIU ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    phases: Option<UndumpPhasesDoc>,
}

/// Where an undump's time went, in order (milliseconds): they add up to
/// `elapsed_ms`, less the report itself.
#[derive(Serialize, JsonSchema)]
struct UndumpPhasesDoc {
    /// cudackpt's checks before CRIU started.
    checks_ms: f64,
    /// CRIU, to its post-restore scripts: the tree and its memory, the
    /// page images read (the host copies of GPU memory among them).
    criu_memory_ms: f64,
    /// CRIU, from there to its post-resume scripts.
    criu_resume_ms: f64,
    /// The post-resume action script to CRIU's exit: the driver's restore
    /// of the GPU memory.
    gpu_restore_ms: f64,
    /// After CRIU: the restored processes checked.
    after_criu_ms: f64,
}

/// One GPU of the job that moved at the undump.
#[derive(Serialize, JsonSchema)]
struct GpuMoveDoc {
    from: String,
    to: String,
}

/// Why a dump or an undump stopped.
#[derive(Serialize, JsonSchema)]
struct DiskErrorDoc<'a> {
    /// `no_such_process`, `criu_unusable`, `refused`,
    /// `images_dir`, `no_room`, `driver_mismatch`, `pid_in_use`, `files_changed`, `port_in_use`, `address_missing`, `socket_dir`,
    /// `no_gpu_room`, `manifest` (it asks CRIU for an option no dump
    /// chooses), `credentials` (images another user could have written
    /// would restore more than that user), `dump_incomplete` (the dump was
    /// cut short), `criu_failed`, `interrupted` (a signal came while CRIU
    /// ran, and cudackpt let it finish: the message says where the tree
    /// is), `abandoned` (a second signal: cudackpt stopped waiting for
    /// CRIU).
    kind: &'static str,
    message: &'a str,
    hint: &'a str,
    /// Whether anything had changed when it stopped (false: refused before
    /// any change).
    changed: bool,
}

/// The document of `dump` and `undump`.
pub fn disk(report: &crate::commands::disk::report::DiskReport) -> String {
    to_line(&DiskDoc {
        schema_version: SCHEMA_VERSION,
        command: report.command,
        ok: report.failure.is_none(),
        exit_code: report.exit_status().code(),
        images_dir: report.images_dir.display().to_string(),
        manifest: report.manifest.as_ref(),
        restored_root_pid: report.restored_root,
        gpu_map: report
            .gpu_map
            .iter()
            .map(|(from, to)| GpuMoveDoc {
                from: from.clone(),
                to: to.clone(),
            })
            .collect(),
        warnings: &report.remarks,
        criu_log: report.criu_log.as_ref().map(|p| p.display().to_string()),
        criu_errors: &report.criu_errors,
        error: report.failure.as_ref().map(|f| DiskErrorDoc {
            kind: f.kind,
            message: &f.message,
            hint: &f.hint,
            changed: f.changed,
        }),
        elapsed_ms: (report.elapsed_ms * 1e3).round() / 1e3,
        phases: report.phases.map(|p| UndumpPhasesDoc {
            checks_ms: millis(p.checks),
            criu_memory_ms: millis(p.criu_memory),
            criu_resume_ms: millis(p.criu_resume),
            gpu_restore_ms: millis(p.gpu_restore),
            after_criu_ms: millis(p.after),
        }),
    })
}
