//! Validation of a JSON document against its kind's committed schema
//! (`schema/`), for `support::parse_one_document`. Shared by the test
//! binaries; the schema's own tests are in `schema.rs`.

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::support::workspace;

pub fn schema_dir() -> PathBuf {
    workspace().join("schema")
}

pub fn file_name(kind: &str) -> String {
    format!("{kind}.schema.json")
}

/// The kind of a document, to pick its schema, as a consumer would: a
/// usage error says so, every other document names its command.
fn kind_of(document: &serde_json::Value) -> &'static str {
    if document["document"] == "usage-error" {
        return "usage-error";
    }
    if document["document"] == "version" {
        return "version";
    }
    // A progress event (a line of --progress-fd) says which in `event`.
    if document.get("event").is_some() {
        return "progress-event";
    }
    match document["command"].as_str() {
        Some("doctor") => "doctor",
        Some("demo") => "demo",
        Some("devices") => "devices",
        Some("install-compat") => "install-compat",
        Some("dump" | "undump") => "disk-command",
        _ => "process-command",
    }
}

/// Validates a document against its kind's committed schema; the panic
/// names every violation.
pub fn validate(document: &serde_json::Value) {
    static VALIDATORS: OnceLock<HashMap<&'static str, jsonschema::Validator>> = OnceLock::new();
    let validators = VALIDATORS.get_or_init(|| {
        cudackpt::internal::schemas()
            .into_iter()
            .map(|(kind, _)| {
                let text = fs::read_to_string(schema_dir().join(file_name(kind)))
                    .expect("a committed schema");
                let schema: serde_json::Value = serde_json::from_str(&text).expect("JSON");
                (
                    kind,
                    jsonschema::validator_for(&schema).expect("a valid schema"),
                )
            })
            .collect()
    });
    let kind = kind_of(document);
    let errors: Vec<String> = validators[kind]
        .iter_errors(document)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "the {kind} document breaks its schema: {errors:?}\n{document}"
    );
}
