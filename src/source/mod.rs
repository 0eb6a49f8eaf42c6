//! Sources produce raw batches: column names plus untyped (CSV) or
//! JSON-typed cells, each row with its input position and raw text so a bad
//! row can be dead-lettered verbatim.

pub mod chunks;
pub mod file;
pub mod kafka;
pub mod registry;
mod rows;

pub use self::rows::DecodedRows;

use crate::value::Value;

#[derive(Debug, Clone)]
pub struct RawRow {
    /// The cells of the first `RawBatch::columns` entries, one each; a
    /// missing field is NULL, and so is every column past the last cell.
    /// Rows are not padded to the batch's width: one message with thousands
    /// of fields must not make each narrow row of its batch that wide
    /// (docs/bad-input.md, width).
    pub cells: Vec<Value>,
    /// Position: line number (files) or offset (Kafka). Later wins ties.
    pub pos: u64,
    pub partition: i32,
    /// The source text (line or message), kept for dead letters.
    pub raw: RawText,
    /// Envelope fields readable by predicates but not stored (`source.lsn`).
    pub extra: crate::decode::Env,
    /// Re-read at or below the table's stored offset (`replay --reapply`).
    pub replayed: bool,
    /// Column types the message's schema declared (docs/types.md): its
    /// values must keep them. Empty for rows without a schema.
    pub declared: crate::decode::DeclaredTypes,
}

impl RawRow {
    /// A decoded message's or line's row, before its batch places the
    /// values in cells ([`DecodedRows`]): where it came from, its
    /// text, its envelope fields and the types its schema declared.
    pub fn decoded(
        partition: i32,
        pos: u64,
        raw: RawText,
        extra: crate::decode::Env,
        declared: crate::decode::DeclaredTypes,
    ) -> RawRow {
        RawRow { cells: vec![], pos, partition, raw, extra, replayed: false, declared }
    }
}

/// A row's source text (a file's line, a message), kept so a row that
/// turns out bad can be dead-lettered verbatim. Shared, never copied per
/// row: the rows of a file point into the file's bytes (a copy of each
/// line was a twentieth of a Debezium batch's decode), and copies of a row
/// (a retried commit) share it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawText(bytes::Bytes);

impl RawText {
    /// `part` of `buf` (a line of a file), without copying it.
    pub fn within(buf: &bytes::Bytes, part: &[u8]) -> RawText {
        RawText(buf.slice_ref(part))
    }

    /// `buf` for the rows that one job decodes on one core: the same bytes
    /// under a reference count of the job's own, for [`RawText::within`].
    /// With one count for the whole file, two cores bumping it for every
    /// row fought over it (a thirteenth of the Debezium decode's samples).
    pub fn job_buffer(buf: &bytes::Bytes) -> bytes::Bytes {
        bytes::Bytes::from_owner(buf.clone())
    }

    /// A binary message (Avro) as received: its dead letter keeps the bytes.
    pub fn binary(bytes: &[u8]) -> RawText {
        RawText(bytes::Bytes::copy_from_slice(bytes))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The text (sources keep UTF-8 text here, except Avro messages, which
    /// would show replacement characters).
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.0)
    }
}

impl From<String> for RawText {
    fn from(s: String) -> RawText {
        RawText(s.into())
    }
}

impl From<&str> for RawText {
    fn from(s: &str) -> RawText {
        RawText(bytes::Bytes::copy_from_slice(s.as_bytes()))
    }
}

#[derive(Debug, Clone, Default)]
pub struct RawBatch {
    /// Where the rows came from: a file path or a topic.
    pub source: String,
    pub columns: Vec<String>,
    pub rows: Vec<RawRow>,
    /// Cells are text whose type must be inferred (CSV), not JSON values.
    pub text: bool,
    /// Rows that could not be parsed at all.
    pub unparsable: Vec<Unparsable>,
}

#[derive(Debug, Clone)]
pub struct Unparsable {
    pub partition: i32,
    pub pos: u64,
    pub raw: Vec<u8>,
    pub error: String,
    /// Bounded reason for metrics: malformed, schema, type, guardrail.
    pub reason: &'static str,
}

impl From<RawBatch> for std::borrow::Cow<'_, RawBatch> {
    fn from(b: RawBatch) -> Self {
        std::borrow::Cow::Owned(b)
    }
}

