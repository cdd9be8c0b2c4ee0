//! A job to disk and back (SPEC section 14): `dump` drives CRIU with
//! cudackpt as its action script and leaves a manifest beside the images;
//! `undump` checks the host against the manifest, chooses GPUs and drives
//! CRIU's restore. The engine is CRIU; cudackpt makes it one command and
//! refuses what cannot work before anything changes.
//!
//! The rooms, by who uses them:
//! - [`dump`] and [`undump`], the two commands, and their [`report`];
//!   beside them what both use: the [`manifest`], the images directory
//!   ([`images`]: its room and size), the host's driver
//!   ([`host_driver`]), whether a tree's CUDA processes run
//!   ([`tree_state`]);
//! - [`dump_checks`]: what a dump weighs before any change (what the tree
//!   holds and the options CRIU gets for it, its connections, its deleted
//!   files);
//! - [`undump_checks`]: what an undump weighs before CRIU restores
//!   anything (the images held, who could have written them and what they
//!   would restore as, the files the job had open, its ports, the GPUs it
//!   lands on) and what a failed restore takes away;
//! - [`criu_tool`]: CRIU as a program: which one, running it, reading its
//!   images.

pub mod criu_tool;
pub mod dump;
pub mod dump_checks;
pub mod host_driver;
pub mod images;
pub mod manifest;
pub mod report;
pub mod tree_state;
pub mod undump;
pub mod undump_checks;
