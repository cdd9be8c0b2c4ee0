//! The drain (cudackpt(1), DRAIN PROTOCOL), whole but for the pipeline's
//! stage: a process that speaks the protocol releases what the driver
//! cannot restore (NCCL communicators, CUDA IPC mappings) before its
//! checkpoint, and rebuilds it after. Its own floor, below the vocabulary
//! and above `gpu`: it uses `targets`, `files`, `gpu` and `driver`, and
//! nothing of `ops`, whose one stage file (`ops::stages::drain`) adapts it
//! to a command. Every caller that rebuilds (the pipeline, `recover`,
//! CRIU's plugin and action script) does so through [`rebuild`].
//!
//! - [`protocol`]: the protocol as data, its one source: the signals, the
//!   thread names that answer, the error memfd (pure; the Python client,
//!   the C header and the man page are tested against it).
//! - [`handshake`]: asking one process and reading its answer from /proc,
//!   and a group's wait.
//! - [`sending`]: a signal sent with its ledger entry before and after.
//! - [`members`]: who takes part, and why one cannot.
//! - [`group`]: the handshake's loop: ask and wait, call off, settle.
//! - [`rebuild`]: asking drained processes to rebuild, and the wait: the
//!   one door every rebuild goes through.
//! - [`recovery`]: what a cudackpt killed mid-drain owes each process,
//!   for `recover`.
//! - [`ledger`]: every signal sent, as the intent record keeps it.
//! - [`left_drained`]: the processes a cudackpt left drained.
//! - [`report`] and [`settings`]: what a command asks of the drain, and
//!   what the report says it did.

pub mod group;
pub mod handshake;
pub mod ledger;
pub mod left_drained;
pub mod members;
pub mod protocol;
pub mod rebuild;
pub mod recovery;
pub mod report;
pub mod sending;
pub mod settings;
