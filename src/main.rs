//! Entry point: parse, set up logging, run, exit with the status the run
//! chose. Everything else lives in the library.

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(cudackpt::internal::cli_main().code())
}
