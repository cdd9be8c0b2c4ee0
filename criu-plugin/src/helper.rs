//! The plugin's helper: a process forked from CRIU at the first hook that
//! acts, which runs every hook of the run and `fini` and calls the driver.
//!
//! CRIU's own process must stay single-threaded: it enters a container's
//! mount namespace with `setns` to dump its file systems, which the kernel
//! refuses (EINVAL) to a process whose threads share its root. The driver
//! library, NVML and cudackpt's side-by-side group calls all start
//! threads, so they live in the helper, which dies with CRIU (a parent
//! death signal: a CRIU killed mid-dump leaves its intent record to
//! `cudackpt recover`, as before). The helper asks CRIU's half for what
//! only CRIU's process may do: its images' inventory, and ptrace of the
//! restore threads CRIU holds stopped.

use cudackpt::internal::criu_plugin::{HookAnswer, Host, Level, Plugin, Said};

use crate::host::{self, Criu, RunningThreads};
use crate::link::{decode_reply, encode_reply, Ask, Hook, Link, Reply, Request};

/// CRIU's half of a running helper.
pub struct Helper {
    pid: i32,
    link: Link,
    /// Restore threads let run for the helper.
    running: RunningThreads,
}

impl Helper {
    pub fn new(pid: i32, link: Link) -> Helper {
        Helper {
            pid,
            link,
            running: RunningThreads::default(),
        }
    }

    /// Hands `request` to the helper and does what it asks until it
    /// answers: CRIU's return code, or why the helper could not answer.
    pub fn call(&mut self, criu: &Criu, request: &Request) -> Result<i32, String> {
        let answered = self.serve(criu, request);
        if answered.is_err() {
            // A helper gone mid-hook may have left restore threads running.
            self.running.stop_again().ok();
        }
        answered
    }

    fn serve(&mut self, criu: &Criu, request: &Request) -> Result<i32, String> {
        self.link.send(&request.encode())?;
        loop {
            let ask = Ask::decode(&self.link.receive()?)?;
            let reply = match ask {
                Ask::Answer(code) => return Ok(code),
                Ask::AddToInventory => criu
                    .add_to_inventory()
                    .then_some(())
                    .ok_or_else(|| "CRIU did not take the inventory mark".to_string()),
                Ask::LetRun(tids) => self.running.let_run(&tids),
                Ask::StopAgain => self.running.stop_again(),
            };
            self.link.send(&encode_reply(&reply))?;
        }
    }

    /// The helper's `fini`, then its end: waited for, so no zombie of
    /// CRIU's is left and nothing of the plugin outlives CRIU's run.
    pub fn finish(mut self, criu: &Criu, ret: i32) {
        if let Err(why) = self.call(criu, &Request::Fini { ret }) {
            criu.log(Level::Error, &self.gone(&why));
        }
        self.running.stop_again().ok();
        let Helper { pid, link, .. } = self;
        drop(link);
        host::reap(pid);
    }

    /// Why a hook failed when the helper did not answer.
    pub fn gone(&self, why: &str) -> String {
        format!("the plugin's helper (PID {}) did not answer: {why}; `cudackpt ps` shows where each CUDA process is, and `cudackpt recover` puts back a group its intent record names", self.pid)
    }
}

/// The helper's side of `Host`: CRIU's log is written directly (the
/// helper holds CRIU's log file, as CRIU's own children do); the rest is
/// asked of CRIU's half.
struct InHelper<'a> {
    criu: &'a Criu,
    link: std::cell::RefCell<Link>,
}

impl InHelper<'_> {
    fn ask(&self, ask: Ask) -> Reply {
        let mut link = self.link.borrow_mut();
        link.send(&ask.encode())?;
        decode_reply(&link.receive()?)?
    }
}

impl Host for InHelper<'_> {
    fn log(&self, level: Level, line: &str) {
        self.criu.log(level, line);
    }

    fn say(&self, said: Said<'_>) {
        self.criu.say(said);
    }

    fn add_to_inventory(&self) -> bool {
        self.ask(Ask::AddToInventory).is_ok()
    }

    fn take_from_inventory(&self) -> bool {
        false // only `init` asks, in CRIU's half
    }

    fn leave_running(&self) -> bool {
        self.criu.leave_running()
    }

    fn freeze_by_interrupts(&self) -> bool {
        false // only `init` asks, in CRIU's half
    }

    fn with_restore_threads_running(
        &self,
        tids: &[i32],
        work: &mut dyn FnMut(),
    ) -> Result<(), String> {
        let started = self.ask(Ask::LetRun(tids.to_vec()));
        if started.is_ok() {
            work();
        }
        let stopped = self.ask(Ask::StopAgain);
        started.and(stopped)
    }
}

/// Runs `work`; a panic in it is said in CRIU's log (a bug), and `None`.
pub fn caught<T>(host: &dyn Host, what: &str, work: impl FnOnce() -> T) -> Option<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
        .map_err(|_| {
            host.log(
                Level::Error,
                &format!("{what} stopped on an internal error (a bug: please report it with the lines above); `cudackpt ps` shows where each CUDA process is, and `cudackpt recover` puts back a group its intent record names"),
            )
        })
        .ok()
}

/// The helper's life: runs each request CRIU's half sends on `plugin`
/// until `fini`, or until CRIU's half is gone. Returns its exit status.
pub fn serve(mut plugin: Plugin, criu: &Criu, link: Link) -> i32 {
    let host = InHelper {
        criu,
        link: std::cell::RefCell::new(link),
    };
    loop {
        let Ok(line) = host.link.borrow_mut().receive() else {
            return 0; // CRIU's half ended: nothing more to do
        };
        let request = match Request::decode(&line) {
            Ok(request) => request,
            Err(why) => {
                criu.log(Level::Error, &why);
                return 1;
            }
        };
        let code = match request {
            Request::Hook { hook, pid } => {
                let answer = caught(&host, hook.name(), || match hook {
                    Hook::PauseDevices => plugin.pause_devices(&host, pid),
                    Hook::CheckpointDevices => plugin.checkpoint_devices(&host, pid),
                    Hook::ResumeDevicesLate => plugin.resume_devices_late(&host, pid),
                });
                host::code(answer.unwrap_or(HookAnswer::Failed))
            }
            Request::Fini { ret } => {
                caught(&host, "fini", || plugin.fini(&host, ret));
                let _ = host.link.borrow_mut().send(&Ask::Answer(0).encode());
                return 0;
            }
        };
        if host
            .link
            .borrow_mut()
            .send(&Ask::Answer(code).encode())
            .is_err()
        {
            return 0;
        }
    }
}
