//! Typing a batch against its table (docs/schema.md, docs/types.md).
use super::*;
use crate::source::RawRow;

fn raw(cols: &[&str], rows: &[&[&str]]) -> RawBatch {
    RawBatch {
        source: "t.csv".into(),
        columns: cols.iter().map(|c| c.to_string()).collect(),
        rows: rows
            .iter()
            .enumerate()
            .map(|(i, r)| RawRow {
                cells: r
                    .iter()
                    .map(|c| if c.is_empty() { Value::Null } else { Value::Str((*c).into()) })
                    .collect(),
                pos: i as u64,
                partition: 0,
                raw: r.join(",").into(),
                extra: vec![],
                replayed: false,
                declared: Default::default(),
            })
            .collect(),
        text: true,
        ..Default::default()
    }
}

#[test]
fn schema_additive_adds_new_columns_and_types_them() {
    let table = vec![("id".to_string(), DType::Int)];
    let c = conform(
        raw(&["id", "city", "amount"], &[&["1", "Bonn", "2"], &["2", "", "2.5"]]),
        shape(&table),
        &[],
        SchemaPolicy::Additive,
        guard(&["id".into()]),
    )
    .unwrap();
    assert_eq!(
        c.new_columns,
        vec![("city".to_string(), DType::Str), ("amount".to_string(), DType::Float)]
    );
    assert!(c.rows[1].data[1].is_null());
}

#[test]
fn schema_existing_column_type_wins_over_inference() {
    let table = vec![("id".to_string(), DType::Int), ("zip".to_string(), DType::Str)];
    let c = conform(
        raw(&["id", "zip"], &[&["1", "01067"]]),
        shape(&table),
        &[],
        SchemaPolicy::Additive,
        guard(&["id".into()]),
    )
    .unwrap();
    assert_eq!(c.rows[0].data[1], Value::Str("01067".into()));
}

#[test]
fn schema_unconvertible_value_is_dead_lettered_rest_continues() {
    let table = vec![("id".to_string(), DType::Int), ("seq".to_string(), DType::Int)];
    let c = conform(
        raw(&["id", "seq"], &[&["1", "x"], &["2", "3"]]),
        shape(&table),
        &[],
        SchemaPolicy::Additive,
        guard(&["id".into()]),
    )
    .unwrap();
    assert_eq!(c.rows.len(), 1);
    assert_eq!(c.dead.len(), 1);
    assert!(c.dead[0].error.contains("seq"));
}

#[test]
fn schema_ignore_drops_new_columns_strict_dead_letters_them() {
    let table = vec![("id".to_string(), DType::Int)];
    let c = conform(
        raw(&["id", "x"], &[&["1", "a"]]),
        shape(&table),
        &[],
        SchemaPolicy::Ignore,
        guard(&["id".into()]),
    )
    .unwrap();
    assert_eq!(c.columns.len(), 1);
    assert_eq!(c.ignored_columns, vec!["x"]);
    assert_eq!(c.rows.len(), 1);
    let s = conform(
        raw(&["id", "x"], &[&["1", "a"], &["2", ""]]),
        shape(&table),
        &[],
        SchemaPolicy::Strict,
        guard(&["id".into()]),
    )
    .unwrap();
    assert_eq!(s.dead.len(), 1);
    assert_eq!(s.rows.len(), 1);
}

