//! Crash-safe groups (README, "Memory, crashes and dry runs"): before its first state change a command
//! writes an intent record (which processes, where each started, who runs
//! it) in `intents/` of the run directory, and removes it when it ends,
//! whatever the outcome. A record whose owner died (SIGKILL, the OOM
//! killer, a second signal, power) stays: the next cudackpt that touches
//! one of its processes refuses until `cudackpt recover` has put them back
//! where they started.
//!
//! A drained group (cudackpt(1), DRAIN PROTOCOL) says so in its record, with the signal and how
//! far the handshake got, so that `recover` asks its processes to rebuild.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::driver::ProcessState;
use crate::files::{SafeDir, UnsafeDir};
use crate::ops::vocabulary::locked;
use crate::ops::vocabulary::place::Place;
use crate::ops::vocabulary::plan::{self, Operation, Plan};
use crate::targets::process;

/// An intent is a few KiB.
const INTENT_CAP: u64 = 1 << 20;

/// One process of a group, and the state it started in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub pid: i32,
    pub name: String,
    /// Field 22 of /proc/PID/stat, to tell the process from a later one.
    pub starttime: Option<u64>,
    /// Where to put it back.
    pub start: Start,
    /// The driver calls planned for it from there, in order (e.g. `lock`,
    /// `checkpoint`); empty when it had nothing to do.
    #[serde(default)]
    pub plan: Vec<String>,
    /// Its owner (real uid), which says whose runtime directory may hold
    /// the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<u32>,
}

/// The state a member started in, as the record keeps it: the driver's
/// word for it (`running`, ...), or `unknown` (not asked, or a state this
/// cudackpt does not know). Any other text in an older record reads as
/// `unknown`, so `recover` meets no state it cannot match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Start {
    Running,
    Locked,
    Checkpointed,
    Failed,
    #[serde(other)]
    Unknown,
}

impl Start {
    /// The driver's state, for a known one.
    pub fn state(self) -> Option<ProcessState> {
        match self {
            Start::Running => Some(ProcessState::Running),
            Start::Locked => Some(ProcessState::Locked),
            Start::Checkpointed => Some(ProcessState::Checkpointed),
            Start::Failed => Some(ProcessState::Failed),
            Start::Unknown => None,
        }
    }
}

impl From<Option<ProcessState>> for Start {
    fn from(state: Option<ProcessState>) -> Start {
        match state {
            Some(ProcessState::Running) => Start::Running,
            Some(ProcessState::Locked) => Start::Locked,
            Some(ProcessState::Checkpointed) => Start::Checkpointed,
            Some(ProcessState::Failed) => Start::Failed,
            Some(ProcessState::Unknown(_)) | None => Start::Unknown,
        }
    }
}

impl std::fmt::Display for Start {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.state().map_or("unknown", ProcessState::as_str))
    }
}

/// What a command set out to do, and who ran it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    pub schema_version: u32,
    pub command: String,
    pub owner_pid: i32,
    pub owner_starttime: Option<u64>,
    pub members: Vec<Member>,
    /// Set when the group was asked to drain (`--drain`), or when a
    /// resume asks processes to rebuild (the phase says which).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<DrainNote>,
    /// Every driver call of the command has returned (rollbacks included):
    /// its processes are where it left them, and what is left is signals
    /// (a rebuild, a call-off). `recover` finishes such a record forward,
    /// never back: taking a job that is rebuilding its communicators back
    /// to `checkpointed` would lose it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub calls_done: bool,
    /// A CRIU pre-dump handed the record to its CRIU (the owner): if CRIU
    /// ends without a post-dump taking it, the dump failed (or the hook
    /// was killed) and the group goes back to where it started.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub handed_to_criu: bool,
}

/// A drained group's handshake, as far as it got: the signal, and every
/// drain signal this command sent, member by member, so that `recover`
/// sends each exactly what undoes it (cudackpt(1), DRAIN PROTOCOL): nothing to one never
/// asked, one signal to one asked once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainNote {
    /// The signal that asked (and asks for the rebuild).
    pub signal: i32,
    pub phase: DrainPhase,
    /// The command's drain timeout: how long `recover` waits on a process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Each member's signals; `None` in a record written before they were
    /// kept (`recover` then goes by `phase`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signals: Option<Vec<Signalled>>,
    /// The member a signal was going to when the record was written: it
    /// may or may not have had it (the record is written just before the
    /// send, and again before the next one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sending: Option<i32>,
}

