//! The host and the targets just before a checkpoint, for the records
//! written after it and the post-mortem of a target that died.

use std::collections::HashMap;

use crate::driver::GpuUuid;
use crate::gpu::record::RecordedGpu;

/// What is known about the host and the targets just before a checkpoint.
pub struct Snapshot {
    pub(crate) host: Vec<RecordedGpu>,
    pub(crate) memory: Option<HashMap<i32, Vec<(GpuUuid, u64)>>>,
    pub(crate) cuda_version: Option<String>,
}

impl Snapshot {
    /// The GPU memory NVML said `pid` held, summed over GPUs.
    pub fn footprint(&self, pid: i32) -> Option<u64> {
        let uses = self.memory.as_ref()?.get(&pid)?;
        Some(uses.iter().map(|(_, bytes)| bytes).sum())
    }
}
