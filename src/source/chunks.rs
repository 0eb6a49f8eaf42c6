//! A large source file read in bounded chunks of whole records
//! (docs/commit-protocol.md, large files), so memory follows the batch
//! limits (`batching.max_rows`, `max_bytes`) and not the file: a
//! multi-gigabyte initial extract loads chunk by chunk, each one a run of
//! its own.
//!
//! A record ends at a newline — for CSV only at a newline outside a quoted
//! field, which may hold line breaks. Quotes are read as the CSV reader
//! reads them: one opens a quoted field only where a field starts (after
//! the delimiter or a line break), a doubled one inside is a quote
//! character, and one anywhere else is just a character (`5" screen`).
//! Counting every quote instead once made such a character swallow the
//! rest of the file into one record, or cut a later quoted field's line
//! break as a record end. Every chunk of a CSV file starts with the
//! file's header line, so each decodes on its own.
//! Positions stay the file's line numbers: a chunk knows how many lines
//! precede it.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::decode::MAX_MESSAGE_BYTES;

/// What a dead letter keeps of a record too long to read.
pub const OVERSIZED_KEPT: usize = 1 << 20;

/// A record longer than the largest message (docs/bad-input.md): skipped
/// without holding it in memory, for its run to dead-letter, as a Kafka
/// message that large is. Reading goes on after it.
#[derive(Debug)]
pub struct Oversized {
    /// The file's line number where it starts.
    pub line: u64,
    /// Its length in bytes.
    pub len: u64,
    /// Its first [`OVERSIZED_KEPT`] bytes.
    pub head: Vec<u8>,
    /// The length it exceeds.
    pub limit: usize,
}

impl Oversized {
    /// Its dead letter (reason `malformed`).
    pub fn dead_letter(&self) -> super::Unparsable {
        super::Unparsable {
            partition: 0,
            pos: self.line,
            raw: self.head.clone(),
            error: format!(
                "not decoded: the record at line {} is {} bytes, longer than {} MiB (a quoted field never closed, or no line breaks); its first {} bytes are kept",
                self.line,
                self.len,
                self.limit >> 20,
                self.head.len()
            ),
            reason: "malformed",
        }
    }
}

/// A header longer than `limit` bytes: an error naming it, not the rest of
/// the file read into memory.
fn too_long(what: String, limit: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!(
            "{what} is longer than {} MiB (a quoted field never closed, or no line breaks)",
            limit >> 20
        ),
    )
}

/// How much one chunk may hold.
#[derive(Debug, Clone, Copy)]
pub struct ChunkLimits {
    pub max_rows: usize,
    pub max_bytes: usize,
}

/// One chunk of a file: whole records only.
#[derive(Debug)]
pub struct Chunk {
    /// The records (a CSV chunk after the first: the header line, then them).
    pub bytes: Vec<u8>,
    /// Lines of the file before the chunk's first record, header included.
    pub lines_before: u64,
    /// Added to a position read in `bytes` (a line number there), it is
    /// the file's line number.
    pub shift: u64,
    /// Byte offset in the file just after the chunk's last record.
    pub end: u64,
    /// The chunk ends the file.
    pub last: bool,
    /// A record too long to read, skipped: the chunk holds nothing else.
    pub oversized: Option<Oversized>,
}

/// The content version and the size of a file, read in one streaming pass.
pub fn scan(path: &Path) -> std::io::Result<(i64, u64)> {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut len = 0u64;
    each_block(File::open(path)?, |b| {
        hasher.update(b);
        len += b.len() as u64;
    })?;
    Ok((super::file::version_of_hash(hasher.digest()), len))
}

/// Reads `from` to its end in blocks of a few megabytes, handing each to `f`.
fn each_block(mut from: impl Read, mut f: impl FnMut(&[u8])) -> std::io::Result<()> {
    let mut buf = vec![0u8; 4 << 20];
    loop {
        match from.read(&mut buf)? {
            0 => return Ok(()),
            n => f(&buf[..n]),
        }
    }
}

