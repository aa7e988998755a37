//! `asynct`: the command-line front of the engine.
//!
//! - `asynct init --preset NAME --out DIR [--seed N]` writes a generated checkpoint.
//! - `asynct generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) ...` generates on the
//!   `--device` (the GPU when there is one, else the CPU) and prints the completion, then a
//!   one-line summary on stderr.
//! - `asynct eval --model DIR --text FILE [--max-len N] ...` prints the perplexity and next-token
//!   accuracy of the checkpoint over the file, every position's logits from the engine.
//! - `asynct serve --model DIR [--port 8000] ...` serves the model over an OpenAI-compatible HTTP
//!   API until SIGINT or SIGTERM.
//! - `asynct bench --model DIR (--scenario NAME | --decode-batch 1,32,128) ...` times the engine.
//! - `asynct bench-serve --url http://HOST:PORT ...` loads a running server over HTTP and times it.
//!
//! This crate parses arguments, prints and speaks HTTP; the engine lives in `model`, the numerics in
//! `oracle`. The server's layers: [`api`] (requests, validation, errors), [`chat_template`],
//! [`conn`] (the listening socket, the accept loop and each connection's limits), [`http`] and
//! [`respond`] (routes, JSON and SSE), [`engine_thread`] (the one owner of the engine, and the
//! thread that delivers its events), [`metrics`], and [`load`] (the tokenizer, the executor for
//! `--device` and the scheduler's limits, shared by `generate`, `serve` and [`bench`](mod@bench)).

mod api;
mod bench;
mod bench_serve;
mod cli;
mod conn;
mod engine_thread;
mod eval;
mod generate;
mod http;
mod load;
mod logits_dump;
mod metrics;
mod respond;
mod serve;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    let result = match cli.command {
        cli::Command::Init(args) => args
            .preset
            .parse::<model::presets::Preset>()
            .and_then(|preset| model::presets::generate(preset, &args.out, args.seed))
            .map(|()| eprintln!("wrote {} to {}", args.preset, args.out.display()))
            .map_err(|e| e.to_string()),
        cli::Command::Generate(args) => generate::run(&args),
        cli::Command::Eval(args) => eval::run(&args),
        cli::Command::Serve(args) => serve::run(&args),
        cli::Command::Bench(args) => bench::run(&args),
        cli::Command::BenchServe(args) => bench_serve::run(&args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("error: {msg}");
            std::process::ExitCode::FAILURE
        }
    }
}
