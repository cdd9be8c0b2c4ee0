//! GPU identities and restore maps: UUID parsing (with or without `GPU-`),
//! `--map OLD=NEW` parsing, and checking that a map can be handed to the
//! driver. Pure functions; the device list comes from the caller.

use std::collections::HashMap;
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

/// A GPU named on the right of `OLD=NEW`: a UUID, or an index on this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceRef {
    Uuid(GpuUuid),
    Index(u32),
}

/// `OLD=NEW` as the user wrote it, parsed but not yet resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapEntry {
    pub old: GpuUuid,
    pub new: DeviceRef,
}

/// Why a `--map` cannot be used. `Syntax` is a usage error; the others are a
/// map that is well formed but cannot be a valid remapping.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    #[error("invalid --map entry {text:?}: {reason}")]
    Syntax { text: String, reason: String },
    #[error("--map names {old} twice as the GPU to move")]
    DuplicateOld { old: GpuUuid },
    #[error("--map sends {first} and {second} both onto {new}: each GPU can receive only one")]
    ManyToOne {
        first: GpuUuid,
        second: GpuUuid,
        new: GpuUuid,
    },
    #[error("--map names GPU index {index}, but this host has {count} GPU(s) (indexes 0 to {last})", last = .count.saturating_sub(1))]
    UnknownIndex { index: u32, count: usize },
    #[error("--map sends {old} to {new}, which is not a GPU of this host (it has {})", list_gpus(.local))]
    UnknownGpu {
        old: GpuUuid,
        new: GpuUuid,
        local: Vec<GpuUuid>,
    },
    #[error("--map needs the GPUs of this host, but they could not be listed: {reason}")]
    DevicesUnavailable { reason: String },
}

fn list_gpus(gpus: &[GpuUuid]) -> String {
    if gpus.is_empty() {
        return "no GPU".to_string();
    }
    gpus.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl MapError {
    pub fn is_syntax(&self) -> bool {
        matches!(self, MapError::Syntax { .. })
    }
}

/// Parses every `--map` value: each may hold several comma-separated
/// `OLD=NEW` pairs. Rejects a GPU named twice on the left.
pub fn parse_map(values: &[String]) -> Result<Vec<MapEntry>, MapError> {
    let mut entries: Vec<MapEntry> = Vec::new();
    for value in values {
        for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let entry = parse_entry(item)?;
            if entries.iter().any(|e| e.old == entry.old) {
                return Err(MapError::DuplicateOld { old: entry.old });
            }
            entries.push(entry);
        }
    }
    Ok(entries)
}

fn parse_entry(item: &str) -> Result<MapEntry, MapError> {
    let syntax = |reason: String| MapError::Syntax {
        text: item.to_string(),
        reason,
    };
    let (old, new) = item.split_once('=').ok_or_else(|| {
        syntax("expected OLD=NEW, e.g. GPU-1234...=GPU-abcd... or GPU-1234...=1".into())
    })?;
    let old = old.parse::<GpuUuid>().map_err(syntax)?;
    let new = new.trim();
    let new = if !new.is_empty() && new.chars().all(|c| c.is_ascii_digit()) {
        DeviceRef::Index(
            new.parse::<u32>()
                .map_err(|_| syntax(format!("GPU index {new:?} is too large")))?,
        )
    } else {
        DeviceRef::Uuid(new.parse::<GpuUuid>().map_err(syntax)?)
    };
    Ok(MapEntry { old, new })
}

/// Whether any NEW is a GPU index (which needs this host's GPU list).
pub fn uses_indexes(entries: &[MapEntry]) -> bool {
    entries.iter().any(|e| matches!(e.new, DeviceRef::Index(_)))
}