/// Reads a file chunk by chunk from a record boundary.
pub struct ChunkReader {
    /// The file, up to the length its content version was computed over:
    /// bytes appended while it is read belong to another version.
    file: std::io::Take<File>,
    limits: ChunkLimits,
    /// The CSV delimiter (None: JSON lines).
    csv: Option<u8>,
    /// The CSV header line (with its line break), repeated in every chunk.
    header: Vec<u8>,
    /// Lines the header spans (0 for JSONL).
    header_lines: u64,
    /// Bytes read past the last chunk: the start of the next one.
    pending: Vec<u8>,
    /// Where a scan of `pending` that found no record end stopped, and
    /// whether it was inside a quoted field there: the next scan, after
    /// more is read, goes on from it instead of from the start (a long
    /// record was otherwise scanned again for every megabyte read).
    resume: Option<(usize, bool)>,
    /// File offset of `pending`'s first byte.
    offset: u64,
    lines: u64,
    eof: bool,
}

impl ChunkReader {
    /// A reader of the first `len` bytes of a file (those [`scan`] hashed)
    /// from byte `start`, a record boundary a previous run committed (0:
    /// the beginning). For CSV the header is read first.
    pub fn open(
        path: &Path,
        csv: Option<u8>,
        start: u64,
        len: u64,
        limits: ChunkLimits,
    ) -> std::io::Result<Self> {
        let file = File::open(path)?.take(len);
        let mut r = ChunkReader {
            file,
            limits,
            csv,
            header: vec![],
            header_lines: 0,
            pending: vec![],
            resume: None,
            offset: 0,
            lines: 0,
            eof: false,
        };
        if csv.is_some() {
            // The header: the first record of the file.
            while r.boundaries(1, usize::MAX).1 == 0 && !r.eof {
                if r.pending.len() > MAX_MESSAGE_BYTES {
                    return Err(too_long("the header".into(), MAX_MESSAGE_BYTES));
                }
                r.fill(1 << 16)?;
            }
            let end = match r.boundaries(1, usize::MAX) {
                (end, 1) => end,
                _ => r.pending.len(),
            };
            r.header = r.pending.drain(..end).collect();
            r.resume = None;
            if !r.header.ends_with(b"\n") {
                r.header.push(b'\n');
            }
            r.offset = end as u64;
            r.header_lines = memchr::memchr_iter(b'\n', &r.header).count() as u64;
            r.lines = r.header_lines;
        }
        if start > r.offset {
            // Lines before `start` keep positions the file's line numbers.
            let rest = start - r.offset;
            let skip = (rest as usize).min(r.pending.len());
            let mut lines = memchr::memchr_iter(b'\n', &r.pending[..skip]).count() as u64;
            r.pending.drain(..skip);
            r.resume = None;
            each_block((&mut r.file).take(rest - skip as u64), |b| {
                lines += memchr::memchr_iter(b'\n', b).count() as u64;
            })?;
            r.lines += lines;
            r.offset = start;
        }
        Ok(r)
    }

    /// Reads up to `more` bytes into `pending`.
    fn fill(&mut self, more: usize) -> std::io::Result<()> {
        let at = self.pending.len();
        self.pending.resize(at + more, 0);
        let mut got = 0;
        while got < more {
            let n = self.file.read(&mut self.pending[at + got..])?;
            if n == 0 {
                self.eof = true;
                break;
            }
            got += n;
        }
        self.pending.truncate(at + got);
        Ok(())
    }

    /// The end of the `max_records`-th record in `pending` (or of the last
    /// whole one within `max_bytes`; the first one however long), and how
    /// many records that is.
    fn boundaries(&mut self, max_records: usize, max_bytes: usize) -> (usize, usize) {
        let (from, quoted) = self.resume.take().unwrap_or((0, false));
        let (mut end, mut records, mut quoted, mut from) = (0, 0, quoted, from);
        let buf = &self.pending;
        while records < max_records {
            let next = match self.csv {
                Some(_) if quoted => memchr::memchr(b'"', &buf[from..]),
                Some(_) => memchr::memchr2(b'\n', b'"', &buf[from..]),
                None => memchr::memchr(b'\n', &buf[from..]),
            };
            // Nothing more in what is read: the next scan goes on from its end.
            let Some(i) = next else {
                from = buf.len();
                break;
            };
            let at = from + i;
            if buf[at] == b'"' {
                if quoted {
                    // A doubled quote is a quote character; whether this
                    // one is doubled shows only with the next byte.
                    match buf.get(at + 1) {
                        Some(b'"') => from = at + 2,
                        Some(_) => (quoted, from) = (false, at + 1),
                        None => break,
                    }
                    continue;
                }
                // Only a quote where a field starts opens a quoted field.
                let starts = at == 0
                    || matches!(buf[at - 1], b'\n' | b'\r')
                    || Some(buf[at - 1]) == self.csv;
                quoted = starts;
            } else if !quoted {
                if at + 1 > max_bytes && records > 0 {
                    break;
                }
                end = at + 1;
                records += 1;
            }
            from = at + 1;
        }
        if records == 0 {
            self.resume = Some((from, quoted));
        }
        (end, records)
    }

