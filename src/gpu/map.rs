//! GPU identities and restore maps: UUID parsing (with or without `GPU-`),
//! `--map OLD=NEW` parsing, and checking that a map can be handed to the
//! driver. Pure functions; the device list comes from the caller.

use std::collections::HashMap;

use crate::driver::{GpuPair, GpuUuid};

/// A GPU named on either side of `OLD=NEW`: a UUID, or an index on this
/// host. An OLD given as an index names a GPU of this host, which is
/// unambiguous for a move between its own GPUs; a checkpoint from another
/// host names its GPUs by UUID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceRef {
    Uuid(GpuUuid),
    Index(u32),
}

impl std::fmt::Display for DeviceRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceRef::Uuid(uuid) => write!(f, "{uuid}"),
            DeviceRef::Index(index) => write!(f, "GPU index {index}"),
        }
    }
}

/// `OLD=NEW` as the user wrote it, parsed but not yet resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapEntry {
    pub old: DeviceRef,
    pub new: DeviceRef,
}

/// Why a `--map` cannot be used. `Syntax` is a usage error; the others are a
/// map that is well formed but cannot be a valid remapping.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    /// Not `auto`, nor `OLD=NEW` pairs.
    #[error("invalid --map entry {text:?}: {reason}")]
    Syntax {
        /// The entry as given.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// One GPU named twice on the left.
    #[error("--map names {old} twice as the GPU to move")]
    DuplicateOld {
        /// That GPU, as it was named (a UUID, or `GPU index N`).
        old: String,
    },
    /// Two GPUs sent onto one.
    #[error("--map sends {first} and {second} both onto {new}: each GPU can receive only one")]
    ManyToOne {
        /// One GPU sent there.
        first: GpuUuid,
        /// The other.
        second: GpuUuid,
        /// The GPU both were sent to.
        new: GpuUuid,
    },
    /// An index beyond this host's GPUs.
    #[error("--map names GPU index {index}, but this host has {count} GPU(s) (indexes 0 to {last})", last = .count.saturating_sub(1))]
    UnknownIndex {
        /// The index.
        index: u32,
        /// How many GPUs this host has.
        count: usize,
    },
    /// A GPU to restore onto that this host does not have.
    #[error("--map sends {old} to {new}, which is not a GPU of this host (it has {})", list_gpus(.local))]
    UnknownGpu {
        /// The GPU moved.
        old: GpuUuid,
        /// Where it was sent.
        new: GpuUuid,
        /// This host's GPUs.
        local: Vec<GpuUuid>,
    },
    /// This host's GPUs could not be listed to check the map.
    #[error("--map needs the GPUs of this host, but they could not be listed: {reason}")]
    DevicesUnavailable {
        /// Why.
        reason: String,
    },
    /// A map that cannot be completed into the bijection the driver needs.
    #[error(
        "--map moves GPUs of another host, so cudackpt cannot complete it: the driver needs every GPU of this host to receive exactly one GPU of the checkpoint, and {} receive(s) none",
        list_gpus(.unreceived)
    )]
    Incomplete {
        /// This host's GPUs that receive none.
        unreceived: Vec<GpuUuid>,
    },
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
    /// Whether it is a usage error rather than a map this host cannot use.
    pub fn is_syntax(&self) -> bool {
        matches!(self, MapError::Syntax { .. })
    }
}

/// `--map` as given, parsed once at the edge.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum MapSpec {
    /// No map: restore onto the same GPUs.
    #[default]
    None,
    /// `--map auto`: the GPUs recorded at checkpoint onto this host's, by
    /// index.
    Auto,
    /// OLD=NEW pairs, not yet resolved against this host.
    Entries(Vec<MapEntry>),
}

impl MapSpec {
    /// Parses the `--map` values (and `--map-file` pairs, as `OLD=NEW`
    /// text): `auto` alone, or OLD=NEW pairs.
    pub fn parse(values: &[String]) -> Result<MapSpec, MapError> {
        if let [only] = values {
            if only.trim().eq_ignore_ascii_case("auto") {
                return Ok(MapSpec::Auto);
            }
        }
        let entries = parse_map(values)?;
        Ok(if entries.is_empty() {
            MapSpec::None
        } else {
            MapSpec::Entries(entries)
        })
    }
}