impl<'a> From<&'a RawBatch> for std::borrow::Cow<'a, RawBatch> {
    fn from(b: &'a RawBatch) -> Self {
        std::borrow::Cow::Borrowed(b)
    }
}

/// Does a row laid out by `map` (its cell i goes to column `map[i]`) hold
/// the batch's first columns in order, so that its cells stay as they are?
fn in_order(map: &[usize]) -> bool {
    map.iter().enumerate().all(|(i, &c)| i == c)
}

/// Moves a row's cells to the columns `map` gives them: NULL between, and
/// nothing past the last (rows are not padded, [`RawRow::cells`]).
fn place(cells: &mut Vec<Value>, map: &[usize]) {
    let width = map[..cells.len()].iter().max().map_or(0, |&c| c + 1);
    let mut placed = vec![Value::Null; width];
    for (v, &c) in cells.drain(..).zip(map) {
        placed[c] = v;
    }
    *cells = placed;
}

impl RawBatch {
    /// Moves every row's and dead letter's position on by `lines`: a part
    /// of a file decoded apart from the lines before it.
    pub fn shift_positions(&mut self, lines: u64) {
        if lines == 0 {
            return;
        }
        self.rows.iter_mut().for_each(|r| r.pos += lines);
        self.unparsable.iter_mut().for_each(|u| u.pos += lines);
    }

    /// Appends another batch's rows (same source), aligning columns by name:
    /// columns only the other batch has are added (NULL in rows already
    /// here, which stay as long as they are).
    pub fn append(&mut self, other: RawBatch) {
        self.unparsable.extend(other.unparsable);
        if self.rows.is_empty() && self.columns.is_empty() {
            self.columns = other.columns;
            // Kept when it has room: [`RawBatch::joined`] sized it.
            if self.rows.capacity() < other.rows.len() {
                self.rows = other.rows;
            } else {
                self.rows.extend(other.rows);
            }
            return;
        }
        if self.columns == other.columns {
            self.rows.extend(other.rows);
            return;
        }
        let mut at: Vec<usize> = Vec::with_capacity(other.columns.len());
        for c in other.columns {
            match self.columns.iter().position(|x| *x == c) {
                Some(i) => at.push(i),
                None => {
                    self.columns.push(c);
                    at.push(self.columns.len() - 1);
                }
            }
        }
        let in_place = in_order(&at);
        for mut r in other.rows {
            if !in_place {
                place(&mut r.cells, &at);
            }
            self.rows.push(r);
        }
    }

    /// Parts of one input decoded apart (a file's chunks, in order, each
    /// with the number of lines before it) as one batch. The rows are moved
    /// once, into a list sized for all of them: growing it part by part
    /// copied every row about twice more, into memory the kernel had to
    /// fault in.
    pub fn joined(source: String, parts: Vec<(u64, RawBatch)>) -> RawBatch {
        let rows = parts.iter().map(|(_, p)| p.rows.len()).sum();
        let mut batch = RawBatch { source, rows: Vec::with_capacity(rows), ..Default::default() };
        for (first, mut part) in parts {
            part.shift_positions(first);
            batch.append(part);
        }
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pos: u64, cells: Vec<Value>) -> RawRow {
        RawRow {
            cells,
            pos,
            partition: 0,
            raw: "".into(),
            extra: vec![],
            replayed: false,
            declared: Default::default(),
        }
    }

    #[test]
    fn append_aligns_columns_by_name_and_keeps_row_order() {
        let mut a = RawBatch { columns: vec!["id".into(), "city".into()], ..Default::default() };
        a.rows.push(row(1, vec![Value::Int(1), Value::Str("Berlin".into())]));
        let mut b = RawBatch { columns: vec!["phone".into(), "id".into()], ..Default::default() };
        b.rows.push(row(2, vec![Value::Str("555".into()), Value::Int(2)]));
        a.append(b);
        assert_eq!(a.columns, vec!["id", "city", "phone"]);
        assert_eq!(a.rows.iter().map(|r| r.pos).collect::<Vec<_>>(), vec![1, 2]);
        // The row already here is not widened: `phone` is NULL past its cells.
        assert_eq!(a.rows[0].cells.len(), 2);
        assert!(a.rows[1].cells[0].same(&Value::Int(2)) && a.rows[1].cells[1].is_null());
        assert!(a.rows[1].cells[2].same(&Value::Str("555".into())));
    }
}
