//! The `changelake` binary: the command line (`cli`), the operator commands
//! it runs (`commands`) and the tools (`tools`: bench, broker bench, demo),
//! all on top of the `changelake` library.

mod cli;
mod commands;
mod tools;

// glibc malloc spent half of a merge run in malloc/free/consolidate (perf,
// 1M-key bench): the merge allocates many short-lived cells per batch.
// mimalloc's thread-local free lists make that cheap. Chosen by the binary,
// not the library: an allocator is the program's decision (the bench's RSS
// trimming relies on it), and the end-to-end tests run this binary.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    no_transparent_huge_pages();
    keep_freed_memory_between_batches();
    std::process::exit(cli::main());
}

/// Turns transparent huge pages off for this process. mimalloc asks the
/// kernel for huge pages on every region it maps, so each thread's small
/// heaps are rounded up to 2 MiB resident: restarting a 1M-key table peaked
/// at 184-192 MiB with them and 128 MiB without, a 10M-key one at 926 MiB
/// and 812 MiB; run times showed no difference (docs/performance.md, "Memory").
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn no_transparent_huge_pages() {
    // SAFETY: `prctl` is `unsafe` only because it is a foreign function.
    // PR_SET_THP_DISABLE takes plain integers, no pointer, and changes only
    // how the kernel backs this process's future anonymous mappings, which
    // no Rust invariant depends on. A kernel that refuses it returns an
    // error, and the process runs as before.
    let _ = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

#[cfg(not(target_os = "linux"))]
fn no_transparent_huge_pages() {}

/// mimalloc's `purge_delay` option (`mi_option_purge_delay` in mimalloc
/// v3's `mimalloc.h`, position 15 of `mi_option_e`; `libmimalloc-sys`
/// exports no constant for it).
const MI_OPTION_PURGE_DELAY: libc::c_int = 15;
/// How long freed memory stays with the process before mimalloc returns it
/// to the kernel.
const PURGE_DELAY_MS: libc::c_long = 5_000;

/// Keeps freed memory for [`PURGE_DELAY_MS`] instead of mimalloc's 1 s.
/// A batch allocates and frees its working memory (decoded events, the
/// rewritten files' Arrow and parquet buffers: about 1 GB per copy-on-write
/// run at 1M keys); returned to the kernel after 1 s, the next batch faulted
/// every page back in and the kernel zeroed it — 10% of a copy-on-write
/// run's CPU in page faults. Kept for 5 s, back-to-back batches reuse it:
/// crm copy-on-write runs at 1M keys, mean 2.59 s -> 2.38 s; peak RSS during
/// the runs 0.7-0.8 GiB -> 0.9 GiB. An idle process still hands it back,
/// and the key index's own memory is unchanged (docs/performance.md,
/// "Memory between batches"). `MIMALLOC_PURGE_DELAY` in the environment
/// still wins.
#[allow(unsafe_code)]
fn keep_freed_memory_between_batches() {
    // SAFETY: `mi_option_set_default` is `unsafe` only because it is a
    // foreign function. It takes two integers (no pointer), sets an option
    // that only decides when free pages go back to the kernel (never which
    // blocks are live), and is documented as callable at any time; an
    // environment setting read at initialisation overrides it.
    unsafe { libmimalloc_sys::mi_option_set_default(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) }
}
