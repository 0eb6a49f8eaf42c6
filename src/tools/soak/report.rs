//! The soak's bookkeeping and verdict, kept apart from the processes it
//! drives so that it can be tested: a fixed-size latency histogram (a
//! 30-minute run at 20,000 events/s sees 36 million latencies, which must
//! not become 36 million floats in the measuring process), the windows the
//! run is cut into, and the summary that says whether memory stayed flat and
//! lag stayed bounded after warm-up.

use std::fmt::Write as _;

use serde_json::json;

/// Latencies in 10 ms buckets up to 10 minutes (the last bucket takes the rest).
#[derive(Debug, Clone)]
pub struct Histogram {
    buckets: Vec<u64>,
    count: u64,
    max: f64,
}

const BUCKET_SECS: f64 = 0.01;
const BUCKETS: usize = 60_000;

impl Default for Histogram {
    fn default() -> Self {
        Histogram { buckets: vec![0; BUCKETS], count: 0, max: 0.0 }
    }
}

impl Histogram {
    pub fn record(&mut self, secs: f64) {
        let i = ((secs.max(0.0) / BUCKET_SECS) as usize).min(BUCKETS - 1);
        self.buckets[i] += 1;
        self.count += 1;
        self.max = self.max.max(secs);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn max(&self) -> f64 {
        self.max
    }

    /// The upper edge of the bucket holding quantile `q` (NaN when empty).
    pub fn quantile(&self, q: f64) -> f64 {
        if self.count == 0 {
            return f64::NAN;
        }
        let rank = ((self.count as f64 * q).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank && i + 1 == BUCKETS {
                return self.max; // the open-ended last bucket
            }
            if seen >= rank {
                return ((i + 1) as f64 * BUCKET_SECS).min(self.max);
            }
        }
        self.max
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.count += other.count;
        self.max = self.max.max(other.max);
    }
}

/// One window of the run, as the soak table prints it.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    /// Seconds since the producer started, at the window's end.
    pub at: f64,
    pub produced: u64,
    pub committed: u64,
    /// Largest produced-minus-committed seen in the window, in events.
    pub max_lag: u64,
    pub rss_mean: u64,
    pub rss_max: u64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    /// Delta commits the daemon counted so far.
    pub commits: u64,
}

/// The RSS samples and latencies of the window being filled.
#[derive(Debug, Default)]
pub struct Filling {
    pub latency: Histogram,
    rss_sum: u128,
    rss_n: u64,
    rss_max: u64,
    max_lag: u64,
}

impl Filling {
    pub fn sample(&mut self, rss: u64, lag: u64) {
        self.rss_sum += rss as u128;
        self.rss_n += 1;
        self.rss_max = self.rss_max.max(rss);
        self.max_lag = self.max_lag.max(lag);
    }

    /// Closes the window: its figures, and a fresh one to fill.
    pub fn close(&mut self, at: f64, produced: u64, committed: u64, commits: u64) -> Window {
        let f = std::mem::take(self);
        Window {
            at,
            produced,
            committed,
            max_lag: f.max_lag,
            rss_mean: f.rss_sum.checked_div(f.rss_n as u128).unwrap_or(0) as u64,
            rss_max: f.rss_max,
            p50: f.latency.quantile(0.5),
            p99: f.latency.quantile(0.99),
            max: f.latency.max(),
            commits,
        }
    }
}

/// The verdict over the windows after warm-up.
///
/// Growth compares spans, not single windows: the first span after warm-up
/// with the last one, each as long as the warm-up's half (5 minutes of a
/// 30-minute run). A 30 s window's mean RSS swings by several percent with
/// where the commits and upkeep rounds fall in it; a leak shows as the last
/// span above the first.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Mean RSS over the first span after warm-up.
    pub rss_baseline: u64,
    /// Mean RSS over the last span.
    pub rss_end: u64,
    /// `rss_end` over `rss_baseline`, minus one.
    pub rss_growth: f64,
    /// Smallest and largest window mean after warm-up.
    pub rss_window_range: (u64, u64),
    /// Largest lag in the first span after warm-up and in the last span.
    pub lag_first: u64,
    pub lag_last: u64,
    pub max_lag_after_warmup: u64,
    pub p99_after_warmup_max: f64,
}

impl Verdict {
    /// RSS grew by less than 5% between the spans.
    pub fn flat(&self) -> bool {
        self.rss_growth < 0.05
    }

    /// The lag did not grow: the last span's largest lag is at most twice
    /// the first span's (the windows are independent samples of a bounded
    /// lag; a daemon falling behind grows it without end).
    pub fn lag_bounded(&self) -> bool {
        self.lag_last <= 2 * self.lag_first.max(1)
    }
}

