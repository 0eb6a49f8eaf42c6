//! Sizes (`64MiB`) and durations (`5s`) as config values are written
//! (docs/config.md: batching, process settings, layout).

use std::time::Duration;

pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: usize = num.parse().ok()?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "kib" | "k" => 1 << 10,
        "mb" => 1_000_000,
        "mib" | "m" => 1 << 20,
        "gb" => 1_000_000_000,
        "gib" | "g" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let secs = match unit.trim() {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86400.0,
        _ => return None,
    };
    (secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}
