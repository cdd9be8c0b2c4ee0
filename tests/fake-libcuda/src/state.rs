//! Per-process checkpoint state: the state machine (pure), its on-disk store
//! (one `<pid>.json` per process, read-modify-write under a `flock` of
//! `<pid>.lock`, replaced whole by a rename), and the
//! `calls.log` journal of every call, all in the state directory.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// `CUprocessState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcState {
    Running,
    Locked,
    Checkpointed,
    Failed,
}

impl ProcState {
    /// The `CUprocessState` value written to the caller.
    pub fn code(self) -> i32 {
        match self {
            ProcState::Running => 0,
            ProcState::Locked => 1,
            ProcState::Checkpointed => 2,
            ProcState::Failed => 3,
        }
    }

    pub fn from_name(name: &str) -> Option<ProcState> {
        match name {
            "running" => Some(ProcState::Running),
            "locked" => Some(ProcState::Locked),
            "checkpointed" => Some(ProcState::Checkpointed),
            "failed" => Some(ProcState::Failed),
            _ => None,
        }
    }
}

/// A checkpoint-API call on a process; `name` is its name in `calls.log` and
/// in injection rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcOp {
    GetState,
    RestoreTid,
    Lock,
    Checkpoint,
    Restore,
    Unlock,
}

impl ProcOp {
    pub const ALL: [ProcOp; 6] = [
        ProcOp::GetState,
        ProcOp::RestoreTid,
        ProcOp::Lock,
        ProcOp::Checkpoint,
        ProcOp::Restore,
        ProcOp::Unlock,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ProcOp::GetState => "get_state",
            ProcOp::RestoreTid => "restore_tid",
            ProcOp::Lock => "lock",
            ProcOp::Checkpoint => "checkpoint",
            ProcOp::Restore => "restore",
            ProcOp::Unlock => "unlock",
        }
    }

    pub fn from_name(name: &str) -> Option<ProcOp> {
        ProcOp::ALL.into_iter().find(|op| op.name() == name)
    }

    /// The state after `self` succeeds from `from`, or `None` when `self` is
    /// illegal in `from` (`CUDA_ERROR_ILLEGAL_STATE`). Queries keep the state.
    pub fn next_state(self, from: ProcState) -> Option<ProcState> {
        use ProcState::*;
        match (self, from) {
            (ProcOp::GetState | ProcOp::RestoreTid, s) => Some(s),
            (ProcOp::Lock, Running) => Some(Locked),
            (ProcOp::Checkpoint, Locked) => Some(Checkpointed),
            (ProcOp::Restore, Checkpointed) => Some(Locked),
            (ProcOp::Unlock, Locked) => Some(Running),
            _ => None,
        }
    }
}

/// The content of `<pid>.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub state: ProcState,
    /// Field 22 of `/proc/PID/stat` when the record was written.
    pub starttime: u64,
    /// Index of the fake device the process is on.
    #[serde(default)]
    pub device: usize,
    /// Work still draining under `busy:MS` lock attempts (see `ops::lock`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<Drain>,
    /// The process's `FAKE_CUDA_IDENTITY`, when it has one: a process CRIU
    /// restored has a new starttime but the same memory (its environment
    /// included), and keeps its record, as the real driver's state lives in
    /// the process and comes back with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
}

/// A drain in progress: when it ends, and when a lock attempt last waited
/// on it (milliseconds since the epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drain {
    pub until_ms: u64,
    pub last_ms: u64,
}

impl Record {
    pub fn fresh(starttime: u64) -> Record {
        Record {
            state: ProcState::Running,
            starttime,
            device: 0,
            drain: None,
            identity: None,
        }
    }

    /// Decodes a state file for a process started at `starttime`; an empty or
    /// unreadable file, or one left by an earlier process with the same PID
    /// (another starttime), is a fresh `running` record. For a process whose `FAKE_CUDA_IDENTITY` is `identity`, a record of
    /// the same identity is its own whatever its starttime (a CRIU restore).
    pub fn decode_as(text: &str, starttime: u64, identity: Option<&str>) -> Record {
        match serde_json::from_str::<Record>(text) {
            Ok(record) if record.starttime == starttime => record,
            Ok(record) if identity.is_some() && record.identity.as_deref() == identity => Record {
                starttime,
                ..record
            },
            _ => Record::fresh(starttime),
        }
    }
}

/// The state directory: `$FAKE_CUDA_STATE_DIR`, else
/// `$TMPDIR/fake-libcuda-<uid>` (`/tmp` when `TMPDIR` is unset).
pub struct Store {
    dir: PathBuf,
}

