//! The engine on asynct-tiny, every case written once and run on every backend: batch
//! invariance, seed reproducibility, recorded logits against a plain prefill, the stop rules, the
//! executor seam (sampling below it, logits only when recording), blocks allocated as sequences
//! grow, preemption by recompute under a small cache, abort, and the shape of each step.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use model::block_pool::blocks_for;
use model::block_pool::KvCapacity;
use model::byte_tokenizer;
use model::cpu_backend::CpuExecutor;
use model::engine::{
    Completion, Engine, EngineEvent, FinishReason, GenerationRequest, SamplingParams, StepRows, StepTimes,
    StopConditions,
};
use model::executor::{LogitsWanted, SamplingRow, StepExecutor, StepOutput};
use model::scheduler::{SchedulerConfig, StepPlan};
use model::Error;
use ndarray::Array2;
use oracle::decode::sampler::sample;
use oracle::decode::token_logprobs;
use oracle::hp1::AttnMetadata;
use oracle::model::forward::Model;
use oracle::model::kv_cache::KvCache;
use oracle::model::precision::Rounding;
use oracle::model::step::{LogitRows, StepInput};
use oracle::Scalar;

const BLOCK: usize = 4;
const MAX_MODEL_LEN: usize = 2048;

fn model<T: Scalar>() -> Model<T> {
    let (cfg, weights) = common::tiny(11);
    Model::new(cfg.dims(), weights.cast::<T>(), Rounding::Exact).unwrap()
}

/// A backend under test.
#[derive(Clone, Copy)]
struct Backend {
    /// Its executor over a cache of `num_blocks` blocks of [`BLOCK`] tokens.
    make: fn(num_blocks: usize) -> Box<dyn StepExecutor>,
    /// Bound on the relative L2 error of its logits against the f64 oracle's (cpu f32 measures
    /// 1.8e-7 on the case below, cpu f64 2.5e-8).
    logits_tol: f64,
}

fn cpu_f32() -> Backend {
    Backend { make: |n| Box::new(CpuExecutor::new(model::<f32>(), n, BLOCK, "cpu f32")), logits_tol: 1e-6 }
}

fn cpu_f64() -> Backend {
    // Exact but for the rounding of its logits to f32 on the way out.
    Backend { make: |n| Box::new(CpuExecutor::new(model::<f64>(), n, BLOCK, "cpu f64")), logits_tol: 1e-7 }
}

