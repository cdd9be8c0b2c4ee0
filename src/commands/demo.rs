//! `demo`: the self-checkpoint round trip of NVIDIA's processCheckpoint
//! sample, through the driver API: fill GPU memory with a known pattern,
//! lock → checkpoint → restore → unlock this very process, read the memory
//! back and compare hashes. On a host that cannot checkpoint, it fails with
//! the doctor's diagnosis.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::commands::doctor::{self, DoctorReport};
use crate::commands::pattern;
use crate::driver::{CallError, CheckpointApi, Driver, ProcessState};
use crate::exit::ExitStatus;
use crate::gpu::inventory::Gpu;
use crate::ops::doors::calls as execute;
use crate::ops::doors::calls::{self as diagnose, Attempt, Facts};
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::plan::Step;
use crate::vocabulary::timeout::Timeout;

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
    pub gpu: Option<Gpu>,
    pub steps: Vec<DemoStep>,
    /// The hash of the buffer as written, before the checkpoint.
    pub hash_before: Option<u64>,
    /// The hash of the buffer read back after the restore.
    pub hash_after: Option<u64>,
    pub failure: Option<Fault>,
    /// Why the host cannot checkpoint, when the driver could not be used.
    pub diagnosis: Option<DoctorReport>,
}

impl DemoReport {
    /// Some(true) when the data read back matched, None when never checked.
    pub fn data_intact(&self) -> Option<bool> {
        let (before, after) = (self.hash_before?, self.hash_after?);
        Some(before == after)
    }

    pub fn ok(&self) -> bool {
        self.failure.is_none() && self.data_intact() == Some(true)
    }

    pub fn exit_status(&self) -> ExitStatus {
        match (&self.failure, &self.diagnosis) {
            (_, Some(diagnosis)) if diagnosis.exit_status() != ExitStatus::Success => {
                diagnosis.exit_status()
            }
            (Some(failure), _) => failure.exit_status(),
            (None, _) if self.data_intact() == Some(true) => ExitStatus::Success,
            (None, _) => ExitStatus::Failed,
        }
    }
}

fn call_failure(what: &str, error: &CallError) -> Fault {
    Fault::new(
        FaultKind::DriverError,
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
        hash_before: None,
        hash_after: None,
        failure: None,
        diagnosis: None,
    };
    let driver = match Driver::load_for_checkpoint(libcuda) {
        Ok(driver) => driver,
        Err(error) => {
            report.failure = Some(diagnose::from_load_error(&error));
            report.diagnosis = Some(doctor::examine(libcuda, &[], None));
            return report;
        }
    };
    report.gpu = match driver.devices() {
        Ok(devices) => devices.iter().find(|d| d.ordinal == device).map(Gpu::from),
        Err(error) => {
            report.failure = Some(call_failure("list the GPUs", &error));
            report.diagnosis = Some(doctor::examine(libcuda, &[], None));
            return report;
        }
    };
    if report.gpu.is_none() {
        report.failure = Some(Fault::new(
            FaultKind::Usage,
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

fn round_trip(driver: &Driver, device: i32, report: &mut DemoReport) -> Result<(), Fault> {
    let size = usize::try_from(report.size_bytes)
        .map_err(|_| Fault::new(FaultKind::Usage, "size too large", ""))?;
    let session = driver
        .open_device(device)
        .map_err(|e| call_failure("open the GPU", &e))?;
    let buffer = session
        .alloc(size)
        .map_err(|e| call_failure(&format!("allocate {} MiB of GPU memory", size >> 20), &e))?;

    let (written, took) = timed(|| pattern::write_pattern(&buffer, DEMO_SEED));
    let expected = written.map_err(|e| call_failure("fill GPU memory", &e))?;
    report.hash_before = Some(expected);
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
            name: step.kind().as_str(),
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
    report.hash_after = Some(actual);
    report.steps.push(DemoStep {
        name: "verify",
        ok: actual == expected,
        state: None,
        duration: took,
    });
    Ok(())
}

/// Leaves this process running after a failed step, so it can exit cleanly.
fn undo(driver: &Driver, pid: i32, state: Option<ProcessState>) {
    if state == Some(ProcessState::Checkpointed) {
        let _ = driver.restore(pid, &[]);
    }
    let _ = driver.unlock(pid);
}
