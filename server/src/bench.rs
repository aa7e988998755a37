//! `asynct bench`: the engine timed as users run it, on either backend (issue 9's "How fast").
//!
//! ```sh
//! asynct bench --model DIR --scenario all --out e2e.json
//! asynct bench --model DIR --decode-batch 1,32,128 --context 1024 --anchor anchor.json --out decode.json
//! ```
//!
//! Both modes drive [`Engine::step`] on the executor [`model::executor_loader::load_executor`] builds for `--device`, with
//! greedy requests of seeded random token ids (or, with `--prompt-text FILE`, windows of that text's
//! tokens: [`text_windows`]), `ignore_eos` and exact output lengths. A step is
//! timed by the host's wall clock around `Engine::step`, which returns only once the step's
//! tokens are on the host, so its GPU work has finished; the engine times its own phases too
//! ([`model::engine::StepTimes`]: scheduling, the executor's `execute`, handing the tokens out),
//! so its host work (scheduling, detokenising, stop rules) shows apart. One run may do both modes: the checkpoint loads (and the
//! GPU captures its graphs) once.
//!
//! - `--scenario NAME` (repeatable, or `all`): SPEC section 7's end-to-end scenarios, every request
//!   submitted at once ([`DEFINITIONS`] says what each figure means; the output repeats them).
//! - `--decode-batch B,...`: per batch B, B requests are prefilled through the engine, then
//!   `--warmup-steps` decode steps run and `--steps` are timed; the median is the figure, beside
//!   the anchor's best variant at B (`--anchor`, from `scripts/decode_anchor.py`) and the weight
//!   floor (every weight read once at [`HBM_BYTES_PER_S`]). The scheduler lets sequences that
//!   finished their prefill decode while others still prefill, so each prompt is shortened by the
//!   tokens its sequence will have drawn by then (found by running the engine's own scheduler on
//!   the same limits, [`decode::staggered_prompts`]): every timed step carries B sequences of one length,
//!   and the timed steps' lengths are centred on `--context`, as in the anchor's static cache.
//! - `--profile-steps N`: after the warm-up, exactly N decode steps between `cuProfilerStart` and
//!   `cuProfilerStop`, so `ncu --profile-from-start off` sees those steps' kernels alone
//!   (`scripts/step_profile.py` turns its CSV into each kernel family's share). With one
//!   `--scenario` instead, the scenario's first N engine steps (after the untimed warm-up
//!   request), which for prefill_heavy_b16 are its full-budget prefill steps (issue 18).
//! - `--prompt-text FILE`: the prompts of both modes are windows of FILE tokenised with the model's
//!   tokenizer, spread evenly over it, so a trained model's gate statistics (`gate_zero_fraction`)
//!   are those of real text rather than of random ids.

mod decode;
mod scenario;
mod step_timeline;
mod twins;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use model::block_pool::blocks_for;
use model::config::ModelConfig;
use model::cpu_backend::Precision;
use model::engine::{Engine, GenerationRequest, SamplingParams, StepRows, StopConditions};
use serde::Serialize;
use tokenizers::Tokenizer;

use crate::cli::BenchArgs;
use crate::load;
use decode::{
    best_anchor, decode_lengths, print_decode, read_anchor, run_decode, DecodeResult, StepBytes, GOAL_CONTEXT,
};
use model::executor_loader::BLOCK_SIZE;
use scenario::{print_scenario, run_scenario, scenarios, ScenarioResult};
use twins::{print_twins, run_twins, TwinsResult};

/// The H200's HBM bandwidth, which issue 9's weight floor (about 0.28 ms for asynct-0.5b) uses.
pub const HBM_BYTES_PER_S: f64 = 4.3e12;

/// What each reported figure means; printed before the results and kept in the JSON.
pub const DEFINITIONS: [(&str, &str); 10] = [
    ("wall_s", "seconds from the first step to the last, every request submitted before the first"),
    ("prefill_tok_s", "prompt tokens / seconds until every request has its first token"),
    ("ttft_ms", "each request's milliseconds from the first step to its first token (mean, median, least; the most is prefill_s)"),
    ("decode_tok_s", "tokens after each request's first / (wall_s - those seconds)"),
    ("decode_step_ms", "wall time of the steps whose every row was a decode row (mean, median)"),
    ("steps", "steps by kind: decode (only decode rows), mixed (decode rows and prefill chunks), prefill"),
    ("executor_ms", "the part of a step inside the executor (StepExecutor::submit and collect: forward, sampling, launches, and planning ahead the wait for the step before); the rest is the engine's host work: scheduling, detokenising, stop rules"),
    ("host_ms", "a decode step's host work by phase: schedule (the scheduler's plan), hand_out (each drawn token to its request: logprobs, detokenising, stop rules, and the scheduler's record), submit (the executor's host work to queue the step, within executor_ms)"),
    ("chunk_steps", "each step with a prefill chunk: its tokens and decode rows, its wall ms, and that time's parts: schedule, executor (the forward and the draw, until the tokens are on the host) and hand_out"),
    ("ratio", "ours / theirs: below 1 is faster than the anchor or nearer the floor"),
];

