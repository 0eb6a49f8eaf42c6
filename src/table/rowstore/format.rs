//! The bytes of a row companion (`mod.rs` says what companions are for):
//! writing one from a batch, and reading chosen rows back.
//!
//! File layout (integers little-endian):
//!
//! | bytes | content |
//! | --- | --- |
//! | 8 | magic `CLROWS02` |
//! | 4 | length S of the schema |
//! | S | the Arrow schema, as an IPC stream without batches |
//! | 8 | xxh3 of the schema bytes |
//! | 4 | rows N |
//! | 1 | width W of a directory entry: 4, or 8 when the data reaches 4 GiB |
//! | W N | per row: where its record ends in the data |
//! | ... | the records, back to back, each followed by its xxh3 (8 bytes) |
//!
//! Why the checksum sits after its record and not in the directory (as in
//! the first format, `CLROWS01`, which is still read: 16 directory bytes a
//! row, end and checksum): a run's closes are spread over every current
//! file, so each file's directory is read whole, and at 10M keys the
//! directories were two thirds of the bytes a run read from companions.
//! A checksum is only ever needed with its record.

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use deltalake::arrow::array::RecordBatch;
use deltalake::arrow::datatypes::Schema;
use xxhash_rust::xxh3::xxh3_64;

use super::{Result, RowStoreError};
use crate::table::rowcodec::{self, Columns};

const MAGIC: &[u8; 8] = b"CLROWS02";
/// The first format: 16-byte directory entries (end, checksum).
pub(super) const MAGIC_V1: &[u8; 8] = b"CLROWS01";
/// The checksum after each record.
const SEAL: u64 = 8;
/// Reads closer than this are merged into one (fewer system calls for
/// rows near each other; little read for nothing when they are not).
const DIRECTORY_GAP: u64 = 4096;
const RECORD_GAP: u64 = 1024;

/// A companion's bytes: its header and directory, then its records (kept
/// apart, so the records are never copied into one buffer with the rest).
pub(in crate::table) struct Encoded {
    pub(super) head: Vec<u8>,
    pub(super) data: Vec<u8>,
}

/// A batch as a companion file's bytes.
pub(in crate::table) fn encode(batch: &RecordBatch) -> Result<Encoded> {
    encode_within(batch, u32::MAX as u64)
}

/// [`encode`], with 8-byte directory entries once the data ends beyond
/// `narrow` (tests lower it to write them).
pub(super) fn encode_within(batch: &RecordBatch, narrow: u64) -> Result<Encoded> {
    let schema = schema_bytes(&batch.schema())?;
    let n = batch.num_rows();
    let mut data = Vec::with_capacity(batch.get_array_memory_size() + SEAL as usize * n);
    let ends = rowcodec::encode(batch, &mut data, |out, start| {
        let sum = xxh3_64(&out[start..]);
        out.extend_from_slice(&sum.to_le_bytes());
    })?;
    let wide = ends.last().is_some_and(|&end| end > narrow);
    let width: u8 = if wide { 8 } else { 4 };
    let mut head = Vec::with_capacity(8 + 4 + schema.len() + 8 + 4 + 1 + width as usize * n);
    head.extend_from_slice(MAGIC);
    head.extend_from_slice(&(schema.len() as u32).to_le_bytes());
    head.extend_from_slice(&schema);
    head.extend_from_slice(&xxh3_64(&schema).to_le_bytes());
    head.extend_from_slice(&(n as u32).to_le_bytes());
    head.push(width);
    for &end in &ends {
        if wide {
            head.extend_from_slice(&end.to_le_bytes());
        } else {
            head.extend_from_slice(&(end as u32).to_le_bytes());
        }
    }
    Ok(Encoded { head, data })
}

pub(super) fn schema_bytes(schema: &Arc<Schema>) -> Result<Vec<u8>> {
    let mut buf = vec![];
    let mut w = deltalake::arrow::ipc::writer::StreamWriter::try_new(&mut buf, schema)?;
    w.finish()?;
    drop(w);
    Ok(buf)
}

