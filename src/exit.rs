//! Exit statuses: the table documented in the man page and the guide (docs/guide/json.md), and the
//! one place that decides which number a run exits with; and where the
//! last words of a cudackpt that must stop at once go.

use std::sync::OnceLock;

/// Where the last words go: set once by the program.
static LAST_WORDS: OnceLock<fn(&str)> = OnceLock::new();

/// Names where the last words of a cudackpt that stops at once (a second
/// signal mid-group, a panic) go: the command sets stderr, through the
/// output room, which the rooms that must speak then cannot call. A
/// program using the library sets nothing, and nothing is written to its
/// stderr. A second call changes nothing.
pub fn set_last_words(say: fn(&str)) {
    let _ = LAST_WORDS.set(say);
}

/// Says `text` where [`set_last_words`] named, if anywhere. Must not panic:
/// it runs in a panic hook and in a signal watcher about to exit.
pub fn last_words(text: &str) {
    if let Some(say) = LAST_WORDS.get() {
        say(text);
    }
}

/// How cudackpt exits. The numbers are a stable interface for scripts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
///
/// Each variant's [`meaning`](ExitStatus::meaning) is the man page's text.
pub enum ExitStatus {
    /// 0: everything asked was done.
    Success = 0,
    /// 1: a driver error not covered below.
    Failed = 1,
    /// 2: bad arguments.
    Usage = 2,
    /// 3: a lock timed out; the process still runs.
    LockTimeout = 3,
    /// 4: the wrong state for the operation, or a stopped process.
    WrongState = 4,
    /// 5: no such process, a thread, not a CUDA process, or killed.
    NoProcess = 5,
    /// 6: permission denied, or a file cudackpt will not trust.
    PermissionDenied = 6,
    /// 7: no usable CUDA driver.
    DriverUnavailable = 7,
    /// 8: refused before any change by a pre-flight.
    PreflightRefused = 8,
    /// 9: a step failed and so did undoing it.
    RollbackFailed = 9,
    /// 10: another cudackpt is changing a process, or left it mid-change.
    InUse = 10,
    /// 11: a second signal ended cudackpt mid-change.
    Abandoned = 11,
    /// 12: a process did not acknowledge a drain, or a rebuild, in time.
    DrainTimeout = 12,
    /// 13: a process asked to rebuild said its rebuild failed, or exited
    /// during it.
    RebuildFailed = 13,
    /// 14: `wait` timed out: not every process reached the state.
    WaitTimeout = 14,
    /// 129: SIGHUP arrived; everything was rolled back (128 + its number,
    /// as a shell reports a process a signal ended).
    Hangup = 129,
    /// 130: SIGINT arrived; everything was rolled back.
    Interrupted = 130,
    /// 131: SIGQUIT arrived; everything was rolled back.
    Quit = 131,
    /// 138: SIGUSR1 arrived (a batch system's warning); rolled back.
    User1 = 138,
    /// 140: SIGUSR2 arrived; everything was rolled back.
    User2 = 140,
    /// 142: SIGALRM arrived; everything was rolled back.
    Alarm = 142,
    /// 143: SIGTERM arrived; everything was rolled back.
    Terminated = 143,
    /// 152: SIGXCPU arrived (a CPU time limit); everything was rolled back.
    CpuLimit = 152,
    /// 153: SIGXFSZ arrived (a file size limit); everything was rolled back.
    FileSizeLimit = 153,
    /// 158: SIGPWR arrived (power failing); everything was rolled back.
    PowerFailing = 158,
}

impl ExitStatus {
    /// The number the process exits with.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The status of a command that a signal stopped and that rolled
    /// everything back: 128 + the signal's number, as a shell reports a
    /// process the signal ended (SIGTERM 143); 130 for a signal cudackpt
    /// does not catch (none reaches here).
    pub fn of_signal(signal: i32) -> ExitStatus {
        ALL.iter()
            .copied()
            .find(|status| status.signal() == Some(signal))
            .unwrap_or(ExitStatus::Interrupted)
    }

