//! Stage 8, finish: what follows the driver calls. `--verify` checks
//! through NVML that what the driver reported really happened; processes
//! this command checkpointed get a checkpoint record (the host's GPUs and
//! their memory, for a later `--map auto` and pre-flight), and processes it
//! restored lose theirs.

use std::collections::HashMap;

use crate::driver::{format_version, Driver, GpuPair, GpuUuid, ProcessState};
use crate::files::SafeDir;
use crate::gpu::inventory::Inventory;
use crate::gpu::nvml;
use crate::gpu::record::{self, Record, RecordedGpu, RecordedUse};
use crate::ops::diagnose::describe_process;
use crate::ops::journal::records::Records;
use crate::ops::preflight::gpu_memory as preflight;
use crate::targets::process::Target;
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::plan::DriverCall;
use crate::vocabulary::report::{GpuBytes, TargetReport};
use crate::vocabulary::request::Request;
use crate::vocabulary::snapshot::Snapshot;

/// What the command moved, and what it knew before.
pub struct FinishInputs<'a> {
    pub targets: &'a [Target],
    pub records: &'a HashMap<i32, Record>,
    pub map: &'a [GpuPair],
    pub store: &'a Records,
    /// Taken before the checkpoints, for their records.
    pub snapshot: Option<&'a Snapshot>,
}

/// Verifies, writes and clears records; returns remarks for the report.
pub fn finish(
    request: &Request<'_>,
    reports: &mut [TargetReport],
    moved: &FinishInputs<'_>,
) -> Vec<String> {
    if request.verify {
        verify(reports, moved.records, moved.map);
    }
    let mut remarks = Vec::new();
    if let Some(snapshot) = moved.snapshot {
        remarks.extend(write_records(moved.store, snapshot, moved.targets, reports));
    }
    if let Some(dir) = &moved.store.dir {
        clear_records(dir, reports);
    }
    remarks
}

/// Takes the snapshot: GPUs from NVML or the kernel driver (never the CUDA
/// driver, whose listing costs a `cuInit`), per-process memory from NVML
/// when it is installed.
pub fn snapshot(
    driver: &Driver,
    host: &Inventory<'_>,
    usage: Option<nvml::Usage>,
    pids: &[i32],
) -> Snapshot {
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
    // Read by the host-memory pre-flight already, unless it did not run.
    let memory = usage.or_else(|| nvml::usage_of(pids).ok());
    Snapshot {
        host: gpus,
        memory,
        cuda_version: driver.version().ok().map(|v| format_version(Some(v))),
    }
}

/// Writes a record for every process this command checkpointed; returns
/// the warnings for records that could not be written.
fn write_records(
    records: &Records,
    snapshot: &Snapshot,
    targets: &[Target],
    reports: &mut [TargetReport],
) -> Vec<String> {
    let mut warnings = Vec::new();
    for report in reports.iter_mut() {
        let checkpointed_now =
            report.state == Some(ProcessState::Checkpointed) && report.did(DriverCall::Checkpoint);
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
        report.gpu_memory = entry.bytes_needed().map(GpuBytes::Moved);
        let written = match (&records.dir, &records.unavailable) {
            (Some(dir), _) => record::write(dir, &entry).map_err(|e| e.to_string()),
            (None, why) => Err(why.clone().unwrap_or_default()),
        };
        match written {
            Ok(path) => report.record = Some(path.display().to_string()),
            Err(error) => warnings.push(format!(
                "could not write the checkpoint record of {} in {}: {error} (a later restore cannot check GPU memory)",
                describe_process(target.pid, Some(&target.name)),
                records.path.display()
            )),
        }
    }
    warnings
}

/// Forgets the record of a process that no longer needs it: one this
/// command left running, or restored (and left locked). A restore that was
/// rolled back leaves the process checkpointed, and its record stays for
/// the retry (`--map auto`, the pre-flight).
fn clear_records(dir: &SafeDir, reports: &[TargetReport]) {
    for report in reports {
        if record_is_done(report) {
            record::remove(dir, report.pid);
        }
    }
}

