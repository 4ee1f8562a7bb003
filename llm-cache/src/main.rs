//! `bpftime-super-llm-cache`: the llm-cache command line ([`cli`]).

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    host::init_cli_logging(args.verbose);
    match cli::run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
