//! The seeded CRM workload both benchmarks send: Debezium JSON envelopes of
//! account rows in one of three column mixes, with a configurable
//! insert/update/delete/late/duplicate mix and key choice.
//!
//! Separate from the bench that times it because the broker bench streams
//! the same events through Kafka: one generator, two consumers.

use std::fmt::Write as _;

use changelake::config::Format;
use changelake::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Distribution {
    Uniform,
    /// 90% of updates on the newest 10% of keys.
    Recent,
    /// Recency-skewed power law: the key `n·u⁴` from the newest (u uniform),
    /// so half of the updates hit the newest 6% of keys and a tenth the oldest third.
    Skewed,
}

impl Distribution {
    pub fn parse(s: &str) -> Result<Distribution> {
        Ok(match s {
            "uniform" => Distribution::Uniform,
            "recent" => Distribution::Recent,
            "skewed" => Distribution::Skewed,
            other => {
                return Err(Error::Usage(format!(
                    "--distribution: `{other}` (uniform, recent, skewed)"
                )))
            }
        })
    }
}

/// Column mix of the account rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Shape {
    /// About 20 columns, mostly short text (the CRM account entity).
    Crm,
    /// 10 columns, mostly numbers and timestamps (a ledger-like entity):
    /// as flat JSON with `op` and `lsn`, the 12-column row of issue 20's
    /// narrow workload.
    Narrow,
    /// The CRM columns plus 24 custom fields (text, numbers, flags, dates): 44 columns.
    Wide,
}

impl Shape {
    pub fn parse(s: &str) -> Result<Shape> {
        Ok(match s {
            "crm" => Shape::Crm,
            "narrow" => Shape::Narrow,
            "wide" => Shape::Wide,
            other => return Err(Error::Usage(format!("--columns: `{other}` (crm, narrow, wide)"))),
        })
    }
}

/// What an update changes in its row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Changes {
    /// Every generated column takes new values.
    All,
    /// This many columns (chosen per update) take new values and the rest
    /// keep the loaded row's, as CRM edits do; `modifiedon` and
    /// `versionnumber` change with every update, as the CRM stamps them.
    Columns(u32),
}

impl std::fmt::Display for Changes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Changes::All => f.write_str("all columns"),
            Changes::Columns(n) => write!(f, "{n} columns"),
        }
    }
}

impl Changes {
    /// `--changed-columns`: `all` or a number.
    pub fn parse(s: &str) -> Result<Changes> {
        match s {
            "all" => Ok(Changes::All),
            n => n.parse().map(Changes::Columns).map_err(|_| {
                Error::Usage(format!("--changed-columns: `{s}` (all, or a number of columns)"))
            }),
        }
    }
}

/// Shares of a batch, in percent (the rest are updates).
#[derive(Debug, Clone, Copy)]
pub struct Mix {
    pub insert: u32,
    pub delete: u32,
    pub late: u32,
    pub duplicate: u32,
}

impl Mix {
    pub fn parse(s: &str) -> Result<Mix> {
        let mut m = Mix { insert: 0, delete: 0, late: 0, duplicate: 0 };
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| Error::Usage(format!("--mix: `{part}` is not name=percent")))?;
            let v: u32 = v.trim().parse().map_err(|_| {
                Error::Usage(format!("--mix: `{part}`: percent must be an integer"))
            })?;
            match k.trim() {
                "insert" => m.insert = v,
                "delete" => m.delete = v,
                "late" => m.late = v,
                "duplicate" => m.duplicate = v,
                "update" => {}
                other => {
                    return Err(Error::Usage(format!(
                        "--mix: unknown kind `{other}` (insert, update, delete, late, duplicate)"
                    )))
                }
            }
        }
        if m.insert + m.delete + m.late + m.duplicate > 100 {
            return Err(Error::Usage("--mix: shares add up to more than 100".into()));
        }
        Ok(m)
    }
}

/// SplitMix64: tiny, seedable, good enough for workload shapes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