    /// The signal a status says stopped the command, if it says one.
    pub fn signal(self) -> Option<i32> {
        (self.code() > SIGNAL_BASE).then(|| i32::from(self.code() - SIGNAL_BASE))
    }

    /// What it means in a few words, as `--help` lists it: a signal's
    /// status is named by its signal.
    pub fn brief(self) -> &'static str {
        match self {
            ExitStatus::Success => "success",
            ExitStatus::Failed => "failed",
            ExitStatus::Usage => "usage",
            ExitStatus::LockTimeout => "lock timed out",
            ExitStatus::WrongState => "wrong state",
            ExitStatus::NoProcess => "no such (CUDA) process",
            ExitStatus::PermissionDenied => "permission denied or untrusted path",
            ExitStatus::DriverUnavailable => "driver unavailable",
            ExitStatus::PreflightRefused => "refused by a pre-flight",
            ExitStatus::RollbackFailed => "rollback failed",
            ExitStatus::InUse => "in use by another cudackpt",
            ExitStatus::Abandoned => "stopped by a second signal",
            ExitStatus::DrainTimeout => "a drain not acknowledged in time",
            ExitStatus::RebuildFailed => "a rebuild failed",
            ExitStatus::WaitTimeout => "wait timed out",
            ExitStatus::Hangup => "SIGHUP",
            ExitStatus::Interrupted => "SIGINT",
            ExitStatus::Quit => "SIGQUIT",
            ExitStatus::User1 => "SIGUSR1",
            ExitStatus::User2 => "SIGUSR2",
            ExitStatus::Alarm => "SIGALRM",
            ExitStatus::Terminated => "SIGTERM",
            ExitStatus::CpuLimit => "SIGXCPU",
            ExitStatus::FileSizeLimit => "SIGXFSZ",
            ExitStatus::PowerFailing => "SIGPWR",
        }
    }

    /// The exit statuses as `--help` lists them, every one: cudackpt's
    /// own by number, then those of the signals, each rolled back.
    pub fn summary() -> String {
        let (signals, own): (Vec<ExitStatus>, Vec<ExitStatus>) =
            ALL.iter().partition(|status| status.signal().is_some());
        let listed = |statuses: &[ExitStatus]| {
            statuses
                .iter()
                .map(|status| format!("{} {}", status.code(), status.brief()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "Exit status: {}; 128 + N when signal N arrived and everything was rolled back ({}).",
            listed(&own),
            listed(&signals)
        )
    }

    /// What it means, as the man page says.
    pub fn meaning(self) -> &'static str {
        match self {
            ExitStatus::Success => "success",
            ExitStatus::Failed => "the operation failed (a driver error not covered below), or its result could not be written",
            ExitStatus::Usage => "usage error: bad arguments (malformed PID, map, timeout or state)",
            ExitStatus::LockTimeout => "lock timed out; the process is still running",
            ExitStatus::WrongState => "the process is in the wrong state for this operation (or stopped, so the driver cannot answer)",
            ExitStatus::NoProcess => "no such process, a thread rather than a process, not a CUDA process, or killed during the command (oom_killed)",
            ExitStatus::PermissionDenied => "permission denied (needs root or CAP_SYS_PTRACE; see ptrace_scope), or a file or directory cudackpt will not trust as root (another user's, writable by others, a link)",
            ExitStatus::DriverUnavailable => "driver unavailable: libcuda not found, or too old for the checkpoint API",
            ExitStatus::PreflightRefused => "refused before any state changed: a checkpoint the driver could never restore (CUDA IPC, NCCL ranks, also after a drain), or that host or cgroup memory cannot hold; a tree CRIU could not dump after its pre-dump (a GPU device mapping without CUDA state, an io_uring ring); a process that cannot drain (it does not catch the drain signal); an invalid GPU map, or not enough GPU memory to restore",
            ExitStatus::RollbackFailed => "a step failed and so did undoing it: some processes are not where they started; the report (rollback_error) says where each one is",
            ExitStatus::InUse => "another cudackpt is changing one of the processes right now, or one that died left them mid-change (run cudackpt recover); nothing was done",
            ExitStatus::Abandoned => "a second signal ended cudackpt in the middle of a change: the processes it names on stderr were left where it says (bring them back with cudackpt recover)",
            ExitStatus::DrainTimeout => "a process asked to drain (--drain) did not acknowledge in time: every process was asked to rebuild and nothing was locked; or one asked to rebuild still showed the drain marker at the end of the wait (it is running; nothing was rolled back)",
            ExitStatus::RebuildFailed => "a process asked to rebuild after a drain said that its rebuild failed (it names a thread cudackpt-fail1: a process group that does not work, and the rank's own log says why), or exited during its rebuild; nothing was rolled back",
            ExitStatus::WaitTimeout => "wait timed out: not every process reached the state asked for within --timeout; nothing was changed",
            ExitStatus::Hangup => "SIGHUP arrived (128 + 1): the processes were rolled back to where they started",
            ExitStatus::Interrupted => "SIGINT arrived (128 + 2): the processes were rolled back to where they started",
            ExitStatus::Quit => "SIGQUIT arrived (128 + 3): the processes were rolled back to where they started",
            ExitStatus::User1 => "SIGUSR1 arrived (128 + 10; a batch system's warning): the processes were rolled back to where they started",
            ExitStatus::User2 => "SIGUSR2 arrived (128 + 12): the processes were rolled back to where they started",
            ExitStatus::Alarm => "SIGALRM arrived (128 + 14): the processes were rolled back to where they started",
            ExitStatus::Terminated => "SIGTERM arrived (128 + 15): the processes were rolled back to where they started",
            ExitStatus::CpuLimit => "SIGXCPU arrived (128 + 24; a CPU time limit): the processes were rolled back to where they started",
            ExitStatus::FileSizeLimit => "SIGXFSZ arrived (128 + 25; a file size limit): the processes were rolled back to where they started",
            ExitStatus::PowerFailing => "SIGPWR arrived (128 + 30; power failing): the processes were rolled back to where they started",
        }
    }
}

