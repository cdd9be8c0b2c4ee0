//! The words every stage of ops speaks, on its ground floor: the request
//! (`request`), what the command plans for a process (`plan`), the result
//! (`report`), failures (`failure`), why a pipeline stopped (`stop`), the
//! checked targets (`ready`), where a process of a group is (`place`),
//! limits in time (`timeout`), the host before a checkpoint (`snapshot`),
//! and lists of processes
//! as sentences say them (`prose`). It imports no other
//! room of ops.

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
