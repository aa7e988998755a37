//! The GPU executor's determinism and memory on the device (issue 9), driven step by step through
//! the real scheduler so that each step's logits can be read back:
//! - a request gives the same tokens and the same logits bits alone, in a batch of 64 others
//!   (some of them prefilling beside its decode rows), after a preemption, and with every decode
//!   step run eagerly instead of replaying its whole-step CUDA graph, with each decode kernel
//!   (`--decode-kernel graph` and `mega`: alone, its decode steps run in the megakernel);
//! - a request among 256 decode rows of even lengths, whose steps replay the even-rows graph (the
//!   paired decode kernel), gives the tokens and logits bits it gives alone and run eagerly;
//! - a prompt whose chunks run several to a step (a large step budget) gives the tokens and
//!   logits bits it gives one chunk a step, alone and beside others;
//! - a request resumed from a prefix-cache hit (whole chunks of another request's prompt, or of
//!   its own earlier run) gives the tokens and logits bits it gives with no cache;
//! - through the engine, steps planned ahead of the draws in flight (each decode row's token
//!   copied on the device from the step before's draws) give every request the tokens of steps
//!   planned one at a time, through early stops, preemptions and admissions mid-run;
//! - device memory after 1,000 requests through the engine equals device memory after the first.
//!
//! The model is small (two layers, hidden 256, the GPU's head dim 128, the byte tokenizer's
//! vocabulary) with random weights. Without a GPU every check prints that it was skipped
//! (`verify::gpu_harness`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use gpu::attention::EvenRows;
use gpu::Gpu;
use model::block_pool::KvCapacity;
use model::config::ModelConfig;
use model::engine::{Engine, GenerationRequest, SamplingParams, StopConditions};
use model::executor::{LogitsWanted, SamplingRow, StepExecutor, StepOutput, Submitted};
use model::gpu_backend::decode_kernel::DecodeKernel;
use model::gpu_backend::executor::{GpuExecutor, GpuOptions};
use model::scheduler::{Scheduler, SchedulerConfig, StepPlan};
use model::start_times::StartTimes;
use small_model::{err, gpu_options, scheduler_config, write_model};

mod small_model;

fn main() {
    verify::gpu_harness::run(
        "gpu_engine",
        &[
            ("a_request_has_the_same_bits_alone_batched_preempted_and_eager", same_bits_everywhere),
            ("a_request_among_even_rows_has_the_bits_of_eager_steps", same_bits_in_even_rows),
            ("several_chunks_of_a_prompt_in_one_step_change_no_bit", same_bits_in_wide_steps),
            ("a_prefix_cache_hit_changes_no_token_and_no_logits_bit", same_bits_after_a_prefix_hit),
            ("planned_ahead_steps_change_no_token", same_tokens_planned_ahead),
            ("device_memory_after_1000_requests_equals_after_the_first", no_leak),
        ],
    )
}

const MAX_SEQS: usize = 80;
const GENERATED: usize = 12;
/// The request under watch (odd: it samples at temperature 0.9, so its tokens vary).
const WATCHED: u64 = 1001;

type Check = Result<(), String>;

/// An executor with graphs; `kv_blocks` forces a small cache (with a short `max_model_len`, so
/// that one sequence still fits).
fn executor(gpu: &Arc<Gpu>, dir: &Path, cfg: &ModelConfig, kv_blocks: Option<usize>) -> Result<GpuExecutor, String> {
    executor_with(gpu, dir, cfg, kv_blocks, DecodeKernel::default())
}

/// [`executor`] with decode steps launched as `kernel` says.
fn executor_with(
    gpu: &Arc<Gpu>,
    dir: &Path,
    cfg: &ModelConfig,
    kv_blocks: Option<usize>,
    kernel: DecodeKernel,
) -> Result<GpuExecutor, String> {
    let options = gpu_options(MAX_SEQS, max_model_len(cfg, kv_blocks), kv_blocks);
    let options = GpuOptions { decode_kernel: kernel, ..options };
    GpuExecutor::load(gpu, dir, cfg, options, &mut |_, _| {}, &mut StartTimes::silent()).map_err(err)
}