const CITIES: [&str; 12] = [
    "Berlin",
    "Hamburg",
    "Munich",
    "Cologne",
    "Frankfurt",
    "Stuttgart",
    "Leipzig",
    "Dresden",
    "Bremen",
    "Hanover",
    "Nuremberg",
    "Essen",
];
/// The narrow shape's currencies.
const CURRENCIES: [&str; 4] = ["EUR", "USD", "GBP", "CHF"];

const WORDS: [&str; 8] =
    ["solutions", "logistics", "retail", "energy", "health", "software", "foods", "mobility"];

/// The workload: key space, sequence counter and the mix.
pub struct Workload {
    rng: Rng,
    /// Keys 0..next_key exist (or existed).
    next_key: u64,
    lsn: u64,
    mix: Mix,
    dist: Distribution,
    shape: Shape,
    changes: Changes,
    /// How each event is written: a Debezium envelope, or (`Json`) the flat
    /// row itself with its `op` and `lsn` beside the columns, as a
    /// `format: json` source reads it; a delete carries the row as it was.
    format: Format,
}

impl Workload {
    pub fn new(seed: u64, keys: u64, mix: Mix, dist: Distribution) -> Workload {
        // Loaded rows of key k carry lsn 2k+2; a late event for k uses 2k+1,
        // older than anything ever stored for it. Update lsns start above all of them.
        Workload {
            rng: Rng(seed),
            next_key: keys,
            lsn: 2 * keys + 1_000_000,
            mix,
            dist,
            shape: Shape::Crm,
            changes: Changes::All,
            format: Format::Debezium,
        }
    }

    pub fn with_format(mut self, format: Format) -> Workload {
        self.format = format;
        self
    }

    pub fn with_shape(mut self, shape: Shape) -> Workload {
        self.shape = shape;
        self
    }

    pub fn with_changes(mut self, changes: Changes) -> Workload {
        self.changes = changes;
        self
    }

    /// Columns an update may change, besides `modifiedon` and `versionnumber`.
    fn editable(shape: Shape) -> u64 {
        match shape {
            Shape::Narrow => 5,
            Shape::Crm => 12,
            Shape::Wide => 36,
        }
    }

    /// Per editable column: the seed its value derives from at `version` —
    /// the version's own, or the loaded row's (version 0) for a column this
    /// update leaves alone.
    fn seeds(shape: Shape, key: u64, version: u64, changes: Changes) -> Vec<u64> {
        let seed = |v: u64| Rng(key.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ v).next();
        let (loaded, now) = (seed(0), seed(version));
        let n = Self::editable(shape) as usize;
        match changes {
            Changes::All => vec![now; n],
            Changes::Columns(k) => {
                let mut order: Vec<usize> = (0..n).collect();
                let mut r = Rng(now ^ 0x5EED);
                // The first k of a partial shuffle: k distinct columns.
                for i in 0..(k as usize).min(n) {
                    let j = i + r.below((n - i) as u64) as usize;
                    order.swap(i, j);
                }
                let mut s = vec![loaded; n];
                for &c in order.iter().take(k as usize) {
                    s[c] = now;
                }
                s
            }
        }
    }

