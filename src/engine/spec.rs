//! A table's merge rules resolved against its current columns: the config
//! names columns, the merge works on column positions.

use crate::config::{Strategy, TableConfig, ValidTime as CfgValidTime};
use crate::error::{Error, Result};
use crate::merge::{Spec, ValidTime};
use crate::value::DType;

/// Resolves a table's merge rules against its current columns.
pub fn build_spec(t: &TableConfig, columns: &[(String, DType)]) -> Result<Spec> {
    let names: Vec<String> = columns.iter().map(|(n, _)| n.clone()).collect();
    let path = format!("bronze.tables.{}", t.name);
    // Envelope paths (`source.lsn`) are stored under their column name (`source_lsn`).
    let find = |c: &str, what: &str| {
        names
            .iter()
            .position(|n| n == c)
            .or_else(|| names.iter().position(|n| *n == crate::decode::stored_name(c)))
            .ok_or_else(|| {
                Error::ConfigData(format!(
                    "{path}.{what}: column `{c}` is not in the data (columns: {})",
                    names.join(", ")
                ))
            })
    };
    let key = t.business_key.iter().map(|c| find(c, "business_key")).collect::<Result<Vec<_>>>()?;
    let seq =
        t.sequence_by.iter().map(|c| find(c, "merge.sequence_by")).collect::<Result<Vec<_>>>()?;
    let tracked = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            !key.contains(&i)
                && !seq.contains(&i)
                && match &t.track_columns {
                    Some(tc) => tc.contains(n),
                    None => !t.ignore_columns.contains(n),
                }
        })
        .collect();
    let valid_time = match &t.valid_time {
        CfgValidTime::Processing => ValidTime::Processing,
        CfgValidTime::Date(d) => ValidTime::Date(*d),
        CfgValidTime::Column(c) => ValidTime::Column(find(c, "merge.valid_time")?),
    };
    Ok(Spec {
        strategy: t.strategy,
        names,
        key,
        seq,
        tracked,
        delete_mode: t.delete_mode,
        snapshot: t.snapshot,
        intra_batch_all: t.intra_batch_all,
        valid_time,
        open_valid_to: t.open_valid_to,
        surrogate_key: t.surrogate_key && t.strategy == Strategy::Scd2,
        reject_duplicates: t.guardrails.reject_duplicates,
        reject_late: t.guardrails.reject_late,
    })
}