/// Parses every `--map` value: each may hold several comma-separated
/// `OLD=NEW` pairs. Rejects a GPU named twice on the left.
pub fn parse_map(values: &[String]) -> Result<Vec<MapEntry>, MapError> {
    let mut entries: Vec<MapEntry> = Vec::new();
    for value in values {
        if value.split(',').all(|item| item.trim().is_empty()) {
            return Err(MapError::Syntax {
                text: value.clone(),
                reason: "an empty map; give OLD=NEW pairs, `auto`, or no --map to restore in place"
                    .to_string(),
            });
        }
        for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let entry = parse_entry(item)?;
            if entries.iter().any(|e| e.old == entry.old) {
                return Err(MapError::DuplicateOld {
                    old: entry.old.to_string(),
                });
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
        syntax("expected OLD=NEW, e.g. GPU-1234...=GPU-abcd..., GPU-1234...=1 or 0=1".into())
    })?;
    let side = |text: &str| -> Result<DeviceRef, MapError> {
        let text = text.trim();
        if !text.is_empty() && text.chars().all(|c| c.is_ascii_digit()) {
            return text
                .parse::<u32>()
                .map(DeviceRef::Index)
                .map_err(|_| syntax(format!("GPU index {text:?} is too large")));
        }
        text.parse::<GpuUuid>()
            .map(DeviceRef::Uuid)
            .map_err(|e| syntax(e.to_string()))
    };
    Ok(MapEntry {
        old: side(old)?,
        new: side(new)?,
    })
}

/// Whether any side is a GPU index (which needs this host's GPU list).
pub fn uses_indexes(entries: &[MapEntry]) -> bool {
    entries
        .iter()
        .any(|e| matches!(e.old, DeviceRef::Index(_)) || matches!(e.new, DeviceRef::Index(_)))
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
    let mut pairs: Vec<GpuPair> = Vec::with_capacity(entries.len());
    let by_index = |index: u32| {
        let local = local_gpus.unwrap_or_default();
        local
            .get(index as usize)
            .copied()
            .ok_or(MapError::UnknownIndex {
                index,
                count: local.len(),
            })
    };
    for entry in entries {
        // An OLD by UUID may be a GPU of another host (a checkpoint moved
        // here); by index it is one of this host's.
        let old = match entry.old {
            DeviceRef::Uuid(uuid) => uuid,
            DeviceRef::Index(index) => by_index(index)?,
        };
        if pairs.iter().any(|p| p.old == old) {
            return Err(MapError::DuplicateOld {
                old: old.to_string(),
            });
        }
        let new = match (entry.new, local_gpus) {
            (DeviceRef::Uuid(uuid), None) => uuid,
            (DeviceRef::Uuid(uuid), Some(local)) if local.contains(&uuid) => uuid,
            (DeviceRef::Uuid(uuid), Some(local)) => {
                return Err(MapError::UnknownGpu {
                    old,
                    new: uuid,
                    local: local.to_vec(),
                })
            }
            (DeviceRef::Index(index), _) => by_index(index)?,
        };
        if let Some(first) = receivers.insert(new, old) {
            return Err(MapError::ManyToOne {
                first,
                second: old,
                new,
            });
        }
        pairs.push(GpuPair { old, new });
    }
    Ok(pairs)
}

/// A map made ready for the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completed {
    /// Every GPU stays where it was: no map need be passed.
    NothingMoves,
    /// The pairs to pass, and whether cudackpt added any to what was given.
    Pairs { pairs: Vec<GpuPair>, added: bool },
}

