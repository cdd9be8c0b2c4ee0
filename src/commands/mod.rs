//! Commands that are not the process pipeline.

pub mod demo;
pub mod devices;
pub mod doctor;
pub mod pattern;
