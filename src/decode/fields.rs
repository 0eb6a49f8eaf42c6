//! A decoded row's fields: its values in document order, and their names
//! as one shared list (a *layout*).
//!
//! Why shared: messages of one schema list the same fields in the same
//! order, so the rows of a batch have a handful of layouts between them.
//! One reference-counted list per layout, instead of a name per field,
//! costs a row one counter increment rather than one per field, lets the
//! batch builder recognise a known layout by pointer
//! (`source::DecodedRows`) and move the values into its cells as they are,
//! and checks a layout for duplicate names once, not once per row. The
//! per-field names were a tenth of the Debezium decode's CPU.

use std::cell::RefCell;
use std::sync::Arc;

use super::Name;
use crate::value::Value;

/// The names of a row's fields, in order; rows of one schema share it.
pub type Layout = Arc<[Name]>;

#[derive(Debug, Clone, Default)]
pub struct Fields {
    names: Option<Layout>,
    values: Vec<Value>,
}

/// Equal names and values (whether or not the layouts are shared).
impl PartialEq for Fields {
    fn eq(&self, other: &Fields) -> bool {
        self.names() == other.names() && self.values == other.values
    }
}

thread_local! {
    /// The last layout [`Fields::push`] extended, the name it added and
    /// the result: rows of one schema that gain the same envelope column
    /// (`source_lsn`) share the extended layout too.
    static EXTENDED: RefCell<Option<(Layout, Name, Layout)>> = const { RefCell::new(None) };
    /// The last layout found free of duplicate names on this thread.
    static UNIQUE: RefCell<Option<Layout>> = const { RefCell::new(None) };
    /// The envelope field names this thread has named (see [`env_name`]).
    static ENV_NAMES: RefCell<Vec<Name>> = const { RefCell::new(Vec::new()) };
}

/// How many envelope field names a thread keeps: a Debezium envelope has
/// about twenty (`op`, `ts_ms`, `source.*`); a stream of ever new names
/// starts the list again rather than growing it.
const ENV_NAMES_KEPT: usize = 64;

/// The name of envelope field `key` (`op`), or of `key` inside the
/// envelope record `record` (`source.lsn`; a record named `""` gives
/// `.lsn`, never a bare name that could pass for a top-level field).
/// Every message carries the same few names: each thread names each once
/// and hands out that name again (two allocations fewer per Debezium
/// message), without building the dotted name to compare it.
pub fn env_name(record: Option<&str>, key: &str) -> Name {
    let is = |n: &str| match record {
        None => n == key,
        Some(r) => is_dotted(n, r, key),
    };
    ENV_NAMES.with_borrow_mut(|names| {
        if let Some(n) = names.iter().find(|n| is(n)) {
            return n.clone();
        }
        let n: Name = match record {
            None => key.into(),
            Some(r) => format!("{r}.{key}").into(),
        };
        if names.len() == ENV_NAMES_KEPT {
            names.clear();
        }
        names.push(n.clone());
        n
    })
}

/// Is `name` the dotted name `record.key`? Compared without building it
/// (per message, per envelope field).
pub(super) fn is_dotted(name: &str, record: &str, key: &str) -> bool {
    name.len() == record.len() + 1 + key.len()
        && name.starts_with(record)
        && name.as_bytes()[record.len()] == b'.'
        && name.ends_with(key)
}

thread_local! {
    /// The layout of the last row this thread decoded: the next row of the
    /// same schema shares it (see [`RowNames`]).
    static ROW_LAYOUT: RefCell<Option<Layout>> = const { RefCell::new(None) };
}

/// A row's field names as a decoder reads them, matched against the
/// layout of the row this thread decoded before it: rows of one schema
/// share that layout, and names are built only from the first field
/// that differs. Both JSON readers (`direct`, `fast`) name rows with it.
pub(super) struct RowNames {
    /// Taken out of [`ROW_LAYOUT`] while the fields are read, so nothing
    /// can hold it twice; a row given up on leaves it empty.
    cached: Option<Layout>,
    /// The names read so far, once they differ from the cached layout's.
    names: Option<Vec<Name>>,
    len: usize,
}

impl RowNames {
    pub(super) fn start() -> RowNames {
        RowNames { cached: ROW_LAYOUT.take(), names: None, len: 0 }
    }

