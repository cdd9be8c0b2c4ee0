//! The manifest a dump leaves beside CRIU's images
//! (`cudackpt-manifest.json`, schema `schema/dump-manifest.schema.json`):
//! what the job was and where, so that an undump on this host or another
//! can check the host before CRIU restores anything and choose GPUs. It is
//! the record here: the per-process records under `/run/cudackpt` are not on
//! another host, nor after a reboot.

use serde::{Deserialize, Serialize};

use crate::commands::disk::dump_checks::tree_facts::ChosenCriuOption;

/// The manifest's file name in the images directory.
pub const FILE_NAME: &str = "cudackpt-manifest.json";
/// The manifest's version: bumped only when a field changes meaning or goes.
pub const SCHEMA_VERSION: u32 = 1;
/// A manifest is a few kilobytes; a larger one is not cudackpt's.
pub const CAP: u64 = 4 << 20;

/// What a dump wrote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Manifest {
    pub schema_version: u32,
    /// When the dump ended, seconds since the epoch.
    pub created_unix_s: u64,
    pub cudackpt_version: String,
    pub criu: ManifestCriu,
    pub driver: ManifestDriver,
    /// The root of the dumped tree (CRIU restores it with this PID).
    pub root_pid: i32,
    /// Every process of the tree.
    pub processes: Vec<ManifestProcess>,
    /// The GPUs the job held memory on.
    pub gpus: Vec<ManifestGpu>,
    /// The drain ran before the dump (`--drain`).
    pub drained: bool,
    /// What the drain released: the job's GPU memory before it, less what
    /// the checkpoints then moved (each process's `checkpointed_bytes`),
    /// where both are known.
    pub drain_released_bytes: Option<u64>,
    /// The job went on after the dump (`--leave-running`).
    pub leave_running: bool,
    /// The options cudackpt chose for CRIU, and why; the undump passes the
    /// same ones.
    pub criu_options: Vec<ChosenCriuOption>,
    /// Bytes of the images directory once the dump ended.
    pub image_bytes: u64,
    pub timings: DumpTimings,
    /// False while CRIU writes the images: the manifest is written before
    /// CRIU starts and completed once it has finished, so a dump whose
    /// cudackpt was killed in between still leaves one; an undump then
    /// asks CRIU's log whether the dump finished. (Absent: a manifest of a
    /// cudackpt that wrote it only at the end, complete.)
    #[serde(default = "complete_when_unsaid")]
    pub complete: bool,
}

fn complete_when_unsaid() -> bool {
    true
}

/// What CRIU's dump log says last when the dump finished.
pub const DUMP_FINISHED: &str = "Dumping finished successfully";

/// The CRIU that wrote the images.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ManifestCriu {
    pub path: String,
    pub version: String,
}

/// The driver the job ran on. A restore on a host whose kernel module
/// differs is refused unless forced: the driver cannot restore there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ManifestDriver {
    /// The kernel module's version (`/proc/driver/nvidia/version`), when
    /// the host has one.
    pub kernel_module: Option<String>,
    /// The CUDA driver API version, `13.0`, when it answered.
    pub cuda: Option<String>,
}

/// One process of the dumped tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ManifestProcess {
    pub pid: i32,
    pub name: String,
    /// Its GPU memory before the dump, per GPU (NVML); empty for a process
    /// with none, or where NVML could not tell (`gpu_memory_known`).
    pub gpu_memory: Vec<ManifestGpuUse>,
    pub gpu_memory_known: bool,
    /// What its checkpoint moved to host memory at the pre-dump (after a
    /// drain, what was left), from its checkpoint record; `None` for a
    /// process with no CUDA state, or a record already gone (after
    /// `--leave-running` the resume removes it).
    pub checkpointed_bytes: Option<u64>,
}

/// Bytes one process held on one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ManifestGpuUse {
    pub uuid: String,
    pub bytes: u64,
}

