//! changelake: CDC change streams into SCD1/SCD2 Delta Lake tables.
//!
//! Modules follow the data:
//!
//! | module | job |
//! | --- | --- |
//! | `config` | the YAML config, validated and typed |
//! | `source` | files and Kafka plumbing: raw rows and their positions |
//! | `decode` | flat JSON rows and Debezium envelopes into cells |
//! | `batch` | a raw batch typed and aligned with the table's columns |
//! | `merge` | the batch, scd1, scd2 and snapshot rules, pure (no I/O) |
//! | `storage` | where tables live: locations, store options, retries, the conditional-PUT probe |
//! | `table` | the Delta table: layout, key index, staging, commit, upkeep |
//! | `progress` | every `txn` progress marker, built and read in one place |
//! | `deadletter` | the `_dead_letters` table |
//! | `engine` | one run of one table, end to end |
//! | `daemon` | the Kafka loop: micro-batches per table, shutdown, probes |
//! | `telemetry`, `report` | what a run did, as logs and Prometheus metrics |
//! | `value`, `expr`, `par`, `phases`, `faults`, `error` | shared small pieces |
//!
//! The rules are written down in `docs/` (start at `docs/README.md`). The
//! command line, the benchmarks and the demo are the `changelake` binary's
//! (src/main.rs): tools on top of this library, which depends on none of
//! them.

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
pub mod storage;
pub mod table;
pub mod telemetry;
pub mod value;
