//! The key index: per business key, the file and physical row holding its
//! current row and a [`Summary`] of its latest version.
//!
//! With it, older rows and exact replays are settled without reading any
//! data file (`merge::classify`), the files a run must rewrite or mask are
//! known without scanning, and an scd2 close never reads the version it
//! closes as values. It is built at open (see `state.rs`) and updated only
//! after a durable commit ([`KeyIndex::apply_commit`]).

use super::packed::PackedSummary;
use crate::merge::{Key, Summary};

/// A business key as the key index stores it: 16 bytes, inline up to 14
/// bytes (every integer key, short codes), otherwise behind one thin pointer.
/// Hashes and compares exactly as its bytes, so the index is looked up with a
/// plain `&[u8]`. With the 40-byte [`PackedSummary`] and the file/row pair an
/// entry is 64 bytes; with its shard's table about 72: 10M keys take about 720 MB.
#[derive(Clone)]
pub(super) enum IndexKey {
    Inline(u8, [u8; 14]),
    Heap(Box<Box<[u8]>>),
}

const _: () = assert!(std::mem::size_of::<IndexKey>() == 16);

const _: () = assert!(std::mem::size_of::<(IndexKey, Entry)>() == 64);

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

/// The file of a key while a saved index is replayed (`restart.rs`): its
/// row was in a file that is no longer live. Resolved before the index is used.
pub(super) const GONE: u32 = u32::MAX - 1;

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
    pub(super) summary: PackedSummary,
}

impl Entry {
    pub(super) fn new(file: u32, row: u32, summary: Summary) -> Entry {
        Entry { file, row, summary: PackedSummary::new(summary) }
    }

    /// Whether the key has a current row.
    pub(super) fn has_row(&self) -> bool {
        self.file != NO_FILE && self.file != GONE
    }

    #[inline]
    fn location(&self) -> Location {
        Location { file: self.file, row: self.row }
    }
}

/// Shards of an index that starts empty; an index built for a known number
/// of keys (a saved index loaded at restart) picks its own ([`shard_count`]).
const DEFAULT_SHARDS: usize = 256;
const MAX_SHARDS: usize = 512;

/// How full a bulk-built shard's table is meant to be.
const TARGET_LOAD: f64 = 0.8;

/// The shard count for `n` keys: shards' tables hold a power of two of slots
/// at most 7/8 full, so 256 shards of n/256 keys may leave them half empty
/// (1M keys: 3,945 keys in 8,192 slots, 5 bytes each: 10 B/key). Choosing
/// between 256 and 512 shards so that a shard holds about 80% of its
/// table's slots keeps that slack near a fifth at any size (1M keys: 309
/// shards, 4,096 slots each). Shard sizes vary by about the square root of
/// their mean, far below the 7/8 limit (docs/performance.md, "Memory").
fn shard_count(n: usize) -> usize {
    let mut slots = 16.0_f64;
    while n as f64 / (TARGET_LOAD * slots) > MAX_SHARDS as f64 {
        slots *= 2.0;
    }
    ((n as f64 / (TARGET_LOAD * slots)).ceil() as usize).clamp(DEFAULT_SHARDS, MAX_SHARDS)
}

/// The index's hash of a key (FxHash: deterministic, a few ns for short keys).
#[inline]
fn hash_of(key: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one(key)
}

/// The shard of a hash among `shards`: bits 24..48 scaled to the count
/// (multiply and shift), apart from the low bits a shard's table probes
/// with and the top seven it keeps as tags.
#[inline]
fn shard_of(h: u64, shards: usize) -> usize {
    ((((h >> 24) & 0xFF_FFFF) * shards as u64) >> 24) as usize
}

/// A key's place in the index: its shard and position in the shard's entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pos {
    shard: u32,
    at: u32,
}

