//! What outlives a command, so that no crash leaves a process behind: the
//! per-PID lock that keeps two cudackpt apart (`pidlock`, taken by the
//! `lock` stage), the intent record a killed cudackpt leaves for `recover`
//! (`intent`), the processes left drained (`drained`), what a CRIU
//! pre-dump hands its post-dump (`handoff`), and the checkpoint records a
//! restore reads (`records`).

pub mod handoff;
pub mod intent;
pub mod pidlock;
pub mod process_lock;
pub mod records;
