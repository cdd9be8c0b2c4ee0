//! The help, the man pages, the README and the guide say what the tool
//! does: every command line the documents show parses, every command and
//! option the README's table names exists, every exit status is listed,
//! the exit codes the help names are the ones the tool exits with, and a
//! dry run's help does not say it sends anything. A change in one fails
//! here until the others follow.

use std::fs;
use std::path::PathBuf;

use crate::support::{workspace, Fixture};

/// The documents whose command lines are checked: those people read,
/// less the CHANGELOG (its history names what the tool once had).
fn documents() -> Vec<PathBuf> {
    crate::support::documents()
        .into_iter()
        .filter(|doc| !doc.ends_with("CHANGELOG.md"))
        .collect()
}

/// Splits a shell line into words, keeping quoted text and `$(...)` whole;
/// the operators that end a command (`|`, `&&`, `;`, `>`...) are words of
/// their own.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = line.chars().peekable();
    let mut depth = 0;
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') if depth == 0 => quote = Some(c),
            (None, '$') if chars.peek() == Some(&'(') => {
                depth += 1;
                word.push(c);
                word.push(chars.next().expect("peeked"));
            }
            (None, ')') if depth > 0 => {
                depth -= 1;
                word.push(c);
            }
            (None, c) if depth > 0 => word.push(c),
            (None, '#') if word.is_empty() => break,
            (None, c) if c.is_whitespace() => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            (None, '|' | ';' | '&' | '>' | '<' | '(' | ')') => {
                let redirected_fd = c == '>' && word.chars().all(|d| d.is_ascii_digit());
                if !word.is_empty() && !redirected_fd {
                    words.push(std::mem::take(&mut word));
                }
                word.clear();
                words.push(c.to_string());
            }
            (None, c) => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// The cudackpt command lines in a shell line: the words after each
/// `cudackpt` in a command's place (first, after `sudo` or variable
/// settings, or after an operator), up to the next operator. A word that
/// is a shell variable or substitution stands for a PID.
fn cudackpt_calls(line: &str) -> Vec<Vec<String>> {
    let words = shell_words(line);
    let mut calls = Vec::new();
    let mut at_command = true;
    let mut i = 0;
    while i < words.len() {
        let word = &words[i];
        let operator = matches!(word.as_str(), "|" | ";" | "&" | ">" | "<" | "(" | ")");
        if operator {
            at_command = true;
        } else if at_command && (word == "sudo" || word.contains('=') && !word.starts_with('-')) {
            // still before the command
        } else if at_command && (word == "cudackpt" || word.ends_with("/cudackpt")) {
            let mut call = vec!["cudackpt".to_string()];
            i += 1;
            while i < words.len() && !is_operator(&words[i]) {
                let arg = &words[i];
                call.push(if arg.starts_with('$') {
                    "4242".to_string()
                } else {
                    arg.clone()
                });
                i += 1;
            }
            calls.push(call);
            continue;
        } else {
            at_command = false;
        }
        i += 1;
    }
    calls
}

fn is_operator(word: &str) -> bool {
    matches!(word, "|" | ";" | "&" | ">" | "<" | "(" | ")")
}

/// Every cudackpt command line a document shows, in code blocks and in
/// inline code: (where, whether inline, the words).
fn documented_calls() -> Vec<(String, bool, Vec<String>)> {
    let mut found = Vec::new();
    for doc in documents() {
        let text = fs::read_to_string(&doc).expect("a document");
        let name = doc
            .strip_prefix(workspace())
            .unwrap_or(&doc)
            .display()
            .to_string();
        let mut fenced = false;
        let mut shell = false;
        let mut continued = String::new();
        for (number, line) in text.lines().enumerate() {
            if let Some(info) = line.trim_start().strip_prefix("```") {
                fenced = !fenced;
                shell = matches!(info.trim(), "" | "sh" | "bash" | "console" | "shell");
                continue;
            }
            let lines: Vec<String> = if fenced && !shell {
                continue;
            } else if fenced {
                if let Some(start) = line.strip_suffix('\\') {
                    continued.push_str(start);
                    continued.push(' ');
                    continue;
                }
                let whole = std::mem::take(&mut continued) + line;
                let trimmed = whole.trim_start();
                let command = trimmed
                    .strip_prefix("$ ")
                    .or_else(|| trimmed.strip_prefix("# "));
                vec![command.unwrap_or(trimmed).to_string()]
            } else {
                line.split('`')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_string)
                    .collect()
            };
            for shown in lines {
                for call in cudackpt_calls(&shown) {
                    found.push((format!("{name}:{}", number + 1), !fenced, call));
                }
            }
        }
    }
    found
}

