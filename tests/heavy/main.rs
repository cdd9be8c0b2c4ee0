//! The heavy integration tests: hundreds of processes, or loops of signals.
//! A test binary of their own, because cargo runs test binaries one after
//! another: their load never lands beside the timing assertions of
//! `tests/cli`. They use the same fixture and wire contract.

#[allow(dead_code)]
#[path = "../cli/support/mod.rs"]
mod support;
#[allow(unused_imports)]
pub(crate) use support::{schema_check, wire};

mod crash;
mod limits;
mod signals;
