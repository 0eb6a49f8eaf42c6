//! Timestamps, dates and times of day: parsing and printing
//! (docs/types.md, dates and times). Timestamps are UTC microseconds,
//! dates are days since 1970-01-01 (Delta `date`), and times of day, which
//! Delta has no type for, are text `HH:MM:SS[.ffffff]` so no reader has to
//! guess a unit.

use chrono::{DateTime, NaiveDate, NaiveDateTime, TimeZone, Utc};

const MICROS_PER_DAY: i64 = 86_400_000_000;

/// The instants a Delta `timestamp` holds: 0001-01-01T00:00:00Z to
/// 9999-12-31T23:59:59.999999Z. Readers fail on a file holding one beyond
/// (polars panics, `deltalake` overflows), so a value outside is refused
/// where it is typed, as a value that does not convert (docs/types.md).
pub const TS_RANGE: std::ops::RangeInclusive<i64> =
    -62_135_596_800_000_000..=253_402_300_799_999_999;
/// The days a Delta `date` holds, 0001-01-01 to 9999-12-31.
pub const DATE_RANGE: std::ops::RangeInclusive<i32> = -719_162..=2_932_896;

pub fn format_ts(micros: i64) -> String {
    match Utc.timestamp_micros(micros).single() {
        Some(dt) => dt.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
        None => micros.to_string(),
    }
}

/// Parses a timestamp: RFC 3339, `YYYY-MM-DD HH:MM:SS[.f]` (taken as UTC)
/// and plain dates (midnight UTC).
pub fn parse_ts(s: &str) -> Option<i64> {
    if let Some(us) = rfc3339_fast(s.as_bytes()) {
        return Some(us);
    }
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

/// The common shape of RFC 3339 as CRM sources write it,
/// `YYYY-MM-DDTHH:MM:SS[.f]` then `Z` or `±HH:MM`, read without chrono's
/// general parser (a tenth of its time: flat JSON infers and converts every
/// such text, docs/schema.md). None for anything else, which the general
/// parser then decides; where both read a text they agree (tested).
fn rfc3339_fast(b: &[u8]) -> Option<i64> {
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let mut v = 0i64;
        for &c in b.get(r)? {
            if !c.is_ascii_digit() {
                return None;
            }
            v = v * 10 + i64::from(c - b'0');
        }
        Some(v)
    };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if !(1..=12).contains(&mo)
        || d < 1
        || d > month_days[mo as usize - 1]
        || h > 23
        || mi > 59
        || sec > 59
    {
        return None;
    }
    let mut at = 19;
    let mut micros = 0;
    if b[at] == b'.' {
        let digits = b[at + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if !(1..=9).contains(&digits) {
            return None;
        }
        let frac = num(at + 1..at + 1 + digits)?;
        micros = match digits {
            1..=6 => frac * 10i64.pow(6 - digits as u32),
            _ => frac / 10i64.pow(digits as u32 - 6),
        };
        at += 1 + digits;
    }
    let offset = match b.get(at..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (oh, om) = (num(at + 1..at + 3)?, num(at + 4..at + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let o = oh * 3600 + om * 60;
            if *sign == b'-' {
                -o
            } else {
                o
            }
        }
        _ => return None,
    };
    // Days from the civil date (proleptic Gregorian), as chrono counts them.
    let (y, m) = if mo <= 2 { (y - 1, mo + 9) } else { (y, mo - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset;
    Some(secs * 1_000_000 + micros)
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
    // Saturated beyond what i64 microseconds hold: outside `TS_RANGE`, refused.
    i64::from(days).saturating_mul(MICROS_PER_DAY)
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

    /// The fast reader agrees with chrono's on every text it takes, and
    /// leaves to chrono what it does not take.
    #[test]
    fn timestamps_read_fast_agree_with_the_general_parser() {
        let general = |s: &str| {
            DateTime::parse_from_rfc3339(s).ok().map(|dt| dt.with_timezone(&Utc).timestamp_micros())
        };
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut taken = 0;
        for _ in 0..20_000 {
            let frac = match next(4) {
                0 => String::new(),
                1 => format!(".{}", next(1000)),
                2 => format!(".{:06}", next(1_000_000)),
                _ => format!(".{:09}", next(1_000_000_000)),
            };
            let zone = match next(3) {
                0 => "Z".to_string(),
                1 => format!("+{:02}:{:02}", next(24), next(60)),
                _ => format!("-{:02}:{:02}", next(25), next(61)),
            };
            let s = format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{frac}{zone}",
                next(10_000),
                next(14),
                next(32),
                next(25),
                next(61),
                next(61)
            );
            if let Some(fast) = rfc3339_fast(s.as_bytes()) {
                taken += 1;
                assert_eq!(Some(fast), general(&s), "{s}");
            }
        }
        assert!(taken > 5_000, "{taken}");
        for s in [
            "2024-02-29T23:30:00Z",
            "1969-12-31T23:59:59.999999Z",
            "0001-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999999+01:00",
        ] {
            assert_eq!(rfc3339_fast(s.as_bytes()), general(s), "{s}");
            assert!(rfc3339_fast(s.as_bytes()).is_some(), "{s}");
        }
        for s in [
            "2023-02-29T00:00:00Z",
            "2024-01-01T00:00:60Z",
            "2024-01-01 00:00:00Z",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00.Z",
        ] {
            assert_eq!(rfc3339_fast(s.as_bytes()), None, "{s}");
        }
    }

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
