//! Signals during a command: every signal whose default action would end
//! cudackpt and that means "stop" (see [`CAUGHT`]). CRIU, container
//! runtimes and schedulers interrupt tools on their own timeouts and with
//! their own signals (batch systems warn with SIGUSR1/SIGUSR2 or SIGXCPU);
//! dying then could leave a process locked. So once a state change is
//! about to start (`arm`), the first signal only raises a flag: the driver
//! calls in flight finish (a lock with no timeout is taken in slices of a
//! second, so it notices within one), no new step starts, and the executor
//! rolls the group back (exit 130). Before that nothing has moved, and a signal ends
//! cudackpt at once (a query can wait for as long as its target is
//! stopped).
//!
//! A second signal is the caller insisting: cudackpt prints, from the board
//! the executor keeps, where each process was left and which call was in
//! flight, then exits 11 (`Abandoned`), a status of its own. Signals are
//! taken by a thread of their own (signal-hook's iterator), so all of this
//! runs outside signal-handler context.
//!
//! Starting that thread costs about 0.2 ms, a sixteenth of a whole `lock`
//! on the GPU host, so it starts only when it is needed: until `arm`, the
//! handler itself ends cudackpt (signal-hook's conditional shutdown, which
//! is `_exit`), and a command of one short call (`lock`, taken in slices of
//! a second, or `unlock`, on one process) arms [`Interrupt::arm_polled`]:
//! the signals wait in signal-hook's pipe and the executor reads them
//! between slices and after the call, so a second signal is acted on within
//! a second, the call in flight having finished.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rustix::process::Signal;
use signal_hook::iterator::Signals;

use crate::driver::ProcessState;
use crate::exit::ExitStatus;
use crate::vocabulary::locked;
use crate::vocabulary::place::Place;
use crate::vocabulary::plan::DriverCall;

/// The signals caught, with their names: those whose default action ends
/// the process (signal(7)), save the ones that mean a fault (SEGV, BUS,
/// ILL, FPE, TRAP, SYS), SIGABRT (a panic's own ending), SIGPIPE (ignored:
/// a write error instead), SIGPROF and SIGVTALRM (a profiler's interval
/// timers, not a request to stop), SIGIO and SIGSTKFLT (nobody's request
/// either), and the real-time signals (libraries' own). SIGKILL cannot be
/// caught: the intent record covers it.
pub const CAUGHT: [(Signal, &str); 10] = [
    (Signal::INT, "SIGINT"),
    (Signal::TERM, "SIGTERM"),
    (Signal::HUP, "SIGHUP"),
    (Signal::QUIT, "SIGQUIT"),
    (Signal::USR1, "SIGUSR1"),
    (Signal::USR2, "SIGUSR2"),
    (Signal::ALARM, "SIGALRM"),
    (Signal::XCPU, "SIGXCPU"),
    (Signal::XFSZ, "SIGXFSZ"),
    (Signal::POWER, "SIGPWR"),
];

/// Which signal arrived, if any, and where the group is.
#[derive(Clone, Default)]
pub struct Interrupt {
    signal: Arc<AtomicUsize>,
    /// True until `arm`: while nothing has moved, a signal exits at once.
    nothing_moved: Arc<AtomicBool>,
    board: Arc<Mutex<Vec<Place>>>,
    /// Set when the signals could not be caught, or not watched by a
    /// thread, saying why and what follows.
    unguarded: Arc<Mutex<Option<String>>>,
    /// The caught signals while no watcher thread reads them: read by
    /// [`Interrupt::signal`] instead.
    unwatched: Arc<Mutex<Option<Signals>>>,
    /// Whether an intent record covers the group (not for one call).
    journaled: Arc<AtomicBool>,
    /// Whether every handler is in place. When one could not be, the ones
    /// that were would swallow their signal once armed (signal-hook cannot
    /// put the default back), so the command stays unarmed: a signal then
    /// ends it at once, as `unguarded` says.
    caught: bool,
}

/// The remark for a command whose signals could not be caught (pure).
fn unguarded_text(why: &str) -> String {
    format!(
        "signals could not be caught: {why}; a signal now ends cudackpt at once, without rolling the group back (its intent record stays: `cudackpt recover` puts the processes back)"
    )
}

