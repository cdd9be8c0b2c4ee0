//! doctor's `--cgroup` check: the memory limits of a cgroup (and of every
//! ancestor) against the GPU memory of the processes in it. A checkpoint
//! copies each process's GPU memory into its host memory, charged to its
//! cgroup, so a container needs headroom at least its GPU footprint; this
//! says whether it has it before anyone tries (the same arithmetic as the
//! checkpoint's pre-flight, `ops::doors::preflights::judge`).

use std::path::Path;

use crate::gpu::nvml;
use crate::ops::doors::preflights::{judge, HostNeed};
use crate::targets::cgroup::Cgroup;
use crate::targets::memory::{self, CgroupLevel};

/// How a cgroup's memory compares with what its checkpoint needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// Every limit has room for the GPU footprint.
    Fits,
    /// A checkpoint would be refused (exit 8).
    Short,
    /// The footprint cannot be known (no NVML).
    Unknown,
    /// The path is not a cgroup.
    NotACgroup,
}

/// The verdict on one cgroup, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Headroom {
    pub fit: Fit,
    pub detail: String,
    pub hint: Option<String>,
}

impl Headroom {
    fn new(fit: Fit, detail: impl Into<String>, hint: Option<String>) -> Headroom {
        Headroom {
            fit,
            detail: detail.into(),
            hint,
        }
    }
}

fn mib(bytes: u64) -> u64 {
    bytes >> 20
}

/// One level's limits for people: `memory.max 2048 MiB, memory.high none,
/// 1024 MiB in use` (pure).
pub fn describe_level(level: &CgroupLevel) -> String {
    let limit =
        |value: Option<u64>| value.map_or("none".to_string(), |b| format!("{} MiB", mib(b)));
    let used = level
        .current
        .map_or(String::new(), |b| format!(", {} MiB in use", mib(b)));
    match level.hierarchy {
        memory::Hierarchy::V2 => format!(
            "{}: memory.max {}, memory.high {}{used}",
            level.name,
            limit(level.max),
            limit(level.high)
        ),
        memory::Hierarchy::V1 => format!(
            "{} (cgroup v1): memory.limit_in_bytes {}{used}",
            level.name,
            limit(level.max)
        ),
    }
}

/// The verdict for the cgroup the user named.
pub fn check(path: &Path) -> Headroom {
    let resolved = Cgroup::resolve(path).and_then(|cgroup| {
        let placement = memory::placement_of_dir(&cgroup.path)?;
        Ok((placement, cgroup))
    });
    let (placement, cgroup) = match resolved {
        Ok(found) => found,
        Err(why) => {
            return Headroom::new(
                Fit::NotACgroup,
                why.to_string(),
                Some("name a cgroup directory, or a path under the cgroup v2 mount as /proc/PID/cgroup shows it".into()),
            )
        }
    };
    let name = placement.name.clone();
    let chain = placement.chain();
    let limits: Vec<String> = chain
        .iter()
        .filter(|l| l.max.is_some() || l.high.is_some() || l.name == name)
        .map(describe_level)
        .collect();
    let pids = cgroup.pids().unwrap_or_default();
    let footprints = match nvml::open().and_then(nvml::memory_by_process) {
        Ok(footprints) => footprints,
        Err(why) => {
            return Headroom::new(
                Fit::Unknown,
                format!("{}; GPU memory of its processes unknown", limits.join("; ")),
                Some(format!("{why}: without it the headroom a checkpoint needs (the GPU footprint) cannot be weighed")),
            );
        }
    };
    let needs: Vec<HostNeed> = pids
        .iter()
        .filter_map(|&pid| {
            let bytes = *footprints.get(&pid)?;
            Some(HostNeed {
                pid,
                bytes,
                chain: memory::chain_of(pid),
            })
        })
        .collect();
    let footprint: u64 = needs.iter().map(|n| n.bytes).sum();
    let detail = format!(
        "{}; its {} CUDA process(es) hold {} MiB of GPU memory",
        limits.join("; "),
        needs.len(),
        mib(footprint)
    );
    match judge(&needs, None) {
        Ok(()) => Headroom::new(Fit::Fits, detail, None),
        Err(why) => Headroom::new(
            Fit::Short,
            detail,
            Some(format!(
                "a checkpoint of them would be refused (exit 8): {why}; give the cgroup headroom of at least its GPU footprint"
            )),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_level_says_its_limits_and_use() {
        let level = CgroupLevel {
            name: "/pod".into(),
            max: Some(2 << 30),
            high: None,
            current: Some(1 << 30),
            ..CgroupLevel::default()
        };
        assert_eq!(
            describe_level(&level),
            "/pod: memory.max 2048 MiB, memory.high none, 1024 MiB in use"
        );
    }
}
