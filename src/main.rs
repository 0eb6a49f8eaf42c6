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
