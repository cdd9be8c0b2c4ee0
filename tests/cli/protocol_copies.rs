//! The drain protocol has one source, `src/drain/protocol.rs`; the man
//! page's DRAIN PROTOCOL is filled in from it, and the clients carry
//! copies in their own languages: the Python client's constants and signal
//! grammar, the C header's `#define`s. Every copy must say what the source
//! says (every assignment of a name, not only the first), the Python client
//! must read every signal text as cudackpt does, word for word, and a
//! planted copy that differs is named.

use std::path::Path;
use std::process::Command;

use cudackpt::internal::drain_protocol::{self as protocol, DrainSignal, DEFAULT_SIGNAL};

fn workspace_file(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// What each copy must hold: (name in the copy, value as the copy writes
/// it).
fn python_constants() -> Vec<(&'static str, String)> {
    vec![
        ("VERSION", protocol::VERSION.to_string()),
        ("MARKER", format!("{:?}", protocol::MARKER)),
        ("FAIL_MARKER", format!("{:?}", protocol::FAIL_MARKER)),
        ("ERROR_MEMFD", format!("{:?}", protocol::ERROR_MEMFD)),
        ("DEFAULT_SIGNAL", DEFAULT_SIGNAL.number().to_string()),
        ("_GLIBC_RTMIN", protocol::RTMIN.to_string()),
        ("_RTMAX", protocol::RTMAX.to_string()),
    ]
}

fn header_constants() -> Vec<(&'static str, String)> {
    let notice = DEFAULT_SIGNAL.dump_notice().number() - DEFAULT_SIGNAL.number();
    vec![
        ("CUDACKPT_DRAIN_SIGNAL", DEFAULT_SIGNAL.number().to_string()),
        (
            "CUDACKPT_DRAIN_DUMP_NOTICE",
            format!("(CUDACKPT_DRAIN_SIGNAL + {notice})"),
        ),
        ("CUDACKPT_DRAIN_MARKER", format!("{:?}", protocol::MARKER)),
        (
            "CUDACKPT_DRAIN_FAIL_MARKER",
            format!("{:?}", protocol::FAIL_MARKER),
        ),
        (
            "CUDACKPT_DRAIN_ERROR_MEMFD",
            format!("{:?}", protocol::ERROR_MEMFD),
        ),
    ]
}

/// Every value `name` is given in `text`, one per line that gives it:
/// `NAME = VALUE` (Python) or `#define NAME VALUE` (C).
fn values_of(text: &str, name: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            line.strip_prefix(&format!("{name} = "))
                .or_else(|| line.strip_prefix(&format!("#define {name} ")))
                .map(|value| value.trim().to_string())
        })
        .collect()
}

