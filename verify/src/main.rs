//! `asynct-verify`: fuzz every registered HP1 path against the oracle, or replay saved cases.
//!
//! ```text
//! asynct-verify fuzz --minutes 1 --seed 7 [--out verify/regressions] [--gpu] [--min-cases-per-path N]
//! asynct-verify replay [--gpu] verify/regressions/*.json
//! ```
//!
//! `--gpu` adds the GPU kernel paths to the oracle's decompositions (it fails without a GPU) and
//! draws the small cases in the shapes the kernels take. A fuzz run prints, per path, the cases
//! run, passed and failed and the worst error beside the path's bound.
//!
//! Exit status: 0 when every check passed (and, with `--min-cases-per-path`, every path ran that
//! many cases), 1 when a path failed (each shrunk case is saved) or ran too few cases, 2 when
//! the command could not run (a bad argument, an unreadable file).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use proptest::strategy::BoxedStrategy;
use verify::{all_paths, fuzz, fuzz_case, gpu_paths::gpu_paths, kernel_fuzz_case, Case, FuzzConfig, Path, Regression};

#[derive(Parser)]
#[command(name = "asynct-verify", about = "Holds every HP1 path against the f64 oracle on seeded cases.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Draw cases from a seed until time runs out; shrink and save each failure.
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
        /// Fail unless every path was checked on at least this many cases.
        #[arg(long, default_value_t = 0)]
        min_cases_per_path: usize,
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
        Command::Fuzz { minutes, seed, out, shrink_seconds, gpu, min_cases_per_path } => {
            if !(minutes.is_finite() && minutes >= 0.0) {
                eprintln!("`--minutes` must be a finite number >= 0. Given: {minutes}");
                return ExitCode::from(2);
            }
            let config = FuzzConfig {
                seed,
                duration: Duration::from_secs_f64(minutes * 60.0),
                shrink_time: Duration::from_secs(shrink_seconds),
                out_dir: out,
            };
            let strategy = if gpu { kernel_fuzz_case() } else { fuzz_case() };
            run_fuzz(&paths, &strategy, &config, min_cases_per_path)
        }
        Command::Replay { files, .. } => replay(&paths, &files),
    }
}

fn run_fuzz(paths: &[Box<dyn Path>], strategy: &BoxedStrategy<Case>, config: &FuzzConfig, min: usize) -> ExitCode {
    let started = Instant::now();
    let outcome = match fuzz(paths, strategy, config) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("fuzz: {e}");
            return ExitCode::from(2);
        }
    };
    let secs = started.elapsed().as_secs_f64();
    let mut text = format!(
        "seed {}: {} cases drawn in {secs:.0} s ({:.1} a second), built on {} worker threads\n",
        config.seed,
        outcome.cases,
        outcome.cases as f64 / secs.max(1e-9),
        outcome.workers
    );
    text += &format!(
        "  {:<34} {:>7} {:>7} {:>6} {:>16} {:>15} {:>9}\n",
        "path", "run", "passed", "failed", "worst row bound", "worst rel. L2", "tolerance"
    );
    for (path, c) in &outcome.per_path {
        text += &format!(
            "  {path:<34} {:>7} {:>7} {:>6} {:>16.3} {:>15.2e} {:>9.0e}\n",
            c.run, c.passed, c.failed, c.worst_bound_use, c.worst_error, c.tolerance
        );
    }
    if let Some((lo, hi)) = outcome.zero_fraction {
        text += &format!("gate zero fraction: {:.1}% to {:.1}%\n", lo * 100.0, hi * 100.0);
    }
    if let Err(e) = std::io::stdout().lock().write_all(text.as_bytes()) {
        eprintln!("writing the summary: {e}");
    }
    for (file, reg) in &outcome.failures {
        eprintln!("FAILED: {}\n  shrunk case saved to {}", reg.failure, file.display());
    }
    let short = outcome.under(min);
    for (path, run) in &short {
        eprintln!("TOO FEW CASES: {path} was checked on {run} cases, fewer than --min-cases-per-path {min}");
    }
    let failed = outcome.per_path.values().any(|c| c.failed > 0);
    if failed || !short.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
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
                Ok(r) => writeln!(
                    out,
                    "{}: {} ok (worst row at {:.2} of its bound, relative L2 {:.2e}, tolerance {:.0e})",
                    file.display(),
                    r.path,
                    r.bound_use,
                    r.error,
                    r.tolerance
                ),
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