/// The drain signals one member has had from this command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signalled {
    pub pid: i32,
    /// Signals delivered to it: a request, then a rebuild or a call-off.
    pub sent: u32,
    /// It showed the marker before this command sent it anything (it
    /// drained for an earlier command and waits for its rebuild).
    pub drained_before: bool,
}

impl Signalled {
    /// Whether the process waits for one more signal: it was asked once
    /// (or drained before) and not yet asked again.
    pub fn owes_one(self) -> bool {
        self.drained_before ^ (self.sent % 2 == 1)
    }
}

/// How far a drain got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DrainPhase {
    /// The requests are being sent, or answered.
    Requested,
    /// Every member acknowledged.
    Drained,
    /// A resume is asking processes that drained before to rebuild (no
    /// drain of its own).
    Rebuilding,
}

impl DrainNote {
    /// A drain about to ask `members` (PID, showing the marker already).
    pub fn new(signal: i32, timeout: std::time::Duration, members: &[(i32, bool)]) -> DrainNote {
        DrainNote {
            signal,
            phase: DrainPhase::Requested,
            timeout_ms: Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
            signals: Some(
                members
                    .iter()
                    .map(|&(pid, drained_before)| Signalled {
                        pid,
                        sent: 0,
                        drained_before,
                    })
                    .collect(),
            ),
            sending: None,
        }
    }

    /// Notes `pids`, drained before this command, as owed their rebuild
    /// (those already noted keep their account).
    pub fn owe_rebuild(&mut self, pids: &[i32]) {
        let signals = self.signals.get_or_insert_with(Vec::new);
        for &pid in pids {
            if !signals.iter().any(|s| s.pid == pid) {
                signals.push(Signalled {
                    pid,
                    sent: 0,
                    drained_before: true,
                });
            }
        }
    }

    /// A signal is about to go to `pid`.
    pub fn begin(&mut self, pid: i32) {
        self.sending = Some(pid);
    }

    /// The signal to `pid` went (`delivered`) or could not be sent.
    pub fn end(&mut self, pid: i32, delivered: bool) {
        if self.sending == Some(pid) {
            self.sending = None;
        }
        if !delivered {
            return;
        }
        let signals = self.signals.get_or_insert_with(Vec::new);
        match signals.iter_mut().find(|s| s.pid == pid) {
            Some(member) => member.sent += 1,
            None => signals.push(Signalled {
                pid,
                sent: 1,
                drained_before: false,
            }),
        }
    }

    /// What the record says of `pid`, when it knows.
    pub fn of(&self, pid: i32) -> Option<Signalled> {
        self.signals
            .as_ref()?
            .iter()
            .find(|s| s.pid == pid)
            .copied()
    }
}

/// Where the drain signals of a command are accounted for: its intent
/// record, or (for `recover`) the record it took over.
pub trait SignalLedger {
    /// Before a drain signal goes to `pid`: written down first.
    fn begin(&self, pid: i32);
    /// After the send: whether it went.
    fn end(&self, pid: i32, delivered: bool);
    /// After the last send of a round: written down.
    fn flush(&self);
    /// Before a resume asks `pids` (drained before it) to rebuild with
    /// `signal`: written down, so that a kill from here on leaves an
    /// account of who was asked. A ledger that has its drain already
    /// (`recover`'s) needs nothing more.
    fn rebuilding(&self, _signal: i32, _timeout: std::time::Duration, _pids: &[i32]) {}
}

impl Member {
    /// Whether the process started at `starttime` is this member (a
    /// member whose start time could not be read matches any).
    pub fn started_at(&self, starttime: Option<u64>) -> bool {
        self.starttime.is_none() || self.starttime == starttime
    }

    /// Whether this member's process is still alive, and still the same.
    pub fn still_there(&self) -> bool {
        process::is_alive(self.pid) && self.started_at(process::starttime(self.pid))
    }
}

impl Intent {
    /// Whether the cudackpt that wrote it is gone (or its PID reused).
    pub fn owner_is_dead(&self) -> bool {
        !process::is_alive(self.owner_pid)
            || process::starttime(self.owner_pid) != self.owner_starttime
    }
}

/// Where intents live: `intents/` in the run directory (or wherever
/// `CUDACKPT_RECORD_DIR` moves records, as tests do).
pub fn dir() -> PathBuf {
    crate::gpu::record::dir(None).join("intents")
}

