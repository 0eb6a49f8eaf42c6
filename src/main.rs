fn main() {
    std::process::exit(changelake::cli::main());
}