/// docs/bad-input.md, width: one row with many fields leaves the other
/// rows of its batch as narrow as they came (no row is padded to the
/// batch's or the table's width), whatever the policy.
#[test]
fn schema_a_wide_row_leaves_the_narrow_rows_of_its_batch_narrow() {
    let table = vec![("id".to_string(), DType::Int), ("name".to_string(), DType::Str)];
    let mut cols = vec!["id".to_string(), "name".to_string()];
    cols.extend((0..1000).map(|i| format!("f{i}")));
    let cols: Vec<&str> = cols.iter().map(String::as_str).collect();
    let wide: Vec<String> =
        (0..1002).map(|i| if i == 1 { String::new() } else { i.to_string() }).collect();
    let wide: Vec<&str> = wide.iter().map(String::as_str).collect();
    // As the sources now hand them over: each row as long as its own fields.
    let batch = || raw(&cols, &[&["1", "a"], &wide, &["3"]]);
    let c =
        conform(batch(), shape(&table), &[], SchemaPolicy::Ignore, guard(&["id".into()])).unwrap();
    // Each typed row as long as its own fields (NULL past them).
    assert_eq!(c.rows.iter().map(|r| r.data.len()).collect::<Vec<_>>(), [2, 2, 1]);
    assert_eq!(c.rows[1].data, [Value::Int(0), Value::Null]);
    assert_eq!(c.rows[2].data, [Value::Int(3)]);
    // Only the wide row keeps its ignored fields (for predicates), and only
    // the ones it has: no NULL field for every ignored column in each row.
    assert_eq!(c.rows.iter().map(|r| r.extra.len()).collect::<Vec<_>>(), [0, 1000, 0]);
    let s =
        conform(batch(), shape(&table), &[], SchemaPolicy::Strict, guard(&["id".into()])).unwrap();
    assert_eq!((s.rows.len(), s.dead.len()), (2, 1));
    let a = conform(batch(), shape(&table), &[], SchemaPolicy::Additive, guard(&["id".into()]))
        .unwrap();
    // The table takes the 1,000 columns; the narrow rows stay narrow.
    assert_eq!(a.new_columns.len(), 1000);
    // Typed from the one row that has them (one pass over the rows for all
    // of them, not one per column).
    assert!(a.new_columns.iter().all(|(_, t)| *t == DType::Int), "{:?}", &a.new_columns[..3]);
    assert_eq!(a.rows.iter().map(|r| r.data.len()).collect::<Vec<_>>(), [2, 1002, 1]);
    assert_eq!(a.rows[0].data, [Value::Int(1), Value::Str("a".into())]);
    assert_eq!(a.rows[1].data[1001], Value::Int(1001));
}

#[test]
fn schema_missing_key_column_is_an_error() {
    assert!(conform(
        raw(&["city"], &[&["x"]]),
        shape(&[]),
        &[],
        SchemaPolicy::Additive,
        guard(&["id".into()])
    )
    .is_err());
}

#[test]
fn json_rows_without_the_key_column_are_null_keys_not_an_error() {
    let mut b = raw(&["city"], &[&["x"]]);
    b.text = false;
    let c = conform(
        b,
        shape(&[("id".to_string(), DType::Int)]),
        &[],
        SchemaPolicy::Additive,
        guard(&["id".into()]),
    )
    .unwrap();
    assert!(c.rows[0].data[0].is_null());
}

static NO_UNTYPED: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();

fn shape(columns: &[(String, DType)]) -> TableShape<'_> {
    TableShape {
        columns,
        written: &[],
        untyped: &NO_UNTYPED,
        exact: true,
        unavailable: None,
        debezium: false,
    }
}

fn guard(keys: &[String]) -> Guarded<'_> {
    Guarded { keys, sequence: &[] }
}

#[test]
fn schema_a_float_business_key_is_refused_only_when_declared() {
    let keys = ["id".to_string()];
    let declared = [("id".to_string(), DType::Float)];
    let e = conform(
        raw(&["id"], &[&["1.5"]]),
        shape(&[]),
        &declared,
        SchemaPolicy::Additive,
        guard(&keys),
    )
    .unwrap_err();
    assert!(matches!(e, ConformError::FloatKey { .. }));
    assert!(e.to_string().contains("float"));
    // Inferred: a float value never types a key; its row is a dead letter.
    let c = conform(
        raw(&["id"], &[&["1.5"], &["2"]]),
        shape(&[]),
        &[],
        SchemaPolicy::Additive,
        guard(&keys),
    )
    .unwrap();
    assert_eq!(c.columns, vec![("id".to_string(), DType::Int)]);
    assert_eq!((c.rows.len(), c.dead.len(), c.dead[0].reason), (1, 1, "type"));
}