fn max_model_len(cfg: &ModelConfig, kv_blocks: Option<usize>) -> usize {
    kv_blocks.map_or(cfg.max_position_embeddings, |_| SMALL_MODEL_LEN)
}

/// The longest sequence beside a forced small cache.
const SMALL_MODEL_LEN: usize = 256;

fn scheduler(exec: &GpuExecutor, cfg: &ModelConfig, prefix_caching: bool) -> Result<Scheduler, String> {
    let kv = exec.kv_capacity();
    let small = (kv.num_blocks * kv.block_size < cfg.max_position_embeddings).then_some(kv.num_blocks);
    let sched = scheduler_config(MAX_SEQS, max_model_len(cfg, small), prefix_caching);
    Scheduler::new(sched, exec.kv_capacity()).map_err(err)
}

/// A request: its prompt and how it samples.
struct Request {
    id: u64,
    prompt: Vec<u32>,
    params: SamplingParams,
}

fn request(id: u64, len: usize) -> Request {
    let prompt = (0..len as u64).map(|t| ((t * 37 + id * 11) % 250) as u32 + 3).collect();
    let params = match id % 2 {
        0 => SamplingParams::greedy(),
        _ => SamplingParams { top_p: 0.95, ..SamplingParams::with_temperature(0.9, id) },
    };
    Request { id, prompt, params }
}

/// What the watched request produced: its tokens and, per token, the bits of the logits row it
/// was drawn from; and the most of its rows one step computed.
struct Watched {
    tokens: Vec<u32>,
    logits: Vec<Vec<u32>>,
    widest: usize,
}

/// Runs `requests` (added in order, each generating `GENERATED` tokens) to the end through `exec`
/// and a fresh scheduler with prefix caching; returns what `WATCHED` produced, the preemption
/// count, and the steps that mixed the watched request with a prefill chunk.
fn drive(exec: &mut GpuExecutor, cfg: &ModelConfig, requests: &[Request]) -> Result<(Watched, u64, usize), String> {
    let mut sched = scheduler(exec, cfg, true)?;
    drive_on(exec, &mut sched, requests)
}

/// As [`drive`], on `sched`, which keeps what it cached for the next call.
fn drive_on(
    exec: &mut GpuExecutor,
    sched: &mut Scheduler,
    requests: &[Request],
) -> Result<(Watched, u64, usize), String> {
    let preempted_before = sched.num_preemptions();
    let params: HashMap<u64, SamplingParams> = requests.iter().map(|r| (r.id, r.params)).collect();
    let mut generated: HashMap<u64, usize> = HashMap::new();
    for r in requests {
        sched.add(r.id, r.prompt.clone(), GENERATED).map_err(err)?;
    }
    let mut watched = Watched { tokens: Vec::new(), logits: Vec::new(), widest: 0 };
    let mut mixed_with_watched = 0;
    while let Some(plan) = sched.schedule().map_err(err)? {
        let sampling: Vec<SamplingRow> = plan
            .seqs
            .iter()
            .filter(|s| s.samples)
            .map(|s| SamplingRow::plain(params[&s.id], generated.get(&s.id).copied().unwrap_or(0) as u64))
            .collect();
        let out = exec.execute(&plan, &sampling, &LogitsWanted::Discard).map_err(err)?;
        let sampling_ids: Vec<u64> = plan.seqs.iter().filter(|s| s.samples).map(|s| s.id).collect();
        if let Some(w) = plan.seqs.iter().find(|s| s.id == WATCHED) {
            watched.widest = watched.widest.max(w.len);
            mixed_with_watched += usize::from(plan.seqs.iter().any(|s| s.len > 1));
        }
        if let Some(j) = sampling_ids.iter().position(|&id| id == WATCHED) {
            let logits = exec.last_logits(sampling_ids.len()).map_err(err)?;
            watched.logits.push(logits.row(j).iter().map(|x| x.to_bits()).collect());
            watched.tokens.push(out.sampled[j]);
        }
        let mut tokens = out.sampled.iter();
        let committed: Vec<Option<u32>> =
            plan.seqs.iter().map(|s| if s.samples { tokens.next().copied() } else { None }).collect();
        sched.commit(&plan, &committed).map_err(err)?;
        for id in sampling_ids {
            let n = generated.entry(id).or_insert(0);
            *n += 1;
            if *n == GENERATED {
                sched.finish(id).map_err(err)?;
            }
        }
    }
    Ok((watched, sched.num_preemptions() - preempted_before, mixed_with_watched))
}

