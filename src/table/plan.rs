//! Layout decisions, kept pure (no I/O) so each can be tested on its own.
//!
//! A CDC run touches a small, usually *recent* slice of a table.
//! Copy-on-write Delta tables pay for every file a run rewrites, so the
//! layout keeps each run's rewrite proportional to the keys it touches, not
//! to the table:
//!
//! * **Current rows** (scd1: the whole table; scd2: the `_is_current=true`
//!   partition) live in files that each hold a run of keys. A key stays in
//!   its file for its whole life; the key index remembers which file that
//!   is, so a run rewrites exactly the files holding touched keys.
//! * **New keys** of a run are sorted by key and spread over up to `spread`
//!   files of at most `file_rows` rows (at least [`MIN_FILE_ROWS`] per file).
//!   Keys inserted together (for CRM data: created together) stay together,
//!   which is the locality real update streams have (most updates hit recent
//!   rows). Small inserts top up the newest current file while it is small
//!   ([`is_small_for_top_up`]), so a streaming table does not drown in tiny
//!   files.
//! * **Merge-on-read** masks replaced rows with a deletion vector instead of
//!   rewriting their file, unless the vector would mask half the file or
//!   more ([`plan_current`]).
//! * **Closed scd2 history** is append-only: closing a version moves it out
//!   of the current files, late versions are appended. Only business-time
//!   backdating, which must shorten a stored neighbour, rewrites a history
//!   file.
//! * **Rewrites** go in waves of about [`WAVE_ROWS`] stored rows, each
//!   written before the next is read, so memory follows the wave, not the
//!   table ([`waves`]).

use std::collections::BTreeSet;
use std::ops::Range;

use super::files::FileMeta;
use super::index::Location;
use super::parquet::{Codec, Cuts};
use crate::config::Layout;

/// Smallest file a large insert is split into: small tables still get several
/// files, so touching a few keys never rewrites all of them.
pub(super) const MIN_FILE_ROWS: usize = 16;
/// Rows of stored files a copy-on-write run rewrites at a time.
pub(super) const WAVE_ROWS: usize = 1_000_000;
/// Files under this many live rows count as small for compaction, however
/// large `file_rows` is.
const COMPACT_BELOW_ROWS: usize = 1024;

/// The small-file rule, for topping up: a current file under a quarter of
/// `file_rows` (physical rows) takes new keys of the next run.
pub(super) fn is_small_for_top_up(rows: usize, layout: &Layout) -> bool {
    rows < layout.file_rows / 4
}

/// The small-file rule, for compaction: under a quarter of `file_rows` live
/// rows and under [`COMPACT_BELOW_ROWS`]. Stricter than topping up: small
/// means a streaming run's leftovers, not the deliberately spread files of a
/// bulk load (those keep updates to recent keys cheap).
pub(super) fn is_small_for_compaction(live_rows: usize, layout: &Layout) -> bool {
    live_rows < (layout.file_rows / 4).min(COMPACT_BELOW_ROWS)
}

/// The current file new keys top up, if any: the current file with the
/// highest id (the newest file of new keys; a rewrite keeps its file's id),
/// while it is small (copy-on-write only; merge-on-read appends new files).
pub(super) fn top_up_target(files: &[Option<FileMeta>], layout: &Layout) -> Option<u32> {
    if layout.deletion_vectors {
        return None;
    }
    let (id, newest) = files
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, f)| f.as_ref().filter(|f| f.current).map(|f| (i, f)))?;
    is_small_for_top_up(newest.rows, layout).then_some(id as u32)
}

/// A file whose deletion vector grows to `dv` (its old rows plus this run's).
pub(super) struct Masked {
    pub(super) file: u32,
    pub(super) dv: roaring::RoaringTreemap,
}

/// What a run does to the current files it touches.
#[derive(Default)]
pub(super) struct CurrentPlan {
    /// Files rewritten (copy-on-write), in file order.
    pub(super) rewrite: BTreeSet<u32>,
    /// Files masked instead (merge-on-read).
    pub(super) masked: Vec<Masked>,
}

