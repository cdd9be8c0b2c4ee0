//! Timeout values on the command line: a plain integer is milliseconds
//! (NVIDIA's unit), anything else a duration with a unit (`500ms`, `5s`,
//! `2m`, `1m30s`). 0 means no timeout, as it does for the driver.

use std::fmt;
use std::time::Duration;

/// A timeout in whole milliseconds, 0 meaning "wait as long as it takes".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Timeout {
    millis: u32,
}

impl Timeout {
    pub const NONE: Timeout = Timeout { millis: 0 };

    pub const fn from_millis(millis: u32) -> Timeout {
        Timeout { millis }
    }

    /// A limit of `limit`, never "no limit": rounded up to a millisecond,
    /// at least one, at most `u32::MAX` (about 49 days).
    pub fn from_duration(limit: Duration) -> Timeout {
        let millis = limit.as_nanos().div_ceil(1_000_000).max(1);
        Timeout {
            millis: u32::try_from(millis).unwrap_or(u32::MAX),
        }
    }

    /// [`Timeout::from_duration`], or no limit for `None`.
    pub fn from_option(limit: Option<Duration>) -> Timeout {
        limit.map_or(Timeout::NONE, Timeout::from_duration)
    }

    /// The value the driver's `timeoutMs` takes.
    pub fn as_millis(self) -> u32 {
        self.millis
    }

    /// `None` when there is no limit.
    pub fn as_duration(self) -> Option<Duration> {
        (self.millis != 0).then(|| Duration::from_millis(u64::from(self.millis)))
    }
}

impl fmt::Display for Timeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.millis == 0 {
            f.write_str("no timeout")
        } else {
            write!(f, "{} ms", self.millis)
        }
    }
}

/// Why a text is no timeout or duration (each quotes the text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidDuration {
    #[error("timeout {0:?} is too long: the driver takes at most {max} ms (about 49 days)", max = u32::MAX)]
    TooLong(String),
    #[error("invalid timeout {text:?}: write milliseconds (500) or a number and its unit: ms, s, m or h (500ms, 5s, 2m)")]
    Unreadable { text: String },
    #[error("invalid timeout {0:?}: a timeout is not negative (0 for none)")]
    Negative(String),
    #[error("{text:?} has no unit: write {bare}s for seconds or {bare}ms for milliseconds (also m, h; 0 for none)")]
    NoUnit { text: String, bare: String },
}

/// Parses a timeout as the command line takes it; the error quotes the text.
pub fn parse_timeout(text: &str) -> Result<Timeout, InvalidDuration> {
    let trimmed = text.trim();
    let too_long = || InvalidDuration::TooLong(text.to_string());
    if !trimmed.is_empty() && trimmed.chars().all(|c| c.is_ascii_digit()) {
        return trimmed
            .parse::<u32>()
            .map(Timeout::from_millis)
            .map_err(|_| too_long());
    }
    if trimmed.starts_with('-') {
        return Err(InvalidDuration::Negative(text.to_string()));
    }
    // humantime's own words list every unit it takes "(and few
    // variations)": the message names the ones a person writes.
    let duration = humantime::parse_duration(trimmed).map_err(|_| InvalidDuration::Unreadable {
        text: text.to_string(),
    })?;
    // Round up: a short non-zero timeout must never become 0, which means
    // "wait forever" to the driver.
    let millis = duration.as_nanos().div_ceil(1_000_000);
    u32::try_from(millis)
        .map(Timeout::from_millis)
        .map_err(|_| too_long())
}

/// Parses a duration that must carry its unit (`--deadline`, `wait
/// --timeout`: new flags, so NVIDIA's bare milliseconds are not inherited,
/// and `--deadline 30` cannot silently mean 30 ms). `0` alone still means
/// none.
pub fn parse_duration_with_unit(text: &str) -> Result<Timeout, InvalidDuration> {
    let trimmed = text.trim();
    if trimmed == "0" {
        return Ok(Timeout::NONE);
    }
    if !trimmed.is_empty() && trimmed.chars().all(|c| c.is_ascii_digit()) {
        return Err(InvalidDuration::NoUnit {
            text: text.to_string(),
            bare: trimmed.to_string(),
        });
    }
    parse_timeout(trimmed)
}

