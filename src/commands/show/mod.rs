//! `show`: a table's rows ordered by business key, then version order, as an
//! aligned text table, CSV or JSON lines (docs/cli.md, `show`).
//!
//! It streams: pages of the smallest keys not yet printed ([`page`]), each
//! found from the key and filter columns of the files that may hold them
//! (footer statistics and key bloom filters rule the others out), then read
//! in full by row selection. A look at ten rows of a large table reads a
//! few columns, not the table, and memory follows the page.

mod page;
mod render;

use std::collections::HashMap;
use std::io::Write;

use changelake::config::{Config, Strategy, TableConfig};
use changelake::engine::{build_spec, open_for_reading};
use changelake::error::{Error, Result};
use changelake::expr::Expr;
use changelake::merge::{Spec, Version};
use changelake::table::{KeyRange, ScanFile, TableStore};
use changelake::value::{cmp_slices, parse_as, parse_ts, Value};

use self::page::{Page, RowAt};
pub use self::render::{render, OutFormat, Printer};

/// Keys per page when no `--limit` is given: each page is one pass over the
/// key columns of the files that may hold it.
const PAGE_KEYS: usize = 50_000;

/// Which versions `show` prints.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum View {
    All,
    /// scd1: rows not soft-deleted; scd2: current versions.
    Active,
    /// scd2: the versions valid at this instant (µs since the epoch).
    AsOf(i64),
}

impl View {
    pub fn parse(s: &str) -> Result<View> {
        match s {
            "all" => Ok(View::All),
            "active" => Ok(View::Active),
            v if v.starts_with("as-of=") => parse_ts(&v["as-of=".len()..])
                .map(View::AsOf)
                .ok_or_else(|| Error::Usage(format!("`{v}`: expected as-of=<RFC 3339 timestamp>"))),
            other => Err(Error::Usage(format!(
                "unknown view `{other}` (expected all, active or as-of=TS)"
            ))),
        }
    }
}

/// What to print: `show`'s options.
#[derive(Debug, Clone)]
pub struct Query {
    pub view: View,
    pub limit: Option<usize>,
    /// `--where`: a SQL predicate over the printed columns.
    pub filter: Option<String>,
    /// `--key`: the business key's values, comma-separated.
    pub key: Option<String>,
    pub format: OutFormat,
}

impl Query {
    /// Every row, in the given view and format.
    pub fn all(view: View, format: OutFormat) -> Query {
        Query { view, limit: None, filter: None, key: None, format }
    }
}

