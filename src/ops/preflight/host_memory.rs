//! Stage 3, the host-memory pre-flight of a checkpoint (docs/driver-facts.md, F5). The
//! driver copies each target's device memory into that target's own host
//! memory, charged to its memory cgroup: a container whose limit is below
//! its GPU footprint is OOM-killed in the middle of `suspend` (measured:
//! docs/driver-facts.md, F5). So the targets' GPU memory (NVML, per process) is weighed
//! against `MemAvailable`, and against the room under `memory.max` and
//! `memory.high` of every cgroup v2 ancestor of each target (on hosts whose
//! memory controller is on cgroup v1, `memory.limit_in_bytes` of every v1
//! ancestor), summed per cgroup; a group that does not fit is refused
//! before any lock (exit 8).
//! Without NVML nothing can be weighed, and the report says so.

use std::collections::BTreeMap;

use crate::gpu::nvml;
use crate::targets::memory::{self, CgroupLevel};
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::ready::Ready;
use crate::vocabulary::request::Request;
use crate::vocabulary::stop::Stop;

/// One target's need: its GPU footprint and the cgroups it is charged to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostNeed {
    pub pid: i32,
    pub bytes: u64,
    /// Its own cgroup first, up to the root.
    pub chain: Vec<CgroupLevel>,
}

fn mib(bytes: u64) -> u64 {
    bytes >> 20
}

/// Where the host copies of a checkpoint would not fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostShortfall {
    #[error("the checkpoint would copy {} MiB of GPU memory into host memory, and this host has {} MiB available (MemAvailable)", mib(*.total), mib(*.available))]
    Host { total: u64, available: u64 },
    #[error("cgroup {name} has {} MiB of room under its {file} ({} MiB, {} MiB in use), and the checkpoint would charge it {} MiB (the GPU memory of PID(s) {pids:?}): the kernel would OOM-kill {}", mib(*.limit - (*.limit).min(*.used)), mib(*.limit), mib(*.used), mib(*.bytes), if *.hard { "the process" } else { "or throttle the process" })]
    Cgroup {
        name: String,
        /// The limit's file: `memory.max`, `memory.high` or v1's.
        file: &'static str,
        limit: u64,
        used: u64,
        bytes: u64,
        pids: Vec<i32>,
        /// A hard limit (the OOM killer), not `memory.high` (throttling).
        hard: bool,
    },
}

/// Whether the host copies fit (pure): `Err` says where they do not.
pub fn judge(needs: &[HostNeed], available: Option<u64>) -> Result<(), HostShortfall> {
    let total: u64 = needs.iter().map(|n| n.bytes).sum();
    if let Some(available) = available.filter(|&a| total > a) {
        return Err(HostShortfall::Host { total, available });
    }
    // Every cgroup some target is charged to, with what it would be
    // charged in all.
    let mut charged: BTreeMap<&str, (&CgroupLevel, u64, Vec<i32>)> = BTreeMap::new();
    for need in needs.iter().filter(|n| n.bytes > 0) {
        for level in &need.chain {
            let entry = charged
                .entry(level.name.as_str())
                .or_insert((level, 0, Vec::new()));
            entry.1 += need.bytes;
            entry.2.push(need.pid);
        }
    }
    for (name, (level, bytes, pids)) in charged {
        let max_file = level.hierarchy.max_file();
        for (file, limit) in [(max_file, level.max), ("memory.high", level.high)] {
            let Some(limit) = limit else { continue };
            let used = level.current.unwrap_or(0);
            if bytes > limit.saturating_sub(used) {
                return Err(HostShortfall::Cgroup {
                    // A cgroup's name is its creator's choice: escaped.
                    name: crate::targets::name::printable(name).into_owned(),
                    file,
                    limit,
                    used,
                    bytes,
                    pids,
                    hard: file == max_file,
                });
            }
        }
    }
    Ok(())
}

/// What the pre-flight said, and what it read on the way.
#[derive(Default)]
pub struct Weighed {
    /// What it could not weigh.
    pub remarks: Vec<String>,
    /// NVML's per-process use it weighed (before any change), which the
    /// checkpoint record keeps rather than asking NVML again.
    pub usage: Option<nvml::Usage>,
}

/// The pre-flight of a request: what it could not weigh, or the stop that
/// refuses the group.
pub fn check(request: &Request<'_>, ready: &Ready) -> Result<Weighed, Stop> {
    if !applies(request, ready) {
        return Ok(Weighed::default());
    }
    weigh(request, ready, nvml::usage_of(&ready.pids()))
        .map_err(|why| Stop::not_run(refusal("refused before any change", &why)))
}

/// The refusal of a group whose host copies would not fit; `when` says at
/// which point it was refused.
pub fn refusal(when: &str, why: &HostShortfall) -> Fault {
    Fault::new(
        FaultKind::InsufficientHostMemory,
        format!("{when}: {why}"),
        "raise the limit (or free host memory) by at least the GPU footprint, e.g. `systemctl set-property UNIT MemoryMax=...` or the pod's memory limit; --force (CUDACKPT_FORCE=1) checkpoints anyway, and the kernel will likely kill the process",
    )
}

/// Whether a request copies GPU memory to host memory that is to be weighed.
pub fn applies(request: &Request<'_>, ready: &Ready) -> bool {
    request.operation.checkpoints() && !request.force && !ready.targets.is_empty()
}

