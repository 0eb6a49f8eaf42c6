//! The key index: per business key, the file and physical row holding its
//! current row and a [`Summary`] of its latest version.
//!
//! With it, older rows and exact replays are settled without reading any
//! data file (`merge::classify`), the files a run must rewrite or mask are
//! known without scanning, and an scd2 close never reads the version it
//! closes as values. It is built at open (see `state.rs`) and updated only
//! after a durable commit ([`KeyIndex::apply_commit`]).

use crate::merge::{Key, Seq, Summary};

/// A business key as the key index stores it: 16 bytes, inline up to 14
/// bytes (every integer key, short codes), otherwise behind one thin pointer.
/// Hashes and compares exactly as its bytes, so the index is looked up with a
/// plain `&[u8]`. With the 48-byte [`Summary`] and the file/row pair an entry
/// is 72 bytes (80 with the map's stored hash): 10M keys take about 1 GB.
#[derive(Clone)]
pub(super) enum IndexKey {
    Inline(u8, [u8; 14]),
    Heap(Box<Box<[u8]>>),
}

const _: () = assert!(std::mem::size_of::<IndexKey>() == 16);

const _: () = assert!(std::mem::size_of::<(IndexKey, Entry)>() == 72);

impl IndexKey {
    #[inline]
    pub(super) fn new(k: &[u8]) -> IndexKey {
        if k.len() <= 14 {
            let mut b = [0u8; 14];
            b[..k.len()].copy_from_slice(k);
            IndexKey::Inline(k.len() as u8, b)
        } else {
            IndexKey::Heap(Box::new(k.into()))
        }
    }

    #[inline]
    pub(super) fn as_slice(&self) -> &[u8] {
        match self {
            IndexKey::Inline(n, b) => &b[..*n as usize],
            IndexKey::Heap(b) => b,
        }
    }
}

impl std::borrow::Borrow<[u8]> for IndexKey {
    #[inline]
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::hash::Hash for IndexKey {
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.as_slice().hash(h)
    }
}

impl PartialEq for IndexKey {
    #[inline]
    fn eq(&self, o: &IndexKey) -> bool {
        self.as_slice() == o.as_slice()
    }
}

impl Eq for IndexKey {}

/// The file of a key kept only as deleted (scd2: its latest version is a
/// closed, deleted one; it has no current row).
pub(super) const NO_FILE: u32 = u32::MAX;

/// Where a stored row lives: its file and physical row in that file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Location {
    pub(super) file: u32,
    pub(super) row: u32,
}

/// One key's entry.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) file: u32,
    pub(super) row: u32,
    pub(super) summary: Summary,
}

impl Entry {
    #[inline]
    fn location(&self) -> Location {
        Location { file: self.file, row: self.row }
    }
}

/// Business key -> entry. Dense entries plus a table of positions
/// (indexmap): a hash table of 72-byte entries would be up to half empty
/// after growing; here the slack costs 9 bytes per slot.
#[derive(Default)]
pub(super) struct KeyIndex {
    map: indexmap::IndexMap<IndexKey, Entry, rustc_hash::FxBuildHasher>,
}

impl KeyIndex {
    pub(super) fn with_capacity(n: usize) -> KeyIndex {
        KeyIndex { map: indexmap::IndexMap::with_capacity_and_hasher(n, Default::default()) }
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// Every key with its entry (saved by `index_snapshot.rs`).
    pub(super) fn iter(&self) -> impl ExactSizeIterator<Item = (&[u8], &Entry)> {
        self.map.iter().map(|(k, e)| (k.as_slice(), e))
    }

    #[inline]
    pub(super) fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.map.get(key)
    }

    #[inline]
    pub(super) fn contains(&self, key: &[u8]) -> bool {
        self.map.contains_key(key)
    }

    pub(super) fn insert(&mut self, key: &[u8], entry: Entry) {
        self.map.insert(IndexKey::new(key), entry);
    }