/// One shard: dense entries plus a table of their positions. The table
/// stores a `u32` per slot and no hash (hashes are recomputed when it grows,
/// cheap for FxHash), so its slack costs 5 bytes per slot; entries grow by an
/// eighth at a time instead of doubling, so an index that just grew holds
/// at most an eighth of empty entries, not half.
#[derive(Default)]
struct Shard {
    entries: Vec<(IndexKey, Entry)>,
    table: hashbrown::HashTable<u32>,
}

impl Shard {
    #[inline]
    fn find(&self, h: u64, key: &[u8]) -> Option<u32> {
        let entries = &self.entries;
        self.table.find(h, |&i| entries[i as usize].0.as_slice() == key).copied()
    }

    /// Appends a key known to be absent.
    fn push(&mut self, h: u64, key: IndexKey, entry: Entry) -> u32 {
        let at = self.entries.len();
        if at == self.entries.capacity() {
            self.entries.reserve_exact(at / 8 + 16);
        }
        self.entries.push((key, entry));
        let entries = &self.entries;
        self.table.insert_unique(h, at as u32, |&i| hash_of(entries[i as usize].0.as_slice()));
        at as u32
    }

    /// Indexes every entry already in `entries` (keys must be distinct);
    /// `false` when a key appears twice.
    fn index_entries(&mut self) -> bool {
        let entries = &self.entries;
        let mut table = hashbrown::HashTable::with_capacity(entries.len());
        for (i, (k, _)) in entries.iter().enumerate() {
            let (k, h) = (k.as_slice(), hash_of(k.as_slice()));
            if table.find(h, |&j: &u32| entries[j as usize].0.as_slice() == k).is_some() {
                return false;
            }
            table.insert_unique(h, i as u32, |&j| hash_of(entries[j as usize].0.as_slice()));
        }
        self.table = table;
        true
    }

    /// Removes a key; the last entry takes its position.
    fn swap_remove(&mut self, h: u64, key: &[u8]) {
        let entries = &self.entries;
        let Ok(found) = self.table.find_entry(h, |&i| entries[i as usize].0.as_slice() == key)
        else {
            return;
        };
        let at = found.remove().0 as usize;
        let last = self.entries.len() - 1;
        if at != last {
            let lh = hash_of(self.entries[last].0.as_slice());
            let slot = self.table.find_mut(lh, |&i| i as usize == last);
            *slot.expect("every entry is in the table") = at as u32;
        }
        self.entries.swap_remove(at);
    }
}

/// One change a commit makes to a key's entry.
enum Change<'a> {
    /// Its current row is now here.
    Place(Location),
    /// Its latest version's summary.
    Summary(&'a Summary),
    /// The key is gone.
    Remove,
}

impl Shard {
    /// Applies one change (see [`KeyIndex::apply_commit`]); a key not yet
    /// in the shard is added by the first change that places or sums it.
    fn apply(&mut self, h: u64, key: &[u8], change: Change<'_>, deleted_has_no_row: bool) {
        let entry = |shard: &mut Shard, fresh: fn() -> Entry| -> u32 {
            match shard.find(h, key) {
                Some(at) => at,
                None => shard.push(h, IndexKey::new(key), fresh()),
            }
        };
        match change {
            Change::Place(loc) => {
                // The summary follows (a placeholder until it does).
                let at = entry(self, || Entry::new(NO_FILE, 0, placeholder()));
                let e = &mut self.entries[at as usize].1;
                (e.file, e.row) = (loc.file, loc.row);
            }
            Change::Summary(s) => {
                let at = entry(self, || Entry::new(NO_FILE, 0, placeholder()));
                let e = &mut self.entries[at as usize].1;
                if s.deleted && deleted_has_no_row {
                    e.file = NO_FILE;
                }
                e.summary = PackedSummary::new(s.clone());
            }
            Change::Remove => self.swap_remove(h, key),
        }
    }
}

/// The summary of an entry added by its placement, before its own summary
/// is applied.
fn placeholder() -> Summary {
    Summary {
        seq: crate::merge::Seq::Int(0),
        deleted: false,
        valid_from: i64::MIN,
        row_hash: 0,
        tracked_hash: 0,
    }
}

