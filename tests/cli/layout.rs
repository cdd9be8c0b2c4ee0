//! The house keeps its floors: every `crate::` path in `src/` points from a
//! room (a folder, or a file at the top of `src/`) to the same room or to a
//! lower floor, never up, so there is no import circle between rooms. The
//! floors are the ones `src/lib.rs` describes.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The rooms, top floor first. A room may use any room below it.
const FLOORS: [&[&str]; 9] = [
    &["main"],
    &["cli"],
    &["output"],
    &["commands"],
    &["api"],
    &["ops"],
    &["gpu"],
    &["targets", "driver"],
    &["exit", "files"],
];

/// Files outside the floors: the crate root and tests over every surface.
const EXEMPT: [&str; 2] = ["lib", "surface_tests"];

fn floor_of(room: &str) -> Option<usize> {
    FLOORS.iter().position(|rooms| rooms.contains(&room))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The room a file belongs to: its folder under `src/`, or its stem.
fn room_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("under src/");
    let first = relative
        .components()
        .next()
        .expect("a path")
        .as_os_str()
        .to_string_lossy()
        .into_owned();
    first.trim_end_matches(".rs").to_string()
}

/// The first name after every `prefix` in a piece of code (each name of
/// a group: `prefix{a, b::c}` gives `a` and `b`). Comment lines are skipped.
fn names_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let word = |text: &str| -> String {
        text.trim()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut names = BTreeSet::new();
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find(prefix) {
            rest = &rest[at + prefix.len()..];
            match rest.strip_prefix('{') {
                Some(group) => names.extend(
                    group
                        .split('}')
                        .next()
                        .unwrap_or_default()
                        .split(',')
                        .map(word),
                ),
                None => {
                    names.insert(word(rest));
                }
            }
        }
    }
    names.retain(|name| !name.is_empty() && name != "self");
    names
}

/// Every room a piece of code names through `crate::`, grouped imports
/// (`use crate::{a, b::c}`) included.
fn rooms_named(code: &str) -> BTreeSet<String> {
    names_after(code, "crate::")
}

