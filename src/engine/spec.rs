//! A table's merge rules resolved against its current columns: the config
//! names columns, the merge works on column positions.

use crate::config::{Strategy, TableConfig, ValidTime as CfgValidTime};
use crate::error::{Error, Result};
use crate::merge::{Spec, TimeColumn, ValidTime};
use crate::value::DType;

/// The `sequence_by` columns a batch carries neither as a typed column
/// nor as an untyped (all-NULL) one: a config that does not fit the data.
pub fn missing_sequence_columns(
    t: &TableConfig,
    columns: &[(String, DType)],
    untyped: &[String],
) -> Result<()> {
    for c in &t.sequence_by {
        let stored = crate::decode::stored_name(c);
        let known = |n: &String| *n == *c || *n == stored;
        if !columns.iter().any(|(n, _)| known(n)) && !untyped.iter().any(known) {
            let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
            return Err(Error::ConfigData(format!(
                "bronze.tables.{}.merge.sequence_by: column `{c}` is not in the data (columns: {})",
                t.name,
                names.join(", ")
            )));
        }
    }
    Ok(())
}

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
    // A sequence column with no type yet (only NULLs so far) is not in the
    // table: every row, stored or new, holds NULL there, so leaving it out of
    // the comparison orders exactly as comparing the NULLs would
    // (docs/schema.md, no type yet). The batch checks it exists at all.
    let seq: Vec<usize> =
        t.sequence_by.iter().filter_map(|c| find(c, "merge.sequence_by").ok()).collect();
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
        CfgValidTime::Column(c) => {
            ValidTime::Column(TimeColumn::named(find(c, "merge.valid_time")?, c))
        }
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
