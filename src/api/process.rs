//! One CUDA process and the driver's operations on it, as NVIDIA's Python
//! API offers them (`cuda.core.checkpoint.Process`), with two things added:
//! the process is held by a pidfd from [`Process::open`] on, so a PID that
//! a later process reuses is never acted on; and a process whose threads
//! are stopped is refused rather than waited on forever.

use std::time::{Duration, Instant};

use crate::driver::{code, CallError, CheckpointApi, CudaError, GpuPair, ProcessState};
use crate::ops::execute::cannot_answer;
use crate::targets::process::{check_target, IdentityLost, Privileges, Target, TargetError};
use crate::vocabulary::timeout::Timeout;

/// A CUDA process, opened by PID and held until dropped.
///
/// Each method is one driver call (or, for [`suspend`](Process::suspend),
/// [`resume`](Process::resume) and [`toggle`](Process::toggle), two, with
/// the first undone when the second fails). None takes cudackpt's per-PID
/// locks, writes its crash journal, or refuses a checkpoint the driver
/// could never restore: [`Group`](crate::Group) does all three, and is
/// what the `cudackpt` command runs.
///
/// ```
/// # include!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/doc/support.rs"));
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let fake = Fake::start();
/// # let (libcuda, pid) = (fake.libcuda(), fake.pid());
/// use cudackpt::{Driver, Process, ProcessState};
///
/// // `None` loads the host's libcuda.so.1; these examples load a fake.
/// let driver = Driver::load(libcuda)?;
/// let process = Process::open(&driver, pid)?;
/// assert_eq!(process.state()?, ProcessState::Running);
///
/// process.suspend(None)?;
/// assert_eq!(process.state()?, ProcessState::Checkpointed);
/// process.resume(&[])?;
/// assert_eq!(process.state()?, ProcessState::Running);
/// # Ok(())
/// # }
/// ```
pub struct Process<'d> {
    api: &'d dyn CheckpointApi,
    target: Target,
}

/// What [`Process::try_lock`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a lock that timed out leaves the process running"]
pub enum TryLock {
    /// The process is locked: its GPU work finished and no new work starts.
    Locked,
    /// Its GPU work did not finish within the timeout; it is still running.
    TimedOut,
}

/// Why an operation on a [`Process`] (or opening one) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The PID names nothing that may be acted on: no process, a thread, a
    /// zombie, or another user's process without the privileges for it.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// The process opened has exited, or its PID now names another one.
    #[error(transparent)]
    Gone(#[from] IdentityLost),
    /// Its main thread and its restore thread are stopped (SIGSTOP, a
    /// debugger, a frozen cgroup): the driver would wait for them instead
    /// of answering.
    #[error("PID {pid} is stopped, so the driver cannot answer for it; continue it (kill -CONT {pid}) or thaw its cgroup, then try again")]
    Stopped {
        /// The process.
        pid: i32,
    },
    /// The driver failed the call; the process is where the driver left
    /// it (for a wrong state, where it was: see [`CudaError`]).
    #[error("PID {pid}: {source}")]
    Driver {
        /// The process.
        pid: i32,
        /// The call and the driver's answer.
        #[source]
        source: CallError,
    },
    /// A lock with a timeout did not get the process in time (a suspend or
    /// a toggle); it is still running.
    #[error("PID {pid} could not be locked within {timeout:?}: its GPU work did not finish in time; it is still running")]
    LockTimedOut {
        /// The process.
        pid: i32,
        /// The timeout that passed.
        timeout: Duration,
    },
    /// The process is in a state the operation does not start from.
    #[error("PID {pid} is {state}: {operation} needs it running or checkpointed")]
    WrongState {
        /// The process.
        pid: i32,
        /// Where it is.
        state: ProcessState,
        /// What was asked.
        operation: &'static str,
    },
    /// [`Process::wait_for_state`]'s timeout passed first.
    #[error("PID {pid} is still {state} after {waited:?}; it did not become {expected}")]
    WaitTimedOut {
        /// The process.
        pid: i32,
        /// The state waited for.
        expected: ProcessState,
        /// The state it was last seen in.
        state: ProcessState,
        /// How long was waited.
        waited: Duration,
    },
    /// A step failed, and undoing the step before it failed too.
    #[error(
        "PID {pid}: {failed}; undoing what came before failed too ({undo}): it is left {}",
        left.map_or("in a state the driver would not say".to_string(), |state| state.to_string())
    )]
    RollbackFailed {
        /// The process.
        pid: i32,
        /// The step that failed.
        failed: CallError,
        /// The call that should have put the process back.
        undo: CallError,
        /// Where the process is left, when the driver could say.
        left: Option<ProcessState>,
    },
}

