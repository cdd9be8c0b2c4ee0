//! Parsing the native grammar quickly. Clap builds the whole command tree
//! before it parses, and copies each of the ten global options into each
//! of the twenty subcommands (their own arguments are deferred: `defer` in
//! args.rs): 0.32 ms for a first parse here, against 0.14 ms with one
//! subcommand, in a 3 ms invocation the driver call should dominate. When
//! argv plainly names its subcommand (only global options we know come
//! before it), clap is given a tree with that one subcommand under the same
//! top; anything else (no subcommand, `help`, an unknown word, an unknown
//! option first) goes to the whole tree, so help, suggestions and errors
//! stay clap's own. The tests parse a corpus both ways and compare.

use std::ffi::OsString;

use clap::{Args, CommandFactory, FromArgMatches, Parser};

use crate::cli::args::{Cli, GlobalArgs};

/// The global options that take a value (the others are flags).
const GLOBAL_OPTIONS_WITH_VALUES: [&str; 4] =
    ["--libcuda", "--record-dir", "--color", "--progress-fd"];

/// The global flags, long and short.
const GLOBAL_FLAGS: [&str; 5] = ["--json", "--verbose", "--quiet", "--yes", "--no-lock"];
const GLOBAL_SHORT_FLAGS: [char; 3] = ['v', 'q', 'y'];

/// Parses `args` (argv, program name first) as the native grammar.
pub fn parse(args: &[OsString]) -> Result<Cli, clap::Error> {
    let mut cli = match subcommand_named(args) {
        Some(name) => parse_with(command_with_only(&name), args),
        None => Cli::try_parse_from(args),
    }?;
    // Read here rather than through clap's `env`, which would show
    // `--libcuda <PATH>` in every usage message as if it had been given.
    if cli.global.libcuda.is_none() {
        cli.global.libcuda = super::env::libcuda_from_env();
    }
    Ok(cli)
}

fn parse_with(mut command: clap::Command, args: &[OsString]) -> Result<Cli, clap::Error> {
    let matches = command.try_get_matches_from_mut(args)?;
    Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut command))
}

/// The subcommand argv names, when only known global options come before
/// it; `None` sends the parse to the whole tree.
fn subcommand_named(args: &[OsString]) -> Option<String> {
    let mut rest = args.iter().skip(1);
    while let Some(arg) = rest.next() {
        let arg = arg.to_str()?;
        if GLOBAL_OPTIONS_WITH_VALUES.contains(&arg) {
            rest.next()?;
        } else if GLOBAL_OPTIONS_WITH_VALUES
            .iter()
            .any(|o| arg.strip_prefix(o).is_some_and(|v| v.starts_with('=')))
            || GLOBAL_FLAGS.contains(&arg)
            || is_short_flags(arg)
        {
            continue;
        } else {
            return SUBCOMMANDS.contains(&arg).then(|| arg.to_string());
        }
    }
    None
}

/// `-v`, `-vv`, `-vq`: global short flags bundled.
fn is_short_flags(arg: &str) -> bool {
    arg.strip_prefix('-').is_some_and(|flags| {
        !flags.is_empty()
            && !flags.starts_with('-')
            && flags.chars().all(|c| GLOBAL_SHORT_FLAGS.contains(&c))
    })
}

/// The subcommands a fast parse may pick (clap's own `help` is not one);
/// a test ties the list to the tree.
pub const SUBCOMMANDS: [&str; 23] = [
    "state",
    "lock",
    "checkpoint",
    "restore",
    "unlock",
    "toggle",
    "suspend",
    "resume",
    "restore-tid",
    "wait",
    "ps",
    "check",
    "recover",
    "devices",
    "doctor",
    "demo",
    "install-compat",
    "completions",
    "man",
    "criu-hook",
    "dump",
    "undump",
    "slurm",
];