fn record_is_done(report: &TargetReport) -> bool {
    match report.state {
        Some(ProcessState::Running) => {
            report.did(DriverCall::Unlock) || report.did(DriverCall::Restore)
        }
        Some(ProcessState::Locked) => report.did(DriverCall::Restore),
        _ => false,
    }
}

/// `--verify`: checks through NVML that what the driver reported really
/// happened. After a checkpoint the process holds no GPU memory; after a
/// restore it holds memory again, on the GPUs its record (through the map)
/// says. A mismatch, or no NVML to check with, fails the process.
/// What NVML shows that contradicts the driver, if anything: a
/// checkpointed process still holding GPU memory, or a restored one holding
/// none or missing from a GPU it should be on (`expected`).
fn mismatch(
    who: &str,
    state: Option<ProcessState>,
    held: &[(GpuUuid, u64)],
    expected: &[GpuUuid],
) -> Option<String> {
    let list = |gpus: &mut dyn Iterator<Item = GpuUuid>| {
        gpus.map(|g| g.to_string()).collect::<Vec<_>>().join(", ")
    };
    match state {
        Some(ProcessState::Checkpointed) if !held.is_empty() => Some(format!(
            "{who} is checkpointed but NVML shows it holding {} MiB on {}",
            held.iter().map(|(_, b)| b).sum::<u64>() >> 20,
            list(&mut held.iter().map(|(g, _)| *g))
        )),
        Some(ProcessState::Locked | ProcessState::Running) => {
            let on: Vec<GpuUuid> = held.iter().map(|(g, _)| *g).collect();
            if on.is_empty() {
                return Some(format!(
                    "{who} was restored but NVML shows it holding no GPU memory"
                ));
            }
            expected.iter().find(|g| !on.contains(g)).map(|missing| {
                format!(
                    "{who} was restored but is not on {missing} (NVML shows it on {})",
                    list(&mut on.iter().copied())
                )
            })
        }
        _ => None,
    }
}

fn verify(reports: &mut [TargetReport], records: &HashMap<i32, Record>, map: &[GpuPair]) {
    let moved: Vec<usize> = reports
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            r.failure.is_none() && (r.did(DriverCall::Checkpoint) || r.did(DriverCall::Restore))
        })
        .map(|(i, _)| i)
        .collect();
    if moved.is_empty() {
        return;
    }
    let usage = match nvml::usage_now() {
        Ok(usage) => usage,
        Err(why) => {
            for &i in &moved {
                reports[i].failure = Some(Fault::new(
                    FaultKind::VerifyFailed,
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
        let expected: Vec<GpuUuid> = records
            .get(&report.pid)
            .and_then(|r| preflight::needs(r, map))
            .map(|needs| needs.into_iter().map(|n| n.gpu).collect())
            .unwrap_or_default();
        let problem = mismatch(&who, report.state, &held, &expected);
        match problem {
            Some(message) => {
                report.failure = Some(Fault::new(
                    FaultKind::VerifyFailed,
                    message,
                    "check `nvidia-smi`; the driver reported success, so report this with `cudackpt -vv` output",
                ))
            }
            None => report.gpu_memory = Some(GpuBytes::Held(held.iter().map(|(_, b)| b).sum())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uuid(n: u8) -> GpuUuid {
        GpuUuid::from_bytes([n; 16])
    }

    #[test]
    fn nvml_contradicting_the_driver_is_named() {
        use ProcessState::*;
        let (a, b) = (uuid(1), uuid(2));
        assert_eq!(mismatch("P", Some(Checkpointed), &[], &[]), None);
        let still = mismatch("P", Some(Checkpointed), &[(a, 3 << 20)], &[]).expect("held");
        assert!(still.contains("holding 3 MiB on GPU-0101"), "{still}");
        let empty = mismatch("P", Some(Running), &[], &[a]).expect("nothing held");
        assert!(empty.contains("holding no GPU memory"), "{empty}");
        let moved = mismatch("P", Some(Locked), &[(a, 1)], &[b]).expect("wrong GPU");
        assert!(moved.contains(&format!("is not on {b}")), "{moved}");
        assert_eq!(mismatch("P", Some(Running), &[(b, 1)], &[b]), None);
        assert_eq!(mismatch("P", None, &[(a, 1)], &[b]), None);
    }
}
