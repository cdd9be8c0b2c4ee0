//! Around a checkpoint and a restore: what to record before a process is
//! checkpointed (the host's GPUs, its device memory per GPU), and what to
//! check before it is restored (`--map auto`, and whether the target GPUs
//! have the memory). Effects (NVML, files) here; decisions in `record.rs`
//! and `preflight.rs`.

use std::collections::HashMap;
use std::path::Path;

use crate::driver::{format_version, Driver, GpuPair, GpuUuid, ProcessState};
use crate::gpu::inventory::Inventory;
use crate::gpu::record::{self, Record, RecordedGpu, RecordedUse};
use crate::ops::diagnose::{describe_process, Failure, FailureKind};
use crate::ops::preflight;
use crate::ops::report::ProcessReport;
use crate::targets::process::Target;

/// What is known about the host and the targets just before a checkpoint.
pub struct Snapshot {
    host: Vec<RecordedGpu>,
    memory: Option<HashMap<i32, Vec<(GpuUuid, u64)>>>,
    cuda_version: Option<String>,
}

/// Takes the snapshot: GPUs from NVML or the kernel driver (never the CUDA
/// driver, whose listing costs a `cuInit`), per-process memory from NVML
/// when it is installed.
pub fn snapshot(driver: &Driver, host: &Inventory<'_>) -> Snapshot {
    let gpus = host
        .without_cuda()
        .map(|listing| {
            listing
                .gpus
                .iter()
                .map(|g| RecordedGpu {
                    index: g.index,
                    uuid: g.uuid,
                    name: g.name.clone(),
                    memory_total_bytes: g.memory_total_bytes,
                })
                .collect()
        })
        .unwrap_or_default();
    let memory = crate::gpu::nvml::open()
        .and_then(crate::gpu::nvml::memory_by_process_and_gpu)
        .ok();
    Snapshot {
        host: gpus,
        memory,
        cuda_version: driver.version().ok().map(|v| format_version(Some(v))),
    }
}

/// Writes a record for every process this command checkpointed; returns
/// the warnings for records that could not be written.
pub fn write_records(
    dir: &Path,
    snapshot: &Snapshot,
    targets: &[Target],
    reports: &mut [ProcessReport],
) -> Vec<String> {
    let mut warnings = Vec::new();
    for report in reports.iter_mut() {
        let checkpointed_now = report.state == Some(ProcessState::Checkpointed)
            && report
                .steps
                .iter()
                .any(|s| s.step == "checkpoint" && s.ok && !s.rollback);
        let Some(target) = targets
            .iter()
            .find(|t| t.pid == report.pid)
            .filter(|_| checkpointed_now)
        else {
            continue;
        };
        let memory = snapshot.memory.as_ref().map(|by_pid| {
            by_pid
                .get(&target.pid)
                .map(|uses| {
                    uses.iter()
                        .map(|(uuid, bytes)| RecordedUse {
                            uuid: *uuid,
                            bytes: *bytes,
                        })
                        .collect()
                })
                .unwrap_or_default()
        });
        let entry = Record::new(
            target.pid,
            &target.name,
            snapshot.host.clone(),
            memory,
            snapshot.cuda_version.clone(),
        );
        // What the checkpoint moved to host memory, when NVML could tell.
        report.gpu_memory_bytes = entry.bytes_needed();
        match record::write(dir, &entry) {
            Ok(path) => report.record = Some(path.display().to_string()),
            Err(error) => warnings.push(format!(
                "could not write the checkpoint record of {} in {}: {error} (a later restore cannot check GPU memory)",
                describe_process(target.pid, Some(&target.name)),
                dir.display()
            )),
        }
    }
    warnings
}

/// Forgets the records of processes that this command restored.
pub fn clear_records(dir: &Path, reports: &[ProcessReport]) {
    for report in reports {
        if report
            .steps
            .iter()
            .any(|s| s.step == "restore" && s.ok && !s.rollback)
        {
            record::remove(dir, report.pid);
        }
    }
}

fn refused(message: String, hint: &str) -> Failure {
    Failure::new(FailureKind::InvalidMap, message, hint)
}

/// `--map auto`: the GPUs recorded at checkpoint onto this host's, index
/// by index. Every target needs a record, all of the same host.
pub fn auto_map(
    records: &HashMap<i32, Record>,
    targets: &[Target],
    host: &Inventory<'_>,
) -> Result<Vec<GpuPair>, Failure> {
    let hint = "restore without --map (same GPUs), or give the map explicitly (`cudackpt devices` lists this host's GPUs)";
    let mut recorded: Option<&Vec<RecordedGpu>> = None;
    for target in targets {
        let record = records.get(&target.pid).ok_or_else(|| {
            refused(
                format!(
                    "--map auto needs the checkpoint record of {}, and there is none",
                    describe_process(target.pid, Some(&target.name))
                ),
                hint,
            )
        })?;
        match recorded {
            Some(first)
                if first
                    .iter()
                    .map(|g| g.uuid)
                    .ne(record.host_gpus.iter().map(|g| g.uuid)) =>
            {
                return Err(refused(
                    "--map auto: the processes were checkpointed on different hosts".to_string(),
                    hint,
                ));
            }
            _ => recorded = Some(&record.host_gpus),
        }
    }
    // A host whose GPUs cannot be listed has none to map onto.
    let local = host
        .models()
        .map(|listing| listing.gpus)
        .unwrap_or_default();
    let pairs = record::auto_map(recorded.map_or(&[][..], |r| r.as_slice()), local)
        .map_err(|why| refused(why.to_string(), hint))?;
    Ok(pairs.unwrap_or_default())
}