pub async fn show(c: &Config, table: &str, q: &Query) -> Result<()> {
    let stdout = std::io::stdout().lock();
    let out = if table == c.dead_letters.table {
        show_dead_letters(c, q, stdout).await
    } else {
        show_table(c, table, q, stdout).await
    };
    match out {
        // `show ... | head`: the reader has what it wanted.
        Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

async fn show_table(c: &Config, table: &str, q: &Query, out: impl Write) -> Result<()> {
    let t = c.table(table).ok_or_else(|| {
        Error::Usage(format!(
            "no table `{table}` in the config (tables: {}, {})",
            c.tables.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", "),
            c.dead_letters.table
        ))
    })?;
    let store = open_for_reading(c, t).await?;
    if !store.exists() {
        return Err(Error::Input(format!("table {table} has no data yet at {}", store.uri)));
    }
    let spec = build_spec(t, &store.columns)?;
    let scd2 = t.strategy == Strategy::Scd2;
    if matches!(q.view, View::AsOf(_)) && !scd2 {
        return Err(Error::Usage("--view as-of needs an scd2 table".into()));
    }
    let header = header(t, &store);
    let filter = RowFilter::new(t, &store, &spec, &header, q)?;
    let files = filter.candidate_files(&store, &spec).await;
    let mut printer = Printer::new(out, q.format, header);
    let mut after: Option<Vec<Value>> = None;
    let mut left = q.limit.unwrap_or(usize::MAX);
    while left > 0 {
        let mut page = Page::new(left.min(PAGE_KEYS));
        for (f, range) in &files {
            if let (Some(r), Some(a)) = (range, &after) {
                if below(&r.max, &a[0], spec.key.len() == 1) {
                    continue;
                }
            }
            if let (Some(r), Some(b)) = (range, page.bound()) {
                // Files are in order of their lowest key: none further can help.
                if r.min.total_cmp(&b[0]).is_gt() {
                    break;
                }
            }
            let p = store.project(f.id, &filter.columns).await?;
            for (row, vals) in p.rows.iter().zip(&p.values) {
                let key = &vals[..spec.key.len()];
                if after.as_deref().is_some_and(|a| cmp_slices(key, a).is_le())
                    || !filter.keeps(f, vals)
                {
                    continue;
                }
                page.offer(key, RowAt { file: f.id, row: *row });
            }
        }
        if page.is_empty() {
            break;
        }
        let rows = page.rows_by_file();
        let mut versions: HashMap<RowAt, Version> = store
            .read_rows(rows)
            .await?
            .into_iter()
            .filter_map(|v| Some((RowAt { file: v.loc?.file, row: v.loc?.row }, v)))
            .collect();
        let mut lines = vec![];
        for (key, ats) in page.into_keys() {
            let mut vs: Vec<Version> = ats.iter().filter_map(|a| versions.remove(a)).collect();
            vs.sort_by(|a, b| spec.cmp_versions(a, b).then(a.valid_from.cmp(&b.valid_from)));
            lines.extend(vs.iter().map(|v| cells(t, store.columns.len(), v)));
            after = Some(key.0);
        }
        lines.truncate(left);
        left -= lines.len();
        printer.page(&lines)?;
    }
    printer.finish()?;
    Ok(())
}

/// True when every key of a file whose first key column is at most `max`
/// was printed before `after` (with one key column, `max == after` too).
fn below(max: &Value, after: &Value, single_column: bool) -> bool {
    match max.total_cmp(after) {
        std::cmp::Ordering::Less => true,
        std::cmp::Ordering::Equal => single_column,
        std::cmp::Ordering::Greater => false,
    }
}

/// The printed columns: data columns, then the system columns.
fn header(t: &TableConfig, store: &TableStore) -> Vec<String> {
    let r = &t.reserved;
    let scd2 = t.strategy == Strategy::Scd2;
    let mut h: Vec<String> = store.columns.iter().map(|(n, _)| n.clone()).collect();
    if scd2 {
        h.extend([r.valid_from.clone(), r.valid_to.clone(), r.is_current.clone()]);
    }
    h.extend([r.is_deleted.clone(), r.execution_id.clone()]);
    if scd2 && t.surrogate_key {
        h.push(r.sk.clone());
    }
    h
}

/// A version's printed cells, in [`header`] order: its `width` data
/// columns (NULL past its last value), then the reserved ones.
fn cells(t: &TableConfig, width: usize, v: &Version) -> Vec<Value> {
    let scd2 = t.strategy == Strategy::Scd2;
    let mut out = v.data.clone();
    out.resize(width, Value::Null);
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
}

/// Which rows `show` prints: the view, `--key` and `--where`, evaluated on
/// a projection of the columns they read (the key columns first).
struct RowFilter {
    /// Projected columns: the business key, then what the filters read.
    columns: Vec<String>,
    view: View,
    scd2: bool,
    key: Option<Vec<Value>>,
    predicate: Option<Expr>,
    /// Projected position of each column a filter reads.
    at: HashMap<String, usize>,
    is_current: String,
    is_deleted: String,
    valid_from: String,
    valid_to: String,
}

impl RowFilter {
    fn new(
        t: &TableConfig,
        store: &TableStore,
        spec: &Spec,
        header: &[String],
        q: &Query,
    ) -> Result<RowFilter> {
        let r = &t.reserved;
        let mut columns: Vec<String> = spec.key.iter().map(|&i| spec.names[i].clone()).collect();
        let scd2 = t.strategy == Strategy::Scd2;
        let need = |c: &str, columns: &mut Vec<String>| {
            if !columns.iter().any(|x| x == c) {
                columns.push(c.to_string());
            }
        };
        match q.view {
            View::Active if !scd2 => need(&r.is_deleted, &mut columns),
            View::AsOf(_) => {
                need(&r.valid_from, &mut columns);
                need(&r.valid_to, &mut columns);
            }
            _ => {}
        }
        let predicate = match &q.filter {
            None => None,
            Some(sql) => {
                let e = changelake::expr::parse(sql)
                    .map_err(|e| Error::Usage(format!("--where `{sql}`: {e}")))?;
                let mut used = vec![];
                e.columns(&mut used);
                for path in used {
                    let name = path.join(".");
                    if path.len() != 1 || !header.contains(&name) {
                        return Err(Error::Usage(format!(
                            "--where `{sql}`: no column `{name}` (columns: {})",
                            header.join(", ")
                        )));
                    }
                    if name != r.is_current {
                        need(&name, &mut columns);
                    }
                }
                Some(e)
            }
        };
        let key = match &q.key {
            None => None,
            Some(s) => Some(parse_key(s, t, store, spec)?),
        };
        let at = columns.iter().enumerate().map(|(i, c)| (c.clone(), i)).collect();
        Ok(RowFilter {
            columns,
            view: q.view,
            scd2,
            key,
            predicate,
            at,
            is_current: r.is_current.clone(),
            is_deleted: r.is_deleted.clone(),
            valid_from: r.valid_from.clone(),
            valid_to: r.valid_to.clone(),
        })
    }

    /// The files that may hold printed rows, each with the range of its
    /// first key column, in order of their lowest key (unknown ranges first).
    async fn candidate_files(
        &self,
        store: &TableStore,
        spec: &Spec,
    ) -> Vec<(ScanFile, Option<KeyRange>)> {
        let mut out = vec![];
        for f in store.scan_files() {
            if self.scd2 && self.view == View::Active && !f.current {
                continue;
            }
            let range = store.key_range(f.id, spec).await;
            if let Some(k) = &self.key {
                let outside = range.as_ref().is_some_and(|r| {
                    k[0].total_cmp(&r.min).is_lt() || k[0].total_cmp(&r.max).is_gt()
                });
                if outside || !store.may_hold_key(f.id, spec, k).await {
                    continue;
                }
            }
            out.push((f, range));
        }
        out.sort_by(|(_, a), (_, b)| match (a, b) {
            (None, None) => std::cmp::Ordering::Equal,
            (None, Some(_)) => std::cmp::Ordering::Less,
            (Some(_), None) => std::cmp::Ordering::Greater,
            (Some(a), Some(b)) => a.min.total_cmp(&b.min),
        });
        out
    }

    /// Whether a projected row of file `f` is printed.
    fn keeps(&self, f: &ScanFile, vals: &[Value]) -> bool {
        let get = |name: &str| -> Value {
            if self.scd2 && name == self.is_current {
                return Value::Bool(f.current);
            }
            self.at.get(name).map(|&i| vals[i].clone()).unwrap_or(Value::Null)
        };
        if let Some(k) = &self.key {
            if cmp_slices(&vals[..k.len()], k).is_ne() {
                return false;
            }
        }
        let in_view = match self.view {
            View::All => true,
            View::Active if self.scd2 => f.current,
            View::Active => get(&self.is_deleted) != Value::Bool(true),
            View::AsOf(ts) => {
                let from = matches!(get(&self.valid_from), Value::Ts(v) if v <= ts);
                let open = f.current || matches!(get(&self.valid_to), Value::Ts(e) if ts < e);
                from && open
            }
        };
        in_view && self.predicate.as_ref().is_none_or(|p| p.matches(&|path| get(&path[0])))
    }
}

/// `--key VALUE[,VALUE]`: one value per business-key column, in its type.
fn parse_key(s: &str, t: &TableConfig, store: &TableStore, spec: &Spec) -> Result<Vec<Value>> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    if parts.len() != spec.key.len() {
        return Err(Error::Usage(format!(
            "--key `{s}`: the business key has {} column{} ({}), got {} value{}",
            spec.key.len(),
            if spec.key.len() == 1 { "" } else { "s" },
            t.business_key.join(", "),
            parts.len(),
            if parts.len() == 1 { "" } else { "s" }
        )));
    }
    parts
        .iter()
        .zip(&spec.key)
        .map(|(p, &i)| {
            let (name, ty) = &store.columns[i];
            parse_as(p, *ty).ok_or_else(|| {
                Error::Usage(format!("--key `{s}`: `{p}` is not a {} ({name})", ty.name()))
            })
        })
        .collect()
}

