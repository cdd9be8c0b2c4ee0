//! How the driver names GPUs: a UUID (16 bytes, printed `GPU-` and
//! lowercase as `nvidia-smi` prints it), and the old→new pair a restore map
//! is made of.

use std::fmt;
use std::str::FromStr;

/// A GPU's UUID, printed the way `nvidia-smi` prints it (`GPU-` + lowercase).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GpuUuid(uuid::Uuid);

impl GpuUuid {
    /// The UUID whose 16 bytes the driver's `CUuuid` holds.
    pub fn from_bytes(bytes: [u8; 16]) -> GpuUuid {
        GpuUuid(uuid::Uuid::from_bytes(bytes))
    }

    /// Its 16 bytes, as the driver's `CUuuid` holds them.
    pub fn bytes(self) -> [u8; 16] {
        *self.0.as_bytes()
    }
}

impl fmt::Display for GpuUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GPU-{}", self.0.hyphenated())
    }
}

/// Text that is not a GPU UUID, quoted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UuidError {
    /// Not 32 hex digits in the UUID's form.
    #[error("{text:?} is not a GPU UUID (expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, as nvidia-smi -L prints)")]
    Malformed {
        /// The text given.
        text: String,
    },
    /// In the form, but the UUID parser refused it.
    #[error("{text:?} is not a GPU UUID: {why}")]
    Invalid {
        /// The text given.
        text: String,
        /// The parser's words.
        why: String,
    },
}

impl FromStr for GpuUuid {
    type Err = UuidError;

    /// Accepts `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, the same without
    /// the prefix, and the 32-digit form, in any case.
    fn from_str(text: &str) -> Result<GpuUuid, UuidError> {
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
            return Err(UuidError::Malformed {
                text: text.to_string(),
            });
        }
        uuid::Uuid::parse_str(bare)
            .map(GpuUuid)
            .map_err(|e| UuidError::Invalid {
                text: text.to_string(),
                why: e.to_string(),
            })
    }
}

/// One remapping handed to the driver: the GPU the process was checkpointed
/// on, and the GPU to restore it onto.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuPair {
    /// The GPU the process was checkpointed on.
    pub old: GpuUuid,
    /// The GPU to restore it onto.
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

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "GPU-11111111-2222-3333-4444-555555555555";
    const B: &str = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

    fn uuid(text: &str) -> GpuUuid {
        text.parse().expect("test UUID")
    }

    #[test]
    fn uuids_parse_with_or_without_prefix_in_any_case() {
        let canonical = uuid(A);
        assert_eq!(uuid(&A[4..]), canonical);
        assert_eq!(uuid(&A.to_lowercase()), canonical);
        assert_eq!(uuid("gpu-11111111222233334444555555555555"), canonical);
        assert_eq!(uuid(&B.to_uppercase()).to_string(), B);
    }

    #[test]
    fn malformed_uuids_are_quoted() {
        for bad in [
            "",
            "GPU-",
            "GPU-1234",
            "MIG-11111111-2222-3333-4444-555555555555",
            "{11111111-2222-3333-4444-555555555555}",
        ] {
            let err = bad.parse::<GpuUuid>().unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn uuids_travel_through_json_as_nvidia_smi_prints_them() {
        let json = serde_json::to_string(&uuid(A)).expect("serialises");
        assert_eq!(json, format!("\"{A}\""));
        assert_eq!(
            serde_json::from_str::<GpuUuid>(&json).expect("parses"),
            uuid(A)
        );
        assert!(serde_json::from_str::<GpuUuid>("\"GPU-1\"").is_err());
    }
}