/// The memory pre-flight: refuses (exit 8) when a target GPU lacks the free
/// memory the restoring processes held at checkpoint. Returns what it could
/// not check, as warnings.
pub fn check_memory(
    records: &HashMap<i32, Record>,
    targets: &[Target],
    map: &[GpuPair],
    host: &Inventory<'_>,
) -> Result<Vec<String>, Failure> {
    let mut warnings = Vec::new();
    let mut needs = Vec::new();
    let (mut without_figures, mut without_record) = (Vec::new(), Vec::new());
    for target in targets {
        match records.get(&target.pid).map(|r| preflight::needs(r, map)) {
            Some(Some(found)) => needs.extend(found),
            Some(None) => without_figures.push(target.pid),
            None => without_record.push(target.pid),
        }
    }
    // What could not be checked, in one remark per reason.
    if !without_figures.is_empty() {
        warnings.push(format!(
            "GPU memory not checked before restoring PID(s) {without_figures:?}: their checkpoint records have no memory figures (NVML was missing)"
        ));
    }
    if !without_record.is_empty() {
        warnings.push(format!(
            "GPU memory not checked before restoring PID(s) {without_record:?}: no checkpoint record (not checkpointed by cudackpt, or records kept elsewhere: --record-dir)"
        ));
    }
    if needs.is_empty() {
        return Ok(warnings);
    }
    let Ok(free) = host.free_memory() else {
        warnings
            .push("free GPU memory not checked before restore: NVML is not available".to_string());
        return Ok(warnings);
    };
    let short = preflight::shortfalls(&needs, &free);
    if short.is_empty() {
        return Ok(warnings);
    }
    let mib = |bytes: u64| bytes >> 20;
    let detail: Vec<String> = short
        .iter()
        .map(|s| {
            format!(
                "{} has {} MiB free, and restoring PID(s) {:?} there needs {} MiB (their memory at checkpoint)",
                s.gpu,
                mib(s.free),
                s.pids,
                mib(s.needed)
            )
        })
        .collect();
    Err(Failure::new(
        FailureKind::InsufficientGpuMemory,
        format!("restore refused before any change: {}", detail.join("; ")),
        "free memory on that GPU or choose another with --map; --force restores anyway, but NVIDIA reports (driver 580.95) that a restore failing for memory can leave the process unrecoverable",
    ))
}

/// `--verify`: checks through NVML that what the driver reported really
/// happened. After a checkpoint the process holds no GPU memory; after a
/// restore it holds memory again, on the GPUs its record (through the map)
/// says. A mismatch, or no NVML to check with, fails the process.
pub fn verify(reports: &mut [ProcessReport], records: &HashMap<i32, Record>, map: &[GpuPair]) {
    let moved: Vec<usize> = reports
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            r.failure.is_none()
                && r.steps
                    .iter()
                    .any(|s| s.ok && !s.rollback && (s.step == "checkpoint" || s.step == "restore"))
        })
        .map(|(i, _)| i)
        .collect();
    if moved.is_empty() {
        return;
    }
    let usage = match crate::gpu::nvml::open().and_then(crate::gpu::nvml::memory_by_process_and_gpu)
    {
        Ok(usage) => usage,
        Err(why) => {
            for &i in &moved {
                reports[i].failure = Some(Failure::new(
                    FailureKind::VerifyFailed,
                    format!(
                        "could not verify {}: {why}",
                        describe_process(reports[i].pid, reports[i].name.as_deref())
                    ),
                    "install NVML (it comes with the NVIDIA driver), or drop --verify",
                ));
            }
            return;
        }
    };
    for i in moved {
        let report = &mut reports[i];
        let who = describe_process(report.pid, report.name.as_deref());
        let held: Vec<(GpuUuid, u64)> = usage
            .get(&report.pid)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, b)| *b > 0)
            .collect();
        let problem = match report.state {
            Some(ProcessState::Checkpointed) if !held.is_empty() => Some(format!(
                "{who} is checkpointed but NVML shows it holding {} MiB on {}",
                held.iter().map(|(_, b)| b).sum::<u64>() >> 20,
                held.iter()
                    .map(|(g, _)| g.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Some(ProcessState::Locked | ProcessState::Running) => {
                let expected: Vec<GpuUuid> = records
                    .get(&report.pid)
                    .and_then(|r| preflight::needs(r, map))
                    .map(|needs| needs.into_iter().map(|n| n.gpu).collect())
                    .unwrap_or_default();
                let on: Vec<GpuUuid> = held.iter().map(|(g, _)| *g).collect();
                if on.is_empty() {
                    Some(format!(
                        "{who} was restored but NVML shows it holding no GPU memory"
                    ))
                } else {
                    expected.iter().find(|g| !on.contains(g)).map(|missing| {
                        format!(
                            "{who} was restored but is not on {missing} (NVML shows it on {})",
                            on.iter()
                                .map(ToString::to_string)
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    })
                }
            }
            _ => None,
        };
        match problem {
            Some(message) => {
                report.failure = Some(Failure::new(
                    FailureKind::VerifyFailed,
                    message,
                    "check `nvidia-smi`; the driver reported success, so report this with `cudackpt -vv` output",
                ))
            }
            None => report.gpu_memory_bytes = Some(held.iter().map(|(_, b)| b).sum()),
        }
    }
}