/// Decides, for the stored rows a run replaces or deletes (`gone`) and
/// whether it inserts new keys, which current files are rewritten and which
/// get a deletion vector. With merge-on-read, a file whose vector would mask
/// half of it or more is rewritten instead (dropping the masked rows).
pub(super) fn plan_current(
    files: &[Option<FileMeta>],
    gone: &[Location],
    inserts: bool,
    layout: &Layout,
) -> CurrentPlan {
    // A run's gone rows lie in a few dozen files: grouped by hash, then the
    // files put in order (a tree step per row was a serial 3 ms of a narrow
    // merge-on-read run at 1M keys).
    let mut by_file: super::FxMap<u32, Vec<u64>> = Default::default();
    for l in gone {
        by_file.entry(l.file).or_default().push(l.row as u64);
    }
    let mut by_file: Vec<(u32, Vec<u64>)> = by_file.into_iter().collect();
    by_file.sort_unstable_by_key(|(id, _)| *id);
    let mut rewrite: BTreeSet<u32> = by_file.iter().map(|(id, _)| *id).collect();
    if inserts {
        rewrite.extend(top_up_target(files, layout));
    }
    let mut masked = vec![];
    if layout.deletion_vectors {
        for (id, rows) in by_file {
            let f = files[id as usize].as_ref().expect("live file");
            let mut dv = f.dv.as_ref().map(|d| (**d).clone()).unwrap_or_default();
            dv.extend(rows);
            if dv.len() * 2 < f.rows as u64 {
                rewrite.remove(&id);
                masked.push(Masked { file: id, dv });
            }
        }
    }
    CurrentPlan { rewrite, masked }
}

/// The codec of a new data file: Snappy for the files later runs rewrite
/// (copy-on-write current rows, where compressing and decompressing were a
/// third of a run with ZSTD), ZSTD level 1 for the files written once
/// (history; merge-on-read current files, which later runs mask instead).
pub(super) fn codec(current: bool, layout: &Layout) -> Codec {
    if current && !layout.deletion_vectors {
        Codec::Snappy
    } else {
        Codec::Zstd
    }
}

/// Rows per parquet row group of a history file: a late row looks a key up
/// in history through each row group's bloom filter, and decodes the key
/// column only of the groups that may hold it (a twelfth of a 100,000-row
/// file) instead of the whole file. Current files stay one row group (their
/// rows are found through the key index, never by key).
pub(super) const HISTORY_GROUP_ROWS: usize = 8192;

/// Rows per data page of a history file: the versions found by key are
/// then decoded from the pages holding them (located by the offset index)
/// instead of from whole column chunks of 8,192 rows. Smaller pages cost
/// every run's history encode more (1,024 rows: +30 ms a run on the wide
/// bench shape, a compression frame per page and column) for lookups that
/// only keys without a brief make (docs/performance.md, session 21).
pub(super) const HISTORY_PAGE_ROWS: usize = 4096;

/// How a new data file is cut (current files: parquet's defaults).
pub(super) fn cuts(current: bool) -> Cuts {
    match current {
        true => Cuts::default(),
        false => Cuts { group_rows: Some(HISTORY_GROUP_ROWS), page_rows: Some(HISTORY_PAGE_ROWS) },
    }
}

/// Groups files (in order) into waves of about [`WAVE_ROWS`] rows; a file
/// larger than that is a wave of its own.
pub(super) fn waves(files: impl IntoIterator<Item = (u32, usize)>) -> Vec<Vec<u32>> {
    let mut waves: Vec<Vec<u32>> = vec![];
    let mut wave_rows = usize::MAX;
    for (id, rows) in files {
        if wave_rows.saturating_add(rows) > WAVE_ROWS {
            waves.push(vec![]);
            wave_rows = 0;
        }
        wave_rows += rows;
        waves.last_mut().expect("a wave").push(id);
    }
    waves
}

/// Rows per file for `n` new keys: copy-on-write spreads them over up to
/// `spread` files of [`MIN_FILE_ROWS`]..=`file_rows` rows; merge-on-read
/// writes even files of at most `file_rows` (see [`even_chunk`]).
pub(super) fn new_key_file_rows(n: usize, layout: &Layout) -> usize {
    if layout.deletion_vectors {
        even_chunk(n, layout.file_rows)
    } else {
        n.div_ceil(layout.spread.max(1))
            .clamp(MIN_FILE_ROWS.min(layout.file_rows), layout.file_rows)
    }
}

/// Rows per file to split `n` rows into as few files of at most `max` rows
/// as possible, all of about the same size (not one full and one remainder:
/// they are encoded in parallel).
pub(super) fn even_chunk(n: usize, max: usize) -> usize {
    let max = max.max(1);
    if n == 0 {
        return max;
    }
    n.div_ceil(n.div_ceil(max))
}