/// Business key -> entry, split by key hash into shards ([`shard_count`]): a shard's
/// table is small enough to stay in cache while it is built, and shards are
/// built on all cores, so loading a saved index of millions of keys costs
/// tens of nanoseconds per key (docs/performance.md, "Restart").
pub(super) struct KeyIndex {
    shards: Box<[Shard]>,
}

impl Default for KeyIndex {
    fn default() -> KeyIndex {
        KeyIndex { shards: (0..DEFAULT_SHARDS).map(|_| Shard::default()).collect() }
    }
}

/// Builds a [`KeyIndex`] from entries with distinct keys: they are sorted
/// into shards as they come, then every shard's table is built on all cores.
pub(super) struct Bulk {
    shards: Vec<Vec<(IndexKey, Entry)>>,
}

impl Bulk {
    /// For about `n` keys.
    pub(super) fn with_capacity(n: usize) -> Bulk {
        // Hashes spread keys evenly (a shard of 40,000 keys varies by about
        // 200): room for 1/64 more than the mean, and a shard that still
        // fills up grows by an eighth.
        let shards = shard_count(n);
        let each = n / shards + n / shards / 64 + 64;
        Bulk { shards: (0..shards).map(|_| Vec::with_capacity(each)).collect() }
    }

    #[inline]
    pub(super) fn push(&mut self, key: &[u8], entry: Entry) {
        let n = self.shards.len();
        let shard = &mut self.shards[shard_of(hash_of(key), n)];
        if shard.len() == shard.capacity() {
            shard.reserve_exact(shard.len() / 8 + 16);
        }
        shard.push((IndexKey::new(key), entry));
    }

    /// The index; `None` when a key appears twice.
    pub(super) fn build(self) -> Option<KeyIndex> {
        use rayon::prelude::*;
        let mut shards: Vec<Shard> = self
            .shards
            .into_iter()
            .map(|entries| Shard { entries, table: Default::default() })
            .collect();
        let distinct = shards.par_iter_mut().map(Shard::index_entries).all(|ok| ok);
        distinct.then(|| KeyIndex { shards: shards.into_boxed_slice() })
    }
}