/// A duration in milliseconds, the unit of every timing the bench reports.
fn millis(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Mean, median and least of some milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// Arithmetic mean.
    pub mean: f64,
    /// Middle value (the mean of the two middle ones for an even count).
    pub median: f64,
    /// Least value.
    pub min: f64,
}

impl Summary {
    /// `None` for no values.
    pub fn of(values: &[f64]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Some(Self { mean: v.iter().sum::<f64>() / n as f64, median, min: v[0] })
    }
}

/// Steps by kind (see [`DEFINITIONS`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StepCounts {
    /// Only decode rows.
    pub decode: usize,
    /// Decode rows beside prefill chunks.
    pub mixed: usize,
    /// Prefill chunks only.
    pub prefill: usize,
}

impl StepCounts {
    fn add(&mut self, shape: StepRows) {
        match shape.num_decodes {
            _ if shape.is_decode_only() => self.decode += 1,
            0 => self.prefill += 1,
            _ => self.mixed += 1,
        }
    }
}

/// The JSON `--out` writes.
#[derive(Serialize)]
struct Report {
    model: String,
    device: String,
    enforce_eager: bool,
    /// `--decode-kernel` as given.
    decode_kernel: String,
    prefix_caching: bool,
    /// Whether steps were planned ahead of the draws in flight (`--no-pipelining` says no).
    pipelining: bool,
    max_num_seqs: usize,
    /// The step budget the engine ran with (`--max-num-batched-tokens` or the device's default).
    max_num_batched_tokens: usize,
    seed: u64,
    /// `--temperature`: every request's; 0 is greedy.
    temperature: f32,
    /// `--prompt-text`'s file and its token count; null for seeded random ids.
    prompt_text: Option<String>,
    prompt_text_tokens: Option<usize>,
    weight_bytes: u64,
    weight_floor_ms: f64,
    definitions: BTreeMap<&'static str, &'static str>,
    scenarios: Vec<ScenarioResult>,
    decode: Vec<DecodeResult>,
    /// `--decode-twins`' figures (empty without it).
    twins: Vec<TwinsResult>,
}

