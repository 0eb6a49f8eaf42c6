//! The seeded random stream the layouts are compared on (see the test's
//! module comment): a load, then batches of updates of some columns, NULLs
//! sent and fields left out, deletes and revivals, new keys, late and
//! duplicate events, sparse columns and one wide row a batch, written as
//! flat JSON lines or as Debezium envelopes.

use std::collections::BTreeMap;

/// A small deterministic generator (xorshift64*), so a failure names its seed.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

pub(crate) const KEYS: u64 = 240;
const BATCHES: u32 = 6;

/// What the generator remembers of a key.
#[derive(Default, Clone)]
struct Key {
    seq: u64,
    deleted: bool,
}

/// One event of the stream, before it is written in a source format.
pub(crate) struct Event {
    id: u64,
    seq: u64,
    delete: bool,
    /// Carries 80 more fields than any other row.
    wide: bool,
}

/// An event's row as JSON fields. `ts` follows the sequence, so scd2's
/// business time (`valid_time: column:ts`) orders versions as `seq` does.
fn fields(rng: &mut Rng, e: &Event) -> Vec<String> {
    let seq = e.seq;
    let mut fields = vec![
        format!("\"id\":{}", e.id),
        format!("\"seq\":{seq}"),
        format!(
            "\"ts\":\"2024-01-01T{:02}:{:02}:{:02}Z\"",
            seq / 3600 % 24,
            seq / 60 % 60,
            seq % 60
        ),
    ];
    // Each base column: a value, an explicit NULL, or left out.
    let values = [
        ("name", format!("\"n{}\"", rng.below(5))),
        ("amount", format!("{}.{}", rng.below(1000), rng.below(100))),
        ("qty", rng.below(50).to_string()),
        ("flag", (rng.below(2) == 0).to_string()),
    ];
    for (name, value) in values {
        match rng.below(10) {
            0 => fields.push(format!("\"{name}\":null")),
            1 => {}
            _ => fields.push(format!("\"{name}\":{value}")),
        }
    }
    // Sparse columns: each in a few rows only, of one type each.
    for s in 0..6 {
        if rng.chance(4) {
            fields.push(format!("\"s{s}\":\"v{}\"", rng.below(3)));
        }
    }
    for s in 0..3 {
        if rng.chance(3) {
            fields.push(format!("\"k{s}\":{}", rng.below(100)));
        }
    }
    if e.wide {
        for w in 0..80 {
            fields.push(format!("\"w{w}\":{}", rng.below(10)));
        }
    }
    fields
}

/// A flat JSON line; `op` says whether it is a delete (`delete_when`).
pub(crate) fn flat(rng: &mut Rng, e: &Event) -> String {
    let mut f = fields(rng, e);
    f.push(format!("\"op\":\"{}\"", if e.delete { "D" } else { "U" }));
    format!("{{{}}}\n", f.join(","))
}

/// A Debezium envelope (`source.lsn` is the sequence). An update may send
/// its large text column as the connector's placeholder for an unchanged
/// TOAST value, which takes the stored value (docs/events.md).
pub(crate) fn debezium(rng: &mut Rng, e: &Event) -> String {
    let source = format!("\"source\":{{\"lsn\":{},\"ts_ms\":{}}}", e.seq, 1_000 * e.seq);
    if e.delete {
        return format!(
            "{{\"before\":{{\"id\":{}}},\"after\":null,{source},\"op\":\"d\",\"ts_ms\":1}}\n",
            e.id
        );
    }
    let mut f = fields(rng, e);
    let note = match rng.below(10) {
        0..=2 if e.seq > 1 => "__debezium_unavailable_value".to_string(),
        _ => format!("a long note {}", rng.below(7)),
    };
    f.push(format!("\"note\":\"{note}\""));
    let op = if e.seq == 1 { "c" } else { "u" };
    format!(
        "{{\"before\":null,\"after\":{{{}}},{source},\"op\":\"{op}\",\"ts_ms\":1}}\n",
        f.join(",")
    )
}

/// The stream's batches, each event written by `line`: a load, then
/// batches of updates, deletes, revivals, new keys, late and duplicate
/// events.
pub(crate) fn batches(seed: u64, line: fn(&mut Rng, &Event) -> String) -> Vec<String> {
    let mut rng = Rng(seed);
    let mut keys: BTreeMap<u64, Key> = BTreeMap::new();
    let mut out = vec![];
    let mut load = String::new();
    for id in 0..KEYS * 3 / 4 {
        load.push_str(&line(&mut rng, &Event { id, seq: 1, delete: false, wide: false }));
        keys.insert(id, Key { seq: 1, deleted: false });
    }
    out.push(load);
    for _ in 0..BATCHES {
        let mut batch: Vec<String> = vec![];
        let wide_at = rng.below(150);
        for i in 0..150 {
            let id = rng.below(KEYS);
            let wide = i == wide_at;
            let known = keys.get(&id).cloned();
            let e = match known {
                // A late event: older than what the key has.
                Some(k) if k.seq > 2 && rng.chance(8) => {
                    let seq = 1 + rng.below(k.seq - 1);
                    Event { id, seq, delete: rng.chance(20), wide }
                }
                Some(k) => {
                    let seq = k.seq + 1 + rng.below(3);
                    let delete = !k.deleted && rng.chance(10);
                    keys.insert(id, Key { seq, deleted: delete });
                    Event { id, seq, delete, wide }
                }
                None => {
                    let seq = 1 + rng.below(5);
                    keys.insert(id, Key { seq, deleted: false });
                    Event { id, seq, delete: false, wide }
                }
            };
            let l = line(&mut rng, &e);
            // An exact duplicate, sometimes, later in the same batch.
            if rng.chance(5) {
                batch.push(l.clone());
            }
            batch.push(l);
        }
        // Duplicates move about: a few lines swap places.
        for _ in 0..10 {
            let (a, b) = (rng.below(batch.len() as u64), rng.below(batch.len() as u64));
            batch.swap(a as usize, b as usize);
        }
        out.push(batch.concat());
    }
    out
}
