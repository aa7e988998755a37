//! Pure decode steps at a batch size: B requests prefilled through the engine with prompts
//! staggered so that every timed step carries B sequences of one length, then timed (or
//! profiled) step by step, beside the PyTorch anchor and the weight floor.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use model::block_pool::blocks_for;
use model::block_pool::KvCapacity;
use model::engine::{Engine, EngineEvent, StepTimes};
use model::executor::StepPhases;
use model::scheduler::{Scheduler, SchedulerConfig};
use serde::Serialize;

use super::step_timeline::{print_timeline, timeline, StepTimeline};
use super::{millis, PromptSource, Summary};
use crate::cli::BenchArgs;
use model::executor_loader::BLOCK_SIZE;

/// Warm-up steps traced, where the kernels stamp their launches.
const TRACED_STEPS: usize = 5;
/// Steps after the timed ones whose phases are timed on the device with events
/// ([`model::executor::StepExecutor::mark_steps`]), where the backend can.
const MARKED_STEPS: usize = 20;

/// Issue 15's goals for a decode step of asynct-0.5b at 1K context: (batch, ms).
pub const DECODE_GOALS: [(usize, f64); 3] = [(1, 0.40), (32, 1.00), (128, 3.00)];
/// The context [`DECODE_GOALS`] are set at.
pub const GOAL_CONTEXT: usize = 1024;

/// The anchor's best variant at one batch size.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AnchorPoint {
    /// Its label in the anchor's JSON.
    pub variant: String,
    /// Its milliseconds per step.
    pub ms: f64,
}

/// A decode step's host work outside the executor ([`model::engine::StepTimes`]), in ms.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct HostMs {
    /// The scheduler's plan.
    schedule: Summary,
    /// Each drawn token handed to its request (logprobs, detokenising, stop rules) and the commit.
    hand_out: Summary,
    /// The executor's host work to queue a step (inside the executor: uploads and launches),
    /// which the device overlaps only while it runs the step planned before.
    submit: Summary,
}

/// One decode batch's figures.
#[derive(Clone, Debug, Serialize)]
pub struct DecodeResult {
    batch: usize,
    context: usize,
    /// Tokens each timed step attends over, least and most over its sequences and steps.
    attended: (usize, usize),
    prefill_steps: usize,
    warmup_steps: usize,
    timed_steps: usize,
    /// Whether the timed steps ran between cuProfilerStart and cuProfilerStop.
    profiled: bool,
    step_ms: Summary,
    /// The executor's part of the timed steps.
    executor_ms: Summary,
    /// The engine's own host work in the timed steps, by phase.
    host_ms: HostMs,
    anchor: Option<AnchorPoint>,
    ratio_to_anchor: Option<f64>,
    ratio_to_floor: f64,
    /// The weights and every attended K and V byte, read once at the bandwidth (SPEC 7).
    kv_floor_ms: f64,
    ratio_to_kv_floor: f64,
    /// The fraction of this batch's gate weights that are exactly zero, measured on one step
    /// after the timed ones (null where the backend cannot count).
    gate_zero_fraction: Option<f64>,
    /// As `kv_floor_ms`, but reading only the V rows of nonzero gates at that fraction.
    sparse_kv_floor_ms: Option<f64>,
    /// Each launch's time on the step's path over the last warm-up steps, where the kernels
    /// stamped them (`ASYNCT_STEP_TRACE=1`).
    step_trace: Option<StepTimeline>,
    /// The steps after the timed ones, timed in phases on the device (null where the backend
    /// cannot).
    step_phases: Option<PhaseTimes>,
    /// Steps that replayed an even-rows graph (the paired decode kernel) while the timed steps
    /// ran (null where the backend has none; with steps planned ahead, the window is one step
    /// later than the timed one, of the same shape).
    even_rows_steps: Option<u64>,
}

/// [`MARKED_STEPS`] steps' device time by phase ([`StepPhases`]) beside their wall time, in us.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseTimes {
    steps: usize,
    /// The inputs' copies (null where a step ran eagerly).
    inputs: Option<Summary>,
    /// The forward and draw: the graph's replay, from its launch to its last kernel's end.
    forward: Summary,
    /// The tokens and fault word copied back.
    results: Summary,
    /// The step on the device, first event to last.
    device: Summary,
    /// The same steps' wall time: what it exceeds `device` by, the device waited between steps.
    wall: Summary,
}

