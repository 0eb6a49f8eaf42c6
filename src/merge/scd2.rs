//! scd2 (docs/scd2.md and its worked examples): one row per version.
//!
//! Processing time (default): versions of a key are ordered by sequence, then
//! by run, never by the `_valid_from` clock. A late row becomes a closed
//! version with an empty interval (`_valid_from = _valid_to = now`), so no
//! point-in-time query returns it and no other version changes.
//!
//! Business time (`valid_time: column:<c>` / `date:<d>`): the business date is
//! the version order. An equal `_valid_from` is a restatement (overwrite in
//! place); a backdated row is inserted between its neighbours and the earlier
//! neighbour is shortened, so intervals stay contiguous (docs/scd2.md, worked example: business dates).

use std::cmp::Ordering;

use super::brief::{self, Closed};
use super::{InRow, Key, KeyState, Output, RunCtx, Spec, ValidTime, Version};

struct KeyRun<'a> {
    spec: &'a Spec,
    ctx: &'a RunCtx,
    key: Key,
    cur: Option<Version>,
    /// Latest closed version when the key has no open one (a deleted key).
    latest_closed: Option<Version>,
    /// Every known closed version, including the ones made in this run.
    history: Vec<Version>,
    /// Every closed version in brief, including this run's, when known
    /// (see [`brief`]); late rows are then compared with it, not `history`.
    brief: Option<Vec<Closed>>,
    stored_current: bool,
    dirty: bool,
    /// A version was closed in this run (a close, or a late row's version).
    closed_now: bool,
    ordinal: usize,
}

