//! The house keeps its floors: every path in `src/` that names code of the
//! crate (`crate::`, `super::`, `self::`, a child module; in `use` trees,
//! inline, grouped, in macros) points from a room (a folder, or a file at
//! the top of `src/`) to the same room or to a lower floor, never up, so
//! there is no import circle between rooms; inside `ops/` the same holds
//! between its rooms; and inside every folder, its `mod.rs` and its
//! children name one another without a circle. The imports are read by
//! parsing (`graph.rs`), so no spelling of a path slips past. The
//! floors are the ones `src/lib.rs` describes.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use crate::graph::{self, rust_files, ModPath};

/// The rooms, top floor first. A room may use any room below it.
const FLOORS: [&[&str]; 12] = [
    &["main"],
    &["cli"],
    &["output"],
    &["commands"],
    &["api"],
    &["ops"],
    &["vocabulary"],
    &["drain"],
    &["gpu"],
    &["targets", "driver"],
    &["exit", "files"],
    &["environment"],
];

/// Files outside the floors: the crate root and tests over every surface.
const EXEMPT: [&str; 2] = ["lib", "surface_tests"];

/// The crate room a module is in: its first segment; the crate root
/// (what `lib.rs` re-exports) is the room `lib`.
fn room_of_module(module: &[String]) -> String {
    module.first().cloned().unwrap_or_else(|| "lib".to_string())
}

/// What the files say against the crate's floors, against the floors of
/// `ops/`, and the circles inside folders, for these files.
fn against_the_floors(files: &[(ModPath, PathBuf, String)]) -> Vec<String> {
    let graph = graph::graph(files);
    let mut wrong = rooms_against(&graph, &FLOORS, &EXEMPT);
    wrong.extend(ops_rooms_against(&graph));
    wrong.extend(circles(&graph));
    wrong
}

/// Each arrow from a room to another that is not on a lower floor of
/// `floors` (a room on no floor is named too), rooms in `exempt` aside.
fn rooms_against(graph: &Graph, floors: &[&[&str]], exempt: &[&str]) -> Vec<String> {
    let floor_of = |room: &str| floors.iter().position(|rooms| rooms.contains(&room));
    let mut wrong = Vec::new();
    for (from, targets) in graph {
        let room = room_of_module(from);
        if exempt.contains(&room.as_str()) {
            continue;
        }
        let Some(from_floor) = floor_of(&room) else {
            wrong.push(format!(
                "{}: room {room:?} is on no floor; add it to the floors and declare it",
                from.join("::")
            ));
            continue;
        };
        for to in targets {
            let to_room = room_of_module(to);
            if to_room == room {
                continue;
            }
            match floor_of(&to_room) {
                Some(to_floor) if to_floor > from_floor => {}
                _ => wrong.push(format!(
                    "{}: {room} uses {} (room {to_room}), which is not on a lower floor",
                    from.join("::"),
                    to.join("::")
                )),
            }
        }
    }
    wrong
}

/// Each arrow between two rooms of `ops/` that does not point down its
/// floors.
fn ops_rooms_against(graph: &Graph) -> Vec<String> {
    let ops_floor = |room: &str| OPS_FLOORS.iter().position(|rooms| rooms.contains(&room));
    let ops_room = |module: &[String]| -> Option<String> {
        (module.first().map(String::as_str) == Some("ops"))
            .then(|| module.get(1).cloned().unwrap_or_else(|| "mod".to_string()))
    };
    let mut wrong = Vec::new();
    for (from, targets) in graph {
        for to in targets {
            if let (Some(a), Some(b)) = (ops_room(from), ops_room(to)) {
                let ok =
                    a == b || matches!((ops_floor(&a), ops_floor(&b)), (Some(x), Some(y)) if y > x);
                if !ok {
                    wrong.push(format!(
                        "{}: ops room {a} uses {} (ops room {b}), which is not on a lower floor of ops",
                        from.join("::"),
                        to.join("::")
                    ));
                }
            }
        }
    }
    wrong
}

fn circles(graph: &Graph) -> Vec<String> {
    graph::circles_inside_folders(graph)
        .into_iter()
        .map(|circle| format!("a circle inside a folder: {}", circle.join(" <-> ")))
        .collect()
}

type Graph = std::collections::BTreeMap<ModPath, BTreeSet<ModPath>>;

