//! Stage 4, choose the map: the GPU map a restore hands to the driver.
//! `--map auto` maps the GPUs recorded at checkpoint onto this host's by
//! index; OLD=NEW pairs are resolved against this host's GPUs (indexes to
//! UUIDs, every NEW checked to be here) and a partial map is completed into
//! the bijection the driver needs. Reads the checkpoint records of the
//! targets a restore may touch; the pre-flight and the records stage use
//! them too.

use crate::driver::{CheckpointApi, Driver, GpuPair, ProcessState};
use crate::files::SafeDir;
use crate::gpu::inventory::Inventory;
use crate::gpu::map::{self, Completed, MapEntry, MapError, MapSpec};
use crate::gpu::record::{self, Record, RecordMatch, RecordedGpu};
use crate::ops::diagnose::describe_process;
use crate::ops::diagnose::map_failure;
use crate::targets::process::Target;
use crate::vocabulary::failure::{Fault, FaultKind};
use crate::vocabulary::request::Request;
use crate::vocabulary::stop::Stop;
use std::collections::HashMap;

/// The map to pass, why, and the records read on the way.
pub struct Chosen {
    /// `None`: pass no map.
    pub pairs: Option<Vec<GpuPair>>,
    pub remarks: Vec<String>,
    /// The checkpoint records of the targets, for restores.
    pub records: HashMap<i32, Record>,
}

/// Chooses the map for a request's targets, or stops the command.
pub fn choose(
    request: &Request<'_>,
    targets: &[Target],
    records_dir: Option<&SafeDir>,
    host: &Inventory<'_>,
    driver: &Driver,
) -> Result<Chosen, Stop> {
    let mut records = HashMap::new();
    let mut unusable = Vec::new();
    if let Some(dir) = records_dir.filter(|_| request.operation.restores()) {
        for target in targets {
            match record::read(dir, target.pid, &target.name) {
                Ok(Some(found)) => {
                    if let Some(record) = applicable(found, target, driver) {
                        records.insert(record.pid, record);
                    }
                }
                Ok(None) => {}
                Err(why) => unusable.push(why),
            }
        }
    }
    let (pairs, mut remarks) = match &request.map {
        MapSpec::None => (None, Vec::new()),
        MapSpec::Auto => auto(&records, targets, host).map_err(|mut failure| {
            // Why a record it needed was not there, when one was refused.
            for why in &unusable {
                failure.message.push_str(&format!("; {why}"));
            }
            Stop::not_run(failure)
        })?,
        MapSpec::Entries(entries) => given(entries, host).map_err(Stop::not_run)?,
    };
    if pairs.as_ref().is_some_and(|p| !p.is_empty()) && request.operation.restores() {
        can_remap(driver).map_err(Stop::not_run)?;
    }
    remarks.extend(unusable);
    Ok(Chosen {
        pairs,
        remarks,
        records,
    })
}

/// Refuses a map on a driver too old to remap GPUs, before it fails the
/// restore. A driver that does not say its version is left to judge.
fn can_remap(driver: &Driver) -> Result<(), Fault> {
    match driver.version() {
        Ok(version) if version < crate::driver::GPU_REMAPPING_SINCE_CUDA => Err(Fault::new(
            FaultKind::InvalidMap,
            format!(
                "this driver (CUDA {}.{}) cannot restore a process onto other GPUs: GPU remapping needs driver 580 (CUDA 13.0) or newer",
                version / 1000,
                version % 1000 / 10
            ),
            "restore without --map (onto the same GPUs), or upgrade the driver; `cudackpt doctor` says gpu_remapping",
        )),
        _ => Ok(()),
    }
}

/// A record found for `target`, if it is about it: written for this very
/// process, or for the same program that CRIU restored as a new process
/// with the same PID. A restored one is still checkpointed; a process that
/// merely reused the PID (and the name) is not, and its record is stale.
fn applicable(found: RecordMatch, target: &Target, driver: &Driver) -> Option<Record> {
    match found {
        RecordMatch::ThisProcess(record) => Some(record),
        RecordMatch::SameName(record) => {
            let state = driver.get_state(target.pid).ok();
            if state == Some(ProcessState::Checkpointed) {
                Some(record)
            } else {
                tracing::info!(
                    pid = target.pid,
                    ?state,
                    "ignoring a checkpoint record written for an earlier process with this PID and name"
                );
                None
            }
        }
    }
}

