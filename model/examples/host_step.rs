//! The engine's host work per decode step, on the CPU alone: the scheduler, the detokenizer and the
//! stop rules of `Engine::step` over an executor that hands back a token per sampling row, each
//! step taking `--wait-us` on a simulated device that runs the submitted steps in order. On the
//! GPU the device idles through this work unless the engine plans each step ahead of the draws in
//! flight (the `schedule` and `hand_out` phases of `asynct bench`); here it can be profiled
//! (`perf record --call-graph dwarf`) without one.
//!
//! ```text
//! cargo run --release -p model --example host_step -- [--tokenizer PATH] [--batch 128]
//!     [--prompt 1000] [--steps 500] [--wait-us 0] [--budget N] [--stepwise]
//! ```
//!
//! `--tokenizer` defaults to the large presets' (`../shared/tokenizers/qwen3/tokenizer.json`). The
//! drawn ids are spread over the whole vocabulary, as a model with random weights draws them.
//! `--wait-us` is a step's time on the device; waiting for it leaves the phases on colder caches,
//! about twice as long (RESULTS runs 125-126). `--budget` is the step's token budget (the GPU's
//! default, 16,384 plus a row a sequence, unless given). `--stepwise` plans each step after the
//! one before has drawn, as over an executor that does not queue. Prints the `schedule` and
//! `hand_out` phases and the wall time summed over the steps that prefill the prompts (where the
//! prefix cache takes each full block), and their medians over `--steps` decode steps of
//! `--batch` sequences with the median wall time of a step: the wait plus the host's work
//! stepwise, the longer of the two planned ahead.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use model::block_pool::KvCapacity;
use model::engine::{Engine, GenerationRequest};
use model::executor::{LogitsWanted, SamplingRow, StepExecutor, StepOutput, Submitted};
use model::executor_loader::{default_step_budget, BudgetDevice, BLOCK_SIZE, PREFILL_CHUNK};
use model::scheduler::{SchedulerConfig, StepPlan};
use tokenizers::Tokenizer;

/// Qwen3's logits rows.
const VOCAB: usize = 151_936;

/// Draws a spread of ids, each step taking `wait` on a simulated device that runs the steps
/// submitted in order, as a GPU stream does: a step submitted while another runs starts when that
/// one ends.
struct InstantDraws {
    steps: usize,
    wait: Duration,
    blocks: usize,
    /// When each submitted step ends on the simulated device, and its draws.
    queue: VecDeque<(Instant, Vec<u32>)>,
}

impl InstantDraws {
    fn draws(&mut self, rows: usize) -> Vec<u32> {
        self.steps += 1;
        (0..rows).map(|i| ((self.steps * 7_919 + i * 104_729) % VOCAB) as u32).collect()
    }

    fn spin_until(t: Instant) {
        while Instant::now() < t {
            std::hint::spin_loop();
        }
    }
}

