//! The environment variables that stand for flags in the modes that take
//! none (NVIDIA's grammar, CRIU's action script) and for `--libcuda`: one
//! reading for all of them, so `CUDACKPT_YES=true` confirms as
//! `CUDACKPT_FORCE=true` forces, and a value that does not parse is
//! refused with the variable's name, never replaced by a default.

use std::path::PathBuf;

use super::args;

/// Whether a yes-or-no value says yes: `1`, `true`, `yes` or `on` (pure).
pub fn says_yes(value: &str) -> bool {
    matches!(value, "1" | "true" | "yes" | "on")
}

/// Whether the variable `name` is set and says yes.
pub fn flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| says_yes(&v))
}

/// `CUDACKPT_FORCE=1`: `--force` for the modes that take no flags (NVIDIA's
/// grammar, CRIU's action script).
pub fn force_from_env() -> bool {
    flag("CUDACKPT_FORCE")
}

/// The drain handshake for the modes that take no flags (NVIDIA's grammar,
/// CRIU's action script): `CUDACKPT_DRAIN=1` drains before the lock, and
/// `CUDACKPT_DRAIN_SIGNAL`, `CUDACKPT_DRAIN_TIMEOUT` are read as the
/// modern flags read them; a value that does not parse is refused, never
/// replaced by the default in silence.
pub fn drain_from_env() -> Result<crate::ops::DrainSettings, EnvError> {
    let mut drain = crate::ops::DrainSettings {
        before_lock: flag("CUDACKPT_DRAIN"),
        ..crate::ops::DrainSettings::default()
    };
    if let Some(text) = env_text("CUDACKPT_DRAIN_SIGNAL")? {
        drain.signal = crate::ops::vocabulary::drain_protocol::DrainSignal::parse(&text)
            .map_err(EnvError::invalid("CUDACKPT_DRAIN_SIGNAL"))?;
    }
    if let Some(text) = env_text("CUDACKPT_DRAIN_TIMEOUT")? {
        drain.timeout = args::parse_drain_timeout(&text)
            .map_err(EnvError::invalid("CUDACKPT_DRAIN_TIMEOUT"))?;
    }
    Ok(drain)
}

/// Why a variable cudackpt reads cannot be used; each names the variable.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error("{0} is not UTF-8 text")]
    NotText(&'static str),
    #[error("{name}: {why}")]
    Invalid {
        name: &'static str,
        #[source]
        why: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl EnvError {
    /// The error of a value of `name` that does not parse.
    pub fn invalid<E: std::error::Error + Send + Sync + 'static>(
        name: &'static str,
    ) -> impl FnOnce(E) -> EnvError {
        move |why| EnvError::Invalid {
            name,
            why: Box::new(why),
        }
    }
}

/// A variable's text: `None` when unset or empty.
fn env_text(name: &'static str) -> Result<Option<String>, EnvError> {
    match std::env::var(name) {
        Ok(text) if text.is_empty() => Ok(None),
        Ok(text) => Ok(Some(text)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(EnvError::NotText(name)),
    }
}

/// The driver library `CUDACKPT_LIBCUDA` names, when set and not empty: for
/// every grammar (the native one when `--libcuda` is not given).
pub fn libcuda_from_env() -> Option<PathBuf> {
    std::env::var_os("CUDACKPT_LIBCUDA")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yes_is_said_four_ways_and_anything_else_is_no() {
        for yes in ["1", "true", "yes", "on"] {
            assert!(says_yes(yes), "{yes}");
        }
        for no in ["0", "", "false", "no", "off", "YES ", "2"] {
            assert!(!says_yes(no), "{no:?}");
        }
    }
}
