//! Where a restore puts a process's GPU memory, as a library user names it.

use std::str::FromStr;

use crate::gpu::map::{MapError, MapSpec};

/// Where a [`Group`](crate::Group)'s restore puts each process's GPU
/// memory. cudackpt completes a partial map to the bijection over every
/// GPU of the host that the driver needs (docs/driver-facts.md, F3), and
/// refuses one it cannot complete before any process is touched.
///
/// ```
/// use cudackpt::GpuMap;
///
/// let swap: GpuMap = "GPU-00000000-0000-4000-8000-000000000000=1".parse()?;
/// assert_ne!(swap, GpuMap::InPlace);
/// assert_eq!("auto".parse::<GpuMap>()?, GpuMap::Auto);
/// assert!("GPU-nonsense=1".parse::<GpuMap>().is_err());
/// # Ok::<(), cudackpt::MapError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum GpuMap {
    /// Onto the GPUs each process left.
    #[default]
    InPlace,
    /// The GPUs each process's checkpoint record names onto this host's
    /// GPUs of the same index (a process moved to another host).
    Auto,
    /// `OLD=NEW` pairs: OLD a GPU UUID, NEW a UUID or an index on this
    /// host.
    Pairs(Pairs),
}

/// Parsed `OLD=NEW` pairs, resolved against the host when a restore runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pairs(Vec<crate::gpu::map::MapEntry>);

impl GpuMap {
    pub(crate) fn into_spec(self) -> MapSpec {
        match self {
            GpuMap::InPlace => MapSpec::None,
            GpuMap::Auto => MapSpec::Auto,
            GpuMap::Pairs(Pairs(entries)) => MapSpec::Entries(entries),
        }
    }
}

impl FromStr for GpuMap {
    type Err = MapError;

    /// What `--map` takes: `auto`, or comma-separated `OLD=NEW` pairs.
    fn from_str(text: &str) -> Result<GpuMap, MapError> {
        Ok(match MapSpec::parse(&[text.to_string()])? {
            MapSpec::None => GpuMap::InPlace,
            MapSpec::Auto => GpuMap::Auto,
            MapSpec::Entries(entries) => GpuMap::Pairs(Pairs(entries)),
        })
    }
}
