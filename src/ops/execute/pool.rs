//! The bounded pool of worker threads that runs one driver call (or one
//! /proc read) per process: a few per core, never without bound, and never
//! failing because a thread could not start.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;

/// The most worker threads one group runs at once: driver calls mostly
/// wait on the GPU, so a few per core help, but not without bound (a pids
/// limit, `TasksMax`, memory for stacks).
/// Asked once per process, and only for a pool of several items: std reads
/// the cgroup's CPU quota from /proc and /sys to answer.
fn max_workers() -> usize {
    static WORKERS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *WORKERS.get_or_init(|| {
        let cores = thread::available_parallelism().map_or(4, usize::from);
        (cores * 4).clamp(8, 64)
    })
}

/// Runs `work` on every item with a bounded pool of worker threads (the
/// calling thread is one of them) and returns the results in item order.
/// A thread that cannot be started (a pids limit) only means fewer
/// workers: the work still gets done, by those that did start.
pub fn concurrently<T: Sync, R: Send>(items: &[T], work: impl Fn(&T) -> R + Sync) -> Vec<R> {
    if items.len() <= 1 {
        return items.iter().map(work).collect();
    }
    in_pool(items, work, max_workers(), &|_| true)
}

/// [`concurrently`] with the pool's size, and whether worker `n` may be
/// started (false stands for a failed start, as a test injects it).
pub(super) fn in_pool<T: Sync, R: Send>(
    items: &[T],
    work: impl Fn(&T) -> R + Sync,
    workers: usize,
    may_start: &(dyn Fn(usize) -> bool + Sync),
) -> Vec<R> {
    if items.len() <= 1 {
        return items.iter().map(work).collect();
    }
    let next = AtomicUsize::new(0);
    let drain = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(i) else {
                return done;
            };
            done.push((i, work(item)));
        }
    };
    let mut results: Vec<(usize, R)> = thread::scope(|scope| {
        let mut handles = Vec::new();
        for n in 1..workers.min(items.len()) {
            let started = if may_start(n) {
                thread::Builder::new().spawn_scoped(scope, drain)
            } else {
                Err(std::io::Error::other("not started"))
            };
            match started {
                Ok(handle) => handles.push(handle),
                Err(error) => {
                    tracing::debug!(%error, workers = n, "no more worker threads; going on with these");
                    break;
                }
            }
        }
        let mut results = drain();
        for handle in handles {
            match handle.join() {
                Ok(done) => results.extend(done),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        results
    });
    results.sort_unstable_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, result)| result).collect()
}