fn compare(what: &str, got: &Watched, want: &Watched) -> Check {
    if got.tokens != want.tokens {
        return Err(format!("{what}: tokens {:?}, alone {:?}", got.tokens, want.tokens));
    }
    for (i, (g, w)) in got.logits.iter().zip(&want.logits).enumerate() {
        if let Some(v) = g.iter().zip(w).position(|(a, b)| a != b) {
            return Err(format!(
                "{what}: the logits of token {i} differ from alone's at vocab {v}: {} vs {}",
                f32::from_bits(g[v]),
                f32::from_bits(w[v])
            ));
        }
    }
    if got.logits.len() != GENERATED {
        return Err(format!("{what}: {} logits rows for {GENERATED} tokens", got.logits.len()));
    }
    Ok(())
}

fn same_bits_everywhere(gpu: &Arc<Gpu>) -> Check {
    let (dir, cfg) = write_model("gpu-engine", "bits")?;
    let watched = || request(WATCHED, 40);
    let mut exec = executor_with(gpu, &dir, &cfg, None, DecodeKernel::Graph)?;
    let (alone, _, _) = drive(&mut exec, &cfg, &[watched()])?;
    drop(exec);
    let mut mixed = 0;
    let mut preemptions = 0;
    for kernel in [DecodeKernel::Graph, DecodeKernel::Mega] {
        let what = |case: &str| format!("{case}, --decode-kernel {kernel:?}");
        let mut exec = executor_with(gpu, &dir, &cfg, None, kernel)?;
        println!("  {}", exec.describe());
        let (again, _, _) = drive(&mut exec, &cfg, &[watched()])?;
        compare(&what("alone"), &again, &alone)?;

        // 64 others: some admitted before it with long prompts still prefilling while it decodes.
        let mut batch = vec![watched()];
        batch.extend((0..64).map(|i| request(i, [5, 33, 300, 17, 520, 64][i as usize % 6])));
        let (batched, _, m) = drive(&mut exec, &cfg, &batch)?;
        compare(&what("in a batch of 64 others"), &batched, &alone)?;
        if m == 0 {
            return Err(what("no step mixed the watched request with a prefill chunk"));
        }
        mixed = m;

        exec.set_graph_replay(false);
        let (eager, _, _) = drive(&mut exec, &cfg, &[watched()])?;
        compare(&what("eager (no graph replay)"), &eager, &alone)?;
        exec.set_graph_replay(true);
        let (again, _, _) = drive(&mut exec, &cfg, &[watched()])?;
        compare(&what("a second run"), &again, &alone)?;
        drop(exec);

        // A cache of 24 blocks: three 100-token requests ahead of it fill it, and the watched
        // request, the newest, is preempted and recomputed.
        let mut small = executor_with(gpu, &dir, &cfg, Some(24), kernel)?;
        let crowd: Vec<Request> = (0..3).map(|i| request(2000 + i, 100)).chain([watched()]).collect();
        let (preempted, p, _) = drive(&mut small, &cfg, &crowd)?;
        if p == 0 {
            return Err(what("the small cache preempted nothing"));
        }
        compare(&what(&format!("after {p} preemptions")), &preempted, &alone)?;
        preemptions = p;
    }
    std::fs::remove_dir_all(&dir).map_err(err)?;
    println!(
        "  {GENERATED} tokens: the same tokens and logits bits alone, beside 64 others ({mixed} mixed steps), \
         eager, twice, and after {preemptions} preemptions, with the graph path and the megakernel; tokens {:?}",
        alone.tokens
    );
    Ok(())
}