impl KeyRun<'_> {
    fn open(&mut self, data: Vec<super::Value>, valid_from: i64) -> Version {
        let sk = self.spec.surrogate(&self.key, valid_from, self.ctx.exec, self.ordinal);
        self.ordinal += 1;
        Version {
            data,
            valid_from: Some(valid_from),
            valid_to: self.spec.open_valid_to,
            current: true,
            deleted: false,
            exec: self.ctx.exec,
            sk,
            loc: None,
            brief: None,
        }
    }

    fn closed(&mut self, data: Vec<super::Value>, from: i64, to: i64) -> Version {
        let mut v = self.open(data, from);
        v.valid_to = Some(to);
        v.current = false;
        v
    }

    /// Closes the open version at `at` (never before its own start).
    fn close_current(&mut self, at: i64, deleted: bool, out: &mut Output) {
        let mut c = self.cur.take().expect("open version");
        let at = at.max(c.valid_from.unwrap_or(at));
        c.valid_to = Some(at);
        c.current = false;
        c.deleted = deleted;
        c.loc = None;
        if let Some(b) = &mut self.brief {
            b.push(Closed::of(self.spec, &c));
        }
        out.stats.versions_closed += 1;
        out.history_appends.push(c.clone());
        self.history.push(c.clone());
        self.latest_closed = Some(c);
        self.dirty = true;
        self.closed_now = true;
    }

    /// The brief to store with the key's open version (see [`brief`]).
    fn encoded_brief(&self) -> Option<std::sync::Arc<[u8]>> {
        let fingerprint = self.ctx.briefs?;
        brief::encode(self.brief.as_ref()?, fingerprint).map(Into::into)
    }

    fn latest(&self) -> Option<&Version> {
        self.cur.as_ref().or(self.latest_closed.as_ref())
    }

    /// Whether `row` is older than the key's latest version: the open one,
    /// else the latest closed one, read or (a deleted key whose brief the
    /// table kept) in brief.
    fn is_late(&self, row: &[super::Value]) -> bool {
        let spec = self.spec;
        if spec.seq.is_empty() {
            return false;
        }
        if let Some(l) = self.latest() {
            return spec.cmp_seq(row, &l.data) == Ordering::Less;
        }
        let by_order = |a: &&Closed, b: &&Closed| {
            super::version_order(crate::value::cmp_slices(&a.seq, &b.seq), a.exec, b.exec)
        };
        let latest = self.brief.as_ref().and_then(|b| b.iter().max_by(by_order));
        latest.is_some_and(|c| spec.cmp_seq_to(row, &c.seq) == Ordering::Less)
    }

    /// Whether the key had versions before this run (a revival, not an insert).
    fn has_closed(&self) -> bool {
        self.latest_closed.is_some() || self.brief.as_ref().is_some_and(|b| !b.is_empty())
    }

    /// The version valid at the sequence of `row`: the greatest (sequence, run) at or below it.
    fn valid_at(&self, row: &[super::Value]) -> Option<&Version> {
        self.history
            .iter()
            .chain(self.cur.iter())
            .filter(|v| self.spec.cmp_seq(&v.data, row) != Ordering::Greater)
            .max_by(|a, b| self.spec.cmp_versions(a, b))
    }

    fn processing_row(&mut self, r: InRow, out: &mut Output) {
        let spec = self.spec;
        let now = self.ctx.now;
        if self.is_late(&r.data) {
            if r.delete {
                out.stats.late_deletes_ignored += 1;
                return;
            }
            if spec.reject_late {
                out.rejected =
                    Some("reject_late: a row is older than the key's latest version".into());
                return;
            }
            let same = match &self.brief {
                Some(b) => {
                    let tracked = r.hashes.map_or_else(|| spec.tracked_hash(&r.data), |h| h.1);
                    brief::valid_at_is_equal(spec, b, self.cur.as_ref(), &r.data, tracked)
                }
                None => {
                    self.valid_at(&r.data).is_some_and(|v| spec.tracked_equal(&v.data, &r.data))
                }
            };
            if same {
                out.stats.late_noop += 1;
                return;
            }
            let v = self.closed(r.data, now, now);
            if let Some(b) = &mut self.brief {
                b.push(Closed::of(spec, &v));
                // The open version is written again, unchanged, to carry
                // the longer brief in its row companion.
                self.dirty |= self.cur.is_some();
            }
            self.history.push(v.clone());
            out.history_appends.push(v);
            out.stats.late_inserted += 1;
            self.closed_now = true;
            return;
        }
        match &mut self.cur {
            None => {
                if r.delete {
                    out.stats.deletes_unknown += 1;
                    return;
                }
                // New key, or a deleted key coming back: a new open version.
                let start =
                    now.max(self.latest_closed.as_ref().and_then(|l| l.valid_to).unwrap_or(now));
                if self.has_closed() {
                    out.stats.revived += 1;
                } else {
                    out.stats.inserted += 1;
                }
                self.cur = Some(self.open(r.data, start));
                self.dirty = true;
            }
            Some(c) => {
                if r.delete {
                    out.stats.deleted += 1;
                    self.close_current(now, true, out);
                } else if !spec.tracked_equal(&c.data, &r.data) && !r.replayed {
                    let at = now.max(c.valid_from.unwrap_or(now));
                    out.stats.updated += 1;
                    self.close_current(at, false, out);
                    self.cur = Some(self.open(r.data, at));
                } else if !spec.all_equal(&c.data, &r.data) {
                    c.data = r.data;
                    out.stats.updated_in_place += 1;
                    self.dirty = true;
                } else {
                    out.stats.unchanged += 1;
                }
            }
        }
    }

    fn business_row(&mut self, r: InRow, out: &mut Output) {
        let spec = self.spec;
        let bt = spec.business_time(&r.data, self.ctx).unwrap_or(self.ctx.now);
        if let Some(c) = &mut self.cur {
            let cf = c.valid_from.unwrap_or(bt);
            if bt >= cf {
                if r.delete {
                    out.stats.deleted += 1;
                    self.close_current(bt, true, out);
                } else if bt == cf {
                    // Same-day restatement: overwrite in place.
                    if !spec.tracked_equal(&c.data, &r.data) {
                        c.data = r.data;
                        c.exec = self.ctx.exec;
                        out.stats.restated += 1;
                        self.dirty = true;
                    } else if !spec.all_equal(&c.data, &r.data) {
                        c.data = r.data;
                        out.stats.updated_in_place += 1;
                        self.dirty = true;
                    } else {
                        out.stats.unchanged += 1;
                    }
                } else if !spec.tracked_equal(&c.data, &r.data) {
                    out.stats.updated += 1;
                    self.close_current(bt, false, out);
                    self.cur = Some(self.open(r.data, bt));
                } else if !spec.all_equal(&c.data, &r.data) {
                    c.data = r.data;
                    out.stats.updated_in_place += 1;
                    self.dirty = true;
                } else {
                    out.stats.unchanged += 1;
                }
                return;
            }
        } else {
            let reopen_at = self.latest_closed.as_ref().and_then(|l| l.valid_to);
            if reopen_at.is_none_or(|t| bt >= t) {
                if r.delete {
                    out.stats.deletes_unknown += 1;
                    return;
                }
                if self.latest_closed.is_some() {
                    out.stats.revived += 1;
                } else {
                    out.stats.inserted += 1;
                }
                self.cur = Some(self.open(r.data, bt));
                self.dirty = true;
                return;
            }
        }
        // Backdated: before the latest version's start.
        if r.delete {
            out.stats.late_deletes_ignored += 1;
            return;
        }
        if spec.reject_late {
            out.rejected = Some(
                "reject_late: a row's business date is before the key's current version".into(),
            );
            return;
        }
        let mut all: Vec<&Version> = self.history.iter().chain(self.cur.iter()).collect();
        all.sort_by_key(|v| v.valid_from);
        let prev =
            all.iter().rev().find(|v| v.valid_from.is_some_and(|f| f <= bt)).map(|v| (*v).clone());
        let next_start = all.iter().filter_map(|v| v.valid_from).filter(|f| *f > bt).min();
        // The date falls inside `prev`, not in a gap after it (the key
        // deleted, then back later).
        let covers = |p: &Version| p.valid_to.is_none_or(|t| t > bt);
        match prev {
            Some(p) if p.valid_from == Some(bt) => {
                if spec.all_equal(&p.data, &r.data) {
                    out.stats.late_noop += 1;
                    return;
                }
                let mut np = p.clone();
                np.data = r.data;
                np.exec = self.ctx.exec;
                self.replace(p, np, out);
                out.stats.restated += 1;
            }
            Some(p) if covers(&p) && spec.tracked_equal(&p.data, &r.data) => {
                out.stats.late_noop += 1
            }
            prev => {
                // The version it splits ends at the new date; the new one
                // ends where the next starts or where the split one ended,
                // whichever comes first. Splitting a version a delete closed
                // hands the delete on: the new version is the one that was
                // in effect when the key was deleted (docs/scd2.md, "Business
                // time").
                let split = prev.filter(|p| covers(p));
                let to =
                    next_start.into_iter().chain(split.as_ref().and_then(|p| p.valid_to)).min();
                let to = to.unwrap_or(bt);
                let takes_delete =
                    split.as_ref().is_some_and(|p| p.deleted && p.valid_to == Some(to));
                let mut v = self.closed(r.data, bt, to);
                v.deleted = takes_delete;
                self.history.push(v.clone());
                out.history_appends.push(v.clone());
                out.stats.late_inserted += 1;
                if let Some(p) = split {
                    let mut np = p.clone();
                    np.valid_to = Some(bt);
                    np.deleted = p.deleted && !takes_delete;
                    self.replace(p, np, out);
                }
                if takes_delete {
                    self.latest_closed = Some(v);
                }
            }
        }
    }

    /// Rewrites a stored closed version (business-time neighbour or restatement).
    fn replace(&mut self, old: Version, mut new: Version, out: &mut Output) {
        if let Some(loc) = old.loc {
            new.loc = None;
            out.history_replacements.push((loc, new.clone()));
            if let Some(h) = self.history.iter_mut().find(|h| h.loc == Some(loc)) {
                // Still the stored row: a second change to it in this run
                // (two backdated rows splitting it) replaces it again, and
                // the last replacement is the one written.
                *h = Version { loc: Some(loc), ..new };
            }
        } else if let Some(i) = out.history_appends.iter().position(|h| *h == old) {
            out.history_appends[i] = new.clone();
            if let Some(h) = self.history.iter_mut().find(|h| **h == old) {
                *h = new;
            }
        }
    }
}