/// Makes a map the driver accepts. The driver (580) takes only a bijection
/// over every GPU of the host. When every OLD is a GPU of this host (a
/// move between its GPUs) a partial map is completed: GPUs not named keep
/// their place where they can, and the displaced ones fill the gaps, so
/// `A=B` on two GPUs becomes `A=B,B=A`. When some OLD is foreign (a
/// checkpoint from another host) nothing can be guessed, so the map must
/// already send something to every local GPU.
pub fn complete_map(pairs: &[GpuPair], local: &[GpuUuid]) -> Result<Completed, MapError> {
    let all_local = pairs.iter().all(|p| local.contains(&p.old));
    let mut completed = pairs.to_vec();
    if all_local {
        let unmapped: Vec<GpuUuid> = local
            .iter()
            .copied()
            .filter(|g| !pairs.iter().any(|p| p.old == *g))
            .collect();
        let mut free: Vec<GpuUuid> = local
            .iter()
            .copied()
            .filter(|g| !pairs.iter().any(|p| p.new == *g))
            .collect();
        let mut displaced = Vec::new();
        for gpu in unmapped {
            match free.iter().position(|f| *f == gpu) {
                Some(at) => {
                    free.remove(at);
                    completed.push(GpuPair { old: gpu, new: gpu });
                }
                None => displaced.push(gpu),
            }
        }
        // As many displaced GPUs as free places: both sides are `local`
        // minus the same number of distinct GPUs.
        completed.extend(
            displaced
                .into_iter()
                .zip(free)
                .map(|(old, new)| GpuPair { old, new }),
        );
    } else {
        let unreceived: Vec<GpuUuid> = local
            .iter()
            .copied()
            .filter(|g| !pairs.iter().any(|p| p.new == *g))
            .collect();
        if !unreceived.is_empty() {
            return Err(MapError::Incomplete { unreceived });
        }
    }
    if completed.iter().all(|p| p.old == p.new) {
        return Ok(Completed::NothingMoves);
    }
    // The pairs given come first, as given; the ones added follow.
    Ok(Completed::Pairs {
        added: completed.len() > pairs.len(),
        pairs: completed,
    })
}

/// `A=B,B=A` with full UUIDs, as `--map` takes it back.
pub fn format_map(pairs: &[GpuPair]) -> String {
    pairs
        .iter()
        .map(|p| format!("{}={}", p.old, p.new))
        .collect::<Vec<_>>()
        .join(",")
}

