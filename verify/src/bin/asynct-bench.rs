//! `asynct-bench`: times HP1 attention on the GPU over the grids of SPEC section 7 and prints it
//! beside the attention anchor measured in the same device call (`scripts/attention_anchor.py`).
//!
//! `asynct-bench [--anchor anchor.json] [--out bench.json] [--quick] [--reps N] [--trials N]`
//! times decode; `--prefill` times the prefill grid instead (the anchor run with `--prefill`
//! holds its SDPA side) and `--prefill-crossover` the chunked-prefill crossover of fake decode
//! and the tensor-core kernels; the two may be given together.

use clap::Parser;
use verify::bench::decode::{measure, DecodePoint};
use verify::bench::prefill::{self, crossover_shapes, fake_decode_wins_up_to, Crossover, PrefillPoint, StepShape};
use verify::bench::report::{crossover_table, prefill_table, table};

/// The prefill grid of SPEC section 7: (batch, length).
const PREFILL_GRID: [(usize, usize); 4] = [(32, 256), (16, 1024), (4, 4096), (1, 16384)];
/// The crossover step: sequences, cached tokens, then each chunk length.
const CROSSOVER_BATCH: usize = 8;
/// Cached tokens per sequence before the crossover's chunk.
const CROSSOVER_PREFIX: usize = 4096;
/// The crossover's chunk lengths.
const CROSSOVER_QUERIES: [usize; 5] = [16, 32, 64, 128, 256];

#[derive(Parser, Debug)]
#[command(about = "HP1 kernel benchmark against the SDPA anchor")]
struct Args {
    /// JSON written by scripts/attention_anchor.py in the same device call.
    #[arg(long)]
    anchor: Option<std::path::PathBuf>,
    /// Where to write every measurement as JSON.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// Only the corners of the grid (decode: batch 1 and 128 at 1K and 16K; prefill: (32, 256)
    /// and (1, 16K); crossover: queries 16, 64, 256).
    #[arg(long)]
    quick: bool,
    /// Launches per timed trial [default: 50 for decode, 20 for prefill, as the anchor].
    #[arg(long)]
    reps: Option<usize>,
    /// Trials per path (the median is reported).
    #[arg(long, default_value_t = 7)]
    trials: usize,
    /// Only this grid point, e.g. `B128_L4096`, `B1_T16384` or `B8_P4096_Q64` (for profiling
    /// one launch with ncu).
    #[arg(long)]
    point: Option<String>,
    /// Only plans whose name contains this, e.g. `split-k-sparse-g8`, `prefill-mma` or `auto`.
    #[arg(long)]
    path: Option<String>,
    /// Time the prefill grid (fake decode, MMA, WGMMA, the dispatcher) instead of decode.
    #[arg(long)]
    prefill: bool,
    /// Time fake decode against MMA and WGMMA on chunks of 16 to 256 tokens after a 4096-token
    /// prefix (8 sequences), to place FAKE_DECODE_MAX_QUERY; instead of decode.
    #[arg(long)]
    prefill_crossover: bool,
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
            serde_json::from_str::<serde_json::Value>(
                &std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?,
            )
            .map_err(|e| format!("{}: {e}", p.display()))?,
        ),
        None => None,
    };
    if args.prefill || args.prefill_crossover {
        return run_prefill(args, &gpu, anchor.as_ref());
    }
    let reps = args.reps.unwrap_or(50);
    let grid: Vec<(usize, usize)> = if args.quick {
        vec![(1, 1024), (1, 16384), (128, 1024), (128, 16384)]
    } else {
        [1, 32, 128].iter().flat_map(|&b| [1024, 4096, 16384].map(|l| (b, l))).collect()
    };
    println!("asynct-bench on {} ({} reps x {} trials, median)", gpu.info().name, reps, args.trials);
    let mut points: Vec<DecodePoint> = Vec::new();
    for (batch, context) in grid {
        if args.point.as_ref().is_some_and(|p| *p != format!("B{batch}_L{context}")) {
            continue;
        }
        let point = measure(&gpu, batch, context, reps, args.trials, args.path.as_deref())?;
        for t in &point.paths {
            println!("B{batch}_L{context} {:<24} {:>9.2} us {:>6.2} TB/s", t.name, t.ms * 1e3, t.effective_tbps);
        }
        points.push(point);
    }
    write_json(args, serde_json::json!({ "device": gpu.info().name, "decode": points }))?;
    println!("\n{}", table(&points, anchor.as_ref()));
    Ok(())
}

