//! `asynct-bench`: times HP1 attention on the GPU over the grids of SPEC section 7 and prints it
//! beside the attention anchor measured in the same device call (`scripts/attention_anchor.py`:
//! SDPA cuDNN, SDPA flash and FlashInfer's paged decode).
//!
//! `asynct-bench [--anchor anchor.json] [--out bench.json] [--quick] [--calls N] [--reps N]
//! [--trials N] [--no-graph] [--lengths uniform|spread|one-long]` times decode (`--lengths`: how
//! each point's sequence lengths are laid out up to its context; the anchor's are uniform);
//! `--prefill` times the prefill grid instead (the anchor run with `--prefill` holds its side)
//! and `--prefill-crossover` the chunked-prefill crossover of fake decode and the tensor-core
//! kernels; the two may be given together.
//!
//! Every path gets two figures (`verify::bench::timing`): graph-timed, one CUDA graph of `--calls`
//! launches replayed `--trials` times (the median per launch: the figure reported and compared,
//! as the anchor's `ms`), and back-to-back, `--reps` launches from the host per trial, beside it.
//! `--no-graph` leaves the graph out, so that under ncu the profiled launches are eager ones
//! (`scripts/device-run.sh ncu`).
//!
//! `--gemm` times the GEMMs of asynct-0.5b instead (`verify::bench::gemm`): every weight shape at
//! M of 1, 8, 32, 64, 128 through each skinny instantiation and cuBLASLt, with `--point` (e.g.
//! `qkv_M8`) and `--path` (e.g. `cublaslt`) selecting, and `--quick` only M 1 and 32.

use clap::Parser;
use verify::bench::data::Lengths;
use verify::bench::decode::{measure, parse_point_key, point_key, DecodePoint};
use verify::bench::gemm::{self, GemmPoint};
use verify::bench::prefill::{
    self, crossover_shapes, fake_decode_wins_up_to, parse_prefill_key, Crossover, PrefillPoint, PrefillShape,
};
use verify::bench::report::{crossover_table, prefill_table, table};
use verify::bench::timing::Timing;

/// The prefill grid of SPEC section 7: (batch, length).
const PREFILL_GRID: [(usize, usize); 4] = [(32, 256), (16, 1024), (4, 4096), (1, 16384)];
/// The crossover step: sequences, cached tokens, then each chunk length.
const CROSSOVER_BATCH: usize = 8;
/// Cached tokens per sequence before the crossover's chunk.
const CROSSOVER_PREFIX: usize = 4096;
/// The crossover's chunk lengths.
const CROSSOVER_QUERIES: [usize; 5] = [16, 32, 64, 128, 256];

#[derive(Parser, Debug)]
#[command(about = "HP1 kernel benchmark against the attention anchor (SDPA, FlashInfer)")]
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
    /// Launches captured in each CUDA graph [default: 40 for decode, 20 for prefill, as the anchor].
    #[arg(long)]
    calls: Option<usize>,
    /// Back-to-back launches per timed trial [default: 50 for decode, 20 for prefill].
    #[arg(long)]
    reps: Option<usize>,
    /// Graph replays and back-to-back trials per path (the median of each is reported).
    #[arg(long, default_value_t = 7)]
    trials: usize,
    /// Only the back-to-back figure, no CUDA graph (for ncu, which then profiles eager launches).
    #[arg(long)]
    no_graph: bool,
    /// Only this grid point, e.g. `B128_L4096`, `B1_T16384` or `B8_P4096_Q64` (for profiling
    /// one launch with ncu); a decode point off the default grid (`B256_L4096`) is measured too,
    /// and with --prefill a full prefill off it (`B256_T64`).
    #[arg(long)]
    point: Option<String>,
    /// How each decode point's sequence lengths are laid out up to its context: uniform (the
    /// SPEC's grid, beside the anchor), spread (evenly up to it) or one-long (one sequence of
    /// it among short ones); the point's name carries the choice, e.g. `B128_L4096_spread`.
    #[arg(long, value_enum, default_value_t)]
    lengths: Lengths,
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
    /// Time the GEMMs of asynct-0.5b's weight shapes (skinny kernel, cuBLASLt; with --prefill at
    /// the prefill steps' M, the WGMMA kernel and cuBLASLt) instead of attention.
    #[arg(long)]
    gemm: bool,
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
    if args.gemm {
        return run_gemm(args, &gpu);
    }
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
    let timing = args.timing(50, 40);
    // A point names its own batch and context, on the grid or off it; one that names no decode
    // point of this lengths profile is refused, not a run that measures nothing.
    let named = args.point.as_deref().map(|p| parse_point_key(p, args.lengths)).transpose()?;
    let grid: Vec<(usize, usize)> = if let Some(point) = named {
        vec![point]
    } else if args.quick {
        vec![(1, 1024), (1, 16384), (128, 1024), (128, 16384)]
    } else {
        [1, 32, 128].iter().flat_map(|&b| [1024, 4096, 16384].map(|l| (b, l))).collect()
    };
    println!("asynct-bench on {} ({})", gpu.info().name, method(&timing));
    let mut points: Vec<DecodePoint> = Vec::new();
    let mut failures = Vec::new();
    for (batch, context) in grid {
        let key = point_key(batch, context, args.lengths);
        let point = measure(&gpu, (batch, context, args.lengths), &timing, args.path.as_deref())?;
        for t in &point.paths {
            let (graph_us, tbps) = (t.graph_ms.map_or(f64::NAN, |ms| ms * 1e3), t.graph_tbps.unwrap_or(f64::NAN));
            let error = t.error.as_ref().map_or(String::new(), |e| format!("  error: {e}"));
            println!(
                "{key} {:<24} graph {graph_us:>9.2} us {tbps:>6.2} TB/s  back-to-back {:>9.2} us{error}",
                t.name,
                t.eager_ms * 1e3
            );
            if let Some(e) = &t.error {
                failures.push(format!("{key} {}: {e}", t.name));
            }
        }
        points.push(point);
    }
    write_json(args, serde_json::json!({ "device": gpu.info().name, "timing": timing, "decode": points }))?;
    println!("\n{}", table(&points, anchor.as_ref()));
    match failures.len() {
        0 => Ok(()),
        n => Err(format!("{n} CUDA graph failure(s): {}", failures.join("; "))),
    }
}

