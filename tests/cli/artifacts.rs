//! The committed shell completions and man pages are exactly what the
//! binary generates; when they drift, the failure says how to regenerate.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use crate::support::{workspace, Fixture};

const REGENERATE: &str =
    "the committed copy is stale: run scripts/generate-artifacts and commit the result";

fn read_dir(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let entry = entry.expect("dir entry");
            (
                entry.file_name().to_string_lossy().into_owned(),
                fs::read(entry.path()).expect("read file"),
            )
        })
        .collect()
}

#[test]
fn completions_match_the_committed_copies() {
    let fx = Fixture::new();
    for (shell, file) in [
        ("bash", "cudackpt.bash"),
        ("zsh", "_cudackpt"),
        ("fish", "cudackpt.fish"),
    ] {
        let output = fx
            .cudackpt(&["completions", shell])
            .assert()
            .success()
            .stderr("")
            .get_output()
            .clone();
        let committed = fs::read(workspace().join("completions").join(file))
            .unwrap_or_else(|e| panic!("completions/{file}: {e}; {REGENERATE}"));
        assert!(!output.stdout.is_empty());
        assert!(
            output.stdout == committed,
            "completions/{file} differs from `cudackpt completions {shell}`: {REGENERATE}"
        );
    }
}

#[test]
fn man_pages_match_the_committed_copies() {
    let fx = Fixture::new();
    let dir = fx.dir().join("man");
    fx.cudackpt(&["man", "--dir", &dir.to_string_lossy()])
        .assert()
        .success()
        .stdout("")
        .stderr("");
    let generated = read_dir(&dir);
    let committed = read_dir(&workspace().join("man"));
    assert_eq!(
        generated.keys().collect::<Vec<_>>(),
        committed.keys().collect::<Vec<_>>(),
        "man/ does not hold exactly the generated pages: {REGENERATE}"
    );
    for (name, page) in &generated {
        assert!(
            Some(page) == committed.get(name),
            "man/{name} differs from the generated page: {REGENERATE}"
        );
    }
    // One page per command besides the root page.
    assert!(generated.contains_key("cudackpt.1") && generated.len() > 10);

    let output = fx
        .cudackpt(&["man"])
        .assert()
        .success()
        .get_output()
        .clone();
    assert!(
        Some(&output.stdout) == committed.get("cudackpt.1"),
        "`cudackpt man` differs from man/cudackpt.1: {REGENERATE}"
    );
}

#[test]
fn the_man_page_documents_exit_statuses_and_the_json_contract() {
    let page = fs::read_to_string(workspace().join("man").join("cudackpt.1")).expect("man page");
    for text in [
        "EXIT STATUS",
        "JSON OUTPUT",
        "schema_version",
        "rolled_back",
        ".SH ENVIRONMENT",
        ".SH FILES",
        ".SH \"COMPATIBLE MODE\"",
        "/run/cudackpt/intents/OWNER.json",
        "\\-\\-get\\-restore\\-tid",
    ] {
        assert!(page.contains(text), "man/cudackpt.1 lacks {text:?}");
    }
    for status in cudackpt::internal::EXIT_STATUSES {
        assert!(
            page.contains(&format!("\\fB{}\\fR", status.code())),
            "exit status {}",
            status.code()
        );
    }
    // Every variable cudackpt reads is documented: each is a constant of
    // src/environment.rs, the one module that reads them
    // (tests/house/environment.rs).
    let module =
        fs::read_to_string(workspace().join("src/environment.rs")).expect("environment.rs");
    let read: Vec<&str> = module
        .lines()
        .filter_map(|l| {
            l.strip_prefix("pub const ")?
                .split("&str = \"")
                .nth(1)?
                .strip_suffix("\";")
        })
        .collect();
    assert!(read.len() > 8, "{read:?}");
    for name in read {
        assert!(
            page.contains(&format!("\\fB{name}\\fR")),
            "the ENVIRONMENT section lacks {name}"
        );
    }
}

/// A subcommand's page points to cudackpt(1) for what every command shares,
/// instead of repeating it.
#[test]
fn subcommand_pages_refer_to_the_main_page() {
    let page =
        fs::read_to_string(workspace().join("man").join("cudackpt-suspend.1")).expect("page");
    assert!(page.contains("see cudackpt(1)"), "{page}");
    assert!(
        !page.contains(".SH \"JSON OUTPUT\""),
        "said once, in cudackpt(1)"
    );
    // The global options apart from the command's own, after them.
    let own = page.find(".SH OPTIONS").expect("OPTIONS");
    let global = page.find(".SH \"GLOBAL OPTIONS\"").expect("GLOBAL OPTIONS");
    assert!(
        own < global && page[global..].contains("\\-\\-json"),
        "{page}"
    );
    assert!(
        !page[own..global].contains("\\-\\-json"),
        "--json is global"
    );
    // In --help, the global options stand apart from the command's own.
    let help = std::process::Command::new(crate::support::cudackpt_bin())
        .args(["suspend", "--help"])
        .output()
        .expect("help");
    let help = String::from_utf8_lossy(&help.stdout);
    let own = help.find("--deadline").expect("suspend's own option");
    let global = help.find("Global options:").expect("a heading");
    assert!(own < global && help[global..].contains("--json"), "{help}");
}

