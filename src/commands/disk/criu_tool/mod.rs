//! CRIU as a program: which one, and whether it can start here
//! ([`find`]); running it, with cudackpt as its action script, and
//! watching it ([`run`]); reading its images ([`messages`], the framing
//! and the messages; [`image_files`], the files a job had open and its
//! credentials).

pub mod find;
pub mod image_files;
pub mod messages;
pub mod run;