/// docs/schema.md: key and sequence columns keep the kind they started with.
#[test]
fn schema_key_and_sequence_columns_keep_their_kind() {
    let keys = ["id".to_string()];
    let seq = ["lsn".to_string()];
    let g = Guarded { keys: &keys, sequence: &seq };
    let mut b =
        raw(&["id", "lsn", "note"], &[&["1", "9", "a"], &["2", "10", "3"], &["3", "x", "b"]]);
    b.text = true;
    let c = conform(b, shape(&[]), &[], SchemaPolicy::Additive, g).unwrap();
    let types: Vec<DType> = c.columns.iter().map(|(_, t)| *t).collect();
    // `note` mixes kinds and is no key or sequence: it widens to text.
    assert_eq!(types, vec![DType::Int, DType::Int, DType::Str]);
    assert_eq!(c.rows.len(), 2);
    assert_eq!(c.dead.len(), 1);
    assert!(c.dead[0].error.contains("lsn"), "{}", c.dead[0].error);
    // JSON values: a huge integer arrives as a float, a string among integers stays odd.
    let json = |cells: Vec<Vec<Value>>| RawBatch {
        source: "t".into(),
        columns: vec!["id".into(), "lsn".into()],
        rows: cells
            .into_iter()
            .enumerate()
            .map(|(i, cells)| crate::source::RawRow {
                cells,
                pos: i as u64,
                partition: 0,
                raw: String::new().into(),
                extra: vec![],
                replayed: false,
                declared: Default::default(),
            })
            .collect(),
        text: false,
        ..Default::default()
    };
    let c = conform(
        json(vec![
            vec![Value::Float(1e23), Value::Int(1)],
            vec![Value::Int(7), Value::Int(2)],
            vec![Value::Int(8), Value::Str("not-a-number".into())],
            vec![Value::Int(9), Value::Float(3.5)],
        ]),
        shape(&[]),
        &[],
        SchemaPolicy::Additive,
        g,
    )
    .unwrap();
    assert_eq!(c.columns, vec![("id".to_string(), DType::Int), ("lsn".to_string(), DType::Int)]);
    let kept: Vec<&Value> = c.rows.iter().map(|r| &r.data[0]).collect();
    assert_eq!(kept, vec![&Value::Int(7)]);
    assert_eq!(c.dead.len(), 3);
    assert!(c.dead.iter().all(|d| d.reason == "type"));
}

/// docs/schema.md, no type yet: an all-NULL new column is provisional
/// text, listed as untyped, until its first values type it.
#[test]
fn schema_a_column_with_only_nulls_has_no_type_yet() {
    let keys = ["id".to_string()];
    let c = conform(
        raw(&["id", "seq"], &[&["1", ""], &["2", ""]]),
        shape(&[]),
        &[],
        SchemaPolicy::Additive,
        guard(&keys),
    )
    .unwrap();
    assert_eq!(c.columns, vec![("id".to_string(), DType::Int), ("seq".to_string(), DType::Str)]);
    assert_eq!(c.untyped, vec!["seq".to_string()]);
    assert_eq!(c.rows.len(), 2);
    // Its first values type it, in the same table; one it does not mention stays untyped.
    let table = c.columns.clone();
    let untyped: std::collections::BTreeSet<String> =
        ["seq".to_string(), "note".to_string()].into();
    let mut table2 = table.clone();
    table2.push(("note".to_string(), DType::Str));
    let c = conform(
        raw(&["id", "seq"], &[&["1", "4"], &["2", "11"]]),
        TableShape {
            columns: &table2,
            written: &[],
            untyped: &untyped,
            exact: true,
            unavailable: None,
            debezium: false,
        },
        &[],
        SchemaPolicy::Additive,
        guard(&keys),
    )
    .unwrap();
    assert_eq!(c.columns[1], ("seq".to_string(), DType::Int));
    assert_eq!(c.rows[1].data[1], Value::Int(11));
    assert_eq!(c.untyped, vec!["note".to_string()]);
    // A declared column is typed even when NULL; a key column without
    // values has no type yet either (a composite key's other parts may hold
    // values), and one the batch does not mention is NULL in every row.
    let declared = [("seq".to_string(), DType::Int)];
    let keys = ["id".to_string(), "region".to_string()];
    let mut json = raw(&["id", "seq"], &[&["", ""]]);
    json.text = false;
    let c = conform(json, shape(&[]), &declared, SchemaPolicy::Additive, guard(&keys)).unwrap();
    let provisional = |n: &str| (n.to_string(), DType::Str);
    assert_eq!(
        c.columns,
        vec![provisional("id"), ("seq".to_string(), DType::Int), provisional("region")]
    );
    assert_eq!(c.untyped, vec!["id".to_string(), "region".to_string()]);
}

