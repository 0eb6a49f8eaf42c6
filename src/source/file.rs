//! `type: csv` and `type: jsonl` systems: one file = one batch = one run.
//!
//! A `path` with glob characters runs its files in lexical order. Progress is
//! a `txn` action per file (`changelake/<table>/file/<path>`) whose version is
//! a hash of the file's content, so re-running an unchanged file is skipped
//! without reading the table, while a rewritten file runs again.

use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::xxh3_64;

use super::{DecodedRows, RawBatch, RawRow, RawText, Unparsable};
use crate::value::Value;

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{path}: {msg}")]
    Read { path: String, msg: String },
    #[error("no input file matches {0}")]
    NoMatch(String),
}

/// Expands a configured path (with `{object}` substituted) into files, lexically ordered.
pub fn expand(pattern: &Path) -> Result<Vec<PathBuf>, FileError> {
    let s = pattern.to_string_lossy().to_string();
    if !s.contains(['*', '?', '[']) {
        if pattern.exists() {
            return Ok(vec![pattern.to_path_buf()]);
        }
        return Err(FileError::NoMatch(s));
    }
    let mut files: Vec<PathBuf> = glob::glob(&s)
        .map_err(|e| FileError::Read { path: s.clone(), msg: e.to_string() })?
        .filter_map(|p| p.ok())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(FileError::NoMatch(s));
    }
    Ok(files)
}

/// A file's content hash as a non-negative `txn` version.
pub fn content_version(bytes: &[u8]) -> i64 {
    version_of_hash(xxh3_64(bytes))
}

/// A file's content version and how many line ends it holds, in one pass:
/// each block is hashed and counted while it is in the core's cache (two
/// passes read a large file from memory twice).
pub fn version_and_lines(bytes: &[u8]) -> (i64, usize) {
    const BLOCK: usize = 256 << 10;
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut lines = 0;
    for block in bytes.chunks(BLOCK) {
        hasher.update(block);
        lines += memchr::memchr_iter(b'\n', block).count();
    }
    (version_of_hash(hasher.digest()), lines)
}

/// A file's XXH3-64 content hash as a `txn` version (which must not be negative).
pub fn version_of_hash(hash: u64) -> i64 {
    (hash >> 1) as i64
}

pub fn read_csv(path: &Path, bytes: &[u8], delimiter: u8) -> Result<RawBatch, FileError> {
    let err = |msg: String| FileError::Read { path: path.display().to_string(), msg };
    let source = path.display().to_string();
    if bytes.iter().all(u8::is_ascii_whitespace) {
        // An empty extract: no header, nothing to apply.
        return Ok(RawBatch { source, text: true, ..Default::default() });
    }
    let mut rdr = csv::ReaderBuilder::new().delimiter(delimiter).flexible(true).from_reader(bytes);
    let header = rdr.byte_headers().map_err(|e| err(e.to_string()))?.clone();
    let header_error = header_error(&header);
    let columns: Vec<String> = match header_error {
        Some(_) => vec![],
        None => header
            .iter()
            .map(|h| String::from_utf8_lossy(h).trim().trim_start_matches('\u{feff}').to_string())
            .collect(),
    };
    let mut batch = RawBatch { source, columns, text: true, ..Default::default() };
    let mut rec = csv::ByteRecord::new();
    loop {
        let read = rdr.read_byte_record(&mut rec);
        let start = match &read {
            Ok(_) => rec.position().map_or(0, |p| p.byte()),
            Err(e) => e.position().map_or(0, |p| p.byte()),
        } as usize;
        let end = rdr.position().byte() as usize;
        // The record's own bytes, as they are in the file (dead letters keep
        // them exactly), without the line end.
        let raw = bytes.get(start..end.max(start)).unwrap_or_default();
        let line_end = |b: &u8| matches!(b, b'\r' | b'\n');
        let from = raw.iter().position(|b| !line_end(b)).unwrap_or(raw.len());
        let to = raw.iter().rposition(|b| !line_end(b)).map_or(from, |i| i + 1);
        let raw = &raw[from..to.max(from)];
        let pos = match &read {
            Ok(_) => rec.position().map_or(0, |p| p.line()),
            Err(e) => e.position().map_or(0, |p| p.line()),
        };
        let why = match read {
            Ok(false) => break,
            Err(e) => Some(format!("malformed CSV: {e}")),
            Ok(true) => header_error.clone().or_else(|| record_error(&rec, batch.columns.len())),
        };
        if let Some(error) = why {
            batch.unparsable.push(Unparsable {
                partition: 0,
                pos,
                raw: raw.to_vec(),
                error,
                reason: "malformed",
            });
            continue;
        }
        // UTF-8: checked by `record_error`.
        let cell = |c: &[u8]| match std::str::from_utf8(c).unwrap_or_default() {
            "" => Value::Null,
            text => Value::Str(text.into()),
        };
        batch.rows.push(RawRow {
            cells: rec.iter().map(cell).collect(),
            pos,
            partition: 0,
            raw: String::from_utf8_lossy(raw).into_owned().into(),
            extra: vec![],
            replayed: false,
            declared: Default::default(),
        });
    }
    Ok(batch)
}

