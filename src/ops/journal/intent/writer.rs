//! Writing a command's intent record: once before its first state change
//! and again as it goes (the drain's ledger, the calls done, the hand-over
//! to CRIU), removed when the command ends, kept when a panic unwinds.

use std::path::PathBuf;

use super::panic::set_in_flight;
use super::places::{dir, file_name, home_for, user_intents};
use super::record::{owner_of, planned_steps, Intent, RecordedProcess, Start};
use crate::drain::ledger::{DrainNote, DrainPhase, SignalLedger};
use crate::files::{SafeDir, UnsafeDir};
use crate::targets::process;
use crate::vocabulary::locked;
use crate::vocabulary::place::Place;
use crate::vocabulary::plan::Operation;

/// A written intent, removed when dropped (the command ended), except
/// while a panic unwinds: then the group is wherever the bug left it, and
/// the record stays for `cudackpt recover`, as after SIGKILL.
pub struct Written {
    dir: SafeDir,
    name: String,
    /// Cleared when a newer record took its name: dropping it then leaves
    /// the file to the newer one.
    owns_file: bool,
}

impl Drop for Written {
    fn drop(&mut self) {
        if std::thread::panicking() || !self.owns_file {
            return;
        }
        set_in_flight(None);
        let _ = self.dir.remove(&self.name);
    }
}

/// A command's journal: its intent, once written, until the command ends.
#[derive(Default)]
pub struct Journal {
    written: std::sync::Mutex<Option<Written>>,
    /// Why the intent could not be written, for the report.
    unwritten: std::sync::Mutex<Option<String>>,
    /// The drain in force, kept in every record written after it.
    drain: std::sync::Mutex<Option<DrainNote>>,
    /// The last record's command and members, to write it again.
    last: std::sync::Mutex<Option<(&'static str, Vec<RecordedProcess>)>>,
    /// Every driver call has returned.
    calls_done: std::sync::atomic::AtomicBool,
}

impl Journal {
    /// Writes the intent of a drain: before the first request is sent.
    pub fn drain(&self, operation: &Operation, places: &[Place], note: DrainNote) {
        *locked(&self.drain) = Some(note);
        self.record(operation, places);
    }

    /// Every driver call of the command has returned: the record says so
    /// (if one was written), so that a kill from here on is finished
    /// forward by `recover`.
    pub fn calls_done(&self) {
        self.calls_done
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.rewrite();
    }

    /// Writes the record again with the drain at `phase`.
    pub fn drain_phase(&self, phase: DrainPhase) {
        if let Some(note) = locked(&self.drain).as_mut() {
            note.phase = phase;
        }
        self.rewrite();
    }

    /// Writes the last record again, with the drain as it stands.
    fn rewrite(&self) {
        let last = locked(&self.last).clone();
        if let Some((command, members)) = last {
            self.write_members(command, members);
        }
    }

    /// Writes the intent of `operation` over the group at `places` (where
    /// each process is, just before the first state change). A single step
    /// starts from the state it needs.
    pub fn record(&self, operation: &Operation, places: &[Place]) {
        let members: Vec<RecordedProcess> = places
            .iter()
            .map(|place| {
                let start = place.state.or_else(|| operation.precondition());
                RecordedProcess {
                    pid: place.pid,
                    name: place.name.clone(),
                    starttime: process::starttime(place.pid),
                    start: Start::from(start),
                    plan: planned_steps(operation, start),
                    owner: owner_of(place.pid),
                }
            })
            .collect();
        self.write_members(operation.name(), members);
    }

    fn write_members(&self, command: &'static str, members: Vec<RecordedProcess>) {
        *locked(&self.last) = Some((command, members.clone()));
        let drain = locked(&self.drain).clone();
        let calls_done = self.calls_done.load(std::sync::atomic::Ordering::SeqCst);
        let record = Intent {
            calls_done,
            ..Intent::of_this_process(command, members, drain)
        };
        match write(&record) {
            Ok(written) => {
                // The new record replaced the old one under the same name.
                if let Some(mut old) = locked(&self.written).replace(written) {
                    old.owns_file = false;
                }
            }
            Err(error) => {
                let hint = crate::files::run_dir_hint("records", crate::environment::RECORD_DIR)
                    .map_or(String::new(), |hint| format!("; {hint}"));
                *locked(&self.unwritten) = Some(format!(
                    "could not write the intent record ({error}): had cudackpt been killed mid-change, `cudackpt recover` would not have known these processes{hint}"
                ))
            }
        }
    }

