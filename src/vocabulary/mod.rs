//! The words the house speaks, on a floor of their own below the pipeline
//! (`ops`) and above the drain, whose record a report carries: the request
//! (`request`), what the command plans for a process (`plan`), the result
//! (`report`), failures (`failure`), why a pipeline stopped (`stop`), the
//! checked targets (`ready`), where a process of a group is (`place`),
//! limits in time (`timeout`), the host before a checkpoint (`snapshot`),
//! and lists of processes
//! as sentences say them (`prose`). `cli`, `output`, `commands`, `api`
//! and `ops` all speak them; they name nothing of those.

pub mod failure;
pub mod place;
pub mod plan;
pub mod prose;
pub mod ready;
pub mod report;
pub mod request;
pub mod snapshot;
pub mod stop;
pub mod timeout;

/// A mutex's content, also after a panic elsewhere held it: the journal and
/// the signal board must still be read then.
pub(crate) fn locked<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
