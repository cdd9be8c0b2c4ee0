//! The bottom fence: what the plugin calls of CRIU and of the kernel on
//! CRIU's behalf. The functions CRIU exports to its plugins (its log, its
//! images' inventory, its options), looked up in the program; a hook's
//! answer in CRIU's terms; the helper's fork (it runs a closure in the
//! child, which never returns into CRIU) and reaping; and ptrace of the
//! restore threads CRIU holds stopped. With `entries.rs`, the only
//! `unsafe` of this crate.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::ptr;

use cudackpt::internal::criu_plugin::{
    criu_version, version_not_said, HookAnswer, Host, Level, Said, NAME,
};

/// The plugin's name, as CRIU's inventory records it.
const NAME_C: &CStr = c"cudackpt";
/// compel's `TASK_ALIVE`: `opts.final_state` of a `--leave-running` dump.
const TASK_ALIVE: c_int = 1;

/// A hook's answer in CRIU's terms.
pub(crate) fn code(answer: HookAnswer) -> c_int {
    match answer {
        HookAnswer::Done => 0,
        HookAnswer::NotMine => -libc::ENOTSUP,
        HookAnswer::Failed => -1,
    }
}

/// Forks a child that runs `child` and ends with its status, never
/// returning into CRIU; first it closes `not_its` (the parent's ends of
/// what they share) and dies with CRIU (a parent death signal). The
/// child's PID.
pub(crate) fn fork(not_its: &[i32], child: impl FnOnce() -> i32) -> Result<i32, String> {
    // SAFETY: getpid has no preconditions.
    let criu_pid = unsafe { libc::getpid() };
    // SAFETY: CRIU's process is single-threaded when it calls a plugin (the
    // helper exists to keep it so), so the child may run any code; it ends
    // with _exit, never returning into CRIU or running its exit handlers.
    match unsafe { libc::fork() } {
        -1 => Err(format!("fork: {}", std::io::Error::last_os_error())),
        0 => {
            for &fd in not_its {
                // SAFETY: a descriptor of the parent's the child does not
                // use; closing it touches nothing else.
                unsafe { libc::close(fd) };
            }
            // SAFETY: prctl(PR_SET_PDEATHSIG, SIGKILL) takes integers; the
            // check after it closes the race with a CRIU already gone.
            let orphaned = unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1
                    || libc::getppid() != criu_pid
            };
            let status = if orphaned { 1 } else { child() };
            // SAFETY: ends the child without CRIU's atexit handlers or
            // buffered output, which belong to CRIU's process.
            unsafe { libc::_exit(status) }
        }
        pid => Ok(pid),
    }
}

/// Waits for the helper's end, SIGCHLD blocked meanwhile as CRIU's own
/// `cr_system` does: a restore's SIGCHLD handler takes any child's end
/// for a restored task's failure.
pub(crate) fn reap(pid: i32) {
    // SAFETY: sigset_t is plain data; the calls fill and read live locals.
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut block);
        libc::sigaddset(&raw mut block, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &raw const block, &raw mut before);
        let mut status: c_int = 0;
        // A handler of CRIU's may have reaped it already (ECHILD): gone either way.
        while libc::waitpid(pid, &raw mut status, 0) == -1
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
        {}
        libc::sigprocmask(libc::SIG_SETMASK, &raw const before, ptr::null_mut());
    }
}

type PrintOnLevel = unsafe extern "C" fn(c_uint, *const c_char, ...);
type AddInventoryPlugin = unsafe extern "C" fn(*const c_char) -> c_int;
type CheckAndRemoveInventoryPlugin = unsafe extern "C" fn(*const c_char, usize) -> bool;
type SetInterruptOnlyMode = unsafe extern "C" fn();

/// The CRIU this library was loaded into: the functions it exports to its
/// plugins, looked up in the program (none when it is not CRIU).
pub(crate) struct Criu {
    print_on_level: Option<PrintOnLevel>,
    add_inventory_plugin: Option<AddInventoryPlugin>,
    check_and_remove_inventory_plugin: Option<CheckAndRemoveInventoryPlugin>,
    set_compel_interrupt_only_mode: Option<SetInterruptOnlyMode>,
    opts: *const c_int,
}

/// `dlsym(RTLD_DEFAULT, name)`.
fn symbol(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks
    // the name up in the loaded objects.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) }
}

// SAFETY: function pointers into CRIU and a pointer to its static `opts`,
// only read; CRIU calls its plugins from one thread.
unsafe impl Send for Criu {}
// SAFETY: as above.
unsafe impl Sync for Criu {}

