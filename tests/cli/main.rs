//! cudackpt's integration tests: the real binary, run against the fake
//! libcuda (tests/fake-libcuda) and real spawned processes. One module per
//! feature; `support` holds the fixture, `wire` the JSON contract as the
//! tests read it.

mod support;
mod wire;

mod artifacts;
mod attacks;
mod compat;
mod compound;
mod concurrency;
mod crashes;
mod criu_hook;
mod deadline;
mod demo;
mod devices;
mod discovery;
mod doctor;
mod drain;
mod drain_exact;
mod driver;
mod errors;
mod groups;
mod hardening;
mod help;
mod host_memory;
mod json_contract;
mod layout;
mod maps;
mod nccl;
mod output;
mod package;
mod progress;
mod python_client;
mod records;
mod restorable;
mod schema;
mod schema_check;
mod single_steps;
mod state;
mod stopped;
mod targets;
mod trust;