    /// The next chunk, None at the end of the file.
    pub fn next_chunk(&mut self) -> std::io::Result<Option<Chunk>> {
        let ChunkLimits { max_rows, max_bytes } = self.limits;
        let end = loop {
            let (end, records) = self.boundaries(max_rows, max_bytes);
            if records >= max_rows || (self.pending.len() >= max_bytes && records > 0) {
                break end;
            }
            if self.eof {
                break self.pending.len();
            }
            let longest = max_bytes.max(MAX_MESSAGE_BYTES);
            if records == 0 && self.pending.len() > longest {
                return self.skip_oversized(longest).map(Some);
            }
            // Not full yet (or one record longer than `max_bytes`): read on.
            let want = max_bytes.saturating_sub(self.pending.len()).max(1 << 20);
            self.fill(want)?;
        };
        if end == 0 {
            return Ok(None);
        }
        let lines_before = self.lines;
        self.lines += memchr::memchr_iter(b'\n', &self.pending[..end]).count() as u64;
        self.offset += end as u64;
        // One copy of the records, after the header for CSV.
        let mut bytes = Vec::with_capacity(self.header.len() + end);
        bytes.extend_from_slice(&self.header);
        bytes.extend_from_slice(&self.pending[..end]);
        self.pending.drain(..end);
        self.resume = None;
        // The last chunk: nothing buffered and nothing left to read.
        if self.pending.is_empty() && !self.eof {
            self.fill(1)?;
        }
        let last = self.eof && self.pending.is_empty();
        let shift = lines_before - self.header_lines;
        Ok(Some(Chunk { bytes, lines_before, shift, end: self.offset, last, oversized: None }))
    }

