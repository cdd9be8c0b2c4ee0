//! A job to disk and back (SPEC section 14): `dump` drives CRIU with
//! cudackpt as its action script and leaves a manifest beside the images;
//! `undump` checks the host against the manifest, chooses GPUs and drives
//! CRIU's restore. The engine is CRIU; cudackpt makes it one command and
//! refuses what cannot work before anything changes.
//!
//! `criu_tool` (which CRIU), `tree_facts` (what the tree holds, CRIU's
//! options; `connections` whether its TCP connections leave it, `ghosts`
//! its deleted files), `images` (the directory, its room and size), `host_driver`,
//! `manifest`, `placement` (GPUs at restore), `criu_run` (running CRIU),
//! `tree_state` (whether the tree's CUDA processes run), `criu_images`
//! (the open files CRIU's images recorded), `open_files` (those files
//! against the host's before an undump), `ports` (the ports it listened
//! on, against the host's sockets), `source` (the images an undump
//! reads, held by descriptor, staged where another user could write them),
//! `credentials` (what they would restore as: `descriptors` reads every
//! descriptor of the images, `descriptor_bound` says which another user
//! could not have made), `criu_messages` (CRIU's images as read), `restored_tree` (what a
//! restore brought back, by pidfd),
//! `dump`, `undump`, `report`.

pub mod connections;
pub mod credentials;
pub mod criu_images;
pub mod criu_messages;
pub mod criu_run;
pub mod criu_tool;
pub mod descriptor_bound;
pub mod descriptors;
pub mod dump;
pub mod ghosts;
pub mod host_driver;
pub mod images;
pub mod manifest;
pub mod open_files;
pub mod placement;
pub mod ports;
pub mod report;
pub mod restored_tree;
pub mod source;
pub mod tree_facts;
pub mod tree_state;
pub mod undump;