impl KeyIndex {
    pub(super) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.entries.len()).sum()
    }

    /// Every key with its entry (saved by `index_snapshot.rs`).
    pub(super) fn iter(&self) -> impl Iterator<Item = (&[u8], &Entry)> {
        self.shards.iter().flat_map(|s| s.entries.iter().map(|(k, e)| (k.as_slice(), e)))
    }

    #[inline]
    fn find(&self, key: &[u8]) -> Option<Pos> {
        let h = hash_of(key);
        let shard = shard_of(h, self.shards.len());
        self.shards[shard].find(h, key).map(|at| Pos { shard: shard as u32, at })
    }

    #[inline]
    fn at(&self, p: Pos) -> &Entry {
        &self.shards[p.shard as usize].entries[p.at as usize].1
    }

    #[inline]
    fn at_mut(&mut self, p: Pos) -> &mut Entry {
        &mut self.shards[p.shard as usize].entries[p.at as usize].1
    }

    #[inline]
    pub(super) fn get(&self, key: &[u8]) -> Option<&Entry> {
        self.find(key).map(|p| self.at(p))
    }

    /// Inserts or replaces a key's entry.
    pub(super) fn insert(&mut self, key: &[u8], entry: Entry) {
        match self.find(key) {
            Some(p) => *self.at_mut(p) = entry,
            None => {
                self.push(key, entry);
            }
        }
    }

    /// Appends a key known to be absent.
    fn push(&mut self, key: &[u8], entry: Entry) -> Pos {
        let h = hash_of(key);
        let shard = shard_of(h, self.shards.len());
        let at = self.shards[shard].push(h, IndexKey::new(key), entry);
        Pos { shard: shard as u32, at }
    }

    /// Removes a key (absent: nothing happens).
    pub(super) fn remove(&mut self, key: &[u8]) {
        let h = hash_of(key);
        let shard = shard_of(h, self.shards.len());
        self.shards[shard].swap_remove(h, key);
    }

    /// Keeps the entries `keep` accepts (changed shards re-index on all cores).
    pub(super) fn retain(&mut self, keep: impl Fn(&Entry) -> bool + Sync) {
        use rayon::prelude::*;
        self.shards.par_iter_mut().for_each(|s| {
            let before = s.entries.len();
            s.entries.retain(|(_, e)| keep(e));
            if s.entries.len() != before {
                s.index_entries();
            }
        });
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
        self.in_shard_order(items, key, |p| p.map(|p| self.at(p).location()))
    }

    /// Each key's summary, looked up as [`KeyIndex::locate`] does.
    pub(super) fn summaries<T: Sync>(
        &self,
        items: &[T],
        key: impl Fn(&T) -> &[u8] + Sync,
    ) -> Vec<Option<Summary>> {
        self.in_shard_order(items, key, |p| p.map(|p| self.at(p).summary.unpack()))
    }

    /// `f` of every item's key lookup, in item order, on all cores. The
    /// lookups run grouped by shard: a batch's keys come in key order,
    /// which is random over the index, and each lookup into an index of
    /// millions of keys missed the cache and the TLB twice (table slot,
    /// entry; 4 KiB pages, see `main.rs`). Grouped, a shard's table and
    /// entries stay cached for its few hundred lookups (1M keys: ~1 µs a
    /// lookup in key order on this machine).
    fn in_shard_order<T: Sync, R: Send>(
        &self,
        items: &[T],
        key: impl Fn(&T) -> &[u8] + Sync,
        f: impl Fn(Option<Pos>) -> R + Sync,
    ) -> Vec<R> {
        use rayon::prelude::*;
        let n = self.shards.len();
        let mut order: Vec<(u32, u32, u64)> = items
            .par_iter()
            .with_min_len(4096)
            .enumerate()
            .map(|(i, t)| {
                let h = hash_of(key(t));
                (shard_of(h, n) as u32, i as u32, h)
            })
            .collect();
        order.par_sort_unstable_by_key(|&(shard, _, _)| shard);
        let found: Vec<(u32, R)> = order
            .par_iter()
            .with_min_len(4096)
            .map(|&(shard, i, h)| {
                let at = self.shards[shard as usize].find(h, key(&items[i as usize]));
                (i, f(at.map(|at| Pos { shard, at })))
            })
            .collect();
        let mut out: Vec<Option<R>> = std::iter::repeat_with(|| None).take(items.len()).collect();
        for (i, r) in found {
            out[i as usize] = Some(r);
        }
        out.into_iter().map(|r| r.expect("every item looked up once")).collect()
    }

    /// Stored keys with a live current row (snapshot merge candidates).
    pub(super) fn live_keys(&self) -> impl Iterator<Item = &[u8]> {
        self.iter().filter(|(_, e)| e.file != NO_FILE && !e.summary.deleted()).map(|(k, _)| k)
    }

    /// After a durable commit: the keys whose current row the commit placed
    /// (`rows`: a new file's keys, or the moved rows of a file rewritten in
    /// place) move there, the merge's summaries replace the stored ones (`None`:
    /// the key is gone). With `deleted_has_no_row` (scd2), a key whose latest
    /// version is deleted keeps no current row.
    ///
    /// Changes are grouped by shard and each shard applies its own on one
    /// core, in the commit's order (placements, then summaries, then
    /// removals). Applied one key after another, a commit of 100,000 keys
    /// into an index of a million missed the cache twice per key and took
    /// 27 ms, most of a merge-on-read commit; grouped, a shard's table and
    /// entries stay cached while it applies its few hundred changes.
    pub(super) fn apply_commit(
        &mut self,
        rows: Vec<(&[u8], Location)>,
        summaries: &[(Key, Option<Summary>)],
        deleted_has_no_row: bool,
    ) {
        use rayon::prelude::*;
        let n = self.shards.len();
        let expected = (rows.len() + summaries.len()) / n + 16;
        let mut by_shard: Vec<Vec<(u64, &[u8], Change<'_>)>> =
            (0..n).map(|_| Vec::with_capacity(expected + expected / 4)).collect();
        fn add<'a>(by_shard: &mut [Vec<(u64, &'a [u8], Change<'a>)>], k: &'a [u8], c: Change<'a>) {
            let h = hash_of(k);
            by_shard[shard_of(h, by_shard.len())].push((h, k, c));
        }
        for (k, loc) in rows {
            add(&mut by_shard, k, Change::Place(loc));
        }
        for (k, s) in summaries {
            if let Some(s) = s {
                add(&mut by_shard, k, Change::Summary(s));
            }
        }
        for (k, s) in summaries {
            if s.is_none() {
                add(&mut by_shard, k, Change::Remove);
            }
        }
        self.shards.par_iter_mut().zip(by_shard).for_each(|(shard, changes)| {
            for (h, k, change) in changes {
                shard.apply(h, k, change, deleted_has_no_row);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::Seq;

    fn entry(file: u32, row: u32) -> Entry {
        let summary = Summary {
            seq: Seq::Int(1),
            deleted: false,
            valid_from: 0,
            row_hash: 0,
            tracked_hash: 0,
        };
        Entry::new(file, row, summary)
    }

    fn key(i: u32) -> Vec<u8> {
        // Short keys inline, every seventh one long enough to live on the heap.
        let mut k = i.to_le_bytes().to_vec();
        if i.is_multiple_of(7) {
            k.extend_from_slice(&[b'x'; 20]);
        }
        k
    }

    /// Every key maps to its entry, and the index holds nothing else.
    fn check(index: &KeyIndex, want: &std::collections::HashMap<Vec<u8>, (u32, u32)>) {
        assert_eq!(index.len(), want.len());
        for (k, &(file, row)) in want {
            let e = index.get(k).unwrap_or_else(|| panic!("{k:?} missing"));
            assert_eq!((e.file, e.row), (file, row));
        }
        for (k, e) in index.iter() {
            assert_eq!(want.get(k), Some(&(e.file, e.row)));
        }
    }

    #[test]
    fn inserts_replacements_and_removals_keep_every_shard_true() {
        let mut index = KeyIndex::default();
        let mut want = std::collections::HashMap::new();
        for i in 0..20_000u32 {
            index.insert(&key(i), entry(i, i));
            want.insert(key(i), (i, i));
        }
        for i in (0..20_000u32).step_by(3) {
            index.insert(&key(i), entry(7, i));
            want.insert(key(i), (7, i));
        }
        // Removals move each shard's last entry into the gap.
        for i in (0..20_000u32).step_by(2) {
            index.remove(&key(i));
            want.remove(&key(i));
        }
        index.remove(b"never there");
        check(&index, &want);
        index.retain(|e| e.file != 7);
        want.retain(|_, (file, _)| *file != 7);
        check(&index, &want);
    }

    #[test]
    fn a_bulk_built_index_sizes_its_shards_to_fill_their_tables() {
        for n in [0usize, 10, 1_000_000, 1_009_837, 1_500_000, 10_000_000, 100_000_000] {
            let s = shard_count(n);
            assert!((DEFAULT_SHARDS..=MAX_SHARDS).contains(&s), "{n}: {s}");
            if n >= 1_000_000 {
                // Mean keys per shard over the table's slots (next power of two of 8/7 of it).
                let each = n / s;
                let slots = (each * 8 / 7 + 1).next_power_of_two();
                let load = each as f64 / slots as f64;
                assert!((0.7..=0.8).contains(&load), "{n} keys, {s} shards: load {load:.2}");
            }
        }
        // Every shard index is in range, and keys spread over all shards.
        let mut seen = vec![0usize; 309];
        for i in 0..200_000u32 {
            seen[shard_of(hash_of(&key(i)), 309)] += 1;
        }
        assert!(seen.iter().all(|&c| c > 400 && c < 900), "{seen:?}");
        let mut bulk = Bulk::with_capacity(50_000);
        for i in 0..50_000u32 {
            bulk.push(&key(i), entry(1, i));
        }
        let index = bulk.build().expect("distinct keys");
        assert_eq!(index.shards.len(), shard_count(50_000));
        for i in 0..50_000u32 {
            assert_eq!(index.get(&key(i)).map(|e| e.row), Some(i));
        }
    }

    #[test]
    fn lookups_grouped_by_shard_answer_in_item_order() {
        let mut index = KeyIndex::default();
        for i in 0..30_000u32 {
            index.insert(&key(i), entry(i % 97, i));
        }
        // Present and absent keys, repeated, in an order unrelated to shards.
        let items: Vec<Vec<u8>> = (0..20_000u32).map(|i| key((i * 7919) % 40_000)).collect();
        let located = index.locate(&items, |k| k);
        let summaries = index.summaries(&items, |k| k);
        for ((k, at), s) in items.iter().zip(&located).zip(&summaries) {
            let want = index.get(k).map(|e| Location { file: e.file, row: e.row });
            assert_eq!(*at, want, "{k:?}");
            assert_eq!(s.is_some(), want.is_some());
        }
        assert!(located.iter().any(Option::is_none) && located.iter().any(Option::is_some));
        assert!(index.locate(&Vec::<Vec<u8>>::new(), |k| k).is_empty());
    }

    #[test]
    fn a_bulk_build_equals_inserts_and_refuses_a_key_twice() {
        let mut bulk = Bulk::with_capacity(10);
        let mut want = std::collections::HashMap::new();
        for i in 0..5_000u32 {
            bulk.push(&key(i), entry(1, i));
            want.insert(key(i), (1, i));
        }
        let mut index = bulk.build().expect("distinct keys");
        check(&index, &want);
        index.insert(&key(5_000), entry(2, 0));
        want.insert(key(5_000), (2, 0));
        check(&index, &want);

        let mut twice = Bulk::with_capacity(2);
        twice.push(b"a", entry(1, 0));
        twice.push(b"a", entry(1, 1));
        assert!(twice.build().is_none());
    }

    #[test]
    fn a_commit_moves_rows_replaces_summaries_and_drops_removed_keys() {
        let mut index = KeyIndex::default();
        for i in 0..100u32 {
            index.insert(&key(i), entry(1, i));
        }
        let (k1, k2, k3, new) = (key(1), key(2), key(3), b"new".to_vec());
        let deleted = Summary {
            seq: Seq::Int(9),
            deleted: true,
            valid_from: 0,
            row_hash: 0,
            tracked_hash: 0,
        };
        let live = Summary { deleted: false, ..deleted.clone() };
        let rows =
            vec![(&k1[..], Location { file: 5, row: 0 }), (&new[..], Location { file: 5, row: 1 })];
        let summaries: Vec<(Key, Option<Summary>)> = vec![
            (k1.clone().into(), Some(live.clone())),
            (new.clone().into(), Some(live.clone())),
            (k2.clone().into(), Some(deleted.clone())),
            (k3.clone().into(), None),
        ];
        index.apply_commit(rows, &summaries, true);
        assert_eq!(index.len(), 100);
        let at = |k: &[u8]| index.get(k).map(|e| (e.file, e.row, e.summary.seq()));
        assert_eq!(at(&k1), Some((5, 0, Seq::Int(9))));
        assert_eq!(at(&new), Some((5, 1, Seq::Int(9))));
        assert_eq!(at(&k2), Some((NO_FILE, 2, Seq::Int(9))));
        assert_eq!(at(&k3), None);
        assert_eq!(at(&key(4)), Some((1, 4, Seq::Int(1))));
    }
}
