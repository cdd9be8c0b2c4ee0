//! Children forked from a process that loaded the fake, as the real driver
//! sees them: a child forked after CUDA started has no CUDA state of its
//! own (a DataLoader worker: `CUDA_ERROR_NOT_INITIALIZED`, though it still
//! maps the driver), until it runs a program of its own (an exec loads the
//! fake afresh). The fake notes each such child in its state directory
//! (`forked/PID`, from a `pthread_atfork` child handler registered when the
//! library loads) and forgets it when the library loads in that PID again.
//! Keyed by PID alone: a child CRIU restores keeps its PID, and is still a
//! forked child without CUDA state.

use std::path::PathBuf;

/// Where a forked child is noted.
fn note_of(pid: i32) -> PathBuf {
    crate::state::Store::from_env()
        .dir()
        .join("forked")
        .join(pid.to_string())
}

/// Whether `pid` is a child forked from a fake CUDA process (and has not
/// run a program since).
pub fn is_forked_child(pid: i32) -> bool {
    note_of(pid).exists()
}

/// Runs when a child forks from this process: notes it.
extern "C" fn forked() {
    let pid = std::process::id() as i32;
    let note = note_of(pid);
    if let Some(dir) = note.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(note, b"");
}

/// Runs when the library loads (a process started, or exec'd, with it):
/// this PID is a CUDA process of its own from now on, and its children are
/// noted as they fork.
extern "C" fn loaded() {
    let _ = std::fs::remove_file(note_of(std::process::id() as i32));
    // SAFETY: pthread_atfork takes three optional handlers and keeps them
    // for the life of the process; `forked` is a plain `extern "C"` fn that
    // lives as long as the library (which is never unloaded by the tests).
    unsafe {
        libc::pthread_atfork(None, None, Some(forked));
    }
}

/// Runs [`loaded`] when the dynamic loader initialises the library.
#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = loaded;