/// Runs the command; the error is the message to print.
pub fn run(args: &BenchArgs) -> Result<(), String> {
    let picked = scenarios(&args.scenario, args.requests, args.prompt_len, args.output_len)?;
    SamplingParams::with_temperature(args.temperature, 0).validate().map_err(|e| format!("--temperature: {e}"))?;
    let timed = check_decode_args(args, !picked.is_empty())?;
    let anchor = args.anchor.as_deref().map(read_anchor).transpose()?;
    let cfg = ModelConfig::load(&args.model).map_err(|e| e.to_string())?;
    let model_len = cfg.max_position_embeddings;
    for s in &picked {
        if s.prompt_len + s.output_len > model_len {
            return Err(format!(
                "scenario {}: {} prompt + {} output tokens exceed the model's {model_len}",
                s.name, s.prompt_len, s.output_len
            ));
        }
    }
    // The longest a decode sequence gets: its timed steps are centred on the context (the context
    // was checked to leave room only when there are decode batches).
    let decode_len =
        if args.decode_batch.is_empty() { 0 } else { decode_lengths(args.context, args.warmup_steps, timed).1 };
    if !args.decode_batch.is_empty() && decode_len > model_len {
        return Err(format!(
            "--context {}: decode requests reach {decode_len} tokens, the model takes {model_len}",
            args.context
        ));
    }
    let needed = picked.iter().map(|s| s.requests).chain(args.decode_batch.iter().copied()).max().unwrap_or(1);
    let max_num_seqs = args.max_num_seqs.unwrap_or(needed);
    if let Some(&b) = args.decode_batch.iter().find(|&&b| b > max_num_seqs) {
        return Err(format!("--decode-batch {b} needs --max-num-seqs of at least {b}, got {max_num_seqs}"));
    }
    // On the CPU, room for the largest run's whole life at once, so nothing is preempted.
    let cpu_blocks = picked
        .iter()
        .map(|s| s.requests * blocks_for(s.prompt_len + s.output_len, BLOCK_SIZE))
        .chain(args.decode_batch.iter().map(|&b| b * blocks_for(decode_len, BLOCK_SIZE)))
        .max()
        .unwrap_or(1);

    let tokenizer = load::tokenizer(&args.model)?;
    let text = args.prompt_text.as_deref().map(|path| text_ids(path, &tokenizer)).transpose()?;
    // With twins, the first engine leaves the second half of the memory it may take.
    let share = if args.decode_twins { 0.5 } else { 1.0 };
    let mut engine = load_engine(args, &cfg, tokenizer.clone(), max_num_seqs, cpu_blocks, share)?;
    let bytes = weight_bytes(&cfg);
    let floor_ms = bytes as f64 / HBM_BYTES_PER_S * 1e3;
    println!(
        "weights {:.3} GB in bf16: a decode step reading each once at {} TB/s takes at least {floor_ms:.3} ms",
        bytes as f64 / 1e9,
        HBM_BYTES_PER_S / 1e12
    );
    for (name, meaning) in DEFINITIONS {
        println!("  {name}: {meaning}");
    }

    let mut report = Report {
        model: args.model.display().to_string(),
        device: engine.describe(),
        enforce_eager: args.engine.enforce_eager,
        decode_kernel: args.engine.decode_kernel.clone(),
        prefix_caching: !args.scheduling.no_prefix_caching,
        pipelining: !args.scheduling.no_pipelining,
        max_num_seqs,
        max_num_batched_tokens: engine.scheduler().config().max_batched_tokens,
        seed: args.seed,
        temperature: args.temperature,
        prompt_text: args.prompt_text.as_ref().map(|p| p.display().to_string()),
        prompt_text_tokens: text.as_ref().map(|t| t.len()),
        weight_bytes: bytes,
        weight_floor_ms: floor_ms,
        definitions: DEFINITIONS.into_iter().collect(),
        scenarios: Vec::new(),
        decode: Vec::new(),
        twins: Vec::new(),
    };
    let prompts = PromptSource {
        seed: args.seed,
        vocab: cfg.vocab_size,
        eos: cfg.eos_token_id.clone(),
        model_len,
        temperature: args.temperature,
        text,
    };
    if let Some(first) = picked.first() {
        // Untimed: the first prefill of a process compiles (NVRTC, on a fresh machine) and loads
        // the tensor-core prefill and opens cuBLASLt, which would otherwise land in the first
        // scenario's prefill time. One request of the first scenario's shape (so it fits the
        // cache sized for the run) touches every kernel its steps run.
        let warm = scenario::Scenario { name: "warm-up".into(), requests: 1, ..first.clone() };
        run_scenario(&mut engine, &warm, &prompts.for_run(0), None)?;
    }
    let mut runs = 1..;
    // The JSON is rewritten after every result, so a failure later in a long run keeps what came before.
    for s in &picked {
        let r = run_scenario(&mut engine, s, &prompts.for_run(runs.next().expect("endless")), args.profile_steps)?;
        print_scenario(&r);
        report.scenarios.push(r);
        report.save(args.out.as_deref())?;
    }
    let goals = cfg == model::presets::Preset::HalfBillion.config() && args.context == GOAL_CONTEXT;
    for &batch in &args.decode_batch {
        let point = anchor.as_ref().and_then(|a| best_anchor(a, batch));
        let run = prompts.for_run(runs.next().expect("endless"));
        let (mut r, zero_fraction) = run_decode(&mut engine, batch, args, timed, &run)?;
        r.compare(point, floor_ms, step_bytes(&cfg), zero_fraction);
        print_decode(&r, floor_ms, goals);
        report.decode.push(r);
        report.save(args.out.as_deref())?;
    }
    if args.decode_twins {
        let mut twin = load_engine(args, &cfg, tokenizer, max_num_seqs, cpu_blocks, 1.0)?;
        for &batch in &args.decode_batch {
            let run = [runs.next().expect("endless"), runs.next().expect("endless")].map(|n| prompts.for_run(n));
            let r = run_twins([&mut engine, &mut twin], batch, args, timed, [&run[0], &run[1]])?;
            print_twins(&r);
            report.twins.push(r);
            report.save(args.out.as_deref())?;
        }
    }
    Ok(())
}