pub(super) fn apply_key(
    spec: &Spec,
    ctx: &RunCtx,
    key: Key,
    mut rows: Vec<InRow>,
    state: KeyState,
    out: &mut Output,
) {
    if let Some(s) = state.stored {
        // Need::Close: exactly what `processing_row` does to an open version
        // for a newer changed row or a delete, from the key index alone.
        let r = rows.pop().expect("one row per key");
        let at = ctx.now.max(s.valid_from);
        out.stats.versions_closed += 1;
        out.closes.push((key.clone(), at, r.delete));
        // The closed version joins the stored brief, from the key index's
        // summary of it and the run that wrote it.
        let brief = |s: &super::Summary| {
            ctx.briefs.zip(state.stored_brief.as_ref()).and_then(|(fingerprint, b)| {
                let seq = s.seq.with(|q| q.to_vec());
                let closed = Closed { seq, exec: b.exec, tracked: s.tracked_hash };
                brief::append(&b.bytes, &closed, fingerprint).map(Into::into)
            })
        };
        if r.delete {
            out.stats.deleted += 1;
            if ctx.briefs.is_some() {
                out.deleted_briefs.push((key.clone(), brief(&s)));
            }
            out.index.push((key.clone(), Some(super::Summary { deleted: true, ..s })));
            out.removes.push(key);
        } else {
            out.stats.updated += 1;
            let mut run = KeyRun {
                spec,
                ctx,
                stored_current: true,
                cur: None,
                latest_closed: None,
                history: vec![],
                brief: None,
                key,
                dirty: true,
                closed_now: true,
                ordinal: 0,
            };
            let mut v = run.open(r.data, at);
            v.brief = brief(&s);
            out.index.push((run.key.clone(), Some(spec.summary_hashed(&v, r.hashes))));
            out.upserts.push((run.key, v));
        }
        return;
    }
    let business = spec.valid_time != ValidTime::Processing;
    // A key whose whole history was read gets its brief from it.
    let brief = (state.brief)
        .or_else(|| state.history_read.then(|| briefs_of(spec, &state.history)))
        .filter(|_| !business && ctx.briefs.is_some());
    let mut run = KeyRun {
        spec,
        ctx,
        stored_current: state.current.is_some(),
        cur: state.current,
        latest_closed: state.latest_closed,
        history: state.history,
        brief,
        key: key.clone(),
        dirty: false,
        closed_now: false,
        ordinal: 0,
    };
    for r in rows {
        if business {
            run.business_row(r, out);
        } else {
            run.processing_row(r, out);
        }
        if out.rejected.is_some() {
            return;
        }
    }
    finish(run, out);
}