/// A synopsis shows what each option takes (`[--libcuda PATH]`), and the
/// source of the facts is a paragraph, not an item of their list.
#[test]
fn the_synopsis_names_option_values_and_the_facts_name_their_source_apart() {
    let page = fs::read_to_string(workspace().join("man").join("cudackpt.1")).expect("page");
    let synopsis = &page[page.find(".SH SYNOPSIS").expect("SYNOPSIS")..];
    let synopsis = &synopsis[..synopsis.find(".SH DESCRIPTION").expect("DESCRIPTION")];
    for option in [
        "[\\fB\\-\\-libcuda\\fR \\fIPATH\\fR]",
        "[\\fB\\-\\-record\\-dir\\fR \\fIDIR\\fR]",
    ] {
        assert!(synopsis.contains(option), "{option} in {synopsis}");
    }
    let restore =
        fs::read_to_string(workspace().join("man").join("cudackpt-restore.1")).expect("page");
    assert!(
        restore.contains("\\fB\\-\\-map\\fR \\fIOLD=NEW\\fR]"),
        "{restore}"
    );
    assert!(
        !page.contains(".TP\n\\fBSource\\fR"),
        "the source is no list item"
    );
    assert!(page.contains(".PP\nThese facts were measured on driver"));
    assert!(page.contains("two lines on stderr (the message, then an indented hint)"));
}

/// The guide's exit table (docs/guide/json.md) is the code's, row for
/// row: a status whose meaning changes (or a new one) fails here until the
/// guide says so.
#[test]
fn the_guide_s_exit_table_matches_the_code() {
    let guide = fs::read_to_string(workspace().join("docs/guide/json.md")).expect("json.md");
    let table: Vec<String> = guide
        .lines()
        .skip_while(|line| *line != "| status | meaning |")
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(str::to_string)
        .collect();
    let expected: Vec<String> = cudackpt::internal::EXIT_STATUSES
        .iter()
        .map(|status| format!("| {} | {} |", status.code(), status.meaning()))
        .collect();
    assert_eq!(table, expected, "docs/guide/json.md's exit table");
}

/// `cargo metadata` of the workspace, as the registry and packagers read it.
fn cargo_metadata() -> serde_json::Value {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = std::process::Command::new(cargo)
        .current_dir(workspace())
        .args(["metadata", "--format-version", "1", "--locked"])
        .args(["--filter-platform", "x86_64-unknown-linux-gnu"])
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON")
}

/// The crate cannot reach a registry without saying where its source and
/// documentation live. It has no public home yet (and the name is taken on
/// GitHub by an unrelated project, so no address can be guessed), so it
/// must stay `publish = false`; the day it is published, `repository` and
/// `documentation` must be real https addresses, or this fails.
#[test]
fn the_crate_is_unpublishable_until_it_names_its_home() {
    let metadata = cargo_metadata();
    let ours = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .find(|p| p["name"] == "cudackpt")
        .expect("the cudackpt package");
    // cargo metadata writes `publish = false` as an empty registry list.
    let unpublishable = ours["publish"].as_array().is_some_and(Vec::is_empty);
    let real = |field: &str| {
        let url = ours[field].as_str().unwrap_or_default();
        url.starts_with("https://") && !url.contains("invalid") && !url.contains("example")
    };
    let home = real("repository") && real("documentation");
    // Exactly one of the two: no home and unpublishable (today), or a real
    // home and publishable. A home named while still unpublishable is a
    // step half taken; so is `publish = false` dropped without a home.
    assert!(
        unpublishable != home,
        "publish = false is {unpublishable}, and repository/documentation are {}: \
         keep `publish = false` until Cargo.toml names real https addresses for both, \
         then drop it",
        if home { "real" } else { "missing or not real" }
    );
}

