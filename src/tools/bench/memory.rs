//! The bench's memory readings: resident set size and its peak from
//! `/proc/self/status`, after handing freed heap pages back to the OS so a
//! reading shows what is live. Separate because it is the only code that
//! talks to the allocator (mimalloc, chosen in src/main.rs) directly.

/// (current, peak) resident set size in bytes, from /proc/self/status.
pub fn rss() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        s.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Returns freed heap pages to the OS so RSS shows what is live: on this
/// thread and on every worker of the pool (mimalloc keeps per-thread heaps,
/// and an idle worker holds the pages it freed until it allocates again).
pub fn trim() {
    rayon::broadcast(|_| collect_freed());
    collect_freed();
}

/// mimalloc's `mi_collect(force)` on the calling thread: the crate's only `unsafe`.
#[allow(unsafe_code)]
fn collect_freed() {
    // SAFETY: `mi_collect` is `unsafe` only because it is a foreign function;
    // it has no preconditions. It takes no pointer (one bool), so nothing of
    // ours can dangle or alias through it; it releases only pages that hold
    // no live block (of the calling thread's heap and of abandoned ones), so
    // every outstanding allocation, Box and reference stays valid; and
    // mimalloc documents it as callable from any thread at any time. Were
    // mimalloc not the global allocator, it would simply find nothing to free.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// Resets the kernel's peak-RSS mark (VmHWM), so the peak of the timed runs
/// is reported apart from the load's.
pub fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}