/// A row's cells and the schema declarations of its message.
type DeclaredRow<'a> = (Vec<Value>, Vec<(&'a str, crate::decode::Declared)>);

/// JSON-typed rows, each with the schema declarations of its message.
fn declared_rows(cols: &[&str], rows: Vec<DeclaredRow>) -> RawBatch {
    RawBatch {
        source: "topic".into(),
        columns: cols.iter().map(|c| c.to_string()).collect(),
        rows: rows
            .into_iter()
            .enumerate()
            .map(|(i, (cells, declared))| RawRow {
                cells,
                pos: i as u64,
                partition: 0,
                raw: String::new().into(),
                extra: vec![],
                replayed: false,
                declared: declared.into_iter().map(|(n, d)| (n.to_string(), d)).collect(),
            })
            .collect(),
        text: false,
        ..Default::default()
    }
}

fn exact(t: DType) -> crate::decode::Declared {
    crate::decode::Declared::Exact(t)
}

#[test]
fn types_a_declared_column_null_in_every_row_still_gets_its_declared_type() {
    let b = declared_rows(
        &["id", "later_int"],
        vec![(
            vec![Value::Int(1), Value::Null],
            vec![("id", exact(DType::Int)), ("later_int", exact(DType::Int))],
        )],
    );
    let c = conform(b, shape(&[]), &[], SchemaPolicy::Additive, guard(&["id".into()])).unwrap();
    assert_eq!(c.columns[1], ("later_int".to_string(), DType::Int));
    assert!(c.untyped.is_empty(), "declared: typed at once");
}

#[test]
fn types_a_declared_type_change_dead_letters_the_row_and_the_batch_goes_on() {
    let table = [
        ("id".to_string(), DType::Int),
        ("amount".to_string(), DType::Decimal { precision: 10, scale: 2 }),
    ];
    let d = |p, s| exact(DType::Decimal { precision: p, scale: s });
    let b = declared_rows(
        &["id", "amount"],
        vec![
            (vec![Value::Int(1), Value::decimal(1234, 2)], vec![("amount", d(10, 2))]),
            (vec![Value::Int(2), Value::decimal(1234, 3)], vec![("amount", d(10, 3))]),
            (vec![Value::Int(3), Value::Str("12.34".into())], vec![("amount", exact(DType::Str))]),
            (vec![Value::Int(4), Value::decimal(5, 2)], vec![("amount", d(8, 2))]),
        ],
    );
    let c = conform(b, shape(&table), &[], SchemaPolicy::Additive, guard(&["id".into()])).unwrap();
    assert_eq!(c.rows.len(), 2, "same type and a narrower precision land");
    assert_eq!(c.dead.len(), 2);
    assert!(c.dead.iter().all(|d| d.reason == "type"));
    assert!(
        c.dead[0]
            .error
            .contains("declared decimal(10,3), but the table stores it as decimal(10,2)"),
        "{}",
        c.dead[0].error
    );
    assert!(c.widened.is_empty());
    // A table from an older version keeps taking what it stored before.
    let old = [("id".to_string(), DType::Int), ("amount".to_string(), DType::Float)];
    let b = declared_rows(
        &["id", "amount"],
        vec![(vec![Value::Int(1), Value::decimal(1, 2)], vec![("amount", d(10, 2))])],
    );
    let legacy = TableShape { exact: false, ..shape(&old) };
    let c = conform(b, legacy, &[], SchemaPolicy::Additive, guard(&["id".into()])).unwrap();
    assert!(matches!(c.rows[0].data[1], Value::Float(f) if f == 0.01));
}