    /// Hands the record to `criu` (CRIU's pre-dump hook, once its group is
    /// suspended), narrowed to `suspended` (those this command
    /// checkpointed), so that it outlives this command: a post-dump takes
    /// it (the dump went on), and a CRIU that ends without one leaves it to
    /// the hook's watcher and `recover`, which put the group back. Nothing
    /// suspended: the record goes as usual.
    pub fn hand_over(&self, criu: crate::targets::identity::Identity, suspended: &[i32]) {
        let last = locked(&self.last).clone();
        let Some((command, members)) = last.filter(|_| !suspended.is_empty()) else {
            return;
        };
        let record = Intent {
            owner_pid: criu.pid,
            owner_starttime: criu.starttime,
            handed_to_criu: true,
            ..Intent::of_this_process(
                command,
                members
                    .into_iter()
                    .filter(|m| suspended.contains(&m.pid))
                    .collect(),
                locked(&self.drain).clone(),
            )
        };
        match write(&record) {
            Ok(mut handed) => {
                // CRIU's now: neither this record nor the old one goes when
                // this command ends.
                handed.owns_file = false;
                if let Some(mut old) = locked(&self.written).take() {
                    old.owns_file = false;
                }
                set_in_flight(None);
            }
            Err(error) => {
                *locked(&self.unwritten) = Some(format!(
                    "could not hand the intent record to CRIU ({error}): if the dump fails and the hook's watcher cannot resume the group, `cudackpt recover` will not know it"
                ))
            }
        }
    }

    /// Why the intent could not be written, if it could not.
    pub fn unwritten(&self) -> Option<String> {
        locked(&self.unwritten).clone()
    }
}

/// A command's drain signals go into its record; without a drain (a
/// resume that rebuilds) there is nothing to write.
impl SignalLedger for Journal {
    fn begin(&self, pid: i32) {
        let noted = locked(&self.drain)
            .as_mut()
            .map(|note| note.begin(pid))
            .is_some();
        if noted {
            self.rewrite();
        }
    }

    fn end(&self, pid: i32, delivered: bool) {
        if let Some(note) = locked(&self.drain).as_mut() {
            note.end(pid, delivered);
        }
    }

    fn flush(&self) {
        if locked(&self.drain).is_some() {
            self.rewrite();
        }
    }

    fn rebuilding(&self, signal: i32, timeout: std::time::Duration, pids: &[i32]) {
        locked(&self.drain)
            .get_or_insert_with(|| DrainNote {
                phase: DrainPhase::Rebuilding,
                ..DrainNote::new(signal, timeout, &[])
            })
            .owe_rebuild(pids);
        self.rewrite();
    }
}

/// Writes an intent record of this process, atomically (under this
/// process's PID, whoever its owner), where its members' owner finds it
/// ([`home_for`]).
pub fn write(intent: &Intent) -> Result<Written, UnsafeDir> {
    let me = std::process::id() as i32;
    let name = file_name(me);
    let text = serde_json::to_string_pretty(intent).unwrap_or_default();
    let save = |path: PathBuf| -> Result<SafeDir, UnsafeDir> {
        let dir = SafeDir::create(&path)?;
        dir.write_atomic(&name, text.as_bytes())
            .map_err(|source| UnsafeDir::Io {
                path: dir.path().join(&name),
                source,
            })?;
        Ok(dir)
    };
    let dir = match home_for(&intent.members) {
        Some(user) => crate::files::as_user(crate::files::user(user), || save(user_intents(user)))
            .map_err(|source| UnsafeDir::Io {
                path: user_intents(user),
                source,
            })??,
        None => save(dir())?,
    };
    set_in_flight(Some(dir.path().join(&name)));
    Ok(Written {
        dir,
        name,
        owns_file: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written_in(dir: &std::path::Path) -> (Written, PathBuf) {
        let dir = SafeDir::create(dir).expect("a private directory");
        let path = dir.write_atomic("1.json", b"{}").expect("written");
        let written = Written {
            dir,
            name: "1.json".to_string(),
            owns_file: true,
        };
        (written, path)
    }

    #[test]
    fn a_command_that_ends_removes_its_record_and_a_panic_keeps_it() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let (written, path) = written_in(tmp.path());
        drop(written);
        assert!(!path.exists(), "an ended command removes its record");

        let (written, path) = written_in(tmp.path());
        let unwound = std::thread::spawn(move || {
            let _held = written;
            panic!("a bug in the middle of a group");
        })
        .join();
        assert!(unwound.is_err());
        assert!(path.exists(), "a panic leaves the record for `recover`");
    }
}
