//! doctor's CRIU check: the CRIU `dump` and `undump` would run (`--criu
//! PATH`, else the first on PATH), through the same search and checks as
//! they make (trusted as root, its version, `criu check` that it can start
//! on this kernel), and the one way that works when it is missing, too old
//! or cannot start: CRIU built from source (`scripts/build-criu`), since
//! Debian 12's packaged 3.17 cannot start on kernels from 6.13 on.

use std::path::Path;

use super::check::{Check, Status};
use crate::commands::disk::criu_tool::find::{self as criu_tool, CriuUnusable};

/// The oldest CRIU whose CUDA plugin drives `cuda-checkpoint` (an action
/// script works from 3.16, as `dump` does).
const PLUGIN_MAJOR: u32 = 4;

/// What CRIU is for here, said before how to get one.
const NEEDED_FOR: &str = "only needed to write whole processes to disk (dump and undump, and CRIU with its CUDA plugin or cudackpt as its action script)";

/// The check of the CRIU named, or of the first on PATH.
pub fn check(named: Option<&Path>) -> Check {
    let build = format!("{NEEDED_FOR}; {}", criu_tool::BUILD_HINT);
    let found = criu_tool::find_on_path(named);
    match found {
        Ok(criu) => {
            let detail = format!("{} (CRIU {})", criu.path.display(), criu.version);
            match criu_tool::parse_version(&criu.version) {
                Some((major, _)) if major >= PLUGIN_MAJOR => Check::new("criu", Status::Ok, detail),
                _ => Check::new("criu", Status::Warn, format!("{detail}: dump and undump work with it, CRIU's CUDA plugin does not"))
                    .hint(format!("CRIU's CUDA plugin (which runs cuda-checkpoint, or cudackpt in its place) needs CRIU 4.0 or newer: {}", criu_tool::BUILD_HINT)),
            }
        }
        Err(CriuUnusable::NotFound) => Check::new("criu", Status::Info, "not on PATH").hint(build),
        Err(error @ (CriuUnusable::TooOld { .. } | CriuUnusable::CannotStart { .. })) => {
            Check::new("criu", Status::Warn, error.to_string()).hint(build)
        }
        Err(error) => Check::new("criu", Status::Warn, error.to_string()).hint(error.hint()),
    }
}
