//! The pipeline's stages that are neither a pre-flight nor the journal:
//! select the targets, check them, choose the restore map, drain (SPEC
//! 11), and finish
//! after the driver calls (records, `--verify`), or say what a dry run
//! would have done.

pub mod check;
pub mod choose_map;
pub mod drain;
pub mod dry_run;
pub mod finish;
pub mod select;
