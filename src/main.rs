//! The `adeadvm` command line. All work is done by the library; this file parses arguments,
//! turns errors into one clear message on stderr, and picks the exit status:
//! 0 success, 1 the input or the run failed, 2 the command line was wrong.

mod cli;

fn main() {
    std::process::exit(cli::main());
}