impl StepExecutor for InstantDraws {
    fn execute(&mut self, _: &StepPlan, rows: &[SamplingRow<'_>], _: &LogitsWanted) -> model::Result<StepOutput> {
        Self::spin_until(Instant::now() + self.wait);
        Ok(StepOutput { sampled: self.draws(rows.len()), logits: None })
    }

    fn submit(&mut self, _: &StepPlan, rows: &[SamplingRow<'_>], _: &LogitsWanted) -> model::Result<Submitted> {
        let start = self.queue.back().map_or(Instant::now(), |&(end, _)| end.max(Instant::now()));
        let draws = self.draws(rows.len());
        self.queue.push_back((start + self.wait, draws));
        Ok(Submitted::InFlight)
    }

    fn collect(&mut self) -> model::Result<StepOutput> {
        let (end, sampled) = self.queue.pop_front().ok_or_else(|| model::Error::Executor("nothing queued".into()))?;
        Self::spin_until(end);
        Ok(StepOutput { sampled, logits: None })
    }

    fn kv_capacity(&self) -> KvCapacity {
        KvCapacity { num_blocks: self.blocks, block_size: BLOCK_SIZE }
    }

    fn vocab_size(&self) -> usize {
        VOCAB
    }

    fn describe(&self) -> String {
        "instant draws".into()
    }
}

struct Args {
    tokenizer: String,
    batch: usize,
    prompt: usize,
    steps: usize,
    wait_us: u64,
    budget: Option<usize>,
    stepwise: bool,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        tokenizer: "../shared/tokenizers/qwen3/tokenizer.json".into(),
        batch: 128,
        prompt: 1000,
        steps: 500,
        wait_us: 0,
        budget: None,
        stepwise: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--stepwise" {
            args.stepwise = true;
            continue;
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || value.parse::<usize>().map_err(|e| format!("{flag} {value}: {e}"));
        let positive = || number().and_then(|n| if n > 0 { Ok(n) } else { Err(format!("{flag} must be at least 1")) });
        match flag.as_str() {
            "--tokenizer" => args.tokenizer = value.clone(),
            "--batch" => args.batch = positive()?,
            "--prompt" => args.prompt = positive()?,
            "--steps" => args.steps = positive()?,
            "--wait-us" => args.wait_us = number()? as u64,
            "--budget" => args.budget = Some(positive()?),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e6
}

fn run(args: Args) -> Result<(), String> {
    let tokenizer = Tokenizer::from_file(&args.tokenizer).map_err(|e| format!("{}: {e}", args.tokenizer))?;
    let max_len = args.prompt + args.steps + 2;
    let blocks = args.batch * max_len.div_ceil(BLOCK_SIZE);
    let executor = InstantDraws { steps: 0, wait: Duration::from_micros(args.wait_us), blocks, queue: VecDeque::new() };
    let cfg = SchedulerConfig {
        max_num_seqs: args.batch,
        max_batched_tokens: args.budget.unwrap_or(default_step_budget(BudgetDevice::Gpu, args.batch)),
        prefill_chunk: PREFILL_CHUNK,
        max_model_len: max_len,
        prefix_caching: true,
    };
    let chunk = cfg.prefill_chunk;
    let err = |e: model::Error| e.to_string();
    let mut engine = Engine::new(Box::new(executor), Arc::new(tokenizer), cfg, false).map_err(err)?;
    engine.set_pipelining(!args.stepwise);
    for i in 0..args.batch {
        let prompt = (0..args.prompt).map(|j| ((i * 31 + j * 17) % 100_000 + 10) as u32).collect();
        let mut request = GenerationRequest { prompt, ..Default::default() };
        request.stop.max_tokens = args.steps + 1;
        request.stop.max_model_len = max_len;
        request.stop.ignore_eos = true;
        engine.add_request(request).map_err(err)?;
    }
    // Every prompt's chunks, then the first step of only decode rows.
    let prefill_steps = args.batch * args.prompt.div_ceil(chunk) + 1;
    let (mut chunk_steps, mut chunk_tokens) = (0, 0);
    let (mut chunk_schedule, mut chunk_hand_out, mut chunk_wall) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for _ in 0..=prefill_steps {
        let start = Instant::now();
        engine.step().map_err(err)?;
        let rows = engine.last_step();
        if rows.num_decodes == args.batch {
            break;
        }
        let times = engine.last_step_times();
        chunk_wall += start.elapsed();
        chunk_steps += 1;
        chunk_tokens += rows.num_tokens - rows.num_decodes;
        chunk_schedule += times.schedule;
        chunk_hand_out += times.hand_out;
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "B{} prefill: {chunk_steps} steps, {chunk_tokens} prompt tokens; schedule {:.1} us, hand_out {:.1} us, \
         wall {:.1} us in all",
        args.batch,
        us(chunk_schedule),
        us(chunk_hand_out),
        us(chunk_wall)
    );
    if engine.last_step().num_decodes != args.batch {
        return Err(format!("the batch did not reach {} decode rows", args.batch));
    }
    let (mut schedule, mut hand_out, mut wall) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.steps {
        let start = Instant::now();
        engine.step().map_err(err)?;
        wall.push(start.elapsed());
        let times = engine.last_step_times();
        schedule.push(times.schedule);
        hand_out.push(times.hand_out);
    }
    println!(
        "B{} decode steps ({}): median schedule {:.1} us, hand_out {:.1} us, step {:.1} us over {} steps (wait {} us)",
        args.batch,
        if args.stepwise { "stepwise" } else { "planned ahead" },
        median(schedule),
        median(hand_out),
        median(wall),
        args.steps,
        args.wait_us
    );
    Ok(())
}

fn main() {
    if let Err(e) = parse().and_then(run) {
        eprintln!("host_step: {e}");
        std::process::exit(2);
    }
}
