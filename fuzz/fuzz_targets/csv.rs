//! CSV extracts, then typing by inference.
#![no_main]

use changelake::batch::{conform, Guarded, TableShape};

static NONE: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
use changelake::config::SchemaPolicy;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&delim, bytes)) = data.split_first() else { return };
    if let Ok(raw) = changelake::source::file::read_csv(std::path::Path::new("f.csv"), bytes, delim)
    {
        let keys = raw.columns.first().cloned().into_iter().collect::<Vec<_>>();
        let n = raw.rows.len();
        if let Ok(c) = conform(
            raw,
            TableShape { columns: &[], untyped: &NONE },
            &[],
            SchemaPolicy::Additive,
            Guarded { keys: &keys, sequence: &[] },
        ) {
            assert_eq!(c.rows.len() + c.dead.len(), n);
        }
    }
});
