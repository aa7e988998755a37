//! `asynct-bench`: times HP1 decode on the GPU over the grid of SPEC section 7 and prints it
//! beside the PyTorch SDPA anchor measured in the same device call (`scripts/sdpa_anchor.py`).
//!
//! `asynct-bench [--anchor anchor.json] [--out bench.json] [--quick] [--reps N] [--trials N]`

use clap::Parser;
use verify::bench::decode::{measure, DecodePoint};
use verify::bench::report::table;

#[derive(Parser, Debug)]
#[command(about = "HP1 kernel benchmark against the SDPA anchor")]
struct Args {
    /// JSON written by scripts/sdpa_anchor.py in the same device call.
    #[arg(long)]
    anchor: Option<std::path::PathBuf>,
    /// Where to write every measurement as JSON.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// Only the corners of the grid (batch 1 and 128 at 1K and 16K).
    #[arg(long)]
    quick: bool,
    /// Launches per timed trial.
    #[arg(long, default_value_t = 50)]
    reps: usize,
    /// Trials per path (the median is reported).
    #[arg(long, default_value_t = 7)]
    trials: usize,
    /// Only this grid point, e.g. `B128_L4096` (for profiling one launch with ncu).
    #[arg(long)]
    point: Option<String>,
    /// Only plans whose name contains this, e.g. `split-k-sparse-g8` or `auto`.
    #[arg(long)]
    path: Option<String>,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("error: {msg}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    let gpu = gpu::Gpu::new().map_err(|e| format!("asynct-bench needs a GPU: {e}"))?;
    let anchor = match &args.anchor {
        Some(p) => Some(
            serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?)
                .map_err(|e| format!("{}: {e}", p.display()))?,
        ),
        None => None,
    };
    let grid: Vec<(usize, usize)> = if args.quick {
        vec![(1, 1024), (1, 16384), (128, 1024), (128, 16384)]
    } else {
        [1, 32, 128].iter().flat_map(|&b| [1024, 4096, 16384].map(|l| (b, l))).collect()
    };
    println!("asynct-bench on {} ({} reps x {} trials, median)", gpu.info().name, args.reps, args.trials);
    let mut points: Vec<DecodePoint> = Vec::new();
    for (batch, context) in grid {
        if args.point.as_ref().is_some_and(|p| *p != format!("B{batch}_L{context}")) {
            continue;
        }
        let point = measure(&gpu, batch, context, args.reps, args.trials, args.path.as_deref())?;
        for t in &point.paths {
            println!("B{batch}_L{context} {:<24} {:>9.2} us {:>6.2} TB/s", t.name, t.ms * 1e3, t.effective_tbps);
        }
        points.push(point);
    }
    if let Some(out) = &args.out {
        let json = serde_json::json!({ "device": gpu.info().name, "decode": points });
        std::fs::write(out, serde_json::to_string_pretty(&json).expect("plain data serialises"))
            .map_err(|e| format!("{}: {e}", out.display()))?;
    }
    println!("\n{}", table(&points, anchor.as_ref()));
    Ok(())
}
