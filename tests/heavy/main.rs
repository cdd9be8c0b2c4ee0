//! The heavy integration tests: hundreds of processes, or loops of signals.
//! A test binary of their own, because cargo runs test binaries one after
//! another: their load never lands beside the timing assertions of
//! `tests/cli`. They use the same fixture and wire contract.

#[path = "../cli/schema_check.rs"]
mod schema_check;
#[allow(dead_code)]
#[path = "../cli/support.rs"]
mod support;
#[allow(dead_code)]
#[path = "../cli/wire.rs"]
mod wire;

mod crash;
mod limits;
mod signals;
