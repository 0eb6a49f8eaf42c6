//! `show`: a table's rows ordered by business key, then version order, as an
//! aligned text table, CSV or JSON lines. The demo prints its tables the same
//! way, hence a module of its own.

use clap::ValueEnum;

use changelake::config::{Config, Strategy};
use changelake::engine::{build_spec, TableRunner};
use changelake::error::{Error, Result};
use changelake::merge::Version;
use changelake::value::{cmp_slices, parse_ts, Value};

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq)]
pub enum OutFormat {
    Table,
    Csv,
    Jsonl,
}

pub async fn show(c: &Config, table: &str, view: &str, format: OutFormat) -> Result<()> {
    let t = c.table(table).ok_or_else(|| {
        Error::Usage(format!(
            "no table `{table}` in the config (tables: {})",
            c.tables.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
        ))
    })?;
    let runner = TableRunner::open(c, t).await?;
    if !runner.store.exists() {
        return Err(Error::Input(format!("table {table} has no data yet at {}", runner.store.uri)));
    }
    let spec = build_spec(t, &runner.store.columns)?;
    let mut rows = runner.store.read_all(&spec).await?;
    let scd2 = t.strategy == Strategy::Scd2;
    match view {
        "all" => {}
        "active" => rows.retain(|v| if scd2 { v.current } else { !v.deleted }),
        v if v.starts_with("as-of=") => {
            if !scd2 {
                return Err(Error::Usage("--view as-of needs an scd2 table".into()));
            }
            let ts = parse_ts(&v["as-of=".len()..]).ok_or_else(|| {
                Error::Usage(format!("`{v}`: expected as-of=<RFC 3339 timestamp>"))
            })?;
            rows.retain(|r| {
                r.valid_from.is_some_and(|f| f <= ts)
                    && (r.current || r.valid_to.is_some_and(|e| ts < e))
            });
        }
        other => {
            return Err(Error::Usage(format!(
                "unknown view `{other}` (expected all, active or as-of=TS)"
            )))
        }
    }
    rows.sort_by(|a, b| {
        let ka: Vec<Value> = spec.key.iter().map(|&i| a.data[i].clone()).collect();
        let kb: Vec<Value> = spec.key.iter().map(|&i| b.data[i].clone()).collect();
        cmp_slices(&ka, &kb).then(spec.cmp_versions(a, b)).then(a.valid_from.cmp(&b.valid_from))
    });
    let r = &t.reserved;
    let mut header: Vec<String> = runner.store.columns.iter().map(|(n, _)| n.clone()).collect();
    if scd2 {
        header.extend([r.valid_from.clone(), r.valid_to.clone(), r.is_current.clone()]);
    }
    header.extend([r.is_deleted.clone(), r.execution_id.clone()]);
    if scd2 && t.surrogate_key {
        header.push(r.sk.clone());
    }
    let cells = |v: &Version| -> Vec<Value> {
        let mut out = v.data.clone();
        if scd2 {
            out.push(v.valid_from.map(Value::Ts).unwrap_or(Value::Null));
            out.push(v.valid_to.map(Value::Ts).unwrap_or(Value::Null));
            out.push(Value::Bool(v.current));
        }
        out.push(Value::Bool(v.deleted));
        out.push(Value::Int(v.exec));
        if scd2 && t.surrogate_key {
            out.push(v.sk.map(Value::Int).unwrap_or(Value::Null));
        }
        out
    };
    let body: Vec<Vec<Value>> = rows.iter().map(cells).collect();
    print!("{}", render(&header, &body, format));
    Ok(())
}

/// Renders rows as an aligned text table, CSV or JSON lines.
pub fn render(header: &[String], rows: &[Vec<Value>], format: OutFormat) -> String {
    match format {
        OutFormat::Csv => {
            let mut w = csv::Writer::from_writer(vec![]);
            let _ = w.write_record(header);
            for r in rows {
                let _ = w.write_record(r.iter().map(|v| {
                    if v.is_null() {
                        String::new()
                    } else {
                        v.to_string()
                    }
                }));
            }
            String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
        }
        OutFormat::Jsonl => {
            let mut s = String::new();
            for r in rows {
                let mut m = serde_json::Map::new();
                for (h, v) in header.iter().zip(r) {
                    let j = match v {
                        Value::Null => serde_json::Value::Null,
                        Value::Bool(b) => (*b).into(),
                        Value::Int(i) => (*i).into(),
                        Value::Float(f) => serde_json::Number::from_f64(*f)
                            .map(Into::into)
                            .unwrap_or(serde_json::Value::Null),
                        other => other.to_string().into(),
                    };
                    m.insert(h.clone(), j);
                }
                s.push_str(&serde_json::Value::Object(m).to_string());
                s.push('\n');
            }
            s
        }
        OutFormat::Table => {
            let text: Vec<Vec<String>> =
                rows.iter().map(|r| r.iter().map(|v| v.to_string()).collect()).collect();
            let mut w: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
            for r in &text {
                for (i, c) in r.iter().enumerate() {
                    w[i] = w[i].max(c.chars().count());
                }
            }
            let line = |cells: &[String]| {
                cells
                    .iter()
                    .enumerate()
                    .map(|(i, c)| format!("{c:<width$}", width = w[i]))
                    .collect::<Vec<_>>()
                    .join(" | ")
                    .trim_end()
                    .to_string()
                    + "\n"
            };
            let mut s = line(header);
            s.push_str(&(w.iter().map(|n| "-".repeat(*n)).collect::<Vec<_>>().join("-+-") + "\n"));
            for r in &text {
                s.push_str(&line(r));
            }
            s.push_str(&format!(
                "({} row{})\n",
                rows.len(),
                if rows.len() == 1 { "" } else { "s" }
            ));
            s
        }
    }
}
