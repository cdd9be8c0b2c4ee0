//! The environment variables that stand for flags in the modes that take
//! none (NVIDIA's grammar, CRIU's action script) and for `--libcuda`, made
//! into what the command needs. They are read through
//! [`crate::environment`], so `CUDACKPT_YES=true` confirms as
//! `CUDACKPT_FORCE=true` forces, and a value that does not parse is
//! refused with the variable's name, never replaced by a default.

use std::path::PathBuf;

use super::args;
use crate::environment::{self, NotText};

/// Whether the variable `name` is set and says yes.
pub use crate::environment::flag;

/// `CUDACKPT_FORCE=1`: `--force` for the modes that take no flags (NVIDIA's
/// grammar, CRIU's action script).
pub fn force_from_env() -> bool {
    flag(environment::FORCE)
}

/// The drain handshake for the modes that take no flags (NVIDIA's grammar,
/// CRIU's action script): `CUDACKPT_DRAIN=1` drains before the lock, and
/// `CUDACKPT_DRAIN_SIGNAL`, `CUDACKPT_DRAIN_TIMEOUT` are read as the
/// modern flags read them; a value that does not parse is refused, never
/// replaced by the default in silence.
pub fn drain_from_env() -> Result<crate::drain::settings::DrainSettings, EnvError> {
    let mut drain = crate::drain::settings::DrainSettings {
        before_lock: flag(environment::DRAIN),
        ..crate::drain::settings::DrainSettings::default()
    };
    if let Some(text) = environment::text(environment::DRAIN_SIGNAL)? {
        drain.signal = crate::drain::protocol::DrainSignal::parse(&text)
            .map_err(EnvError::invalid(environment::DRAIN_SIGNAL))?;
    }
    if let Some(text) = environment::text(environment::DRAIN_TIMEOUT)? {
        drain.timeout = args::parse_drain_timeout(&text)
            .map_err(EnvError::invalid(environment::DRAIN_TIMEOUT))?;
    }
    Ok(drain)
}

/// Why a variable cudackpt reads cannot be used; each names the variable.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error(transparent)]
    NotText(#[from] NotText),
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

/// The driver library `CUDACKPT_LIBCUDA` names, when set and not empty: for
/// every grammar (the native one when `--libcuda` is not given).
pub fn libcuda_from_env() -> Option<PathBuf> {
    environment::os(environment::LIBCUDA).map(PathBuf::from)
}
