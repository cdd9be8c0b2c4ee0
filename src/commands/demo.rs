//! `demo`: the self-checkpoint round trip of NVIDIA's processCheckpoint
//! sample, through the driver API: fill GPU memory with a known pattern,
//! lock → checkpoint → restore → unlock this very process, read the memory
//! back and compare hashes. On a host that cannot checkpoint, it fails with
//! the doctor's diagnosis.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::commands::devices::GpuRow;
use crate::commands::doctor::{self, DoctorReport};
use crate::commands::pattern;
use crate::driver::{CallError, CheckpointApi, Driver, ProcessState};
use crate::exit::ExitStatus;
use crate::ops::diagnose::{self, Attempt, Facts, Failure, FailureKind};
use crate::ops::execute;
use crate::ops::plan::Step;
use crate::ops::timeout::Timeout;
use crate::output::json::{self, ErrorDoc};
use crate::output::{columns, format_duration, human, millis, Look};

/// The demo's pattern stream.
const DEMO_SEED: u64 = 0x00C0_FFEE;
/// The demo locks itself; nothing else runs CUDA work here, so a lock that
/// takes this long means something is wrong.
const LOCK_TIMEOUT: Timeout = Timeout::from_millis(10_000);

#[derive(Debug, Clone)]
pub struct DemoStep {
    pub name: &'static str,
    pub ok: bool,
    pub state: Option<ProcessState>,
    pub duration: Duration,
}

#[derive(Debug, Clone)]
pub struct DemoReport {
    pub pid: i32,
    pub size_bytes: u64,
    pub gpu: Option<GpuRow>,
    pub steps: Vec<DemoStep>,
    /// Some(true) when the data read back matched, None when never checked.
    pub data_intact: Option<bool>,
    pub failure: Option<Failure>,
    /// Why the host cannot checkpoint, when the driver could not be used.
    pub diagnosis: Option<DoctorReport>,
}

impl DemoReport {
    pub fn ok(&self) -> bool {
        self.failure.is_none() && self.data_intact == Some(true)
    }

    pub fn exit_status(&self) -> ExitStatus {
        match (&self.failure, &self.diagnosis) {
            (_, Some(diagnosis)) if diagnosis.exit_status() != ExitStatus::Success => {
                diagnosis.exit_status()
            }
            (Some(failure), _) => failure.kind.exit_status(),
            (None, _) if self.data_intact == Some(true) => ExitStatus::Success,
            (None, _) => ExitStatus::Failed,
        }
    }
}

fn call_failure(what: &str, error: &CallError) -> Failure {
    Failure::new(
        FailureKind::DriverError,
        format!("demo could not {what}: {error}"),
        "run `cudackpt doctor` to check the host",
    )
}

pub fn run(libcuda: Option<&Path>, size_mib: u64, device: i32) -> DemoReport {
    let pid = std::process::id() as i32;
    let mut report = DemoReport {
        pid,
        size_bytes: size_mib << 20,
        gpu: None,
        steps: Vec::new(),
        data_intact: None,
        failure: None,
        diagnosis: None,
    };
    let driver = match Driver::load_for_checkpoint(libcuda) {
        Ok(driver) => driver,
        Err(error) => {
            report.failure = Some(diagnose::from_load_error(&error));
            report.diagnosis = Some(doctor::examine(libcuda));
            return report;
        }
    };
    report.gpu = match driver.devices() {
        Ok(devices) => devices
            .iter()
            .find(|d| d.ordinal == device)
            .map(GpuRow::from),
        Err(error) => {
            report.failure = Some(call_failure("list the GPUs", &error));
            report.diagnosis = Some(doctor::examine(libcuda));
            return report;
        }
    };
    if report.gpu.is_none() {
        report.failure = Some(Failure::new(
            FailureKind::Usage,
            format!("there is no GPU with index {device}"),
            "`cudackpt doctor` lists the GPUs",
        ));
        return report;
    }
    if let Err(failure) = round_trip(&driver, device, &mut report) {
        report.failure = Some(failure);
    }
    report
}

fn timed<T>(work: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let value = work();
    (value, started.elapsed())
}