/// Statuses above this say the signal that stopped the command (128 + its
/// number, as a shell says it); the others are cudackpt's own.
const SIGNAL_BASE: u8 = 128;

/// Every status, in order, for documentation.
pub const ALL: [ExitStatus; 25] = [
    ExitStatus::Success,
    ExitStatus::Failed,
    ExitStatus::Usage,
    ExitStatus::LockTimeout,
    ExitStatus::WrongState,
    ExitStatus::NoProcess,
    ExitStatus::PermissionDenied,
    ExitStatus::DriverUnavailable,
    ExitStatus::PreflightRefused,
    ExitStatus::RollbackFailed,
    ExitStatus::InUse,
    ExitStatus::Abandoned,
    ExitStatus::DrainTimeout,
    ExitStatus::RebuildFailed,
    ExitStatus::WaitTimeout,
    ExitStatus::Hangup,
    ExitStatus::Interrupted,
    ExitStatus::Quit,
    ExitStatus::User1,
    ExitStatus::User2,
    ExitStatus::Alarm,
    ExitStatus::Terminated,
    ExitStatus::CpuLimit,
    ExitStatus::FileSizeLimit,
    ExitStatus::PowerFailing,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_the_documented_interface() {
        let codes: Vec<u8> = ALL.iter().map(|s| s.code()).collect();
        assert_eq!(
            codes,
            vec![
                0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 129, 130, 131, 138, 140, 142,
                143, 152, 153, 158
            ]
        );
    }

    #[test]
    fn a_signal_exits_128_plus_its_number_and_says_which() {
        for (signal, code) in [
            (1, 129),
            (2, 130),
            (3, 131),
            (10, 138),
            (12, 140),
            (14, 142),
            (15, 143),
            (24, 152),
            (25, 153),
            (30, 158),
        ] {
            let status = ExitStatus::of_signal(signal);
            assert_eq!(status.code(), code, "signal {signal}");
            assert_eq!(status.signal(), Some(signal));
        }
        assert_eq!(ExitStatus::of_signal(9), ExitStatus::Interrupted);
        assert_eq!(ExitStatus::Abandoned.signal(), None);
    }
}