/// `--map auto`, and the remark saying what it chose.
fn auto(
    records: &HashMap<i32, Record>,
    targets: &[Target],
    host: &Inventory<'_>,
) -> Result<(Option<Vec<GpuPair>>, Vec<String>), Fault> {
    let pairs = auto_map(records, targets, host)?;
    if pairs.is_empty() {
        let remark = "--map auto: the GPUs are the ones recorded at checkpoint; nothing moves";
        return Ok((None, vec![remark.to_string()]));
    }
    let remark = format!("--map auto: {}", map::format_map(&pairs));
    Ok((Some(pairs), vec![remark]))
}

fn auto_refused(message: String) -> Fault {
    Fault::new(
        FaultKind::InvalidMap,
        message,
        "restore without --map (same GPUs), or give the map explicitly (`cudackpt devices` lists this host's GPUs)",
    )
}

/// The GPUs recorded at checkpoint onto this host's, index by index. Every
/// target needs a record, all of the same host.
fn auto_map(
    records: &HashMap<i32, Record>,
    targets: &[Target],
    host: &Inventory<'_>,
) -> Result<Vec<GpuPair>, Fault> {
    let mut recorded: Option<&Vec<RecordedGpu>> = None;
    for target in targets {
        let record = records.get(&target.pid).ok_or_else(|| {
            auto_refused(format!(
                "--map auto needs the checkpoint record of {}, and there is none",
                describe_process(target.pid, Some(&target.name))
            ))
        })?;
        match recorded {
            Some(first)
                if first
                    .iter()
                    .map(|g| g.uuid)
                    .ne(record.host_gpus.iter().map(|g| g.uuid)) =>
            {
                return Err(auto_refused(
                    "--map auto: the processes were checkpointed on different hosts".to_string(),
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
        .map_err(|why| auto_refused(why.to_string()))?;
    Ok(pairs.unwrap_or_default())
}

/// OLD=NEW pairs as given: indexes resolved against this host's GPUs,
/// every NEW checked to be here, a partial map completed.
fn given(
    entries: &[MapEntry],
    host: &Inventory<'_>,
) -> Result<(Option<Vec<GpuPair>>, Vec<String>), Fault> {
    let local_gpus = match host.for_map() {
        Ok(listing) => {
            tracing::debug!(source = ?listing.source, count = listing.gpus.len(), "listed the GPUs of this host");
            Some(listing.uuids())
        }
        // UUID-only maps can still go to the driver, which judges them;
        // indexes cannot be resolved.
        Err(unlisted) if !map::uses_indexes(entries) => {
            tracing::debug!(reason = ?unlisted.cuda, "cannot list GPUs; the driver will judge the map");
            None
        }
        Err(unlisted) => {
            let reason = unlisted.cuda.unwrap_or_default();
            return Err(map_failure(&MapError::DevicesUnavailable { reason }));
        }
    };
    let pairs = map::resolve_map(entries, local_gpus.as_deref()).map_err(|e| map_failure(&e))?;
    let Some(local) = local_gpus else {
        return Ok((Some(pairs), Vec::new()));
    };
    // The driver takes only a bijection over every GPU of the host:
    // complete what was given, or explain what is missing.
    match map::complete_map(&pairs, &local).map_err(|e| map_failure(&e))? {
        Completed::NothingMoves => Ok((
            Some(Vec::new()),
            vec!["the map moves no GPU, so the processes are restored in place".to_string()],
        )),
        Completed::Pairs { pairs, added } => {
            let remarks = if added {
                vec![format!(
                    "completed the map to cover every GPU of this host, as the driver needs: {}",
                    map::format_map(&pairs)
                )]
            } else {
                Vec::new()
            };
            Ok((Some(pairs), remarks))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::kernel::write_listing;
    use crate::gpu::map::parse_map;
    use std::path::Path;

    fn uuid(n: u8) -> crate::driver::GpuUuid {
        crate::driver::GpuUuid::from_bytes([n; 16])
    }

    /// A host of two H100s, A and B, as the kernel driver lists them; no
    /// CUDA driver to fall back on.
    fn two_gpus() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        write_listing(
            dir.path(),
            &[
                ("0000:0a:00.0", uuid(0xa), "H100"),
                ("0000:0b:00.0", uuid(0xb), "H100"),
            ],
        );
        dir
    }

    const NO_DRIVER: &str = "/nonexistent/libcuda.so.1";

    fn target(pid: i32) -> Target {
        Target {
            pid,
            name: "worker".to_string(),
            stopped: false,
            parent: 1,
            identity: Default::default(),
        }
    }

    #[test]
    fn a_partial_map_is_completed_and_said_to_be() {
        let dir = two_gpus();
        let host = Inventory::over(dir.path(), Some(Path::new(NO_DRIVER)));
        let entries = parse_map(&[format!("{}=1", uuid(0xa))]).expect("a map");
        let (pairs, remarks) = given(&entries, &host).expect("completed");
        let pairs = pairs.expect("a map to pass");
        assert_eq!(pairs.len(), 2);
        assert_eq!((pairs[0].old, pairs[0].new), (uuid(0xa), uuid(0xb)));
        assert_eq!((pairs[1].old, pairs[1].new), (uuid(0xb), uuid(0xa)));
        assert!(remarks[0].starts_with("completed the map"), "{remarks:?}");
    }

    #[test]
    fn a_map_that_moves_nothing_is_passed_empty() {
        let dir = two_gpus();
        let host = Inventory::over(dir.path(), Some(Path::new(NO_DRIVER)));
        let entries = parse_map(&[format!("{0}={0}", uuid(0xa))]).expect("a map");
        let (pairs, remarks) = given(&entries, &host).expect("fine");
        assert_eq!(pairs, Some(Vec::new()));
        assert!(remarks[0].contains("moves no GPU"), "{remarks:?}");
    }

    #[test]
    fn an_index_needs_the_host_gpus() {
        let empty = tempfile::tempdir().expect("tempdir");
        let host = Inventory::over(empty.path(), Some(Path::new(NO_DRIVER)));
        let entries = parse_map(&[format!("{}=1", uuid(0xa))]).expect("a map");
        let failure = given(&entries, &host).expect_err("cannot resolve an index");
        assert_eq!(failure.kind, FaultKind::InvalidMap);
        assert!(
            failure.message.contains("could not be listed"),
            "{failure:?}"
        );
        // A UUID-only map goes to the driver, which judges it.
        let entries = parse_map(&[format!("{}={}", uuid(0xa), uuid(0xb))]).expect("a map");
        let (pairs, _) = given(&entries, &host).expect("passed as given");
        assert_eq!(pairs.expect("pairs").len(), 1);
    }

    #[test]
    fn auto_needs_a_record_for_every_target_and_moves_nothing_on_the_same_host() {
        let dir = two_gpus();
        let host = Inventory::over(dir.path(), Some(Path::new(NO_DRIVER)));
        let missing = auto(&HashMap::new(), &[target(7)], &host).expect_err("no record");
        assert!(missing.message.contains("checkpoint record"), "{missing:?}");
        let recorded = |n: u8, index| RecordedGpu {
            index,
            uuid: uuid(n),
            name: "H100".to_string(),
            memory_total_bytes: None,
        };
        let record = Record::new(
            7,
            "worker",
            vec![recorded(0xa, 0), recorded(0xb, 1)],
            None,
            None,
        );
        let records = HashMap::from([(7, record)]);
        let (pairs, remarks) = auto(&records, &[target(7)], &host).expect("same host");
        assert_eq!(pairs, None);
        assert!(remarks[0].contains("nothing moves"), "{remarks:?}");
    }
}
