//! SIGINT, SIGTERM and SIGHUP during an operation that changes process
//! state. CRIU and container runtimes interrupt tools on their own timeouts;
//! dying then could leave a process locked. Instead the first signal only
//! raises a flag: the driver calls in flight finish, no new step starts, and
//! the executor rolls the group back. A second signal exits at once, as a
//! last resort for a call that never returns.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

const SIGNALS: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

/// Which signal arrived, if any.
#[derive(Clone, Default)]
pub struct Interrupt {
    signal: Arc<AtomicUsize>,
}

impl Interrupt {
    /// Catches the signals from now on. If the handlers cannot be installed
    /// the signals keep their default effect (the process dies), which is
    /// what happened before; that is logged, not fatal.
    pub fn install() -> Interrupt {
        let interrupt = Interrupt::default();
        let seen = Arc::new(AtomicBool::new(false));
        for signal in SIGNALS {
            // Order matters: the shutdown hook runs first and exits only if
            // an earlier signal already set `seen`.
            let installed = signal_hook::flag::register_conditional_shutdown(
                signal,
                128 + signal,
                Arc::clone(&seen),
            )
            .and_then(|_| signal_hook::flag::register(signal, Arc::clone(&seen)))
            .and_then(|_| {
                signal_hook::flag::register_usize(
                    signal,
                    Arc::clone(&interrupt.signal),
                    signal as usize,
                )
            });
            if let Err(error) = installed {
                tracing::warn!(signal, %error, "could not catch the signal; it will end cudackpt at once");
            }
        }
        interrupt
    }

    /// An interrupt that never fires (for callers that catch nothing).
    pub fn never() -> Interrupt {
        Interrupt::default()
    }

    /// The signal received, if any.
    pub fn signal(&self) -> Option<i32> {
        match self.signal.load(Ordering::SeqCst) {
            0 => None,
            signal => i32::try_from(signal).ok(),
        }
    }

    /// Records a signal as if it had arrived (for tests of the executor).
    pub fn raise(&self, signal: i32) {
        self.signal.store(signal as usize, Ordering::SeqCst);
    }
}

/// `SIGTERM` for 15, and so on.
pub fn signal_name(signal: i32) -> String {
    match signal {
        SIGINT => "SIGINT".to_string(),
        SIGTERM => "SIGTERM".to_string(),
        SIGHUP => "SIGHUP".to_string(),
        other => format!("signal {other}"),
    }
}