/// Expands each case `fn(Backend)` into one `#[test]` per backend, in a module named after the
/// backend (as candle's `test_device!` does). A new backend is one more line here.
macro_rules! backend_tests {
    ($($case:ident),* $(,)?) => {
        mod cpu_f32 { $( #[test] fn $case() { super::$case(super::cpu_f32()) } )* }
        mod cpu_f64 { $( #[test] fn $case() { super::$case(super::cpu_f64()) } )* }
    };
}

backend_tests!(
    a_request_in_a_batch_gets_the_bits_it_gets_alone,
    the_same_seed_gives_the_same_tokens_and_other_seeds_differ,
    recorded_logits_equal_one_prefill_of_the_whole_sequence,
    eos_max_tokens_and_stop_strings_end_requests,
    events_stream_every_token_and_one_finish,
    bad_requests_are_refused_and_leave_the_engine_usable,
    the_executor_samples_and_returns_logits_only_when_recording,
    only_the_rows_of_requests_that_want_logprobs_come_back,
    only_the_prompt_rows_of_the_request_that_wants_them_come_back,
    blocks_are_taken_as_tokens_are_computed_and_all_come_back,
    preempted_requests_get_the_tokens_and_logits_they_get_alone,
    abort_frees_blocks_at_once_and_leaves_the_others_alone,
    last_step_tells_decode_steps_from_prefill_and_mixed_ones,
    last_step_times_split_a_step_into_its_phases,
);

#[derive(Clone, Copy)]
struct Opts {
    record: bool,
    prefill_chunk: usize,
    num_blocks: usize,
    max_num_seqs: usize,
    /// The step budget (`max_batched_tokens`).
    budget: usize,
}

impl Default for Opts {
    fn default() -> Self {
        Self { record: false, prefill_chunk: 16, num_blocks: 256, max_num_seqs: 8, budget: 64 }
    }
}

fn engine(b: Backend, o: Opts) -> Engine {
    engine_over((b.make)(o.num_blocks), o)
}

fn engine_over(exec: Box<dyn StepExecutor>, o: Opts) -> Engine {
    let tok = Arc::new(byte_tokenizer::build().unwrap());
    let sched = SchedulerConfig {
        max_num_seqs: o.max_num_seqs,
        max_batched_tokens: o.budget,
        prefill_chunk: o.prefill_chunk,
        max_model_len: MAX_MODEL_LEN,
        prefix_caching: true,
    };
    Engine::new(exec, tok, sched, o.record).unwrap()
}

fn request(prompt: Vec<u32>, seed: u64, max_tokens: usize) -> GenerationRequest {
    GenerationRequest {
        prompt,
        sampling: SamplingParams { top_k: 50, top_p: 0.95, ..SamplingParams::with_temperature(1.3, seed) },
        stop: StopConditions {
            eos_token_ids: vec![byte_tokenizer::EOS_ID],
            stop: vec![],
            max_tokens,
            max_model_len: MAX_MODEL_LEN,
            ignore_eos: true,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn greedy(prompt: Vec<u32>, max_tokens: usize) -> GenerationRequest {
    GenerationRequest { sampling: SamplingParams::greedy(), ..request(prompt, 0, max_tokens) }
}

/// Prompts of 3, 12, 21, ... tokens.
fn prompts(n: usize) -> Vec<Vec<u32>> {
    (0..n).map(|i| (0..(3 + 9 * i)).map(|t| ((t * 37 + i * 11) % 500) as u32).collect()).collect()
}

/// Greedy and seeded-temperature requests, alternately, over [`prompts`].
fn mixed(n: usize, max_tokens: usize) -> Vec<GenerationRequest> {
    let p = prompts(n);
    p.into_iter()
        .enumerate()
        .map(|(i, p)| if i % 2 == 0 { greedy(p, max_tokens) } else { request(p, 100 + i as u64, max_tokens) })
        .collect()
}

fn run(engine: &mut Engine, reqs: Vec<GenerationRequest>) -> Vec<Completion> {
    for r in reqs {
        engine.add_request(r).unwrap();
    }
    let done = engine.run_to_completion().unwrap();
    engine.scheduler().pool().check_invariants();
    assert_eq!(engine.stats().num_blocks_used, 0);
    done
}

fn alone(b: Backend, o: Opts, r: GenerationRequest) -> Completion {
    run(&mut engine(b, Opts { num_blocks: 256, max_num_seqs: 1, ..o }), vec![r]).remove(0)
}

/// One [`StepExecutor::execute`] call as a [`Spy`] saw it.
struct Call {
    plan: StepPlan,
    /// Each sampling row's parameters and step.
    rows: Vec<(SamplingParams, u64)>,
    /// Each sampling row's [`SamplingRow::scored`].
    scored: Vec<bool>,
    wanted: LogitsWanted,
    sampled: Vec<u32>,
    /// Every query row's logits, whatever the engine asked for.
    logits: Array2<f32>,
}

/// An executor that logs every call to the one it wraps, asking it for every row's logits and
/// handing the engine only what the engine asked for.
struct Spy {
    inner: Box<dyn StepExecutor>,
    log: Arc<Mutex<Vec<Call>>>,
}

impl Spy {
    fn wrap(inner: Box<dyn StepExecutor>) -> (Box<dyn StepExecutor>, Arc<Mutex<Vec<Call>>>) {
        let log = Arc::new(Mutex::new(Vec::new()));
        (Box::new(Spy { inner, log: log.clone() }), log)
    }
}

impl StepExecutor for Spy {
    fn execute(&mut self, plan: &StepPlan, rows: &[SamplingRow], wanted: &LogitsWanted) -> model::Result<StepOutput> {
        let every_row = LogitsWanted::QueryRows((0..plan.token_ids.len()).collect());
        let out = self.inner.execute(plan, rows, &every_row)?;
        let logits = out.logits.expect("asked for every row");
        let params = rows.iter().map(|r| (r.params, r.step)).collect();
        let scored = rows.iter().map(|r| r.scored).collect();
        let handed = wanted.plan_rows(plan, rows)?.map(|r| logits.select(ndarray::Axis(0), &r));
        let call = Call {
            plan: plan.clone(),
            rows: params,
            scored,
            wanted: wanted.clone(),
            sampled: out.sampled.clone(),
            logits,
        };
        self.log.lock().unwrap().push(call);
        Ok(StepOutput { sampled: out.sampled, logits: handed })
    }

    fn kv_capacity(&self) -> KvCapacity {
        self.inner.kv_capacity()
    }

    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    fn describe(&self) -> String {
        format!("spy over {}", self.inner.describe())
    }
}

fn a_request_in_a_batch_gets_the_bits_it_gets_alone(b: Backend) {
    let reqs: Vec<_> = prompts(5).into_iter().enumerate().map(|(i, p)| request(p, 100 + i as u64, 12)).collect();
    let o = Opts { record: true, ..Opts::default() };
    let batched = run(&mut engine(b, o), reqs.clone());
    for (r, c) in reqs.into_iter().zip(&batched) {
        let one = alone(b, o, r);
        assert_eq!(one.token_ids, c.token_ids);
        assert_eq!(one.logits, c.logits, "logits differ bitwise for prompt of {} tokens", c.prompt_tokens);
    }
}

fn the_same_seed_gives_the_same_tokens_and_other_seeds_differ(b: Backend) {
    let p = prompts(3)[2].clone();
    let o = Opts::default();
    let a = alone(b, o, request(p.clone(), 5, 24));
    assert_eq!(alone(b, o, request(p.clone(), 5, 24)).token_ids, a.token_ids);
    let others: Vec<_> = (6..10).map(|s| alone(b, o, request(p.clone(), s, 24))).collect();
    assert!(others.iter().any(|o| o.token_ids != a.token_ids), "four other seeds all drew the same 24 tokens");
}

/// Recorded logits (chunked prefill, then decode steps) equal one plain f64 prefill of the prompt
/// and all generated tokens but the last, within the backend's bound.
fn recorded_logits_equal_one_prefill_of_the_whole_sequence(b: Backend) {
    let p = prompts(5)[4].clone();
    let c = alone(b, Opts { record: true, prefill_chunk: 7, ..Opts::default() }, request(p.clone(), 9, 10));
    let logits = c.logits.as_ref().unwrap();
    let mut seq = p.clone();
    seq.extend(&c.token_ids[..c.token_ids.len() - 1]);
    assert_eq!(logits.nrows(), seq.len());

    let m = model::<f64>();
    let mut cache = KvCache::new(&m.dims, 64, BLOCK);
    let n = seq.len();
    let table = Array2::from_shape_fn((1, n.div_ceil(BLOCK)), |(_, j)| j as i32);
    let meta = AttnMetadata { block_table: table, seq_lens: vec![n as i32], query_start_loc: vec![0, n as i32] };
    let slots: Vec<i64> = (0..n as i64).collect();
    let step = StepInput { token_ids: &seq, meta: &meta, slot_mapping: &slots, logits: LogitRows::All };
    let reference = m.forward(&step, &mut cache).unwrap();
    let diff = reference.iter().zip(logits).map(|(r, &l)| (r - l as f64).powi(2)).sum::<f64>().sqrt();
    let err = diff / reference.iter().map(|r| r * r).sum::<f64>().sqrt();
    assert!(err < b.logits_tol, "relative L2 {err:e}, bound {:e}", b.logits_tol);
}

fn eos_max_tokens_and_stop_strings_end_requests(b: Backend) {
    let tok = byte_tokenizer::build().unwrap();
    let mut e = engine(b, Opts::default());
    let abc = || {
        let mut r = greedy(tok.encode("abc", false).unwrap().get_ids().to_vec(), 6);
        r.stop = StopConditions { eos_token_ids: vec![], ignore_eos: false, ..r.stop };
        r
    };
    let free = run(&mut e, vec![abc()]);
    assert_eq!(free[0].finish, FinishReason::MaxTokens);
    assert_eq!(free[0].token_ids.len(), 6);

    let third = free[0].token_ids[2];
    let mut as_eos = abc();
    as_eos.stop.eos_token_ids = vec![third];
    let ended = run(&mut e, vec![as_eos]);
    assert_eq!(ended[0].finish, FinishReason::Eos);
    assert_eq!(ended[0].token_ids, free[0].token_ids[..=free[0].token_ids.iter().position(|&t| t == third).unwrap()]);

    let text = &free[0].text;
    let stop: String = text.chars().skip(1).take(2).collect();
    let mut with_stop = abc();
    with_stop.stop.stop = vec![stop.clone()];
    let stopped = run(&mut e, vec![with_stop]);
    assert_eq!(stopped[0].finish, FinishReason::StopString(stop.clone()));
    assert!(!stopped[0].text.contains(&stop) && text.starts_with(&stopped[0].text));
}

fn events_stream_every_token_and_one_finish(b: Backend) {
    let mut e = engine(b, Opts::default());
    let id = e.add_request(request(prompts(2)[1].clone(), 1, 5)).unwrap();
    let mut tokens = 0;
    let mut finishes = 0;
    while e.has_work() {
        for ev in e.step().unwrap() {
            match ev {
                EngineEvent::Token { request, .. } if request == id => tokens += 1,
                EngineEvent::Finished { request, reason } if request == id => {
                    finishes += 1;
                    assert_eq!(reason, FinishReason::MaxTokens);
                }
                other => panic!("unexpected event {other:?}"),
            }
        }
    }
    assert_eq!((tokens, finishes), (5, 1));
    let taken = e.take_finished();
    assert_eq!((taken.len(), taken[0].id, taken[0].token_ids.len()), (1, id, 5));
    assert!(e.take_finished().is_empty(), "a completion is handed out once");
}

fn bad_requests_are_refused_and_leave_the_engine_usable(b: Backend) {
    let mut e = engine(b, Opts { num_blocks: 8, ..Opts::default() });
    assert!(e.add_request(request(vec![], 0, 4)).is_err());
    assert!(e.add_request(request(vec![1, 600], 0, 4)).unwrap_err().to_string().contains("600"));
    let mut hot = request(vec![1, 2], 0, 4);
    hot.sampling.top_p = 0.0;
    assert!(e.add_request(hot).unwrap_err().to_string().contains("top_p"));
    // 30 + 3 tokens need 9 blocks of 4, and the whole cache is 8.
    let too_long = e.add_request(request((0..30).collect(), 0, 3)).unwrap_err();
    assert!(matches!(too_long, Error::Invalid { param: "max_tokens", .. }), "{too_long}");
    assert!(
        too_long.to_string().contains("need 9 KV-cache blocks of 4 tokens and the whole cache holds 8"),
        "{too_long}"
    );
    let ok = run(&mut e, vec![request(vec![1, 2, 3], 0, 4)]);
    assert_eq!(ok[0].token_ids.len(), 4);
}

/// The engine asks the executor for logits only when recording, hands it each sampling
/// sequence's parameters and generated count, and gets back the tokens the oracle's `sample`
/// draws from those logits; recording changes no token.
fn the_executor_samples_and_returns_logits_only_when_recording(b: Backend) {
    let reqs = mixed(4, 6);
    let mut by_mode = Vec::new();
    for record in [false, true] {
        let (spy, log) = Spy::wrap((b.make)(256));
        let mut e = engine_over(spy, Opts { record, prefill_chunk: 8, ..Opts::default() });
        let done = run(&mut e, reqs.clone());
        for call in log.lock().unwrap().iter() {
            let every_row = LogitsWanted::QueryRows((0..call.plan.token_ids.len()).collect());
            assert_eq!(call.wanted, if record { every_row } else { LogitsWanted::Discard });
            let sampling: Vec<_> = call.plan.seqs.iter().enumerate().filter(|(_, p)| p.samples).collect();
            assert_eq!((sampling.len(), call.sampled.len()), (call.rows.len(), call.rows.len()));
            for (((i, p), row), &token) in sampling.into_iter().zip(&call.rows).zip(&call.sampled) {
                let r = &reqs[p.id as usize];
                assert_eq!(row.0, r.sampling);
                assert_eq!(row.1 as usize, p.start + p.len - r.prompt.len(), "the step is the generated count");
                let last = call.logits.row(call.plan.last_row(i));
                assert_eq!(token, sample(last.as_slice().unwrap(), &row.0, row.1).unwrap());
            }
        }
        if record {
            for (c, r) in done.iter().zip(&reqs) {
                let logits = c.logits.as_ref().unwrap();
                for (g, &token) in c.token_ids.iter().enumerate() {
                    let row = logits.row(c.prompt_tokens - 1 + g);
                    assert_eq!(token, sample(row.as_slice().unwrap(), &r.sampling, g as u64).unwrap());
                }
            }
        }
        by_mode.push(done.into_iter().map(|c| c.token_ids).collect::<Vec<_>>());
    }
    assert_eq!(by_mode[0], by_mode[1]);
}

/// Beside neighbours that want nothing of their logits, a request with logprobs has its row alone
/// brought back: the engine flags it and asks for the scored rows only while it samples, and
/// every logprob is the log-softmax of the row its token was drawn from.
fn only_the_rows_of_requests_that_want_logprobs_come_back(b: Backend) {
    let mut reqs = mixed(4, 6);
    reqs[1].logprobs = Some(2);
    let (spy, log) = Spy::wrap((b.make)(256));
    let mut e = engine_over(spy, Opts { prefill_chunk: 8, ..Opts::default() });
    let done = run(&mut e, reqs.clone());
    let (mut scoring_steps, mut other_steps, mut want) = (0, 0, Vec::new());
    for call in log.lock().unwrap().iter() {
        let sampling: Vec<(usize, u64)> =
            call.plan.seqs.iter().enumerate().filter(|(_, p)| p.samples).map(|(i, p)| (i, p.id)).collect();
        for (&(i, _), &token) in sampling.iter().zip(&call.sampled).filter(|((_, id), _)| *id == 1) {
            let row = call.logits.row(call.plan.last_row(i));
            want.push(token_logprobs(row.as_slice().unwrap(), token, 2));
        }
        let flags: Vec<bool> = sampling.iter().map(|&(_, id)| id == 1).collect();
        assert_eq!(call.scored, flags, "only the logprobs request is scored");
        match flags.contains(&true) {
            true => (assert_eq!(call.wanted, LogitsWanted::ScoredRows), scoring_steps += 1),
            false => (assert_eq!(call.wanted, LogitsWanted::Discard), other_steps += 1),
        };
    }
    assert!(scoring_steps >= 6 && other_steps > 0, "{scoring_steps} scoring and {other_steps} other steps");
    assert_eq!(done[1].logprobs.as_ref().expect("asked for"), &want);
    assert_eq!(want.len(), done[1].token_ids.len());
    assert!(done.iter().enumerate().all(|(i, c)| c.logprobs.is_some() == (i == 1)));
    let mut plain = reqs.clone();
    plain[1].logprobs = None;
    let without = run(&mut engine_over((b.make)(256), Opts { prefill_chunk: 8, ..Opts::default() }), plain);
    let tokens = |cs: &[Completion]| cs.iter().map(|c| c.token_ids.clone()).collect::<Vec<_>>();
    assert_eq!(tokens(&done), tokens(&without), "asking for logprobs changes no token");
}

/// A request that wants its prompt's logprobs has its own prompt rows brought back while its
/// prompt is computed, never a neighbour's, and its prompt logprobs are those rows'
/// log-softmaxes; asking changes no token.
fn only_the_prompt_rows_of_the_request_that_wants_them_come_back(b: Backend) {
    let mut reqs = mixed(4, 6);
    reqs[2].prompt_logprobs = Some(1);
    let prompt = reqs[2].prompt.clone();
    let (spy, log) = Spy::wrap((b.make)(256));
    let mut e = engine_over(spy, Opts { prefill_chunk: 8, ..Opts::default() });
    let done = run(&mut e, reqs.clone());
    let (mut want, mut asked) = (vec![None], 0);
    for call in log.lock().unwrap().iter() {
        let mut rows = Vec::new();
        for (i, p) in call.plan.seqs.iter().enumerate().filter(|(_, p)| p.id == 2 && p.start < prompt.len()) {
            for (pos, r) in (p.start..).zip(call.plan.rows(i)) {
                rows.push(r);
                asked += 1;
                if pos + 1 < prompt.len() {
                    want.push(Some(token_logprobs(call.logits.row(r).as_slice().unwrap(), prompt[pos + 1], 1)));
                }
            }
        }
        match rows.is_empty() {
            true => assert_eq!(call.wanted, LogitsWanted::Discard),
            false => assert_eq!(call.wanted, LogitsWanted::QueryRows(rows), "request 2's rows alone"),
        }
    }
    assert_eq!(asked, prompt.len(), "each prompt row once");
    assert_eq!(done[2].prompt_logprobs.as_ref().expect("asked for"), &want);
    assert!(done.iter().enumerate().all(|(i, c)| c.prompt_logprobs.is_some() == (i == 2)));
    let without = run(&mut engine_over((b.make)(256), Opts { prefill_chunk: 8, ..Opts::default() }), mixed(4, 6));
    let tokens = |cs: &[Completion]| cs.iter().map(|c| c.token_ids.clone()).collect::<Vec<_>>();
    assert_eq!(tokens(&done), tokens(&without), "asking for prompt logprobs changes no token");
}

/// A sequence holds the blocks its computed tokens need: a prompt chunk's worth after admission,
/// then one more each time `BLOCK` decoded tokens fill one; all come back when it finishes. A
/// budget of one chunk makes a step of each chunk.
fn blocks_are_taken_as_tokens_are_computed_and_all_come_back(b: Backend) {
    let mut e = engine(b, Opts { prefill_chunk: 4, budget: 4, ..Opts::default() });
    // Step by step: a step planned ahead takes its blocks while the one before still draws.
    e.set_pipelining(false);
    assert_eq!(e.stats().num_blocks, 256, "the pool is the executor's cache");
    e.add_request(greedy((0..10).collect(), 12)).unwrap();
    let (mut steps, mut generated, mut used) = (0, 0, Vec::new());
    while e.has_work() {
        steps += 1;
        let events = e.step().unwrap();
        generated += events.iter().filter(|ev| matches!(ev, EngineEvent::Token { .. })).count();
        let computed = if generated == 0 { 4 * steps } else { 10 + generated - 1 };
        let held = e.stats().num_blocks_used;
        if e.has_work() {
            assert_eq!(held, blocks_for(computed, BLOCK), "after step {steps}, {computed} tokens computed");
        }
        e.scheduler().pool().check_invariants();
        used.push(held);
    }
    // Chunks of 4, 4 and 2 prompt tokens, then one token per step until the 12th is drawn.
    assert_eq!(used, vec![1, 2, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0]);
}

/// [`Engine::last_step`] gives each step's sequences, query tokens and decode rows, so a benchmark
/// can time the decode-only steps apart from the prefill and mixed ones.
fn last_step_tells_decode_steps_from_prefill_and_mixed_ones(b: Backend) {
    let mut e = engine(b, Opts { prefill_chunk: 4, ..Opts::default() });
    // Step by step, so that the second request joins the second step.
    e.set_pipelining(false);
    e.add_request(greedy((0..6).collect(), 3)).unwrap();
    let mut shapes = Vec::new();
    while e.has_work() {
        e.step().unwrap();
        let s = e.last_step();
        shapes.push((s.num_seqs, s.num_tokens, s.num_decodes, s.is_decode_only()));
        if shapes.len() == 1 {
            e.add_request(greedy((10..16).collect(), 2)).unwrap();
        }
    }
    // The first's two chunks alone (the budget holds both); a decode row beside the second's two
    // chunks; then both decoding, until both have their tokens.
    assert_eq!(shapes, vec![(1, 6, 0, false), (2, 7, 1, false), (2, 2, 2, true)]);
    e.step().unwrap();
    assert_eq!(e.last_step(), StepRows::default(), "a step with nothing to run");
}

/// Six requests on a cache that holds about one of them preempt each other, yet each gets the
/// tokens and logits it gets alone on a large cache, and a recomputed row is bitwise the row
/// first computed.
fn preempted_requests_get_the_tokens_and_logits_they_get_alone(b: Backend) {
    let reqs = mixed(6, 10);
    let o = Opts { record: true, num_blocks: 16, ..Opts::default() };
    let (spy, log) = Spy::wrap((b.make)(o.num_blocks));
    let mut e = engine_over(spy, o);
    let done = run(&mut e, reqs.clone());
    assert!(e.stats().num_preemptions >= 1, "16 blocks for 6 requests of up to 15 blocks never preempted");

    let mut first: BTreeMap<(u64, usize), Vec<f32>> = BTreeMap::new();
    let mut sampled_before: BTreeMap<u64, bool> = BTreeMap::new();
    let mut recomputed_after_sampling = 0;
    for call in log.lock().unwrap().iter() {
        for (i, p) in call.plan.seqs.iter().enumerate() {
            if p.start == 0 && sampled_before.get(&p.id) == Some(&true) {
                recomputed_after_sampling += 1;
            }
            *sampled_before.entry(p.id).or_default() |= p.samples;
            for pos in p.start..p.start + p.len {
                let row = call.logits.row(call.plan.rows(i).start + pos - p.start).to_vec();
                let kept = first.entry((p.id, pos)).or_insert_with(|| row.clone());
                assert!(*kept == row, "request {} position {pos}: the recomputed row differs from the first", p.id);
            }
        }
    }
    assert!(recomputed_after_sampling >= 1, "no request was preempted after it had sampled");

    assert_eq!(done.len(), reqs.len());
    for (c, r) in done.iter().zip(reqs) {
        let one = alone(b, o, r);
        assert_eq!((&c.token_ids, &c.finish), (&one.token_ids, &one.finish), "request {}", c.id);
        assert!(c.logits == one.logits, "request {}: logits differ bitwise from its run alone", c.id);
    }
}

/// Aborting a running or a waiting request frees its blocks before the next step, removes it
/// from the completions, and changes nothing for the others.
fn abort_frees_blocks_at_once_and_leaves_the_others_alone(b: Backend) {
    let o = Opts { record: true, max_num_seqs: 2, ..Opts::default() };
    let mut e = engine(b, o);
    let reqs = mixed(4, 8);
    let ids: Vec<u64> = reqs[1..].iter().map(|r| e.add_request(r.clone()).unwrap()).collect();
    e.step().unwrap();
    // Prompts of 12 and 21 tokens, all computed (the second in two chunks) in 3 and 6 blocks;
    // the third waits.
    let s = e.stats();
    assert_eq!((s.num_running, s.num_waiting, s.num_blocks_used), (2, 1, 9));
    e.abort(ids[0]).unwrap();
    assert_eq!((e.stats().num_running, e.stats().num_blocks_used), (1, 6));
    e.abort(ids[2]).unwrap();
    assert_eq!((e.stats().num_waiting, e.stats().num_blocks_used), (0, 6));
    e.scheduler().pool().check_invariants();
    for id in [ids[0], ids[2], 99] {
        assert!(matches!(e.abort(id), Err(Error::UnknownRequest { id: got }) if got == id));
    }
    let done = e.run_to_completion().unwrap();
    assert_eq!(done.iter().map(|c| c.id).collect::<Vec<_>>(), vec![ids[1]]);
    assert_eq!(e.stats().num_blocks_used, 0);
    let one = alone(b, o, reqs[2].clone());
    assert_eq!((&done[0].token_ids, &done[0].logits), (&one.token_ids, &one.logits));
    assert!(matches!(e.abort(ids[1]), Err(Error::UnknownRequest { .. })), "a finished request is gone");
}

/// Logits recording turns on and off between batches (the Python bindings record only for a
/// generate that asks for logprobs), and is refused while a request is unfinished.
#[test]
fn logits_recording_changes_only_while_the_engine_is_idle() {
    let mut e = engine(cpu_f32(), Opts::default());
    assert!(run(&mut e, vec![greedy(vec![1, 2, 3], 3)])[0].logits.is_none());
    e.set_record_logits(true).unwrap();
    let recorded = run(&mut e, vec![greedy(vec![1, 2, 3], 3)]).remove(0);
    assert_eq!(recorded.logits.as_ref().map(|l| l.nrows()), Some(3 + 3 - 1));
    e.add_request(greedy(vec![4, 5], 2)).unwrap();
    let err = e.set_record_logits(false).unwrap_err().to_string();
    assert!(err.contains("1 requests are unfinished"), "{err}");
    assert!(e.run_to_completion().unwrap()[0].logits.is_some(), "the refused change changed nothing");
    e.set_record_logits(false).unwrap();
    assert!(run(&mut e, vec![greedy(vec![1, 2, 3], 3)])[0].logits.is_none());
}

/// A step's schedule, execute and hand-out times are each its own, nonzero, and together within
/// the step's wall time; a step that runs nothing reports zeros.
fn last_step_times_split_a_step_into_its_phases(b: Backend) {
    let mut e = engine(b, Opts::default());
    for r in mixed(3, 4) {
        e.add_request(r).unwrap();
    }
    let mut submitting = Duration::ZERO;
    while e.has_work() {
        let t = std::time::Instant::now();
        e.step().unwrap();
        let wall = t.elapsed();
        let times = e.last_step_times();
        assert!(times.schedule > Duration::ZERO && times.execute > Duration::ZERO && times.hand_out > Duration::ZERO);
        assert!(times.schedule + times.execute + times.hand_out <= wall, "{times:?} within {wall:?}");
        assert!(times.submit <= times.execute, "{times:?}");
        submitting += times.submit;
    }
    // `submit <= execute` holds by how both are added up; this checks that submit is timed at all.
    assert!(submitting > Duration::ZERO, "no step's submit was timed");
    e.step().unwrap();
    assert_eq!(e.last_step_times(), StepTimes::default(), "an idle step runs nothing");
}