impl Interrupt {
    /// Catches the signals from now on. If they cannot be caught they keep
    /// their default effect (cudackpt dies, its intent record stays for
    /// `recover`), and [`Interrupt::unguarded`] says so for the report.
    pub fn install() -> Interrupt {
        let mut interrupt = Interrupt::default();
        interrupt.nothing_moved.store(true, Ordering::SeqCst);
        let caught = CAUGHT.map(|(signal, _)| signal.as_raw());
        // While nothing has moved, the handler ends cudackpt itself, as the
        // signal's default would (`_exit`: no atexit handler, the driver's
        // among them, runs).
        for signal in caught {
            if let Err(error) = signal_hook::flag::register_conditional_shutdown(
                signal,
                128 + signal,
                Arc::clone(&interrupt.nothing_moved),
            ) {
                *locked(&interrupt.unguarded) = Some(unguarded_text(&error.to_string()));
                return interrupt;
            }
        }
        match Signals::new(caught) {
            Ok(signals) => {
                *locked(&interrupt.unwatched) = Some(signals);
                interrupt.caught = true;
            }
            Err(error) => *locked(&interrupt.unguarded) = Some(unguarded_text(&error.to_string())),
        }
        interrupt
    }

    /// State is about to change: from now on a first signal is deferred
    /// until the calls in flight finish, then the group is rolled back; a
    /// second abandons at once. A thread watches for them.
    pub fn arm(&self) {
        if !self.caught {
            return;
        }
        self.nothing_moved.store(false, Ordering::SeqCst);
        let Some(signals) = locked(&self.unwatched).take() else {
            return; // already watched
        };
        let watcher = self.clone();
        // Handed over once the thread exists: if it cannot start, the
        // signals stay here for the executor to read.
        let (hand_over, handed) = std::sync::mpsc::channel::<Signals>();
        let spawned = std::thread::Builder::new()
            .name("signals".to_string())
            .spawn(move || {
                if let Ok(mut signals) = handed.recv() {
                    for signal in signals.forever() {
                        watcher.arrived(signal);
                    }
                }
            });
        match spawned {
            Ok(_) => {
                let _ = hand_over.send(signals);
            }
            // No thread may start (a pids limit): the executor reads the
            // signals itself, between its calls.
            Err(error) => {
                *locked(&self.unwatched) = Some(signals);
                *locked(&self.unguarded) = Some(format!(
                    "no thread could be started to watch for signals ({error}): they were read between driver calls instead, so a second signal would have waited for the call in flight"
                ));
            }
        }
    }

    /// An intent record now covers the group: a second signal says so.
    pub fn journaled(&self) {
        self.journaled.store(true, Ordering::SeqCst);
    }

    /// [`Interrupt::arm`] for a command of one short call on one process:
    /// no thread; [`Interrupt::signal`] reads the signals that came.
    pub fn arm_polled(&self) {
        if self.caught {
            self.nothing_moved.store(false, Ordering::SeqCst);
        }
    }

    /// Why signals are not caught (a signal then ends cudackpt at once,
    /// without rolling the group back), or not watched by a thread.
    pub fn unguarded(&self) -> Option<String> {
        locked(&self.unguarded).clone()
    }