/// The prefill grid and/or the crossover; fails at the end (after the JSON and the tables) when
/// any path failed.
fn run_prefill(args: &Args, gpu: &std::sync::Arc<gpu::Gpu>, anchor: Option<&serde_json::Value>) -> Result<(), String> {
    let reps = args.reps.unwrap_or(20);
    let info = gpu.info();
    let cc = info.compute_capability;
    println!(
        "asynct-bench prefill on {} (sm_{}{}, {} reps x {} trials, median)",
        info.name, cc.0, cc.1, reps, args.trials
    );
    let mut json = serde_json::json!({ "device": info.name, "compute_capability": [cc.0, cc.1] });
    let mut failures = Vec::new();
    let mut tables = String::new();
    if args.prefill {
        let grid = if args.quick { vec![PREFILL_GRID[0], PREFILL_GRID[3]] } else { PREFILL_GRID.to_vec() };
        let shapes = grid.into_iter().map(|(b, t)| StepShape::prefill(b, t)).collect();
        let points = measure_points(args, gpu, reps, shapes, &mut failures);
        tables += &format!("\n{}", prefill_table(&points, anchor));
        json["prefill"] = serde_json::to_value(&points).expect("plain data serialises");
    }
    if args.prefill_crossover {
        let queries: &[usize] = if args.quick { &[16, 64, 256] } else { &CROSSOVER_QUERIES };
        let shapes = crossover_shapes(CROSSOVER_BATCH, CROSSOVER_PREFIX, queries);
        let points = measure_points(args, gpu, reps, shapes, &mut failures);
        let crossover = Crossover {
            batch: CROSSOVER_BATCH,
            prefix: CROSSOVER_PREFIX,
            fake_decode_max_query: gpu::attention::FAKE_DECODE_MAX_QUERY,
            measured_max_query: fake_decode_wins_up_to(&points),
            points,
        };
        tables += &format!("\n{}", crossover_table(&crossover));
        json["crossover"] = serde_json::to_value(&crossover).expect("plain data serialises");
    }
    write_json(args, json)?;
    println!("{tables}");
    match failures.len() {
        0 => Ok(()),
        n => Err(format!("{n} prefill failure(s): {}", failures.join("; "))),
    }
}

/// Times each selected shape, printing each path as it is measured. A path's failure is kept in
/// its point; a point that cannot be set up at all (plans, buffers) is left out. Both are added
/// to `failures`, and the remaining shapes still run (the JSON keeps what was measured).
fn measure_points(
    args: &Args,
    gpu: &std::sync::Arc<gpu::Gpu>,
    reps: usize,
    shapes: Vec<StepShape>,
    failures: &mut Vec<String>,
) -> Vec<PrefillPoint> {
    let mut points = Vec::new();
    for shape in shapes {
        if args.point.as_ref().is_some_and(|p| *p != shape.key()) {
            continue;
        }
        let point = match prefill::measure(gpu, shape, reps, args.trials, args.path.as_deref()) {
            Ok(point) => point,
            Err(e) => {
                eprintln!("{}: {e}", shape.key());
                failures.push(format!("{}: {e}", shape.key()));
                continue;
            }
        };
        for t in &point.paths {
            let (us, tflops) = (t.ms.map_or(f64::NAN, |ms| ms * 1e3), t.tflops.unwrap_or(f64::NAN));
            let error = t.error.as_ref().map_or(String::new(), |e| format!("  error: {e}"));
            println!("{} {:<18} {:<26} {us:>10.1} us {tflops:>7.1} TFLOP/s{error}", point.key, t.name, t.ran);
            if let Some(e) = &t.error {
                failures.push(format!("{} {}: {e}", point.key, t.name));
            }
        }
        for note in &point.skipped {
            println!("{} skipped {note}", point.key);
        }
        points.push(point);
    }
    points
}

fn write_json(args: &Args, json: serde_json::Value) -> Result<(), String> {
    match &args.out {
        Some(out) => std::fs::write(out, serde_json::to_string_pretty(&json).expect("plain data serialises"))
            .map_err(|e| format!("{}: {e}", out.display())),
        None => Ok(()),
    }
}
