//! Timestamps, dates and times of day: parsing and printing
//! (docs/types.md, dates and times). Timestamps are UTC microseconds,
//! dates are days since 1970-01-01 (Delta `date`), and times of day, which
//! Delta has no type for, are text `HH:MM:SS[.ffffff]` so no reader has to
//! guess a unit.

use chrono::{DateTime, NaiveDate, NaiveDateTime, TimeZone, Utc};

const MICROS_PER_DAY: i64 = 86_400_000_000;

pub fn format_ts(micros: i64) -> String {
    match Utc.timestamp_micros(micros).single() {
        Some(dt) => dt.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
        None => micros.to_string(),
    }
}

/// Parses a timestamp: RFC 3339, `YYYY-MM-DD HH:MM:SS[.f]` (taken as UTC)
/// and plain dates (midnight UTC).
pub fn parse_ts(s: &str) -> Option<i64> {
    if let Ok(dt) = DateTime::parse_from_rfc3339(s) {
        return Some(dt.with_timezone(&Utc).timestamp_micros());
    }
    for fmt in ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"] {
        if let Ok(dt) = NaiveDateTime::parse_from_str(s, fmt) {
            return Some(dt.and_utc().timestamp_micros());
        }
    }
    parse_date(s).map(date_to_ts)
}

fn epoch() -> NaiveDate {
    NaiveDate::from_ymd_opt(1970, 1, 1).expect("valid date")
}

/// `YYYY-MM-DD` as days since the epoch.
pub fn parse_date(s: &str) -> Option<i32> {
    if s.len() != 10 {
        return None;
    }
    let d = NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?;
    i32::try_from(d.signed_duration_since(epoch()).num_days()).ok()
}

pub fn format_date(days: i32) -> String {
    match epoch().checked_add_signed(chrono::Duration::days(days as i64)) {
        Some(d) => d.format("%Y-%m-%d").to_string(),
        None => days.to_string(),
    }
}

/// Midnight UTC of a date, as a timestamp.
pub fn date_to_ts(days: i32) -> i64 {
    days as i64 * MICROS_PER_DAY
}

/// The date of a timestamp that is exactly midnight UTC (None otherwise:
/// a date column never silently drops a time of day).
pub fn ts_to_date(micros: i64) -> Option<i32> {
    (micros % MICROS_PER_DAY == 0).then(|| i32::try_from(micros / MICROS_PER_DAY).ok()).flatten()
}

/// A time of day (or a MySQL `TIME` duration, which may be negative or
/// beyond 24 hours) in microseconds, as `HH:MM:SS` with `.ffffff` when
/// the fraction is not zero.
pub fn format_time(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let m = micros.unsigned_abs();
    let (secs, frac) = (m / 1_000_000, m % 1_000_000);
    let (h, mi, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    if frac == 0 {
        format!("{sign}{h:02}:{mi:02}:{s:02}")
    } else {
        format!("{sign}{h:02}:{mi:02}:{s:02}.{frac:06}")
    }
}

/// Parses `[-]HH:MM:SS[.f]` (fractions beyond microseconds are truncated)
/// into microseconds.
pub fn parse_time(s: &str) -> Option<i64> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s),
    };
    let (hms, frac) = body.split_once('.').unwrap_or((body, ""));
    let mut parts = hms.split(':');
    let (h, m, sec) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || m.len() != 2 || sec.len() != 2 || h.len() < 2 {
        return None;
    }
    let num = |x: &str| -> Option<i64> {
        x.bytes().all(|b| b.is_ascii_digit()).then(|| x.parse().ok()).flatten()
    };
    let (h, m, sec) = (num(h)?, num(m)?, num(sec)?);
    if m > 59 || sec > 59 || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let micros = format!("{frac:0<6}")[..6].parse::<i64>().ok()?;
    let v = h.checked_mul(3_600_000_000)?.checked_add(m * 60_000_000 + sec * 1_000_000 + micros)?;
    Some(if neg { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip_before_and_after_the_epoch() {
        for (text, days) in [("1970-01-01", 0), ("1969-07-20", -165), ("0001-01-01", -719162)] {
            assert_eq!(parse_date(text), Some(days), "{text}");
            assert_eq!(format_date(days), text);
        }
        assert_eq!(ts_to_date(date_to_ts(-165)), Some(-165));
        assert_eq!(ts_to_date(1), None);
        assert_eq!(parse_date("2024-02-30"), None);
    }

    #[test]
    fn times_print_microseconds_only_when_present() {
        // io.debezium.time.MicroTime 36930123456 is 10:15:30.123456.
        assert_eq!(format_time(36_930_123_456), "10:15:30.123456");
        assert_eq!(format_time(0), "00:00:00");
        assert_eq!(format_time(86_400_000_000), "24:00:00");
        assert_eq!(format_time(-3_020_399_000_000), "-838:59:59");
        assert_eq!(format_time(1_000), "00:00:00.001000");
        for t in ["10:15:30.123456", "00:00:00", "-838:59:59", "23:59:59.000001"] {
            assert_eq!(format_time(parse_time(t).unwrap()), t);
        }
        assert_eq!(parse_time("10:15:30.1234567"), Some(36_930_123_456), "nanoseconds truncate");
        for bad in ["10:15", "1:02:03", "10:60:00", "aa:bb:cc", "10:15:30.x", "10:15:30:00"] {
            assert!(parse_time(bad).is_none(), "{bad}");
        }
    }
}