/// Consecutive row ranges of at most `len` rows covering `0..total`.
pub(super) fn slices(total: usize, len: usize) -> impl Iterator<Item = Range<usize>> {
    let len = len.max(1);
    (0..total).step_by(len).map(move |start| start..(start + len).min(total))
}

/// Cells (rows times columns) a new file is built with at most, counted at
/// its widest row. A file is built as Arrow columns, each as long as the
/// file: one row with thousands of fields among tens of thousands of
/// narrow ones (an `additive` table that one message widened) made every
/// column a full buffer, gigabytes for one file. 32M cells leaves a file of
/// 65,536 rows up to 512 columns.
pub(super) const FILE_CELLS: usize = 32 << 20;

/// Rows per file for rows all `width` columns wide: `file_rows`, or fewer
/// where that would go beyond [`FILE_CELLS`].
pub(super) fn rows_within_cells(width: usize, file_rows: usize) -> usize {
    file_rows.min(FILE_CELLS / width.max(1)).max(1)
}

/// Cuts rows of these widths (in order: key order is kept) into files of at
/// most `max_rows` rows and at most `cells` cells at each file's widest
/// row: a narrow run of rows stays one file; a wide row starts a file of
/// its own when the one it would join would grow beyond `cells`.
pub(super) fn cut_by_width(widths: &[usize], max_rows: usize, cells: usize) -> Vec<Range<usize>> {
    let max_rows = max_rows.max(1);
    let (mut out, mut start, mut widest) = (vec![], 0usize, 0usize);
    for (i, &w) in widths.iter().enumerate() {
        let wider = widest.max(w);
        let rows = i - start + 1;
        if i > start && (rows > max_rows || rows.saturating_mul(wider) > cells) {
            out.push(start..i);
            (start, widest) = (i, w);
        } else {
            widest = wider;
        }
    }
    if start < widths.len() {
        out.push(start..widths.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_wide_row_gets_a_file_of_its_own_size_and_narrow_rows_stay_together() {
        // Narrow rows: one file, up to max_rows.
        assert_eq!(cut_by_width(&[3; 10], 10, 100), vec![0..10]);
        assert_eq!(cut_by_width(&[3; 10], 4, 100), vec![0..4, 4..8, 8..10]);
        // A row 40 wide among rows 3 wide, 100 cells a file: the file it
        // would join has 6 rows (240 cells), so it starts one, which takes
        // rows while 40 x rows fits (2 rows), then narrow rows go on.
        let mut w = vec![3; 12];
        w[6] = 40;
        assert_eq!(cut_by_width(&w, 100, 100), vec![0..6, 6..8, 8..12]);
        // A row wider than the whole budget is still written, alone.
        assert_eq!(cut_by_width(&[1, 500, 1], 100, 100), vec![0..1, 1..2, 2..3]);
        assert_eq!(cut_by_width(&[], 10, 100), Vec::<Range<usize>>::new());
        // The default leaves a file of 65,536 rows of 512 columns whole.
        assert_eq!(cut_by_width(&vec![512; 65_536], 65_536, FILE_CELLS).len(), 1);
        assert_eq!(cut_by_width(&vec![513; 65_536], 65_536, FILE_CELLS).len(), 2);
        assert_eq!(rows_within_cells(512, 65_536), 65_536);
        assert_eq!(rows_within_cells(4_006, 65_536), FILE_CELLS / 4_006);
        assert_eq!(rows_within_cells(usize::MAX, 65_536), 1);
    }

    fn layout(file_rows: usize, deletion_vectors: bool) -> Layout {
        Layout { file_rows, spread: 4, deletion_vectors, ..Layout::default() }
    }

    fn file(rows: usize, current: bool, masked: &[u64]) -> Option<FileMeta> {
        let dv = (!masked.is_empty()).then(|| Arc::new(masked.iter().copied().collect()));
        let path = format!("f{rows}");
        Some(FileMeta { path, rows, size: 1, current, dv, dv_desc: None, stats: None })
    }

    fn at(file: u32, row: u32) -> Location {
        Location { file, row }
    }

    #[test]
    fn layout_new_keys_top_up_only_the_newest_small_current_file() {
        let l = layout(1000, false);
        let files = vec![file(100, true, &[]), file(100, true, &[]), file(10, false, &[])];
        assert_eq!(top_up_target(&files, &l), Some(1), "history files are never topped up");
        let files = vec![file(100, true, &[]), file(250, true, &[])];
        assert_eq!(top_up_target(&files, &l), None, "a quarter of file_rows is not small");
        assert_eq!(top_up_target(&files[..1], &layout(1000, true)), None, "merge-on-read appends");
        let files = vec![file(100, true, &[]), None];
        assert_eq!(top_up_target(&files, &l), Some(0), "removed files are skipped");
    }

    #[test]
    fn layout_small_files_for_compaction_are_streaming_leftovers() {
        let l = layout(1_000_000, false);
        assert!(is_small_for_compaction(1023, &l));
        assert!(!is_small_for_compaction(1024, &l), "bulk-load files of 1024+ rows stay");
        assert!(is_small_for_top_up(200_000, &l));
        let small = layout(100, false);
        assert!(is_small_for_compaction(24, &small) && !is_small_for_compaction(25, &small));
    }

    #[test]
    fn layout_copy_on_write_rewrites_exactly_the_touched_files() {
        let files = vec![file(100, true, &[]), file(100, true, &[]), file(100, true, &[])];
        let p = plan_current(&files, &[at(0, 3), at(2, 7), at(0, 9)], false, &layout(1000, false));
        assert_eq!(p.rewrite.into_iter().collect::<Vec<_>>(), vec![0, 2]);
        assert!(p.masked.is_empty());
        let p = plan_current(&files, &[at(0, 3)], true, &layout(1000, false));
        assert_eq!(p.rewrite.into_iter().collect::<Vec<_>>(), vec![0, 2], "plus the top-up");
    }

    #[test]
    fn layout_merge_on_read_masks_until_half_a_file_is_masked() {
        let files = vec![file(10, true, &[0, 1, 2]), file(10, true, &[])];
        let gone = [at(0, 5), at(1, 4), at(1, 4)];
        let p = plan_current(&files, &gone, true, &layout(1000, true));
        assert_eq!(p.rewrite.into_iter().collect::<Vec<_>>(), Vec::<u32>::new());
        let dvs: Vec<(u32, Vec<u64>)> =
            p.masked.iter().map(|m| (m.file, m.dv.iter().collect())).collect();
        assert_eq!(dvs, vec![(0, vec![0, 1, 2, 5]), (1, vec![4])]);
        // A fifth masked row of ten is half the file: rewritten instead.
        let p = plan_current(&files, &[at(0, 5), at(0, 6)], false, &layout(1000, true));
        assert_eq!(p.rewrite.into_iter().collect::<Vec<_>>(), vec![0]);
        assert!(p.masked.is_empty());
    }

    #[test]
    fn layout_rewrites_go_in_waves_of_about_a_million_rows() {
        let w = waves([(0, 600_000), (1, 300_000), (2, 200_000), (3, 2_000_000), (4, 1)]);
        assert_eq!(w, vec![vec![0, 1], vec![2], vec![3], vec![4]]);
        assert!(waves([]).is_empty());
    }

    #[test]
    fn layout_new_keys_are_spread_over_files_of_bounded_size() {
        let cow = layout(1000, false);
        assert_eq!(new_key_file_rows(100, &cow), 25, "spread over 4 files");
        assert_eq!(new_key_file_rows(10, &cow), MIN_FILE_ROWS, "no file under 16 rows");
        assert_eq!(new_key_file_rows(100_000, &cow), 1000, "no file over file_rows");
        assert_eq!(new_key_file_rows(2500, &layout(1000, true)), 834, "even files");
        assert_eq!(even_chunk(2000, 1000), 1000);
        assert_eq!(even_chunk(7, 0), 1);
        let s: Vec<Range<usize>> = slices(7, 3).collect();
        assert_eq!(s, vec![0..3, 3..6, 6..7]);
        assert_eq!(slices(0, 3).count(), 0);
    }

    #[test]
    fn only_files_later_runs_rewrite_are_written_with_the_fast_codec() {
        let cow = layout(100, false);
        let dv = layout(100, true);
        assert_eq!(codec(true, &cow), Codec::Snappy);
        assert_eq!(codec(false, &cow), Codec::Zstd, "history is written once");
        assert_eq!(codec(true, &dv), Codec::Zstd, "merge-on-read masks instead of rewriting");
        assert_eq!(codec(false, &dv), Codec::Zstd);
    }
}
