//! Writes the synthetic traces the tests and README use (see `tests/data/README.md`).
//!
//! ```sh
//! cargo run -p llm-cache --example synth -- llm [TOKENS] > tests/data/llm_offload_small.csv
//! cargo run -p llm-cache --example synth -- zipf OBJECTS ACCESSES OUT.bin   # binary format
//! ```

use llm_cache::synth;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("llm") => {
            let tokens = args.get(1).map_or(Ok(24), |s| s.parse())?;
            let t = synth::llm_offload_trace(tokens, 1);
            std::io::Write::flush(&mut t.write_csv(std::io::stdout().lock())?)?;
        }
        Some("zipf") if args.len() == 4 => {
            let (objects, accesses): (usize, usize) = (args[1].parse()?, args[2].parse()?);
            let sizes = synth::log_uniform_sizes(objects, 64 << 10, 16 << 20, 2);
            let t = synth::zipf_trace(&sizes, accesses, 0.9, 3);
            t.write_binary(std::path::Path::new(&args[3]))?;
        }
        _ => {
            eprintln!("usage: synth llm [TOKENS] > OUT.csv | synth zipf OBJECTS ACCESSES OUT.bin");
            std::process::exit(2);
        }
    }
    Ok(())
}