/// The text of a `--map-file`: a JSON object `{"OLD": "NEW", ...}`, a list
/// of `"OLD=NEW"` strings, or a list of `{"old": ..., "new": ...}` (the
/// `map` cudackpt prints with --json). Returns `OLD=NEW` values for
/// [`parse_map`]; the error says what is wrong with the file.
pub fn parse_map_file(text: &str) -> Result<Vec<String>, String> {
    // The file may be one the invoker could read but a log should not
    // show: errors name an entry by its position, never by its text.
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let as_text = |v: &serde_json::Value, at: usize| {
        v.as_str()
            .map(str::to_string)
            .ok_or(format!("entry {at}: its value is not a string"))
    };
    match value {
        // serde_json keeps an object's keys sorted: so are the positions.
        serde_json::Value::Object(pairs) => pairs
            .iter()
            .enumerate()
            .map(|(i, (old, new))| Ok(format!("{old}={}", as_text(new, i + 1)?)))
            .collect(),
        serde_json::Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                serde_json::Value::String(pair) => Ok(pair.clone()),
                serde_json::Value::Object(pair) => {
                    let field = |name: &str| {
                        pair.get(name)
                            .ok_or(format!("entry {}: no \"{name}\"", i + 1))
                            .and_then(|v| as_text(v, i + 1))
                    };
                    Ok(format!("{}={}", field("old")?, field("new")?))
                }
                _ => Err(format!(
                    "entry {} is neither \"OLD=NEW\" nor {{\"old\": ..., \"new\": ...}}",
                    i + 1
                )),
            })
            .collect(),
        _ => Err("expected an object {\"OLD\": \"NEW\"} or a list of pairs".to_string()),
    }
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
    fn an_empty_map_is_a_usage_error_not_no_map() {
        for empty in ["", " ", ",", " , "] {
            let error = parse_map(&[empty.to_string()]).expect_err(empty);
            assert!(error.is_syntax(), "{empty:?}: {error}");
            assert!(error.to_string().contains("an empty map"), "{error}");
        }
        assert_eq!(MapSpec::parse(&[]), Ok(MapSpec::None));
    }

    #[test]
    fn map_values_split_on_commas_and_repeat() {
        let entries =
            parse_map(&[format!("{A}={B}, {B}={A}"), format!("{C}=0")]).expect("valid map");
        assert_eq!(entries.len(), 3);
        assert_eq!(
            entries[0],
            MapEntry {
                old: DeviceRef::Uuid(uuid(A)),
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
        assert_eq!(
            err,
            MapError::DuplicateOld {
                old: uuid(A).to_string()
            }
        );
        let err = parse_map(&["0=1,0=0".to_string()]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--map names GPU index 0 twice as the GPU to move"
        );
    }

    #[test]
    fn an_old_gpu_may_be_named_by_its_index_on_this_host() {
        let local = [uuid(A), uuid(B)];
        let entries = parse_map(&["0=1".to_string()]).expect("valid syntax");
        assert_eq!(entries[0].old, DeviceRef::Index(0));
        assert!(uses_indexes(&entries));
        let pairs = resolve_map(&entries, Some(&local)).expect("resolves");
        assert_eq!(
            pairs,
            [GpuPair {
                old: uuid(A),
                new: uuid(B)
            }]
        );
        // The same GPU by index and by UUID is named twice.
        let entries = parse_map(&[format!("0=1,{A}=0")]).expect("valid syntax");
        assert_eq!(
            resolve_map(&entries, Some(&local)),
            Err(MapError::DuplicateOld {
                old: uuid(A).to_string()
            })
        );
        let entries = parse_map(&["2=0".to_string()]).expect("valid syntax");
        assert_eq!(
            resolve_map(&entries, Some(&local)),
            Err(MapError::UnknownIndex { index: 2, count: 2 })
        );
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

    #[test]
    fn a_new_gpu_must_be_on_this_host() {
        let entries = parse_map(&[format!("{A}={C}")]).expect("valid syntax");
        let err = resolve_map(&entries, Some(&[uuid(A), uuid(B)])).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("--map sends {A} to {C}, which is not a GPU of this host (it has {A}, {B})")
        );
        assert!(
            resolve_map(&entries, None).is_ok(),
            "unchecked without a GPU list"
        );
        let by_index = parse_map(&[format!("{A}=0")]).expect("valid syntax");
        assert!(uses_indexes(&by_index));
        assert_eq!(
            resolve_map(&by_index, None).unwrap_err(),
            MapError::UnknownIndex { index: 0, count: 0 }
        );
    }

    fn gpus(n: u8) -> Vec<GpuUuid> {
        (0..n).map(|i| GpuUuid::from_bytes([i; 16])).collect()
    }

    fn pairs_of(map: &[(usize, usize)], g: &[GpuUuid]) -> Vec<GpuPair> {
        map.iter()
            .map(|&(o, n)| GpuPair {
                old: g[o],
                new: g[n],
            })
            .collect()
    }

    /// Checks a completed map is a bijection over `local` that keeps `given`.
    fn assert_bijection(completed: &[GpuPair], given: &[GpuPair], local: &[GpuUuid]) {
        let mut olds: Vec<_> = completed.iter().map(|p| p.old).collect();
        let mut news: Vec<_> = completed.iter().map(|p| p.new).collect();
        olds.sort();
        news.sort();
        let mut all = local.to_vec();
        all.sort();
        assert_eq!(olds, all, "every GPU moved exactly once: {completed:?}");
        assert_eq!(news, all, "every GPU received exactly once: {completed:?}");
        for pair in given {
            assert!(completed.contains(pair), "{pair:?} kept");
        }
    }

    #[test]
    fn a_same_host_move_is_completed_into_a_swap() {
        let g = gpus(2);
        let given = pairs_of(&[(0, 1)], &g);
        let completed = complete_map(&given, &g).expect("completes");
        assert_eq!(
            completed,
            Completed::Pairs {
                pairs: pairs_of(&[(0, 1), (1, 0)], &g),
                added: true
            }
        );
    }

    #[test]
    fn untouched_gpus_keep_their_place_and_displaced_ones_fill_gaps() {
        let g = gpus(8);
        for given in [
            vec![(0, 3)],
            vec![(0, 1), (1, 2)],
            vec![(7, 0), (0, 7)],
            vec![(2, 5), (5, 6), (6, 2)],
            vec![(4, 4), (1, 0)],
        ] {
            let given = pairs_of(&given, &g);
            let Completed::Pairs { pairs, .. } = complete_map(&given, &g).expect("completes")
            else {
                panic!("moves")
            };
            assert_bijection(&pairs, &given, &g);
            let untouched: Vec<_> = g
                .iter()
                .filter(|x| !given.iter().any(|p| p.old == **x || p.new == **x))
                .collect();
            for gpu in untouched {
                assert!(
                    pairs.contains(&GpuPair {
                        old: *gpu,
                        new: *gpu
                    }),
                    "{gpu} stays"
                );
            }
        }
    }

    #[test]
    fn every_single_pair_on_three_gpus_completes() {
        let g = gpus(3);
        for old in 0..3 {
            for new in 0..3 {
                let given = pairs_of(&[(old, new)], &g);
                match complete_map(&given, &g).expect("completes") {
                    Completed::NothingMoves => assert_eq!(old, new),
                    Completed::Pairs { pairs, .. } => assert_bijection(&pairs, &given, &g),
                }
            }
        }
    }

    #[test]
    fn a_map_that_moves_nothing_is_dropped() {
        let g = gpus(4);
        assert_eq!(
            complete_map(&pairs_of(&[(2, 2)], &g), &g),
            Ok(Completed::NothingMoves)
        );
    }

    #[test]
    fn foreign_gpus_must_cover_every_local_gpu() {
        let local = gpus(2);
        let foreign = [
            GpuUuid::from_bytes([0xf0; 16]),
            GpuUuid::from_bytes([0xf1; 16]),
        ];
        let partial = vec![GpuPair {
            old: foreign[0],
            new: local[1],
        }];
        assert_eq!(
            complete_map(&partial, &local),
            Err(MapError::Incomplete {
                unreceived: vec![local[0]]
            })
        );
        let full = vec![
            GpuPair {
                old: foreign[0],
                new: local[1],
            },
            GpuPair {
                old: foreign[1],
                new: local[0],
            },
        ];
        let Completed::Pairs { pairs, added } = complete_map(&full, &local).expect("complete")
        else {
            panic!("moves")
        };
        assert!(!added);
        assert_eq!(pairs.len(), 2);
    }

    #[test]
    fn maps_print_back_in_the_form_they_are_taken() {
        let g = gpus(2);
        let text = format_map(&pairs_of(&[(0, 1), (1, 0)], &g));
        let parsed = parse_map(&[text]).expect("parses back");
        assert_eq!(
            resolve_map(&parsed, Some(&g)).expect("resolves"),
            pairs_of(&[(0, 1), (1, 0)], &g)
        );
    }

    #[test]
    fn map_files_take_three_shapes() {
        let object = format!(r#"{{"{A}": "{B}", "{B}": "1"}}"#);
        let strings = format!(r#"["{A}={B}", "{B}=1"]"#);
        let printed = format!(r#"[{{"old": "{A}", "new": "{B}"}}, {{"old": "{B}", "new": "1"}}]"#);
        for text in [object, strings, printed] {
            let values = parse_map_file(&text).expect("a map file");
            let entries = parse_map(&values).expect("valid pairs");
            assert_eq!(entries.len(), 2, "{text}");
            assert_eq!(entries[1].new, DeviceRef::Index(1), "{text}");
        }
        for (bad, why) in [
            ("nope", "not JSON"),
            ("42", "expected an object"),
            (r#"[{"old": "x"}]"#, "no \"new\""),
            ("[7]", "neither"),
        ] {
            let err = parse_map_file(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
}
