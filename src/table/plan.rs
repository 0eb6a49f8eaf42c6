//! TODO

/// Smallest file a large insert is split into: small tables still get several
/// files, so touching a few keys never rewrites all of them.
pub(super) const MIN_FILE_ROWS: usize = 16;

/// Rows of stored files a copy-on-write run rewrites at a time (see `stage`).
pub(super) const WAVE_ROWS: usize = 1_000_000;

/// Files under this many rows (or a quarter of `file_rows`) count as small for compaction.
pub(super) const COMPACT_BELOW_ROWS: usize = 1024;
