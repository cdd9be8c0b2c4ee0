//! `devices` and the GPU facts in `doctor`. The fake host has no NVML, so
//! the listing falls back to the CUDA driver and says what it cannot tell.

use serde::Deserialize;

use crate::support::{fake_uuid, texts, Fixture};

#[derive(Debug, Deserialize)]
struct DevicesDoc {
    schema_version: u32,
    command: String,
    ok: bool,
    exit_code: i32,
    source: Option<String>,
    #[serde(default)]
    warnings: Vec<String>,
    error: Option<crate::wire::ErrorDoc>,
    gpus: Vec<GpuDoc>,
}

#[derive(Debug, Deserialize)]
struct GpuDoc {
    index: usize,
    uuid: String,
    name: String,
    pci_bus_id: Option<String>,
    memory_total_bytes: Option<u64>,
    memory_free_bytes: Option<u64>,
    mig_enabled: Option<bool>,
    persistence_mode: Option<bool>,
}

fn devices_json(fx: &Fixture, extra: &[&str], code: i32) -> DevicesDoc {
    let mut args = vec!["--json", "devices"];
    args.extend_from_slice(extra);
    let output = fx.cudackpt(&args).assert().code(code).get_output().clone();
    let doc: DevicesDoc = crate::support::parse_one_document(&output.stdout);
    assert_eq!(
        (doc.schema_version, doc.command.as_str(), doc.exit_code),
        (1, "devices", code)
    );
    assert_eq!(doc.ok, code == 0);
    doc
}

#[test]
fn every_gpu_is_listed_in_order_with_what_is_known() {
    let fx = Fixture::with_devices("GPU A:1000,GPU B:2000");
    let doc = devices_json(&fx, &[], 0);
    assert_eq!(doc.source.as_deref(), Some("cuda_driver"));
    assert!(doc.error.is_none());
    let names: Vec<(usize, &str, &str)> = doc
        .gpus
        .iter()
        .map(|g| (g.index, g.name.as_str(), g.uuid.as_str()))
        .collect();
    let (a, b) = (
        format!("GPU-{}", fake_uuid(0)),
        format!("GPU-{}", fake_uuid(1)),
    );
    assert_eq!(names, [(0, "GPU A", a.as_str()), (1, "GPU B", b.as_str())]);
    assert_eq!(doc.gpus[1].memory_total_bytes, Some(2000 << 20));
    assert_eq!(doc.gpus[0].pci_bus_id.as_deref(), Some("00000000:10:00.0"));
    for gpu in &doc.gpus {
        assert_eq!(
            (gpu.memory_free_bytes, gpu.mig_enabled, gpu.persistence_mode),
            (None, None, None),
            "unknown without NVML"
        );
    }
    assert!(
        doc.warnings
            .iter()
            .any(|w| w.contains("NVML") && w.contains("unknown")),
        "{:?}",
        doc.warnings
    );
}

#[test]
fn people_get_an_aligned_table_and_the_warning_on_stderr() {
    let fx = Fixture::with_devices("GPU A:1000,GPU B:2000");
    let output = fx
        .cudackpt(&["devices"])
        .assert()
        .success()
        .get_output()
        .clone();
    let (stdout, stderr) = texts(&output);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(
        lines[0].starts_with("INDEX") && lines[0].contains("FREE/TOTAL GiB"),
        "{stdout}"
    );
    assert!(
        lines[2].contains("GPU B") && lines[2].contains("?/2.0"),
        "{stdout}"
    );
    assert!(
        stderr.contains("warning") && stderr.contains("NVML"),
        "{stderr}"
    );
}

#[test]
fn without_any_driver_devices_exits_7_and_says_why() {
    let fx = Fixture::new();
    let doc = devices_json(&fx, &["--libcuda", "/nonexistent/libcuda.so.1"], 7);
    assert!(doc.gpus.is_empty());
    let error = doc.error.as_ref().expect("an error");
    // The same shape as every error object: kind, message, hint.
    error.check();
    assert_eq!(error.kind, crate::wire::Kind::DriverUnavailable);
    assert!(
        error.message.contains("/nonexistent/libcuda.so.1"),
        "{doc:?}"
    );
    assert!(
        error.hint.as_deref().is_some_and(|h| h.contains("doctor")),
        "{doc:?}"
    );
}

#[test]
fn doctor_reports_the_driver_features_for_scripts() {
    let fx = Fixture::new();
    let output = fx
        .cudackpt(&["--json", "doctor"])
        .output()
        .expect("doctor runs");
    let doc: serde_json::Value = crate::support::parse_one_document(&output.stdout);
    let features = &doc["driver"]["features"];
    assert_eq!(features["checkpoint_api"], true);
    assert_eq!(features["lock_timeout"], true);
    assert_eq!(features["gpu_remapping"], true, "the fake says CUDA 13.0");
    let old = fx
        .cudackpt(&["--json", "doctor"])
        .env("FAKE_CUDA_DRIVER_VERSION", "12080")
        .output()
        .expect("doctor runs");
    let doc: serde_json::Value = crate::support::parse_one_document(&old.stdout);
    assert_eq!(
        doc["driver"]["features"]["gpu_remapping"], false,
        "CUDA 12.8 predates remapping"
    );
    assert_eq!(doc["gpus"][0]["uuid"], format!("GPU-{}", fake_uuid(0)));
}