/// NVIDIA's grammar (`--toggle --pid N`), which clap does not parse.
fn nvidia_grammar(call: &[String]) -> bool {
    call.iter().any(|word| {
        matches!(
            word.as_str(),
            "--pid" | "--toggle" | "--get-state" | "--get-restore-tid" | "--action" | "-p"
        )
    })
}

/// The words a document writes for what a reader fills in, as the tool
/// would get them: a placeholder in capitals (PID, AGENT_PID, P1) or a
/// shell substitution is a PID, a GPU's UUID written short is a whole one,
/// brackets around an optional word go, and an ellipsis is no word.
fn filled_in(call: &[String]) -> Vec<String> {
    let placeholder = |word: &str| {
        word.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_' || c == '.')
            && word.starts_with(|c: char| c.is_ascii_uppercase())
            || word.starts_with('P')
                && word.len() <= 3
                && word[1..].chars().all(|c| c.is_ascii_alphanumeric())
    };
    call.iter()
        .filter(|word| !matches!(word.as_str(), ".." | "..."))
        .map(|word| {
            word.trim_start_matches('[')
                .trim_end_matches(']')
                .to_string()
        })
        .map(|word| match word.find("$(") {
            Some(at) => format!("{}1", &word[..at]),
            None => word,
        })
        .map(|word| word.replace("GPU-aaaa...", &format!("GPU-{}", "a".repeat(32))))
        .map(|word| word.replace("GPU-bbbb...", &format!("GPU-{}", "b".repeat(32))))
        .map(|word| {
            if word != "cudackpt" && placeholder(&word) {
                "4242".into()
            } else {
                word
            }
        })
        .collect()
}

/// Every cudackpt command line the README, the guide and the other
/// documents show parses as the tool parses it: an option renamed or
/// removed, or a value it no longer takes, fails here with where it is
/// shown. A command named in prose (inline code) may leave out what it
/// requires, but what it names must exist.
#[test]
fn every_documented_command_line_parses() {
    use clap::error::ErrorKind;
    let calls = documented_calls();
    assert!(
        calls.len() > 100,
        "the scan finds the documents' command lines ({} found)",
        calls.len()
    );
    let subcommands: Vec<String> = cudackpt::internal::cli_command()
        .get_subcommands()
        .map(|command| command.get_name().to_string())
        .collect();
    let mut wrong = Vec::new();
    for (at, inline, call) in &calls {
        let named = call
            .get(1)
            .is_some_and(|word| word.starts_with('-') || subcommands.contains(word));
        if nvidia_grammar(call) || *inline && !named || call.len() == 1 {
            continue;
        }
        let words = filled_in(call);
        let Err(error) = cudackpt::internal::cli_command().try_get_matches_from(&words) else {
            continue;
        };
        let shown_short = *inline
            && (error.kind() == ErrorKind::MissingRequiredArgument
                || error.kind() == ErrorKind::InvalidValue
                    && words.last().is_some_and(|w| w.starts_with("--")));
        if !shown_short
            && !matches!(
                error.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            )
        {
            let first = error
                .to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .to_string();
            wrong.push(format!("{at}: {}\n    {first}", words.join(" ")));
        }
    }
    assert!(
        wrong.is_empty(),
        "documented command lines the tool does not parse:\n{}",
        wrong.join("\n")
    );
}

