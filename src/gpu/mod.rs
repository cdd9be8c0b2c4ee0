//! GPUs: the one inventory of this host's GPUs (`inventory`: the kernel
//! driver's list, NVML, the CUDA driver as the fallback, each read at most
//! once per command), restore maps (`map`: parsing, resolving, completing),
//! NVML (`nvml`) and checkpoint records (`record`).
//!
//! May use: `targets`, `driver`, `exit`, `files`, `environment`.

pub mod device;
pub mod inventory;
pub mod map;
pub mod nvml;
pub mod record;