    /// How many fields the row before had: room to make for this one.
    pub(super) fn expected(&self) -> usize {
        self.cached.as_ref().map_or(0, |c| c.len())
    }

    /// The next field's name.
    pub(super) fn push(&mut self, key: &str) {
        let known: &[Name] = self.cached.as_deref().unwrap_or(&[]);
        match &mut self.names {
            None if known.get(self.len).is_some_and(|n| **n == *key) => {}
            None => {
                let mut n = known[..self.len].to_vec();
                n.push(Name::from(key));
                self.names = Some(n);
            }
            Some(n) => n.push(Name::from(key)),
        }
        self.len += 1;
    }

    /// The row's layout, kept for the next row.
    pub(super) fn finish(self) -> Layout {
        let layout: Layout = match (self.names, self.cached) {
            (Some(n), _) => n.into(),
            (None, Some(c)) if c.len() == self.len => c,
            (None, Some(c)) => c[..self.len].into(),
            (None, None) => Layout::from([]),
        };
        ROW_LAYOUT.set(Some(layout.clone()));
        layout
    }
}

/// The same number for the same layout, while it lives (its address; 0 for
/// none).
pub fn layout_id(layout: Option<&Layout>) -> usize {
    layout.map_or(0, |l| Arc::as_ptr(l).cast::<u8>() as usize)
}

impl Fields {
    /// Fields with this layout; `values` in its order, one per name.
    pub fn new(names: Layout, values: Vec<Value>) -> Fields {
        debug_assert_eq!(names.len(), values.len());
        Fields { names: Some(names), values }
    }

    /// Fields from name-value pairs (a layout of their own).
    pub fn from_pairs(pairs: impl IntoIterator<Item = (Name, Value)>) -> Fields {
        let (names, values): (Vec<Name>, Vec<Value>) = pairs.into_iter().unzip();
        Fields::new(names.into(), values)
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The field names, in order.
    pub fn names(&self) -> &[Name] {
        self.names.as_deref().unwrap_or(&[])
    }

    /// The shared layout (None for a row without fields).
    pub fn layout(&self) -> Option<&Layout> {
        self.names.as_ref()
    }

    /// The same number for rows that share a layout, while they live (the
    /// layout's address; 0 for a row without fields).
    pub fn layout_id(&self) -> usize {
        layout_id(self.names.as_ref())
    }

    pub fn values(&self) -> &[Value] {
        &self.values
    }

    /// The values, to change in place (the names stay as they are).
    pub fn values_mut(&mut self) -> &mut [Value] {
        &mut self.values
    }

    pub fn into_values(self) -> Vec<Value> {
        self.values
    }

    /// The value of the first field called `name`.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.names().iter().position(|n| **n == *name).map(|i| &self.values[i])
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Name, &Value)> {
        self.names().iter().zip(&self.values)
    }

    /// Adds a field at the end. Rows that add the same name to the same
    /// layout share the extended layout (see `EXTENDED`).
    pub fn push(&mut self, name: &str, value: Value) {
        self.push_named(|n| n == name, || Name::from(name), value)
    }

    /// [`push`](Self::push) of the field that `is` recognises by name and
    /// `name` names: a row that adds the name the row before it added
    /// needs no name built (`store_envelope` runs per message).
    pub fn push_named(
        &mut self,
        is: impl Fn(&str) -> bool,
        name: impl FnOnce() -> Name,
        value: Value,
    ) {
        let base = self.names.take();
        let extended = EXTENDED.with_borrow_mut(|last| {
            if let (Some((b, n, e)), Some(base)) = (last.as_ref(), base.as_ref()) {
                if Arc::ptr_eq(b, base) && is(n) {
                    return e.clone();
                }
            }
            let name = name();
            let mut names: Vec<Name> = base.as_deref().unwrap_or(&[]).to_vec();
            names.push(name.clone());
            let e: Layout = names.into();
            if let Some(base) = base {
                *last = Some((base, name, e.clone()));
            }
            e
        });
        self.names = Some(extended);
        self.values.push(value);
    }

    /// Removes every field called `name`.
    pub fn remove(&mut self, name: &str) {
        if !self.names().iter().any(|n| **n == *name) {
            return;
        }
        let pairs: Vec<(Name, Value)> =
            std::mem::take(self).into_pairs().filter(|(n, _)| **n != *name).collect();
        *self = Fields::from_pairs(pairs);
    }