fn round_trip(driver: &Driver, device: i32, report: &mut DemoReport) -> Result<(), Failure> {
    let size = usize::try_from(report.size_bytes)
        .map_err(|_| Failure::new(FailureKind::Usage, "size too large", ""))?;
    let session = driver
        .open_device(device)
        .map_err(|e| call_failure("open the GPU", &e))?;
    let buffer = session
        .alloc(size)
        .map_err(|e| call_failure(&format!("allocate {} MiB of GPU memory", size >> 20), &e))?;

    let (written, took) = timed(|| pattern::write_pattern(&buffer, DEMO_SEED));
    let expected = written.map_err(|e| call_failure("fill GPU memory", &e))?;
    session
        .synchronize()
        .map_err(|e| call_failure("synchronise", &e))?;
    report.steps.push(DemoStep {
        name: "fill",
        ok: true,
        state: None,
        duration: took,
    });

    let pid = report.pid;
    let steps = [
        Step::Lock {
            timeout: LOCK_TIMEOUT,
        },
        Step::Checkpoint,
        Step::Restore { map: vec![] },
        Step::Unlock,
    ];
    for step in &steps {
        let (result, took) = timed(|| execute::call(driver, pid, step));
        let state = driver.get_state(pid).ok();
        report.steps.push(DemoStep {
            name: step.name(),
            ok: result.is_ok(),
            state,
            duration: took,
        });
        if let Err(error) = result {
            let facts = Facts {
                alive: true,
                caller_privileged: true,
                state_now: state,
                driver_says: None,
            };
            let failure = diagnose::from_call(
                Attempt::Step(step),
                pid,
                Some("cudackpt demo"),
                &error,
                facts,
            );
            undo(driver, pid, state);
            return Err(failure);
        }
    }

    let (read, took) = timed(|| pattern::hash_device(&buffer));
    let actual = read.map_err(|e| call_failure("read GPU memory back", &e))?;
    report.steps.push(DemoStep {
        name: "verify",
        ok: actual == expected,
        state: None,
        duration: took,
    });
    report.data_intact = Some(actual == expected);
    Ok(())
}

/// Leaves this process running after a failed step, so it can exit cleanly.
fn undo(driver: &Driver, pid: i32, state: Option<ProcessState>) {
    if state == Some(ProcessState::Checkpointed) {
        let _ = driver.restore(pid, &[]);
    }
    let _ = driver.unlock(pid);
}

/// GiB/s for the steps that move the memory.
fn throughput(step: &DemoStep, bytes: u64) -> String {
    match step.name {
        "fill" | "checkpoint" | "restore" | "verify" if step.duration > Duration::ZERO => {
            format!(
                "{:.2} GiB/s",
                bytes as f64 / (1u64 << 30) as f64 / step.duration.as_secs_f64()
            )
        }
        _ => String::new(),
    }
}

pub fn render_human(report: &DemoReport, look: Look) -> (String, String) {
    let mut out = String::new();
    let mut err = String::new();
    let gpu = report.gpu.as_ref().map_or("no GPU".to_string(), |g| {
        format!("GPU {} {} ({})", g.index, g.name, g.uuid)
    });
    out.push_str(&format!(
        "demo: PID {}, {gpu}, {} MiB\n",
        report.pid,
        report.size_bytes >> 20
    ));
    let rows: Vec<Vec<String>> = report
        .steps
        .iter()
        .map(|step| {
            let result = match (step.name, step.ok, step.state) {
                ("verify", true, _) => "data intact".to_string(),
                ("verify", false, _) => look.bad("DATA CHANGED"),
                ("fill", _, _) => "pattern written".to_string(),
                (_, ok, state) => format!(
                    "{}{}",
                    if ok { "→ " } else { "FAILED, now " },
                    look.state(state)
                ),
            };
            vec![
                format!("  {}", step.name),
                result,
                format_duration(step.duration),
                throughput(step, report.size_bytes),
            ]
        })
        .collect();
    out.push_str(&columns(&rows));
    if let Some(failure) = &report.failure {
        err.push_str(&human::failure_text(failure));
    }
    if let Some(diagnosis) = &report.diagnosis {
        for check in diagnosis.failures() {
            err.push_str(&format!(
                "  doctor: {}: {}\n",
                check.name,
                check.detail.replace('\n', "; ")
            ));
            if let Some(hint) = &check.hint {
                err.push_str(&format!("    hint: {hint}\n"));
            }
        }
    }
    out.push_str(&if report.ok() {
        format!(
            "PASS: {} MiB of GPU memory survived checkpoint and restore\n",
            report.size_bytes >> 20
        )
    } else {
        format!("{}\n", look.bad("FAIL"))
    });
    (out, err)
}

#[derive(Serialize)]
struct DemoDoc<'a> {
    schema_version: u32,
    command: &'static str,
    ok: bool,
    exit_code: u8,
    pid: i32,
    size_bytes: u64,
    gpu: Option<&'a GpuRow>,
    steps: Vec<StepDoc>,
    data_intact: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorDoc<'a>>,
}

#[derive(Serialize)]
struct StepDoc {
    step: &'static str,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<&'static str>,
    duration_ms: f64,
}

pub fn render_json(report: &DemoReport) -> String {
    json::to_line(&DemoDoc {
        schema_version: json::SCHEMA_VERSION,
        command: "demo",
        ok: report.ok(),
        exit_code: report.exit_status().code(),
        pid: report.pid,
        size_bytes: report.size_bytes,
        gpu: report.gpu.as_ref(),
        steps: report
            .steps
            .iter()
            .map(|s| StepDoc {
                step: s.name,
                ok: s.ok,
                state: s.state.map(|st| st.as_str()),
                duration_ms: millis(s.duration),
            })
            .collect(),
        data_intact: report.data_intact,
        error: report.failure.as_ref().map(ErrorDoc::from_failure),
    })
}

impl crate::output::Rendered for DemoReport {
    fn json(&self) -> String {
        render_json(self)
    }

    fn human(&self, look: Look) -> (String, String) {
        render_human(self, look)
    }

    fn exit_status(&self) -> ExitStatus {
        DemoReport::exit_status(self)
    }
}