/// `cudackpt --help` lists every exit status the tool has, by number.
#[test]
fn the_help_lists_every_exit_status() {
    let fx = Fixture::new();
    let help = long_help(&fx, &[]);
    for status in cudackpt::internal::EXIT_STATUSES {
        let listed = format!("{} {}", status.code(), status.brief());
        assert!(help.contains(&listed), "--help lists {listed:?}:\n{help}");
    }
}

/// The paragraphs of a Markdown text, outside code, lists, tables,
/// headings and quotes: (the line it ends on, its last line).
fn paragraph_ends(text: &str) -> Vec<(usize, String)> {
    let mut ends = Vec::new();
    let mut fenced = false;
    let mut open: Option<(usize, String)> = None;
    for (number, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let list_item = trimmed.starts_with("- ")
            || trimmed.starts_with("* ")
            || trimmed
                .split_once(". ")
                .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        let other = trimmed.is_empty()
            || trimmed.starts_with('#')
            || trimmed.starts_with('|')
            || trimmed.starts_with('>')
            || trimmed.starts_with('<')
            || list_item;
        if trimmed.starts_with("```") {
            fenced = !fenced;
        }
        if fenced || trimmed.starts_with("```") || other {
            ends.extend(open.take());
            continue;
        }
        match &mut open {
            Some(paragraph) => *paragraph = (number + 1, line.to_string()),
            // A line indented under a list item continues it: no paragraph.
            None if line.starts_with(' ') => {}
            None => open = Some((number + 1, line.to_string())),
        }
    }
    ends.extend(open);
    ends
}

/// No paragraph of the README or the guide stops mid-sentence (as the
/// README's note under its command table once did, "... or a" before the
/// next heading): each ends as a sentence or an introduction does.
#[test]
fn no_paragraph_stops_mid_sentence() {
    let root = workspace();
    let mut docs = vec![root.join("README.md")];
    docs.extend(
        documents()
            .into_iter()
            .filter(|doc| doc.starts_with(root.join("docs/guide"))),
    );
    let mut cut = Vec::new();
    for doc in docs {
        let text = fs::read_to_string(&doc).expect("a document");
        for (line, last) in paragraph_ends(&text) {
            let end = last.trim_end();
            let closed = end.ends_with(['.', ':', '!', '?', ')', '`', '*', '_']);
            if !closed {
                cut.push(format!(
                    "{}:{line}: {end}",
                    doc.strip_prefix(root).unwrap_or(&doc).display()
                ));
            }
        }
    }
    assert!(
        cut.is_empty(),
        "paragraphs that stop mid-sentence:\n{}",
        cut.join("\n")
    );
}

/// The README's command table: each row's first cell, as the words of
/// each command it shows.
fn readme_command_rows() -> Vec<Vec<String>> {
    let readme = fs::read_to_string(workspace().join("README.md")).expect("README.md");
    readme
        .lines()
        .skip_while(|line| *line != "## The commands at a glance")
        .skip_while(|line| !line.starts_with("| command |"))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .flat_map(|row| {
            let cell = row.split('|').nth(1).unwrap_or_default().to_string();
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(|shown| shown.split_whitespace().map(str::to_string).collect())
                .collect::<Vec<Vec<String>>>()
        })
        .collect()
}