    /// One account row as the Debezium `after` object.
    fn row(out: &mut String, shape: Shape, key: u64, version: u64, changes: Changes) {
        let s = Self::seeds(shape, key, version, changes);
        // Stamped by every update.
        let h = Rng(key.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ version).next();
        if shape == Shape::Narrow {
            let _ = write!(
                out,
                "{{\"accountid\":{key},\"accountnumber\":\"AC-{key:08}\",\"statecode\":{},\"balance\":{}.{:02},\"creditlimit\":{}.0,\
                 \"currency\":\"{}\",\"openinvoices\":{},\"createdon\":\"2024-{:02}-{:02}T08:00:00Z\",\
                 \"modifiedon\":\"2026-{:02}-{:02}T{:02}:{:02}:00Z\",\"versionnumber\":{version}}}",
                (s[0] >> 40) % 2,
                (s[1] >> 24) % 50_000_000,
                (s[1] >> 30) % 100,
                ((s[2] >> 28) % 1_000) * 1_000,
                CURRENCIES[((s[3] >> 20) % 4) as usize],
                (s[4] >> 36) % 40,
                1 + key % 12,
                1 + key % 28,
                1 + (h >> 44) % 12,
                1 + (h >> 48) % 28,
                (h >> 52) % 24,
                (h >> 56) % 60,
            );
            return;
        }
        let city = CITIES[(s[1] % 12) as usize];
        let word = WORDS[((s[0] >> 8) % 8) as usize];
        let (dcity, dword) = (CITIES[(s[9] % 12) as usize], WORDS[((s[9] >> 8) % 8) as usize]);
        let _ = write!(
            out,
            "{{\"accountid\":{key},\"name\":\"Account {key} {word}\",\"accountnumber\":\"AC-{key:08}\",\"address1_city\":\"{city}\",\
             \"address1_country\":\"DE\",\"address1_postalcode\":\"{:05}\",\"telephone1\":\"+49 {} {:07}\",\
             \"emailaddress1\":\"info@account{key}.example\",\"websiteurl\":\"https://account{key}.example\",\
             \"industrycode\":{},\"revenue\":{}.{:02},\"numberofemployees\":{},\"statecode\":{},\"ownerid\":\"{:016x}\",\
             \"createdon\":\"2024-{:02}-{:02}T08:00:00Z\",\"modifiedon\":\"2026-{:02}-{:02}T{:02}:{:02}:00Z\",\
             \"description\":\"{dword} customer in {dcity}, segment {}\",\"creditlimit\":{}.0,\"donotemail\":{},\"versionnumber\":{version}}}",
            s[2] % 100_000,
            30 + s[3] % 70,
            (s[3] >> 12) % 10_000_000,
            (s[4] >> 20) % 40,
            (s[5] >> 24) % 50_000_000,
            (s[5] >> 30) % 100,
            (s[6] >> 32) % 5_000,
            (s[7] >> 40) % 2,
            s[8].rotate_left(17),
            1 + key % 12,
            1 + key % 28,
            1 + (h >> 44) % 12,
            1 + (h >> 48) % 28,
            (h >> 52) % 24,
            (h >> 56) % 60,
            (s[9] >> 36) % 9,
            ((s[10] >> 28) % 1_000) * 1_000,
            (s[11] >> 61) % 2 == 1,
        );
        if shape == Shape::Wide {
            out.pop(); // the closing brace
            for i in 0..24u64 {
                let g = Rng(s[12 + i as usize] ^ i).next();
                let _ = match i % 4 {
                    0 => write!(
                        out,
                        ",\"custom_{i:02}\":\"{} {:x}\"",
                        WORDS[(g % 8) as usize],
                        g >> 20
                    ),
                    1 => write!(out, ",\"custom_{i:02}\":{}", g % 1_000_000),
                    2 => write!(out, ",\"custom_{i:02}\":{}", g.is_multiple_of(3)),
                    _ => write!(
                        out,
                        ",\"custom_{i:02}\":\"2025-{:02}-{:02}T00:00:00Z\"",
                        1 + g % 12,
                        1 + (g >> 8) % 28
                    ),
                };
            }
            out.push('}');
        }
    }

    fn envelope(&self, out: &mut String, op: char, key: u64, lsn: u64, version: u64) {
        let (shape, changes) = (self.shape, self.changes);
        if self.format == Format::Json {
            Self::row(out, shape, key, version, changes);
            out.pop(); // the closing brace
            let _ = writeln!(out, ",\"op\":\"{op}\",\"lsn\":{lsn}}}");
            return;
        }
        let ts = 1_764_000_000_000u64 + lsn % 1_000_000_000;
        out.push_str("{\"before\":");
        if op == 'd' {
            Self::row(out, shape, key, version, changes);
            out.push_str(",\"after\":null");
        } else {
            out.push_str("null,\"after\":");
            Self::row(out, shape, key, version, changes);
        }
        let _ = writeln!(
            out,
            ",\"source\":{{\"version\":\"2.7.0.Final\",\"connector\":\"postgresql\",\"name\":\"crm\",\"ts_ms\":{ts},\"db\":\"crm\",\"schema\":\"public\",\"table\":\"account\",\"lsn\":{lsn},\"txId\":{}}},\"op\":\"{op}\",\"ts_ms\":{}}}",
            lsn / 8,
            ts + 40
        );
    }