impl Args {
    /// The timing settings, with the decode or the prefill grid's defaults.
    fn timing(&self, reps: usize, calls: usize) -> Timing {
        // At least one of each, so the figures printed and written are the ones timed.
        Timing {
            reps: self.reps.unwrap_or(reps).max(1),
            calls: (!self.no_graph).then(|| self.calls.unwrap_or(calls).max(1)),
            trials: self.trials.max(1),
        }
    }
}

/// The timing method in words, for the first line of the output.
fn method(t: &Timing) -> String {
    let eager = format!("back-to-back: {} launches x {} trials", t.reps, t.trials);
    match t.calls {
        Some(calls) => format!("median of {} replays of a CUDA graph of {calls} launches; {eager}", t.trials),
        None => format!("no CUDA graph; {eager}"),
    }
}

/// The prefill grid and/or the crossover; fails at the end (after the JSON and the tables) when
/// any path failed.
fn run_prefill(args: &Args, gpu: &std::sync::Arc<gpu::Gpu>, anchor: Option<&serde_json::Value>) -> Result<(), String> {
    let timing = args.timing(20, 20);
    let info = gpu.info();
    let cc = info.compute_capability;
    println!("asynct-bench prefill on {} (sm_{}{}; {})", info.name, cc.0, cc.1, method(&timing));
    let mut json = serde_json::json!({ "device": info.name, "compute_capability": [cc.0, cc.1], "timing": timing });
    let mut failures = Vec::new();
    let mut tables = String::new();
    if args.prefill {
        // A named full prefill, on the grid or off it (B256_T64: a tile's cost outside its key loop).
        let shapes = match args.point.as_deref().and_then(parse_prefill_key).transpose()? {
            Some(named) => vec![named],
            None => {
                let grid = if args.quick { vec![PREFILL_GRID[0], PREFILL_GRID[3]] } else { PREFILL_GRID.to_vec() };
                grid.into_iter().map(|(b, t)| PrefillShape::prefill(b, t)).collect()
            }
        };
        let points = measure_points(args, gpu, &timing, shapes, &mut failures);
        tables += &format!("\n{}", prefill_table(&points, anchor));
        json["prefill"] = serde_json::to_value(&points).expect("plain data serialises");
    }
    if args.prefill_crossover {
        let queries: &[usize] = if args.quick { &[16, 64, 256] } else { &CROSSOVER_QUERIES };
        let shapes = crossover_shapes(CROSSOVER_BATCH, CROSSOVER_PREFIX, queries);
        let points = measure_points(args, gpu, &timing, shapes, &mut failures);
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
    timing: &Timing,
    shapes: Vec<PrefillShape>,
    failures: &mut Vec<String>,
) -> Vec<PrefillPoint> {
    let mut points = Vec::new();
    for shape in shapes {
        if args.point.as_ref().is_some_and(|p| *p != shape.key()) {
            continue;
        }
        let point = match prefill::measure(gpu, shape, timing, args.path.as_deref()) {
            Ok(point) => point,
            Err(e) => {
                eprintln!("{}: {e}", shape.key());
                failures.push(format!("{}: {e}", shape.key()));
                continue;
            }
        };
        for t in &point.paths {
            let us = |ms: Option<f64>| ms.map_or(f64::NAN, |ms| ms * 1e3);
            let (graph_us, eager_us, tflops) = (us(t.graph_ms), us(t.eager_ms), t.graph_tflops.unwrap_or(f64::NAN));
            let error = t.error.as_ref().map_or(String::new(), |e| format!("  error: {e}"));
            println!(
                "{} {:<18} {:<26} graph {graph_us:>10.1} us {tflops:>7.1} TFLOP/s  back-to-back {eager_us:>10.1} us{error}",
                point.key, t.name, t.ran
            );
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

/// The GEMM grid; fails at the end (after the JSON and the table) when any plan failed.
fn run_gemm(args: &Args, gpu: &std::sync::Arc<gpu::Gpu>) -> Result<(), String> {
    let timing = args.timing(50, 40);
    println!("asynct-bench gemm on {} ({})", gpu.info().name, method(&timing));
    let ms: &[usize] = match (args.prefill, args.quick) {
        (true, _) => &gemm::PREFILL_M_GRID,
        (false, true) => &[1, 32],
        (false, false) => &gemm::M_GRID,
    };
    let mut points: Vec<GemmPoint> = Vec::new();
    let mut failures = Vec::new();
    // A point names its own M, on the grid or off it (e.g. `down_M96`); one naming no weight's M
    // is refused, not a run that measures nothing.
    let named = args
        .point
        .as_deref()
        .map(|p| {
            GemmPoint::parse_key(p).ok_or_else(|| {
                let weights: Vec<&str> = gemm::WEIGHTS.iter().map(|w| w.0).collect();
                format!(
                    "--point {p}: a GEMM point is WEIGHT_M<M>, WEIGHT one of {weights:?}, M 1 to {}",
                    gemm::MAX_POINT_M
                )
            })
        })
        .transpose()?;
    for weight in gemm::WEIGHTS {
        let selected: Vec<usize> = match named {
            Some((w, m)) => (w == weight.0).then_some(m).into_iter().collect(),
            None => ms.to_vec(),
        };
        if selected.is_empty() {
            continue;
        }
        for point in gemm::measure(gpu, weight, &selected, &timing, args.path.as_deref())? {
            for t in &point.paths {
                let us = |ms: Option<f64>| ms.map_or(f64::NAN, |ms| ms * 1e3);
                let mark = if t.dispatcher { "*" } else { " " };
                let error = t.error.as_ref().map_or(String::new(), |e| format!("  error: {e}"));
                let algo = t.algo.as_ref().map_or(String::new(), |a| format!("  [{a}]"));
                println!(
                    "{:<12} {mark}{:<14} graph {:>9.2} us {:>5.2} TB/s {:>6.1} TFLOP/s  back-to-back {:>9.2} us{algo}{error}",
                    GemmPoint::key(&point.weight, point.m),
                    t.name,
                    us(t.graph_ms),
                    t.graph_tbps.unwrap_or(f64::NAN),
                    t.graph_tflops.unwrap_or(f64::NAN),
                    us(t.eager_ms)
                );
                if let Some(e) = &t.error {
                    failures.push(format!("{} {}: {e}", GemmPoint::key(&point.weight, point.m), t.name));
                }
            }
            points.push(point);
        }
    }
    let sms = gpu.multiprocessors().map_err(|e| e.to_string())?;
    write_json(args, serde_json::json!({ "device": gpu.info().name, "sms": sms, "timing": timing, "gemm": points }))?;
    println!("\n(* the dispatcher's plan)\n{}", gemm::table(&points));
    println!("\n{}", gemm::orders_table(&points));
    match failures.len() {
        0 => Ok(()),
        n => Err(format!("{n} GEMM failure(s): {}", failures.join("; "))),
    }
}

fn write_json(args: &Args, json: serde_json::Value) -> Result<(), String> {
    match &args.out {
        Some(out) => std::fs::write(out, serde_json::to_string_pretty(&json).expect("plain data serialises"))
            .map_err(|e| format!("{}: {e}", out.display())),
        None => Ok(()),
    }
}