impl Criu {
    /// The CRIU this library was loaded into, looked up on the first hook
    /// (every hook of every process asks).
    pub(crate) fn get() -> &'static Criu {
        static CRIU: std::sync::OnceLock<Criu> = std::sync::OnceLock::new();
        CRIU.get_or_init(Criu::find)
    }

    fn find() -> Criu {
        let print = symbol(c"print_on_level");
        let add = symbol(c"add_inventory_plugin");
        let check = symbol(c"check_and_remove_inventory_plugin");
        let interrupts = symbol(c"set_compel_interrupt_only_mode");
        Criu {
            // SAFETY: CRIU 4.x exports these with these C signatures
            // (criu/include/log.h, criu/include/image.h); a non-null
            // pointer is the function.
            print_on_level: (!print.is_null())
                .then(|| unsafe { std::mem::transmute::<*mut c_void, PrintOnLevel>(print) }),
            // SAFETY: as above.
            add_inventory_plugin: (!add.is_null())
                .then(|| unsafe { std::mem::transmute::<*mut c_void, AddInventoryPlugin>(add) }),
            // SAFETY: as above.
            check_and_remove_inventory_plugin: (!check.is_null()).then(|| unsafe {
                std::mem::transmute::<*mut c_void, CheckAndRemoveInventoryPlugin>(check)
            }),
            // SAFETY: as above (criu/include/seize.h).
            set_compel_interrupt_only_mode: (!interrupts.is_null()).then(|| unsafe {
                std::mem::transmute::<*mut c_void, SetInterruptOnlyMode>(interrupts)
            }),
            opts: symbol(c"opts").cast::<c_int>().cast_const(),
        }
    }

    /// CRIU's version, as `/proc/self/exe --version` says it: CRIU does not
    /// tell a plugin its ABI, so the plugin asks which CRIU it is in.
    pub(crate) fn version(&self) -> Option<String> {
        // Not CRIU (no log function of CRIU's): nothing to ask.
        self.print_on_level?;
        let asked = std::process::Command::new("/proc/self/exe")
            .arg("--version")
            .stdin(std::process::Stdio::null())
            .output();
        // Why there is no version goes to CRIU's log before the refusal: a
        // CRIU that cannot run again from its own directory (a relative
        // LD_LIBRARY_PATH) says so on its stderr.
        let why = match &asked {
            Err(e) => format!("could not run `/proc/self/exe --version`: {e}"),
            Ok(output) => match criu_version(&String::from_utf8_lossy(&output.stdout)) {
                Some(version) => return Some(version.to_string()),
                None => version_not_said(&output.status.to_string(), &output.stderr),
            },
        };
        self.log(Level::Warn, &why);
        None
    }
}

impl Host for Criu {
    fn log(&self, level: Level, line: &str) {
        let (criu_level, prefix) = match level {
            Level::Error => (1, "Error (cudackpt plugin): "),
            Level::Warn => (2, "Warn  (cudackpt plugin): "),
            Level::Info => (3, ""),
            Level::Debug => (4, ""),
        };
        // One line of CRIU's log, whatever it carries (a file's name a user
        // chose, a process's): every control character escaped, the NUL
        // that would cut it short, a newline that would start a line of
        // its own, a terminal's escapes.
        let line = cudackpt::internal::printable(line);
        let text = format!("{prefix}{NAME}: {line}\n");
        let Some(print) = self.print_on_level else {
            // Not CRIU: the program's stderr is all there is.
            eprint!("{text}");
            return;
        };
        let Ok(text) = CString::new(text) else { return };
        // SAFETY: print_on_level(level, format, ...) with the format "%s"
        // and one NUL-terminated string.
        unsafe { print(criu_level, c"%s".as_ptr(), text.as_ptr()) };
    }

    fn say(&self, said: Said<'_>) {
        for (level, line) in cudackpt::internal::criu_log_lines(&said) {
            self.log(level, &line);
        }
    }

    fn add_to_inventory(&self) -> bool {
        let Some(add) = self.add_inventory_plugin else {
            return false;
        };
        // SAFETY: the plugin's name is a static NUL-terminated string,
        // which CRIU copies.
        unsafe { add(NAME_C.as_ptr()) == 0 }
    }

    fn take_from_inventory(&self) -> bool {
        let Some(check) = self.check_and_remove_inventory_plugin else {
            return false;
        };
        // SAFETY: the name and its length, which CRIU compares.
        unsafe { check(NAME_C.as_ptr(), NAME.len()) }
    }

    fn leave_running(&self) -> bool {
        if self.opts.is_null() {
            return false;
        }
        // SAFETY: `opts` is CRIU's `struct cr_options`, whose first member
        // is `int final_state` in every CRIU 4.x.
        unsafe { *self.opts == TASK_ALIVE }
    }

    fn freeze_by_interrupts(&self) -> bool {
        let Some(set) = self.set_compel_interrupt_only_mode else {
            return false;
        };
        // SAFETY: CRIU's `void set_compel_interrupt_only_mode(void)`, which
        // sets a flag.
        unsafe { set() };
        true
    }

