//! `bench.svg`: seconds per run of changelake and of delta-rs MERGE on the
//! same batches, one line per table and engine, drawn from `bench.json`'s
//! numbers so the picture can never disagree with the table.

use plotters::prelude::*;

/// One line of the chart: a table and engine, seconds per run.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    /// (run number, seconds)
    pub points: Vec<(u32, f64)>,
    pub deltars: bool,
}

/// The lines in `bench.json`'s object: each table's runs, and delta-rs'
/// runs on the same batches where they were measured.
pub fn series(json: &serde_json::Map<String, serde_json::Value>) -> Vec<Series> {
    let mut out = vec![];
    for (table, entry) in json.iter().filter(|(k, _)| *k != "broker") {
        let runs = entry["runs"].as_array().cloned().unwrap_or_default();
        let keys = runs.first().and_then(|r| r["table_keys_before"].as_u64()).unwrap_or(0);
        let points: Vec<(u32, f64)> = runs
            .iter()
            .filter_map(|r| Some((r["run"].as_u64()? as u32, r["seconds"].as_f64()?)))
            .collect();
        out.push(Series {
            label: format!("{table}: changelake ({} keys)", human_keys(keys)),
            points,
            deltars: false,
        });
        if let Some(d) = entry["deltars"]["runs"].as_array() {
            let points = d
                .iter()
                .enumerate()
                .filter_map(|(i, r)| Some((i as u32 + 1, r["total_seconds"].as_f64()?)))
                .collect();
            out.push(Series {
                label: format!("{table}: delta-rs MERGE ({} keys)", human_keys(keys)),
                points,
                deltars: true,
            });
        }
    }
    out
}

fn human_keys(k: u64) -> String {
    match k {
        k if k >= 1_000_000 && k % 100_000 == 0 => format!("{:.1}M", k as f64 / 1e6),
        k if k >= 1_000_000 => format!("{:.2}M", k as f64 / 1e6),
        k if k >= 1_000 => format!("{}k", k / 1000),
        k => k.to_string(),
    }
}

/// The chart as SVG text; `title` names the workload.
pub fn svg(lines: &[Series], title: &str) -> Result<String, String> {
    let runs = lines.iter().flat_map(|s| &s.points).map(|p| p.0).max().unwrap_or(1).max(2);
    let top = lines.iter().flat_map(|s| &s.points).map(|p| p.1).fold(0.0, f64::max).max(0.1);
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (820, 460)).into_drawing_area();
        let e = |e: &dyn std::fmt::Display| e.to_string();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(1u32..runs, 0.0..top * 1.15)
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .x_desc("run")
            .y_desc("seconds per run (lower is better)")
            .x_labels(runs as usize)
            .draw()
            .map_err(|x| e(&x))?;
        let palette = [RGBColor(31, 119, 180), RGBColor(255, 127, 14), RGBColor(44, 160, 44)];
        let mut table_no = 0usize;
        for s in lines {
            let color = palette[table_no % palette.len()];
            let style = if s.deltars {
                ShapeStyle::from(color.mix(0.55)).stroke_width(2)
            } else {
                ShapeStyle::from(color).stroke_width(3)
            };
            chart
                .draw_series(LineSeries::new(s.points.iter().copied(), style))
                .map_err(|x| e(&x))?
                .label(s.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
            chart
                .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, style.filled())))
                .map_err(|x| e(&x))?;
            if s.deltars {
                table_no += 1;
            }
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(|x| e(&x))?;
        root.present().map_err(|x| e(&x))?;
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_chart_draws_each_table_and_delta_rs_from_the_bench_numbers() {
        let j = json!({
            "account_scd1": {
                "runs": [
                    {"run": 1, "seconds": 1.0, "table_keys_before": 1000000},
                    {"run": 2, "seconds": 1.2, "table_keys_before": 1003000}
                ],
                "deltars": {"runs": [{"total_seconds": 2.5}, {"total_seconds": 3.0}]}
            },
            "broker": {"events": 5}
        });
        let lines = series(j.as_object().unwrap());
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].label, "account_scd1: changelake (1.0M keys)");
        assert_eq!(lines[0].points, vec![(1, 1.0), (2, 1.2)]);
        assert_eq!(lines[1].points, vec![(1, 2.5), (2, 3.0)]);
        assert!(lines[1].deltars);
        let text = svg(&lines, "1M keys").unwrap();
        assert!(text.starts_with("<svg") && text.contains("delta-rs MERGE (1.0M keys)"));
        assert!(text.contains("<polyline"), "the runs are drawn as lines");
    }
}