/// Why a text is no drain timeout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidDrainTimeout {
    #[error(transparent)]
    Duration(#[from] InvalidDuration),
    #[error("{0:?}: a drain needs a limit (0 would wait for ever); e.g. 30s")]
    Endless(String),
}

/// A drain needs a limit: with none, a job that never answers would wait,
/// stopped at its step boundary, for ever. It is cudackpt's own duration,
/// so it needs its unit (SPEC section 3): `--drain-timeout 5000` could be
/// read as seconds or milliseconds, and is refused naming both.
pub fn parse_drain_timeout(text: &str) -> Result<Duration, InvalidDrainTimeout> {
    parse_duration_with_unit(text)?
        .as_duration()
        .ok_or_else(|| InvalidDrainTimeout::Endless(text.to_string()))
}

/// A duration the way people read it: `0.412 ms`, `12.3 ms`, `1.302 s`.
pub fn format_duration(duration: Duration) -> String {
    let millis = duration.as_secs_f64() * 1000.0;
    if millis < 10.0 {
        format!("{millis:.3} ms")
    } else if millis < 1000.0 {
        format!("{millis:.1} ms")
    } else {
        format!("{:.3} s", millis / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_given_as_a_duration_never_becomes_no_limit() {
        let millis = |limit| Timeout::from_duration(limit).as_millis();
        assert_eq!(millis(Duration::ZERO), 1);
        assert_eq!(millis(Duration::from_micros(1)), 1);
        assert_eq!(millis(Duration::from_micros(1500)), 2);
        assert_eq!(millis(Duration::from_secs(3)), 3000);
        assert_eq!(millis(Duration::from_secs(u64::MAX)), u32::MAX);
        assert_eq!(Timeout::from_option(None), Timeout::NONE);
    }

    #[test]
    fn a_deadline_needs_its_unit() {
        assert_eq!(parse_duration_with_unit("0"), Ok(Timeout::NONE));
        assert_eq!(
            parse_duration_with_unit("30s"),
            Ok(Timeout::from_millis(30_000))
        );
        assert_eq!(
            parse_duration_with_unit("500ms"),
            Ok(Timeout::from_millis(500))
        );
        let bare = parse_duration_with_unit("30")
            .expect_err("no unit")
            .to_string();
        assert!(bare.contains("30s") && bare.contains("30ms"), "{bare}");
        assert!(parse_duration_with_unit("soon").is_err());
    }

    #[test]
    fn plain_integers_are_milliseconds() {
        assert_eq!(parse_timeout("500"), Ok(Timeout::from_millis(500)));
        assert_eq!(parse_timeout("0"), Ok(Timeout::NONE));
        assert_eq!(Timeout::NONE.as_duration(), None);
    }

    #[test]
    fn units_are_understood() {
        assert_eq!(parse_timeout("500ms").map(Timeout::as_millis), Ok(500));
        assert_eq!(parse_timeout("5s").map(Timeout::as_millis), Ok(5_000));
        assert_eq!(parse_timeout("2m").map(Timeout::as_millis), Ok(120_000));
        assert_eq!(parse_timeout("1m 30s").map(Timeout::as_millis), Ok(90_000));
    }

    #[test]
    fn sub_millisecond_rounds_up_never_to_forever() {
        assert_eq!(parse_timeout("1us").map(Timeout::as_millis), Ok(1));
        assert_eq!(parse_timeout("1500us").map(Timeout::as_millis), Ok(2));
    }

    #[test]
    fn bad_values_are_quoted() {
        for bad in ["", "-5", "5 parsecs", "1.5", "ten", "4294967296", "50d"] {
            let err = parse_timeout(bad).unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "{bad}: {err}");
        }
    }
}