    fn with_restore_threads_running(
        &self,
        tids: &[i32],
        work: &mut dyn FnMut(),
    ) -> Result<(), String> {
        let mut running = RunningThreads::default();
        let started = running.let_run(tids);
        if started.is_ok() {
            work();
        }
        let stopped = running.stop_again();
        started.and(stopped)
    }
}

/// The restore threads CRIU's thread has let run, with the signal masks
/// to put back when it stops them again.
#[derive(Default)]
pub(crate) struct RunningThreads(Vec<(i32, SigMask)>);

impl RunningThreads {
    /// Lets each of `tids` run, stopping at the first that cannot (those
    /// let run before it stay here, to be stopped again).
    pub(crate) fn let_run(&mut self, tids: &[i32]) -> Result<(), String> {
        for &tid in tids {
            self.0.push((tid, let_run(tid)?));
        }
        Ok(())
    }

    /// Stops again every thread let run: the first failure, once all
    /// were tried.
    pub(crate) fn stop_again(&mut self) -> Result<(), String> {
        let mut failed = None;
        for (tid, mask) in std::mem::take(&mut self.0) {
            if let Err(why) = stop_again(tid, mask) {
                failed.get_or_insert(why);
            }
        }
        failed.map_or(Ok(()), Err)
    }
}

/// A thread's signal mask, as ptrace reads and writes it.
type SigMask = u64;

fn ptrace(request: c_uint, tid: i32, addr: usize, data: usize) -> Result<(), String> {
    // SAFETY: the requests used here take an integer or a pointer to a
    // live local as `data`; the kernel checks that this thread traces `tid`.
    let result = unsafe { libc::ptrace(request, tid, addr, data) };
    if result == -1 {
        Err(std::io::Error::last_os_error().to_string())
    } else {
        Ok(())
    }
}

/// Lets CRIU's stopped restore thread `tid` run, every signal but SIGTRAP
/// blocked (as CRIU's own plugin does): its mask before, to put back.
fn let_run(tid: i32) -> Result<SigMask, String> {
    let fail =
        |what: &str, why: String| format!("could not let restore thread {tid} run ({what}: {why})");
    let mut saved: SigMask = 0;
    let size = std::mem::size_of::<SigMask>();
    ptrace(libc::PTRACE_GETSIGMASK, tid, size, &raw mut saved as usize)
        .map_err(|e| fail("its signal mask", e))?;
    let block: SigMask = !(1 << (libc::SIGTRAP - 1));
    ptrace(
        libc::PTRACE_SETSIGMASK,
        tid,
        size,
        &raw const block as usize,
    )
    .map_err(|e| fail("blocking its signals", e))?;
    ptrace(libc::PTRACE_SETOPTIONS, tid, 0, 0).map_err(|e| fail("clearing its options", e))?;
    ptrace(libc::PTRACE_CONT, tid, 0, 0).map_err(|e| fail("continuing it", e))?;
    Ok(saved)
}

/// Stops restore thread `tid` again for CRIU, with its options and mask as
/// CRIU left them.
fn stop_again(tid: i32, saved: SigMask) -> Result<(), String> {
    let fail = |what: &str, why: String| {
        format!("could not stop restore thread {tid} again ({what}: {why}); the process may be in a strange state")
    };
    ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0).map_err(|e| fail("interrupting it", e))?;
    wait_for_stop(tid).map_err(|e| fail("waiting for it", e))?;
    let options = (libc::PTRACE_O_SUSPEND_SECCOMP | libc::PTRACE_O_TRACESYSGOOD) as usize;
    ptrace(libc::PTRACE_SETOPTIONS, tid, 0, options).map_err(|e| fail("its options", e))?;
    let size = std::mem::size_of::<SigMask>();
    ptrace(
        libc::PTRACE_SETSIGMASK,
        tid,
        size,
        &raw const saved as usize,
    )
    .map_err(|e| fail("its signal mask", e))
}

/// Waits for `tid`'s interrupt stop, passing on any signal it stops for
/// first.
fn wait_for_stop(tid: i32) -> Result<(), String> {
    loop {
        let mut status: c_int = 0;
        // SAFETY: wait4 writes the status into a live local.
        let waited = unsafe { libc::wait4(tid, &raw mut status, libc::__WALL, ptr::null_mut()) };
        if waited == -1 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        if !libc::WIFSTOPPED(status) {
            return Err(format!("it ended (status {status:#x})"));
        }
        // SAFETY: siginfo_t is plain data; zeroed is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        ptrace(libc::PTRACE_GETSIGINFO, tid, 0, &raw mut info as usize)?;
        if info.si_code >> 8 == libc::PTRACE_EVENT_STOP {
            return Ok(());
        }
        ptrace(libc::PTRACE_CONT, tid, 0, info.si_signo as usize)?;
    }
}
