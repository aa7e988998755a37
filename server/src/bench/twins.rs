//! Issue 15's probe of a decode step that runs its batch as two halves at once: two engines,
//! each with a CUDA stream of its own on the one device, each decoding half of a batch, stepped
//! in turn (`--decode-twins`).
//!
//! At 65 to 128 rows a step's attention reads K and V near the memory's bandwidth while its GEMMs
//! run far below it (their time goes to latency and tensor work), one after the other. Two
//! halves on two streams could overlap one half's attention with the other's GEMMs, at the price
//! of reading every weight twice. This measures what that could give before any step program is
//! changed for it: each engine steps with its own graphs and pipelining, so the device holds both
//! engines' steps at once. The time of a pair of steps (one each) bounds a step of the whole
//! batch in overlapping halves from above, by about one LM head (each twin runs its own). The
//! run's `--decode-batch` figures are the whole batches' steps to set it beside. RESULTS run 309
//! measured it and closed the halves: slower than the whole batch past 64 rows.

use std::time::Instant;

use model::engine::Engine;
use serde::Serialize;

use super::decode::{decode_step, end_batch, start_batch};
use super::{millis, PromptSource, Summary};
use crate::cli::BenchArgs;

/// A batch's figures as two engines of half the batch each.
#[derive(Clone, Debug, Serialize)]
pub struct TwinsResult {
    /// The whole batch: each engine decodes half of it.
    batch: usize,
    context: usize,
    timed_steps: usize,
    /// Wall time of one step of each engine, the second queued while the first runs.
    pair_ms: Summary,
}

/// Prefills half of `batch` on each engine, runs the warm-up steps in turn, then times `timed`
/// pairs of steps (one step of each engine, queued back to back).
pub fn run_twins(
    engines: [&mut Engine; 2],
    batch: usize,
    args: &BenchArgs,
    timed: usize,
    prompts: [&PromptSource; 2],
) -> Result<TwinsResult, String> {
    let half = batch / 2;
    let [a, b] = engines;
    let started_a = start_batch(a, half, args, timed, prompts[0])?;
    let started_b = start_batch(b, half, args, timed, prompts[1])?;
    let pair = |a: &mut Engine, b: &mut Engine, what: &str| -> Result<f64, String> {
        let t = Instant::now();
        decode_step(a, half, what)?;
        decode_step(b, half, what)?;
        Ok(millis(t.elapsed()))
    };
    for _ in 0..args.warmup_steps {
        pair(a, b, "warm-up")?;
    }
    let times = (0..timed).map(|_| pair(a, b, "timed")).collect::<Result<Vec<_>, String>>()?;
    for (engine, started) in [(a, started_a), (b, started_b)] {
        engine.settle().map_err(|e| e.to_string())?;
        end_batch(engine, started.ids)?;
    }
    let pair_ms = Summary::of(&times).expect("at least one timed step");
    Ok(TwinsResult { batch, context: args.context, timed_steps: timed, pair_ms })
}

/// One line per batch.
pub fn print_twins(r: &TwinsResult) {
    println!(
        "decode twins B{}: two engines of {} rows on streams of their own, a step each in turn: median {:.3} ms a \
         pair, mean {:.3}, min {:.3} over {} pairs (context {})",
        r.batch,
        r.batch / 2,
        r.pair_ms.median,
        r.pair_ms.mean,
        r.pair_ms.min,
        r.timed_steps,
        r.context
    );
}