/// Where users' runtime directories are (`/run/user/UID`, as systemd-logind
/// makes them); a debug build takes another from
/// `CUDACKPT_DEBUG_USER_RUNTIME_BASE` (the tests' stand-in).
fn user_runtime_base() -> PathBuf {
    crate::environment::debug(crate::environment::DEBUG_USER_RUNTIME_BASE)
        .map_or_else(|| PathBuf::from("/run/user"), PathBuf::from)
}

/// The intents directory of user `uid`, as their own cudackpt keeps it
/// (`$XDG_RUNTIME_DIR/cudackpt/intents`, `/run/user/UID/...`).
fn user_intents(uid: u32) -> PathBuf {
    user_runtime_base()
        .join(uid.to_string())
        .join("cudackpt")
        .join("intents")
}

/// The user whose runtime directory holds intents at `dir`, when it is one
/// (pure but for the base).
fn user_of_intents(dir: &std::path::Path) -> Option<u32> {
    let relative = dir.strip_prefix(user_runtime_base()).ok()?;
    let uid: u32 = relative
        .components()
        .next()?
        .as_os_str()
        .to_str()?
        .parse()
        .ok()?;
    (dir == user_intents(uid)).then_some(uid)
}

/// A process's owner (real uid), from /proc.
fn owner_of(pid: i32) -> Option<u32> {
    process::read_status(pid)
        .ok()
        .flatten()
        .map(|status| status.uids[0])
}

/// Where root writes the record of `members`: in the runtime directory of
/// their one owner when that is another user who has one, so that the
/// owner's own cudackpt sees it (and refuses those processes, or recovers
/// them) and root's commands and theirs never take a process two ways;
/// else in root's. Another user's cudackpt writes in its own.
fn home_for(members: &[Member]) -> Option<u32> {
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    let mut owners = members.iter().map(|m| m.owner);
    let first = owners.next()??;
    let one_owner = first != 0 && owners.all(|owner| owner == Some(first));
    let runtime = user_runtime_base().join(first.to_string());
    (one_owner && SafeDir::open_existing_of(&runtime, first).is_ok_and(|d| d.is_some()))
        .then_some(first)
}

fn file_name(owner: i32) -> String {
    format!("{owner}.json")
}

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

/// The intent this process has written and not yet removed, for the panic
/// report (a panic hook cannot reach the journal of the command it stops).
static IN_FLIGHT: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

fn set_in_flight(path: Option<PathBuf>) {
    *locked(&IN_FLIGHT) = path;
}

/// Makes a panic say, after Rust's own message, what it leaves behind and
/// how to recover. The release build aborts on a panic (no unwinding), so
/// the record stays either way and the next cudackpt finds it.
pub fn report_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        // try_lock: the panicking thread may be the one holding it.
        let in_flight = IN_FLIGHT.try_lock().ok().and_then(|held| held.clone());
        crate::exit::last_words(&panic_advice(in_flight.as_deref()));
    }));
}