    /// Reads past the record `pending` starts with, longer than `limit`,
    /// to its end (or the file's), holding a few megabytes at a time: a
    /// chunk of no records (the header only, for CSV) that carries it.
    fn skip_oversized(&mut self, limit: usize) -> std::io::Result<Chunk> {
        let head = self.pending[..OVERSIZED_KEPT.min(self.pending.len())].to_vec();
        let lines_before = self.lines;
        let mut len = 0u64;
        let mut drop = |r: &mut Self, upto: usize| {
            r.lines += memchr::memchr_iter(b'\n', &r.pending[..upto]).count() as u64;
            len += upto as u64;
            r.pending.drain(..upto);
        };
        loop {
            let (end, records) = self.boundaries(1, usize::MAX);
            if records == 1 {
                drop(self, end);
                break;
            }
            if self.eof {
                drop(self, self.pending.len());
                break;
            }
            // Forget what was scanned, but the byte before where the scan
            // goes on (whether a quote there starts a field depends on it).
            let (from, quoted) = self.resume.take().unwrap_or((0, false));
            let upto = from.saturating_sub(1);
            drop(self, upto);
            self.resume = Some((from - upto, quoted));
            self.fill(4 << 20)?;
        }
        self.resume = None;
        self.offset += len;
        if self.pending.is_empty() && !self.eof {
            self.fill(1)?;
        }
        let last = self.eof && self.pending.is_empty();
        let oversized = Oversized { line: lines_before + 1, len, head, limit };
        Ok(Chunk {
            bytes: self.header.clone(),
            lines_before,
            shift: lines_before - self.header_lines,
            end: self.offset,
            last,
            oversized: Some(oversized),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file's chunks; `csv` is the delimiter (None: JSON lines).
    fn chunks_of(
        text: &str,
        csv: Option<u8>,
        start: u64,
        max_rows: usize,
        max_bytes: usize,
    ) -> Vec<Chunk> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, text).unwrap();
        let limits = ChunkLimits { max_rows, max_bytes };
        let mut r = ChunkReader::open(&p, csv, start, text.len() as u64, limits).unwrap();
        let mut out = vec![];
        while let Some(c) = r.next_chunk().unwrap() {
            out.push(c);
        }
        out
    }

    fn text(c: &Chunk) -> &str {
        std::str::from_utf8(&c.bytes).unwrap()
    }

    #[test]
    fn large_files_jsonl_chunks_are_whole_lines_within_the_limits() {
        let file = "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n{\"a\":4}\n{\"a\":5}";
        let c = chunks(file, false, 0, 2, 1 << 20);
        let texts: Vec<&str> = c.iter().map(text).collect();
        assert_eq!(texts, ["{\"a\":1}\n{\"a\":2}\n", "{\"a\":3}\n{\"a\":4}\n", "{\"a\":5}"]);
        assert_eq!(c.iter().map(|c| c.lines_before).collect::<Vec<_>>(), [0, 2, 4]);
        assert_eq!(c.iter().map(|c| c.last).collect::<Vec<_>>(), [false, false, true]);
        assert_eq!(c[2].end, file.len() as u64);
        // By bytes: as many whole lines as fit (at least one).
        let c = chunks(file, false, 0, 100, 10);
        assert!(c.iter().all(|c| text(c).matches('{').count() == 1), "{:?}", c);
        // Resumed after the second line.
        let c = chunks(file, false, 16, 100, 1 << 20);
        assert_eq!((text(&c[0]), c[0].lines_before), ("{\"a\":3}\n{\"a\":4}\n{\"a\":5}", 2));
    }

    #[test]
    fn large_files_csv_chunks_repeat_the_header_and_keep_quoted_line_breaks() {
        let file = "id,note\n1,\"two\nlines\"\n2,\"say \"\"hi\"\"\"\n3,plain\n";
        let c = chunks(file, true, 0, 1, 1 << 20);
        let texts: Vec<&str> = c.iter().map(text).collect();
        assert_eq!(
            texts,
            [
                "id,note\n1,\"two\nlines\"\n",
                "id,note\n2,\"say \"\"hi\"\"\"\n",
                "id,note\n3,plain\n"
            ]
        );
        assert_eq!(c.iter().map(|c| c.lines_before).collect::<Vec<_>>(), [1, 3, 4]);
        assert!(c[2].last && !c[1].last);
        // Resumed at the third record: the header still comes first.
        let at = file.find("3,plain").unwrap() as u64;
        let c = chunks(file, true, at, 10, 1 << 20);
        assert_eq!((text(&c[0]), c[0].lines_before), ("id,note\n3,plain\n", 4));
    }

    #[test]
    fn large_files_a_record_longer_than_max_bytes_is_read_on_and_one_beyond_64_mib_skipped() {
        // A quoted field of 3 MB of line breaks and doubled quotes: read a
        // megabyte at a time (reads end anywhere in the 5-byte unit, also
        // between a doubled quote's two), the scan goes on where it
        // stopped, inside the quotes, and the record ends where the field
        // does.
        let field = "x\n\"\"y".repeat(600_000);
        let file = format!("id,note\n1,\"{field}\"\n2,b\n");
        let c = chunks(&file, true, 0, 1, 10);
        let texts: Vec<&str> = c.iter().map(text).collect();
        assert_eq!(texts.len(), 2);
        assert_eq!(texts[0], format!("id,note\n1,\"{field}\"\n"));
        assert_eq!(texts[1], "id,note\n2,b\n");
        // A line longer than the largest message, with more after it:
        // skipped (its first megabyte kept for its dead letter), and the
        // lines after it read on with their line numbers.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let long = format!("{{\"a\":1}}\n{}\n{{\"a\":2}}\n", "x".repeat(65 << 20));
        std::fs::write(&p, &long).unwrap();
        let limits = ChunkLimits { max_rows: 1, max_bytes: 10 };
        let mut r = ChunkReader::open(&p, None, 0, long.len() as u64, limits).unwrap();
        assert_eq!(text(&r.next_chunk().unwrap().unwrap()), "{\"a\":1}\n");
        let skipped = r.next_chunk().unwrap().unwrap();
        assert!(skipped.bytes.is_empty() && !skipped.last);
        let o = skipped.oversized.as_ref().unwrap();
        assert_eq!((o.line, o.len, o.head.len()), (2, (65 << 20) + 1, OVERSIZED_KEPT));
        assert_eq!(skipped.end, 8 + (65 << 20) + 1);
        let after = r.next_chunk().unwrap().unwrap();
        assert_eq!((text(&after), after.shift, after.last), ("{\"a\":2}\n", 2, true));
        // A CSV quoted field never closed: the rest of the file is the
        // record, each chunk starts with the header.
        let csv = format!("id,n\n1,a\n2,\"{}\n3,c\n", "y\n".repeat(33 << 20));
        std::fs::write(&p, &csv).unwrap();
        let mut r = ChunkReader::open(&p, Some(b','), 0, csv.len() as u64, limits).unwrap();
        assert_eq!(text(&r.next_chunk().unwrap().unwrap()), "id,n\n1,a\n");
        let skipped = r.next_chunk().unwrap().unwrap();
        assert_eq!((text(&skipped), skipped.last), ("id,n\n", true));
        assert_eq!(skipped.oversized.as_ref().map(|o| o.line), Some(3));
        assert!(r.next_chunk().unwrap().is_none());
    }

    fn chunks(text: &str, csv: bool, start: u64, max_rows: usize, max_bytes: usize) -> Vec<Chunk> {
        chunks_of(text, csv.then_some(b','), start, max_rows, max_bytes)
    }

    #[test]
    fn large_files_csv_quotes_open_a_field_only_where_a_field_starts() {
        // `5" screen` is a quote character, as the CSV reader reads it; the
        // quoted field after it still keeps its line break, and `"a"b"c`
        // is a quoted `a` followed by the characters `b"c`.
        let file =
            "id;note\n1;5\" screen\n2;\"two\nlines\"\n3;\"a\"b\"c\n4;\"say \"\"hi\"\"\"\n5;x\n";
        let c = chunks_of(file, Some(b';'), 0, 1, 1 << 20);
        let texts: Vec<&str> = c.iter().map(text).collect();
        assert_eq!(
            texts,
            [
                "id;note\n1;5\" screen\n",
                "id;note\n2;\"two\nlines\"\n",
                "id;note\n3;\"a\"b\"c\n",
                "id;note\n4;\"say \"\"hi\"\"\"\n",
                "id;note\n5;x\n"
            ]
        );
        // Each chunk reads as the whole file reads, record for record.
        let records = |text: &str| {
            let mut r = csv::ReaderBuilder::new().delimiter(b';').from_reader(text.as_bytes());
            r.records()
                .map(|r| r.unwrap().iter().map(String::from).collect())
                .collect::<Vec<Vec<_>>>()
        };
        assert_eq!(texts.iter().flat_map(|t| records(t)).collect::<Vec<_>>(), records(file));
        // A comma is no delimiter here: the quote after it is a character.
        let c = chunks_of("id;note\n1;a,\"b\n2;c\n", Some(b';'), 0, 1, 1 << 20);
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn large_files_chunks_stop_at_the_hashed_length() {
        // Lines appended after the file was hashed belong to its next version.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n").unwrap();
        let limits = ChunkLimits { max_rows: 1, max_bytes: 1 << 20 };
        let mut r = ChunkReader::open(&p, None, 0, 16, limits).unwrap();
        let mut seen = vec![];
        while let Some(c) = r.next_chunk().unwrap() {
            seen.push((String::from_utf8(c.bytes).unwrap(), c.last));
        }
        assert_eq!(seen, [("{\"a\":1}\n".to_string(), false), ("{\"a\":2}\n".to_string(), true)]);
    }

    #[test]
    fn large_files_content_version_matches_the_whole_file_hash() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let body: Vec<u8> = (0..10_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &body).unwrap();
        assert_eq!(
            scan(&p).unwrap(),
            (super::super::file::content_version(&body), body.len() as u64)
        );
    }
}