/// The README's table of commands names every command the tool has (and
/// each of `slurm`'s), and no option a command lacks.
#[test]
fn the_readme_s_command_table_is_the_tool_s() {
    let rows = readme_command_rows();
    let mut tool = cudackpt::internal::cli_command();
    tool.build();
    let mut missing = Vec::new();
    let mut wrong = Vec::new();
    for command in tool
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
    {
        let nested: Vec<&clap::Command> = command
            .get_subcommands()
            .filter(|c| !c.is_hide_set() && c.get_name() != "help")
            .collect();
        let paths: Vec<Vec<&str>> = if nested.is_empty() {
            vec![vec![command.get_name()]]
        } else {
            nested
                .iter()
                .map(|sub| vec![command.get_name(), sub.get_name()])
                .collect()
        };
        for path in paths {
            let shown = rows.iter().filter(|row| {
                row.iter().zip(&path).all(|(a, b)| a == b) && row.len() >= path.len()
            });
            let mut any = false;
            for row in shown {
                any = true;
                let leaf = path[1..].iter().fold(command, |c, name| {
                    c.find_subcommand(name).expect("a subcommand")
                });
                let leaf = if path.len() == 1 { command } else { leaf };
                for option in row
                    .iter()
                    .map(|w| w.trim_start_matches('['))
                    .filter(|w| w.starts_with("--") && w.len() > 2)
                {
                    let long = option.trim_end_matches([']', '.']).trim_start_matches("--");
                    let long = long.split('=').next().unwrap_or(long);
                    let known = leaf
                        .get_arguments()
                        .chain(tool.get_arguments())
                        .any(|a| a.get_long() == Some(long));
                    if !known {
                        wrong.push(format!("{}: --{long}", path.join(" ")));
                    }
                }
            }
            if !any {
                missing.push(path.join(" "));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "commands the README's table leaves out: {missing:?}"
    );
    assert!(
        wrong.is_empty(),
        "options the README's table names that the command lacks: {wrong:?}"
    );
}

/// The long help of one command, as a user reads it.
fn long_help(fx: &Fixture, command: &[&str]) -> String {
    let mut args = command.to_vec();
    args.push("--help");
    crate::help::help(fx, &args)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The exit statuses a help text names, "(exit N" or "exit N)".
fn named_exits(help: &str) -> Vec<u8> {
    help.match_indices("exit ")
        .filter_map(|(at, _)| {
            let digits: String = help[at + 5..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        })
        .collect()
}

/// Every exit status a command's help names is one the tool has; and
/// `wait --timeout`'s is the one `wait` exits with when it times out (its
/// help once said 1; it exits 14).
#[test]
fn the_exit_statuses_the_help_names_are_the_tool_s() {
    let fx = Fixture::new();
    let codes: Vec<u8> = cudackpt::internal::EXIT_STATUSES
        .iter()
        .map(|s| s.code())
        .collect();
    let mut tool = cudackpt::internal::cli_command();
    tool.build();
    for command in tool.get_subcommands().filter(|c| c.get_name() != "help") {
        for code in named_exits(&long_help(&fx, &[command.get_name()])) {
            assert!(
                codes.contains(&code),
                "{} --help names exit {code}, which cudackpt does not have",
                command.get_name()
            );
        }
    }
    let wait = long_help(&fx, &["wait"]);
    let timeout = &wait[wait.find("--timeout <T>").expect("wait's --timeout")..];
    let named = named_exits(timeout)[0];
    let target = fx.cuda_target();
    let output = fx
        .std_command(&[
            "wait",
            "--state",
            "checkpointed",
            "--timeout",
            "200ms",
            &target.arg(),
        ])
        .output()
        .expect("wait");
    assert_eq!(
        output.status.code(),
        Some(i32::from(named)),
        "wait --timeout's help says exit {named}"
    );
}

/// A dry run's help says it sends nothing: `check --drain` describes the
/// drain it would send, where the commands that lock describe sending it.
#[test]
fn only_the_commands_that_drain_say_they_send_the_drain() {
    let fx = Fixture::new();
    let mut tool = cudackpt::internal::cli_command();
    tool.build();
    let draining: Vec<String> = tool
        .get_subcommands()
        .filter(|c| c.get_arguments().any(|a| a.get_long() == Some("drain")))
        .map(|c| c.get_name().to_string())
        .collect();
    assert!(draining.len() > 3, "commands with --drain: {draining:?}");
    for name in &draining {
        let help = long_help(&fx, &[name]);
        let drain = &help[help.find("--drain ").expect("--drain")..];
        let drain = &drain[..drain.find("--drain-signal").unwrap_or(drain.len())];
        let sends_nothing = drain.contains("Sends nothing");
        assert_eq!(sends_nothing, name == "check", "{name} --drain: {drain}");
    }
}
