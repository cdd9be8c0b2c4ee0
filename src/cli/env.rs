//! The environment variables that stand for flags in the modes that take
//! none (NVIDIA's grammar, CRIU's action script) and for `--libcuda`, made
//! into what the command needs. They are read through
//! [`crate::environment`], so `CUDACKPT_YES=true` confirms as
//! `CUDACKPT_FORCE=true` forces, and a value that does not parse is
//! refused with the variable's name, never replaced by a default.

use std::path::PathBuf;

use crate::environment;

pub use crate::commands::criu::settings::drain_from_env;

/// Whether the variable `name` is set and says yes.
pub use crate::environment::flag;

/// `CUDACKPT_FORCE=1`: `--force` for the modes that take no flags (NVIDIA's
/// grammar, CRIU's action script).
pub fn force_from_env() -> bool {
    flag(environment::FORCE)
}

/// The driver library `CUDACKPT_LIBCUDA` names, when set and not empty: for
/// every grammar (the native one when `--libcuda` is not given).
pub fn libcuda_from_env() -> Option<PathBuf> {
    environment::os(environment::LIBCUDA).map(PathBuf::from)
}