#[test]
fn types_a_decimal_whose_precision_grows_at_the_same_scale_widens_the_column() {
    let table = [
        ("id".to_string(), DType::Int),
        ("amount".to_string(), DType::Decimal { precision: 10, scale: 2 }),
    ];
    let wide = DType::Decimal { precision: 20, scale: 2 };
    let b = declared_rows(
        &["id", "amount"],
        vec![(
            vec![Value::Int(1), Value::decimal(123456789012345678, 2)],
            vec![("amount", exact(wide))],
        )],
    );
    let c = conform(b, shape(&table), &[], SchemaPolicy::Additive, guard(&["id".into()])).unwrap();
    assert_eq!(c.widened, vec![("amount".to_string(), wide)]);
    assert_eq!(c.columns[1].1, wide);
    assert_eq!(c.rows[0].data[1].to_string(), "1234567890123456.78");
}

#[test]
fn types_variable_scale_decimals_take_the_configured_scale_and_dead_letter_what_does_not_fit() {
    let vsd = || crate::decode::Declared::VariableScaleDecimal;
    let b = declared_rows(
        &["id", "price"],
        vec![
            (vec![Value::Int(1), Value::decimal(314159, 5)], vec![("price", vsd())]),
            (vec![Value::Int(2), Value::decimal(12345678, 7)], vec![("price", vsd())]),
        ],
    );
    let configured = [("price".to_string(), DType::Decimal { precision: 38, scale: 6 })];
    let c =
        conform(b, shape(&[]), &configured, SchemaPolicy::Additive, guard(&["id".into()])).unwrap();
    assert_eq!(c.columns[1].1, DType::Decimal { precision: 38, scale: 6 });
    assert_eq!(c.rows[0].data[1].to_string(), "3.141590");
    assert_eq!(c.dead.len(), 1);
    assert!(c.dead[0].error.contains("more than 6 decimal places"), "{}", c.dead[0].error);
    // Without a declaration: decimal(38,18).
    let b = declared_rows(
        &["id", "price"],
        vec![(vec![Value::Int(1), Value::decimal(314159, 5)], vec![("price", vsd())])],
    );
    let c = conform(b, shape(&[]), &[], SchemaPolicy::Additive, guard(&["id".into()])).unwrap();
    assert_eq!(c.columns[1].1, DType::Decimal { precision: 38, scale: 18 });
}

#[test]
fn types_toast_placeholders_are_marked_unavailable_not_stored() {
    let u = Unavailable::new(Unavailable::DEFAULT);
    let b = declared_rows(
        &["id", "bio", "photo"],
        vec![(
            vec![
                Value::Int(1),
                Value::Str(Unavailable::DEFAULT.into()),
                Value::bytes(Unavailable::DEFAULT.as_bytes().to_vec()),
            ],
            vec![],
        )],
    );
    let table = [
        ("id".to_string(), DType::Int),
        ("bio".to_string(), DType::Str),
        ("photo".to_string(), DType::Binary),
    ];
    let s = TableShape { unavailable: Some(&u), debezium: true, ..shape(&table) };
    let c = conform(b, s, &[], SchemaPolicy::Additive, guard(&["id".into()])).unwrap();
    assert_eq!(c.rows[0].unavailable, vec![1, 2]);
    assert!(c.rows[0].data[1].is_null() && c.rows[0].data[2].is_null());
    assert!(
        u.matches(&Value::Str("X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==".into())),
        "base64 in a bytes column"
    );
}

