//! The drain handshake, version 1, as data (cudackpt(1), DRAIN
//! PROTOCOL): the signal that asks, the thread name that answers, and how
//! to read both from /proc. Pure: nothing here reads or sends anything.
//!
//! The whole protocol, as a target implements it:
//!
//! 1. Catch the drain signal (default 40, `SIGRTMIN+6` under glibc) with a
//!    handler that counts: cudackpt sends nothing to a process whose
//!    `SigCgt` does not show it caught.
//! 2. At a safe point (between steps), when the count since the last
//!    rebuild is odd, release what the driver cannot restore (NCCL
//!    communicators, CUDA IPC mappings), then name one thread
//!    [`MARKER`]: that is the acknowledgement.
//! 3. Wait for the count to change: the next signal asks for the rebuild
//!    (after the resume, or when the drain is called off). Rebuild, prove
//!    every rebuilt group with a collective, take the count as the new
//!    baseline, and drop the marker. A rebuild that fails renames the
//!    marker thread [`FAIL_MARKER`] instead (and keeps it): cudackpt
//!    reports the process `rebuild_failed`, never `rebuilt`. It may say
//!    why in the name of a memfd it keeps open ([`ERROR_MEMFD`]): cudackpt
//!    quotes the first [`ERROR_CHARS`] characters.
//!
//! A signal that arrives before the safe point calls the request off (the
//! count is even again): cudackpt sends one when it gives up on a group.
//!
//! Optional: a process that also catches the [`DrainSignal::dump_notice`]
//! signal is sent it just before the request when the drain serves a
//! dump (CRIU's pre-dump): it may release then what only a dump needs
//! gone (the Python client: torch.compile's compile-worker pool, which
//! CRIU cannot dump and a suspend keeps), and forget the notice at its
//! next rebuild. It changes no count.
//! Thread names and signals cross PID and mount namespaces unchanged, and
//! a root cudackpt trusts no file or path of the target's to read them.
//!
//! This module is the protocol's one source: the man page's DRAIN
//! PROTOCOL is filled in from it, and a test (`tests/cli/protocol_copies.rs`)
//! fails when the Python client's or the C header's copies say otherwise,
//! or when the Python client reads a signal otherwise.

use std::fmt;

/// The protocol's version; the marker names it.
pub const VERSION: u32 = 1;

/// The name a drained process gives one of its threads (15 bytes, the most
/// a Linux thread name holds).
pub const MARKER: &str = "cudackpt-drain1";

/// The default request: real-time signal 40 (`SIGRTMIN+6` under glibc),
/// which no kernel, terminal or batch system sends on its own (SIGUSR1 and
/// SIGUSR2 are: SLURM's `--signal`, Lightning's requeue, submitit).
pub const DEFAULT_SIGNAL: DrainSignal = DrainSignal(40);

/// The first real-time signal under glibc, for names like `RTMIN+6`.
pub const RTMIN: i32 = 34;

/// The last real-time signal, SIGRTMAX: the highest signal number on
/// Linux.
pub const RTMAX: i32 = 64;

/// Why a text or a number is no drain signal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSignal {
    /// Neither a number nor a real-time signal's name.
    #[error("{0:?} is not a real-time signal: the drain signal must be one of SIGRTMIN..SIGRTMAX ({min}..{max}, e.g. 40 or RTMIN+6), which no program reads as stop or interrupt", min = RTMIN, max = RTMAX)]
    NotRealTime(String),
    /// `RTMIN` or `RTMAX` with an offset that is not a number.
    #[error("{0:?}: write the offset as RTMIN+N or RTMAX-N")]
    Offset(String),
    /// 32 or 33, which glibc keeps for its threads.
    #[error("signals 32 and 33 are glibc's own; the drain signal must be one of SIGRTMIN..SIGRTMAX ({min}..{max})", min = RTMIN, max = RTMAX)]
    GlibcOwn,
    /// Any other number outside SIGRTMIN..SIGRTMAX.
    #[error("signal {0} is not a real-time signal: the drain signal must be one of SIGRTMIN..SIGRTMAX ({min}..{max}), which no program reads as stop or interrupt", min = RTMIN, max = RTMAX)]
    OutOfRange(i32),
    /// A number out of range, as written.
    #[error("{text:?}: {why}")]
    Written {
        /// The text given.
        text: String,
        /// Why its number is no drain signal.
        why: Box<InvalidSignal>,
    },
}

/// The signal that asks a process to drain, and to rebuild.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainSignal(i32);

