//! GPUs: the one inventory of this host's GPUs (`inventory`: the kernel
//! driver's list (`kernel`), NVML, the CUDA driver as the fallback, each
//! read at most once per command), restore maps (`map`: parsing, resolving, completing),
//! NVML (`nvml`), which GPUs a process has open (`opened`) and checkpoint
//! records (`record`).
//!
//! May use: `targets`, `driver`, `exit`, `files`, `environment`.

pub mod device;
pub mod inventory;
pub mod kernel;
pub mod map;
pub mod nvml;
pub mod opened;
pub mod record;
