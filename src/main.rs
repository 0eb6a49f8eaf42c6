mod cli;
mod tools;

fn main() {
    std::process::exit(cli::main());
}
