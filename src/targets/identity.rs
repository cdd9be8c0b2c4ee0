//! A process as cudackpt hands it from one invocation to another (CRIU's
//! pre-dump to its post-dump, a hook to its detached waiter): its PID and
//! its start time (field 22 of /proc/PID/stat), written `PID@START`, so a
//! PID that names another process by then is never acted on.

use std::fmt;

use crate::targets::process::{self, parse_pid, InvalidPid};

/// Why a text names no process as `PID@START`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidIdentity {
    #[error(transparent)]
    Pid(#[from] InvalidPid),
    #[error("invalid process {0:?}: write PID@START, START the start time in clock ticks")]
    StartTime(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Identity {
    pub pid: i32,
    /// `None` where it could not be read: then the PID alone is known.
    pub starttime: Option<u64>,
}

impl Identity {
    /// The process with this PID now.
    pub fn of(pid: i32) -> Identity {
        Identity {
            pid,
            starttime: process::starttime(pid),
        }
    }

    /// `PID@START` or a bare `PID` (pure).
    pub fn parse(text: &str) -> Result<Identity, InvalidIdentity> {
        let (pid, starttime) = match text.split_once('@') {
            Some((pid, start)) => {
                let start = start
                    .parse::<u64>()
                    .map_err(|_| InvalidIdentity::StartTime(text.to_string()))?;
                (pid, Some(start))
            }
            None => (text, None),
        };
        Ok(Identity {
            pid: parse_pid(pid)?,
            starttime,
        })
    }

    /// Whether the process with this PID now is this one: alive, and (when
    /// the start time is known) started then.
    pub fn is_still_there(self) -> bool {
        let now = process::starttime(self.pid);
        now.is_some() && (self.starttime.is_none() || self.starttime == now)
    }
}

/// `PID@START`, or `PID` when the start time is unknown.
impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.starttime {
            Some(start) => write!(f, "{}@{start}", self.pid),
            None => write!(f, "{}", self.pid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_read_back_as_written() {
        for identity in [
            Identity {
                pid: 42,
                starttime: Some(98765),
            },
            Identity {
                pid: 7,
                starttime: None,
            },
        ] {
            assert_eq!(Identity::parse(&identity.to_string()), Ok(identity));
        }
        assert!(Identity::parse("42@x").is_err());
        assert!(Identity::parse("0@5").is_err());
        assert!(Identity::parse("@5").is_err());
    }

    #[test]
    fn this_process_is_itself_and_a_later_start_is_not() {
        let me = Identity::of(std::process::id() as i32);
        assert!(me.is_still_there());
        let later = Identity {
            starttime: me.starttime.map(|s| s + 1),
            ..me
        };
        assert!(!later.is_still_there());
    }
}
