//! `asynct-verify`: fuzz every registered HP1 path against the oracle, or replay saved cases.
//!
//! ```text
//! asynct-verify fuzz --minutes 1 --seed 7 [--out verify/regressions] [--gpu]
//! asynct-verify replay [--gpu] verify/regressions/*.json
//! ```
//!
//! `--gpu` adds the GPU kernel paths to the oracle's decompositions (it fails without a GPU).
//!
//! Exit status: 0 when every check passed, 1 when a path failed (the shrunk case is saved),
//! 2 when the command could not run (a bad argument, an unreadable file).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use verify::{all_paths, fuzz, fuzz_case, gpu_paths::gpu_paths, FuzzConfig, Path, Regression};

#[derive(Parser)]
#[command(name = "asynct-verify", about = "Holds every HP1 path against the f64 oracle on seeded cases.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Draw cases from a seed until time runs out; shrink and save the first failure.
    Fuzz {
        /// How long to draw cases, in minutes (fractions allowed).
        #[arg(long)]
        minutes: f64,
        /// Seed of the case sequence.
        #[arg(long)]
        seed: u64,
        /// Folder for a failing case.
        #[arg(long, default_value = "verify/regressions")]
        out: PathBuf,
        /// Longest time spent shrinking a failure, in seconds.
        #[arg(long, default_value_t = 120)]
        shrink_seconds: u64,
        /// Also run the GPU kernel paths.
        #[arg(long)]
        gpu: bool,
    },
    /// Run every path on saved cases.
    Replay {
        /// Saved case files (JSON).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Also run the GPU kernel paths.
        #[arg(long)]
        gpu: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (Command::Fuzz { gpu, .. } | Command::Replay { gpu, .. }) = &cli.command;
    let mut paths = all_paths();
    if *gpu {
        match gpu::Gpu::new() {
            Ok(g) => paths.extend(gpu_paths(&g)),
            Err(e) => {
                eprintln!("--gpu: {e}");
                return ExitCode::from(2);
            }
        }
    }
    match cli.command {
        Command::Fuzz { minutes, seed, out, shrink_seconds, .. } => run_fuzz(&paths, minutes, seed, out, shrink_seconds),
        Command::Replay { files, .. } => replay(&paths, &files),
    }
}

fn run_fuzz(paths: &[Box<dyn Path>], minutes: f64, seed: u64, out_dir: PathBuf, shrink_seconds: u64) -> ExitCode {
    if !(minutes.is_finite() && minutes >= 0.0) {
        eprintln!("`--minutes` must be a finite number >= 0. Given: {minutes}");
        return ExitCode::from(2);
    }
    let config = FuzzConfig {
        seed,
        duration: Duration::from_secs_f64(minutes * 60.0),
        shrink_time: Duration::from_secs(shrink_seconds),
        out_dir,
    };
    let outcome = match fuzz(paths, &fuzz_case(), &config) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("fuzz: {e}");
            return ExitCode::from(2);
        }
    };
    let mut out = std::io::stdout().lock();
    let mut printed = writeln!(out, "seed {seed}: {} cases drawn", outcome.cases);
    for (path, n) in &outcome.per_path {
        printed = printed.and_then(|_| writeln!(out, "  {path:<32} {n} cases"));
    }
    if let Some((lo, hi)) = outcome.zero_fraction {
        printed = printed.and_then(|_| {
            writeln!(out, "gate zero fraction over passing cases: {:.1}% to {:.1}%", lo * 100.0, hi * 100.0)
        });
    }
    if let Err(e) = printed {
        eprintln!("writing the summary: {e}");
    }
    match outcome.failure {
        None => ExitCode::SUCCESS,
        Some((file, reg)) => {
            eprintln!("FAILED: {}", reg.failure);
            eprintln!("shrunk case saved to {}", file.display());
            ExitCode::from(1)
        }
    }
}

fn replay(paths: &[Box<dyn Path>], files: &[PathBuf]) -> ExitCode {
    let mut out = std::io::stdout().lock();
    let mut failed = false;
    for file in files {
        let reg = match Regression::load(file) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        };
        for result in reg.replay(paths) {
            match result {
                Ok(r) => {
                    writeln!(out, "{}: {} ok (error {:.2e} <= {:.0e})", file.display(), r.path, r.error, r.tolerance)
                }
                Err(f) => {
                    failed = true;
                    writeln!(out, "{}: FAILED {f}", file.display())
                }
            }
            .unwrap_or_else(|e| eprintln!("writing the report: {e}"));
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