impl Report {
    fn save(&self, path: Option<&Path>) -> Result<(), String> {
        let Some(path) = path else { return Ok(()) };
        let text = serde_json::to_string_pretty(self).expect("the report serialises");
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// The engine over the executor `--device` names, with the tokenizer covering every model id, its
/// device memory at most `share` of `--gpu-memory-utilization`'s fraction.
fn load_engine(
    args: &BenchArgs,
    cfg: &ModelConfig,
    tokenizer: Tokenizer,
    max_num_seqs: usize,
    cpu_blocks: usize,
    share: f64,
) -> Result<Engine, String> {
    let mut opts = args.engine.executor_options(Precision::F32, max_num_seqs, cfg.max_position_embeddings, cpu_blocks);
    opts.gpu_memory_utilization *= share;
    let load_start = Instant::now();
    let loaded = load::executor_with_progress(&args.model, cfg, &opts)?;
    println!(
        "running on {} (step budget {} tokens; loaded in {:.1} s)",
        loaded.executor.describe(),
        loaded.max_batched_tokens,
        load_start.elapsed().as_secs_f64()
    );
    let sched =
        load::scheduler_config(max_num_seqs, &loaded, cfg.max_position_embeddings, !args.scheduling.no_prefix_caching);
    let mut engine = Engine::new(loaded.executor, Arc::new(tokenizer), sched, false).map_err(|e| e.to_string())?;
    engine.set_pipelining(!args.scheduling.no_pipelining);
    Ok(engine)
}

/// The token ids of the text file at `path` (`--prompt-text`), tokenised with `tokenizer`.
fn text_ids(path: &Path, tokenizer: &Tokenizer) -> Result<Arc<[u32]>, String> {
    let what = |e: &dyn std::fmt::Display| format!("--prompt-text {}: {e}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| what(&e))?;
    let encoding = tokenizer.encode(text.as_str(), false).map_err(|e| what(&e))?;
    Ok(encoding.get_ids().into())
}

/// Starts or stops the profiler's collection on the current CUDA context (a no-op without a
/// profiler attached); a failure is reported and the run goes on, since the timing stands alone.
pub(crate) fn profiler(start: bool) {
    use cudarc::driver::sys;
    // SAFETY: both calls take no arguments and act on the thread's current context, the one the
    // engine's steps ran on; `is_culib_present` first, so a machine without the driver never
    // reaches the loader's panic.
    let result = unsafe {
        if !sys::is_culib_present() {
            eprintln!("--profile-steps: no CUDA driver here, so nothing is profiled");
            return;
        }
        if start {
            sys::cuProfilerStart()
        } else {
            sys::cuProfilerStop()
        }
    };
    if result != sys::CUresult::CUDA_SUCCESS {
        eprintln!("--profile-steps: cuProfiler{} returned {result:?}", if start { "Start" } else { "Stop" });
    }
}

/// Checks the decode flags; returns the number of decode steps to time per batch.
fn check_decode_args(args: &BenchArgs, any_scenario: bool) -> Result<usize, String> {
    if !any_scenario && args.decode_batch.is_empty() {
        return Err("give --scenario NAME (or all), --decode-batch B,..., or both".into());
    }
    if let Some(n) = args.profile_steps {
        let one_batch = args.decode_batch.len() == 1 && !any_scenario;
        let one_scenario = args.decode_batch.is_empty() && args.scenario.len() == 1 && args.scenario[0] != "all";
        if n == 0 || !(one_batch || one_scenario) {
            return Err(format!(
                "--profile-steps takes a positive count and either one --decode-batch or one --scenario, so the \
                 profile holds one batch's or one scenario's steps alone; got {n}, batches {:?}, scenarios {:?}",
                args.decode_batch, args.scenario
            ));
        }
    }
    let timed = args.profile_steps.unwrap_or(args.steps);
    if args.decode_batch.contains(&0) || timed == 0 {
        return Err(format!("--decode-batch and --steps must be positive, got {:?} and {timed}", args.decode_batch));
    }
    if args.decode_twins && (args.decode_batch.is_empty() || args.decode_batch.iter().any(|b| b % 2 == 1)) {
        return Err(format!(
            "--decode-twins splits each --decode-batch in two halves: give even batches, got {:?}",
            args.decode_batch
        ));
    }
    if !args.decode_batch.is_empty() && args.context <= args.warmup_steps + timed / 2 + 1 {
        return Err(format!(
            "--context {} leaves no prompt before {} warm-up and {timed} timed steps centred on it",
            args.context, args.warmup_steps
        ));
    }
    Ok(timed)
}

/// The bf16 bytes of the matrices a decode step reads once each: every layer's, then the LM head
/// (the embedding when tied; the gather reads a row per sequence). The norms' few kilobytes are
/// left out, as `scripts/decode_anchor.py` leaves them out, so both print the same floor.
pub fn weight_bytes(cfg: &ModelConfig) -> u64 {
    let (h, d, i) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
    let attention = (2 * cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * d * h;
    let head = cfg.vocab_size * h * if cfg.tie_word_embeddings { 1 } else { 2 };
    2 * (cfg.num_hidden_layers * (attention + 3 * i * h) + head) as u64
}

/// What a decode step of `cfg` reads: [`weight_bytes`], and 2 bytes of K and of V per layer,
/// kv head and head dim for each attended token (71,680 bytes for asynct-0.5b, SPEC 7).
pub fn step_bytes(cfg: &ModelConfig) -> StepBytes {
    let kv = 2 * 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim;
    StepBytes { weights: weight_bytes(cfg), kv_per_token: kv as u64 }
}

/// The prompts of a run, seeded random ids or windows of a text, and the requests around them.
struct PromptSource {
    seed: u64,
    vocab: usize,
    eos: Vec<u32>,
    model_len: usize,
    temperature: f32,
    /// `--prompt-text`'s token ids, when given.
    text: Option<Arc<[u32]>>,
}

impl PromptSource {
    /// One prompt per entry of `lens`, of that many ids, the same on every run: seeded random
    /// ids, or with a text, windows of it ([`text_windows`]).
    fn prompts(&self, lens: &[usize]) -> Result<Vec<Vec<u32>>, String> {
        match &self.text {
            None => Ok(lens.iter().enumerate().map(|(i, &len)| random_prompt(self.seed, i, len, self.vocab)).collect()),
            Some(text) => text_windows(text, lens),
        }
    }

    /// Request `index` of the run: greedy, or at the run's temperature with a seed of its own.
    fn request(&self, index: usize, prompt: Vec<u32>, max_tokens: usize) -> GenerationRequest {
        let mut state = self.seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        GenerationRequest {
            prompt,
            sampling: SamplingParams::with_temperature(self.temperature, splitmix64(&mut state)),
            stop: StopConditions {
                eos_token_ids: self.eos.clone(),
                stop: Vec::new(),
                max_tokens,
                max_model_len: self.model_len,
                ignore_eos: true,
                ..Default::default()
            },
            // Every run takes the text's windows from its start, so a later run's prompts begin
            // as an earlier run's did; each run computes its own prefill.
            skip_prefix_cache: self.text.is_some(),
            ..Default::default()
        }
    }

    /// The source of run `run`'s prompts: a seed of its own, so that no run's prompt is a prefix
    /// of another's and the prefix cache never carries one run's work into the next.
    fn for_run(&self, run: u64) -> PromptSource {
        let mut state = self.seed ^ run.wrapping_mul(0xD1B5_4A32_D192_ED03);
        PromptSource { seed: splitmix64(&mut state), eos: self.eos.clone(), text: self.text.clone(), ..*self }
    }
}

/// Windows of `text` for prompts of `lens` tokens: window `i` starts at `i * (n - L) / (B - 1)`
/// (`n` tokens, the longest prompt `L`, `B` prompts), so the windows spread evenly from the
/// text's start to its end and no two start alike. Refuses a text too short for that.
pub fn text_windows(text: &[u32], lens: &[usize]) -> Result<Vec<Vec<u32>>, String> {
    let longest = lens.iter().copied().max().unwrap_or(0);
    let room = text.len().checked_sub(longest).filter(|&room| room + 1 >= lens.len()).ok_or_else(|| {
        format!(
            "--prompt-text: the text has {} tokens; {} prompts of up to {longest} tokens need at least {}",
            text.len(),
            lens.len(),
            longest + lens.len().saturating_sub(1)
        )
    })?;
    let gaps = lens.len().saturating_sub(1).max(1);
    Ok(lens.iter().enumerate().map(|(i, &len)| text[i * room / gaps..][..len].to_vec()).collect())
}

/// Prompt `index` of `len` token ids below `vocab` for `seed`: what `asynct bench` runs, and what
/// `asynct bench-serve` sends, so both time the same work.
pub fn random_prompt(seed: u64, index: usize, len: usize, vocab: usize) -> Vec<u32> {
    let mut state = seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..len).map(|_| (splitmix64(&mut state) % vocab as u64) as u32).collect()
}

/// The next number of the SplitMix64 sequence at `state`.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_request_is_sampled_at_the_runs_temperature_with_a_seed_of_its_own() {
        let source =
            |temperature| PromptSource { seed: 9, vocab: 50, eos: vec![0], model_len: 64, temperature, text: None };
        let greedy = source(0.0).request(3, vec![1, 2], 4);
        assert_eq!(greedy.sampling.temperature, 0.0);
        let hot = source(0.7);
        let params: Vec<SamplingParams> = (0..4).map(|i| hot.request(i, vec![1, 2], 4).sampling).collect();
        assert!(params.iter().all(|p| p.temperature == 0.7 && p.top_k == 0 && p.top_p == 1.0), "{params:?}");
        let seeds: std::collections::HashSet<u64> = params.iter().map(|p| p.seed).collect();
        assert_eq!(seeds.len(), 4, "a seed per request: {params:?}");
        assert_eq!(hot.request(2, vec![5], 4).sampling, params[2], "the same request index, the same seed");
    }

    #[test]
    fn text_windows_spread_over_the_text_and_refuse_a_short_one() {
        let text: Vec<u32> = (100..120).collect();
        let windows = text_windows(&text, &[4, 5, 3]).unwrap();
        // The longest is 5, so 15 tokens of room: starts 0, 7 and 15.
        assert_eq!(windows, vec![vec![100, 101, 102, 103], vec![107, 108, 109, 110, 111], vec![115, 116, 117]]);
        assert_eq!(text_windows(&text, &[20]).unwrap(), vec![text.clone()]);
        assert_eq!(text_windows(&text, &[4, 5, 3]).unwrap(), windows, "the same windows on every call");
        // Twenty windows of one token fit, one start each; twenty-one do not.
        assert_eq!(text_windows(&text, &[1; 20]).unwrap().concat(), text);
        let err = text_windows(&text, &[1; 21]).unwrap_err();
        assert!(err.contains("--prompt-text") && err.contains("20 tokens") && err.contains("at least 21"), "{err}");
        assert!(text_windows(&text, &[21]).unwrap_err().contains("at least 21"));
        assert!(text_windows(&[], &[1]).unwrap_err().contains("0 tokens"));
    }

    #[test]
    fn summary_takes_the_middle_and_the_mean() {
        assert_eq!(Summary::of(&[]), None);
        assert_eq!(Summary::of(&[3.0, 1.0, 2.0]), Some(Summary { mean: 2.0, median: 2.0, min: 1.0 }));
        assert_eq!(Summary::of(&[4.0, 1.0, 2.0, 9.0]).unwrap().median, 3.0);
    }

    #[test]
    fn the_floor_of_asynct_0_5b_is_issue_9s() {
        let cfg = model::presets::Preset::HalfBillion.config();
        assert_eq!(weight_bytes(&cfg), 1_191_968_768, "decode_anchor.py's figure");
        let floor_ms = weight_bytes(&cfg) as f64 / HBM_BYTES_PER_S * 1e3;
        assert!((0.27..0.28).contains(&floor_ms), "{floor_ms}");
    }

    #[test]
    fn the_kv_floors_of_asynct_0_5b_are_specs() {
        let bytes = step_bytes(&model::presets::Preset::HalfBillion.config());
        assert_eq!(bytes.kv_per_token, 71_680, "SPEC 7");
        // SPEC 7: about 0.29, 0.83 and 2.48 ms for batches of 1K contexts (at 4.27 TB/s; 4.3 here).
        for (batch, want) in [(1.0, 0.29), (32.0, 0.83), (128.0, 2.48)] {
            let ms = bytes.floor_ms(batch * 1024.0, 0.0, HBM_BYTES_PER_S);
            assert!((ms - want).abs() < 0.02 * want, "B{batch}: {ms}");
        }
        // Skipping every V row leaves the weights and K alone; none skipped is the KV floor.
        let (dense, sparse) = (bytes.floor_ms(1e4, 0.0, 1e12), bytes.floor_ms(1e4, 1.0, 1e12));
        let k_only = (bytes.weights as f64 + 1e4 * 35_840.0) / 1e9;
        assert!((sparse - k_only).abs() < 1e-12 && dense > sparse, "{dense} {sparse} {k_only}");
    }
}