/// `show _dead_letters`: the dead-letter table, oldest first (it is small:
/// only what could not be applied).
async fn show_dead_letters(c: &Config, q: &Query, out: impl Write) -> Result<()> {
    let (header, mut rows) = changelake::deadletter::read_all(&c.dead_letter_location()).await?;
    if header.is_empty() {
        return Err(Error::Input(format!(
            "table {} has no data yet at {}",
            c.dead_letters.table,
            c.dead_letter_uri()
        )));
    }
    if q.view != View::All || q.key.is_some() {
        return Err(Error::Usage(
            "the dead-letter table takes --where and --limit, not --view or --key".into(),
        ));
    }
    if let Some(sql) = &q.filter {
        let e = changelake::expr::parse(sql)
            .map_err(|e| Error::Usage(format!("--where `{sql}`: {e}")))?;
        let at: HashMap<&str, usize> =
            header.iter().enumerate().map(|(i, h)| (h.as_str(), i)).collect();
        rows.retain(|r| {
            e.matches(&|p| at.get(p.join(".").as_str()).map_or(Value::Null, |&i| r[i].clone()))
        });
    }
    rows.truncate(q.limit.unwrap_or(usize::MAX));
    let mut p = Printer::new(out, q.format, header);
    p.page(&rows)?;
    p.finish()?;
    Ok(())
}