/// What a panic leaves, and what to run next (pure).
pub fn panic_advice(in_flight: Option<&std::path::Path>) -> String {
    let bug =
        "stopped on an internal error; this is a bug, please report it with the message above";
    match in_flight {
        Some(path) => format!(
            "{bug}. It was changing processes: its intent record {} names them and where each started; \
             every cudackpt refuses them (exit 10) until `cudackpt recover` puts them back",
            path.display()
        ),
        None => format!(
            "{bug}. It held no intent record (it had not started changing processes, or could not write one); \
             `cudackpt ps` shows where each CUDA process is"
        ),
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
    last: std::sync::Mutex<Option<(&'static str, Vec<Member>)>>,
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
        let members: Vec<Member> = places
            .iter()
            .map(|place| {
                let start = place.state.or_else(|| operation.precondition());
                Member {
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

    fn write_members(&self, command: &'static str, members: Vec<Member>) {
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

/// The names of the steps `operation` plans from `start` (pure).
pub fn planned_steps(operation: &Operation, start: Option<ProcessState>) -> Vec<String> {
    match plan::plan(operation, start, &[]) {
        Plan::Steps(steps) => steps
            .iter()
            .map(|s| s.kind().as_str().to_string())
            .collect(),
        Plan::AlreadyThere | Plan::Refused(_) => Vec::new(),
    }
}

impl Intent {
    /// Keeps the members that are `user`'s processes (recorded so, and
    /// still so): all a record in that user's directory is believed of.
    fn keep_members_of(&mut self, user: u32) {
        self.members
            .retain(|m| m.owner == Some(user) && owner_of(m.pid).is_none_or(|o| o == user));
    }

    /// Whether a CRIU pre-dump handed this record to `criu` (that very
    /// process: its PID and start time).
    pub fn handed_to(&self, criu: crate::targets::identity::Identity) -> bool {
        self.handed_to_criu && self.owner_pid == criu.pid && self.owner_starttime == criu.starttime
    }

    /// A record of this process's command.
    pub fn of_this_process(
        command: &str,
        members: Vec<Member>,
        drain: Option<DrainNote>,
    ) -> Intent {
        let me = std::process::id() as i32;
        Intent {
            schema_version: 1,
            command: command.to_string(),
            owner_pid: me,
            owner_starttime: process::starttime(me),
            members,
            drain,
            calls_done: false,
            handed_to_criu: false,
        }
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

/// Every intent left by a cudackpt that died, with its file's path; none
/// when there is no record directory yet. `Err`: the directory is there
/// but could not be read or trusted, so nobody can say what it holds.
/// Root also reads every user's runtime directory, believing a record
/// there only of that user's own processes.
pub fn abandoned() -> Result<Vec<(PathBuf, Intent)>, UnsafeDir> {
    let path = dir();
    let mut found = match SafeDir::open_existing(&path)? {
        Some(dir) => abandoned_in(&dir)?,
        None => Vec::new(),
    };
    found.extend(abandoned_in_users_dirs());
    Ok(found)
}

/// What the users' runtime directories hold, each record narrowed to the
/// processes of that directory's user; what cannot be read is skipped.
fn abandoned_in_users_dirs() -> Vec<(PathBuf, Intent)> {
    let mut found = Vec::new();
    for (uid, dir) in users_intent_dirs() {
        for (path, mut intent) in abandoned_in(&dir).unwrap_or_default() {
            intent.keep_members_of(uid);
            if !intent.members.is_empty() {
                found.push((path, intent));
            }
        }
    }
    found
}

/// The abandoned records in one directory.
fn abandoned_in(dir: &SafeDir) -> Result<Vec<(PathBuf, Intent)>, UnsafeDir> {
    let entries = std::fs::read_dir(dir.path()).map_err(|source| UnsafeDir::Io {
        path: dir.path().to_path_buf(),
        source,
    })?;
    Ok(entries
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().to_str()?.to_string();
            if !name.ends_with(".json") || name.starts_with('.') {
                return None;
            }
            let text = dir.read_capped(&name, INTENT_CAP).ok()??;
            let intent: Intent = serde_json::from_str(&text).ok()?;
            intent
                .owner_is_dead()
                .then(|| (dir.path().join(&name), intent))
        })
        .collect())
}

/// Removes the records a pre-dump handed to `criu`, which is alive and
/// dumping (its post-dump takes them: the dump went on, and its own waiter
/// resumes what CRIU leaves running). Returns how many.
pub fn release_handed_to(criu: crate::targets::identity::Identity) -> usize {
    let mut released = 0;
    for dir in intent_dirs() {
        for (name, _) in dir.pid_files(".json") {
            let handed = dir
                .read_capped(&name, INTENT_CAP)
                .ok()
                .flatten()
                .and_then(|text| serde_json::from_str::<Intent>(&text).ok())
                .is_some_and(|intent| intent.handed_to(criu));
            if handed && dir.remove(&name).is_ok() {
                released += 1;
            }
        }
    }
    released
}

/// This cudackpt's intents directory, and (as root) every user's that is
/// there and theirs.
fn intent_dirs() -> Vec<SafeDir> {
    let own = SafeDir::open_existing(&dir()).ok().flatten();
    own.into_iter()
        .chain(users_intent_dirs().into_iter().map(|(_, dir)| dir))
        .collect()
}

/// As root, every user's intents directory that is there and theirs, with
/// its user; none for another user.
fn users_intent_dirs() -> Vec<(u32, SafeDir)> {
    if !rustix::process::geteuid().is_root() {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir(user_runtime_base()) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let uid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let dir = SafeDir::open_existing_of(&user_intents(uid), uid).ok()??;
            Some((uid, dir))
        })
        .collect()
}

/// An abandoned record taken over by one `recover`: it holds the record's
/// lock file (`NAME.lock`, flock) until dropped, so a second `recover` at
/// the same time sends nothing to its processes, and it writes the record
/// again as it signals them, so a `recover` killed midway leaves the next
/// one an exact account too.
pub struct Claimed {
    dir: SafeDir,
    name: String,
    /// The flock, released when dropped (or by the kernel when the holder
    /// dies).
    _lock: std::fs::File,
    intent: std::sync::Mutex<Intent>,
}

/// Why a record could not be taken over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotClaimed {
    /// Another cudackpt (this PID, when it said) holds it.
    Busy(Option<i32>),
    /// It is gone (the other `recover` finished it), or cannot be read.
    Gone,
}

/// Takes the record at `path` over, or says who has it.
pub fn claim(path: &std::path::Path) -> Result<Claimed, NotClaimed> {
    use std::os::unix::fs::FileExt;
    let (Some(parent), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str()))
    else {
        return Err(NotClaimed::Gone);
    };
    let opened = match user_of_intents(parent) {
        Some(user) => SafeDir::open_existing_of(parent, user),
        None => SafeDir::open_existing(parent),
    };
    let Ok(Some(dir)) = opened else {
        return Err(NotClaimed::Gone);
    };
    let lock_name = format!("{name}.lock");
    // Made as the directory's user, who must be able to take it too.
    let mut lock = dir
        .as_its_user(|| dir.open_lock_file(&lock_name))
        .map_err(|_| NotClaimed::Gone)?
        .map_err(|_| NotClaimed::Gone)?;
    use rustix::fs::{flock, FlockOperation};
    if flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
        let text = SafeDir::read_open(&mut lock, 32);
        return Err(NotClaimed::Busy(text.trim().parse().ok()));
    }
    let _ = lock.set_len(0);
    let _ = lock.write_all_at(format!("{}\n", std::process::id()).as_bytes(), 0);
    // Read under the lock: the one before may have finished it, or changed
    // it as it signalled.
    let mut intent = match dir.read_capped(name, INTENT_CAP) {
        Ok(Some(text)) => serde_json::from_str::<Intent>(&text).map_err(|_| NotClaimed::Gone)?,
        _ => {
            let _ = dir.remove(&lock_name);
            return Err(NotClaimed::Gone);
        }
    };
    // A user's directory is believed only of that user's processes.
    if let Some(user) = user_of_intents(parent) {
        intent.keep_members_of(user);
    }
    Ok(Claimed {
        dir,
        name: name.to_string(),
        _lock: lock,
        intent: std::sync::Mutex::new(intent),
    })
}

impl Claimed {
    pub fn intent(&self) -> Intent {
        locked(&self.intent).clone()
    }

    /// Removes the record (its processes are back), then its lock file.
    pub fn finish(self) {
        let _ = self.dir.remove(&self.name);
        let _ = self.dir.remove(&format!("{}.lock", self.name));
    }

    fn write(&self) {
        let text = serde_json::to_string_pretty(&*locked(&self.intent)).unwrap_or_default();
        // As the directory's user: a record in a user's directory stays
        // theirs to read.
        let written = self
            .dir
            .as_its_user(|| self.dir.write_atomic(&self.name, text.as_bytes()))
            .and_then(|written| written);
        if let Err(error) = written {
            tracing::warn!(%error, "could not write the recovered record again");
        }
    }
}

impl SignalLedger for Claimed {
    fn begin(&self, pid: i32) {
        if let Some(note) = locked(&self.intent).drain.as_mut() {
            note.begin(pid);
        }
        self.write();
    }

    fn end(&self, pid: i32, delivered: bool) {
        if let Some(note) = locked(&self.intent).drain.as_mut() {
            note.end(pid, delivered);
        }
    }

    fn flush(&self) {
        self.write();
    }
}

/// The abandoned intent that names `pid` (the same process), if any: its
/// path, the PID of its owner, and who that owner was in words.
pub fn holding(pid: i32, abandoned: &[(PathBuf, Intent)]) -> Option<(PathBuf, i32, String)> {
    let now = process::starttime(pid);
    abandoned.iter().find_map(|(path, intent)| {
        intent
            .members
            .iter()
            .any(|m| m.pid == pid && m.started_at(now))
            .then(|| (path.clone(), intent.owner_pid, intent.left_by()))
    })
}

impl Intent {
    /// Who left the record, in words: a cudackpt that died mid-change, or
    /// the CRIU a pre-dump handed it to, which ended without a post-dump.
    pub fn left_by(&self) -> String {
        if self.handed_to_criu {
            format!(
                "suspended for CRIU PID {}, which ended without dumping it (a failed dump)",
                self.owner_pid
            )
        } else {
            format!(
                "being changed by cudackpt PID {}, which died mid-change",
                self.owner_pid
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::vocabulary::timeout::Timeout;

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

    /// A record in the format written before `start` was typed (a string;
    /// an unknown state was written `unknown` or `unknown (7)`) reads back,
    /// and a known state is written as it was.
    #[test]
    fn records_written_with_a_string_start_read_back() {
        let text = r#"{"schema_version":1,"command":"suspend","owner_pid":4242,"owner_starttime":99,
            "members":[
              {"pid":1,"name":"a","starttime":5,"start":"running","plan":["lock","checkpoint"]},
              {"pid":2,"name":"b","starttime":6,"start":"checkpointed","plan":[]},
              {"pid":3,"name":"c","starttime":7,"start":"locked"},
              {"pid":4,"name":"d","starttime":8,"start":"unknown"},
              {"pid":5,"name":"e","starttime":9,"start":"unknown (7)"},
              {"pid":6,"name":"f","starttime":null,"start":"failed"}]}"#;
        let intent: Intent = serde_json::from_str(text).expect("an old record reads");
        let starts: Vec<Option<ProcessState>> =
            intent.members.iter().map(|m| m.start.state()).collect();
        assert_eq!(
            starts,
            [
                Some(ProcessState::Running),
                Some(ProcessState::Checkpointed),
                Some(ProcessState::Locked),
                None,
                None,
                Some(ProcessState::Failed)
            ]
        );
        let written = serde_json::to_string(&intent.members[0]).expect("json");
        assert!(written.contains(r#""start":"running""#), "{written}");
        assert_eq!(
            Start::from(Some(ProcessState::Unknown(7))).to_string(),
            "unknown"
        );
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

    #[test]
    fn the_panic_report_names_the_record_and_the_way_back() {
        let path = std::path::Path::new("/run/cudackpt/intents/42.json");
        let advice = panic_advice(Some(path));
        assert!(advice.contains("/run/cudackpt/intents/42.json"), "{advice}");
        assert!(advice.contains("`cudackpt recover`"), "{advice}");
        assert!(advice.contains("this is a bug"), "{advice}");
        let advice = panic_advice(None);
        assert!(advice.contains("no intent record"), "{advice}");
        assert!(!advice.contains("recover`"), "{advice}");
    }

    /// What each member is owed follows from what it was sent: nothing
    /// after none or two, one after one; the reverse for a member that
    /// showed the marker before (drained for an earlier command).
    #[test]
    fn a_member_is_owed_one_signal_after_an_odd_number() {
        let mut note = DrainNote::new(
            40,
            std::time::Duration::from_secs(2),
            &[(7, false), (9, true)],
        );
        assert_eq!(note.timeout_ms, Some(2000));
        let owes = |note: &DrainNote, pid| note.of(pid).expect("a member").owes_one();
        assert!(!owes(&note, 7) && owes(&note, 9));
        note.begin(7);
        assert_eq!(note.sending, Some(7), "written down before it goes");
        note.end(7, true);
        assert_eq!(note.sending, None);
        assert!(
            owes(&note, 7),
            "asked once: owed the rebuild or the call-off"
        );
        note.begin(9);
        note.end(9, false);
        assert!(owes(&note, 9), "a send that failed counts for nothing");
        note.begin(9);
        note.end(9, true);
        assert!(!owes(&note, 9), "drained before, rebuilt now");
        note.begin(7);
        note.end(7, true);
        assert!(!owes(&note, 7), "asked twice: balanced");
        // A record without the counts reads back, and says it has none.
        let old: DrainNote =
            serde_json::from_str(r#"{"signal":40,"phase":"drained"}"#).expect("an old note");
        assert_eq!(old.signals, None);
        assert_eq!(old.of(7), None);
    }

    #[test]
    fn the_plan_recorded_is_the_steps_from_the_start_state() {
        let suspend = Operation::Suspend {
            timeout: Timeout::NONE,
        };
        assert_eq!(
            planned_steps(&suspend, Some(ProcessState::Running)),
            ["lock", "checkpoint"]
        );
        assert_eq!(
            planned_steps(&suspend, Some(ProcessState::Locked)),
            ["checkpoint"]
        );
        assert!(planned_steps(&suspend, Some(ProcessState::Checkpointed)).is_empty());
        assert_eq!(
            planned_steps(&Operation::Resume, Some(ProcessState::Checkpointed)),
            ["restore", "unlock"]
        );
    }
}