#[test]
fn types_decimal_and_date_keys_match_exactly() {
    let table = [
        ("id".to_string(), DType::Decimal { precision: 10, scale: 2 }),
        ("d".to_string(), DType::Date),
    ];
    let b = declared_rows(
        &["id", "d"],
        vec![(vec![Value::Str("1.5".into()), Value::Str("1969-07-20".into())], vec![])],
    );
    let keys = ["id".to_string(), "d".to_string()];
    let c = conform(b, shape(&table), &table, SchemaPolicy::Additive, guard(&keys)).unwrap();
    assert_eq!(c.rows[0].data, vec![Value::decimal(150, 2), Value::Date(-165)]);
    let k1 = crate::merge::key_from(c.rows[0].data.iter()).unwrap();
    let k2 = crate::merge::key_from(
        [Value::decimal(15, 1).convert(table[0].1).unwrap(), Value::Date(-165)].iter(),
    )
    .unwrap();
    assert_eq!(k1, k2, "1.5 and 1.50 are one key");
}

/// Rows are typed in their own vectors when the batch's columns are the
/// table's (or a prefix of them), and moved cell by cell otherwise: both
/// give the same aligned rows, and a bad cell is a dead letter either way.
#[test]
fn schema_rows_align_with_the_table_whatever_the_batch_column_order() {
    let table = vec![
        ("id".to_string(), DType::Int),
        ("city".to_string(), DType::Str),
        ("amount".to_string(), DType::Float),
    ];
    let typed = |cols: &[&str], rows: &[&[&str]]| {
        conform(raw(cols, rows), shape(&table), &[], SchemaPolicy::Additive, guard(&["id".into()]))
            .unwrap()
    };
    let want = vec![Value::Int(1), Value::Str("Bonn".into()), Value::Float(2.5)];
    let same = typed(&["id", "city", "amount"], &[&["1", "Bonn", "2.5"], &["2", "Ulm", "x"]]);
    assert_eq!(same.rows.len(), 1);
    assert_eq!(same.rows[0].data, want);
    assert_eq!(same.dead.len(), 1);
    assert!(same.dead[0].error.contains("column `amount`"), "{}", same.dead[0].error);
    let shuffled = typed(&["amount", "id", "city"], &[&["2.5", "1", "Bonn"]]);
    assert_eq!(shuffled.rows[0].data, want);
    let prefix = typed(&["id", "city"], &[&["1", "Bonn"]]);
    // `amount` is NULL past the row's last cell (a row is not padded).
    assert_eq!(prefix.rows[0].data, vec![Value::Int(1), Value::Str("Bonn".into())]);
}

/// Predicates name stored columns and envelope fields by dotted path.
#[test]
fn lookup_matches_dotted_paths_exactly() {
    let columns = vec![("id".to_string(), DType::Int), ("a.b".to_string(), DType::Str)];
    let row = TypedRow {
        data: vec![Value::Int(7), Value::Str("x".into())],
        pos: 0,
        partition: 0,
        raw: "".into(),
        extra: vec![("source.db".into(), Value::Str("crm".into()))],
        replayed: false,
        unavailable: vec![],
    };
    let path = |p: &str| p.split('.').map(String::from).collect::<Vec<_>>();
    assert_eq!(lookup(&columns, &row, false, &path("id")), Value::Int(7));
    assert_eq!(lookup(&columns, &row, false, &path("a.b")), Value::Str("x".into()));
    assert_eq!(lookup(&columns, &row, false, &path("source.db")), Value::Str("crm".into()));
    for missing in ["a", "a.b.c", "i", "source", "source.d", "source.dbx"] {
        assert_eq!(lookup(&columns, &row, false, &path(missing)), Value::Null, "{missing}");
    }
}
