//! The fast path: a run of messages of one writer schema decoded by the
//! Arrow project's Avro reader (`arrow-avro`) straight into Arrow columns,
//! then turned into rows column by column (docs/avro.md, how messages are
//! decoded).
//!
//! Why: `apache_avro` builds a value tree per message — a `Value` per
//! field with its name copied, a boxed union per nullable field — which
//! made Avro decode at half the rate of Debezium JSON. `arrow-avro`
//! appends each field to a typed column instead.
//!
//! Why it can always step back: `arrow-avro`'s decoder appends a record
//! field by field and does not undo a record that fails half way, and a
//! message with bytes to spare after its record would run into the next
//! one. So a run is accepted only when every message decoded to exactly
//! one record that used exactly its bytes, the columns built, and every
//! value converted as the per-message path converts it; anything else
//! (a malformed frame, a value the per-message path keeps in another
//! shape) hands the whole run back to that path, which finds and
//! dead-letters the bad message with its reason. Both paths give the same
//! rows: the per-message path stays the reference, and the tests compare
//! them (two corruptions no writer makes read differently: a boolean byte
//! above 1, a nullable union's branch above 1; docs/avro.md).

use std::sync::Mutex;

use arrow_avro::reader::{Decoder, ReaderBuilder};
use arrow_avro::schema::{AvroSchema, Fingerprint, FingerprintAlgorithm, SchemaStore};
use deltalake::arrow::array::{new_empty_array, Array, ArrayRef, AsArray, RecordBatch};
use deltalake::arrow::datatypes::{DataType, Fields as ArrowFields};

use super::columns::{Column, Rows};
use super::plan::Conv;
use super::{key_fallback, Envelope, RowPlan, RunCopy, Schemas, WriterSchema};
use crate::decode::{env_name, DeclaredTypes, Decoded, Fields, Name, Op, Rejected};
use crate::value::Value;

/// Most messages one run decodes (the decoder's batch holds one more).
pub const MAX_RUN: usize = 256;

/// Decoders of one writer schema, kept between runs (building one parses
/// the schema). Each waits for a record body: its wire-format header was
/// already fed (see [`Columnar::run`]).
pub(super) struct Columnar {
    id: u32,
    text: String,
    /// The columns its runs decode into.
    fields: ArrowFields,
    idle: Mutex<Vec<Decoder>>,
}

impl Columnar {
    /// The fast path for a schema (None when `arrow-avro` cannot read it:
    /// its messages then go the per-message way).
    pub(super) fn new(id: u32, text: &str) -> Option<Columnar> {
        let mut c = Columnar {
            id,
            text: text.to_string(),
            fields: ArrowFields::empty(),
            idle: Mutex::new(vec![]),
        };
        let first = c.build()?;
        c.fields = first.schema().fields().clone();
        c.idle.lock().ok()?.push(first);
        Some(c)
    }

    /// Whether a run's columns can be read as rows of `plan` (`format: avro`).
    pub(super) fn reads_flat(&self, plan: &RowPlan) -> bool {
        let empty: Vec<ArrayRef> =
            self.fields.iter().map(|f| new_empty_array(f.data_type())).collect();
        Rows::of(&empty, plan).is_some()
    }

    /// Whether a run's columns can be read as Debezium envelopes with these
    /// row plans (`format: debezium-avro`).
    pub(super) fn reads_envelope(&self, plans: &Envelope) -> bool {
        let empty = self.fields.iter().map(|f| new_empty_array(f.data_type())).collect();
        let Ok(batch) = RecordBatch::try_new(
            std::sync::Arc::new(deltalake::arrow::datatypes::Schema::new(self.fields.clone())),
            empty,
        ) else {
            return false;
        };
        EnvelopeColumns::of(&batch, plans, None).is_some()
    }

    fn header(&self) -> [u8; 5] {
        let mut h = [super::MAGIC; 5];
        h[1..].copy_from_slice(&self.id.to_be_bytes());
        h
    }

    fn build(&self) -> Option<Decoder> {
        let mut store = SchemaStore::new_with_type(FingerprintAlgorithm::Id);
        store.set(Fingerprint::Id(self.id), AvroSchema::new(self.text.clone())).ok()?;
        let mut d = ReaderBuilder::new()
            .with_writer_schema_store(store)
            .with_batch_size(MAX_RUN + 1)
            .build_decoder()
            .ok()?;
        let before = d.capacity();
        (matches!(d.decode(&self.header()), Ok(5)) && d.capacity() == before).then_some(d)
    }

    /// The frames (all of this schema) as one batch of columns, one row
    /// each; None when any frame is not exactly one record of the schema.
    ///
    /// Each body is fed alone and must be consumed whole as one record;
    /// then the next header is fed and must be taken as a header: a decoder
    /// still inside a record would read it as record bytes instead.
    pub(super) fn run(&self, frames: &[&[u8]]) -> Option<RecordBatch> {
        if frames.len() > MAX_RUN {
            return None;
        }
        let header = self.header();
        let idle = self.idle.lock().ok()?.pop();
        let mut d = idle.or_else(|| self.build())?;
        for frame in frames {
            let body = frame.strip_prefix(&header[..])?;
            let room = d.capacity();
            let whole_record = matches!(d.decode(body), Ok(n) if n == body.len());
            if !whole_record || d.capacity() + 1 != room {
                return None;
            }
            if !matches!(d.decode(&header), Ok(5)) || d.capacity() + 1 != room {
                return None;
            }
        }
        let batch = d.flush().ok()??;
        if batch.num_rows() != frames.len() {
            return None;
        }
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(d);
        }
        Some(batch)
    }
}