/// Judges the windows ending after `warmup` seconds, with spans of `span`
/// seconds; `None` without any.
pub fn verdict(windows: &[Window], warmup: f64, span: f64) -> Option<Verdict> {
    let after: Vec<&Window> = windows.iter().filter(|w| w.at > warmup).collect();
    let (first_at, last_at) = (after.first()?.at, after.last()?.at);
    let first: Vec<&Window> = after.iter().copied().filter(|w| w.at < first_at + span).collect();
    let last: Vec<&Window> = after.iter().copied().filter(|w| w.at > last_at - span).collect();
    let mean = |ws: &[&Window]| ws.iter().map(|w| w.rss_mean).sum::<u64>() / ws.len() as u64;
    let lag = |ws: &[&Window]| ws.iter().map(|w| w.max_lag).max().unwrap_or(0);
    let (base, end) = (mean(&first).max(1), mean(&last));
    let rss = after.iter().map(|w| w.rss_mean);
    Some(Verdict {
        rss_baseline: base,
        rss_end: end,
        rss_growth: end as f64 / base as f64 - 1.0,
        rss_window_range: (rss.clone().min().unwrap_or(0), rss.max().unwrap_or(0)),
        lag_first: lag(&first),
        lag_last: lag(&last),
        max_lag_after_warmup: lag(&after),
        p99_after_warmup_max: after
            .iter()
            .map(|w| w.p99)
            .filter(|p| !p.is_nan())
            .fold(0.0, f64::max),
    })
}

/// What the report's heading states about the run.
#[derive(Debug, Clone)]
pub struct Heading {
    pub rate: u64,
    pub secs: f64,
    pub partitions: i32,
    pub keys: u64,
    pub max_age_ms: u64,
    pub layout: String,
    pub warmup: f64,
    /// Length of the spans the verdict compares (see [`Verdict`]).
    pub span: f64,
}