/// The pre-flight on what NVML said (a drain weighs what is left once its
/// processes released what they could): what could not be weighed, or
/// where the host copies would not fit.
pub fn weigh(
    request: &Request<'_>,
    ready: &Ready,
    usage: Result<nvml::Usage, nvml::NvmlError>,
) -> Result<Weighed, HostShortfall> {
    if !applies(request, ready) {
        return Ok(Weighed::default());
    }
    let usage = match usage {
        Ok(usage) => usage,
        Err(why) => {
            // Said where the risk is: a target under a memory limit (a
            // container). Elsewhere the log says it (-v).
            let limited: Vec<i32> = ready
                .targets
                .iter()
                .filter(|t| {
                    memory::chain_of(t.pid)
                        .iter()
                        .any(|l| l.max.is_some() || l.high.is_some())
                })
                .map(|t| t.pid)
                .collect();
            tracing::debug!(%why, "host memory not checked before the checkpoint");
            if ready.driver.is_stand_in() {
                // A stand-in's "GPU memory" is none NVML could tell.
                return Ok(Weighed::default());
            }
            let remark = if limited.is_empty() {
                // What could not be checked is said, never
                // assumed safe in silence.
                let pids = ready.pids();
                format!(
                    "GPU memory of {} not weighed against the host's available memory: NVML is not available to tell {} footprint",
                    crate::vocabulary::prose::pids(&pids),
                    crate::vocabulary::prose::their(pids.len())
                )
            } else {
                format!(
                    "GPU memory not checked against the memory limits of {} before checkpointing: NVML is not available to tell {} footprint, and a checkpoint over the limit gets {} OOM-killed",
                    crate::vocabulary::prose::pids(&limited),
                    crate::vocabulary::prose::their(limited.len()),
                    if limited.len() == 1 { "it" } else { "them" }
                )
            };
            return Ok(Weighed {
                remarks: vec![remark],
                usage: None,
            });
        }
    };
    let footprints = nvml::totals(&usage);
    let needs: Vec<HostNeed> = ready
        .targets
        .iter()
        .map(|t| HostNeed {
            pid: t.pid,
            // A checkpointed process holds no GPU memory: nothing to copy.
            bytes: footprints.get(&t.pid).copied().unwrap_or(0),
            chain: memory::chain_of(t.pid),
        })
        .collect();
    judge(&needs, memory::mem_available()).map(|()| Weighed {
        remarks: Vec::new(),
        usage: Some(usage),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn level(name: &str, max: Option<u64>, current: u64) -> CgroupLevel {
        CgroupLevel {
            name: name.to_string(),
            max,
            high: None,
            current: Some(current),
            ..CgroupLevel::default()
        }
    }

    fn need(pid: i32, gib: u64, chain: Vec<CgroupLevel>) -> HostNeed {
        HostNeed {
            pid,
            bytes: gib * GIB,
            chain,
        }
    }

    #[test]
    fn a_container_below_its_gpu_footprint_is_named_with_both_figures() {
        // The measurement of docs/driver-facts.md, F5: 6 GiB of device memory, memory.max 3 GiB.
        let pod = vec![level("/pod", Some(3 * GIB), GIB / 2), level("/", None, 0)];
        let why = judge(&[need(7, 6, pod)], Some(100 * GIB))
            .expect_err("refused")
            .to_string();
        assert!(
            why.contains(
                "cgroup /pod has 2560 MiB of room under its memory.max (3072 MiB, 512 MiB in use)"
            ),
            "{why}"
        );
        assert!(why.contains("charge it 6144 MiB"), "{why}");
    }

    #[test]
    fn a_group_is_summed_per_cgroup_and_against_the_host() {
        let pod = || vec![level("/pod", Some(5 * GIB), 0)];
        assert!(judge(&[need(1, 2, pod()), need(2, 2, pod())], None).is_ok());
        let why = judge(&[need(1, 3, pod()), need(2, 3, pod())], None)
            .expect_err("6 > 5")
            .to_string();
        assert!(why.contains("PID(s) [1, 2]"), "{why}");
        let host = judge(&[need(1, 3, vec![]), need(2, 3, vec![])], Some(5 * GIB))
            .expect_err("host")
            .to_string();
        assert!(host.contains("MemAvailable"), "{host}");
        assert!(
            judge(&[need(1, 3, vec![])], Some(3 * GIB)).is_ok(),
            "exactly enough is enough"
        );
    }

    #[test]
    fn a_cgroup_v1_limit_is_named_by_its_file() {
        let v1 = CgroupLevel {
            hierarchy: memory::Hierarchy::V1,
            ..level("/docker/abc", Some(GIB), 0)
        };
        let why = judge(&[need(1, 2, vec![v1])], None)
            .expect_err("2 GiB > 1 GiB")
            .to_string();
        assert!(
            why.contains("under its memory.limit_in_bytes (1024 MiB, 0 MiB in use)")
                && why.contains("OOM-kill the process"),
            "{why}"
        );
    }

    #[test]
    fn memory_high_counts_too_and_no_limit_is_no_limit() {
        let high = CgroupLevel {
            name: "/batch".into(),
            max: None,
            high: Some(GIB),
            current: Some(0),
            ..CgroupLevel::default()
        };
        assert!(judge(&[need(1, 2, vec![high])], None)
            .unwrap_err()
            .to_string()
            .contains("memory.high"));
        assert!(judge(&[need(1, 64, vec![level("/", None, 0)])], None).is_ok());
    }
}