/// One GPU the job held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ManifestGpu {
    pub uuid: String,
    pub name: Option<String>,
    pub pci_bus_id: Option<String>,
    pub memory_total_bytes: Option<u64>,
}

/// Where a dump's time went, milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DumpTimings {
    /// cudackpt's checks before CRIU started.
    pub preflights_ms: f64,
    /// CRIU's run, the suspend by its action script included.
    pub criu_ms: f64,
    pub total_ms: f64,
}

impl Manifest {
    /// The bytes the job held on each GPU it used, summed over its
    /// processes (pure).
    pub fn needs_by_gpu(&self) -> Vec<(String, u64)> {
        let mut needs: Vec<(String, u64)> =
            self.gpus.iter().map(|gpu| (gpu.uuid.clone(), 0)).collect();
        for process in &self.processes {
            for used in &process.gpu_memory {
                match needs.iter_mut().find(|(uuid, _)| *uuid == used.uuid) {
                    Some((_, bytes)) => *bytes += used.bytes,
                    None => needs.push((used.uuid.clone(), used.bytes)),
                }
            }
        }
        needs
    }

    /// What a drain released, from the processes' footprints before it and
    /// what their checkpoints moved (pure): `None` unless known for one.
    pub fn released_by_drain(processes: &[ManifestProcess]) -> Option<u64> {
        let pairs: Vec<(u64, u64)> = processes
            .iter()
            .filter_map(|p| {
                let before: u64 = p.gpu_memory.iter().map(|u| u.bytes).sum();
                Some((before, p.checkpointed_bytes?)).filter(|_| p.gpu_memory_known)
            })
            .collect();
        (!pairs.is_empty()).then(|| {
            pairs
                .iter()
                .map(|(before, after)| before.saturating_sub(*after))
                .sum()
        })
    }

    /// Whether every process's GPU memory was known at the dump.
    pub fn footprint_known(&self) -> bool {
        self.processes.iter().all(|p| p.gpu_memory_known)
    }

    /// What in this manifest no dump writes, if anything (pure): a GPU
    /// that is not a UUID (the undump hands the job's GPUs on to CRIU's
    /// action script as a map, `OLD=NEW,...`), a PID that is no process's,
    /// more processes than a tree has. Checked before the undump acts on
    /// any of it: whoever could write the images could write this.
    pub fn malformed(&self) -> Option<String> {
        let uuids = self.gpus.iter().map(|g| &g.uuid).chain(
            self.processes
                .iter()
                .flat_map(|p| p.gpu_memory.iter().map(|u| &u.uuid)),
        );
        for uuid in uuids {
            if !is_gpu_uuid(uuid) {
                let shown = crate::targets::name::printable(uuid);
                return Some(format!("the GPU {shown:?} is not a GPU's UUID"));
            }
        }
        if let Some(p) = self.processes.iter().find(|p| p.pid <= 0) {
            return Some(format!("the PID {} is no process's", p.pid));
        }
        if self.root_pid <= 0 || !self.processes.iter().any(|p| p.pid == self.root_pid) {
            return Some(format!(
                "the root PID {} is not one of its processes",
                self.root_pid
            ));
        }
        if self.processes.len() > MOST_PROCESSES {
            return Some(format!(
                "{} processes, more than the {MOST_PROCESSES} of any tree",
                self.processes.len()
            ));
        }
        None
    }
}

/// The most processes a manifest may list: Linux's own ceiling on PIDs
/// (`pid_max` is at most 2^22).
const MOST_PROCESSES: usize = 1 << 22;