impl Store {
    pub fn from_env() -> Store {
        let dir = match std::env::var_os("FAKE_CUDA_STATE_DIR") {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => {
                let tmp = std::env::var_os("TMPDIR")
                    .filter(|t| !t.is_empty())
                    .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
                // SAFETY: getuid has no preconditions and cannot fail.
                let uid = unsafe { libc::getuid() };
                tmp.join(format!("fake-libcuda-{uid}"))
            }
        };
        Store { dir }
    }

    /// The state directory.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    fn ensure_dir(&self) -> io::Result<()> {
        DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&self.dir)
    }

    fn record_path(&self, pid: i32) -> PathBuf {
        self.dir.join(format!("{pid}.json"))
    }

    /// The record of process `pid` (started at `starttime`). The file is
    /// only ever replaced whole (see [`Store::update`]), so a read needs no
    /// lock and never sees half a record.
    pub fn read(&self, pid: i32, starttime: u64) -> io::Result<Record> {
        let text = match std::fs::read_to_string(self.record_path(pid)) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Record::fresh(starttime)),
            Err(e) => return Err(e),
        };
        Ok(Record::decode_as(
            &text,
            starttime,
            crate::procfs::identity(pid).as_deref(),
        ))
    }

    /// Runs `change` on the record of process `pid` under an exclusive lock
    /// (`<pid>.lock`, a file of its own: the record is replaced, and a lock
    /// on it would be a lock on the file replaced) and writes the record
    /// back if `change` altered it.
    pub fn update<T>(
        &self,
        pid: i32,
        starttime: u64,
        change: impl FnOnce(&mut Record) -> T,
    ) -> io::Result<T> {
        self.ensure_dir()?;
        // Read-only is enough to hold a flock: a lock file root made stays
        // usable by another user's process sharing the directory.
        let lock = File::open(self.lock_path(pid)).or_else(|_| {
            OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .open(self.lock_path(pid))
        })?;
        flock(&lock, libc::LOCK_EX)?;
        let text = match std::fs::read_to_string(self.record_path(pid)) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e),
        };
        let identity = crate::procfs::identity(pid);
        let before = Record::decode_as(&text, starttime, identity.as_deref());
        let mut record = before.clone();
        let result = change(&mut record);
        record.identity = identity;
        if record != before || text.trim().is_empty() {
            let json = serde_json::to_string(&record).map_err(io::Error::other)?;
            self.replace(pid, json.as_bytes())?;
        }
        Ok(result)
    }

    /// Replaces the record of `pid` with `bytes` whole: written to a file
    /// of this writer's, then renamed over the record. The fake lives in the
    /// caller's process, and a caller killed mid-update (kill -9 of
    /// cudackpt) leaves the old record or the new one, never a cut one; a
    /// reader (a test polling the state) sees one or the other too.
    fn replace(&self, pid: i32, bytes: &[u8]) -> io::Result<()> {
        let temporary = self
            .dir
            .join(format!(".{pid}.json.{}.tmp", std::process::id()));
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temporary)?;
        file.write_all(bytes)?;
        drop(file);
        std::fs::rename(&temporary, self.record_path(pid))
    }

    fn lock_path(&self, pid: i32) -> PathBuf {
        self.dir.join(format!("{pid}.lock"))
    }

    /// Appends one line to `calls.log`.
    pub fn log_call(&self, line: &str) -> io::Result<()> {
        self.append("calls.log", line)
    }

    /// Appends one line to `init.log`: one per `cuInit` call, `init <caller
    /// pid> <code>`, kept apart from `calls.log` (which holds process
    /// operations only) so tests can count them.
    pub fn log_init(&self, line: &str) -> io::Result<()> {
        self.append("init.log", line)
    }

    fn append(&self, file: &str, line: &str) -> io::Result<()> {
        self.ensure_dir()?;
        let mut file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(self.dir.join(file))?;
        flock(&file, libc::LOCK_EX)?;
        file.write_all(format!("{line}\n").as_bytes())
    }

    /// The content of the `inject` rules file, if there is one.
    pub fn inject_rules(&self) -> Option<String> {
        std::fs::read_to_string(self.dir.join("inject")).ok()
    }

    /// The content of the fake NVML's `nvml-processes` file, if there is one.
    pub fn nvml_processes(&self) -> Option<String> {
        std::fs::read_to_string(self.dir.join("nvml-processes")).ok()
    }
}