    /// Snapshot events (`op: r`) for keys `from..to`.
    pub fn load_chunk(&self, from: u64, to: u64) -> String {
        let mut out = String::with_capacity(((to - from) * 800) as usize);
        for k in from..to {
            self.envelope(&mut out, 'r', k, 2 * k + 2, 0);
        }
        out
    }

    fn pick(&mut self) -> u64 {
        match self.dist {
            Distribution::Uniform => self.rng.below(self.next_key),
            Distribution::Recent => {
                let n = self.next_key;
                let hot = (n / 10).max(1);
                if self.rng.below(100) < 90 {
                    n - 1 - self.rng.below(hot)
                } else {
                    self.rng.below(n)
                }
            }
            Distribution::Skewed => {
                let n = self.next_key;
                let u = (self.rng.next() >> 11) as f64 / (1u64 << 53) as f64;
                n - 1 - ((n as f64 * u.powi(4)) as u64).min(n - 1)
            }
        }
    }

    /// One update batch of `n` events (one JSON line each).
    pub fn batch(&mut self, n: usize) -> String {
        let mut out = String::with_capacity(n * 820);
        let mut starts: Vec<usize> = Vec::with_capacity(n);
        for _ in 0..n {
            let roll = self.rng.below(100) as u32;
            let m = self.mix;
            let start = out.len();
            if roll < m.duplicate && !starts.is_empty() {
                // At-least-once delivery: an exact copy of an earlier event of the batch.
                let s = starts[self.rng.below(starts.len() as u64) as usize];
                let end = s + out[s..].find('\n').expect("line") + 1;
                let line = out[s..end].to_string();
                out.push_str(&line);
            } else if roll < m.duplicate + m.insert {
                let k = self.next_key;
                self.next_key += 1;
                self.lsn += 1;
                self.envelope(&mut out, 'c', k, self.lsn, self.lsn);
            } else if roll < m.duplicate + m.insert + m.delete {
                let k = self.pick();
                self.lsn += 1;
                self.envelope(&mut out, 'd', k, self.lsn, self.lsn);
            } else if roll < m.duplicate + m.insert + m.delete + m.late {
                let k = self.pick();
                self.envelope(&mut out, 'u', k, 2 * k + 1, 1);
            } else {
                let k = self.pick();
                self.lsn += 1;
                self.envelope(&mut out, 'u', k, self.lsn, self.lsn);
            }
            starts.push(start);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use changelake::source::file::read_debezium_jsonl;

    use super::*;

    #[test]
    fn workload_is_reproducible_and_follows_the_mix() {
        let mix = Mix::parse("insert=10,delete=5,late=5,duplicate=10").unwrap();
        let a = Workload::new(7, 1000, mix, Distribution::Uniform).batch(2000);
        let b = Workload::new(7, 1000, mix, Distribution::Uniform).batch(2000);
        assert_eq!(a, b, "same seed, same batch");
        let lines: Vec<serde_json::Value> =
            a.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2000);
        let ops = |op: &str| lines.iter().filter(|l| l["op"] == op).count();
        assert!((150..250).contains(&ops("c")), "inserts {}", ops("c"));
        assert!((50..150).contains(&ops("d")), "deletes {}", ops("d"));
        let after =
            lines.iter().find(|l| l["op"] == "u").unwrap()["after"].as_object().unwrap().len();
        assert_eq!(after, 20, "about twenty columns");
        // Late events are older than the loaded row of their key.
        let late =
            lines.iter().filter(|l| l["source"]["lsn"].as_u64().unwrap() < 1_000_000).count();
        assert!(late >= 50, "late {late}");
    }

    #[test]
    fn recent_distribution_hits_the_newest_tenth() {
        let mix = Mix::parse("").unwrap();
        let text = Workload::new(1, 10_000, mix, Distribution::Recent).batch(5000);
        let hot = text
            .lines()
            .filter(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["after"]["accountid"]
                    .as_u64()
                    .unwrap()
                    >= 9000
            })
            .count();
        assert!(hot > 4400 && hot < 4800, "{hot} of 5000 on the newest 10%");
    }

