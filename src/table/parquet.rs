//! Parquet writing and the business-key bloom filters every file carries.
//!
//! One writer configuration for every file this crate writes (data tables
//! and the dead-letter table): no dictionaries, split-block bloom filters on
//! the business-key columns, which any parquet reader can use and which let
//! late scd2 rows skip history files that cannot hold their keys
//! ([`KeyFilter`]), and a codec chosen by how often the file is rewritten
//! ([`Codec`]).

use deltalake::arrow::array::RecordBatch;
use deltalake::arrow::datatypes::Schema;
use deltalake::parquet::arrow::ArrowWriter;
use deltalake::parquet::basic::{Compression, ZstdLevel};
use deltalake::parquet::file::properties::{
    EnabledStatistics, WriterProperties, DEFAULT_MAX_ROW_GROUP_ROW_COUNT,
};

use super::file_stats::{file_stats, StatsColumns};
use crate::merge::Spec;
use crate::par::par_map;
use crate::value::Value;

/// Which business keys a file may hold: the parquet bloom filters (split
/// block, xxhash; readable by any parquet reader) of its key columns, per row
/// group. Late scd2 rows need a key's closed versions; without these, every
/// batch with a late row decoded the key columns of the whole history, a
/// cost that grows with the table's age instead of the batch. A few bytes
/// per history row in memory, loaded from the file footers on first use.
pub struct KeyFilter {
    /// Per row group, per key column: the filter, if the column has one of a
    /// type it can be probed with.
    pub(super) groups: Vec<Vec<Option<(deltalake::parquet::bloom_filter::Sbbf, KeyProbe)>>>,
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) enum KeyProbe {
    /// BYTE_ARRAY column: a string key hashes as its UTF-8 bytes.
    Bytes,
    /// INT64 column: an integer key hashes as its little-endian bytes.
    Int64,
}

impl KeyFilter {
    /// False only when no row group can hold a row with these key values
    /// (a NULL part, an unprobeable column or a type mismatch counts as a
    /// maybe: the filter never hides a row).
    pub fn may_contain(&self, key: &[Value]) -> bool {
        (0..self.groups.len()).any(|g| self.group_may_contain(g, key))
    }

    /// The row groups that may hold a row with any of these key values, in order.
    pub fn groups_holding<'a>(
        &self,
        keys: impl Iterator<Item = &'a [Value]> + Clone,
    ) -> Vec<usize> {
        (0..self.groups.len())
            .filter(|&g| keys.clone().any(|k| self.group_may_contain(g, k)))
            .collect()
    }

    fn group_may_contain(&self, group: usize, key: &[Value]) -> bool {
        self.groups[group].iter().zip(key).all(|(f, v)| match (f, v) {
            (Some((f, KeyProbe::Bytes)), Value::Str(s)) => f.check(s.as_str()),
            (Some((f, KeyProbe::Int64)), Value::Int(i)) => f.check(i),
            _ => true,
        })
    }

    /// Reads the filters of `columns` from a parquet footer and its bloom
    /// filter blocks, each fetched with `range`. None when a key column has
    /// no filter in some row group (files written before filters existed).
    pub(super) async fn load<F, Fut>(
        size: u64,
        columns: &[String],
        range: F,
    ) -> std::result::Result<Option<KeyFilter>, String>
    where
        F: Fn(std::ops::Range<u64>) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<bytes::Bytes, String>>,
    {
        use deltalake::parquet::basic::Type as Physical;
        use deltalake::parquet::bloom_filter::Sbbf;
        let meta = read_footer(size, &range).await?;
        let mut groups = vec![];
        for rg in meta.row_groups() {
            let mut cols = vec![];
            for name in columns {
                let Some(c) = rg
                    .columns()
                    .iter()
                    .find(|c| c.column_path().parts() == std::slice::from_ref(name))
                else {
                    return Ok(None);
                };
                let (Some(off), Some(len)) = (c.bloom_filter_offset(), c.bloom_filter_length())
                else {
                    return Ok(None);
                };
                let probe = match c.column_type() {
                    Physical::BYTE_ARRAY => Some(KeyProbe::Bytes),
                    Physical::INT64 => Some(KeyProbe::Int64),
                    _ => None,
                };
                let bytes = range(off as u64..off as u64 + len as u64).await?;
                let sbbf = Sbbf::from_bytes(&bytes).map_err(|e| e.to_string())?;
                cols.push(probe.map(|p| (sbbf, p)));
            }
            groups.push(cols);
        }
        Ok(Some(KeyFilter { groups }))
    }
}

