//! The intent record's format: what a command set out to do
//! ([`Intent`]), each process of its group and where it started
//! ([`RecordedProcess`], [`Start`]), the drain's ledger
//! (`crate::drain::ledger`), and who left a record.

use serde::{Deserialize, Serialize};

use crate::drain::ledger::DrainNote;
use crate::driver::ProcessState;
use crate::targets::process;
use crate::vocabulary::plan::{self, Operation, Plan};

/// An intent is a few KiB.
pub(super) const INTENT_CAP: u64 = 1 << 20;

/// One process of a group, and the state it started in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedProcess {
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
    pub members: Vec<RecordedProcess>,
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

impl RecordedProcess {
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

/// A process's owner (real uid), from /proc.
pub(super) fn owner_of(pid: i32) -> Option<u32> {
    process::read_status(pid)
        .ok()
        .flatten()
        .map(|status| status.uids[0])
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
    pub(super) fn keep_members_of(&mut self, user: u32) {
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
        members: Vec<RecordedProcess>,
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
    use crate::vocabulary::timeout::Timeout;

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
