//! The drain handshake, version 1, as data (SPEC 11; cudackpt(1), DRAIN
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
//!    (after the resume, or when the drain is called off). Rebuild, take
//!    the count as the new baseline, and drop the marker.
//!
//! A signal that arrives before the safe point calls the request off (the
//! count is even again): cudackpt sends one when it gives up on a group.
//! Thread names and signals cross PID and mount namespaces unchanged, and
//! a root cudackpt trusts no file or path of the target's to read them.

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
const GLIBC_RTMIN: i32 = 34;

/// The highest signal number on Linux.
const SIGNAL_MAX: i32 = 64;

/// Standard signals by name; only those a process can catch.
const NAMED: [(&str, i32); 28] = [
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ILL", 4),
    ("TRAP", 5),
    ("ABRT", 6),
    ("BUS", 7),
    ("FPE", 8),
    ("USR1", 10),
    ("SEGV", 11),
    ("USR2", 12),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("STKFLT", 16),
    ("CHLD", 17),
    ("CONT", 18),
    ("TSTP", 20),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", 23),
    ("XCPU", 24),
    ("XFSZ", 25),
    ("VTALRM", 26),
    ("PROF", 27),
    ("WINCH", 28),
    ("IO", 29),
    ("PWR", 30),
];

/// The signal that asks a process to drain, and to rebuild.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainSignal(i32);

impl DrainSignal {
    /// Parses `40`, `RTMIN+6`, `SIGRTMIN+6`, `RTMAX-2`, `USR2`, `SIGUSR2`
    /// (any case). Refuses what no process can catch (KILL, STOP) and
    /// numbers glibc keeps for itself (32, 33).
    pub fn parse(text: &str) -> Result<DrainSignal, String> {
        let upper = text.trim().to_ascii_uppercase();
        let name = upper.strip_prefix("SIG").unwrap_or(&upper);
        let number = if let Ok(n) = name.parse::<i32>() {
            n
        } else if let Some(offset) = name.strip_prefix("RTMIN") {
            GLIBC_RTMIN + parse_offset(offset, text)?
        } else if let Some(offset) = name.strip_prefix("RTMAX") {
            SIGNAL_MAX + parse_offset(offset, text)?
        } else if name == "KILL" || name == "STOP" {
            return Err(format!(
                "{text:?} cannot be caught, so no process could answer it"
            ));
        } else {
            NAMED
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, number)| *number)
                .ok_or_else(|| format!("{text:?} is not a signal (e.g. 40, RTMIN+6 or USR2)"))?
        };
        DrainSignal::from_number(number).map_err(|why| format!("{text:?}: {why}"))
    }

    /// A signal by number, if a process can catch it.
    pub fn from_number(number: i32) -> Result<DrainSignal, String> {
        match number {
            9 | 19 => Err("SIGKILL and SIGSTOP cannot be caught".to_string()),
            32 | 33 => Err("signals 32 and 33 are glibc's own".to_string()),
            1..=SIGNAL_MAX => Ok(DrainSignal(number)),
            _ => Err(format!("signals are numbered 1 to {SIGNAL_MAX}")),
        }
    }

    pub fn number(self) -> i32 {
        self.0
    }

    /// Whether a process whose `SigCgt` mask is `caught` catches it.
    pub fn caught_by(self, caught: u64) -> bool {
        caught >> (self.0 - 1) & 1 == 1
    }
}

/// `40 (SIGRTMIN+6)`, `12 (SIGUSR2)`.
impl fmt::Display for DrainSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let number = self.0;
        match NAMED.iter().find(|(_, n)| *n == number) {
            Some((name, _)) => write!(f, "{number} (SIG{name})"),
            None if number >= GLIBC_RTMIN => {
                write!(f, "{number} (SIGRTMIN+{})", number - GLIBC_RTMIN)
            }
            None => write!(f, "{number}"),
        }
    }
}

fn parse_offset(offset: &str, text: &str) -> Result<i32, String> {
    if offset.is_empty() {
        return Ok(0);
    }
    offset
        .parse::<i32>()
        .map_err(|_| format!("{text:?}: write the offset as RTMIN+N or RTMAX-N"))
}

/// Whether a process with these threads (id, name) shows the marker.
pub fn shows_marker(threads: &[(i32, String)]) -> bool {
    threads.iter().any(|(_, name)| name == MARKER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_parse_by_number_name_and_real_time_offset() {
        for (text, number) in [
            ("40", 40),
            ("RTMIN+6", 40),
            ("sigrtmin+6", 40),
            ("SIGRTMIN", 34),
            ("RTMAX-2", 62),
            ("USR2", 12),
            ("SIGUSR2", 12),
            ("urg", 23),
        ] {
            assert_eq!(
                DrainSignal::parse(text).map(DrainSignal::number),
                Ok(number),
                "{text}"
            );
        }
        for (bad, why) in [
            ("KILL", "cannot be caught"),
            ("9", "cannot be caught"),
            ("SIGSTOP", "cannot be caught"),
            ("33", "glibc's own"),
            ("65", "1 to 64"),
            ("0", "1 to 64"),
            ("NOPE", "not a signal"),
            ("RTMIN+x", "RTMIN+N"),
        ] {
            let error = DrainSignal::parse(bad).expect_err(bad);
            assert!(
                error.contains(why) && error.contains(&format!("{bad:?}")),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn the_caught_mask_is_read_bit_n_minus_one_for_signal_n() {
        // A Python process that caught SIGINT (2) and signal 40.
        let caught = (1u64 << 1) | (1u64 << 39);
        assert!(DEFAULT_SIGNAL.caught_by(caught));
        assert!(!DrainSignal(12).caught_by(caught));
        assert!(DrainSignal(2).caught_by(caught));
        assert!(!DEFAULT_SIGNAL.caught_by(0));
        assert!(DrainSignal(64).caught_by(1u64 << 63));
    }

    #[test]
    fn signals_say_their_number_and_name() {
        assert_eq!(DEFAULT_SIGNAL.to_string(), "40 (SIGRTMIN+6)");
        assert_eq!(DrainSignal(12).to_string(), "12 (SIGUSR2)");
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