/// Takes a `flock` of `operation` (`LOCK_SH` / `LOCK_EX`) on `file`; it is
/// released when the file is closed.
fn flock(file: &File, operation: libc::c_int) -> io::Result<()> {
    loop {
        // SAFETY: the descriptor belongs to `file`, which outlives the call.
        let rc = unsafe { libc::flock(file.as_raw_fd(), operation) };
        if rc == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ProcState::*;

    #[test]
    fn the_state_machine_matches_the_readme_table() {
        let table = [
            (ProcOp::Lock, Running, Some(Locked)),
            (ProcOp::Checkpoint, Locked, Some(Checkpointed)),
            (ProcOp::Restore, Checkpointed, Some(Locked)),
            (ProcOp::Unlock, Locked, Some(Running)),
        ];
        for (op, from, to) in table {
            assert_eq!(op.next_state(from), to, "{op:?} from {from:?}");
        }
        for op in [
            ProcOp::Lock,
            ProcOp::Checkpoint,
            ProcOp::Restore,
            ProcOp::Unlock,
        ] {
            for from in [Running, Locked, Checkpointed, Failed] {
                if !table.iter().any(|t| t.0 == op && t.1 == from) {
                    assert_eq!(op.next_state(from), None, "{op:?} from {from:?}");
                }
            }
        }
        for from in [Running, Locked, Checkpointed, Failed] {
            assert_eq!(ProcOp::GetState.next_state(from), Some(from));
            assert_eq!(ProcOp::RestoreTid.next_state(from), Some(from));
        }
    }

    #[test]
    fn op_names_round_trip() {
        for op in ProcOp::ALL {
            assert_eq!(ProcOp::from_name(op.name()), Some(op));
        }
        assert_eq!(ProcOp::from_name("toggle"), None);
    }

    #[test]
    fn state_codes_are_cuprocessstate() {
        let codes: Vec<i32> = [Running, Locked, Checkpointed, Failed]
            .iter()
            .map(|s| s.code())
            .collect();
        assert_eq!(codes, [0, 1, 2, 3]);
        assert_eq!(ProcState::from_name("checkpointed"), Some(Checkpointed));
        assert_eq!(ProcState::from_name("Checkpointed"), None);
    }

    #[test]
    fn records_decode_and_guard_against_pid_reuse() {
        let text = r#"{"state":"locked","starttime":42,"device":1}"#;
        let record = Record::decode_as(text, 42, None);
        assert_eq!((record.state, record.device), (Locked, 1));
        assert_eq!(Record::decode_as(text, 43, None), Record::fresh(43));
        assert_eq!(Record::decode_as("", 7, None), Record::fresh(7));
        assert_eq!(Record::decode_as("{garbage", 7, None), Record::fresh(7));
        let no_device = Record::decode_as(r#"{"state":"failed","starttime":5}"#, 5, None);
        assert_eq!((no_device.state, no_device.device), (Failed, 0));
        let json = serde_json::to_string(&Record::fresh(9)).unwrap_or_default();
        assert_eq!(json, r#"{"state":"running","starttime":9,"device":0}"#);
    }

    #[test]
    fn a_record_follows_its_process_through_a_criu_restore_by_identity() {
        let text = r#"{"state":"checkpointed","starttime":42,"device":1,"identity":"job"}"#;
        // Restored by CRIU: a new starttime, the same memory and identity.
        let restored = Record::decode_as(text, 99, Some("job"));
        assert_eq!(
            (restored.state, restored.device, restored.starttime),
            (Checkpointed, 1, 99)
        );
        // Another process on the PID, or one without an identity: fresh.
        assert_eq!(
            Record::decode_as(text, 99, Some("other")),
            Record::fresh(99)
        );
        assert_eq!(Record::decode_as(text, 99, None), Record::fresh(99));
    }

    #[test]
    fn store_updates_survive_and_stale_files_are_discarded() {
        let dir = std::env::temp_dir().join(format!("fake-libcuda-unit-{}", std::process::id()));
        let store = Store { dir: dir.clone() };
        assert_eq!(store.read(77, 1).ok(), Some(Record::fresh(1)));
        let code = store
            .update(77, 1, |r| r.state = Locked)
            .map_err(|e| e.to_string());
        assert_eq!(code, Ok(()));
        assert_eq!(store.read(77, 1).ok().map(|r| r.state), Some(Locked));
        // Same PID, another process (another starttime): running again.
        assert_eq!(store.read(77, 2).ok().map(|r| r.state), Some(Running));
        store.log_call("lock 77 0").ok();
        store.log_call("unlock 77 401").ok();
        let log = std::fs::read_to_string(dir.join("calls.log")).unwrap_or_default();
        assert_eq!(log, "lock 77 0\nunlock 77 401\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
