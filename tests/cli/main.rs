//! cudackpt's integration tests: the real binary, run against the fake
//! libcuda (tests/fixtures/fake-libcuda) and real spawned processes. One module per
//! feature, grouped below; `support/` holds the fixture (`support`), the
//! JSON contract as the tests read it (`wire`) and the schema validator
//! (`schema_check`).
//!
//! Where a new test goes: find the group whose question it answers, then
//! the module of its feature; a new feature gets a module in its group.
//! A test whose prerequisite is missing calls `support::prerequisite`: it
//! says so and passes, except in CI, where it fails.

mod support;
pub(crate) use support::{schema_check, wire};

// One process through one command: the single steps, the compound ones,
// the states and the wrong states, the targets a command accepts.
mod compound;
mod single_steps;
mod state;
mod stopped;
mod targets;

// Many processes: groups, all or nothing, rollback, concurrency, finding
// processes (--tree, --cgroup, --all), deadlines.
mod concurrency;
mod deadline;
mod discovery;
mod groups;

// What is refused before any change: the restorability and memory
// pre-flights, NCCL, GPU maps and their records.
mod host_memory;
mod maps;
mod nccl;
mod records;
mod restorable;

// The drain handshake, its exactness under kills and deadlines, and the
// shrink it brings about (released bytes, host memory judged after it).
mod drain;
mod drain_exact;
mod shrink;

// Crashes and signals: intent records, recover, panics.
mod crashes;

// Trust: who may aim cudackpt, planted files, hardening.
mod attacks;
mod hardening;
mod pager;
mod trust;

// The other grammars: NVIDIA's, CRIU's action script.
mod compat;
mod criu_hook;
mod criu_plugin;
mod disk;
mod disk_jobs;
mod disk_snapshots;
mod disk_trust;
mod disk_users;
mod dumpable;
mod slurm;

// The library's face (src/api), through its example program.
mod library;

// The commands beside the pipeline: doctor, demo, devices, the driver
// library, the Python drain client.
mod client_example;
mod demo;
mod devices;
mod doctor;
mod driver;
mod gpu_suite;
mod protocol_copies;
mod python_client;

// What the user sees: output, progress, errors, the JSON contract and its
// schemas, help, man pages, completions, the Debian package.
mod artifacts;
mod doc_links;
mod drift;
mod errors;
mod figures;
mod help;
mod json_contract;
mod newcomer;
mod output;
mod package;
mod progress;
mod schema;

// The house itself (its floors, function lengths, names, the one module
// that reads the environment and the one room that writes to the
// terminal) is tested apart, in tests/house.