/// Turns parsed entries into driver pairs: indexes become the UUIDs of
/// `local_gpus` (this host's GPUs in index order); a NEW that is not a GPU
/// of this host, or a GPU receiving two others, is refused. With no GPU
/// list (`None`), UUIDs pass unchecked and indexes cannot be resolved.
pub fn resolve_map(
    entries: &[MapEntry],
    local_gpus: Option<&[GpuUuid]>,
) -> Result<Vec<GpuPair>, MapError> {
    let mut receivers: HashMap<GpuUuid, GpuUuid> = HashMap::new();
    let mut pairs = Vec::with_capacity(entries.len());
    for entry in entries {
        let new = match (entry.new, local_gpus) {
            (DeviceRef::Uuid(uuid), None) => uuid,
            (DeviceRef::Uuid(uuid), Some(local)) if local.contains(&uuid) => uuid,
            (DeviceRef::Uuid(uuid), Some(local)) => {
                return Err(MapError::UnknownGpu {
                    old: entry.old,
                    new: uuid,
                    local: local.to_vec(),
                })
            }
            (DeviceRef::Index(index), local) => {
                let local = local.unwrap_or_default();
                *local.get(index as usize).ok_or(MapError::UnknownIndex {
                    index,
                    count: local.len(),
                })?
            }
        };
        if let Some(first) = receivers.insert(new, entry.old) {
            return Err(MapError::ManyToOne {
                first,
                second: entry.old,
                new,
            });
        }
        pairs.push(GpuPair {
            old: entry.old,
            new,
        });
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "GPU-11111111-2222-3333-4444-555555555555";
    const B: &str = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
    const C: &str = "GPU-00000000-0000-0000-0000-000000000003";

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
            let err = bad.parse::<GpuUuid>().unwrap_err();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn map_values_split_on_commas_and_repeat() {
        let entries =
            parse_map(&[format!("{A}={B}, {B}={A}"), format!("{C}=0")]).expect("valid map");
        assert_eq!(entries.len(), 3);
        assert_eq!(
            entries[0],
            MapEntry {
                old: uuid(A),
                new: DeviceRef::Uuid(uuid(B))
            }
        );
        assert_eq!(entries[2].new, DeviceRef::Index(0));
    }

    #[test]
    fn map_syntax_errors_quote_the_entry() {
        for bad in [
            A.to_string(),
            format!("{A}="),
            format!("={B}"),
            format!("{A}=GPU-zz"),
            format!("{A}=99999999999"),
        ] {
            let err = parse_map(std::slice::from_ref(&bad)).unwrap_err();
            assert!(err.is_syntax(), "{bad}: {err:?}");
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn a_gpu_moved_twice_is_refused() {
        let err = parse_map(&[format!("{A}={B},{A}={C}")]).unwrap_err();
        assert_eq!(err, MapError::DuplicateOld { old: uuid(A) });
    }

    #[test]
    fn many_to_one_is_refused_even_through_an_index() {
        let entries = parse_map(&[format!("{A}={B},{C}=1")]).expect("valid syntax");
        let err = resolve_map(&entries, Some(&[uuid(A), uuid(B)])).unwrap_err();
        assert_eq!(
            err,
            MapError::ManyToOne {
                first: uuid(A),
                second: uuid(C),
                new: uuid(B)
            }
        );
    }

    #[test]
    fn indexes_resolve_against_local_gpus() {
        let entries = parse_map(&[format!("{A}=1,{B}=0")]).expect("valid syntax");
        let pairs = resolve_map(&entries, Some(&[uuid(A), uuid(B)])).expect("resolves");
        assert_eq!(
            pairs,
            vec![
                GpuPair {
                    old: uuid(A),
                    new: uuid(B)
                },
                GpuPair {
                    old: uuid(B),
                    new: uuid(A)
                }
            ]
        );
        let err = resolve_map(
            &parse_map(&[format!("{A}=2")]).expect("syntax"),
            Some(&[uuid(A), uuid(B)]),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "--map names GPU index 2, but this host has 2 GPU(s) (indexes 0 to 1)"
        );
    }
}
