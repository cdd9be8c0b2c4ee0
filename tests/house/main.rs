//! The house's own tests: how `src/` (and the plugin crate) is built, read
//! from the source by parsing (`syn`), not from what the binary does. The
//! import graph (`graph`) and the floors and circles held to it
//! (`layout`), the length of functions, the names of modules, the one
//! module that reads the environment, the one room that writes to the
//! terminal. Apart from the CLI's tests so that a change of rooms is
//! checked in seconds, without the fake driver or any process.

use std::path::Path;

mod environment;
mod function_length;
mod graph;
mod layout;
mod names;
mod terminal;

/// The checkout: the root package's directory.
pub fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}