/// Why a CSV header cannot name a file's columns: every record of the file
/// is then a dead letter saying so (no column can be trusted), and the
/// file's progress is committed like any other's, so one bad extract does
/// not stop the tables and files after it.
fn header_error(header: &csv::ByteRecord) -> Option<String> {
    let mut seen = std::collections::HashSet::with_capacity(header.len());
    for (i, h) in header.iter().enumerate() {
        let Ok(name) = std::str::from_utf8(h) else {
            return Some(format!("the file's header column {} is not UTF-8", i + 1));
        };
        let name = name.trim().trim_start_matches('\u{feff}');
        if name.is_empty() {
            return Some(format!("the file's header column {} is empty", i + 1));
        }
        // A set, not a search of the columns before: a header of a million
        // names would otherwise take 10^12 comparisons.
        if !seen.insert(name) {
            return Some(format!("the file's header names column `{name}` twice"));
        }
    }
    None
}

/// Why a CSV record is not a row: a field count other than the header's,
/// text that is not UTF-8, or a NUL character (docs/bad-input.md).
fn record_error(rec: &csv::ByteRecord, columns: usize) -> Option<String> {
    if rec.len() != columns {
        return Some(format!("has {} fields, the header has {columns}", rec.len()));
    }
    if rec.iter().any(|field| std::str::from_utf8(field).is_err()) {
        return Some("not UTF-8".into());
    }
    memchr::memchr(0, rec.as_slice()).map(|_| "contains a NUL character".into())
}

/// `decode` of a file's lines in chunks on all cores, results in line
/// order, each with the file's line index of its chunk's first line (the
/// positions `decode` gives its rows are counted within the chunk; the
/// caller moves them on, [`RawBatch::shift_positions`]).
///
/// Chunks are byte ranges ending at a line end, and each job finds its own
/// lines, one at a time as it decodes them ([`ChunkLines`]): a line's
/// bytes are still in the core's cache when it is parsed. Finding every
/// line of the file first read each byte from memory twice; with the
/// schema wrapper (2.5 KB a message in the bench) that second read was a
/// seventh of the decode. `decode` takes every line it is given.
fn in_line_chunks<R: Send>(
    bytes: &[u8],
    decode: impl Fn(&mut ChunkLines<'_>) -> R + Sync,
) -> Vec<(u64, R)> {
    const CHUNK_BYTES: usize = 256 << 10;
    let mut ranges = vec![];
    let mut start = 0;
    loop {
        let target = (start + CHUNK_BYTES).min(bytes.len());
        let end = memchr::memchr(b'\n', &bytes[target..]).map_or(bytes.len(), |i| target + i + 1);
        ranges.push(start..end);
        if end == bytes.len() {
            break;
        }
        start = end;
    }
    let parts = crate::par::par_map(ranges, |range| {
        let last = range.end == bytes.len();
        let mut lines = ChunkLines::new(&bytes[range], last);
        let r = decode(&mut lines);
        debug_assert!(lines.done, "a chunk's decoder stopped before its last line");
        (lines.count, r)
    });
    let mut first = 0;
    parts
        .into_iter()
        .map(|(n, r)| {
            let at = first;
            first += n;
            (at, r)
        })
        .collect()
}

/// The lines of one chunk, each found when the decoder asks for it.
///
/// Why not all at once: the search for a line's end is the first read of
/// its bytes from memory, and the decoder reads them again right after.
/// Line by line, that second read finds them in the core's nearest cache;
/// finding every line of a 256 KB chunk first, it found them only in the
/// next one (docs/performance.md, "Lines found as they are decoded").
struct ChunkLines<'a> {
    chunk: &'a [u8],
    /// Where the next line starts.
    at: usize,
    /// The chunk ends the file: what follows its last line end is a line too.
    last: bool,
    done: bool,
    /// Lines handed out so far.
    count: u64,
}