fn source() -> Vec<(ModPath, PathBuf, String)> {
    graph::source_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

#[test]
fn every_import_points_down_a_floor_or_stays_in_its_room_and_no_folder_has_a_circle() {
    let files = source();
    let wrong = against_the_floors(&files);
    assert!(
        wrong.is_empty(),
        "imports against the floors:\n{}",
        wrong.join("\n")
    );
}

/// `files` with `extra` appended to the file of module `module`.
fn planted(module: &[&str], extra: &str) -> Vec<(ModPath, PathBuf, String)> {
    let mut files = source();
    let file = files
        .iter_mut()
        .find(|(m, _, _)| m == module)
        .expect("the module exists");
    file.2.push_str(extra);
    files
}

/// The two imports a review planted to fool the old, textual layout test
/// (both went unseen): each must now be named.
#[test]
fn an_upward_import_is_seen_however_it_is_spelled() {
    let journal = ["ops", "journal", "records"];
    for extra in [
        "\nuse super::super::stages::check;\n",
        "\nuse crate::{ops::stages::check};\n",
        "\nfn planted() { let _ = crate::ops::stages::check::run; }\n",
        "\nfn planted() { let _ = format!(\"{:?}\", super::super::stages::check::run); }\n",
    ] {
        let wrong = against_the_floors(&planted(&journal, extra));
        assert!(
            wrong
                .iter()
                .any(|w| w.contains("journal::records: ops room journal uses ops::stages::check")),
            "{extra:?} went unseen: {wrong:?}"
        );
    }
    // And between crate rooms: a low room naming a high one.
    let wrong = against_the_floors(&planted(&["files"], "\nuse crate::cli::Cli;\n"));
    assert!(
        wrong.iter().any(|w| w.starts_with("files: files uses cli")),
        "{wrong:?}"
    );
}

/// The vocabulary's floor, below the pipeline and above the drain: the
/// words may name no room of `ops` (the pipeline speaks them, not the
/// reverse).
#[test]
fn the_vocabulary_names_nothing_of_the_pipeline() {
    let wrong = against_the_floors(&planted(
        &["vocabulary", "plan"],
        "\nuse crate::ops::stages::check;\n",
    ));
    assert!(
        wrong
            .iter()
            .any(|w| w.starts_with("vocabulary::plan: vocabulary uses ops::stages")),
        "{wrong:?}"
    );
}

/// The drain's floor, between the vocabulary and `gpu`: the drain may use
/// neither the vocabulary nor any room of ops (the pipeline's stage uses
/// the drain, not the reverse), and no room below it may use the drain.
#[test]
fn the_drain_s_floor_is_held_both_ways() {
    let from_drain = planted(
        &["drain", "ledger"],
        "\nfn planted() { let _ = crate::vocabulary::report::TargetReport::new; }\n",
    );
    let wrong = against_the_floors(&from_drain);
    assert!(
        wrong
            .iter()
            .any(|w| w.starts_with("drain::ledger: drain uses vocabulary::report")),
        "{wrong:?}"
    );
    let into_drain = planted(
        &["gpu", "record"],
        "\nuse crate::drain::protocol::MARKER;\n",
    );
    let wrong = against_the_floors(&into_drain);
    assert!(
        wrong
            .iter()
            .any(|w| w.starts_with("gpu::record: gpu uses drain::protocol")),
        "{wrong:?}"
    );
    // Today's drain and its stage keep the floors.
    assert!(against_the_floors(&source()).is_empty());
}

#[test]
fn a_circle_between_a_folder_s_mod_rs_and_a_child_is_seen() {
    // driver/mod.rs names its child gpu_id; the child naming its mod.rs
    // back, however spelled, closes a circle.
    for extra in [
        "\nuse super::*;\n",
        "\nfn planted() { let _ = super::Driver::load; }\n",
        "\nuse crate::driver::{self as parent};\n",
    ] {
        let files = planted(&["driver", "gpu_id"], extra);
        let graph = graph::graph(&files);
        let circles = planted_circle(&graph, &["driver"]);
        assert_eq!(circles, ["driver driver::gpu_id"], "{extra:?}");
    }
}

fn planted_circle(graph: &Graph, folder: &[&str]) -> Vec<String> {
    let prefix = folder.join("::");
    graph::circles_inside_folders(graph)
        .into_iter()
        .filter(|c| c.iter().all(|m| m.starts_with(&prefix)))
        .map(|c| c.join(" "))
        .collect()
}

#[test]
fn lib_rs_declares_every_room_on_a_floor() {
    let lib = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs"))
        .expect("src/lib.rs");
    for room in FLOORS.iter().flat_map(|rooms| rooms.iter()) {
        if *room == "main" {
            continue;
        }
        assert!(
            lib.contains(&format!("pub(crate) mod {room};")),
            "lib.rs does not declare {room}"
        );
    }
}

/// The pipeline's one way in is the library's face: every grammar and
/// every command builds an `api::group::Group` and runs it, as a program
/// using the library does, so no caller of the pipeline can set what the
/// face does not.
#[test]
fn only_the_library_face_runs_the_pipeline() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let callers: Vec<String> = files
        .iter()
        .filter(|file| !file.starts_with(src.join("ops")) && !file.ends_with("api/group.rs"))
        // The request's own definition.
        .filter(|file| !file.ends_with("vocabulary/request.rs"))
        .filter(|file| {
            let code = fs::read_to_string(file).expect("a source file");
            code.contains("ops::run(")
                || code.contains("Request::new(")
                || code.contains("Request {")
        })
        .map(|file| file.display().to_string())
        .collect();
    assert!(
        callers.is_empty(),
        "these run the pipeline around the library's face (use api::group::Group):\n{}",
        callers.join("\n")
    );
}

