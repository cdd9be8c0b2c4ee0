//! GPUs.

pub mod inventory;
pub mod map;
pub mod nvml;
pub mod record;