    /// Where each key's stored row lives (the file is `NO_FILE` for a key
    /// kept only as deleted), looked up on all cores. Each lookup into an
    /// index of millions of keys is a cache miss or two, and a run makes
    /// several per changed key: one after another they were a tenth of an
    /// scd2 run on the 1M-key bench.
    pub(super) fn locate<T: Sync>(
        &self,
        items: &[T],
        key: impl Fn(&T) -> &[u8] + Sync,
    ) -> Vec<Option<Location>> {
        use rayon::prelude::*;
        items
            .par_iter()
            .with_min_len(4096)
            .map(|t| self.map.get(key(t)).map(Entry::location))
            .collect()
    }

    /// Positions in the dense entries (see [`KeyIndex::locate`]).
    fn positions<T: Sync>(
        &self,
        items: &[T],
        key: impl Fn(&T) -> &[u8] + Sync,
    ) -> Vec<Option<usize>> {
        use rayon::prelude::*;
        items.par_iter().with_min_len(4096).map(|t| self.map.get_index_of(key(t))).collect()
    }

    /// Stored keys with a live current row (snapshot merge candidates).
    pub(super) fn live_keys(&self) -> impl Iterator<Item = &[u8]> {
        self.map
            .iter()
            .filter(|(_, e)| e.file != NO_FILE && !e.summary.deleted)
            .map(|(k, _)| k.as_slice())
    }

    /// After a durable commit: the keys whose current row the commit placed
    /// (`rows`: a new file's keys, or the moved rows of a file rewritten in
    /// place) move there, the merge's summaries replace the stored ones (`None`:
    /// the key is gone). With `deleted_has_no_row` (scd2), a key whose latest
    /// version is deleted keeps no current row.
    ///
    /// Keys are looked up on all cores first (see `locate`); the updates then
    /// go by position. Inserts append (positions stay valid); removals
    /// (`swap_remove` moves the last entry) come last.
    pub(super) fn apply_commit(
        &mut self,
        rows: Vec<(&[u8], Location)>,
        summaries: &[(Key, Option<Summary>)],
        deleted_has_no_row: bool,
    ) {
        let at = self.positions(&rows, |(k, _)| k);
        let updates: Vec<(&[u8], &Summary)> =
            summaries.iter().filter_map(|(k, s)| s.as_ref().map(|s| (&k[..], s))).collect();
        let at_summary = self.positions(&updates, |(k, _)| k);
        let mut inserted: rustc_hash::FxHashMap<&[u8], usize> = Default::default();
        for ((k, loc), at) in rows.into_iter().zip(at) {
            match at {
                Some(i) => {
                    let e = self.map.get_index_mut(i).expect("position").1;
                    (e.file, e.row) = (loc.file, loc.row);
                }
                None => {
                    // Placeholder; the summary follows below.
                    let summary = Summary {
                        seq: Seq::Int(0),
                        deleted: false,
                        valid_from: i64::MIN,
                        row_hash: 0,
                        tracked_hash: 0,
                    };
                    let e = Entry { file: loc.file, row: loc.row, summary };
                    inserted.insert(k, self.map.insert_full(IndexKey::new(k), e).0);
                }
            }
        }
        for ((k, s), at) in updates.into_iter().zip(at_summary) {
            let i = match at.or_else(|| inserted.get(k).copied()) {
                Some(i) => i,
                None => {
                    let e = Entry { file: NO_FILE, row: 0, summary: s.clone() };
                    self.map.insert_full(IndexKey::new(k), e).0
                }
            };
            let e = self.map.get_index_mut(i).expect("position").1;
            if s.deleted && deleted_has_no_row {
                e.file = NO_FILE;
            }
            e.summary = s.clone();
        }
        for (k, s) in summaries {
            if s.is_none() {
                self.map.swap_remove(&k[..]);
            }
        }
    }
}