#[test]
fn every_import_points_down_a_floor_or_stays_in_its_room() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut wrong = Vec::new();
    for file in &files {
        let from = room_of(&src, file);
        if EXEMPT.contains(&from.as_str()) {
            continue;
        }
        let Some(from_floor) = floor_of(&from) else {
            wrong.push(format!(
                "{}: room {from:?} is on no floor; add it to FLOORS and lib.rs",
                file.display()
            ));
            continue;
        };
        let code = fs::read_to_string(file).expect("a source file");
        for to in rooms_named(&code) {
            if to == from {
                continue;
            }
            match floor_of(&to) {
                Some(to_floor) if to_floor > from_floor => {}
                Some(_) => wrong.push(format!(
                    "{}: {from} uses {to}, which is not on a lower floor",
                    file.display()
                )),
                None => wrong.push(format!(
                    "{}: {from} uses {to:?}, a room on no floor",
                    file.display()
                )),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the floors:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_parser_sees_plain_grouped_and_inline_paths() {
    let code = "use crate::ops::{Request};\nuse crate::{gpu, driver::GpuUuid};\n// crate::cli in a comment\nlet x = crate::exit::ExitStatus::Success;";
    let rooms: Vec<String> = rooms_named(code).into_iter().collect();
    assert_eq!(rooms, ["driver", "exit", "gpu", "ops"]);
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

/// The floors inside `ops/`, top first: the pipeline (`ops/mod.rs`) runs
/// the stages; the stages use the drain, the pre-flights, the journal, the
/// executor and the wording; everyone speaks the vocabulary, which uses no
/// other room of ops.
const OPS_FLOORS: [&[&str]; 8] = [
    &["mod"],
    &["stages"],
    &["drain"],
    &["preflight"],
    &["journal"],
    &["execute"],
    &["diagnose"],
    &["vocabulary"],
];

/// The room inside `ops/` that a `crate::ops::NAME` path names: a folder
/// or file of ops, else what `ops/mod.rs` itself defines or re-exports.
fn ops_room(name: &str) -> String {
    let ops = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ops");
    if ops.join(name).is_dir() || ops.join(format!("{name}.rs")).is_file() {
        name.to_string()
    } else {
        "mod".to_string()
    }
}

/// Every `crate::ops::` path in a piece of code, by the ops room it names.
fn ops_rooms_named(code: &str) -> BTreeSet<String> {
    names_after(code, "crate::ops::")
        .iter()
        .map(|name| ops_room(name))
        .collect()
}

#[test]
fn inside_ops_every_import_points_down_a_floor_or_stays_in_its_room() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let ops = src.join("ops");
    let mut files = Vec::new();
    rust_files(&ops, &mut files);
    files.sort();
    let floor = |room: &str| OPS_FLOORS.iter().position(|rooms| rooms.contains(&room));
    let mut wrong = Vec::new();
    for file in &files {
        let from = room_of(&ops, file);
        let Some(from_floor) = floor(&from) else {
            wrong.push(format!(
                "{}: room {from:?} of ops is on no floor",
                file.display()
            ));
            continue;
        };
        let code = fs::read_to_string(file).expect("a source file");
        for to in ops_rooms_named(&code) {
            match floor(&to) {
                _ if to == from => {}
                Some(to_floor) if to_floor > from_floor => {}
                _ => wrong.push(format!(
                    "{}: {from} uses {to}, which is not on a lower floor of ops",
                    file.display()
                )),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the floors of ops:\n{}",
        wrong.join("\n")
    );
}

/// The code of a source file above its `#[cfg(test)]` module.
fn code_outside_tests(file: &Path) -> String {
    let code = fs::read_to_string(file).expect("a source file");
    match code.find("#[cfg(test)]\nmod tests") {
        Some(at) => code[..at].to_string(),
        None => code,
    }
}

/// A variable that only tests should set (a stand-in for the host's GPUs,
/// a pause, a kill) must not steer a root cudackpt that a user started with
/// their environment: it is named `CUDACKPT_DEBUG_*`, documented as
/// ignored by release builds, and read only under `debug_assertions`.
/// `CUDACKPT_DRIVER_GPUS_DIR` once let any environment show a release
/// build GPUs that were not there.
#[test]
fn variables_for_tests_are_read_by_debug_builds_only() {
    let src = crate::support::workspace().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let table = fs::read_to_string(src.join("cli/artifacts.rs")).expect("artifacts.rs");
    let mut wrong = Vec::new();
    // The environment table: a name, then its description on the next line.
    let lines: Vec<&str> = table.lines().collect();
    for pair in lines.windows(2) {
        let (name, text) = (pair[0].trim(), pair[1].trim());
        let Some(name) = name
            .strip_prefix("\"CUDACKPT_")
            .and_then(|n| n.strip_suffix("\","))
        else {
            continue;
        };
        let for_tests = text.contains("for tests") || text.contains("(tests)");
        let debug = name.starts_with("DEBUG_");
        if for_tests != debug || (debug && !text.contains("Release builds ignore it")) {
            wrong.push(format!(
                "CUDACKPT_{name}: a variable for tests is named CUDACKPT_DEBUG_* and said to be ignored by release builds: {text}"
            ));
        }
    }
    // Every read of one is under debug_assertions.
    for file in &files {
        let code = code_outside_tests(file);
        let lines: Vec<&str> = code.lines().collect();
        let consts: Vec<String> = lines
            .iter()
            .filter(|l| l.contains("\"CUDACKPT_DEBUG_") && l.contains("const "))
            .filter_map(|l| {
                l.split("const ")
                    .nth(1)?
                    .split(':')
                    .next()
                    .map(str::to_string)
            })
            .collect();
        for (at, line) in lines.iter().enumerate() {
            let reads = line.contains("env::var");
            let debug = line.contains("\"CUDACKPT_DEBUG_")
                || consts.iter().any(|c| line.contains(c.as_str()));
            if reads && debug {
                let guarded = lines[at.saturating_sub(6)..=at]
                    .iter()
                    .any(|l| l.contains("debug_assertions"));
                if !guarded {
                    wrong.push(format!(
                        "{}:{}: read without a debug_assertions guard: {}",
                        file.display(),
                        at + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