/// A GPU's UUID as NVIDIA writes it, with or without `GPU-` (pure).
fn is_gpu_uuid(text: &str) -> bool {
    let bare = text.strip_prefix("GPU-").unwrap_or(text);
    bare.len() == 36 && uuid::Uuid::try_parse(bare).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(pid: i32, uses: &[(&str, u64)]) -> ManifestProcess {
        ManifestProcess {
            pid,
            name: format!("p{pid}"),
            gpu_memory: uses
                .iter()
                .map(|(uuid, bytes)| ManifestGpuUse {
                    uuid: (*uuid).into(),
                    bytes: *bytes,
                })
                .collect(),
            gpu_memory_known: true,
            checkpointed_bytes: None,
        }
    }

    const A: &str = "GPU-6f1d1a6e-2b2c-4d3e-8f40-5a6b7c8d9e0f";

    /// A manifest a dump wrote passes; each field no dump writes is named.
    #[test]
    fn what_no_dump_writes_is_malformed() {
        let mut good = sample();
        for gpu in &mut good.gpus {
            gpu.uuid = A.into();
        }
        for p in &mut good.processes {
            for used in &mut p.gpu_memory {
                used.uuid = A.into();
            }
        }
        assert_eq!(good.malformed(), None);
        let mut forged = good.clone();
        forged.gpus[0].uuid = format!("{A},GPU-x=GPU-y");
        let said = forged.malformed().expect("not a UUID");
        assert!(said.contains("is not a GPU's UUID"), "{said}");
        let mut forged = good.clone();
        forged.processes[0].gpu_memory[0].uuid = "GPU-a\ncudackpt: x".into();
        let said = forged.malformed().expect("not a UUID");
        assert!(!said.contains('\n'), "{said}");
        let mut forged = good.clone();
        forged.processes[0].pid = -1;
        assert!(forged.malformed().is_some());
        let mut forged = good;
        forged.root_pid = 99;
        assert!(forged.malformed().is_some());
    }

    pub(crate) fn sample() -> Manifest {
        Manifest {
            schema_version: SCHEMA_VERSION,
            created_unix_s: 1,
            cudackpt_version: "0.3.0".into(),
            criu: ManifestCriu {
                path: "/usr/sbin/criu".into(),
                version: "4.2.1".into(),
            },
            driver: ManifestDriver {
                kernel_module: Some("580.159.04".into()),
                cuda: Some("13.0".into()),
            },
            root_pid: 10,
            processes: vec![
                process(10, &[("GPU-a", 5)]),
                process(11, &[("GPU-a", 2), ("GPU-b", 3)]),
            ],
            gpus: vec![ManifestGpu {
                uuid: "GPU-a".into(),
                name: None,
                pci_bus_id: None,
                memory_total_bytes: None,
            }],
            drained: false,
            drain_released_bytes: None,
            leave_running: false,
            criu_options: vec![],
            image_bytes: 0,
            timings: DumpTimings {
                preflights_ms: 1.0,
                criu_ms: 2.0,
                total_ms: 3.0,
            },
            complete: true,
        }
    }

    #[test]
    fn what_the_drain_released_is_before_less_what_was_moved() {
        let mut processes = sample().processes;
        assert_eq!(Manifest::released_by_drain(&processes), None);
        processes[0].checkpointed_bytes = Some(1);
        processes[1].checkpointed_bytes = Some(5);
        // 5 - 1, and 2 + 3 - 5.
        assert_eq!(Manifest::released_by_drain(&processes), Some(4));
    }

    #[test]
    fn needs_are_summed_per_gpu() {
        assert_eq!(
            sample().needs_by_gpu(),
            [("GPU-a".to_string(), 7), ("GPU-b".to_string(), 3)]
        );
    }

    #[test]
    fn a_manifest_without_its_state_was_written_complete() {
        let mut text = serde_json::to_value(sample()).expect("json");
        text.as_object_mut().expect("an object").remove("complete");
        let back: Manifest = serde_json::from_value(text).expect("reads");
        assert!(back.complete);
    }

    #[test]
    fn a_manifest_reads_back_as_written() {
        let text = serde_json::to_string(&sample()).expect("json");
        let back: Manifest = serde_json::from_str(&text).expect("reads");
        assert_eq!(back, sample());
    }
}