/// `rust-version` is true: no locked dependency (of any workspace member,
/// for this platform) needs a newer Rust than the manifest declares.
/// Checked through `cargo metadata`, which reads each crate's own
/// `rust-version`, so it holds without installing that toolchain.
#[test]
fn the_declared_rust_version_covers_every_locked_dependency() {
    let metadata = cargo_metadata();
    let version = |text: &str| -> (u64, u64, u64) {
        let mut parts = text.split('.').map(|p| p.parse::<u64>().expect("a number"));
        (
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
            parts.next().unwrap_or(0),
        )
    };
    let packages = metadata["packages"].as_array().expect("packages");
    let ours = packages
        .iter()
        .find(|p| p["name"] == "cudackpt")
        .and_then(|p| p["rust_version"].as_str())
        .expect("cudackpt declares rust-version");
    let newer: Vec<String> = packages
        .iter()
        .filter_map(|p| {
            let needs = p["rust_version"].as_str()?;
            (version(needs) > version(ours))
                .then(|| format!("{} {} needs {needs}", p["name"], p["version"]))
        })
        .collect();
    assert!(
        newer.is_empty(),
        "rust-version = {ours}, but: {newer:?}; raise it, or pin versions that build on {ours}"
    );
}

/// Completions offer no internal (hidden) argument, and complete `wait
/// --state` from its values.
#[test]
fn completions_hide_internal_arguments_and_know_the_states() {
    let mut command = cudackpt::internal::cli_command();
    command.build(); // the subcommands' arguments are deferred until then
    let hidden: Vec<String> = command
        .get_subcommands()
        .flat_map(|sub| sub.get_arguments())
        .filter(|a| a.is_hide_set())
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect();
    assert!(!hidden.is_empty(), "the internal flags are hidden");
    for (name, script) in read_dir(&workspace().join("completions")) {
        let script = String::from_utf8_lossy(&script);
        for flag in &hidden {
            assert!(!script.contains(flag.as_str()), "{name} offers {flag}");
        }
        assert!(
            ["running", "locked", "checkpointed", "failed"]
                .iter()
                .all(|s| script.contains(s)),
            "{name} completes wait --state"
        );
    }
}

/// `cudackpt man` on a terminal shows the page as `man` formats it (no
/// roff), and into a pipe or a file writes the roff source.
#[test]
fn the_man_page_is_formatted_on_a_terminal_and_raw_into_a_pipe() {
    let fx = Fixture::new();
    let raw = fx.cudackpt(&["man"]).output().expect("man");
    assert!(raw.status.success());
    assert!(String::from_utf8_lossy(&raw.stdout).starts_with(".ie "));
    let script = Path::new("/usr/bin/script");
    let man = Path::new("/usr/bin/man");
    if !crate::support::prerequisite(
        "run a command on a terminal (script(1)) with man(1)",
        script.is_file() && man.is_file(),
    ) {
        return;
    }
    if crate::support::running_as_root() {
        // Root pages through its own less whatever MANPAGER says
        // (pager.rs): the first screen is the formatted page.
        let terminal = crate::pager::Terminal::start(&fx, None, &[]);
        terminal.wait_for(&["(press h for help"]);
        let text = terminal.text();
        terminal.quit();
        assert!(text.contains("General Commands Manual"), "{text}");
        assert!(!text.contains(".TH cudackpt"), "{text}");
        return;
    }
    // script(1) gives cudackpt a pseudo-terminal; cat is the pager.
    let line = format!("'{}' man", crate::support::cudackpt_bin().display());
    let shown = fx
        .command_for(script, &["-qec", &line, "/dev/null"])
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .output()
        .expect("script runs");
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.status.success(), "{text}");
    assert!(text.contains("General Commands Manual"), "{text}");
    assert!(!text.contains(".TH cudackpt"), "{text}");
}

/// `cudackpt man dump` shows a command's own page (it was refused: the
/// subcommand pages needed `--dir` and `man -l` without the .deb); into a
/// pipe it is the committed page; a command with no page is a usage
/// error that lists those that have one.
#[test]
fn man_shows_a_command_s_own_page() {
    let fx = Fixture::new();
    let raw = fx.cudackpt(&["man", "dump"]).output().expect("man dump");
    assert!(raw.status.success(), "{raw:?}");
    let committed = fs::read(workspace().join("man/cudackpt-dump.1")).expect("man/cudackpt-dump.1");
    assert_eq!(raw.stdout, committed);
    let wrong = fx.cudackpt(&["man", "dumps"]).output().expect("man dumps");
    assert_eq!(wrong.status.code(), Some(2));
    let said = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        said.contains("\"dumps\"") && said.contains("undump"),
        "{said}"
    );
    let both = fx
        .cudackpt(&["man", "dump", "--dir", "x"])
        .output()
        .expect("man dump --dir");
    assert_eq!(both.status.code(), Some(2));
}
