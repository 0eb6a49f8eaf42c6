//! What `changelake bench` runs: the parsed command-line options. A module
//! of its own because every step of the bench reads them, and the report
//! prints them in its heading.

use std::path::PathBuf;

use changelake::config::Format;

use crate::tools::workload::{Changes, Distribution, Mix, Shape};

#[derive(Debug, Clone)]
pub struct BenchOpts {
    pub dir: PathBuf,
    pub keys: u64,
    pub batch: usize,
    pub runs: usize,
    pub strategies: Vec<String>,
    pub distribution: Distribution,
    pub shape: Shape,
    pub changes: Changes,
    /// `--format`: Debezium envelopes or flat JSON rows.
    pub format: Format,
    /// `--encoding`: the timed batches as JSON lines or Avro frames.
    pub encoding: Encoding,
    pub mix: Mix,
    pub seed: u64,
    pub deltars: bool,
    pub broker_rate: Option<u64>,
    pub broker_secs: u64,
    /// `--duration`: run the soak (with `broker_rate`) instead of the bench.
    pub soak: Option<std::time::Duration>,
    pub max_age_ms: u64,
    pub load_chunk: usize,
    pub table_option: Option<String>,
    /// An object-store root the strategies also run on (`--root`).
    pub remote: Option<Remote>,
}

/// How the timed batches are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Json,
    /// Avro in the schema registry's wire format (`format: debezium-avro` / `avro`).
    Avro,
    /// Flat rows as CSV text with a header (`type: csv`).
    Csv,
    /// Debezium envelopes with the JSON converter's schema wrapper.
    JsonSchema,
}

impl Encoding {
    /// This encoding, if it can carry events of `format`: CSV holds flat
    /// rows, the schema wrapper is measured on Debezium envelopes.
    pub fn fitting(self, format: Format) -> changelake::error::Result<Encoding> {
        let needs = match self {
            Encoding::Csv => Format::Json,
            Encoding::JsonSchema => Format::Debezium,
            Encoding::Json | Encoding::Avro => return Ok(self),
        };
        if format != needs {
            let (e, f) =
                if needs == Format::Json { ("csv", "json") } else { ("json-schema", "debezium") };
            return Err(changelake::error::Error::Usage(format!(
                "--encoding {e} needs --format {f}"
            )));
        }
        Ok(self)
    }

    pub fn parse(s: &str) -> changelake::error::Result<Encoding> {
        match s {
            "json" => Ok(Encoding::Json),
            "avro" => Ok(Encoding::Avro),
            "csv" => Ok(Encoding::Csv),
            "json-schema" => Ok(Encoding::JsonSchema),
            other => Err(changelake::error::Error::Usage(format!(
                "--encoding: `{other}` (json, json-schema, csv, avro)"
            ))),
        }
    }
}

/// `--root` and `--storage-option`s: where the remote runs go.
#[derive(Debug, Clone)]
pub struct Remote {
    pub root: String,
    pub options: changelake::storage::StorageOptions,
}
