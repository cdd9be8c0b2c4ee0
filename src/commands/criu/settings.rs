//! What CRIU's two faces of cudackpt (the action script and the plugin)
//! are told by the environment CRIU runs them in, read once: cudackpt's
//! own variables (`CUDACKPT_YES`, `CUDACKPT_FORCE`, the drain's,
//! `CUDACKPT_LOCK_TIMEOUT`, `CUDACKPT_MAP`, `CUDACKPT_LIBCUDA`) and the
//! tree's root CRIU names (`CRTOOLS_INIT_PID`). NVIDIA's grammar, which
//! CRIU's own plugin drives, reads the drain's the same way. A value that
//! does not parse is refused with the variable's name, never replaced by a
//! default.

use std::path::PathBuf;

use crate::drain::protocol::DrainSignal;
use crate::drain::settings::DrainSettings;
use crate::environment::{self, EnvError};
use crate::gpu::map::MapSpec;
use crate::targets::process::parse_pid;
use crate::vocabulary::timeout::{parse_drain_timeout, parse_timeout, Timeout};

/// The lock timeout of pre-dump, unless `CUDACKPT_LOCK_TIMEOUT` says.
const DEFAULT_LOCK_TIMEOUT: Timeout = Timeout::from_millis(10_000);

/// What the hook's environment sets for every group it runs, read once
/// (the detached helpers inherit it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HookSettings {
    /// `CUDACKPT_YES=1`: acting on the tree of PID 1, the whole host.
    pub confirmed: bool,
    /// `CUDACKPT_FORCE=1`: restore despite the memory pre-flight.
    pub force: bool,
    /// `CUDACKPT_DRAIN`, `CUDACKPT_DRAIN_SIGNAL`, `CUDACKPT_DRAIN_TIMEOUT`.
    pub drain: DrainSettings,
}

/// What the plugin is told by its environment (`CUDACKPT_*`, as the action
/// script is): read by [`plugin_settings`].
#[derive(Debug, Clone)]
pub struct PluginSettings {
    /// The driver library (`CUDACKPT_LIBCUDA`), else the host's.
    pub(crate) libcuda: Option<PathBuf>,
    /// Force, drain, confirmation: as the action script reads them.
    pub(crate) hook: HookSettings,
    /// How long a lock may wait (`CUDACKPT_LOCK_TIMEOUT`, else 10 s).
    pub(crate) lock_timeout: Timeout,
    /// The GPUs a restore goes onto (`CUDACKPT_MAP`).
    pub(crate) map: MapSpec,
}

/// Why the environment cannot be used: said as the command's usage
/// failure, before anything is done.
#[derive(Debug)]
pub struct Unusable {
    pub message: String,
    /// What to set; `None`: how CRIU runs the hook.
    pub hint: Option<&'static str>,
}

impl Unusable {
    /// CRIU's own variables are wrong: how CRIU runs the hook.
    pub fn criu(why: impl std::fmt::Display) -> Unusable {
        Unusable {
            message: why.to_string(),
            hint: None,
        }
    }
}

/// The drain handshake for the modes that take no flags (NVIDIA's grammar,
/// CRIU's action script and plugin): `CUDACKPT_DRAIN=1` drains before the
/// lock, and `CUDACKPT_DRAIN_SIGNAL`, `CUDACKPT_DRAIN_TIMEOUT` are read as
/// the modern flags read them.
pub fn drain_from_env() -> Result<DrainSettings, EnvError> {
    let mut drain = DrainSettings {
        before_lock: environment::flag(environment::DRAIN),
        ..DrainSettings::default()
    };
    if let Some(text) = environment::text(environment::DRAIN_SIGNAL)? {
        drain.signal =
            DrainSignal::parse(&text).map_err(EnvError::invalid(environment::DRAIN_SIGNAL))?;
    }
    if let Some(text) = environment::text(environment::DRAIN_TIMEOUT)? {
        drain.timeout =
            parse_drain_timeout(&text).map_err(EnvError::invalid(environment::DRAIN_TIMEOUT))?;
    }
    Ok(drain)
}

/// What the environment sets for every group the hook (or a detached
/// helper it started, which inherits it) runs.
pub fn settings() -> Result<HookSettings, Unusable> {
    let drain = drain_from_env().map_err(|problem| Unusable {
        message: problem.to_string(),
        hint: Some("set CUDACKPT_DRAIN_SIGNAL to a real-time signal (40, RTMIN+6) and CUDACKPT_DRAIN_TIMEOUT to a limit (30s)"),
    })?;
    Ok(HookSettings {
        confirmed: environment::flag(environment::YES),
        force: environment::flag(environment::FORCE),
        drain,
    })
}

/// The tree root CRIU names in `CRTOOLS_INIT_PID`.
pub fn init_pid() -> Result<i32, EnvError> {
    let name = environment::CRIU_INIT_PID;
    let text = environment::text(name)?.unwrap_or_default();
    parse_pid(&text).map_err(EnvError::invalid(name))
}

/// The GPUs a restore goes onto: `CUDACKPT_MAP` (as `--map` takes it;
/// `cudackpt undump` sets it for the GPUs it chose), else in place.
pub fn map_from_env() -> Result<MapSpec, String> {
    let name = environment::MAP;
    let text = environment::text(name)
        .map_err(|e| e.to_string())?
        .unwrap_or_default();
    if text.trim().is_empty() {
        return Ok(MapSpec::None);
    }
    MapSpec::parse(&[text]).map_err(|why| format!("{name}: {why}"))
}

/// The lock timeout for pre-dump: `CUDACKPT_LOCK_TIMEOUT`, else 10 s.
pub fn lock_timeout() -> Result<Timeout, EnvError> {
    let name = environment::LOCK_TIMEOUT;
    match environment::text(name)? {
        Some(text) if !text.trim().is_empty() => {
            parse_timeout(&text).map_err(EnvError::invalid(name))
        }
        _ => Ok(DEFAULT_LOCK_TIMEOUT),
    }
}

/// What cudackpt's CRIU plugin reads from CRIU's environment: what the
/// action script reads, the driver library, the lock timeout and the map.
pub fn plugin_settings() -> Result<PluginSettings, String> {
    let hook = settings().map_err(|unusable| match unusable.hint {
        Some(hint) => format!("{} ({hint})", unusable.message),
        None => unusable.message,
    })?;
    Ok(PluginSettings {
        libcuda: environment::os(environment::LIBCUDA).map(PathBuf::from),
        hook,
        lock_timeout: lock_timeout().map_err(|e| e.to_string())?,
        map: map_from_env()?,
    })
}
