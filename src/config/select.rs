//! Which tables this process owns: `--shard I/N` and `--tables A,B`
//! (docs/object-storage.md, fleets).
//!
//! A fleet shares one config; each process owns whole tables, so a table
//! is only ever written by its owner and throughput and memory scale with
//! the number of processes. The assignment is rendezvous hashing by table
//! name: every process computes the same owner without talking to the
//! others, and changing N moves only the tables whose highest-scoring shard
//! changed (about 1/N of them), not a reshuffle of everything.

use super::{Config, ConfigErrors, SystemKind};

/// `I/N`: this process is shard I (0-based, e.g. a StatefulSet ordinal) of N.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl std::str::FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Shard, String> {
        let bad = || format!("`{s}`: expected I/N with 0 <= I < N, e.g. 0/3");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count) =
            (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// The shard (0-based) that owns `table` among `count`.
pub fn owner(table: &str, count: u32) -> u32 {
    (0..count)
        .max_by_key(|i| xxhash_rust::xxh3::xxh3_64(format!("{table}\u{0}{i}").as_bytes()))
        .unwrap_or(0)
}

/// The tables a command works on; empty means all of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    pub shard: Option<Shard>,
    pub tables: Vec<String>,
}

impl Selection {
    pub fn is_all(&self) -> bool {
        self.shard.is_none() && self.tables.is_empty()
    }

    fn keeps(&self, table: &str) -> bool {
        self.shard.is_none_or(|s| owner(table, s.count) == s.index)
            && (self.tables.is_empty() || self.tables.iter().any(|t| t == table))
    }

    /// Suffix of this process's consumer group: each process commits lag
    /// offsets under its own group, so two processes never contradict each
    /// other about one partition.
    fn group_suffix(&self) -> String {
        let mut s = String::new();
        if let Some(sh) = self.shard {
            s.push_str(&format!("-shard-{}-of-{}", sh.index, sh.count));
        }
        if !self.tables.is_empty() {
            let mut t = self.tables.clone();
            t.sort();
            s.push_str(&format!("-tables-{}", t.join("+")));
        }
        s
    }
}

impl Config {
    /// Keeps the selected tables (exit 2 for a name the config does not
    /// declare); Kafka consumer groups get the selection's suffix.
    pub fn select(mut self, sel: &Selection) -> Result<Config, ConfigErrors> {
        if sel.is_all() {
            return Ok(self);
        }
        let unknown: Vec<String> = (sel.tables.iter())
            .filter(|t| self.table(t).is_none())
            .map(|t| format!("--tables: no table `{t}` in the config"))
            .collect();
        if !unknown.is_empty() {
            return Err(ConfigErrors(unknown));
        }
        self.tables.retain(|t| sel.keeps(&t.name));
        let suffix = sel.group_suffix();
        for s in self.systems.values_mut() {
            if let SystemKind::Kafka { group_id, .. } = &mut s.kind {
                group_id.push_str(&suffix);
            }
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_has_exactly_one_owner_and_shards_share_the_work() {
        let names: Vec<String> = (0..1000).map(|i| format!("table_{i}")).collect();
        let mut per = [0usize; 4];
        for n in &names {
            let o = owner(n, 4);
            assert!(o < 4);
            assert_eq!(o, owner(n, 4), "stable");
            per[o as usize] += 1;
        }
        for c in per {
            assert!((150..350).contains(&c), "uneven: {per:?}");
        }
    }

    #[test]
    fn growing_the_fleet_moves_few_tables() {
        let names: Vec<String> = (0..1000).map(|i| format!("t{i}")).collect();
        let moved = names.iter().filter(|n| owner(n, 4) != owner(n, 5)).count();
        // Rendezvous: only the tables the new shard wins move (about 1/5).
        assert!(moved < 300, "{moved} of 1000 moved from 4 to 5 shards");
        for n in &names {
            let (a, b) = (owner(n, 4), owner(n, 5));
            assert!(a == b || b == 4, "{n} moved between old shards");
        }
    }

    #[test]
    fn shard_specs_are_checked() {
        assert_eq!("1/3".parse::<Shard>(), Ok(Shard { index: 1, count: 3 }));
        for bad in ["3/3", "1", "a/2", "0/0", "-1/2"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }
}
