//! Where the service keeps each job's images: `STORE/JOB/`, root's alone
//! (0700, as the store), one directory per snapshot (`snapshot-UNIXMS`,
//! written by `cudackpt dump`), and `latest`, the record of the last
//! complete one: written only once a newer snapshot is complete, and only
//! then are the older ones removed, so a job always has its last complete
//! snapshot (or none). The store is the admin's: the job's user can
//! neither read nor change what is in it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::commands::disk::manifest::{self, Manifest};
use crate::files::SafeDir;

/// The store, its root held.
pub struct Store {
    root: SafeDir,
}

/// A job's last complete snapshot, as `latest` records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Latest {
    /// Its directory's name in the job's directory.
    pub snapshot: String,
    pub job: u64,
    /// The job's user: only a job of that user comes back from it.
    pub uid: u32,
    /// The node it was written on.
    pub node: String,
    pub written_unix_s: u64,
    pub bytes: u64,
}

/// The record's name in a job's directory.
const LATEST: &str = "latest";
/// A snapshot directory's name starts so.
const SNAPSHOT: &str = "snapshot-";

impl Store {
    /// Opens the store at `root`, made 0700 where missing; refused where it
    /// is not root's alone.
    pub fn open(root: &Path) -> Result<Store, String> {
        let root = SafeDir::create(root).map_err(|e| format!("{e} ({})", e.hint()))?;
        Ok(Store { root })
    }

    pub fn path(&self) -> &Path {
        self.root.path()
    }

    fn job_dir(&self, job: u64) -> Result<SafeDir, String> {
        SafeDir::create(&self.root.path().join(job.to_string()))
            .map_err(|e| format!("{e} ({})", e.hint()))
    }

    /// Where job `job`'s next snapshot goes (not made: `dump --to` makes
    /// it).
    pub fn next_snapshot(&self, job: u64) -> Result<PathBuf, String> {
        let dir = self.job_dir(job)?;
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        Ok(dir.path().join(format!("{SNAPSHOT}{ms}")))
    }

    /// Records `latest` as job `job`'s last complete snapshot, then
    /// removes its older ones.
    pub fn commit(&self, latest: &Latest) -> Result<(), String> {
        let dir = self.job_dir(latest.job)?;
        let mut text = serde_json::to_vec_pretty(latest).map_err(|e| e.to_string())?;
        text.push(b'\n');
        dir.write_atomic(LATEST, &text)
            .map_err(|e| format!("cannot write {}: {e}", dir.path().join(LATEST).display()))?;
        for name in dir.names().unwrap_or_default() {
            let name = name.to_string_lossy();
            if name.starts_with(SNAPSHOT) && *name != *latest.snapshot {
                // std's remove_dir_all never follows a link; the store is
                // root's alone besides.
                let _ = std::fs::remove_dir_all(dir.path().join(&*name));
            }
        }
        Ok(())
    }

    /// Job `job`'s last complete snapshot: its directory, record and
    /// manifest, when its record names one whose manifest says it is
    /// complete.
    pub fn latest(&self, job: u64) -> Result<(PathBuf, Latest, Manifest), String> {
        let dir = SafeDir::open_existing(&self.root.path().join(job.to_string()))
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no snapshot of job {job} in {}", self.root.path().display()))?;
        let text = dir
            .read_capped(LATEST, 64 << 10)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| {
                format!(
                    "no complete snapshot of job {job} in {} (none was ever finished)",
                    dir.path().display()
                )
            })?;
        let latest: Latest = serde_json::from_str(&text).map_err(|e| {
            format!(
                "{} is not a record of cudackpt's: {e}",
                dir.path().join(LATEST).display()
            )
        })?;
        let images = dir.path().join(&latest.snapshot);
        if latest.job != job
            || !latest.snapshot.starts_with(SNAPSHOT)
            || latest.snapshot.contains('/')
        {
            return Err(format!(
                "{} names another job's snapshot",
                dir.path().join(LATEST).display()
            ));
        }
        let manifest = SafeDir::open_existing(&images)
            .ok()
            .flatten()
            .and_then(|d| {
                d.read_capped(manifest::FILE_NAME, manifest::CAP)
                    .ok()
                    .flatten()
            })
            .and_then(|m| serde_json::from_str::<Manifest>(&m).ok())
            .filter(|m| m.complete)
            .ok_or_else(|| {
                format!(
                    "the snapshot {} that job {job}'s record names is missing or incomplete",
                    images.display()
                )
            })?;
        Ok((images, latest, manifest))
    }

    /// Removes a snapshot that did not complete.
    pub fn discard(&self, snapshot: &Path) {
        if snapshot.starts_with(self.root.path()) {
            let _ = std::fs::remove_dir_all(snapshot);
        }
    }

    /// Removes every snapshot of job `job` (it finished).
    pub fn forget(&self, job: u64) {
        let _ = std::fs::remove_dir_all(self.root.path().join(job.to_string()));
    }
}
