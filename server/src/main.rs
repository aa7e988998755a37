//! `asynct`: the command-line front of the engine.
//!
//! - `asynct init --preset NAME --out DIR [--seed N]` writes a generated checkpoint.
//! - `asynct generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) ...` generates on the CPU
//!   backend and prints the completion, then a one-line summary on stderr.
//!
//! This crate only parses arguments and prints; the engine lives in `model`, the numerics in `oracle`.

// used by the serve module (issue 10), in progress
#[cfg_attr(not(test), allow(dead_code))]
mod api;
// used by the serve module (issue 10), in progress
#[cfg_attr(not(test), allow(dead_code))]
mod chat_template;
mod cli;
mod generate;
mod logits_dump;
// used by the serve module (issue 10), in progress
#[cfg_attr(not(test), allow(dead_code))]
mod metrics;

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
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("error: {msg}");
            std::process::ExitCode::FAILURE
        }
    }
}
