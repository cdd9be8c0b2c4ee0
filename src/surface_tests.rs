//! Property tests over every surface that takes text: PIDs, timeouts, GPU
//! UUIDs, maps and map files, the compatible grammar, the whole command
//! line, and what is read from /proc. Each must answer any input without
//! panicking, and what cudackpt prints must parse back to the same value.
//! (proptest: generated inputs, shrunk to a minimal case on failure.)

use proptest::prelude::*;

use crate::driver::{GpuPair, GpuUuid};
use crate::gpu::map::{complete_map, parse_map, parse_map_file, resolve_map, Completed};
use crate::targets::process::{parse_pid, parse_status};
use crate::vocabulary::timeout::parse_timeout;

/// Words that make the grammars take their interesting paths.
fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("--get-state".to_string()),
        Just("--get-restore-tid".to_string()),
        Just("--action".to_string()),
        Just("--toggle".to_string()),
        Just("--pid".to_string()),
        Just("-p".to_string()),
        Just("--timeout".to_string()),
        Just("-t".to_string()),
        Just("--device-map".to_string()),
        Just("-d".to_string()),
        Just("-h".to_string()),
        Just("lock".to_string()),
        Just("restore".to_string()),
        Just("--map".to_string()),
        Just("--json".to_string()),
        Just("--tree".to_string()),
        Just("--cgroup".to_string()),
        Just("--all".to_string()),
        Just("--deadline".to_string()),
        Just("suspend".to_string()),
        Just("state".to_string()),
        "[0-9]{1,12}",
        "-?[0-9a-z=,.-]{0,40}",
        ".{0,30}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn pids_never_panic_and_print_back(text in ".{0,24}") {
        if let Ok(pid) = parse_pid(&text) {
            prop_assert!(pid > 0);
            prop_assert_eq!(parse_pid(&pid.to_string()), Ok(pid));
        }
    }

    #[test]
    fn any_positive_pid_is_taken(pid in 1..=i32::MAX) {
        prop_assert_eq!(parse_pid(&pid.to_string()), Ok(pid));
    }

    #[test]
    fn timeouts_never_panic_and_never_become_forever_by_accident(text in ".{0,24}") {
        if let Ok(timeout) = parse_timeout(&text) {
            // 0 ("no timeout") only from text that says zero.
            if timeout.as_millis() == 0 {
                prop_assert!(text.chars().any(|c| c == '0'), "{:?} became no timeout", text);
            }
        }
    }

    #[test]
    fn timeouts_in_any_unit_agree(millis in 1u32..=4_000_000) {
        prop_assert_eq!(parse_timeout(&millis.to_string()).map(|t| t.as_millis()), Ok(millis));
        prop_assert_eq!(parse_timeout(&format!("{millis}ms")).map(|t| t.as_millis()), Ok(millis));
        prop_assert_eq!(parse_timeout(&format!("{}s", millis / 1000 + 1)).map(|t| t.as_millis()), Ok((millis / 1000 + 1) * 1000));
    }

    #[test]
    fn gpu_uuids_never_panic_and_print_back(text in ".{0,48}", bytes in any::<[u8; 16]>()) {
        if let Ok(uuid) = text.parse::<GpuUuid>() {
            prop_assert_eq!(uuid.to_string().parse::<GpuUuid>(), Ok(uuid));
        }
        let uuid = GpuUuid::from_bytes(bytes);
        let printed = uuid.to_string();
        prop_assert_eq!(printed.parse::<GpuUuid>(), Ok(uuid));
        prop_assert_eq!(printed[4..].to_uppercase().parse::<GpuUuid>(), Ok(uuid));
    }

    #[test]
    fn maps_and_map_files_never_panic(values in prop::collection::vec(".{0,80}", 0..4), file in ".{0,120}") {
        let _ = parse_map(&values);
        if let Ok(values) = parse_map_file(&file) {
            let _ = parse_map(&values);
        }
    }

    /// Any partial map of this host's GPUs completes into a bijection that
    /// keeps what was given, and prints back to the same pairs.
    #[test]
    fn partial_maps_complete_into_bijections(count in 1usize..=8, moves in prop::collection::vec((0usize..8, 0usize..8), 0..8)) {
        let local: Vec<GpuUuid> = (0..count).map(|i| GpuUuid::from_bytes([i as u8 + 1; 16])).collect();
        let mut given: Vec<GpuPair> = Vec::new();
        for (old, new) in moves {
            let (old, new) = (local[old % count], local[new % count]);
            if !given.iter().any(|p| p.old == old || p.new == new) {
                given.push(GpuPair { old, new });
            }
        }
        match complete_map(&given, &local).expect("local maps always complete") {
            Completed::NothingMoves => prop_assert!(given.iter().all(|p| p.old == p.new)),
            Completed::Pairs { pairs, .. } => {
                let mut olds: Vec<_> = pairs.iter().map(|p| p.old).collect();
                let mut news: Vec<_> = pairs.iter().map(|p| p.new).collect();
                olds.sort();
                news.sort();
                let mut all = local.clone();
                all.sort();
                prop_assert_eq!(&olds, &all);
                prop_assert_eq!(&news, &all);
                for pair in &given {
                    prop_assert!(pairs.contains(pair));
                }
                let printed = crate::gpu::map::format_map(&pairs);
                let parsed = parse_map(&[printed]).expect("printed maps parse");
                prop_assert_eq!(resolve_map(&parsed, Some(&local)).expect("and resolve"), pairs);
            }
        }
    }

    #[test]
    fn the_compatible_grammar_never_panics(args in prop::collection::vec(token(), 0..8)) {
        if let Ok(crate::cli::compat::CompatCommand::GetState { pid } | crate::cli::compat::CompatCommand::GetRestoreTid { pid }) = crate::cli::compat::parse(&args) {
            prop_assert!(pid > 0);
        }
    }

    #[test]
    fn the_command_line_never_panics(args in prop::collection::vec(token(), 0..8)) {
        use clap::Parser;
        let _ = crate::cli::args::Cli::try_parse_from(std::iter::once("cudackpt".to_string()).chain(args));
    }

    #[test]
    fn proc_text_never_panics(text in ".{0,400}") {
        let _ = parse_status(&text);
        let _ = crate::targets::discover::parse_ppid(&text);
        let _ = crate::targets::discover::scan_maps(text.as_bytes(), Some("libcuda.so.1"));
    }

    #[test]
    fn cgroup_paths_never_panic(path in "[/a-z0-9._-]{0,40}") {
        let _ = crate::targets::cgroup::Cgroup::resolve(std::path::Path::new(&path));
    }
}
