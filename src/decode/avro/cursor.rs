//! Reading an Avro body a value at a time, with the checks `apache_avro`
//! makes (varints of at most ten bytes, ints within 32 bits, booleans of
//! 0 or 1, lengths inside the message, UTF-8), for the direct path and
//! for the checks the reference path makes before `apache_avro` reads a
//! body (`direct.rs`, docs/avro.md).
//!
//! Why a module of its own: it is the one place that decides what a
//! body's bytes can hold, so both of those uses refuse the same things.

/// Array or map items that take no bytes (nulls, empty records) one
/// message may claim: no byte of the message bounds them, and
/// `apache_avro` builds every one (a million are tens of megabytes).
pub(super) const MAX_EMPTY_ITEMS: usize = 1 << 20;

/// How deep records, arrays and maps may nest in one message. Only a
/// recursive type (a linked list, a tree) can reach it: a schema compiles
/// only when it nests fewer types than this otherwise. `apache_avro` reads
/// a value by recursion with no limit of its own, a stack frame or more
/// per level: a few bytes a level, so a 100 KB message could nest deep
/// enough to overflow the thread's stack, which aborts the process (no
/// panic to catch) — and a restarted daemon reads the same message again.
pub(super) const MAX_NEST: usize = 128;

/// A message body being read. Every read is checked as `apache_avro`
/// checks it; None means "give the message up".
pub(super) struct Cursor<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) at: usize,
    /// A read needed bytes past the end.
    short: bool,
    /// Array and map items of no bytes claimed so far.
    empty_items: usize,
    /// Records, arrays and maps entered and not yet left.
    nest: usize,
    /// They nested more than [`MAX_NEST`] levels.
    deep: bool,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(bytes: &'a [u8], at: usize) -> Cursor<'a> {
        Cursor { bytes, at, short: false, empty_items: 0, nest: 0, deep: false }
    }

    fn byte(&mut self) -> Option<u8> {
        let Some(&b) = self.bytes.get(self.at) else {
            self.short = true;
            return None;
        };
        self.at += 1;
        Some(b)
    }

    /// A variable-length integer of at most ten bytes (bits past the 64th
    /// dropped, as `apache_avro` drops them).
    fn varint(&mut self) -> Option<u64> {
        let first = self.byte()?;
        if first < 0x80 {
            return Some(first as u64);
        }
        let mut v = (first & 0x7f) as u64;
        for shift in (7..70).step_by(7) {
            let b = self.byte()?;
            v |= ((b & 0x7f) as u64) << shift;
            if b < 0x80 {
                return Some(v);
            }
        }
        None
    }

    pub(super) fn long(&mut self) -> Option<i64> {
        let z = self.varint()?;
        Some(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    pub(super) fn int(&mut self) -> Option<i32> {
        i32::try_from(self.long()?).ok()
    }

    /// A union branch or enum symbol number.
    pub(super) fn index(&mut self) -> Option<usize> {
        usize::try_from(self.long()?).ok()
    }

    pub(super) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let Some(b) = self.at.checked_add(n).and_then(|end| self.bytes.get(self.at..end)) else {
            self.short = true;
            return None;
        };
        self.at += n;
        Some(b)
    }

    pub(super) fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.index()?;
        self.take(n)
    }

    pub(super) fn str(&mut self) -> Option<&'a str> {
        simdutf8::basic::from_utf8(self.bytes()?).ok()
    }

    pub(super) fn boolean(&mut self) -> Option<bool> {
        match self.byte()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    /// The item count of an array or map block (a negative count is
    /// followed by the block's size in bytes). When each item takes at
    /// least a byte (`sized`), a count beyond the bytes left cannot be
    /// held: the body ends early (`short`). Items of no bytes are counted
    /// over the message, up to [`MAX_EMPTY_ITEMS`]. `apache_avro` reserves
    /// room for a whole claimed count before reading an item, so a few
    /// hostile bytes would otherwise make it reserve, or fill, gigabytes.
    pub(super) fn block(&mut self, sized: bool) -> Option<usize> {
        let raw = self.long()?;
        let n = if raw < 0 {
            self.long()?;
            raw.checked_neg()?
        } else {
            raw
        };
        let n = usize::try_from(n).ok()?;
        if sized && n > self.bytes.len() - self.at {
            self.short = true;
            return None;
        }
        if !sized {
            self.empty_items = self.empty_items.saturating_add(n);
            if self.empty_items > MAX_EMPTY_ITEMS {
                return None;
            }
        }
        Some(n)
    }

    /// Into a record, array or map: None past [`MAX_NEST`] levels.
    pub(super) fn enter(&mut self) -> Option<()> {
        if self.nest == MAX_NEST {
            self.deep = true;
            return None;
        }
        self.nest += 1;
        Some(())
    }

    /// Out of a record, array or map.
    pub(super) fn leave(&mut self) {
        self.nest -= 1;
    }

    pub(super) fn done(&self) -> bool {
        self.at == self.bytes.len()
    }

    /// Why a read that gave up means the body cannot be decoded at all
    /// (it ran out of bytes, claimed more items than it can hold, or
    /// nested too deep); None when it gave up for another reason, which
    /// the reference judges.
    pub(super) fn refusal(&self) -> Option<String> {
        if self.deep {
            return Some(format!(
                "it nests records, arrays or maps more than {MAX_NEST} levels deep"
            ));
        }
        if self.empty_items > MAX_EMPTY_ITEMS {
            return Some(format!(
                "it claims more than {MAX_EMPTY_ITEMS} array or map items of no bytes"
            ));
        }
        self.short.then(|| "the message ends inside its record (truncated)".to_string())
    }
}
