//! Stage 5b, once the locks are held, the pre-flight: before a restore, will the target GPUs hold
//! what the processes had? NVIDIA reports (driver 580.95) that a restore
//! failing for lack of GPU memory can leave the process unrecoverable, so
//! a restore is not attempted blind. The decision (`needs`, `shortfalls`)
//! is pure: the needs come from checkpoint records, the free memory from
//! NVML.

use std::collections::{BTreeMap, HashMap};

use crate::driver::{GpuPair, GpuUuid};
use crate::gpu::inventory::Inventory;
use crate::gpu::record::Record;
use crate::targets::process::Target;
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::plan::Operation;
use crate::vocabulary::request::Request;
use crate::vocabulary::stop::Stop;

/// The memory pre-flight of a request: nothing for commands that do not
/// restore or that are forced. Returns what it could not check, as
/// remarks, or stops the command.
pub fn check_memory(
    request: &Request<'_>,
    targets: &[Target],
    records: &HashMap<i32, Record>,
    map: &[GpuPair],
    host: &Inventory<'_>,
) -> Result<Vec<String>, Stop> {
    if !request.operation.restores() || request.force {
        return Ok(Vec::new());
    }
    // A toggle or resume of a process that is running has nothing to
    // restore; without its record there is nothing to say about it.
    let to_check: Vec<Target> = targets
        .iter()
        .filter(|t| matches!(request.operation, Operation::Restore) || records.contains_key(&t.pid))
        .cloned()
        .collect();
    memory_fits(records, &to_check, map, host).map_err(Stop::not_run)
}

/// Memory one process needs on one GPU of this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuNeed {
    pub pid: i32,
    /// The GPU of this host it will land on.
    pub gpu: GpuUuid,
    pub bytes: u64,
}

/// A GPU that cannot take what is sent to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuShortfall {
    pub gpu: GpuUuid,
    pub free: u64,
    pub needed: u64,
    pub pids: Vec<i32>,
}

/// Where each recorded GPU lands: through the map when one is given.
fn destination(uuid: GpuUuid, map: &[GpuPair]) -> GpuUuid {
    map.iter()
        .find(|pair| pair.old == uuid)
        .map_or(uuid, |pair| pair.new)
}

/// The needs of a process from its record, mapped onto this host's GPUs;
/// `None` when the record has no memory figures.
pub fn needs(record: &Record, map: &[GpuPair]) -> Option<Vec<GpuNeed>> {
    let uses = record.gpu_memory.as_ref()?;
    Some(
        uses.iter()
            .filter(|u| u.bytes > 0)
            .map(|u| GpuNeed {
                pid: record.pid,
                gpu: destination(u.uuid, map),
                bytes: u.bytes,
            })
            .collect(),
    )
}

/// The GPUs whose free memory is smaller than what all the restoring
/// processes together need there. A GPU whose free memory is unknown is
/// not judged.
pub fn shortfalls(needs: &[GpuNeed], free: &BTreeMap<GpuUuid, u64>) -> Vec<GpuShortfall> {
    let mut by_gpu: BTreeMap<GpuUuid, (u64, Vec<i32>)> = BTreeMap::new();
    for need in needs {
        let entry = by_gpu.entry(need.gpu).or_default();
        entry.0 += need.bytes;
        entry.1.push(need.pid);
    }
    by_gpu
        .into_iter()
        .filter_map(|(gpu, (needed, pids))| {
            let free = *free.get(&gpu)?;
            (needed > free).then_some(GpuShortfall {
                gpu,
                free,
                needed,
                pids,
            })
        })
        .collect()
}