/// The floors inside `ops/`, top first: the pipeline (`ops/mod.rs`), and
/// beside it the named doors the commands use (`ops/doors.rs`); the
/// pipeline runs the stages (the drain's among them: the crate's `drain` floor is the
/// protocol whole); the stages use the pre-flights, the journal, the
/// executor and the wording (the vocabulary every room speaks is a floor
/// of the crate's, below `ops`).
const OPS_FLOORS: [&[&str]; 6] = [
    &["mod", "doors"],
    &["stages"],
    &["preflight"],
    &["journal"],
    &["execute"],
    &["diagnose"],
];

/// The commands' imports of the pipeline that do not go through its named
/// doors (`ops/doors.rs`), as `from -> to` (pure given the files).
fn around_the_doors(files: &[(ModPath, PathBuf, String)]) -> Vec<String> {
    let graph = graph::graph(files);
    let mut around = Vec::new();
    for (from, targets) in &graph {
        if from.first().map(String::as_str) != Some("commands") {
            continue;
        }
        for to in targets {
            let into_ops = to.first().map(String::as_str) == Some("ops");
            if into_ops && to.get(1).map(String::as_str) != Some("doors") {
                around.push(format!("{} -> {}", from.join("::"), to.join("::")));
            }
        }
    }
    around
}

/// A command speaks to the library's face or to a named door of the
/// pipeline, never to its rooms: a planted import of the journal from
/// `ps` is seen.
#[test]
fn commands_reach_the_pipeline_only_through_its_doors() {
    let around = around_the_doors(&source());
    assert!(
        around.is_empty(),
        "commands that reach into ops around its doors (ops/doors.rs):\n{}",
        around.join("\n")
    );
    let planted = around_the_doors(&planted(
        &["commands", "ps"],
        "\nfn planted() { let _ = crate::ops::journal::intent::abandoned; }\n",
    ));
    assert!(
        planted
            .iter()
            .any(|w| w == "commands::ps -> ops::journal::intent::abandoned"),
        "{planted:?}"
    );
}

/// The plugin crate's rooms, top first: the C entry points CRIU calls
/// (`entries.rs`), one CRIU run's state (the crate root, `lib.rs`), the
/// helper's life (`helper.rs`), and at the bottom what the plugin calls of
/// CRIU and the kernel (`host.rs`) and the link to the helper
/// (`link.rs`).
const PLUGIN_FLOORS: [&[&str]; 4] = [&["entries"], &["lib"], &["helper"], &["host", "link"]];

fn plugin_source() -> Vec<(ModPath, PathBuf, String)> {
    graph::source_files(&crate::workspace().join("criu-plugin/src"))
}

fn against_the_plugin_floors(files: &[(ModPath, PathBuf, String)]) -> Vec<String> {
    let graph = graph::graph(files);
    let mut wrong = rooms_against(&graph, &PLUGIN_FLOORS, &[]);
    wrong.extend(circles(&graph));
    wrong
}

/// The plugin crate reads top to bottom: no arrow up, no circle; a planted
/// call from the bottom to the helper, and one from the crate root to the
/// entries, are seen.
#[test]
fn the_plugin_crate_reads_top_to_bottom() {
    let files = plugin_source();
    assert!(
        files.len() >= 5,
        "the plugin's files: {:?}",
        files.iter().map(|f| &f.1).collect::<Vec<_>>()
    );
    let wrong = against_the_plugin_floors(&files);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    for (module, extra, said) in [
        (
            "host",
            "\nfn planted() { let _ = crate::helper::caught; }\n",
            "host: host uses helper",
        ),
        (
            "lib",
            "\nuse crate::entries::planted;\n",
            ": lib uses entries",
        ),
    ] {
        let mut files = plugin_source();
        let file = files
            .iter_mut()
            .find(|(m, _, _)| room_of_module(m) == module)
            .expect("the module exists");
        file.2.push_str(extra);
        let wrong = against_the_plugin_floors(&files);
        assert!(
            wrong.iter().any(|w| w.contains(said)),
            "{extra:?} went unseen: {wrong:?}"
        );
    }
}
