//! cudackpt under Slurm: a preempted job written to disk and brought back
//! at its restart, on the same node or another, with no glue written by
//! the admin (docs/guide/slurm.md). Two halves: the job's wrapper (`run`,
//! as the job's user) and the node's service (`serve`, as root), talking
//! on a Unix socket (`protocol`); the service knows the asking job by
//! what root and Slurm say of it (`job`) and keeps each job's images
//! apart (`store`).

pub mod job;
pub mod protocol;
pub mod run;
pub mod serve;
pub mod store;
