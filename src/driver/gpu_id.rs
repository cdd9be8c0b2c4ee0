//! How the driver names GPUs: a UUID (16 bytes, printed `GPU-` and
//! lowercase as `nvidia-smi` prints it), and the old→new pair a restore map
//! is made of.

use std::fmt;
use std::str::FromStr;

/// A GPU's UUID, printed the way `nvidia-smi` prints it (`GPU-` + lowercase).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GpuUuid(uuid::Uuid);

impl GpuUuid {
    pub fn from_bytes(bytes: [u8; 16]) -> GpuUuid {
        GpuUuid(uuid::Uuid::from_bytes(bytes))
    }

    pub fn bytes(self) -> [u8; 16] {
        *self.0.as_bytes()
    }
}

impl fmt::Display for GpuUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GPU-{}", self.0.hyphenated())
    }
}

impl FromStr for GpuUuid {
    type Err = String;

    /// Accepts `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, the same without
    /// the prefix, and the 32-digit form, in any case.
    fn from_str(text: &str) -> Result<GpuUuid, String> {
        let trimmed = text.trim();
        let bare = match trimmed.get(..4) {
            Some(prefix) if prefix.eq_ignore_ascii_case("GPU-") => &trimmed[4..],
            _ => trimmed,
        };
        let hex_digits = bare.chars().filter(char::is_ascii_hexdigit).count();
        let well_formed = hex_digits == 32
            && bare.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
            && (bare.len() == 32 || bare.len() == 36);
        if !well_formed {
            return Err(format!(
                "{text:?} is not a GPU UUID (expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, as nvidia-smi -L prints)"
            ));
        }
        uuid::Uuid::parse_str(bare)
            .map(GpuUuid)
            .map_err(|e| format!("{text:?} is not a GPU UUID: {e}"))
    }
}

/// One remapping handed to the driver: the GPU the process was checkpointed
/// on, and the GPU to restore it onto.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuPair {
    pub old: GpuUuid,
    pub new: GpuUuid,
}

/// In JSON (records, reports) a UUID is the string `nvidia-smi` prints.
impl serde::Serialize for GpuUuid {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for GpuUuid {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<GpuUuid, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}