impl DrainSignal {
    /// Parses `40`, `RTMIN+6`, `SIGRTMIN+6`, `RTMAX-2` (any case): a
    /// real-time signal, SIGRTMIN (34 under glibc) to SIGRTMAX (64).
    ///
    /// Nothing else, because the drain sends its signal to every process of
    /// a group that catches it, twice (the request, then the rebuild or the
    /// call-off), and a process may be another user's: a program reads
    /// SIGTERM or SIGINT as "stop" (Python raises KeyboardInterrupt),
    /// SIGUSR1/SIGUSR2 as a batch system's warning, and no standard signal
    /// is free of such a meaning. Real-time signals have none by default.
    pub fn parse(text: &str) -> Result<DrainSignal, InvalidSignal> {
        let upper = text.trim().to_ascii_uppercase();
        let name = upper.strip_prefix("SIG").unwrap_or(&upper);
        let number = if let Ok(n) = name.parse::<i32>() {
            n
        } else if let Some(offset) = name.strip_prefix("RTMIN") {
            RTMIN + parse_offset(offset, text)?
        } else if let Some(offset) = name.strip_prefix("RTMAX") {
            RTMAX + parse_offset(offset, text)?
        } else {
            return Err(InvalidSignal::NotRealTime(text.to_string()));
        };
        DrainSignal::from_number(number).map_err(|why| InvalidSignal::Written {
            text: text.to_string(),
            why: Box::new(why),
        })
    }

    /// A real-time signal by number (34 to 64).
    pub fn from_number(number: i32) -> Result<DrainSignal, InvalidSignal> {
        match number {
            RTMIN..=RTMAX => Ok(DrainSignal(number)),
            32 | 33 => Err(InvalidSignal::GlibcOwn),
            _ => Err(InvalidSignal::OutOfRange(number)),
        }
    }

    /// The signal's number.
    pub fn number(self) -> i32 {
        self.0
    }

    /// The dump notice that goes with this drain signal: the real-time
    /// signal above it (below it for SIGRTMAX), sent only to a process
    /// whose `SigCgt` shows it caught, so that one that does not know it
    /// is never sent it.
    pub fn dump_notice(self) -> DrainSignal {
        if self.0 < RTMAX {
            DrainSignal(self.0 + 1)
        } else {
            DrainSignal(self.0 - 1)
        }
    }

    /// Whether a process whose `SigCgt` mask is `caught` catches it.
    pub fn caught_by(self, caught: u64) -> bool {
        self.in_mask(caught)
    }

    /// Whether a signal mask of /proc/PID/status (bit N-1 for signal N:
    /// `SigCgt`, `SigPnd`, `ShdPnd`) holds it.
    pub fn in_mask(self, mask: u64) -> bool {
        mask >> (self.0 - 1) & 1 == 1
    }
}

/// `40 (SIGRTMIN+6)`.
impl fmt::Display for DrainSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (SIGRTMIN+{})", self.0, self.0 - RTMIN)
    }
}

fn parse_offset(offset: &str, text: &str) -> Result<i32, InvalidSignal> {
    if offset.is_empty() {
        return Ok(0);
    }
    offset
        .parse::<i32>()
        .map_err(|_| InvalidSignal::Offset(text.to_string()))
}

/// Whether a process with these threads (id, name) shows the marker.
pub fn shows_marker(threads: &[(i32, String)]) -> bool {
    threads.iter().any(|(_, name)| name == MARKER)
}

/// The name a process gives the marker thread when its rebuild failed.
pub const FAIL_MARKER: &str = "cudackpt-fail1";

/// Whether these threads say the rebuild failed (pure).
pub fn shows_failure(threads: &[(i32, String)]) -> bool {
    threads.iter().any(|(_, name)| name == FAIL_MARKER)
}

/// The name a process whose rebuild failed may give a memfd it keeps
/// open, followed by why (`memfd_create("cudackpt-error:…")`): a thread
/// name holds 15 bytes, a memfd's name 249, and its link
/// (`/proc/PID/fd/N` → `/memfd:NAME (deleted)`) is read without opening
/// or following anything the process chose.
pub const ERROR_MEMFD: &str = "cudackpt-error:";

/// The most characters of a rank's own error that cudackpt quotes.
pub const ERROR_CHARS: usize = 200;

/// Whether a descriptor's link is the error memfd (pure).
pub fn is_error_memfd(link: &[u8]) -> bool {
    link.strip_prefix(b"/memfd:")
        .is_some_and(|name| name.starts_with(ERROR_MEMFD.as_bytes()))
}

