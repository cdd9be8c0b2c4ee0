//! The checkpoint record: what cudackpt writes when it checkpoints a
//! process, so a later restore can check and plan without guessing. It
//! holds the host's GPUs (UUID, name, memory), the process's device memory
//! per GPU (from NVML, when installed), the driver version and the time.
//!
//! Records live in one file per PID under the run directory (root's
//! `/run/cudackpt`, gone at reboot like the checkpointed state), or
//! `--record-dir` / `CUDACKPT_RECORD_DIR` (e.g. a CRIU images directory of
//! root's, to travel with the images), always through a checked
//! [`SafeDir`]. A record is about the process with its PID and start
//! time; one with another start time but the same name may be about the
//! same program restored by CRIU, which the caller confirms with the driver
//! (such a process is checkpointed); anything else is ignored.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::driver::{GpuPair, GpuUuid};
use crate::files::{self, SafeDir};
use crate::gpu::inventory::Gpu;

pub const DIR_VAR: &str = crate::environment::RECORD_DIR;
const SCHEMA_VERSION: u32 = 1;
/// A record is a few KiB; anything much larger was not written by cudackpt.
const RECORD_CAP: u64 = 1 << 20;

/// One GPU of the host the checkpoint was taken on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RecordedGpu {
    pub index: usize,
    pub uuid: GpuUuid,
    pub name: String,
    pub memory_total_bytes: Option<u64>,
}

/// Device memory the process held on one GPU just before its checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RecordedUse {
    pub uuid: GpuUuid,
    pub bytes: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Record {
    pub schema_version: u32,
    pub pid: i32,
    pub name: String,
    /// Field 22 of /proc/PID/stat, to tell a reused PID.
    pub starttime: Option<u64>,
    /// Seconds since the epoch.
    pub checkpointed_at: u64,
    pub cuda_version: Option<String>,
    pub host_gpus: Vec<RecordedGpu>,
    /// `None` when NVML could not tell (then memory is not checked).
    pub gpu_memory: Option<Vec<RecordedUse>>,
}

impl Record {
    pub fn new(
        pid: i32,
        name: &str,
        host_gpus: Vec<RecordedGpu>,
        gpu_memory: Option<Vec<RecordedUse>>,
        cuda_version: Option<String>,
    ) -> Record {
        Record {
            schema_version: SCHEMA_VERSION,
            pid,
            name: name.to_string(),
            starttime: crate::targets::process::starttime(pid),
            checkpointed_at: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            cuda_version,
            host_gpus,
            gpu_memory,
        }
    }

    /// Device memory the process needs, in bytes, summed over its GPUs.
    pub fn bytes_needed(&self) -> Option<u64> {
        self.gpu_memory
            .as_ref()
            .map(|uses| uses.iter().map(|u| u.bytes).sum())
    }
}

/// The record directory: `--record-dir`, else CUDACKPT_RECORD_DIR, else
/// the run directory.
pub fn dir(explicit: Option<&Path>) -> PathBuf {
    explicit
        .map(Path::to_path_buf)
        .or_else(|| crate::environment::os(DIR_VAR).map(PathBuf::from))
        .unwrap_or_else(files::run_dir)
}

fn file_name(pid: i32) -> String {
    format!("{pid}.json")
}

/// Writes the record atomically (a fresh private temporary file renamed
/// into place, never through a link).
pub fn write(dir: &SafeDir, record: &Record) -> io::Result<PathBuf> {
    let text = serde_json::to_string_pretty(record).map_err(io::Error::other)?;
    dir.write_atomic(&file_name(record.pid), text.as_bytes())
}

/// How a record found for a PID relates to the process there now.
#[derive(Debug, Clone, PartialEq)]
pub enum RecordMatch {
    /// Written for this very process (same start time).
    ThisProcess(Record),
    /// Written for an earlier process with this PID and this name: either
    /// the same program restored by CRIU as a new process (its CUDA state
    /// then still checkpointed), or an unrelated one that reused the PID.
    /// The caller tells them apart by asking the driver.
    SameName(Record),
}

/// The record of `pid` (process name `name`, started at `starttime`), if
/// there is one that may be about this process; `Err` says why a record
/// file that is there cannot be used (a link, too large, not a record).
pub fn read(dir: &SafeDir, pid: i32, name: &str) -> Result<Option<RecordMatch>, String> {
    let path = dir.path().join(file_name(pid));
    let Some(text) = dir
        .read_capped(&file_name(pid), RECORD_CAP)
        .map_err(|why| format!("checkpoint record {} ignored: {why}", path.display()))?
    else {
        return Ok(None);
    };
    let record: Record = serde_json::from_str(&text).map_err(|why| {
        format!(
            "checkpoint record {} ignored: not a record ({why})",
            path.display()
        )
    })?;
    Ok(judge(
        record,
        pid,
        name,
        crate::targets::process::starttime(pid),
    ))
}

/// The pure part of [`read`].
pub fn judge(record: Record, pid: i32, name: &str, starttime: Option<u64>) -> Option<RecordMatch> {
    if record.pid != pid {
        return None;
    }
    if record.starttime.is_some() && record.starttime == starttime {
        return Some(RecordMatch::ThisProcess(record));
    }
    (record.name == name).then_some(RecordMatch::SameName(record))
}

/// Removes the record of a process that is running again.
pub fn remove(dir: &SafeDir, pid: i32) {
    let _ = dir.remove(&file_name(pid));
}