impl PhaseTimes {
    fn of(phases: &[StepPhases], wall_ms: &[f64]) -> Option<Self> {
        let of = |f: fn(&StepPhases) -> f64| Summary::of(&phases.iter().map(f).collect::<Vec<_>>());
        let inputs: Option<Vec<f64>> = phases.iter().map(|p| p.inputs_us).collect();
        Some(Self {
            steps: phases.len(),
            inputs: inputs.and_then(|v| Summary::of(&v)),
            forward: of(|p| p.forward_us)?,
            results: of(|p| p.results_us)?,
            device: of(|p| p.total_us)?,
            wall: Summary::of(&wall_ms.iter().map(|ms| ms * 1e3).collect::<Vec<_>>())?,
        })
    }
}

/// Bytes a decode step reads: the weights, and K and V per attended token (each the same size).
#[derive(Clone, Copy, Debug)]
pub struct StepBytes {
    /// The matrices, read once.
    pub weights: u64,
    /// K and V of one token over every layer.
    pub kv_per_token: u64,
}

impl StepBytes {
    /// Milliseconds to read the weights and `tokens` tokens' K, and their V but for the
    /// `zero_fraction` of V rows whose gate is zero, at `bytes_per_s`.
    pub fn floor_ms(&self, tokens: f64, zero_fraction: f64, bytes_per_s: f64) -> f64 {
        let kv = tokens * self.kv_per_token as f64 * (1.0 - zero_fraction / 2.0);
        (self.weights as f64 + kv) / bytes_per_s * 1e3
    }
}

/// Prompt lengths for `batch` requests submitted at once such that, when the last of them gets its
/// first token, every sequence holds `start_len` tokens: sequence i's prompt is `start_len` less
/// the tokens it has drawn by then. Those counts come from running the scheduler itself (pure host
/// planning with the engine's limits, nothing computed) over a cache too large to preempt, as the
/// engine's is for this plan (the CPU's is sized for it, the GPU's from memory); they depend on the
/// prompts mostly through their chunk counts, so a few rounds reach a fixed point. Not always: a
/// prompt one token past a chunk boundary runs its last token in a step of its own (a decode row,
/// see [`model::scheduler`]), one step later than a prompt a token longer, so where such a length
/// falls in the batch's range no length gives that sequence exactly `start_len` and the rounds
/// alternate; the last round's plan is returned, that sequence one token off. `max_tokens`
/// bounds each request's drawing. Returns the prompt lengths and the tokens each will have drawn.
pub fn staggered_prompts(
    cfg: &SchedulerConfig,
    batch: usize,
    start_len: usize,
    max_tokens: usize,
) -> Result<(Vec<usize>, Vec<usize>), String> {
    let blocks = batch * blocks_for(start_len + max_tokens, BLOCK_SIZE);
    let kv = KvCapacity { num_blocks: blocks, block_size: BLOCK_SIZE };
    let mut lens = vec![start_len.saturating_sub(1).max(1); batch];
    for _ in 0..16 {
        let drawn = drawn_at_last_first_token(cfg, kv, &lens, max_tokens)?;
        let next: Vec<usize> = drawn.iter().map(|&g| start_len.saturating_sub(g).max(1)).collect();
        if next == lens {
            return Ok((lens, drawn));
        }
        lens = next;
    }
    let drawn = drawn_at_last_first_token(cfg, kv, &lens, max_tokens)?;
    Ok((lens, drawn))
}

/// Tokens each request has drawn when the last of them draws its first, by the scheduler alone.
fn drawn_at_last_first_token(
    cfg: &SchedulerConfig,
    kv: KvCapacity,
    lens: &[usize],
    max_tokens: usize,
) -> Result<Vec<usize>, String> {
    let err = |e: model::Error| format!("planning the decode batch's prompts: {e}");
    let mut sched = Scheduler::new(cfg.clone(), kv).map_err(err)?;
    for (id, &len) in lens.iter().enumerate() {
        // The bench's prompts share no prefix, so the plan looks none up.
        sched.add_uncached(id as u64, vec![0; len], max_tokens).map_err(err)?;
    }
    let mut drawn = vec![0; lens.len()];
    while drawn.contains(&0) {
        let plan = sched.schedule().map_err(err)?.ok_or("planning the decode batch's prompts: nothing to schedule")?;
        let sampled: Vec<Option<u32>> = plan.seqs.iter().map(|p| p.samples.then_some(0)).collect();
        for p in plan.seqs.iter().filter(|p| p.samples) {
            drawn[p.id as usize] += 1;
        }
        sched.commit(&plan, &sampled).map_err(err)?;
    }
    Ok(drawn)
}

