//! Data parallelism for the batch path: decode, typing, classification, merge,
//! Arrow building and parquet encoding each split a batch into coarse pieces
//! and run them on all cores. A persistent pool (rayon) rather than scoped
//! threads per call: a run makes about ten parallel steps, and spawning and
//! tearing down threads (and their allocator heaps) for each cost about 4% of
//! a run on the 1M-key bench.

use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

/// Maps items on all cores, results in input order.
pub fn par_map<T: Send, R: Send>(items: Vec<T>, f: impl Fn(T) -> R + Sync + Send) -> Vec<R> {
    if items.len() <= 1 {
        return items.into_iter().map(f).collect();
    }
    items.into_par_iter().map(f).collect()
}

/// Values [`drop_later`] has handed to the pool and the pool has not yet dropped.
static PENDING_DROPS: AtomicUsize = AtomicUsize::new(0);

/// Drops a large value on the pool, off the caller's path (a merge output
/// holds every new version of the batch; freeing it is real work).
pub fn drop_later<T: Send + 'static>(v: T) {
    /// Counts the drop as done even if dropping the value panics.
    struct Done;
    impl Drop for Done {
        fn drop(&mut self) {
            PENDING_DROPS.fetch_sub(1, Ordering::AcqRel);
        }
    }
    PENDING_DROPS.fetch_add(1, Ordering::AcqRel);
    rayon::spawn(move || {
        let _done = Done;
        drop(v);
    });
}

/// Waits until every value handed to [`drop_later`] has been dropped: the
/// bench's runs count the freeing of their own output, and the next run's
/// decode clock (CPU time of the whole process) is not charged with it.
/// Not to be called on the pool itself.
pub fn settle_drops() {
    while PENDING_DROPS.load(Ordering::Acquire) > 0 {
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
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
    fn settle_drops_returns_once_every_value_handed_over_is_dropped() {
        /// Sets its flag when dropped, after a pause that outlasts the call.
        struct Slow(std::sync::Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Slow {
            fn drop(&mut self) {
                std::thread::sleep(std::time::Duration::from_millis(50));
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let flags: Vec<_> = (0..3)
            .map(|_| std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)))
            .collect();
        for f in &flags {
            drop_later(Slow(f.clone()));
        }
        settle_drops();
        assert!(flags.iter().all(|f| f.load(Ordering::SeqCst)), "a value was still alive");
    }

    #[test]
    fn par_map_returns_results_in_input_order() {
        assert_eq!(
            par_map((0..1000).collect(), |i: u64| i * 2),
            (0..1000).map(|i| i * 2).collect::<Vec<_>>()
        );
    }
}
