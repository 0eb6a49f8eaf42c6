// glibc malloc spent half of a merge run in malloc/free/consolidate (perf,
// 1M-key bench): the merge allocates many short-lived cells per batch.
// mimalloc's thread-local free lists make that cheap.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(changelake::cli::main());
}