/// A parquet file's footer (schema, row groups, statistics), fetched with
/// one or two ranged reads of its tail, never the whole file.
pub(super) async fn read_footer<F, Fut>(
    size: u64,
    range: &F,
) -> std::result::Result<deltalake::parquet::file::metadata::ParquetMetaData, String>
where
    F: Fn(std::ops::Range<u64>) -> Fut,
    Fut: std::future::Future<Output = std::result::Result<bytes::Bytes, String>>,
{
    read_footer_sized(size, range).await.map(|(meta, _)| meta)
}

/// [`read_footer`], with the footer's length in bytes (metadata, its
/// length and the magic: the last bytes of the file).
pub(super) async fn read_footer_sized<F, Fut>(
    size: u64,
    range: &F,
) -> std::result::Result<(deltalake::parquet::file::metadata::ParquetMetaData, u64), String>
where
    F: Fn(std::ops::Range<u64>) -> Fut,
    Fut: std::future::Future<Output = std::result::Result<bytes::Bytes, String>>,
{
    use deltalake::parquet::file::metadata::ParquetMetaDataReader;
    if size < 12 {
        return Err("not a parquet file".into());
    }
    let tail_len = size.min(64 * 1024);
    let mut tail = range(size - tail_len..size).await?;
    let n = tail.len();
    if n < 8 || &tail[n - 4..] != b"PAR1" {
        return Err("not a parquet file (no PAR1 footer)".into());
    }
    let meta_len = u32::from_le_bytes(tail[n - 8..n - 4].try_into().expect("4 bytes")) as u64;
    if meta_len + 8 > size {
        return Err("parquet footer longer than the file".into());
    }
    if meta_len + 8 > tail_len {
        tail = range(size - 8 - meta_len..size).await?;
    }
    let n = tail.len();
    ParquetMetaDataReader::decode_metadata(&tail[n - 8 - meta_len as usize..n - 8])
        .map(|m| (m, meta_len + 8))
        .map_err(|e| e.to_string())
}

/// How a data file is compressed, chosen by how often it is rewritten (see
/// `plan::codec` and docs/performance.md, "Copy-on-write").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Codec {
    /// Files later runs rewrite (copy-on-write current rows): on the bench's
    /// CRM rows about 2.3x faster to compress and faster to read back than
    /// ZSTD level 1, for about twice the bytes; also Spark's and delta-rs'
    /// default.
    Snappy,
    /// Files written once and rarely read (history, merge-on-read current
    /// files, dead letters): ZSTD level 1, half Snappy's bytes.
    Zstd,
}

impl Codec {
    /// The codec's name in data file names (`part-….snappy.parquet`, as Spark names them).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Codec::Snappy => "snappy",
            Codec::Zstd => "zstd",
        }
    }
}

/// How a file is cut into row groups and data pages (None: parquet's
/// defaults: one group up to 1M rows, pages up to 20,000 rows or 1 MiB).
/// History files are cut small to be looked up by key (`plan::cuts`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cuts {
    pub(crate) group_rows: Option<usize>,
    pub(crate) page_rows: Option<usize>,
}

