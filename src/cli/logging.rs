//! Tracing to stderr, switched on by -v/-vv or RUST_LOG. Off by default so
//! start-up stays cheap: no subscriber is built unless asked for.

use tracing_subscriber::EnvFilter;

pub fn init(verbosity: u8) {
    let from_env = crate::environment::os(crate::environment::RUST_LOG);
    if verbosity == 0 && from_env.is_none() {
        return;
    }
    let filter = if let Some(directives) = from_env {
        EnvFilter::new(directives.to_string_lossy())
    } else if verbosity == 1 {
        EnvFilter::new("cudackpt=debug")
    } else {
        EnvFilter::new("trace")
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(crate::output::stderr::log_writer)
        .with_ansi(crate::output::stderr::colours())
        .with_target(false)
        .try_init();
}