/// Why `--map auto` cannot map the recorded GPUs onto this host's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AutoMapError {
    /// The record lists no GPU: neither NVML nor the kernel driver could
    /// say which the host had when it was written (a container without
    /// NVML, a stand-in driver).
    #[error("--map auto needs the GPUs the host had at checkpoint time, and the record lists none: neither NVML nor the kernel driver could list them when it was written")]
    NotRecorded,
    #[error("--map auto needs as many GPUs here as at checkpoint time: the record has {recorded}, this host {local}")]
    CountDiffers { recorded: usize, local: usize },
    #[error(
        "--map auto needs the same GPU models by index: GPU {index} was a {was} and is a {is} here"
    )]
    ModelDiffers {
        index: usize,
        was: String,
        is: String,
    },
}

/// `--map auto`: the recorded GPUs onto this host's, index by index, when
/// both hosts have the same number of GPUs of the same models. `Ok(None)`
/// when the GPUs are the same ones (nothing moves).
pub fn auto_map(
    recorded: &[RecordedGpu],
    local: &[Gpu],
) -> Result<Option<Vec<GpuPair>>, AutoMapError> {
    if recorded.is_empty() {
        return Err(AutoMapError::NotRecorded);
    }
    if recorded.len() != local.len() {
        return Err(AutoMapError::CountDiffers {
            recorded: recorded.len(),
            local: local.len(),
        });
    }
    if let Some((was, is)) = recorded.iter().zip(local).find(|(r, l)| r.name != l.name) {
        return Err(AutoMapError::ModelDiffers {
            index: was.index,
            was: was.name.clone(),
            is: is.name.clone(),
        });
    }
    if recorded.iter().zip(local).all(|(r, l)| r.uuid == l.uuid) {
        return Ok(None);
    }
    Ok(Some(
        recorded
            .iter()
            .zip(local)
            .map(|(r, l)| GpuPair {
                old: r.uuid,
                new: l.uuid,
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A UUID whose last digits are `n`.
    fn uuid(n: u8) -> GpuUuid {
        format!("GPU-00000000-0000-0000-0000-0000000000{n:02x}")
            .parse()
            .expect("test UUID")
    }

    fn gpu(index: usize, n: u8, name: &str) -> RecordedGpu {
        RecordedGpu {
            index,
            uuid: uuid(n),
            name: name.to_string(),
            memory_total_bytes: None,
        }
    }

    fn here(index: usize, n: u8, name: &str) -> Gpu {
        Gpu {
            index,
            uuid: uuid(n),
            name: name.to_string(),
            pci_bus_id: None,
            memory_total_bytes: None,
            memory_free_bytes: None,
            mig_enabled: None,
            persistence_mode: None,
        }
    }

    #[test]
    fn records_round_trip_and_belong_to_their_process() {
        let temp = tempfile::tempdir().expect("tempdir");
        let dir = SafeDir::create(temp.path()).expect("a safe dir");
        let me = std::process::id() as i32;
        let record = Record::new(
            me,
            "tester",
            vec![gpu(0, 0xa, "H100")],
            Some(vec![RecordedUse {
                uuid: uuid(0xa),
                bytes: 42,
            }]),
            Some("13.0".into()),
        );
        let written = write(&dir, &record).expect("writes");
        assert_eq!(written, temp.path().join(format!("{me}.json")));
        assert_eq!(
            read(&dir, me, "another name"),
            Ok(Some(RecordMatch::ThisProcess(record.clone()))),
            "same start time"
        );
        assert_eq!(record.bytes_needed(), Some(42));
        let mut stale = record.clone();
        stale.starttime = Some(1);
        write(&dir, &stale).expect("writes");
        assert_eq!(
            read(&dir, me, "another name"),
            Ok(None),
            "a replaced process"
        );
        assert_eq!(
            read(&dir, me, "tester"),
            Ok(Some(RecordMatch::SameName(stale))),
            "restored by CRIU, or the PID reused by the same program: the driver decides"
        );
        remove(&dir, me);
        assert_eq!(read(&dir, me, "tester"), Ok(None));
        dir.write_atomic(&format!("{me}.json"), b"{\"not\": \"a record\"}")
            .expect("writes");
        let unusable = read(&dir, me, "tester").expect_err("not a record");
        assert!(unusable.contains("ignored: not a record"), "{unusable}");
    }

    #[test]
    fn auto_maps_by_index_when_the_hosts_match() {
        let recorded = [gpu(0, 0xa, "H100"), gpu(1, 0xb, "H100")];
        let host = |u: [u8; 2], n: [&str; 2]| -> Vec<Gpu> {
            (0..2).map(|i| here(i, u[i], n[i])).collect()
        };
        assert_eq!(
            auto_map(&recorded, &host([0xa, 0xb], ["H100", "H100"])),
            Ok(None)
        );
        assert_eq!(
            auto_map(&recorded, &host([0x1, 0x2], ["H100", "H100"])),
            Ok(Some(vec![
                GpuPair {
                    old: uuid(0xa),
                    new: uuid(0x1)
                },
                GpuPair {
                    old: uuid(0xb),
                    new: uuid(0x2)
                }
            ]))
        );
        assert!(auto_map(&recorded, &host([0x1, 0x2], ["H100", "H200"]))
            .unwrap_err()
            .to_string()
            .contains("was a H100 and is a H200"));
        assert!(
            auto_map(&recorded[..1], &host([0x1, 0x2], ["H100", "H100"]))
                .unwrap_err()
                .to_string()
                .contains("record has 1, this host 2")
        );
        // A record written where no GPU could be listed says so, not "0".
        assert_eq!(
            auto_map(&[], &host([0x1, 0x2], ["H100", "H100"])),
            Err(AutoMapError::NotRecorded)
        );
    }
}
