//! SIGINT, SIGTERM and SIGHUP during an operation that changes process
//! state. CRIU and container runtimes interrupt tools on their own timeouts;
//! dying then could leave a process locked. So once a state change is about
//! to start (`arm`), the first signal only raises a flag: the driver calls in
//! flight finish, no new step starts, and the executor rolls the group back.
//! Before that nothing has moved, and a signal ends cudackpt at once (a
//! query can wait for as long as its target is stopped). A second signal
//! always exits at once, as a last resort for a call that never returns.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

const SIGNALS: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

/// Which signal arrived, if any.
#[derive(Clone, Default)]
pub struct Interrupt {
    signal: Arc<AtomicUsize>,
    /// True until `arm`: while nothing has moved, a signal exits at once.
    nothing_moved: Arc<AtomicBool>,
}

impl Interrupt {
    /// Catches the signals from now on. If the handlers cannot be installed
    /// the signals keep their default effect (the process dies), which is
    /// what happened before; that is logged, not fatal.
    pub fn install() -> Interrupt {
        let interrupt = Interrupt::default();
        interrupt.nothing_moved.store(true, Ordering::SeqCst);
        let seen = Arc::new(AtomicBool::new(false));
        for signal in SIGNALS {
            // Order matters: the shutdown hooks run first. One exits while
            // nothing has moved, the other if a signal came before.
            let installed = signal_hook::flag::register_conditional_shutdown(
                signal,
                128 + signal,
                Arc::clone(&interrupt.nothing_moved),
            )
            .and_then(|_| {
                signal_hook::flag::register_conditional_shutdown(
                    signal,
                    128 + signal,
                    Arc::clone(&seen),
                )
            })
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

    /// State is about to change: from now on a first signal is deferred
    /// until the calls in flight finish, then the group is rolled back.
    pub fn arm(&self) {
        self.nothing_moved.store(false, Ordering::SeqCst);
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
