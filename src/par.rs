//! Data parallelism without a thread pool dependency: the machine this runs on
//! is small (2 cores here), batches are large, and the work items (decode a
//! file, encode a parquet file, decode a chunk of lines) are coarse, so scoped
//! threads pulling from a shared counter keep every core busy.

/// Maps items on all cores (scoped threads pulling from a shared counter),
/// results in input order.
pub fn par_map<T: Send, R: Send>(items: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(items.len().max(1));
    let slots: Vec<std::sync::Mutex<Option<T>>> = items.into_iter().map(|t| std::sync::Mutex::new(Some(t))).collect();
    let results: Vec<std::sync::Mutex<Option<R>>> = slots.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(slot) = slots.get(i) else { break };
                let item = slot.lock().unwrap_or_else(|e| e.into_inner()).take().expect("taken once");
                *results[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(f(item));
            });
        }
    });
    results.into_iter().map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()).expect("every item mapped")).collect()
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
        assert_eq!(par_map((0..1000).collect(), |i: u64| i * 2), (0..1000).map(|i| i * 2).collect::<Vec<_>>());
    }
}
