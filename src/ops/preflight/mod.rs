//! The pre-flights: what is refused before any driver call changes
//! anything. A checkpoint the driver could never restore (`restorable`),
//! a host copy that cannot fit in host memory or a cgroup's limit
//! (`host_memory`), a restore onto GPUs short of memory (`gpu_memory`), a
//! tree CRIU could not dump after its pre-dump hook (`dumpable`).

pub mod dumpable;
pub mod gpu_memory;
pub mod host_memory;
pub mod restorable;
