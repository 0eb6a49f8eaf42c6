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
    std::process::exit(cli::main());
}