    #[test]
    fn skewed_distribution_favours_the_newest_keys_but_reaches_old_ones() {
        let text =
            Workload::new(3, 100_000, Mix::parse("").unwrap(), Distribution::Skewed).batch(10_000);
        let keys: Vec<u64> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["after"]["accountid"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        let newest = keys.iter().filter(|&&k| k >= 94_000).count();
        let oldest = keys.iter().filter(|&&k| k < 33_000).count();
        assert!(newest > 4700 && newest < 5300, "{newest} of 10000 on the newest 6%");
        assert!(oldest > 800 && oldest < 1200, "{oldest} of 10000 on the oldest third");
    }

    #[test]
    fn an_update_changes_the_given_number_of_columns_plus_the_crm_stamps() {
        let wl = |c| {
            Workload::new(9, 1000, Mix::parse("").unwrap(), Distribution::Uniform)
                .with_shape(Shape::Wide)
                .with_changes(c)
        };
        let loaded: Vec<serde_json::Value> = wl(Changes::All)
            .load_chunk(0, 1000)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        for (changes, expect) in [(Changes::Columns(3), 3..=3), (Changes::All, 20..=36)] {
            let text = wl(changes).batch(200);
            for l in text.lines() {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                let after = v["after"].as_object().unwrap();
                let key = after["accountid"].as_u64().unwrap() as usize;
                let before = loaded[key]["after"].as_object().unwrap();
                let changed: Vec<&String> = after
                    .keys()
                    .filter(|k| !["modifiedon", "versionnumber"].contains(&k.as_str()))
                    .filter(|k| after[*k] != before[*k])
                    .collect();
                // A new value may equal the old one by chance (flags, small ranges).
                let n = changed.len();
                assert!(n <= *expect.end() && n + 2 >= *expect.start(), "{changes:?}: {changed:?}");
                assert_ne!(after["versionnumber"], before["versionnumber"]);
            }
        }
        assert_eq!(Changes::parse("4").unwrap(), Changes::Columns(4));
        assert_eq!(Changes::parse("all").unwrap(), Changes::All);
        assert!(Changes::parse("some").is_err());
    }

    #[test]
    fn flat_rows_carry_op_and_lsn_beside_the_columns_and_decode_as_json() {
        let mix = Mix::parse("insert=10,delete=10").unwrap();
        let text = Workload::new(4, 500, mix, Distribution::Uniform)
            .with_shape(Shape::Narrow)
            .with_format(Format::Json)
            .batch(400);
        let rows: Vec<serde_json::Value> =
            text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        for r in &rows {
            let o = r.as_object().unwrap();
            // The 10 narrow columns plus op and lsn, no envelope.
            assert_eq!(o.len(), 12, "{r}");
            assert!(["c", "u", "d"].contains(&o["op"].as_str().unwrap()), "{r}");
            assert!(o["lsn"].is_u64() && o["accountid"].is_u64(), "{r}");
        }
        let deletes = rows.iter().filter(|r| r["op"] == "d").count();
        assert!((20..70).contains(&deletes), "deletes {deletes}");
        let b =
            changelake::source::file::read_jsonl(std::path::Path::new("x"), &text.into()).unwrap();
        assert_eq!((b.rows.len(), b.unparsable.len()), (400, 0));
        assert!(b.columns.iter().any(|c| c == "op") && b.columns.iter().any(|c| c == "lsn"));
        assert_eq!(Format::parse("json"), Some(Format::Json));
        assert!(Format::parse("avro").is_none());
    }

    #[test]
    fn column_shapes_have_their_column_counts_and_decode() {
        for (shape, n) in [(Shape::Crm, 20), (Shape::Narrow, 10), (Shape::Wide, 44)] {
            let text = Workload::new(5, 100, Mix::parse("").unwrap(), Distribution::Uniform)
                .with_shape(shape)
                .batch(50);
            for l in text.lines() {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                assert_eq!(v["after"].as_object().unwrap().len(), n, "{shape:?}: {l}");
            }
            let b =
                read_debezium_jsonl("x", &text.clone().into(), &["source.lsn".to_string()], None);
            assert_eq!(b.rows.len(), 50);
            assert!(b.unparsable.is_empty());
        }
    }
}