fn briefs_of(spec: &Spec, history: &[Version]) -> Vec<Closed> {
    history.iter().map(|v| Closed::of(spec, v)).collect()
}

fn finish(run: KeyRun<'_>, out: &mut Output) {
    if run.ctx.briefs.is_some() {
        // A key without an open version keeps its brief in the table; a
        // deleted one that gets an open version hands it to that version
        // (one the table kept: a key it kept none for is not handed back,
        // as a new key is not).
        match &run.cur {
            None if run.closed_now => {
                out.deleted_briefs.push((run.key.clone(), run.encoded_brief()))
            }
            Some(_) if !run.stored_current && run.has_closed() => {
                out.deleted_briefs.push((run.key.clone(), None))
            }
            _ => {}
        }
    }
    if !run.dirty {
        return;
    }
    let brief = run.encoded_brief();
    match run.cur {
        Some(mut c) => {
            c.loc = None;
            c.brief = brief;
            out.index.push((run.key.clone(), Some(run.spec.summary(&c))));
            out.upserts.push((run.key, c));
        }
        None => {
            if let Some(l) = &run.latest_closed {
                out.index.push((run.key.clone(), Some(run.spec.summary(l))));
            }
            if run.stored_current {
                out.removes.push(run.key);
            }
        }
    }
}

/// docs/snapshot.md: a stored key missing from a snapshot batch is closed and marked deleted.
pub(super) fn snapshot_delete(
    spec: &Spec,
    ctx: &RunCtx,
    key: Key,
    state: KeyState,
    out: &mut Output,
) {
    if state.current.is_none() {
        return;
    }
    let at = match spec.valid_time {
        ValidTime::Date(d) => d,
        _ => ctx.now,
    };
    let mut run = KeyRun {
        spec,
        ctx,
        stored_current: true,
        cur: state.current,
        latest_closed: None,
        history: vec![],
        brief: None,
        key,
        dirty: false,
        closed_now: false,
        ordinal: 0,
    };
    if spec.delete_mode == crate::config::DeleteMode::Ignore {
        return;
    }
    run.close_current(at, true, out);
    out.stats.snapshot_deleted += 1;
    finish(run, out);
}
