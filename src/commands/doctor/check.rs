//! One check of `doctor`: its name, what it found, and what to do.

use crate::exit::ExitStatus;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    Warn,
    Fail,
    Info,
}

#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
    pub hint: Option<String>,
    /// The exit status a failure of this check means.
    pub exit: ExitStatus,
}

impl Check {
    pub(super) fn new(name: &'static str, status: Status, detail: impl Into<String>) -> Check {
        Check {
            name,
            status,
            detail: detail.into(),
            hint: None,
            exit: ExitStatus::Failed,
        }
    }

    pub(super) fn hint(mut self, hint: impl Into<String>) -> Check {
        self.hint = Some(hint.into());
        self
    }

    pub(super) fn exit(mut self, exit: ExitStatus) -> Check {
        self.exit = exit;
        self
    }
}