/// The length every sequence of a decode batch has at its first warm-up step, and the longest it
/// may reach, where it ends: the `timed` steps are centred on `context`. Then come the step that
/// measures the gates and, where the engine plans a step ahead of the draws in flight, the one
/// planned ahead of the last timed step (handed out before the gates are counted), so two steps
/// after the last timed one, and before them the [`MARKED_STEPS`].
pub fn decode_lengths(context: usize, warmup_steps: usize, timed: usize) -> (usize, usize) {
    let start_len = context - warmup_steps - timed / 2;
    (start_len, start_len + warmup_steps + timed + MARKED_STEPS + 2)
}

/// A decode batch prefilled through the engine: its requests, each sequence's length at its first
/// decode step, and the engine steps the prefill took.
pub struct Started {
    /// The requests, in the batch's order.
    pub ids: Vec<u64>,
    /// Each sequence's length at its first decode step.
    pub first: Vec<usize>,
    /// Engine steps until every request had drawn its first token.
    pub prefill_steps: usize,
}

/// Submits `batch` requests of staggered prompts ([`staggered_prompts`]) and steps the engine until
/// each has drawn its first token, so that the next step is a decode step of `batch` rows of one
/// length (said on stderr where the engine strayed from the plan).
pub fn start_batch(
    engine: &mut Engine,
    batch: usize,
    args: &BenchArgs,
    timed: usize,
    prompts: &PromptSource,
) -> Result<Started, String> {
    let (start_len, end_len) = decode_lengths(args.context, args.warmup_steps, timed);
    let (lens, drawn) = staggered_prompts(engine.scheduler().config(), batch, start_len, end_len)?;
    let mut ids = Vec::with_capacity(batch);
    for (i, (prompt, &len)) in prompts.prompts(&lens)?.into_iter().zip(&lens).enumerate() {
        let request = prompts.request(i, prompt, end_len - len);
        ids.push(engine.add_request(request).map_err(|e| e.to_string())?);
    }
    let mut generated: BTreeMap<u64, usize> = ids.iter().map(|&id| (id, 0)).collect();
    let mut prefill_steps = 0;
    while generated.values().any(|&g| g == 0) {
        for ev in engine.step().map_err(|e| e.to_string())? {
            if let EngineEvent::Token { request, .. } = ev {
                *generated.get_mut(&request).expect("only this batch runs") += 1;
            }
        }
        prefill_steps += 1;
    }
    // The first decode step attends over each sequence's prompt and drawn tokens.
    let first: Vec<usize> = ids.iter().zip(&lens).map(|(id, len)| len + generated[id]).collect();
    let expected: Vec<usize> = lens.iter().zip(&drawn).map(|(l, g)| l + g).collect();
    if expected.iter().any(|&l| l != start_len) {
        eprintln!("decode B{batch}: no prompt lengths bring every sequence to {start_len}; planned {expected:?}");
    }
    if first != expected {
        eprintln!("decode B{batch}: the engine's prefill differed from the plan; sequence lengths {first:?}");
    }
    Ok(Started { ids, first, prefill_steps })
}

/// One engine step, timed by the wall clock, refused unless it carried `batch` decode rows alone.
pub fn decode_step(engine: &mut Engine, batch: usize, what: &str) -> Result<(f64, StepTimes), String> {
    let t = Instant::now();
    engine.step().map_err(|e| e.to_string())?;
    let ms = millis(t.elapsed());
    let shape = engine.last_step();
    if !shape.is_decode_only() || shape.num_seqs != batch {
        return Err(format!("decode B{batch}: a {what} step carried {shape:?}, not {batch} decode rows"));
    }
    Ok((ms, engine.last_step_times()))
}

