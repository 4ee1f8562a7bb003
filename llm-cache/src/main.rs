//! `bpftime-super-llm-cache`: the llm-cache command line ([`cli`]).

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("BPFTIME_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(if args.verbose { "debug" } else { "warn" })
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    match cli::run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