/// Where a copy says otherwise than the source, or says nothing.
fn disagreements(copy: &str, text: &str, wanted: &[(&'static str, String)]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (name, value) in wanted {
        let said = values_of(text, name);
        if said.is_empty() {
            wrong.push(format!(
                "{copy} does not define {name} (the source: {value})"
            ));
        }
        for other in said.iter().filter(|said| *said != value) {
            wrong.push(format!("{copy} says {name} = {other}, the source {value}"));
        }
    }
    wrong
}

/// Python's dump notice, which the header writes as a sum.
const PYTHON_NOTICE: &str =
    "return drain_signal + 1 if drain_signal < _RTMAX else drain_signal - 1";

#[test]
fn the_python_client_and_the_c_header_say_what_the_source_says() {
    let python = workspace_file("clients/python/src/cudackpt_drain/protocol.py");
    let header = workspace_file("clients/c/cudackpt_drain.h");
    let mut wrong = disagreements("the Python client", &python, &python_constants());
    wrong.extend(disagreements("the C header", &header, &header_constants()));
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The notice is the signal above the drain signal, below it at SIGRTMAX.
    assert_eq!(
        DEFAULT_SIGNAL.dump_notice().number(),
        DEFAULT_SIGNAL.number() + 1
    );
    let at_max = DrainSignal::from_number(protocol::RTMAX).expect("SIGRTMAX");
    assert_eq!(at_max.dump_notice().number(), protocol::RTMAX - 1);
    assert!(
        python.contains(PYTHON_NOTICE),
        "the Python client's dump notice changed"
    );
}

/// A copy changed in one place, or given a second value further down,
/// is named; so is a name a copy lost.
#[test]
fn a_planted_copy_that_differs_is_named() {
    let python = workspace_file("clients/python/src/cudackpt_drain/protocol.py");
    let header = workspace_file("clients/c/cudackpt_drain.h");
    let marker = format!("MARKER = {:?}", protocol::MARKER);
    let planted = python.replacen(&marker, "MARKER = \"cudackpt-drain2\"", 1);
    assert_eq!(
        disagreements("the Python client", &planted, &python_constants()),
        [format!(
            "the Python client says MARKER = \"cudackpt-drain2\", the source {:?}",
            protocol::MARKER
        )]
    );
    let second = format!("{python}\n_RTMAX = 63\n");
    assert_eq!(
        disagreements("the Python client", &second, &python_constants()),
        ["the Python client says _RTMAX = 63, the source 64"]
    );
    let moved = header.replace(
        &format!("#define CUDACKPT_DRAIN_SIGNAL {}", DEFAULT_SIGNAL.number()),
        "#define CUDACKPT_DRAIN_SIGNAL 44",
    );
    assert_eq!(
        disagreements("the C header", &moved, &header_constants()),
        [format!(
            "the C header says CUDACKPT_DRAIN_SIGNAL = 44, the source {}",
            DEFAULT_SIGNAL.number()
        )]
    );
    let lost = header.replace("#define CUDACKPT_DRAIN_ERROR_MEMFD", "#define OTHER");
    assert_eq!(
        disagreements("the C header", &lost, &header_constants()),
        [format!(
            "the C header does not define CUDACKPT_DRAIN_ERROR_MEMFD (the source: {:?})",
            protocol::ERROR_MEMFD
        )]
    );
}

/// The texts both grammars are held to: each reading and each refusal.
const SIGNAL_TEXTS: [&str; 26] = [
    "40",
    "RTMIN+6",
    "sigrtmin+6",
    "SIGRTMIN",
    "RTMAX-2",
    "64",
    "34",
    "+40",
    "RTMIN6",
    " 41 ",
    "TERM",
    "SIGINT",
    "usr1",
    "15",
    "31",
    "32",
    "33",
    "RTMIN-1",
    "65",
    "RTMAX+1",
    "0",
    "-40",
    "NOPE",
    "RTMIN+x",
    "RTMAX-",
    "a\"b\\c",
];

/// What cudackpt makes of a text: the number, or its refusal's words.
fn cudackpt_reads(text: &str) -> String {
    match DrainSignal::parse(text) {
        Ok(signal) => signal.number().to_string(),
        Err(why) => format!("refused: {why}"),
    }
}

/// The Python client's verdict on each text, one line each, as
/// [`cudackpt_reads`] writes it.
fn python_reads(python: &std::ffi::OsStr, texts: &[&str]) -> Vec<String> {
    let script = r#"
import json, sys
import cudackpt_drain as cd
for text in json.loads(sys.stdin.read()):
    try:
        print(cd.parse_signal(text))
    except ValueError as why:
        print("refused: " + str(why))
"#;
    let mut child = Command::new(python)
        .args(["-c", script])
        .env(
            "PYTHONPATH",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/python/src"),
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let input = serde_json::to_string(texts).expect("json");
    std::io::Write::write_all(child.stdin.as_mut().expect("stdin"), input.as_bytes())
        .expect("written");
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("python3 ends");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn the_python_client_reads_every_signal_as_cudackpt_does_word_for_word() {
    // The client's grammar is plain Python: the system's python3 (CI's).
    let theirs = python_reads("python3".as_ref(), &SIGNAL_TEXTS);
    let ours: Vec<String> = SIGNAL_TEXTS.iter().map(|t| cudackpt_reads(t)).collect();
    let differ: Vec<String> = SIGNAL_TEXTS
        .iter()
        .zip(ours.iter().zip(&theirs))
        .filter(|(_, (ours, theirs))| ours != theirs)
        .map(|(text, (ours, theirs))| format!("{text:?}\n  cudackpt: {ours}\n  Python:   {theirs}"))
        .collect();
    assert_eq!(theirs.len(), ours.len(), "{theirs:?}");
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// The man page is filled in from the source: the committed page (held
/// equal to `cudackpt man` by `artifacts.rs`) says the source's values.
#[test]
fn the_man_page_s_drain_protocol_says_the_source_s_values() {
    let man = workspace_file("man/cudackpt.1").replace("\\-", "-");
    for said in [
        format!(
            "Catch the drain signal: {} (SIGRTMIN+{} under glibc)",
            DEFAULT_SIGNAL.number(),
            DEFAULT_SIGNAL.number() - protocol::RTMIN
        ),
        format!("name one thread {}", protocol::MARKER),
        format!("names the thread {} instead", protocol::FAIL_MARKER),
        format!("named {}WHY", protocol::ERROR_MEMFD),
        format!("the first {} characters of WHY", protocol::ERROR_CHARS),
        format!(
            "({} by default; {} when the drain signal is {})",
            DEFAULT_SIGNAL.dump_notice().number(),
            protocol::RTMAX - 1,
            protocol::RTMAX
        ),
        format!(
            "The drain signal is a real-time one ({}..{})",
            protocol::RTMIN,
            protocol::RTMAX
        ),
    ] {
        assert!(man.contains(&said), "the man page does not say {said:?}");
    }
}