    /// What the watcher does with each signal.
    fn arrived(&self, signal: i32) {
        // `_exit`: no atexit handler (the driver's among them) may run
        // while other threads are inside driver calls.
        if self.nothing_moved.load(Ordering::SeqCst) {
            signal_hook::low_level::exit(128 + signal);
        }
        let first = self
            .signal
            .compare_exchange(0, signal as usize, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if !first {
            let journaled = self.journaled.load(Ordering::SeqCst);
            crate::exit::last_words(&abandon_text(signal, &self.places(), journaled));
            signal_hook::low_level::exit(i32::from(ExitStatus::Abandoned.code()));
        }
    }

    /// An interrupt that never fires (for callers that catch nothing).
    pub fn never() -> Interrupt {
        Interrupt::default()
    }

    /// The signal received, if any (reading first the ones no thread
    /// watches: a second one abandons here).
    pub fn signal(&self) -> Option<i32> {
        let arrived: Vec<i32> = locked(&self.unwatched)
            .as_mut()
            .map(|signals| signals.pending().collect())
            .unwrap_or_default();
        for signal in arrived {
            self.arrived(signal);
        }
        match self.signal.load(Ordering::SeqCst) {
            0 => None,
            signal => i32::try_from(signal).ok(),
        }
    }

    /// Records a signal as if it had arrived (for tests of the executor).
    #[cfg(test)]
    pub fn raise(&self, signal: i32) {
        self.signal.store(signal as usize, Ordering::SeqCst);
    }

    /// Starts the board: every process of the group, where it is now.
    pub fn track(&self, places: Vec<Place>) {
        *locked(&self.board) = places;
    }

    /// A call on `pid` starts (`Some`) or ends with its state now.
    pub fn note(&self, pid: i32, in_flight: Option<DriverCall>, state: Option<ProcessState>) {
        let mut board = locked(&self.board);
        if let Some(place) = board.iter_mut().find(|p| p.pid == pid) {
            place.in_flight = in_flight;
            if state.is_some() {
                place.state = state;
            }
        }
    }

    /// Where each process of the group is, as far as the executor knows.
    pub fn places(&self) -> Vec<Place> {
        locked(&self.board).clone()
    }
}

/// What a second signal leaves on stderr: each process and where it is.
pub fn abandon_text(signal: i32, places: &[Place], journaled: bool) -> String {
    let mut text = format!(
        "{} again: stopped at once, without rolling back; where each process was left:\n",
        signal_name(signal)
    );
    for place in places {
        let state = place
            .state
            .map_or("in an unknown state".to_string(), |s| s.to_string());
        let flight = place.in_flight.map_or(String::new(), |step| {
            format!(" ({step} was in flight: it may finish, or may have)")
        });
        text.push_str(&format!(
            "  PID {} ({}): {state}{flight}\n",
            place.pid, place.name
        ));
    }
    let pids: Vec<String> = places.iter().map(|p| p.pid.to_string()).collect();
    let pids = pids.join(" ");
    text.push_str(&if journaled {
        format!("the intent record stays: `cudackpt recover` puts them back where they started (`cudackpt state {pids}` shows where they are)\n")
    } else {
        // One driver call writes no intent record: there is nothing to
        // recover from, only a state to look at.
        format!("one call, so no intent record: `cudackpt state {pids}` shows where they are\n")
    });
    text
}

/// `SIGTERM` for 15, and so on.
pub fn signal_name(signal: i32) -> String {
    CAUGHT
        .iter()
        .find(|(caught, _)| caught.as_raw() == signal)
        .map_or_else(|| format!("signal {signal}"), |(_, name)| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_caught_signal_is_named_and_has_its_exit_status() {
        for (signal, name) in CAUGHT {
            assert_eq!(signal_name(signal.as_raw()), name);
            let status = ExitStatus::of_signal(signal.as_raw());
            assert_eq!(i32::from(status.code()), 128 + signal.as_raw(), "{name}");
            assert!(
                status.meaning().contains(name),
                "exit {}'s meaning names {name}",
                status.code()
            );
        }
        assert_eq!(
            signal_name(Signal::PROF.as_raw()),
            format!("signal {}", Signal::PROF.as_raw())
        );
    }

    #[test]
    fn the_board_says_where_each_process_was_left() {
        let interrupt = Interrupt::never();
        interrupt.track(vec![
            Place {
                pid: 7,
                name: "a".into(),
                state: Some(ProcessState::Running),
                in_flight: None,
            },
            Place {
                pid: 8,
                name: "b".into(),
                state: Some(ProcessState::Running),
                in_flight: None,
            },
        ]);
        interrupt.note(7, Some(DriverCall::Lock), None);
        interrupt.note(7, None, Some(ProcessState::Locked));
        interrupt.note(8, Some(DriverCall::Lock), None);
        let text = abandon_text(Signal::TERM.as_raw(), &interrupt.places(), true);
        assert!(text.starts_with("SIGTERM again"), "{text}");
        assert!(text.contains("PID 7 (a): locked\n"), "{text}");
        assert!(
            text.contains("PID 8 (b): running (lock was in flight"),
            "{text}"
        );
        assert!(
            text.contains("`cudackpt recover`") && text.contains("`cudackpt state 7 8`"),
            "{text}"
        );
        let one_call = abandon_text(Signal::TERM.as_raw(), &interrupt.places(), false);
        assert!(
            !one_call.contains("recover") && one_call.contains("no intent record"),
            "{one_call}"
        );
    }
}