/// The top of the tree as `Cli` declares it (its name, version and width,
/// which the corpus test checks through help and errors), with `name` its
/// one subcommand.
fn command_with_only(name: &str) -> clap::Command {
    let whole = Cli::command();
    let Some(sub) = whole.find_subcommand(name).cloned() else {
        return whole;
    };
    let top = clap::Command::new("cudackpt")
        .version(env!("CARGO_PKG_VERSION"))
        .propagate_version(true)
        .max_term_width(100)
        .subcommand_required(true)
        .arg_required_else_help(true);
    GlobalArgs::augment_args(top).subcommand(sub)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    /// What a parse gave: the parsed command, or clap's error as the user
    /// would see it.
    fn outcome(result: Result<Cli, clap::Error>) -> String {
        match result {
            Ok(cli) => format!("{cli:?}"),
            Err(e) => format!("{:?}: {}", e.kind(), e.render()),
        }
    }

    #[test]
    fn the_fast_parse_and_the_whole_tree_agree() {
        let corpus = [
            "cudackpt state 4242",
            "cudackpt --json state 4242 -p 7",
            "cudackpt state --json --color never 4242",
            "cudackpt -vq lock 1",
            "cudackpt -v lock --timeout 5s 4242",
            "cudackpt --libcuda /x/libcuda.so.1 unlock 4242",
            "cudackpt --libcuda=/x unlock 4242",
            "cudackpt --record-dir /r checkpoint 4242",
            "cudackpt suspend --drain --drain-timeout 10s --tree 1",
            "cudackpt resume --map GPU-a=GPU-b 1 2",
            "cudackpt restore --map auto 1",
            "cudackpt toggle --dry-run 1",
            "cudackpt ps --all",
            "cudackpt check --drain --cgroup /sys/fs/cgroup/x",
            "cudackpt recover --dry-run",
            "cudackpt devices",
            "cudackpt doctor",
            "cudackpt wait --state checkpointed --timeout 1s 9",
            "cudackpt restore-tid 9",
            "cudackpt completions bash",
            "cudackpt lock",
            "cudackpt lock --bogus 1",
            "cudackpt lock --timeot 5s 1",
            "cudackpt state abc",
            "cudackpt lock --help",
            "cudackpt state -h",
            "cudackpt state --version",
            "cudackpt --version",
            "cudackpt --help",
            "cudackpt",
            "cudackpt help state",
            "cudackpt stat 1",
            "cudackpt --bogus state 1",
            "cudackpt -vq --json suspend --all --yes",
            "cudackpt --quiet --verbose state 1",
        ];
        for line in corpus {
            let args = argv(line);
            assert_eq!(
                outcome(parse(&args)),
                outcome(Cli::try_parse_from(&args)),
                "{line}"
            );
        }
    }

    #[test]
    fn the_known_names_are_the_tree_s() {
        let whole = Cli::command();
        let mut names: Vec<&str> = whole
            .get_subcommands()
            .map(clap::Command::get_name)
            .collect();
        names.sort_unstable();
        let mut known: Vec<&str> = SUBCOMMANDS.to_vec();
        known.sort_unstable();
        assert_eq!(known, names, "SUBCOMMANDS lists every subcommand");
        let mut with_values: Vec<String> = Vec::new();
        let mut flags: Vec<String> = Vec::new();
        let mut shorts: Vec<char> = Vec::new();
        for arg in whole.get_arguments().filter(|a| a.is_global_set()) {
            let long = format!("--{}", arg.get_long().expect("a long name"));
            if arg.get_action().takes_values() {
                with_values.push(long);
            } else {
                flags.push(long);
            }
            shorts.extend(arg.get_short());
        }
        assert_eq!(with_values, GLOBAL_OPTIONS_WITH_VALUES);
        assert_eq!(flags, GLOBAL_FLAGS);
        assert_eq!(shorts, GLOBAL_SHORT_FLAGS);
    }

    #[test]
    fn only_plain_invocations_take_the_fast_parse() {
        for (line, named) in [
            ("cudackpt lock 1", Some("lock")),
            ("cudackpt --json -vv --color=never lock 1", Some("lock")),
            ("cudackpt --color never lock 1", Some("lock")),
            ("cudackpt --color", None),
            ("cudackpt help lock", None),
            ("cudackpt --bogus lock 1", None),
            ("cudackpt -x lock 1", None),
            ("cudackpt", None),
        ] {
            assert_eq!(subcommand_named(&argv(line)).as_deref(), named, "{line}");
        }
    }
}
