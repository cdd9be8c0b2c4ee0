//! A process in words: how a message names one, and why one that is
//! stopped cannot be acted on.

use crate::vocabulary::failure::{Fault, FaultKind};

/// `PID 4242 (python3)`, or `PID 4242` when the name is unknown.
pub fn describe_process(pid: i32, name: Option<&str>) -> String {
    match name {
        // Printable: a newline in a name must not start a line of its own.
        Some(name) => format!("PID {pid} ({})", crate::targets::name::printable(name)),
        None => format!("PID {pid}"),
    }
}

/// A target whose restore thread is stopped: every driver call but the
/// restore-thread query would wait until it runs again (measured on driver
/// 580: GetState blocks on a SIGSTOPped process), so nothing is asked.
pub fn process_stopped(pid: i32, name: Option<&str>) -> Fault {
    Fault::new(
        FaultKind::ProcessStopped,
        format!(
            "{} is stopped (SIGSTOP, a debugger or CRIU's freeze), and the driver cannot answer for it until it runs",
            describe_process(pid, name)
        ),
        format!("continue it (`kill -CONT {pid}`), or let whoever stopped it finish"),
    )
}
