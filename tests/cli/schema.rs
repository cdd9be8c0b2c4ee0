//! The JSON Schema of every document kind, generated from the wire structs
//! (`cudackpt::output::json::schemas`) and committed under `schema/`: a
//! committed schema that differs from the code fails here
//! (`CUDACKPT_UPDATE_SCHEMA=1` rewrites them, as
//! `scripts/generate-artifacts` does). Every JSON document the other tests
//! parse is validated against its schema (`support::parse_one_document`, through `schema_check`).

use std::fs;

use crate::schema_check::{file_name, schema_dir, validate};

fn pretty(schema: &serde_json::Value) -> String {
    serde_json::to_string_pretty(schema).expect("a schema serialises") + "\n"
}

#[test]
fn the_committed_schemas_match_the_code() {
    let update = std::env::var_os("CUDACKPT_UPDATE_SCHEMA").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (kind, schema) in cudackpt::internal::schemas() {
        let path = schema_dir().join(file_name(kind));
        let expected = pretty(&schema);
        if update {
            fs::create_dir_all(schema_dir()).expect("schema/");
            fs::write(&path, &expected).expect("write the schema");
        } else if fs::read_to_string(&path).ok().as_deref() != Some(expected.as_str()) {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "stale schemas {stale:?}: run scripts/generate-artifacts (or CUDACKPT_UPDATE_SCHEMA=1 cargo test --test cli schema)"
    );
    let committed = fs::read_dir(schema_dir()).expect("schema/").count();
    assert_eq!(
        committed,
        cudackpt::internal::schemas().len(),
        "schema/ holds exactly the generated files"
    );
}

/// The schema rejects what breaks the contract (so validation can fail).
#[test]
fn the_schema_rejects_a_broken_document() {
    let document = serde_json::json!({
        "schema_version": 1, "command": "state", "ok": true, "exit_code": 0,
        "duration_ms": 1.0,
        "processes": [{"pid": 1, "ok": true, "state": "sleeping", "duration_ms": 0.0,
                       "steps": [], "rolled_back": false}]
    });
    let result = std::panic::catch_unwind(|| validate(&document));
    assert!(result.is_err(), "an unknown state must be refused");
}
