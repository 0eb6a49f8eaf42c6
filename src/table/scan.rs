//! Reading a table without its key index, for inspection (`show`, `tables`).
//!
//! Opening a table for writing loads every current row into the key index;
//! an operator looking at a few rows of a large table must not pay that.
//! These reads touch one file at a time: the footer statistics of the first
//! business-key column and the key bloom filters decide which files may
//! hold the rows asked for, a projection of a few columns finds the rows,
//! and only those rows are then read in full (docs/cli.md, `show`).

use std::collections::BTreeMap;

use deltalake::arrow::array::ArrayRef;
use deltalake::parquet::file::statistics::Statistics;
use deltalake::Path;
use object_store::ObjectStoreExt;

use super::convert::cell;
use super::parquet::{key_columns, read_footer};
use super::{Result, TableStore};
use crate::merge::{Spec, Version};
use crate::value::{DType, Value};

/// A live data file as an inspection sees it.
#[derive(Debug, Clone)]
pub struct ScanFile {
    pub id: u32,
    pub path: String,
    /// In the scd2 current partition (always true for scd1).
    pub current: bool,
    /// Physical rows.
    pub rows: usize,
    /// Rows a deletion vector masks.
    pub masked: usize,
    pub bytes: i64,
}

/// Lowest and highest value of a file's first business-key column, from
/// its parquet statistics (bounds: a truncated text value is still one).
#[derive(Debug, Clone, PartialEq)]
pub struct KeyRange {
    pub min: Value,
    pub max: Value,
}

/// Chosen columns of a file's live rows: `rows[i]` is the physical row
/// whose values are `values[i]` (in the order the columns were asked for).
pub struct Projected {
    pub rows: Vec<u32>,
    pub values: Vec<Vec<Value>>,
}

impl TableStore {
    /// The live data files, by id (a copy-on-write rewrite takes the id of
    /// the file it replaces, so this is not log order).
    pub fn scan_files(&self) -> Vec<ScanFile> {
        self.files
            .iter()
            .enumerate()
            .filter_map(|(id, f)| {
                let f = f.as_ref()?;
                Some(ScanFile {
                    id: id as u32,
                    path: f.path.clone(),
                    current: f.current,
                    rows: f.rows,
                    masked: f.rows - f.live_rows(),
                    bytes: f.size,
                })
            })
            .collect()
    }

    /// The range of the first business-key column in a file, from its
    /// footer (a ranged read). None when the statistics are missing or of
    /// a type that cannot be compared with the column's values.
    pub async fn key_range(&self, id: u32, spec: &Spec) -> Option<KeyRange> {
        let f = self.files.get(id as usize)?.as_ref()?;
        let &first = spec.key.first()?;
        let (name, t) = self.columns.get(first)?;
        let store = self.store().ok()?;
        let path = Path::from(f.path.as_str());
        let meta = read_footer(f.size as u64, &|r| {
            let (store, path) = (store.clone(), path.clone());
            async move { store.get_range(&path, r).await.map_err(|e| e.to_string()) }
        })
        .await
        .ok()?;
        let mut range: Option<KeyRange> = None;
        for rg in meta.row_groups() {
            let c = rg.columns().iter().find(|c| c.column_path().parts() == [name.clone()])?;
            let (lo, hi) = match (c.statistics()?, t) {
                (Statistics::Int64(s), DType::Int) => {
                    (Value::Int(*s.min_opt()?), Value::Int(*s.max_opt()?))
                }
                (Statistics::Int64(s), DType::Ts) => {
                    (Value::Ts(*s.min_opt()?), Value::Ts(*s.max_opt()?))
                }
                (Statistics::ByteArray(s), DType::Str) => (
                    Value::Str(s.min_opt()?.as_utf8().ok()?.into()),
                    Value::Str(s.max_opt()?.as_utf8().ok()?.into()),
                ),
                _ => return None,
            };
            range = Some(match range {
                None => KeyRange { min: lo, max: hi },
                Some(r) => KeyRange {
                    min: if lo.total_cmp(&r.min).is_lt() { lo } else { r.min },
                    max: if hi.total_cmp(&r.max).is_gt() { hi } else { r.max },
                },
            });
        }
        range
    }

    /// False only when the file's key bloom filters rule the key out.
    pub async fn may_hold_key(&self, id: u32, spec: &Spec, key: &[Value]) -> bool {
        let Some(Some(f)) = self.files.get(id as usize) else { return false };
        match self.key_filter(f, &key_columns(spec)).await {
            Some(filter) => filter.may_contain(key),
            None => true,
        }
    }

    /// The named columns (data or system) of a file's live rows, converted
    /// to the table's current types; a column the file predates reads NULL.
    pub async fn project(&self, id: u32, names: &[String]) -> Result<Projected> {
        let f = self.files[id as usize].clone().expect("live file");
        let wanted: Vec<&str> = names.iter().map(String::as_str).collect();
        let bytes = self.fetch_columns(id, &wanted).await?;
        let schema = self.arrow_schema();
        let types: Vec<Option<DType>> = names
            .iter()
            .map(|n| {
                schema.index_of(n).ok()?;
                (self.columns.iter().find(|(c, _)| c == n)).map(|(_, t)| *t).or_else(|| {
                    self.meta.system_fields().into_iter().find(|(s, _)| s == n).map(|(_, t)| t)
                })
            })
            .collect();
        let mut out = Projected { rows: vec![], values: vec![] };
        let mut row_no = 0u32;
        for batch in self.columns_of(&f, bytes, &wanted)? {
            let batch = batch.map_err(|e| self.data_err(format!("parquet {}: {e}", f.path)))?;
            let cols: Vec<Option<ArrayRef>> =
                names.iter().map(|n| batch.column_by_name(n).cloned()).collect();
            for i in 0..batch.num_rows() {
                let row = row_no + i as u32;
                if f.deleted(row) {
                    continue;
                }
                let vals = cols
                    .iter()
                    .zip(&types)
                    .map(|(c, t)| match (c, t) {
                        (Some(c), Some(t)) => cell(c, i).convert(*t).unwrap_or(Value::Null),
                        _ => Value::Null,
                    })
                    .collect();
                out.rows.push(row);
                out.values.push(vals);
            }
            row_no += batch.num_rows() as u32;
        }
        Ok(out)
    }

    /// Chosen physical rows of files (each list sorted) as versions, read
    /// with row selections.
    pub async fn read_rows(&self, want: BTreeMap<u32, Vec<u32>>) -> Result<Vec<Version>> {
        let mut out = vec![];
        for sel in self.read_selected(want).await? {
            out.extend(self.versions_of(sel.file, &sel.batch, sel.rows.into_iter().enumerate()));
        }
        Ok(out)
    }
}