/// The memory pre-flight: refuses (exit 8) when a target GPU lacks the free
/// memory the restoring processes held at checkpoint. Returns what it could
/// not check, as warnings.
fn memory_fits(
    records: &HashMap<i32, Record>,
    targets: &[Target],
    map: &[GpuPair],
    host: &Inventory<'_>,
) -> Result<Vec<String>, Fault> {
    let mut warnings = Vec::new();
    let mut all_needs = Vec::new();
    let (mut without_figures, mut without_record) = (Vec::new(), Vec::new());
    for target in targets {
        match records.get(&target.pid).map(|r| needs(r, map)) {
            Some(Some(found)) => all_needs.extend(found),
            Some(None) => without_figures.push(target.pid),
            None => without_record.push(target.pid),
        }
    }
    // What could not be checked, in one remark per reason; NVML's absence
    // none for a stand-in driver, whose records never have figures.
    let stand_in = host.driver_is_stand_in();
    if !without_figures.is_empty() && !stand_in {
        warnings.push(format!(
            "GPU memory not checked before restoring {}: {} checkpoint record has no memory figures (NVML was missing)",
            crate::vocabulary::prose::pids(&without_figures),
            crate::vocabulary::prose::their(without_figures.len())
        ));
    }
    if !without_record.is_empty() {
        warnings.push(format!(
            "GPU memory not checked before restoring {}: no checkpoint record (not checkpointed by cudackpt, or records kept elsewhere: --record-dir)",
            crate::vocabulary::prose::pids(&without_record)
        ));
    }
    if all_needs.is_empty() {
        return Ok(warnings);
    }
    let Ok(free) = host.free_memory() else {
        if !stand_in {
            warnings.push(
                "free GPU memory not checked before restore: NVML is not available".to_string(),
            );
        }
        return Ok(warnings);
    };
    let short = shortfalls(&all_needs, &free);
    if short.is_empty() {
        return Ok(warnings);
    }
    let mib = |bytes: u64| bytes >> 20;
    let detail: Vec<String> = short
        .iter()
        .map(|s| {
            format!(
                "{} has {} MiB free, and restoring {} there needs {} MiB ({} memory at checkpoint)",
                s.gpu,
                mib(s.free),
                crate::vocabulary::prose::pids(&s.pids),
                mib(s.needed),
                crate::vocabulary::prose::their(s.pids.len())
            )
        })
        .collect();
    Err(Fault::new(
        FaultKind::InsufficientGpuMemory,
        format!("restore refused before any change: {}", detail.join("; ")),
        "free memory on that GPU or choose another with --map; --force restores anyway, but NVIDIA reports (driver 580.95) that a restore failing for memory can leave the process unrecoverable",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::record::RecordedUse;

    fn record(pid: i32, uses: &[(&str, u64)]) -> Record {
        let mut record = Record::new(pid, "worker", vec![], None, None);
        record.gpu_memory = Some(
            uses.iter()
                .map(|(uuid, bytes)| RecordedUse {
                    uuid: uuid.parse().expect("test UUID"),
                    bytes: *bytes,
                })
                .collect(),
        );
        record
    }

    const A: &str = "GPU-11111111-2222-3333-4444-555555555555";
    const B: &str = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

    #[test]
    fn needs_follow_the_map() {
        let swap = vec![
            GpuPair {
                old: A.parse().expect("uuid"),
                new: B.parse().expect("uuid"),
            },
            GpuPair {
                old: B.parse().expect("uuid"),
                new: A.parse().expect("uuid"),
            },
        ];
        let got = needs(&record(7, &[(A, 10), (B, 0)]), &swap).expect("figures");
        assert_eq!(
            got,
            vec![GpuNeed {
                pid: 7,
                gpu: B.parse().expect("uuid"),
                bytes: 10
            }]
        );
        assert_eq!(
            needs(&record(7, &[(A, 10)]), &[]).expect("figures")[0].gpu,
            A.parse().expect("uuid")
        );
        let mut unknown = record(7, &[]);
        unknown.gpu_memory = None;
        assert_eq!(needs(&unknown, &[]), None);
    }

    #[test]
    fn a_gpu_short_of_memory_for_the_whole_group_is_named() {
        let all: Vec<GpuNeed> = [
            record(1, &[(A, 6)]),
            record(2, &[(A, 5)]),
            record(3, &[(B, 1)]),
        ]
        .iter()
        .flat_map(|r| needs(r, &[]).expect("figures"))
        .collect();
        let uuid = |text: &str| text.parse::<GpuUuid>().expect("uuid");
        let free: BTreeMap<GpuUuid, u64> = [(uuid(&A.to_uppercase()), 10), (uuid(B), 100)]
            .into_iter()
            .collect();
        assert_eq!(
            shortfalls(&all, &free),
            vec![GpuShortfall {
                gpu: uuid(&A.to_lowercase()),
                free: 10,
                needed: 11,
                pids: vec![1, 2]
            }]
        );
        let roomy: BTreeMap<GpuUuid, u64> = [(uuid(A), 11), (uuid(B), 1)].into_iter().collect();
        assert!(
            shortfalls(&all, &roomy).is_empty(),
            "exactly enough is enough"
        );
        assert!(
            shortfalls(&all, &BTreeMap::new()).is_empty(),
            "unknown free memory is not judged"
        );
    }
}
