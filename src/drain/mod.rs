//! The drain (cudackpt(1), DRAIN PROTOCOL), whole but for the pipeline's
//! stage: a process that speaks the protocol releases what the driver
//! cannot restore (NCCL communicators, CUDA IPC mappings) before its
//! checkpoint, and rebuilds it after. Its own floor, between `gpu` and
//! `ops`: it uses `targets`, `files`, `gpu` and `driver`, and nothing of
//! `ops`, whose stage (`ops::drain`) runs it for a command.
//!
//! - [`protocol`]: the protocol as data, its one source: the signals, the
//!   thread names that answer, the error memfd (pure; the Python client,
//!   the C header and the man page are tested against it).
//! - [`handshake`]: asking one process and reading its answer from /proc,
//!   and a group's wait.
//! - [`sending`]: a signal sent with its ledger entry before and after.
//! - [`members`]: who takes part, and why one cannot.
//! - [`rebuild`]: asking drained processes to rebuild, and the wait.
//! - [`ledger`]: every signal sent, as the intent record keeps it.
//! - [`left_drained`]: the processes a cudackpt left drained.
//! - [`report`] and [`settings`]: what a command asks of the drain, and
//!   what the report says it did.

pub mod handshake;
pub mod ledger;
pub mod left_drained;
pub mod members;
pub mod protocol;
pub mod rebuild;
pub mod report;
pub mod sending;
pub mod settings;
