//! An in-memory table that drives prepare → classify → apply exactly as the
//! engine does, so the rules can be tested (and property-tested) without I/O.

use super::*;
use crate::value::{cell, cmp_slices};

pub struct MemTable {
    pub spec: Spec,
    pub current: KeyMap<Version>,
    pub history: Vec<Version>,
    pub index: KeyMap<Summary>,
    pub exec: i64,
    pub now: i64,
    pub commits: usize,
}

impl MemTable {
    pub fn new(spec: Spec) -> MemTable {
        MemTable {
            spec,
            current: KeyMap::default(),
            history: vec![],
            index: KeyMap::default(),
            exec: 0,
            now: 1_000_000,
            commits: 0,
        }
    }

    /// One run; returns the output (stats, writes) like the engine sees it.
    pub fn run(&mut self, rows: Vec<InRow>) -> Output {
        self.now += 1_000_000;
        let spec = self.spec.clone();
        let p = prepare(&spec, rows);
        let mut stats = p.stats.clone();
        if p.rejected.is_some() {
            return Output { rejected: p.rejected, stats, ..Default::default() };
        }
        let batch_keys: Vec<Key> = p.keys.iter().map(|(k, _)| k.clone()).collect();
        let mut keys = vec![];
        let mut states: KeyMap<KeyState> = KeyMap::default();
        for (k, rs) in p.keys {
            let Some(need) = classify(&spec, self.index.get(&k), &rs, &mut stats) else {
                continue;
            };
            let st = self.state(&k, need);
            states.insert(k.clone(), st);
            keys.push((k, rs, need));
        }
        let absent: Vec<Key> = if spec.snapshot {
            self.current
                .iter()
                .filter(|(k, v)| !v.deleted && !batch_keys.contains(k))
                .map(|(k, _)| k.clone())
                .collect()
        } else {
            vec![]
        };
        for k in &absent {
            let st = self.state(k, Need::Current);
            states.insert(k.clone(), st);
        }
        let ctx = RunCtx { exec: self.exec + 1, now: self.now, briefs: None };
        let mut out = apply(&spec, ctx, keys, states, vec![], absent);
        stats.add(&out.stats);
        out.stats = stats;
        if out.rejected.is_some() {
            return out;
        }
        if out.has_changes() {
            self.exec += 1;
            self.commits += 1;
        }
        // Closes copy the stored open version before removes/upserts replace it.
        for (k, at, deleted) in &out.closes {
            let mut c = self.current[k].clone();
            c.valid_to = Some(*at);
            c.current = false;
            c.deleted = *deleted;
            c.loc = None;
            self.history.push(c);
        }
        for k in &out.removes {
            self.current.remove(k);
        }
        for (k, v) in &out.upserts {
            self.current.insert(k.clone(), v.clone());
        }
        for (loc, v) in &out.history_replacements {
            self.history[loc.row as usize] = v.clone();
        }
        self.history.extend(out.history_appends.iter().cloned());
        for (k, s) in &out.index {
            match s {
                Some(s) => self.index.insert(k.clone(), s.clone()),
                None => self.index.remove(k),
            };
        }
        out
    }

    fn state(&self, k: &Key, need: Need) -> KeyState {
        let mut st = KeyState::default();
        if matches!(need, Need::Nothing | Need::Reopen) {
            return st;
        }
        if need == Need::Replace {
            st.replace = true;
            return st;
        }
        if need == Need::Close {
            st.stored = self.index.get(k).cloned();
            return st;
        }
        st.current = self.current.get(k).cloned();
        if need.history() {
            for (i, v) in self.history.iter().enumerate() {
                if self.spec.key_of(&v.data).as_ref() == Some(k) {
                    let mut v = v.clone();
                    v.loc = Some(Loc { file: 0, row: i as u32 });
                    st.history.push(v);
                }
            }
            if st.current.is_none() {
                st.latest_closed = self.spec.latest_closed(&st.history).cloned();
            }
        }
        st
    }

    /// Every row, ordered by key, then sequence, then run (the `show` order).
    pub fn rows(&self) -> Vec<Version> {
        let mut all: Vec<Version> =
            self.current.values().cloned().chain(self.history.iter().cloned()).collect();
        all.sort_by(|a, b| {
            let ka: Vec<Value> = self.spec.key.iter().map(|&i| cell(&a.data, i).clone()).collect();
            let kb: Vec<Value> = self.spec.key.iter().map(|&i| cell(&b.data, i).clone()).collect();
            cmp_slices(&ka, &kb).then(self.spec.cmp_versions(a, b))
        });
        all
    }
}
