//! changelake: CDC change streams into SCD1/SCD2 Delta Lake tables.
//!
//! Data flows config → source → batch → merge → table; `engine` runs one
//! batch of one table end to end. The command line, the benchmarks and the
//! demo are the `changelake` binary's (src/main.rs): tools on top of this
//! library, which depends on none of them.

#![forbid(unsafe_code)]

pub mod batch;
pub mod config;
pub mod daemon;
pub mod deadletter;
pub mod decode;
pub mod engine;
pub mod error;
pub mod expr;
pub mod faults;
pub mod merge;
pub mod par;
pub mod phases;
pub mod progress;
pub mod report;
pub mod source;
pub mod table;
pub mod telemetry;
pub mod value;