/// `format: avro`: each row of a run is a record of the schema.
pub(super) fn flat(writer: &WriterSchema, batch: &RecordBatch) -> Option<Vec<Decoded>> {
    let plan = writer.row.as_ref()?;
    let rows = Rows::of(batch.columns(), plan)?;
    let RunCopy { layout, declared } = plan.for_run();
    (0..batch.num_rows())
        .map(|i| {
            let data = Fields::new(layout.clone(), rows.values(i)?);
            Some(Decoded::Row { data, env: vec![], declared: declared.clone() })
        })
        .collect()
}

/// `format: debezium-avro`: each row of a run an envelope, decoded as
/// `super::envelope` decodes one (the same rows, envelope fields and
/// reasons for the messages it refuses).
pub(super) fn envelopes(
    writer: &WriterSchema,
    batch: &RecordBatch,
    keys: &[Option<&[u8]>],
    schemas: &dyn Schemas,
    keep: Option<&[String]>,
) -> Option<Vec<Result<Decoded, Rejected>>> {
    let plans = writer.envelope.as_ref()?;
    let cols = EnvelopeColumns::of(batch, plans, keep)?;
    (0..batch.num_rows()).map(|i| cols.row(i, keys.get(i).copied().flatten(), schemas)).collect()
}

/// An envelope field outside `before` and `after`, as the per-message
/// path flattens it: records one level deep (`source.lsn`), only what a
/// table reads (`keep`; `op` always).
enum EnvColumn<'a> {
    Field {
        name: Name,
        column: Column<'a>,
    },
    Record {
        name: Name,
        /// The record's own entry (a null `transaction`), when kept.
        whole: bool,
        nulls: &'a dyn Array,
        children: Vec<(Name, Column<'a>)>,
    },
}

/// A run's envelope columns, read by the schema's plans.
struct EnvelopeColumns<'a> {
    op: &'a deltalake::arrow::array::StringArray,
    before: (&'a dyn Array, Rows<'a>, RunCopy),
    after: (&'a dyn Array, Rows<'a>, RunCopy),
    env: Vec<EnvColumn<'a>>,
}

impl<'a> EnvelopeColumns<'a> {
    fn of(
        batch: &'a RecordBatch,
        plans: &'a Envelope,
        keep: Option<&[String]>,
    ) -> Option<EnvelopeColumns<'a>> {
        let schema = batch.schema_ref();
        let section = |name: &str, plan: &'a Option<RowPlan>| {
            let s = batch.column(schema.index_of(name).ok()?).as_struct_opt()?;
            let plan = plan.as_ref()?;
            Some((s as &dyn Array, Rows::of(s.columns(), plan)?, plan.for_run()))
        };
        let wanted = |path: &str| path == "op" || keep.is_none_or(|k| k.iter().any(|p| p == path));
        let mut env = vec![];
        for (field, array) in schema.fields().iter().zip(batch.columns()) {
            let name = field.name().as_str();
            match (name, array.data_type()) {
                ("before" | "after", _) => {}
                (_, DataType::Struct(fields)) => {
                    let s = array.as_struct();
                    let mut children = vec![];
                    for (f, child) in fields.iter().zip(s.columns()) {
                        let path = env_name(Some(name), f.name());
                        let column = Column::of(child, Conv::Plain)?;
                        if wanted(&path) {
                            children.push((path, column));
                        }
                    }
                    let (whole, name) = (wanted(name), env_name(None, name));
                    env.push(EnvColumn::Record { name, whole, nulls: s, children });
                }
                _ => {
                    let column = Column::of(array, Conv::Plain)?;
                    if wanted(name) {
                        env.push(EnvColumn::Field { name: env_name(None, name), column });
                    }
                }
            }
        }
        Some(EnvelopeColumns {
            op: batch.column(schema.index_of("op").ok()?).as_string_opt::<i32>()?,
            before: section("before", &plans.before)?,
            after: section("after", &plans.after)?,
            env,
        })
    }

    /// Row `i` as the per-message path decodes its message (None: a value
    /// that path keeps in another shape).
    fn row(
        &self,
        i: usize,
        key: Option<&[u8]>,
        schemas: &dyn Schemas,
    ) -> Option<Result<Decoded, Rejected>> {
        let mut env = Vec::with_capacity(self.env.len() + 4);
        for e in &self.env {
            match e {
                EnvColumn::Field { name, column } => env.push((name.clone(), column.cell(i)?)),
                EnvColumn::Record { name, whole, nulls, .. } if nulls.is_null(i) => {
                    if *whole {
                        env.push((name.clone(), Value::Null));
                    }
                }
                EnvColumn::Record { children, .. } => {
                    for (path, column) in children {
                        env.push((path.clone(), column.cell(i)?));
                    }
                }
            }
        }
        if self.op.is_null(i) {
            return Some(Err(Rejected::malformed("not a Debezium envelope: no `op` field")));
        }
        let op = self.op.value(i);
        let ((section, rows, plan), is_delete) = match Op::parse(op) {
            Some(Op::Upsert) => (&self.after, false),
            Some(Op::Delete) => (&self.before, true),
            Some(Op::Truncate) => return Some(Ok(Decoded::Truncate)),
            Some(Op::Message) => return Some(Ok(Decoded::Tombstone)),
            None => return Some(Err(Rejected::malformed(format!("unknown Debezium op `{op}`")))),
        };
        let (mut data, mut declared) = if section.is_valid(i) {
            (Fields::new(plan.layout.clone(), rows.values(i)?), plan.declared.clone())
        } else if is_delete {
            (Fields::default(), DeclaredTypes::default())
        } else {
            return Some(Err(Rejected::malformed(format!(
                "Debezium `{op}` event without `after`"
            ))));
        };
        if is_delete {
            key_fallback(&mut data, &mut declared, key, schemas);
        }
        Some(Ok(Decoded::Row { data, env, declared }))
    }
}