/// The error a rank stated in its error memfd's link, lossily decoded,
/// cut to [`ERROR_CHARS`] characters and trimmed; `None` when it is not
/// the memfd or says nothing (pure). Not yet printable: a terminal's
/// renderer escapes it, JSON's encoder escapes it itself.
pub fn stated_error(link: &[u8]) -> Option<String> {
    let name = link
        .strip_prefix(b"/memfd:")?
        .strip_prefix(ERROR_MEMFD.as_bytes())?;
    let name = name.strip_suffix(b" (deleted)").unwrap_or(name);
    let text: String = String::from_utf8_lossy(name)
        .chars()
        .take(ERROR_CHARS)
        .collect();
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rank_s_error_is_read_from_its_memfd_s_link_and_cut() {
        let link = b"/memfd:cudackpt-error:RuntimeError: connection reset (deleted)";
        assert!(is_error_memfd(link));
        assert_eq!(
            stated_error(link).as_deref(),
            Some("RuntimeError: connection reset")
        );
        assert!(!is_error_memfd(b"/memfd:other (deleted)"));
        assert!(!is_error_memfd(b"/tmp/cudackpt-error:x"));
        assert_eq!(stated_error(b"/memfd:cudackpt-error: (deleted)"), None);
        assert_eq!(stated_error(b"/memfd:torch-shm (deleted)"), None);
        let long = format!("/memfd:{ERROR_MEMFD}{} (deleted)", "x".repeat(300));
        assert_eq!(stated_error(long.as_bytes()).unwrap().len(), ERROR_CHARS);
        let bad = b"/memfd:cudackpt-error:bad \xff\x1b[2J (deleted)";
        assert_eq!(stated_error(bad).as_deref(), Some("bad \u{fffd}\u{1b}[2J"));
    }

    #[test]
    fn signals_parse_by_number_and_real_time_offset() {
        for (text, number) in [
            ("40", 40),
            ("RTMIN+6", 40),
            ("sigrtmin+6", 40),
            ("SIGRTMIN", 34),
            ("RTMAX-2", 62),
            ("64", 64),
            ("34", 34),
        ] {
            assert_eq!(
                DrainSignal::parse(text).map(DrainSignal::number),
                Ok(number),
                "{text}"
            );
        }
    }

    /// The drain signals every process of a group that catches it, twice:
    /// a signal a program reads as stop, interrupt or a batch system's
    /// warning would become a kill of another user's job.
    #[test]
    fn only_real_time_signals_can_ask_for_a_drain() {
        for (bad, why) in [
            ("TERM", "not a real-time signal"),
            ("SIGINT", "not a real-time signal"),
            ("USR2", "not a real-time signal"),
            ("usr1", "not a real-time signal"),
            ("HUP", "not a real-time signal"),
            ("KILL", "not a real-time signal"),
            ("15", "signal 15 is not a real-time signal"),
            ("2", "signal 2 is not a real-time signal"),
            ("9", "signal 9 is not a real-time signal"),
            ("31", "signal 31 is not a real-time signal"),
            ("33", "glibc's own"),
            ("RTMIN-1", "glibc's own"),
            ("65", "signal 65 is not"),
            ("RTMAX+1", "signal 65 is not"),
            ("0", "signal 0 is not"),
            ("-40", "signal -40 is not"),
            ("NOPE", "not a real-time signal"),
            ("RTMIN+x", "RTMIN+N"),
        ] {
            let error = DrainSignal::parse(bad).expect_err(bad).to_string();
            assert!(
                error.contains(why) && error.contains(&format!("{bad:?}")),
                "{bad}: {error}"
            );
            assert!(
                error.contains("SIGRTMIN") || error.contains("RTMIN+N"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn the_caught_mask_is_read_bit_n_minus_one_for_signal_n() {
        // A Python process that caught SIGINT (2) and signal 40.
        let caught = (1u64 << 1) | (1u64 << 39);
        assert!(DEFAULT_SIGNAL.caught_by(caught));
        assert!(!DrainSignal(41).caught_by(caught));
        assert!(!DEFAULT_SIGNAL.caught_by(0));
        assert!(DrainSignal(64).caught_by(1u64 << 63));
    }

    #[test]
    fn the_dump_notice_is_the_real_time_signal_next_to_the_drain_s() {
        assert_eq!(DEFAULT_SIGNAL.dump_notice(), DrainSignal(41));
        assert_eq!(DrainSignal(34).dump_notice(), DrainSignal(35));
        assert_eq!(DrainSignal(64).dump_notice(), DrainSignal(63));
        for n in RTMIN..=RTMAX {
            let notice = DrainSignal(n).dump_notice().number();
            assert!((RTMIN..=RTMAX).contains(&notice) && notice != n);
        }
    }

    #[test]
    fn signals_say_their_number_and_name() {
        assert_eq!(DEFAULT_SIGNAL.to_string(), "40 (SIGRTMIN+6)");
        assert_eq!(DrainSignal(64).to_string(), "64 (SIGRTMIN+30)");
    }

    #[test]
    fn the_marker_fits_a_thread_name_and_names_the_version() {
        assert!(MARKER.len() <= 15, "{MARKER}");
        assert!(MARKER.ends_with(&VERSION.to_string()));
        let threads = vec![(7, "python3".to_string()), (9, MARKER.to_string())];
        assert!(shows_marker(&threads));
        assert!(!shows_marker(&threads[..1]));
    }
}