/// 256 requests of 130-token prompts (two chunks each) on an executor of 256 sequences whose
/// budget takes every first chunk in one step and every second in the next: the 256 rows then
/// decode together with even lengths of two chunks, so their steps replay the 256-row bucket's
/// even-rows graph (the paired decode kernel; the model's 4 query heads over 2 kv heads give
/// 512 paired CTAs); then 252 of them, which the graph pads to the bucket with 4 rows of one key,
/// even still. The watched request's tokens and logits bits are those of the request alone, and
/// of the 256 run eagerly (the dispatcher's split-K).
fn same_bits_in_even_rows(gpu: &Arc<Gpu>) -> Check {
    const SEQS: usize = 256;
    const PROMPT: usize = small_model::CHUNK + 2;
    let (dir, cfg) = write_model("gpu-engine", "even")?;
    let d = cfg.dims();
    let rule = EvenRows::on(gpu, d.num_heads, d.num_kv_heads).map_err(err)?;
    if !rule.grid_fits(SEQS) {
        std::fs::remove_dir_all(&dir).map_err(err)?;
        println!("  not run: {SEQS} rows' paired decode grid does not fill one or two waves on {} SMs", rule.sms);
        return Ok(());
    }
    let budget = SEQS * small_model::CHUNK + SEQS;
    let max_model_len = cfg.max_position_embeddings;
    let options = GpuOptions { max_batched_tokens: budget, ..gpu_options(SEQS, max_model_len, None) };
    let mut exec =
        GpuExecutor::load(gpu, &dir, &cfg, options, &mut |_, _| {}, &mut StartTimes::silent()).map_err(err)?;
    let run = |exec: &mut GpuExecutor, requests: &[Request]| {
        let sched = SchedulerConfig { max_batched_tokens: budget, ..scheduler_config(SEQS, max_model_len, false) };
        let mut sched = Scheduler::new(sched, exec.kv_capacity()).map_err(err)?;
        drive_on(exec, &mut sched, requests)
    };
    let batch_of = |n: usize| -> Vec<Request> {
        (0..n as u64).map(|i| if i == 7 { request(WATCHED, PROMPT) } else { request(i, PROMPT) }).collect()
    };
    let batch = batch_of(SEQS);
    let (alone, _, _) = run(&mut exec, &[request(WATCHED, PROMPT)])?;
    let mut replays = [0; 2];
    // The full bucket, then 4 rows short of it: padding rows of one key keep the rows even.
    for (n, replayed) in [SEQS, SEQS - 4].into_iter().zip(&mut replays) {
        let before = exec.even_replays().unwrap_or(0);
        let (even, _, _) = run(&mut exec, &batch_of(n))?;
        *replayed = exec.even_replays().unwrap_or(0) - before;
        if *replayed == 0 {
            return Err(format!("no step of the {n} rows replayed the even-rows graph ({})", exec.describe()));
        }
        compare(&format!("among {n} even rows"), &even, &alone)?;
    }
    exec.set_graph_replay(false);
    let (eager, _, _) = run(&mut exec, &batch)?;
    compare("the same batch eager", &eager, &alone)?;
    std::fs::remove_dir_all(&dir).map_err(err)?;
    println!(
        "  {GENERATED} tokens of a request among {SEQS} and {} even rows ({} and {} steps on the even-rows graph): \
         the bits alone and of the batch run eagerly",
        SEQS - 4,
        replays[0],
        replays[1]
    );
    Ok(())
}