/// Encodes a file, cut as `cuts` says.
pub(crate) fn encode_parquet(
    batch: &RecordBatch,
    key_columns: &[String],
    codec: Codec,
    cuts: Cuts,
) -> std::result::Result<Vec<u8>, String> {
    // ZSTD (files written once) at level 1: most of level 3's ratio on CRM text at
    // about twice the speed. No dictionaries (either codec): CRM columns are mostly unique text, where building a dictionary
    // and then falling back cost a quarter of the encoding time and ZSTD alone
    // compressed the bench table 17% smaller.
    let level = ZstdLevel::try_new(1).map_err(|e| e.to_string())?;
    let compression = match codec {
        Codec::Snappy => Compression::SNAPPY,
        Codec::Zstd => Compression::ZSTD(level),
    };
    // Parquet statistics only on the business key (per page, so a key
    // lookup within a file reads one page). Readers prune files with the
    // Delta statistics of each `add` (`file_stats.rs`), which hold the same
    // bounds as a column chunk's statistics while the file is one row group
    // (up to parquet's default of 1M rows; `file_rows` is 65,536 unless set
    // higher). The writer's own min/max of every other column was a second
    // pass over every value (4% of a copy-on-write run's CPU,
    // docs/performance.md); files beyond 1M rows keep them. History files
    // are cut into small groups by design, to be looked up by key.
    let group = cuts.group_rows.unwrap_or(DEFAULT_MAX_ROW_GROUP_ROW_COUNT).max(1);
    let one_group = batch.num_rows() <= DEFAULT_MAX_ROW_GROUP_ROW_COUNT;
    let mut props = WriterProperties::builder()
        .set_compression(compression)
        .set_dictionary_enabled(false)
        .set_max_row_group_row_count(Some(group))
        .set_statistics_enabled(if one_group || cuts.group_rows.is_some() {
            EnabledStatistics::None
        } else {
            EnabledStatistics::Chunk
        });
    if let Some(rows) = cuts.page_rows {
        // Reached at the writer's batches of 1,024 rows: not below that.
        props = props.set_data_page_row_count_limit(rows.max(1));
    }
    // Bloom filters on the business key (see `KeyFilter`), one per row
    // group, sized for its rows at 1% false positives (the writer folds
    // them down to fit).
    for k in key_columns.iter().filter(|k| batch.schema().index_of(k).is_ok()) {
        let path = deltalake::parquet::schema::types::ColumnPath::from(k.as_str());
        props = props
            .set_column_statistics_enabled(path.clone(), EnabledStatistics::Page)
            .set_column_bloom_filter_enabled(path.clone(), true)
            .set_column_bloom_filter_fpp(path.clone(), 0.01)
            .set_column_bloom_filter_max_ndv(path, batch.num_rows().clamp(1, group) as u64);
    }
    let props = props.build();
    // Room for the whole file up front (compressed, it is smaller than the
    // Arrow buffers): growing the buffer copied each file about twice more.
    let mut buf = Vec::with_capacity(batch.get_array_memory_size().max(64 * 1024));
    let mut w =
        ArrowWriter::try_new(&mut buf, batch.schema(), Some(props)).map_err(|e| e.to_string())?;
    w.write(batch).map_err(|e| e.to_string())?;
    w.close().map_err(|e| e.to_string())?;
    Ok(buf)
}

/// Business-key column names: every file gets parquet bloom filters on them
/// (see [`KeyFilter`]).
pub(super) fn key_columns(spec: &Spec) -> Vec<String> {
    spec.key.iter().map(|&i| spec.names[i].clone()).collect()
}

