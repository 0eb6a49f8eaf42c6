//! Data parallelism for the batch path: decode, typing, classification, merge,
//! Arrow building and parquet encoding each split a batch into coarse pieces
//! and run them on all cores. A persistent pool (rayon) rather than scoped
//! threads per call: a run makes about ten parallel steps, and spawning and
//! tearing down threads (and their allocator heaps) for each cost about 4% of
//! a run on the 1M-key bench.

use rayon::prelude::*;

/// Maps items on all cores, results in input order.
pub fn par_map<T: Send, R: Send>(items: Vec<T>, f: impl Fn(T) -> R + Sync + Send) -> Vec<R> {
    if items.len() <= 1 {
        return items.into_iter().map(f).collect();
    }
    items.into_par_iter().map(f).collect()
}

/// Drops a large value on the pool, off the caller's path (a merge output
/// holds every new version of the batch; freeing it is real work).
pub fn drop_later<T: Send + 'static>(v: T) {
    rayon::spawn(move || drop(v));
}

/// Splits a vector into at most `parts` runs of consecutive items (order kept).
pub fn split<T>(mut items: Vec<T>, parts: usize) -> Vec<Vec<T>> {
    let size = items.len().div_ceil(parts.max(1)).max(1);
    let mut out = Vec::with_capacity(parts);
    while items.len() > size {
        let tail = items.split_off(items.len() - size);
        out.push(tail);
    }
    out.push(items);
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keeps_order_and_every_item() {
        for n in [0usize, 1, 7, 8, 9, 100] {
            let parts = split((0..n).collect::<Vec<_>>(), 8);
            assert!(parts.len() <= 8);
            assert_eq!(parts.concat(), (0..n).collect::<Vec<_>>());
        }
    }

    #[test]
    fn par_map_returns_results_in_input_order() {
        assert_eq!(
            par_map((0..1000).collect(), |i: u64| i * 2),
            (0..1000).map(|i| i * 2).collect::<Vec<_>>()
        );
    }
}