/// Ends the batch's requests that still run: had the engine's prefill strayed from the plan, a
/// request would outlive its timed steps.
pub fn end_batch(engine: &mut Engine, ids: Vec<u64>) -> Result<(), String> {
    let finished: Vec<u64> = engine.take_finished().iter().map(|c| c.id).collect();
    for id in ids.into_iter().filter(|id| !finished.contains(id)) {
        engine.abort(id).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Prefills `batch` requests, runs the warm-up, then times (or profiles) the decode steps; then
/// one more step with the gate's zeros counted, whose zero fraction comes back beside the result
/// (`None` where the backend cannot count).
pub fn run_decode(
    engine: &mut Engine,
    batch: usize,
    args: &BenchArgs,
    timed: usize,
    prompts: &PromptSource,
) -> Result<(DecodeResult, Option<f64>), String> {
    let Started { ids, first, prefill_steps } = start_batch(engine, batch, args, timed, prompts)?;
    let step = |engine: &mut Engine, what: &str| decode_step(engine, batch, what);
    // The last warm-up steps are the step trace's, one window each, where the kernels stamp
    // their launches (`ASYNCT_STEP_TRACE=1`): each read waits for the step, which the timed
    // steps must not.
    let mut traced = Vec::new();
    for i in 0..args.warmup_steps {
        let trace = i + TRACED_STEPS >= args.warmup_steps
            && engine.executor_mut().start_step_trace().map_err(|e| e.to_string())?;
        step(engine, "warm-up")?;
        if trace {
            traced.extend(engine.executor_mut().step_trace().map_err(|e| e.to_string())?);
        }
    }
    let profiled = args.profile_steps.is_some();
    if profiled {
        super::profiler(true);
    }
    let even_before = engine.executor_mut().even_replays();
    let times = (0..timed).map(|_| step(engine, "timed")).collect::<Result<Vec<_>, String>>();
    if profiled {
        super::profiler(false);
    }
    let times = times?;
    let even_rows_steps = engine.executor_mut().even_replays().zip(even_before).map(|(after, before)| after - before);
    let err = |e: model::Error| e.to_string();
    // The marked steps are queued as the timed ones were; the last of them is collected by the
    // settle below.
    let mut marked_wall = Vec::new();
    let marking = engine.executor_mut().mark_steps(true).map_err(err)?;
    if marking {
        for _ in 0..MARKED_STEPS {
            marked_wall.push(step(engine, "marked")?.0);
        }
    }
    // The step planned ahead of the last timed one ran uncounted: counting starts after it.
    engine.settle().map_err(err)?;
    let step_phases = if marking {
        engine.executor_mut().mark_steps(false).map_err(err)?;
        PhaseTimes::of(&engine.executor_mut().step_marks().map_err(err)?, &marked_wall)
    } else {
        None
    };
    let step_trace = timeline(&traced);
    if step_trace.is_none() && !traced.is_empty() {
        eprintln!("decode B{batch}: the step trace's windows held no launch");
    }
    let zero_fraction = match engine.executor_mut().measure_gates(true).map_err(err)? {
        false => None,
        true => {
            step(engine, "measured")?;
            let counts = engine.executor_mut().gate_counts().map_err(err)?;
            engine.executor_mut().measure_gates(false).map_err(err)?;
            counts.filter(|&(_, total)| total > 0).map(|(zeros, total)| zeros as f64 / total as f64)
        }
    };
    end_batch(engine, ids)?;
    let phase = |of: fn(&StepTimes) -> Duration| -> Summary {
        let ms: Vec<f64> = times.iter().map(|(_, t)| millis(of(t))).collect();
        Summary::of(&ms).expect("at least one timed step")
    };
    let step: Vec<f64> = times.iter().map(|&(ms, _)| ms).collect();
    let step_ms = Summary::of(&step).expect("at least one timed step");
    let (lo, hi) = (first.iter().min().copied().unwrap_or(0), first.iter().max().copied().unwrap_or(0));
    let skip = args.warmup_steps;
    let result = DecodeResult {
        batch,
        context: args.context,
        attended: (lo + skip, hi + skip + timed - 1),
        prefill_steps,
        warmup_steps: args.warmup_steps,
        timed_steps: timed,
        profiled,
        step_ms,
        executor_ms: phase(|t| t.execute),
        host_ms: HostMs {
            schedule: phase(|t| t.schedule),
            hand_out: phase(|t| t.hand_out),
            submit: phase(|t| t.submit),
        },
        anchor: None,
        ratio_to_anchor: None,
        ratio_to_floor: f64::NAN,
        kv_floor_ms: f64::NAN,
        ratio_to_kv_floor: f64::NAN,
        gate_zero_fraction: None,
        sparse_kv_floor_ms: None,
        step_trace,
        step_phases,
        even_rows_steps,
    };
    Ok((result, zero_fraction))
}

impl DecodeResult {
    /// Sets the median step beside the anchor's best variant and the floors: the weights alone
    /// (`floor_ms`), with every attended K and V byte of the batch (the attended tokens' middle
    /// value per sequence), and skipping the V rows of zero gates at `zero_fraction`.
    pub fn compare(
        &mut self,
        anchor: Option<AnchorPoint>,
        floor_ms: f64,
        bytes: StepBytes,
        zero_fraction: Option<f64>,
    ) {
        self.ratio_to_anchor = anchor.as_ref().map(|a| self.step_ms.median / a.ms);
        self.anchor = anchor;
        self.ratio_to_floor = self.step_ms.median / floor_ms;
        let tokens = self.batch as f64 * (self.attended.0 + self.attended.1) as f64 / 2.0;
        self.kv_floor_ms = bytes.floor_ms(tokens, 0.0, super::HBM_BYTES_PER_S);
        self.ratio_to_kv_floor = self.step_ms.median / self.kv_floor_ms;
        self.gate_zero_fraction = zero_fraction;
        self.sparse_kv_floor_ms = zero_fraction.map(|z| bytes.floor_ms(tokens, z, super::HBM_BYTES_PER_S));
    }
}

/// One line per batch; `goals` adds issue 15's verdict (for asynct-0.5b at its context only).
pub fn print_decode(r: &DecodeResult, floor_ms: f64, goals: bool) {
    let anchor = match (&r.anchor, r.ratio_to_anchor) {
        (Some(a), Some(ratio)) => format!("; {ratio:.2}x the anchor ({}, {:.3} ms)", a.variant, a.ms),
        _ => String::new(),
    };
    let goal = DECODE_GOALS.iter().find(|g| goals && g.0 == r.batch).map_or(String::new(), |&(_, ms)| {
        let verdict = if r.step_ms.median <= ms { "met" } else { "missed" };
        format!("; issue 15's goal {ms:.2} ms {verdict}")
    });
    let sparse = match (r.gate_zero_fraction, r.sparse_kv_floor_ms) {
        (Some(z), Some(ms)) => format!(", {ms:.3} ms skipping the V rows of the {:.1}% zero gates", 100.0 * z),
        _ => String::new(),
    };
    let even = r.even_rows_steps.map_or(String::new(), |n| format!(" ({n} on the even-rows graph)"));
    println!(
        "decode B{}: median {:.3} ms (executor {:.3}; host: schedule {:.3}, hand-out {:.3}), mean {:.3}, min {:.3} \
         over {} {}steps{even} attending over \
         {}..{} tokens (context {}); {:.2}x the weight floor ({floor_ms:.3} ms), {:.2}x the KV floor ({:.3} ms{sparse})\
         {anchor}{goal}",
        r.batch,
        r.step_ms.median,
        r.executor_ms.median,
        r.host_ms.schedule.median,
        r.host_ms.hand_out.median,
        r.step_ms.mean,
        r.step_ms.min,
        r.timed_steps,
        if r.profiled { "profiled " } else { "" },
        r.attended.0,
        r.attended.1,
        r.context,
        r.ratio_to_floor,
        r.ratio_to_kv_floor,
        r.kv_floor_ms
    );
    if let Some(t) = &r.step_trace {
        print_timeline(r.batch, t);
    }
    if let Some(p) = &r.step_phases {
        let inputs = p.inputs.as_ref().map_or("-".to_string(), |s| format!("{:.1}", s.median));
        println!(
            "step phases B{}: {} steps on the device, median us: inputs {inputs}, forward and draw {:.1}, results \
             {:.1}, first to last event {:.1}; wall {:.1} (the device waits {:.1} between steps)",
            r.batch,
            p.steps,
            p.forward.median,
            p.results.median,
            p.device.median,
            p.wall.median,
            p.wall.median - p.device.median
        );
    }
}

/// Reads decode_anchor.py's JSON.
pub fn read_anchor(path: &Path) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("--anchor {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("--anchor {}: {e}", path.display()))
}

/// The fastest variant at `batch` in an anchor JSON's `ms_per_step` (`{variant: {"B<batch>": ms}}`).
pub fn best_anchor(anchor: &serde_json::Value, batch: usize) -> Option<AnchorPoint> {
    let key = format!("B{batch}");
    anchor["ms_per_step"]
        .as_object()?
        .iter()
        .filter_map(|(variant, points)| Some(AnchorPoint { variant: variant.clone(), ms: points[&key].as_f64()? }))
        .min_by(|a, b| a.ms.total_cmp(&b.ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_summarise_marked_steps_and_leave_inputs_out_where_a_step_ran_eagerly() {
        let graph = |inputs: f64, forward: f64| StepPhases {
            inputs_us: Some(inputs),
            forward_us: forward,
            results_us: 3.0,
            total_us: inputs + forward + 3.0,
        };
        let p =
            PhaseTimes::of(&[graph(10.0, 700.0), graph(12.0, 720.0), graph(11.0, 710.0)], &[0.75, 0.76, 0.74]).unwrap();
        assert_eq!((p.steps, p.inputs.unwrap().median, p.forward.median, p.device.median), (3, 11.0, 710.0, 724.0));
        assert!((p.wall.median - 750.0).abs() < 1e-9, "{:?}", p.wall);
        let eager = StepPhases { inputs_us: None, ..graph(0.0, 800.0) };
        assert!(PhaseTimes::of(&[graph(10.0, 700.0), eager], &[0.7, 0.8]).unwrap().inputs.is_none());
        assert!(PhaseTimes::of(&[], &[]).is_none());
    }

    #[test]
    fn the_best_anchor_variant_is_taken_per_batch() {
        let anchor = serde_json::json!({"ms_per_step": {
            "eager": {"B1": 2.8, "B32": 3.7}, "compiled": {"B1": 1.7, "B32": 2.3}, "autotuned": {"B1": 1.4}}});
        assert_eq!(best_anchor(&anchor, 1), Some(AnchorPoint { variant: "autotuned".into(), ms: 1.4 }));
        assert_eq!(best_anchor(&anchor, 32).unwrap().variant, "compiled");
        assert_eq!(best_anchor(&anchor, 128), None);
        assert_eq!(best_anchor(&serde_json::json!({}), 1), None);
    }

    #[test]
    fn staggered_prompts_bring_every_sequence_to_one_length() {
        // Chunks of 512 with room for about one per step (a chunk and a row per sequence):
        // sequence i finishes its prefill after sequence i - 1 and decodes meanwhile.
        let cfg = SchedulerConfig {
            max_num_seqs: 32,
            max_batched_tokens: 544,
            prefill_chunk: 512,
            max_model_len: 4096,
            prefix_caching: true,
        };
        // Two chunks each; lengths where the first sequences' prompts drop to one chunk; and one
        // where a prompt of 513 tokens (a one-token last chunk, a step of its own) falls in the
        // range, so one sequence ends a token off.
        for (start_len, off) in [(1000, 0), (530, 1), (40, 0)] {
            let (lens, drawn) = staggered_prompts(&cfg, 32, start_len, start_len + 10).unwrap();
            let ends: Vec<usize> = lens.iter().zip(&drawn).map(|(l, g)| l + g).collect();
            let missed: Vec<usize> = ends.iter().filter(|&&e| e != start_len).copied().collect();
            assert_eq!(missed.len(), off, "{start_len}: {lens:?} {drawn:?}");
            assert!(missed.iter().all(|&e| e.abs_diff(start_len) == 1), "{start_len}: {ends:?}");
            assert!(off == 0 || lens.iter().any(|&l| l == 513 || l == 514), "{start_len}: {lens:?}");
            assert!(drawn[0] >= drawn[31] && drawn[31] == 1, "the first drew the most: {drawn:?}");
            let kv = KvCapacity { num_blocks: 32 * 128, block_size: BLOCK_SIZE };
            assert_eq!(drawn_at_last_first_token(&cfg, kv, &lens, start_len + 10).unwrap(), drawn);
        }
    }
}