    fn into_pairs(self) -> impl Iterator<Item = (Name, Value)> {
        let names: Vec<Name> = self.names().to_vec();
        names.into_iter().zip(self.values)
    }

    /// A name appears twice: the row would be ambiguous (which value wins?).
    /// Checked once per layout per thread.
    pub fn has_duplicate(&self) -> bool {
        let Some(layout) = &self.names else { return false };
        if UNIQUE.with_borrow(|u| u.as_ref().is_some_and(|u| Arc::ptr_eq(u, layout))) {
            return false;
        }
        // Every pair for a few names; a set beyond (CRM rows have 20 to
        // 50: pairs were 200 to 1,200 comparisons).
        let duplicate = if layout.len() <= 12 {
            layout.iter().enumerate().any(|(i, n)| layout[..i].contains(n))
        } else {
            let mut seen: rustc_hash::FxHashSet<&str> =
                rustc_hash::FxHashSet::with_capacity_and_hasher(layout.len(), Default::default());
            !layout.iter().all(|n| seen.insert(n))
        };
        if !duplicate {
            UNIQUE.set(Some(layout.clone()));
        }
        duplicate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_that_add_the_same_field_share_the_extended_layout() {
        let layout: Layout = vec![Name::from("id"), Name::from("city")].into();
        let mut a = Fields::new(layout.clone(), vec![Value::Int(1), Value::Null]);
        let mut b = Fields::new(layout, vec![Value::Int(2), Value::Null]);
        a.push("source_lsn", Value::Int(10));
        b.push("source_lsn", Value::Int(11));
        assert!(Arc::ptr_eq(a.layout().unwrap(), b.layout().unwrap()));
        assert_eq!(a.get("source_lsn"), Some(&Value::Int(10)));
        assert_eq!(b.names().len(), 3);
    }

    #[test]
    fn envelope_names_are_named_once_per_thread_and_dotted_inside_records() {
        let (op, lsn) = (env_name(None, "op"), env_name(Some("source"), "lsn"));
        assert_eq!((&*op, &*lsn), ("op", "source.lsn"));
        assert!(Arc::ptr_eq(&op, &env_name(None, "op")));
        assert!(Arc::ptr_eq(&lsn, &env_name(Some("source"), "lsn")));
        // Same letters, other split: another name.
        assert_eq!(&*env_name(Some("sourc"), "e.lsn"), "sourc.e.lsn");
        assert_eq!(&*env_name(None, "source.lsn"), "source.lsn");
        // A record without a name still dots its fields.
        assert_eq!(&*env_name(Some(""), "op"), ".op");
        assert_eq!(&*env_name(None, "op"), "op");
        // Ever new names start the list again instead of growing it.
        for i in 0..3 * ENV_NAMES_KEPT {
            assert_eq!(&*env_name(Some("t"), &i.to_string()), format!("t.{i}"));
        }
        assert!(ENV_NAMES.with_borrow(Vec::len) <= ENV_NAMES_KEPT);
        assert_eq!(&*env_name(None, "op"), "op");
    }

    #[test]
    fn duplicate_names_are_found_in_short_and_long_layouts() {
        let short = Fields::from_pairs([("a".into(), Value::Null), ("a".into(), Value::Null)]);
        assert!(short.has_duplicate());
        let mut long: Vec<(Name, Value)> =
            (0..30).map(|i| (Name::from(format!("c{i}")), Value::Null)).collect();
        assert!(!Fields::from_pairs(long.clone()).has_duplicate());
        long.push(("c7".into(), Value::Null));
        assert!(Fields::from_pairs(long).has_duplicate());
    }

    #[test]
    fn removing_a_field_keeps_the_others_in_order() {
        let mut f = Fields::from_pairs([
            ("a".into(), Value::Int(1)),
            ("b".into(), Value::Int(2)),
            ("c".into(), Value::Int(3)),
        ]);
        f.remove("b");
        assert_eq!(f.names().iter().map(|n| &**n).collect::<Vec<_>>(), ["a", "c"]);
        assert_eq!(f.values(), &[Value::Int(1), Value::Int(3)]);
    }
}
