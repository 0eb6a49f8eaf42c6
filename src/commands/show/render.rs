//! Printing rows as an aligned text table, CSV or JSON lines, a page at a
//! time: `show` streams, so the printer never needs the whole table. Column
//! widths of the text table come from the header and the first page.

use std::io::{self, Write};

use clap::ValueEnum;

use changelake::value::Value;

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq)]
pub enum OutFormat {
    /// Aligned columns for reading, with a row count at the end.
    Table,
    /// RFC 4180 CSV with a header line; NULL is an empty field.
    Csv,
    /// One JSON object per row (numbers and booleans as JSON values).
    Jsonl,
}

/// Writes rows page by page to `out`.
pub struct Printer<W: Write> {
    out: W,
    format: OutFormat,
    header: Vec<String>,
    /// Header printed (and, for a text table, the column widths).
    widths: Option<Vec<usize>>,
    rows: usize,
}

impl<W: Write> Printer<W> {
    pub fn new(out: W, format: OutFormat, header: Vec<String>) -> Printer<W> {
        Printer { out, format, header, widths: None, rows: 0 }
    }

    /// Prints a page of rows (the header before the first).
    pub fn page(&mut self, rows: &[Vec<Value>]) -> io::Result<()> {
        match self.format {
            OutFormat::Csv => {
                let mut w = csv::Writer::from_writer(vec![]);
                if self.widths.is_none() {
                    w.write_record(&self.header)?;
                    self.widths = Some(vec![]);
                }
                for r in rows {
                    w.write_record(r.iter().map(|v| {
                        if v.is_null() {
                            String::new()
                        } else {
                            v.to_string()
                        }
                    }))?;
                }
                self.out.write_all(&w.into_inner().map_err(|e| e.into_error())?)?;
            }
            OutFormat::Jsonl => {
                for r in rows {
                    let mut m = serde_json::Map::new();
                    for (h, v) in self.header.iter().zip(r) {
                        m.insert(h.clone(), json_of(v));
                    }
                    writeln!(self.out, "{}", serde_json::Value::Object(m))?;
                }
            }
            OutFormat::Table => {
                let text: Vec<Vec<String>> =
                    rows.iter().map(|r| r.iter().map(|v| v.to_string()).collect()).collect();
                if self.widths.is_none() {
                    let mut w: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
                    for r in &text {
                        for (i, c) in r.iter().enumerate() {
                            w[i] = w[i].max(c.chars().count());
                        }
                    }
                    let header = self.line(&w, &self.header);
                    let rule = w.iter().map(|n| "-".repeat(*n)).collect::<Vec<_>>().join("-+-");
                    writeln!(self.out, "{header}\n{rule}")?;
                    self.widths = Some(w);
                }
                let w = self.widths.clone().unwrap_or_default();
                for r in &text {
                    let l = self.line(&w, r);
                    writeln!(self.out, "{l}")?;
                }
            }
        }
        self.rows += rows.len();
        Ok(())
    }

    /// Ends the output: the header of an empty result, the row count of a
    /// text table.
    pub fn finish(mut self) -> io::Result<W> {
        if self.widths.is_none() {
            self.page(&[])?;
        }
        if self.format == OutFormat::Table {
            let n = self.rows;
            writeln!(self.out, "({n} row{})", if n == 1 { "" } else { "s" })?;
        }
        self.out.flush()?;
        Ok(self.out)
    }

    fn line(&self, widths: &[usize], cells: &[String]) -> String {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = widths.get(i).copied().unwrap_or(0)))
            .collect::<Vec<_>>()
            .join(" | ")
            .trim_end()
            .to_string()
    }
}

fn json_of(v: &Value) -> serde_json::Value {
    match v {
        Value::Null => serde_json::Value::Null,
        Value::Bool(b) => (*b).into(),
        Value::Int(i) => (*i).into(),
        Value::Float(f) => {
            serde_json::Number::from_f64(*f).map(Into::into).unwrap_or(serde_json::Value::Null)
        }
        other => other.to_string().into(),
    }
}

/// Renders rows at once (small outputs: `offsets`, the demo's dead letters).
pub fn render(header: &[String], rows: &[Vec<Value>], format: OutFormat) -> String {
    let mut p = Printer::new(vec![], format, header.to_vec());
    let out = p.page(rows).and_then(|()| p.finish()).unwrap_or_default();
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_table_aligns_on_the_first_page_and_counts_every_row() {
        let h = vec!["id".to_string(), "name".to_string()];
        let mut p = Printer::new(vec![], OutFormat::Table, h);
        p.page(&[vec![Value::Int(1), Value::Str("ann".into())]]).unwrap();
        p.page(&[vec![Value::Int(22), Value::Null]]).unwrap();
        let out = String::from_utf8(p.finish().unwrap()).unwrap();
        assert_eq!(out, "id | name\n---+-----\n1  | ann\n22 | NULL\n(2 rows)\n");
    }

    #[test]
    fn empty_results_still_print_the_header() {
        let h = vec!["id".to_string()];
        assert_eq!(render(&h, &[], OutFormat::Csv), "id\n");
        assert_eq!(render(&h, &[], OutFormat::Table), "id\n--\n(0 rows)\n");
        assert_eq!(render(&h, &[], OutFormat::Jsonl), "");
    }
}
