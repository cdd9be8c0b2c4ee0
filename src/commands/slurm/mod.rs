//! cudackpt under Slurm: a preempted job written to disk and brought back
//! at its restart, on the same node or another, with no glue written by
//! the admin (docs/guide/slurm.md). Two halves: the job's wrapper (`run`,
//! as the job's user) and the node's service (`serve`, as root), talking
//! on a Unix socket (`protocol`); the service knows the asking job by
//! what root and Slurm say of it (`job`), keeps each job's images apart
//! (`store`), restores only images of the job's user's processes
//! (`own_processes`), and bounds what connections hold of it (`places`).

pub mod job;
pub mod own_processes;
pub mod places;
pub mod protocol;
pub mod run;
pub mod serve;
pub mod store;

/// Where both halves write their lines (the job's output for the wrapper,
/// the service's log): the command line's writer, which prefixes and
/// escapes them; set once, before either runs.
static TELL: std::sync::OnceLock<fn(&str)> = std::sync::OnceLock::new();

/// Sets where [`tell`] writes.
pub fn set_writer(writer: fn(&str)) {
    let _ = TELL.set(writer);
}

/// Writes `line` where the command line said (nowhere before it did).
fn tell(line: &str) {
    if let Some(writer) = TELL.get() {
        writer(line);
    }
}