impl Error {
    /// The driver's answer, when the driver answered with an error code.
    pub fn cuda_error(&self) -> Option<CudaError> {
        match self {
            Error::Driver {
                source: CallError::Cuda { error, .. },
                ..
            }
            | Error::RollbackFailed {
                failed: CallError::Cuda { error, .. },
                ..
            } => Some(*error),
            _ => None,
        }
    }
}

/// How often [`Process::wait_for_state`] asks, at most: fast enough to see
/// a short lock, slow enough to cost the driver nothing.
const LONGEST_POLL: Duration = Duration::from_millis(50);

impl<'d> Process<'d> {
    /// Opens process `pid` through `api` (a loaded [`Driver`](crate::Driver)):
    /// checks that it is a live process (not a thread or a zombie) that
    /// this caller may act on, and holds it by a pidfd from then on. Makes
    /// no driver call.
    pub fn open(api: &'d dyn CheckpointApi, pid: i32) -> Result<Process<'d>, Error> {
        let target = check_target(pid, &Privileges::current(), true)?;
        Ok(Process { api, target })
    }

    /// Its PID.
    pub fn pid(&self) -> i32 {
        self.target.pid
    }

    /// Its command name (`/proc/PID/comm`) when opened; planted text, so
    /// escape it before printing it to a terminal.
    pub fn name(&self) -> &str {
        &self.target.name
    }

    /// Its checkpoint state (`cuCheckpointProcessGetState`).
    pub fn state(&self) -> Result<ProcessState, Error> {
        self.answerable()?;
        self.call(|api, pid| api.get_state(pid))
    }

    /// The id of the thread that restores it (CRIU's plugin names it);
    /// answers even for a stopped process.
    pub fn restore_thread_id(&self) -> Result<i32, Error> {
        self.target.still_the_same()?;
        self.call(|api, pid| api.restore_thread_id(pid))
    }

    /// Locks it, waiting as long as its GPU work takes: running → locked.
    pub fn lock(&self) -> Result<(), Error> {
        self.answerable()?;
        self.call(|api, pid| api.lock(pid, 0))
    }

    /// Locks it if its GPU work finishes within `timeout` (rounded up to a
    /// millisecond, at least one: the driver reads 0 as no limit).
    pub fn try_lock(&self, timeout: Duration) -> Result<TryLock, Error> {
        self.answerable()?;
        match self
            .api
            .lock(self.pid(), Timeout::from_duration(timeout).as_millis())
        {
            Ok(()) => Ok(TryLock::Locked),
            Err(CallError::Cuda { error, .. }) if error.is(code::NOT_READY) => {
                Ok(TryLock::TimedOut)
            }
            Err(source) => Err(self.driver_error(source)),
        }
    }

    /// Copies its GPU memory to host memory and releases the GPUs:
    /// locked → checkpointed.
    pub fn checkpoint(&self) -> Result<(), Error> {
        self.answerable()?;
        self.call(|api, pid| api.checkpoint(pid))
    }

    /// Brings its GPU memory back: checkpointed → locked. `map` moves it
    /// between GPUs (empty: onto the GPUs it left); the driver needs every
    /// GPU of this host to receive exactly one (docs/driver-facts.md, F3).
    pub fn restore(&self, map: &[GpuPair]) -> Result<(), Error> {
        self.answerable()?;
        self.call(|api, pid| api.restore(pid, map))
    }

    /// Lets it run again: locked → running.
    pub fn unlock(&self) -> Result<(), Error> {
        self.answerable()?;
        self.call(|api, pid| api.unlock(pid))
    }

    /// Lock, then checkpoint: running → checkpointed. `lock_timeout`
    /// bounds the wait for its GPU work (`None`: as long as it takes). A
    /// checkpoint that fails is undone: the process runs again.
    pub fn suspend(&self, lock_timeout: Option<Duration>) -> Result<(), Error> {
        match lock_timeout {
            None => self.lock()?,
            Some(timeout) => {
                if self.try_lock(timeout)? == TryLock::TimedOut {
                    return Err(Error::LockTimedOut {
                        pid: self.pid(),
                        timeout,
                    });
                }
            }
        }
        self.then_or_undo(|api, pid| api.checkpoint(pid), |api, pid| api.unlock(pid))
    }

    /// Restore through `map`, then unlock: checkpointed → running. A
    /// failed restore leaves it checkpointed, to be tried again.
    pub fn resume(&self, map: &[GpuPair]) -> Result<(), Error> {
        self.restore(map)?;
        self.unlock()
    }

    /// Suspends a running process, resumes a checkpointed one in place;
    /// answers the state it is left in.
    pub fn toggle(&self, lock_timeout: Option<Duration>) -> Result<ProcessState, Error> {
        match self.state()? {
            ProcessState::Running => self.suspend(lock_timeout)?,
            ProcessState::Checkpointed => self.resume(&[])?,
            state => {
                return Err(Error::WrongState {
                    pid: self.pid(),
                    state,
                    operation: "toggle",
                })
            }
        }
        self.state()
    }

    /// Waits until it is in `expected`, for at most `timeout`; answers how
    /// long that took.
    pub fn wait_for_state(
        &self,
        expected: ProcessState,
        timeout: Duration,
    ) -> Result<Duration, Error> {
        let started = Instant::now();
        let mut interval = Duration::from_millis(2);
        loop {
            let state = self.state()?;
            let waited = started.elapsed();
            if state == expected {
                return Ok(waited);
            }
            if waited >= timeout {
                return Err(Error::WaitTimedOut {
                    pid: self.pid(),
                    expected,
                    state,
                    waited,
                });
            }
            std::thread::sleep(interval.min(timeout - waited));
            interval = (interval * 2).min(LONGEST_POLL);
        }
    }

    /// The process is still the one opened, and the driver can answer for
    /// it.
    fn answerable(&self) -> Result<(), Error> {
        self.target.still_the_same()?;
        if cannot_answer(self.api, self.pid()) {
            return Err(Error::Stopped { pid: self.pid() });
        }
        Ok(())
    }

    fn call<T>(
        &self,
        call: impl FnOnce(&dyn CheckpointApi, i32) -> Result<T, CallError>,
    ) -> Result<T, Error> {
        call(self.api, self.pid()).map_err(|source| self.driver_error(source))
    }

    fn driver_error(&self, source: CallError) -> Error {
        Error::Driver {
            pid: self.pid(),
            source,
        }
    }

    /// Runs `step`; if it fails, runs `undo` and reports both.
    fn then_or_undo(
        &self,
        step: impl FnOnce(&dyn CheckpointApi, i32) -> Result<(), CallError>,
        undo: impl FnOnce(&dyn CheckpointApi, i32) -> Result<(), CallError>,
    ) -> Result<(), Error> {
        let Err(failed) = step(self.api, self.pid()) else {
            return Ok(());
        };
        match undo(self.api, self.pid()) {
            Ok(()) => Err(self.driver_error(failed)),
            Err(undo) => Err(Error::RollbackFailed {
                pid: self.pid(),
                failed,
                undo,
                left: self.api.get_state(self.pid()).ok(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::model::Model;
    use ProcessState::*;

    /// A live process to open, killed and reaped when dropped.
    struct Sleeper(std::process::Child);

    impl Sleeper {
        fn start() -> Sleeper {
            let child = std::process::Command::new("sleep")
                .arg("600")
                .spawn()
                .expect("sleep starts");
            Sleeper(child)
        }

        fn pid(&self) -> i32 {
            i32::try_from(self.0.id()).expect("a PID")
        }
    }

    impl Drop for Sleeper {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn cuda_error(code: i32) -> Option<CudaError> {
        Some(CudaError { code })
    }

    #[test]
    fn suspend_and_resume_are_the_driver_calls_in_order() {
        let sleeper = Sleeper::start();
        let model = Model::with(&[(sleeper.pid(), Running)]);
        let process = Process::open(&model, sleeper.pid()).expect("opens");
        process.suspend(None).expect("suspends");
        assert_eq!(model.state(sleeper.pid()), Checkpointed);
        process.resume(&[]).expect("resumes");
        assert_eq!(model.state(sleeper.pid()), Running);
        let pid = sleeper.pid();
        assert_eq!(
            model.calls(),
            [
                format!("lock {pid}"),
                format!("checkpoint {pid}"),
                format!("restore {pid}"),
                format!("unlock {pid}")
            ]
        );
        assert_eq!(*model.lock_timeouts.lock().expect("model"), [0]);
    }

    #[test]
    fn a_failed_checkpoint_is_undone_and_a_failed_undo_says_where_it_left_the_process() {
        let sleeper = Sleeper::start();
        let pid = sleeper.pid();
        let model = Model::with(&[(pid, Running)]).failing(pid, "checkpoint", 801);
        let process = Process::open(&model, pid).expect("opens");
        let error = process.suspend(None).expect_err("the checkpoint fails");
        assert!(matches!(error, Error::Driver { .. }), "{error}");
        assert_eq!(error.cuda_error(), cuda_error(801));
        assert_eq!(model.state(pid), Running, "the lock was undone");

        let model = Model::with(&[(pid, Running)])
            .failing(pid, "checkpoint", 801)
            .failing(pid, "unlock", 999);
        let process = Process::open(&model, pid).expect("opens");
        let error = process.suspend(None).expect_err("both fail");
        let Error::RollbackFailed { left, .. } = &error else {
            panic!("not a failed rollback: {error}");
        };
        assert_eq!(*left, Some(Locked));
        assert!(error.to_string().contains("left locked"), "{error}");
    }

    #[test]
    fn a_lock_that_times_out_leaves_the_process_running_and_nothing_else_is_tried() {
        let sleeper = Sleeper::start();
        let pid = sleeper.pid();
        let model = Model::with(&[(pid, Running)]).failing(pid, "lock", code::NOT_READY);
        let process = Process::open(&model, pid).expect("opens");
        assert_eq!(
            process
                .try_lock(Duration::from_millis(250))
                .expect("answers"),
            TryLock::TimedOut
        );
        let error = process
            .suspend(Some(Duration::from_secs(2)))
            .expect_err("times out");
        assert!(matches!(error, Error::LockTimedOut { .. }), "{error}");
        assert_eq!(
            model.calls(),
            [format!("lock {pid}"), format!("lock {pid}")]
        );
        assert_eq!(*model.lock_timeouts.lock().expect("model"), [250, 2000]);
        assert_eq!(model.state(pid), Running);
    }

    #[test]
    fn toggle_goes_both_ways_and_refuses_a_locked_process_without_a_call() {
        let sleeper = Sleeper::start();
        let pid = sleeper.pid();
        let model = Model::with(&[(pid, Running)]);
        let process = Process::open(&model, pid).expect("opens");
        assert_eq!(process.toggle(None).expect("suspends"), Checkpointed);
        assert_eq!(process.toggle(None).expect("resumes"), Running);
        process.lock().expect("locks");
        let before = model.calls().len();
        let error = process.toggle(None).expect_err("locked");
        assert!(
            matches!(error, Error::WrongState { state: Locked, .. }),
            "{error}"
        );
        assert_eq!(model.calls().len(), before, "no call changed anything");
    }

    #[test]
    fn wait_for_state_answers_when_it_is_there_and_says_where_it_stayed_when_not() {
        let sleeper = Sleeper::start();
        let pid = sleeper.pid();
        let model = Model::with(&[(pid, Running)]);
        let process = Process::open(&model, pid).expect("opens");
        process
            .wait_for_state(Running, Duration::ZERO)
            .expect("already there");
        let error = process
            .wait_for_state(Checkpointed, Duration::from_millis(30))
            .expect_err("never gets there");
        let Error::WaitTimedOut { state, waited, .. } = error else {
            panic!("not a wait timeout: {error}");
        };
        assert_eq!(state, Running);
        assert!(waited >= Duration::from_millis(30));
    }

    #[test]
    fn a_process_that_exited_is_never_acted_on() {
        let mut sleeper = Sleeper::start();
        let pid = sleeper.pid();
        let model = Model::with(&[(pid, Running)]);
        let process = Process::open(&model, pid).expect("opens");
        sleeper.0.kill().expect("kills");
        sleeper.0.wait().expect("reaps");
        for error in [
            process.lock().expect_err("gone"),
            process.state().map(|_| ()).expect_err("gone"),
            process.restore_thread_id().map(|_| ()).expect_err("gone"),
        ] {
            assert!(matches!(error, Error::Gone(_)), "{error}");
        }
        assert!(model.calls().is_empty());
        assert_eq!(model.state(pid), Running);
    }

    #[test]
    fn a_stopped_process_is_refused_instead_of_waited_on() {
        let sleeper = Sleeper::start();
        let pid = sleeper.pid();
        let model = Model::with(&[(pid, Running)]);
        let process = Process::open(&model, pid).expect("opens");
        let signal = |name: &str| {
            let status = std::process::Command::new("kill")
                .args([name.to_string(), pid.to_string()])
                .status()
                .expect("kill runs");
            assert!(status.success());
        };
        signal("-STOP");
        let until = Instant::now() + Duration::from_secs(5);
        while !crate::targets::process::is_stopped(pid) {
            assert!(Instant::now() < until, "never stopped");
            std::thread::sleep(Duration::from_millis(2));
        }
        let error = process.lock().expect_err("stopped");
        assert!(matches!(error, Error::Stopped { .. }), "{error}");
        assert!(model.calls().is_empty(), "no lock was tried");
        signal("-CONT");
        let until = Instant::now() + Duration::from_secs(5);
        while crate::targets::process::is_stopped(pid) {
            assert!(Instant::now() < until, "never continued");
            std::thread::sleep(Duration::from_millis(2));
        }
        process.lock().expect("locks once it runs");
    }

    #[test]
    fn a_thread_id_is_not_a_process() {
        let model = Model::default();
        let (sender, receiver) = std::sync::mpsc::channel();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            sender
                .send(rustix::thread::gettid().as_raw_nonzero().get())
                .expect("sends");
            let _ = stopped.recv();
        });
        let tid = receiver.recv().expect("a thread id");
        let error = Process::open(&model, tid).err().expect("a thread");
        assert!(
            matches!(error, Error::Target(TargetError::Thread { .. })),
            "{error}"
        );
        drop(stop);
        thread.join().expect("joins");
    }
}
