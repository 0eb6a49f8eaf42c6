//! TODO

use super::TableStore;
use crate::merge::Summary;

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

const _: () = assert!(std::mem::size_of::<(IndexKey, (u32, u32, Summary))>() == 72);

impl IndexKey {
    pub(super) fn new(k: &[u8]) -> IndexKey {
        if k.len() <= 14 {
            let mut b = [0u8; 14];
            b[..k.len()].copy_from_slice(k);
            IndexKey::Inline(k.len() as u8, b)
        } else {
            IndexKey::Heap(Box::new(k.into()))
        }
    }

    pub(super) fn as_slice(&self) -> &[u8] {
        match self {
            IndexKey::Inline(n, b) => &b[..*n as usize],
            IndexKey::Heap(b) => b,
        }
    }
}

impl std::borrow::Borrow<[u8]> for IndexKey {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::hash::Hash for IndexKey {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.as_slice().hash(h)
    }
}

impl PartialEq for IndexKey {
    fn eq(&self, o: &IndexKey) -> bool {
        self.as_slice() == o.as_slice()
    }
}

impl Eq for IndexKey {}

pub(super) const NO_FILE: u32 = u32::MAX;

impl TableStore {
    /// Where each key's stored row lives (file, row; the file is `NO_FILE`
    /// for a key kept only as deleted), looked up on all cores. Each lookup
    /// into an index of millions of keys is a cache miss or two, and a run
    /// makes several per changed key: one after another they were a tenth
    /// of an scd2 run on the 1M-key bench.
    pub(super) fn locate<T: Sync>(
        &self,
        items: &[T],
        key: impl Fn(&T) -> &[u8] + Sync,
    ) -> Vec<Option<(u32, u32)>> {
        use rayon::prelude::*;
        items
            .par_iter()
            .with_min_len(4096)
            .map(|t| self.index.get(key(t)).map(|(f, r, _)| (*f, *r)))
            .collect()
    }

    /// Positions in the index's dense entries (see [`TableStore::locate`]).
    pub(super) fn positions<T: Sync>(
        &self,
        items: &[T],
        key: impl Fn(&T) -> &[u8] + Sync,
    ) -> Vec<Option<usize>> {
        use rayon::prelude::*;
        items.par_iter().with_min_len(4096).map(|t| self.index.get_index_of(key(t))).collect()
    }

    /// Stored keys with a live current row (snapshot merge candidates).
    pub fn live_keys(&self) -> impl Iterator<Item = &[u8]> {
        self.index
            .iter()
            .filter(|(_, (f, _, s))| *f != NO_FILE && !s.deleted)
            .map(|(k, _)| k.as_slice())
    }
}
