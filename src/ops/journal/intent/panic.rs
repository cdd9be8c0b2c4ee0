//! What a panic says it leaves behind: the intent record in flight (a
//! panic hook cannot reach the journal of the command it stops) and the
//! way back.

use std::path::{Path, PathBuf};

use crate::vocabulary::locked;

/// The intent this process has written and not yet removed, for the panic
/// report (a panic hook cannot reach the journal of the command it stops).
static IN_FLIGHT: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

pub(super) fn set_in_flight(path: Option<PathBuf>) {
    *locked(&IN_FLIGHT) = path;
}

/// Makes a panic say, after Rust's own message, what it leaves behind and
/// how to recover. The release build aborts on a panic (no unwinding), so
/// the record stays either way and the next cudackpt finds it.
pub fn report_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        // try_lock: the panicking thread may be the one holding it.
        let in_flight = IN_FLIGHT.try_lock().ok().and_then(|held| held.clone());
        crate::exit::last_words(&panic_advice(in_flight.as_deref()));
    }));
}

/// What a panic leaves, and what to run next (pure).
pub fn panic_advice(in_flight: Option<&Path>) -> String {
    let bug =
        "stopped on an internal error; this is a bug, please report it with the message above";
    match in_flight {
        Some(path) => format!(
            "{bug}. It was changing processes: its intent record {} names them and where each started; \
             every cudackpt refuses them (exit 10) until `cudackpt recover` puts them back",
            path.display()
        ),
        None => format!(
            "{bug}. It held no intent record (it had not started changing processes, or could not write one); \
             `cudackpt ps` shows where each CUDA process is"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_panic_report_names_the_record_and_the_way_back() {
        let path = std::path::Path::new("/run/cudackpt/intents/42.json");
        let advice = panic_advice(Some(path));
        assert!(advice.contains("/run/cudackpt/intents/42.json"), "{advice}");
        assert!(advice.contains("`cudackpt recover`"), "{advice}");
        assert!(advice.contains("this is a bug"), "{advice}");
        let advice = panic_advice(None);
        assert!(advice.contains("no intent record"), "{advice}");
        assert!(!advice.contains("recover`"), "{advice}");
    }
}