fn mb(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// The report as Markdown and JSON.
pub fn render(h: &Heading, windows: &[Window], overall: &Histogram) -> (String, serde_json::Value) {
    let v = verdict(windows, h.warmup, h.span);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "### soak: {} events/s for {:.0} s ({} partitions, {} keys, max_age {} ms, layout {{{}}})\n",
        h.rate, h.secs, h.partitions, h.keys, h.max_age_ms, h.layout
    );
    if let Some(v) = &v {
        let _ = writeln!(
            md,
            "After a warm-up of {:.0} s: mean RSS {:.0} MB over the first {:.0} s, {:.0} MB over the last {:.0} s ({:+.1}%: {}; window means {:.0}-{:.0} MB); largest lag {} events in the first span, {} in the last ({}), at most {} events, window p99 latency at most {:.2} s; overall p50 {:.2} s, p99 {:.2} s, max {:.2} s over {} events.\n",
            h.warmup,
            mb(v.rss_baseline),
            h.span,
            mb(v.rss_end),
            h.span,
            v.rss_growth * 100.0,
            if v.flat() { "under 5%, flat" } else { "**5% or more**" },
            mb(v.rss_window_range.0),
            mb(v.rss_window_range.1),
            v.lag_first,
            v.lag_last,
            if v.lag_bounded() { "bounded" } else { "**growing**" },
            v.max_lag_after_warmup,
            v.p99_after_warmup_max,
            overall.quantile(0.5),
            overall.quantile(0.99),
            overall.max(),
            overall.count(),
        );
    }
    let _ = writeln!(
        md,
        "| at (s) | produced | committed | max lag (events) | RSS mean (MB) | RSS max (MB) | p50 (s) | p99 (s) | max (s) | commits |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for w in windows {
        let _ = writeln!(
            md,
            "| {:.0} | {} | {} | {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} | {} |",
            w.at,
            w.produced,
            w.committed,
            w.max_lag,
            mb(w.rss_mean),
            mb(w.rss_max),
            w.p50,
            w.p99,
            w.max,
            w.commits
        );
    }
    let num = |x: f64| if x.is_nan() { serde_json::Value::Null } else { json!(x) };
    let j = json!({
        "rate": h.rate, "seconds": h.secs, "partitions": h.partitions, "keys": h.keys,
        "max_age_ms": h.max_age_ms, "layout": h.layout, "warmup_seconds": h.warmup,
        "span_seconds": h.span,
        "latency_p50_seconds": num(overall.quantile(0.5)),
        "latency_p99_seconds": num(overall.quantile(0.99)),
        "latency_max_seconds": num(overall.max()),
        "events_measured": overall.count(),
        "verdict": v.as_ref().map(|v| json!({
            "rss_baseline_bytes": v.rss_baseline, "rss_end_bytes": v.rss_end,
            "rss_growth": v.rss_growth, "rss_flat": v.flat(),
            "rss_window_min_bytes": v.rss_window_range.0, "rss_window_max_bytes": v.rss_window_range.1,
            "lag_first_span_events": v.lag_first, "lag_last_span_events": v.lag_last,
            "lag_bounded": v.lag_bounded(),
            "max_lag_events": v.max_lag_after_warmup, "window_p99_max_seconds": v.p99_after_warmup_max,
        })),
        "windows": windows.iter().map(|w| json!({
            "at": w.at, "produced": w.produced, "committed": w.committed, "max_lag": w.max_lag,
            "rss_mean_bytes": w.rss_mean, "rss_max_bytes": w.rss_max,
            "p50": num(w.p50), "p99": num(w.p99), "max": num(w.max), "commits": w.commits,
        })).collect::<Vec<_>>(),
    });
    (md, j)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_are_bucket_upper_edges_capped_by_the_max() {
        let mut h = Histogram::default();
        assert!(h.quantile(0.5).is_nan());
        for ms in 1..=100 {
            h.record((ms as f64 + 0.5) / 1000.0); // 1.5 ms .. 100.5 ms
        }
        assert_eq!(h.count(), 100);
        // The 50th value, 50.5 ms, is in the bucket [50 ms, 60 ms).
        assert!((h.quantile(0.5) - 0.06).abs() < 1e-9, "{}", h.quantile(0.5));
        assert!((h.quantile(0.99) - 0.1).abs() < 1e-9);
        // The top bucket's edge (110 ms) is capped by the largest value seen.
        assert!((h.quantile(1.0) - 0.1005).abs() < 1e-9);
        let mut other = Histogram::default();
        other.record(700.0); // beyond the last bucket: kept, and the max is exact
        h.merge(&other);
        assert_eq!(h.quantile(1.0), 700.0);
    }

    fn window(at: f64, rss_mean: u64, max_lag: u64, p99: f64) -> Window {
        Window {
            at,
            produced: 0,
            committed: 0,
            max_lag,
            rss_mean,
            rss_max: rss_mean,
            p50: p99 / 2.0,
            p99,
            max: p99,
            commits: 0,
        }
    }

    #[test]
    fn verdict_ignores_warm_up_and_compares_the_first_and_last_spans() {
        let w = [
            window(60.0, 50, 90_000, 9.0), // warm-up: ignored
            window(120.0, 200, 3_000, 1.2),
            window(180.0, 240, 4_000, 1.5), // a noisy window: part of the range only
            window(240.0, 204, 2_000, 1.1),
            window(300.0, 212, 7_000, 1.1),
        ];
        let v = verdict(&w, 100.0, 100.0).unwrap();
        // First span: 120 and 180 (mean 220); last span: 240 and 300 (mean 208).
        assert_eq!((v.rss_baseline, v.rss_end), (220, 208));
        assert!((v.rss_growth - (208.0 / 220.0 - 1.0)).abs() < 1e-9);
        assert!(v.flat());
        assert_eq!(v.rss_window_range, (200, 240));
        assert_eq!((v.lag_first, v.lag_last, v.max_lag_after_warmup), (4_000, 7_000, 7_000));
        assert!(v.lag_bounded());
        assert_eq!(v.p99_after_warmup_max, 1.5);
        assert!(verdict(&w, 500.0, 100.0).is_none());
        // A leak: the last span well above the first; a lag growing without end.
        let leak = [window(120.0, 200, 1_000, 1.0), window(240.0, 230, 9_000, 5.0)];
        let v = verdict(&leak, 100.0, 60.0).unwrap();
        assert!(!v.flat() && !v.lag_bounded());
        let (md, j) = render(
            &Heading {
                rate: 1,
                secs: 240.0,
                partitions: 1,
                keys: 1,
                max_age_ms: 1,
                layout: String::new(),
                warmup: 100.0,
                span: 60.0,
            },
            &leak,
            &Histogram::default(),
        );
        assert!(md.contains("**5% or more**") && md.contains("**growing**"), "{md}");
        assert_eq!(j["windows"].as_array().unwrap().len(), 2);
        assert_eq!(j["verdict"]["rss_flat"], false);
    }

    #[test]
    fn a_window_averages_its_rss_samples_and_keeps_the_largest_lag() {
        let mut f = Filling::default();
        f.sample(100, 5);
        f.sample(300, 2);
        f.latency.record(0.5);
        let w = f.close(10.0, 50, 45, 3);
        assert_eq!((w.rss_mean, w.rss_max, w.max_lag, w.commits), (200, 300, 5, 3));
        assert!((w.p50 - 0.5).abs() < 1e-9);
        // The next window starts empty.
        let w2 = f.close(20.0, 50, 50, 3);
        assert_eq!((w2.rss_mean, w2.max_lag), (0, 0));
        assert!(w2.p50.is_nan());
    }
}
