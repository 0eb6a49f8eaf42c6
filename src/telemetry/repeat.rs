//! Log lines that would repeat many times per millisecond during an outage
//! (the same Kafka client error, from librdkafka's threads and from every
//! partition queue): each distinct text is logged at most once per interval,
//! with how often it occurred since it was last logged (docs/operations.md,
//! logs during outages).

use std::time::{Duration, Instant};

/// How often one repeating error is logged.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// Kafka client errors, from librdkafka's callback and the consume loop.
pub static CLIENT_ERRORS: RepeatFilter = RepeatFilter::new();

/// Storage requests retried, by table and operation: during a store's
/// outage every request of every run retries (each its own path and
/// error text, so they are keyed by what repeats).
pub static STORAGE_RETRIES: RepeatFilter = RepeatFilter::new();

/// The distinct texts seen lately: when each was last logged, and how often
/// it occurred since. Bounded: the oldest is forgotten past 64.
pub struct RepeatFilter(std::sync::Mutex<Vec<(String, Instant, u64)>>);

impl RepeatFilter {
    pub const fn new() -> Self {
        RepeatFilter(std::sync::Mutex::new(Vec::new()))
    }

    /// Some(occurrences since the last log line, this one included) when
    /// `text` is due to be logged now; None while it is suppressed.
    pub fn admit(&self, text: &str) -> Option<u64> {
        self.admit_at(text, Instant::now())
    }

    pub fn admit_at(&self, text: &str, now: Instant) -> Option<u64> {
        let mut seen = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match seen.iter_mut().find(|(t, _, _)| t == text) {
            None => {
                if seen.len() >= 64 {
                    seen.remove(0);
                }
                seen.push((text.to_string(), now, 0));
                Some(1)
            }
            Some((_, last, count)) => {
                *count += 1;
                if now.duration_since(*last) < INTERVAL {
                    return None;
                }
                let n = *count;
                *last = now;
                *count = 0;
                Some(n)
            }
        }
    }
}

impl Default for RepeatFilter {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeating_client_error_is_logged_once_per_interval_with_a_count() {
        let f = RepeatFilter::new();
        let t0 = Instant::now();
        assert_eq!(f.admit_at("AllBrokersDown", t0), Some(1));
        for i in 1..=500 {
            assert_eq!(f.admit_at("AllBrokersDown", t0 + Duration::from_micros(i)), None);
        }
        assert_eq!(f.admit_at("Resolve", t0), Some(1), "another error is logged at once");
        assert_eq!(f.admit_at("AllBrokersDown", t0 + INTERVAL), Some(501));
        assert_eq!(f.admit_at("AllBrokersDown", t0 + INTERVAL), None);
    }
}