/// The watched request with a 300-token prompt (chunks of 128, 128 and 44) on an executor sized
/// for four chunks beside the decode rows: one chunk a step (a scheduler whose budget is one
/// chunk), then the whole prompt in one step, then beside 16 others, some admitted
/// before it with long prompts, so its chunks run in steps grouped as the budget falls out. The
/// same tokens and logits bits each time: a chunk's rows do not depend on the step's size.
fn same_bits_in_wide_steps(gpu: &Arc<Gpu>) -> Check {
    let (dir, cfg) = write_model("gpu-engine", "wide")?;
    let wide = 4 * small_model::CHUNK + MAX_SEQS;
    let max_model_len = cfg.max_position_embeddings;
    let options = GpuOptions { max_batched_tokens: wide, ..gpu_options(MAX_SEQS, max_model_len, None) };
    let mut exec =
        GpuExecutor::load(gpu, &dir, &cfg, options, &mut |_, _| {}, &mut StartTimes::silent()).map_err(err)?;
    let mut run = |budget: usize, requests: &[Request]| {
        let sched = SchedulerConfig { max_batched_tokens: budget, ..scheduler_config(MAX_SEQS, max_model_len, false) };
        let mut sched = Scheduler::new(sched, exec.kv_capacity()).map_err(err)?;
        drive_on(&mut exec, &mut sched, requests)
    };
    let watched = || request(WATCHED, 300);
    let (one, _, _) = run(small_model::CHUNK, &[watched()])?;
    let (whole, _, _) = run(wide, &[watched()])?;
    if (one.widest, whole.widest) != (128, 300) {
        return Err(format!(
            "the prompt's widest step: {} and {} rows, expected 128 and 300",
            one.widest, whole.widest
        ));
    }
    compare("the whole prompt in one step", &whole, &one)?;
    let mut crowd: Vec<Request> = (2020..2028).map(|i| request(i, [520, 33, 300, 5][i as usize % 4])).collect();
    crowd.push(watched());
    crowd.extend((2028..2036).map(|i| request(i, [200, 9, 140, 700][i as usize % 4])));
    let (beside, _, mixed) = run(wide, &crowd)?;
    if beside.widest <= small_model::CHUNK {
        return Err(format!(
            "beside 16 others the prompt never ran several chunks to a step: widest {} rows",
            beside.widest
        ));
    }
    compare(&format!("beside 16 others ({mixed} mixed steps, widest {} rows)", beside.widest), &beside, &one)?;
    std::fs::remove_dir_all(&dir).map_err(err)?;
    println!(
        "  300-token prompt on an executor of {wide} rows: the same tokens and logits bits one chunk a step, in one \
         step, and beside 16 others (its widest step {} rows); tokens {:?}",
        beside.widest, one.tokens
    );
    Ok(())
}

/// The watched request with a 300-token prompt alone without a cache, then after two donors: the
/// first shares its first 200 tokens, the second 280 (and hits the first's first chunk). The
/// watched request then hits two whole 128-token chunks (256 tokens), the second of them made of
/// the first donor's rows 128..192, computed in a chunk whose later rows held other tokens, and
/// the second donor's rows 192..256; the first chunk it computes starts at 256 over that K/V.
/// Then again beside 8 others prefilling and decoding. The same tokens and logits bits each time.
fn same_bits_after_a_prefix_hit(gpu: &Arc<Gpu>) -> Check {
    let (dir, cfg) = write_model("gpu-engine", "prefix")?;
    let mut exec = executor(gpu, &dir, &cfg, None)?;
    let watched = || request(WATCHED, 300);
    let mut plain = scheduler(&exec, &cfg, false)?;
    let (alone, _, _) = drive_on(&mut exec, &mut plain, &[watched()])?;
    if plain.prefix_cache_hits() != 0 {
        return Err(format!("{} tokens hit with prefix caching off", plain.prefix_cache_hits()));
    }
    drop(plain);

    let mut sched = scheduler(&exec, &cfg, true)?;
    let donor = |id: u64, shared: usize| {
        let mut r = request(id, 300);
        r.prompt.splice(..shared, watched().prompt[..shared].iter().copied());
        r
    };
    drive_on(&mut exec, &mut sched, &[donor(WATCHED + 4, 200)])?;
    drive_on(&mut exec, &mut sched, &[donor(WATCHED + 2, 280)])?;
    let donors = sched.prefix_cache_hits();
    if donors != 128 {
        return Err(format!("the second donor hit {donors} tokens of the first's prompt, expected 128"));
    }
    let (hit, _, _) = drive_on(&mut exec, &mut sched, &[watched()])?;
    let donated = sched.prefix_cache_hits() - donors;
    if donated != 256 {
        return Err(format!("the watched request hit {donated} tokens of the donors' prompts, expected 256"));
    }
    compare("after a hit on two other requests' prefixes", &hit, &alone)?;

    let mut crowd = vec![watched()];
    // Ids 2010..2017: a prompt depends on id * 11 mod 250, so none is the watched request's (1001).
    crowd.extend((2010..2018).map(|i| request(i, [40, 300, 9][i as usize % 3])));
    let (again, _, mixed) = drive_on(&mut exec, &mut sched, &crowd)?;
    let own = sched.prefix_cache_hits() - donors - donated;
    if own != 256 {
        return Err(format!("the second run hit {own} tokens, expected 256"));
    }
    compare(&format!("after a second hit, beside 8 others ({mixed} mixed steps)"), &again, &alone)?;
    std::fs::remove_dir_all(&dir).map_err(err)?;
    println!(
        "  300-token prompt: the same tokens and logits bits with no cache and after hits of 256 tokens, alone and \
         beside 8 others; tokens {:?}",
        alone.tokens
    );
    Ok(())
}