impl<'a> ChunkLines<'a> {
    fn new(chunk: &'a [u8], last: bool) -> Self {
        ChunkLines { chunk, at: 0, last, done: false, count: 0 }
    }

    /// About how many lines the chunk holds (as long as its first one, and
    /// no more than one per 64 bytes: a blank first line must not reserve
    /// room for a row per byte), to make room for their rows.
    fn estimate(&self) -> usize {
        let first = memchr::memchr(b'\n', self.chunk).map_or(self.chunk.len(), |i| i + 1);
        self.chunk.len() / first.max(64) + 1
    }
}

impl<'a> Iterator for ChunkLines<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.done {
            return None;
        }
        let rest = &self.chunk[self.at..];
        match memchr::memchr(b'\n', rest) {
            Some(i) => {
                self.at += i + 1;
                self.count += 1;
                Some(&rest[..i])
            }
            None => {
                self.done = true;
                // What follows the file's last line end (empty or not).
                if self.last {
                    self.count += 1;
                    return Some(rest);
                }
                None
            }
        }
    }
}

/// The dead letter of a file line the decoder refused: its bytes as they
/// are in the file, at its line number.
fn refused_line(pos: u64, line: &[u8], r: crate::decode::Rejected) -> Unparsable {
    Unparsable { partition: 0, pos, raw: line.to_vec(), error: r.error, reason: r.reason }
}

/// A file of Debezium envelopes, one per line (a topic dump): decoded as the
/// Kafka source does; the line number is the position. Truncate events and
/// empty lines are skipped; lines that do not decode are dead letters.
///
/// Lines are decoded in chunks on all cores (JSON parsing is most of the
/// cost of a run with a cheap merge); the chunks are joined in line order.
///
/// `keep`: the envelope fields the table reads ([`crate::decode::env_paths`]);
/// None keeps them all.
pub fn read_debezium_jsonl(
    source: &str,
    bytes: &bytes::Bytes,
    store_paths: &[String],
    keep: Option<&[String]>,
) -> RawBatch {
    let parts = in_line_chunks(bytes, |chunk| {
        decode_debezium_lines(Lines { source, file: bytes, lines: chunk }, store_paths, keep)
    });
    let mut truncates = 0;
    let parts = parts.into_iter().map(|(first, (part, t))| {
        truncates += t;
        (first, part)
    });
    let batch = RawBatch::joined(source.to_string(), parts.collect());
    if truncates > 0 {
        tracing::warn!(source, truncates, "truncate events in a file source are skipped");
    }
    batch
}

/// Some lines of a JSONL file, for one decoding job.
struct Lines<'a, 'c> {
    source: &'a str,
    /// The whole file: rows keep their line as a part of it ([`RawText`]).
    file: &'a bytes::Bytes,
    lines: &'a mut ChunkLines<'c>,
}

/// Decodes some lines of a Debezium JSONL file (positions within them);
/// returns the batch and the truncate count.
fn decode_debezium_lines(
    Lines { source, file, lines }: Lines<'_, '_>,
    store_paths: &[String],
    keep: Option<&[String]>,
) -> (RawBatch, usize) {
    use crate::config::Format;
    use crate::decode::{decode_keeping, Decoded};
    let file = &RawText::job_buffer(file);
    let mut rows = DecodedRows::with_capacity(lines.estimate());
    let mut unparsable = vec![];
    let mut truncates = 0;
    for (i, line) in lines.enumerate() {
        let pos = i as u64 + 1;
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        let decoded = decode_keeping(Format::Debezium, None, Some(line), store_paths, keep);
        match crate::decode::within_width(decoded, store_paths.len()) {
            // Decoding already stored the table's envelope columns.
            Ok(Decoded::Row { data, env, declared }) => {
                // A line that decoded is UTF-8 (both JSON parsers check).
                let raw = RawText::within(file, line);
                rows.push(data, RawRow::decoded(0, pos, raw, env, declared));
            }
            Ok(Decoded::Tombstone) => {}
            Ok(Decoded::Truncate) => truncates += 1,
            Err(r) => unparsable.push(refused_line(pos, line, r)),
        }
    }
    let mut batch = rows.into_batch(source.to_string());
    batch.unparsable = unparsable;
    (batch, truncates)
}