fn read_exact(file: &std::fs::File, at: u64, len: u64, file_len: u64) -> Result<Vec<u8>> {
    if at.checked_add(len).is_none_or(|end| end > file_len) {
        return Err(RowStoreError::Damaged(format!("range {at}+{len} past the end ({file_len})")));
    }
    let mut buf = vec![0u8; len as usize];
    file.read_exact_at(&mut buf, at)?;
    Ok(buf)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Byte ranges, sorted, merged where the gap between them is below `gap`:
/// each merged range with the ranges it covers.
fn coalesce(ranges: &[(u64, u64)], gap: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = vec![];
    for &(start, end) in ranges {
        match out.last_mut() {
            Some(last) if start <= last.1.saturating_add(gap) => last.1 = last.1.max(end),
            _ => out.push((start, end)),
        }
    }
    out
}

/// Ranges of a file (sorted by start) read with one read per merged group
/// (see [`coalesce`]): the groups' bytes and where each range lies in them.
struct Ranges {
    groups: Vec<Vec<u8>>,
    spans: Vec<(usize, std::ops::Range<usize>)>,
}

impl Ranges {
    fn read(
        file: &std::fs::File,
        file_len: u64,
        ranges: &[(u64, u64)],
        gap: u64,
    ) -> Result<Ranges> {
        let mut out = Ranges { groups: vec![], spans: Vec::with_capacity(ranges.len()) };
        let mut next = 0;
        for (start, end) in coalesce(ranges, gap) {
            out.groups.push(read_exact(file, start, end - start, file_len)?);
            while next < ranges.len() && ranges[next].1 <= end {
                let (s, e) = ranges[next];
                out.spans.push((out.groups.len() - 1, (s - start) as usize..(e - start) as usize));
                next += 1;
            }
        }
        Ok(out)
    }

    /// Bytes read.
    fn len(&self) -> u64 {
        self.groups.iter().map(|g| g.len() as u64).sum()
    }

    /// The bytes of the `i`th range.
    fn get(&self, i: usize) -> &[u8] {
        let (group, span) = &self.spans[i];
        &self.groups[*group][span.clone()]
    }
}

/// How a companion's directory and checksums are laid out, by format.
#[derive(Debug, Clone, Copy)]
struct Directory {
    /// Where the directory starts.
    at: u64,
    /// Bytes per entry: 4 or 8 (the end), or 16 (`CLROWS01`: the end and
    /// the record's checksum, which otherwise ends the record).
    width: u64,
}

impl Directory {
    /// A row's end, and its checksum when the entry holds it.
    fn entry(&self, e: &[u8]) -> (u64, Option<u64>) {
        let end = if self.width == 4 { u32_at(e, 0) as u64 } else { u64_at(e, 0) };
        (end, (self.width == 16).then(|| u64_at(e, 8)))
    }
}

pub(super) fn read_rows(
    file: &std::fs::File,
    file_len: u64,
    rows: &[u32],
    columns: Columns<'_>,
) -> Result<(RecordBatch, u64)> {
    let head = read_exact(file, 0, 12, file_len)?;
    let v1 = match &head[..8] {
        m if m == MAGIC => false,
        m if m == MAGIC_V1 => true,
        _ => return Err(RowStoreError::Format),
    };
    let schema_len = u32_at(&head, 8) as u64;
    let meta = read_exact(file, 12, schema_len + 12 + u64::from(!v1), file_len)?;
    let (schema_buf, rest) = meta.split_at(schema_len as usize);
    if u64_at(rest, 0) != xxh3_64(schema_buf) {
        return Err(RowStoreError::Damaged("schema checksum".into()));
    }
    let n = u32_at(rest, 8) as u64;
    let at = 12 + meta.len() as u64;
    let width = if v1 {
        16
    } else {
        match rest[12] {
            w @ (4 | 8) => w as u64,
            w => return Err(RowStoreError::Damaged(format!("directory entries of {w} bytes"))),
        }
    };
    let dir = Directory { at, width };
    let reader = deltalake::arrow::ipc::reader::StreamReader::try_new(
        std::io::Cursor::new(schema_buf),
        None,
    )?;
    let schema = reader.schema();
    let data = dir.at + dir.width * n;
    // Row r spans from the end of row r-1 (0 for the first) to its own end.
    let mut entries = Vec::with_capacity(rows.len());
    for &r in rows {
        let r = r as u64;
        if r >= n {
            return Err(RowStoreError::Damaged(format!("row {r} of {n}")));
        }
        let first = if r == 0 { 0 } else { r - 1 };
        entries.push((dir.at + dir.width * first, dir.at + dir.width * (r + 1)));
    }
    let dir_bytes = Ranges::read(file, file_len, &entries, DIRECTORY_GAP)?;
    let mut spans = Vec::with_capacity(rows.len());
    let mut sums = Vec::with_capacity(rows.len());
    for (i, &r) in rows.iter().enumerate() {
        let d = dir_bytes.get(i);
        let (start, own) = if r == 0 { (0, 0) } else { (dir.entry(d).0, dir.width as usize) };
        let (end, sum) = dir.entry(&d[own..]);
        let least = if sum.is_some() { start } else { start + SEAL };
        if end < least {
            return Err(RowStoreError::Damaged(format!("row {r}: directory out of order")));
        }
        spans.push((data + start, data + end));
        sums.push(sum);
    }
    let bytes = Ranges::read(file, file_len, &spans, RECORD_GAP)?;
    let mut records = Vec::with_capacity(rows.len());
    for (i, (sum, r)) in sums.into_iter().zip(rows).enumerate() {
        let b = bytes.get(i);
        let (record, sum) = match sum {
            Some(sum) => (b, sum),
            None => {
                let (record, seal) = b.split_at(b.len() - SEAL as usize);
                (record, u64_at(seal, 0))
            }
        };
        if xxh3_64(record) != sum {
            return Err(RowStoreError::Damaged(format!("row {r}: checksum")));
        }
        records.push(record);
    }
    let read = 12 + meta.len() as u64 + dir_bytes.len() + bytes.len();
    Ok((rowcodec::decode(schema, &records, columns)?, read))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearby_ranges_merge_and_far_ones_do_not() {
        assert_eq!(coalesce(&[(0, 10), (12, 20), (100, 110)], 5), vec![(0, 20), (100, 110)]);
        assert_eq!(coalesce(&[(0, 10), (5, 8)], 0), vec![(0, 10)]);
        assert_eq!(coalesce(&[], 5), vec![]);
    }
}