/// The executor it wraps, with the most steps it ever had in flight at once counted.
struct DepthCounted {
    inner: GpuExecutor,
    depth: usize,
    deepest: Arc<AtomicUsize>,
}

impl StepExecutor for DepthCounted {
    fn execute(
        &mut self,
        plan: &StepPlan,
        rows: &[SamplingRow<'_>],
        wanted: &LogitsWanted,
    ) -> model::Result<StepOutput> {
        self.inner.execute(plan, rows, wanted)
    }

    fn submit(&mut self, plan: &StepPlan, rows: &[SamplingRow<'_>], wanted: &LogitsWanted) -> model::Result<Submitted> {
        let submitted = self.inner.submit(plan, rows, wanted)?;
        if matches!(submitted, Submitted::InFlight) {
            self.depth += 1;
            self.deepest.fetch_max(self.depth, Ordering::Relaxed);
        }
        Ok(submitted)
    }

    fn collect(&mut self) -> model::Result<StepOutput> {
        self.depth -= 1;
        self.inner.collect()
    }

    fn kv_capacity(&self) -> KvCapacity {
        self.inner.kv_capacity()
    }

    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// 40 requests through the engine, planned one step at a time and then ahead, on the normal cache
/// and on 24 blocks (preempting): the same tokens, finishes and logprobs. A third of the requests
/// stop at any of 40 token ids, so they end at a token the host learns while the next step runs;
/// a fifth want logprobs, whose rows come back through the queued steps' landings.
fn same_tokens_planned_ahead(gpu: &Arc<Gpu>) -> Check {
    let (dir, cfg) = write_model("gpu-engine", "ahead")?;
    let tokenizer = Arc::new(tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).map_err(err)?);
    let mut report = Vec::new();
    for kv_blocks in [None, Some(24)] {
        let len = max_model_len(&cfg, kv_blocks);
        let mut runs = Vec::new();
        for pipelining in [false, true] {
            let deepest = Arc::new(AtomicUsize::new(0));
            let inner = executor(gpu, &dir, &cfg, kv_blocks)?;
            let exec = DepthCounted { inner, depth: 0, deepest: deepest.clone() };
            let sched = scheduler_config(MAX_SEQS, len, true);
            let mut engine = Engine::new(Box::new(exec), tokenizer.clone(), sched, false).map_err(err)?;
            engine.set_pipelining(pipelining);
            for i in 0..40u64 {
                let r = request(3000 + i, 1 + (i as usize * 37) % 150);
                let stop = StopConditions {
                    stop_token_ids: if i % 3 == 0 { (100..140).collect() } else { vec![] },
                    max_tokens: 4 + (i as usize % 13),
                    max_model_len: len,
                    ignore_eos: true,
                    ..Default::default()
                };
                let logprobs = (i % 5 == 1).then_some(2);
                let req =
                    GenerationRequest { prompt: r.prompt, sampling: r.params, stop, logprobs, ..Default::default() };
                engine.add_request(req).map_err(err)?;
            }
            let done = engine.run_to_completion().map_err(err)?;
            let lp_bits = |c: &model::engine::Completion| -> Vec<u64> {
                let lps = c.logprobs.iter().flatten();
                lps.flat_map(|l| l.top.iter().map(|t| t.1.to_bits()).chain([l.logprob.to_bits()])).collect()
            };
            let outcome: Vec<(u64, Vec<u32>, String, Vec<u64>)> =
                done.iter().map(|c| (c.id, c.token_ids.clone(), format!("{:?}", c.finish), lp_bits(c))).collect();
            runs.push((outcome, deepest.load(Ordering::Relaxed), engine.stats().num_preemptions));
        }
        let what = format!("{} blocks", kv_blocks.map_or("all".to_string(), |b| b.to_string()));
        if runs[0].0 != runs[1].0 {
            let first = runs[0].0.iter().zip(&runs[1].0).find(|(a, b)| a != b);
            return Err(format!("{what}: planned ahead, a request's tokens differ: {first:?}"));
        }
        if (runs[0].1, runs[1].1) != (1, 2) {
            return Err(format!("{what}: steps in flight at most {} stepwise and {} ahead", runs[0].1, runs[1].1));
        }
        let stopped = runs[1].0.iter().filter(|c| c.2.contains("Stop")).count();
        if runs[1].0.iter().filter(|c| !c.3.is_empty()).count() != 8 {
            return Err(format!("{what}: not every request that asked got its logprobs"));
        }
        if kv_blocks.is_some() && runs[1].2 == 0 {
            return Err(format!("{what}: nothing was preempted"));
        }
        report.push(format!("{what}: {stopped} stopped at a token id, {} preemptions", runs[1].2));
    }
    std::fs::remove_dir_all(&dir).map_err(err)?;
    println!("  40 requests, the same tokens planned ahead as step by step ({})", report.join("; "));
    Ok(())
}

fn no_leak(gpu: &Arc<Gpu>) -> Check {
    let (dir, cfg) = write_model("gpu-engine", "leak")?;
    let exec = executor(gpu, &dir, &cfg, None)?;
    let tokenizer = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).map_err(err)?;
    let sched = scheduler_config(MAX_SEQS, cfg.max_position_embeddings, true);
    let mut engine = Engine::new(Box::new(exec), Arc::new(tokenizer), sched, false).map_err(err)?;
    let free = || gpu.memory().map(|m| m.0).map_err(err);
    let add = |engine: &mut Engine, i: u64| {
        let r = request(i, 1 + (i as usize * 53) % 300);
        let stop = StopConditions {
            eos_token_ids: vec![],
            stop: vec![],
            max_tokens: 1 + (i as usize % 7),
            max_model_len: cfg.max_position_embeddings,
            ignore_eos: true,
            ..Default::default()
        };
        engine
            .add_request(GenerationRequest { prompt: r.prompt, sampling: r.params, stop, ..Default::default() })
            .map_err(err)
    };
    add(&mut engine, 0)?;
    engine.run_to_completion().map_err(err)?;
    let after_first = free()?;
    let mut done = 1;
    for wave in 0..9u64 {
        for i in 0..111 {
            add(&mut engine, 1 + wave * 111 + i)?;
        }
        done += engine.run_to_completion().map_err(err)?.len();
    }
    let after_all = free()?;
    std::fs::remove_dir_all(&dir).map_err(err)?;
    if done != 1000 {
        return Err(format!("{done} requests completed, 1000 were added"));
    }
    if after_all != after_first {
        return Err(format!(
            "free device memory was {after_first} B after the first request, {after_all} B after 1000"
        ));
    }
    println!("  1000 requests: free device memory {after_first} B after the first and after the last");
    Ok(())
}