/// Encodes batches on all cores, each with its codec and Delta statistics;
/// results in input order.
pub(super) fn encode_all(
    batches: Vec<(&RecordBatch, Codec, Cuts)>,
    key_columns: &[String],
    stats: &StatsColumns,
    table: &Schema,
) -> std::result::Result<Vec<(Vec<u8>, String)>, String> {
    par_map(batches, |(b, c, g)| {
        Ok((encode_parquet(b, key_columns, c, g)?, file_stats(b, stats, table)))
    })
    .into_iter()
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use deltalake::arrow::array::{Int64Array, StringArray};
    use deltalake::arrow::datatypes::{DataType as ArrowType, Field, Schema as ArrowSchema};

    async fn filter_of(bytes: Vec<u8>, keys: &[String]) -> Option<KeyFilter> {
        let bytes = bytes::Bytes::from(bytes);
        KeyFilter::load(bytes.len() as u64, keys, |r| {
            let b = bytes.clone();
            async move { Ok(b.slice(r.start as usize..r.end as usize)) }
        })
        .await
        .unwrap()
    }

    #[test]
    fn parquet_statistics_are_written_for_the_key_only_delta_statistics_cover_the_rest() {
        use deltalake::parquet::file::reader::{FileReader, SerializedFileReader};
        let schema = std::sync::Arc::new(ArrowSchema::new(vec![
            Field::new("id", ArrowType::Utf8, true),
            Field::new("city", ArrowType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                std::sync::Arc::new(StringArray::from_iter_values(
                    (0..100).map(|i| format!("k{i:03}")),
                )),
                std::sync::Arc::new(StringArray::from_iter_values(
                    (0..100).map(|i| format!("c{i}")),
                )),
            ],
        )
        .unwrap();
        let bytes =
            encode_parquet(&batch, &["id".to_string()], Codec::Snappy, Cuts::default()).unwrap();
        let r = SerializedFileReader::new(bytes::Bytes::from(bytes)).unwrap();
        let meta = r.metadata();
        assert_eq!(meta.num_row_groups(), 1);
        let rg = meta.row_group(0);
        let key = rg.column(0).statistics().expect("key statistics");
        assert_eq!(key.min_bytes_opt(), Some(&b"k000"[..]));
        assert_eq!(key.max_bytes_opt(), Some(&b"k099"[..]));
        assert!(rg.column(1).statistics().is_none(), "other columns: Delta statistics only");
    }

    #[tokio::test]
    async fn a_file_cut_into_row_groups_has_a_key_filter_per_group() {
        let schema =
            std::sync::Arc::new(ArrowSchema::new(vec![Field::new("id", ArrowType::Int64, true)]));
        let batch = RecordBatch::try_new(
            schema,
            vec![std::sync::Arc::new(Int64Array::from_iter_values(0..20_000))],
        )
        .unwrap();
        let keys = vec!["id".to_string()];
        let bytes = encode_parquet(
            &batch,
            &keys,
            Codec::Zstd,
            Cuts { group_rows: Some(8192), page_rows: None },
        )
        .unwrap();
        let f = filter_of(bytes, &keys).await.expect("filters written");
        assert_eq!(f.groups.len(), 3, "8,192 + 8,192 + 3,616 rows");
        let holding = |k: i64| f.groups_holding([&[Value::Int(k)][..]].into_iter());
        for (key, group) in [(5, 0), (8191, 0), (8192, 1), (19_999, 2)] {
            let got = holding(key);
            assert!(got.contains(&group) && got.len() <= 2, "key {key}: groups {got:?}");
        }
        let misses = (20_000..21_000).filter(|&k| !holding(k).is_empty()).count();
        assert!(misses < 60, "{misses} of 1,000 absent keys pass three 1% filters");
    }

    #[tokio::test]
    async fn key_bloom_filters_never_hide_a_stored_key_and_rule_out_most_others() {
        let schema = std::sync::Arc::new(ArrowSchema::new(vec![
            Field::new("id", ArrowType::Utf8, true),
            Field::new("n", ArrowType::Int64, true),
            Field::new("city", ArrowType::Utf8, true),
        ]));
        let ids: Vec<Option<String>> =
            (0..5000).map(|i| (i % 100 != 0).then(|| format!("acc-{i}"))).collect();
        let batch = RecordBatch::try_new(
            schema,
            vec![
                std::sync::Arc::new(StringArray::from(ids.clone())),
                std::sync::Arc::new(Int64Array::from_iter_values((0..5000).map(|i| i * 3))),
                std::sync::Arc::new(StringArray::from_iter_values(
                    (0..5000).map(|i| format!("c{i}")),
                )),
            ],
        )
        .unwrap();
        let keys = vec!["id".to_string(), "n".to_string()];
        let f =
            filter_of(encode_parquet(&batch, &keys, Codec::Zstd, Cuts::default()).unwrap(), &keys)
                .await
                .expect("filters written");
        for i in 0..5000i64 {
            let id = ids[i as usize].as_deref().map_or(Value::Null, |s| Value::Str(s.into()));
            assert!(f.may_contain(&[id, Value::Int(i * 3)]), "stored key {i} hidden");
        }
        let absent = (5000..15000)
            .filter(|i| f.may_contain(&[Value::Str(format!("acc-{i}").into()), Value::Int(*i)]))
            .count();
        assert!(absent < 100, "{absent} of 10000 absent keys pass a 1% filter");
        // Only one column ruled out is enough; types the filter cannot probe pass.
        assert!(!(5000..5100)
            .all(|i| f.may_contain(&[Value::Str("acc-1".into()), Value::Int(i * 3 + 1)])));
        assert!(
            f.may_contain(&[Value::Int(17), Value::Str("x".into())]),
            "a type mismatch is a maybe"
        );
        // Files without filters (written before them) give no filter: they are scanned.
        assert!(filter_of(
            encode_parquet(&batch, &[], Codec::Snappy, Cuts::default()).unwrap(),
            &keys
        )
        .await
        .is_none());
    }
}