/// A file of flat JSON objects, one per line: every field a column. Lines
/// are decoded in chunks on all cores, each as a Kafka message of flat JSON
/// is (`decode::decode_keeping`), joined in line order; lines that are not
/// a JSON object, or that it refuses, are dead letters.
pub fn read_jsonl(path: &Path, bytes: &bytes::Bytes) -> Result<RawBatch, FileError> {
    let source = path.display().to_string();
    let parts = in_line_chunks(bytes, |lines| {
        decode_json_lines(Lines { source: &source, file: bytes, lines })
    });
    Ok(RawBatch::joined(source, parts))
}

/// Decodes some lines of a flat JSONL file (positions within them). Text that is not UTF-8 is
/// read with replacement characters, as it always was.
fn decode_json_lines(Lines { source, file, lines }: Lines<'_, '_>) -> RawBatch {
    use crate::config::Format;
    use crate::decode::{decode_keeping, within_width, Decoded};
    let file = &RawText::job_buffer(file);
    let mut objects = DecodedRows::with_capacity(lines.estimate());
    let mut unparsable = vec![];
    for (i, line) in lines.enumerate() {
        let pos = i as u64 + 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        // The decoder of a Kafka message of flat JSON: a line it refuses
        // (not UTF-8, not an object, a field twice, NUL, too deep, too
        // wide) is a dead letter holding the line's bytes as they are,
        // never a row made of a lossy copy of them (docs/bad-input.md).
        match within_width(decode_keeping(Format::Json, None, Some(line), &[], None), 0) {
            Ok(Decoded::Row { data, declared, .. }) => objects.push(
                data,
                // A line that decoded is UTF-8 (both JSON parsers check).
                RawRow::decoded(0, pos, RawText::within(file, line), vec![], declared),
            ),
            // A wrapped line whose payload is null: nothing to apply.
            Ok(Decoded::Tombstone | Decoded::Truncate) => {}
            Err(r) => unparsable.push(refused_line(pos, line, r)),
        }
    }
    let mut batch = objects.into_batch(source.to_string());
    batch.unparsable = unparsable;
    batch
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pass_version_and_line_count_equal_the_whole_file_hash_and_count() {
        // Lines across several 256 KiB blocks, a line end on a block's edge.
        let mut body = Vec::new();
        let mut i = 0u64;
        while body.len() < (256 << 10) * 3 + 17 {
            body.extend_from_slice(
                format!("{{\"id\":{i},\"pad\":\"{}\"}}\n", "x".repeat((i % 97) as usize))
                    .as_bytes(),
            );
            i += 1;
        }
        body[256 << 10] = b'\n';
        for bytes in [&body[..], &body[..body.len() - 5], b"", b"no line end"] {
            let lines = bytes.iter().filter(|b| **b == b'\n').count();
            assert_eq!(version_and_lines(bytes), (content_version(bytes), lines));
        }
    }

    #[test]
    fn chunk_lines_are_the_lines_between_line_ends_and_the_files_tail() {
        let lines = |chunk: &[u8], last: bool| {
            let mut it = ChunkLines::new(chunk, last);
            let got: Vec<Vec<u8>> = it.by_ref().map(<[u8]>::to_vec).collect();
            assert_eq!(it.count, got.len() as u64);
            got
        };
        let text = b"a\n\nbc\n";
        // A chunk inside the file ends at a line end: nothing follows it.
        assert_eq!(lines(text, false), [&b"a"[..], b"", b"bc"]);
        // The file's last chunk: what follows its last line end is a line.
        assert_eq!(lines(text, true), [&b"a"[..], b"", b"bc", b""]);
        assert_eq!(lines(b"a\ntail", true), [&b"a"[..], b"tail"]);
        assert_eq!(lines(b"", true), [&b""[..]]);
        let lines_of_80 = "x".repeat(79) + "\n";
        assert_eq!(ChunkLines::new(lines_of_80.repeat(10).as_bytes(), false).estimate(), 11);
        assert_eq!(
            ChunkLines::new(&[b'\n'; 640], false).estimate(),
            11,
            "one per 64 bytes at most"
        );
    }

    #[test]
    fn csv_empty_cells_are_null_and_lines_are_positions() {
        let b =
            read_csv(Path::new("x.csv"), b"id,op,city,seq\n1,U,Berlin,1\n2,D,,2\n", b',').unwrap();
        assert_eq!(b.columns, vec!["id", "op", "city", "seq"]);
        assert_eq!(b.rows.len(), 2);
        assert!(b.rows[1].cells[2].is_null());
        assert!(b.rows[0].pos < b.rows[1].pos);
    }

    #[test]
    fn csv_row_with_wrong_field_count_is_unparsable_not_lost() {
        let b = read_csv(Path::new("x.csv"), b"id,city\n1,Berlin\n2,Bonn,extra\n", b',').unwrap();
        assert_eq!(b.rows.len(), 1);
        assert_eq!(b.unparsable.len(), 1);
        assert!(String::from_utf8_lossy(&b.unparsable[0].raw).contains("extra"));
    }

    #[test]
    fn debezium_jsonl_positions_are_line_numbers_across_parallel_chunks() {
        let mut text = String::new();
        for i in 1..=20_000 {
            match i {
                // Bad lines in the first chunk and in a later one (the
                // file is ~700 KB, chunks are 256 KB).
                7 | 15_000 => text.push_str("not json\n"),
                9000 => text.push('\n'),
                _ => text.push_str(&format!("{{\"op\":\"u\",\"after\":{{\"id\":{i}}}}}\n")),
            }
        }
        let b = read_debezium_jsonl("t", &text.into(), &[], None);
        assert_eq!(b.rows.len(), 19_997);
        assert_eq!(b.unparsable.iter().map(|u| u.pos).collect::<Vec<_>>(), vec![7, 15_000]);
        for r in &b.rows {
            assert!(r.cells[b.columns.iter().position(|c| c == "id").unwrap()]
                .same(&Value::Int(r.pos as i64)));
        }
        assert!(b.rows.windows(2).all(|w| w[0].pos < w[1].pos));
    }

    #[test]
    fn jsonl_rows_decode_as_the_general_parser_does_across_parallel_chunks() {
        let mut text = String::new();
        for i in 1..=20_000u64 {
            match i {
                5 => text.push_str("[1,2]\n"),
                11 => text.push_str("{\"id\":11,\r\n"),
                13 => text.push_str("{\"id\":13,\"s\":\"\\ud800\"}\n"),
                9000 => text.push_str("\r\n"),
                _ => text.push_str(&format!(
                    "{{\"id\":{i},\"x\":{}.5,\"big\":{},\"s\":\"a\\u00e9\",\"n\":{{\"k\":[1,null]}},\"none\":null}}\r\n",
                    i % 7,
                    u64::MAX - i
                )),
            }
        }
        let b = read_jsonl(Path::new("x.jsonl"), &text.into()).unwrap();
        assert_eq!(b.rows.len(), 19_996);
        // A lone surrogate escape (line 13) is refused, as serde_json refuses it.
        assert_eq!(b.unparsable.iter().map(|u| u.pos).collect::<Vec<_>>(), vec![5, 11, 13]);
        assert!(b.unparsable[0].error.contains("not a JSON object"));
        assert!(b.unparsable[1].error.contains("not JSON"));
        assert_eq!(b.columns, vec!["id", "x", "big", "s", "n", "none"]);
        assert!(b.rows.windows(2).all(|w| w[0].pos < w[1].pos));
        for r in &b.rows {
            let line = &*r.raw.text();
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let general: Vec<Value> =
                v.as_object().unwrap().values().map(crate::decode::json_cell).collect();
            assert_eq!(general.len(), r.cells.len(), "{line}");
            for (g, c) in general.iter().zip(&r.cells) {
                assert!(g.same(c), "{line}: {g:?} vs {c:?}");
            }
            assert!(r.cells[0].same(&Value::Int(r.pos as i64)));
        }
    }

    #[test]
    fn jsonl_keeps_json_types_and_reports_bad_lines() {
        let b = read_jsonl(
            Path::new("x.jsonl"),
            &bytes::Bytes::from_static(
                b"{\"id\":1,\"amount\":2.5,\"ok\":true}\nnot json\n{\"id\":2,\"extra\":\"x\"}\n",
            ),
        )
        .unwrap();
        assert_eq!(b.columns, vec!["id", "amount", "ok", "extra"]);
        assert!(matches!(b.rows[0].cells[1], Value::Float(_)));
        assert!(b.rows[1].cells[1].is_null());
        assert_eq!(b.unparsable.len(), 1);
    }
}
