//! Prefix caching on asynct-tiny, in the CPU backend's f32 and bf16-faithful modes: a request gets
//! the same tokens and the same logits bits with a cache hit as alone with no cache, for prefixes
//! shared over less than a block, a block, a chunk and more, under preemption, with the pool
//! nearly full (cached blocks evicted), where equal blocks follow different prefixes, and where a
//! reused chunk is made of two earlier requests' blocks; a request that skips the cache, and an
//! engine that records logits, look nothing up.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use model::block_pool::KvCapacity;
use model::byte_tokenizer;
use model::cpu_backend::CpuExecutor;
use model::engine::{Completion, Engine, GenerationRequest, SamplingParams, StopConditions};
use model::executor::{LogitsWanted, SamplingRow, StepExecutor, StepOutput};
use model::scheduler::{SchedulerConfig, StepPlan};
use oracle::model::forward::Model;
use oracle::model::precision::Rounding;
use oracle::Scalar;

const BLOCK: usize = 4;
const CHUNK: usize = 8;
const MAX_MODEL_LEN: usize = 2048;

fn model<T: Scalar>(rounding: Rounding) -> Model<T> {
    let (cfg, weights) = common::tiny(11);
    Model::new(cfg.dims(), weights.cast::<T>(), rounding).unwrap()
}

/// A CPU mode: its executor over a cache of `num_blocks` blocks of [`BLOCK`] tokens.
type Backend = fn(num_blocks: usize) -> Box<dyn StepExecutor>;

fn cpu_f32(n: usize) -> Box<dyn StepExecutor> {
    Box::new(CpuExecutor::new(model::<f32>(Rounding::Exact), n, BLOCK, "cpu f32"))
}

fn cpu_bf16(n: usize) -> Box<dyn StepExecutor> {
    Box::new(CpuExecutor::new(model::<f64>(Rounding::Bf16), n, BLOCK, "cpu bf16"))
}

macro_rules! backend_tests {
    ($($case:ident),* $(,)?) => {
        mod cpu_f32 { $( #[test] fn $case() { super::$case(super::cpu_f32) } )* }
        mod cpu_bf16 { $( #[test] fn $case() { super::$case(super::cpu_bf16) } )* }
    };
}

backend_tests!(
    prefixes_of_every_length_hit_whole_chunks_and_change_no_bit,
    preempted_requests_with_hits_keep_their_bits,
    a_nearly_full_pool_evicts_and_changes_no_bit,
    equal_blocks_after_different_prefixes_are_not_reused,
    a_chunk_made_of_two_donors_blocks_changes_no_bit,
    skipping_requests_and_recording_engines_look_nothing_up,
);

/// Every logits row an engine computed, by (request, position), as first computed.
type Rows = Arc<Mutex<BTreeMap<(u64, usize), Vec<u32>>>>;

/// An executor that keeps the bits of every row's logits and hands the engine what it asked for.
struct Spy {
    inner: Box<dyn StepExecutor>,
    rows: Rows,
}

impl StepExecutor for Spy {
    fn execute(&mut self, plan: &StepPlan, rows: &[SamplingRow], wanted: &LogitsWanted) -> model::Result<StepOutput> {
        let every_row = LogitsWanted::QueryRows((0..plan.token_ids.len()).collect());
        let out = self.inner.execute(plan, rows, &every_row)?;
        let logits = out.logits.expect("asked for every row");
        let mut kept = self.rows.lock().unwrap();
        for (i, p) in plan.seqs.iter().enumerate() {
            for pos in p.start..p.start + p.len {
                let row = logits.row(plan.rows(i).start + pos - p.start);
                kept.entry((p.id, pos)).or_insert_with(|| row.iter().map(|x| x.to_bits()).collect());
            }
        }
        let handed = wanted.plan_rows(plan, rows)?.map(|r| logits.select(ndarray::Axis(0), &r));
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

#[derive(Clone, Copy)]
struct Opts {
    num_blocks: usize,
    max_num_seqs: usize,
    prefix_caching: bool,
    record: bool,
}

const CACHED: Opts = Opts { num_blocks: 512, max_num_seqs: 8, prefix_caching: true, record: false };

fn engine(b: Backend, o: Opts) -> (Engine, Rows) {
    let rows = Rows::default();
    let spy = Box::new(Spy { inner: b(o.num_blocks), rows: rows.clone() });
    let sched = SchedulerConfig {
        max_num_seqs: o.max_num_seqs,
        max_batched_tokens: 2 * CHUNK,
        prefill_chunk: CHUNK,
        max_model_len: MAX_MODEL_LEN,
        prefix_caching: o.prefix_caching,
    };
    (Engine::new(spy, Arc::new(byte_tokenizer::build().unwrap()), sched, o.record).unwrap(), rows)
}

/// A request generating `max_tokens`, greedy for even seeds, sampled at 1.1 for odd ones.
fn request(prompt: Vec<u32>, seed: u64, max_tokens: usize) -> GenerationRequest {
    let sampling = if seed.is_multiple_of(2) {
        SamplingParams::greedy()
    } else {
        SamplingParams { temperature: 1.1, top_k: 0, top_p: 0.9, seed, ..Default::default() }
    };
    GenerationRequest {
        prompt,
        sampling,
        stop: StopConditions {
            eos_token_ids: vec![byte_tokenizer::EOS_ID],
            max_tokens,
            max_model_len: MAX_MODEL_LEN,
            ignore_eos: true,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// `len` tokens of stem `stem`: the same stem gives the same tokens, so prompts cut from it share
/// prefixes.
fn stem(stem: u32, len: usize) -> Vec<u32> {
    (0..len as u32).map(|t| (t * 37 + stem * 101 + 5) % 500).collect()
}

/// `stem(s, shared)` then tokens of its own up to `len`.
fn sharing(s: u32, shared: usize, len: usize, own: u32) -> Vec<u32> {
    let mut p = stem(s, shared);
    p.extend((shared as u32..len as u32).map(|t| (t * 13 + own * 7 + 300) % 500));
    p
}

/// What a request produced: its completion and the bits of each logits row computed for it.
struct Outcome {
    completion: Completion,
    rows: BTreeMap<usize, Vec<u32>>,
    /// Leading positions never computed for it: what its admissions reused.
    skipped: usize,
}

/// Runs `waves` one after another on one engine (each to completion before the next is added).
fn run(b: Backend, o: Opts, waves: Vec<Vec<GenerationRequest>>) -> (Vec<Outcome>, Engine) {
    let (mut e, rows) = engine(b, o);
    let mut out = Vec::new();
    for wave in waves {
        let ids: Vec<u64> = wave.into_iter().map(|r| e.add_request(r).unwrap()).collect();
        let done = e.run_to_completion().unwrap();
        e.scheduler().check_invariants();
        assert_eq!(e.stats().num_blocks_used, 0);
        let rows = rows.lock().unwrap();
        for (c, id) in done.into_iter().zip(ids) {
            assert_eq!(c.id, id);
            let mine: BTreeMap<usize, Vec<u32>> =
                rows.range((id, 0)..(id + 1, 0)).map(|(&(_, pos), bits)| (pos, bits.clone())).collect();
            let skipped = *mine.keys().next().expect("every request computes a position");
            out.push(Outcome { completion: c, rows: mine, skipped });
        }
    }
    (out, e)
}

/// `r` alone on an engine without prefix caching.
fn uncached(b: Backend, r: GenerationRequest) -> Outcome {
    let o = Opts { prefix_caching: false, max_num_seqs: 1, ..CACHED };
    run(b, o, vec![vec![r]]).0.remove(0)
}

/// Each outcome has the tokens of its request alone without a cache, and every logits row it
/// computed has that run's bits; a hit skips its first positions and nothing else.
fn assert_same_bits(b: Backend, outcomes: &[Outcome], reqs: &[GenerationRequest]) {
    assert_eq!(outcomes.len(), reqs.len());
    for (i, (got, r)) in outcomes.iter().zip(reqs).enumerate() {
        let want = uncached(b, r.clone());
        assert_eq!(got.completion.token_ids, want.completion.token_ids, "request {i}: tokens");
        let positions = r.prompt.len() + got.completion.token_ids.len() - 1;
        assert_eq!(want.rows.len(), positions, "request {i}: the uncached run computes every position");
        for (pos, bits) in &got.rows {
            assert!(want.rows[pos] == *bits, "request {i} position {pos}: logits bits differ from the uncached run");
        }
        assert_eq!(got.rows.len(), positions - got.skipped, "request {i}: every position after the hit is computed");
    }
}

fn prefixes_of_every_length_hit_whole_chunks_and_change_no_bit(b: Backend) {
    let first = vec![request(stem(0, 40), 0, 6)];
    // Shared over 3 tokens (less than a block), 4 (a block), 8 (a chunk), 21 (more) and 40 (all).
    let shared = [3, 4, 8, 21, 40];
    let rest: Vec<_> =
        shared.iter().enumerate().map(|(i, &s)| request(sharing(0, s, 40, i as u32), i as u64 + 1, 6)).collect();
    let (out, e) = run(b, CACHED, vec![first.clone(), rest.clone()]);
    let hits: Vec<usize> = out.iter().map(|o| o.skipped).collect();
    // Whole chunks of 8 only, and never the prompt's last token.
    assert_eq!(hits, vec![0, 0, 0, 8, 16, 32]);
    assert_eq!(e.stats().prefix_cache_queries, 6 * 40);
    assert_eq!(e.stats().prefix_cache_hits, 56);
    let reqs: Vec<_> = first.into_iter().chain(rest).collect();
    assert_same_bits(b, &out, &reqs);
}

fn preempted_requests_with_hits_keep_their_bits(b: Backend) {
    // Six requests on 40 tokens of one stem; a 20-block cache holds about two of them.
    let reqs: Vec<_> =
        (0..6u32).map(|i| request(sharing(1, 24 + 3 * i as usize, 30 + i as usize, i), u64::from(i), 10)).collect();
    let o = Opts { num_blocks: 20, ..CACHED };
    let (out, e) = run(b, o, vec![vec![reqs[0].clone()], reqs[1..].to_vec()]);
    assert!(e.stats().num_preemptions >= 1, "20 blocks for five requests of up to 10 blocks never preempted");
    assert!(out[1..].iter().all(|o| o.skipped >= 16), "hits {:?}", out.iter().map(|o| o.skipped).collect::<Vec<_>>());
    assert_same_bits(b, &out, &reqs);
}

fn a_nearly_full_pool_evicts_and_changes_no_bit(b: Backend) {
    // Three stems of 24-token prompts, 4 tokens each: 7 blocks a life, 6 of them cached; 14
    // blocks hold two stems' worth. Each wave is one request, so it finds what the last left.
    let stems = [2, 3, 4, 2, 4, 3, 2];
    let reqs: Vec<_> =
        stems.iter().enumerate().map(|(i, &s)| request(sharing(s, 20, 24, i as u32), i as u64, 4)).collect();
    let o = Opts { num_blocks: 14, max_num_seqs: 1, ..CACHED };
    let (out, e) = run(b, o, reqs.iter().map(|r| vec![r.clone()]).collect());
    let hits: Vec<usize> = out.iter().map(|o| o.skipped).collect();
    // Least recently released first: stem 2 comes back with only its first block left (less
    // than a chunk: no hit), stem 4 right after it was cached, stem 3 after all of it went, and
    // stem 2 again with one chunk of the previous stem-2 request's blocks left.
    assert_eq!(hits, vec![0, 0, 0, 0, 16, 0, 8], "the LRU order of eviction");
    assert!(e.scheduler().pool().num_cached() <= 14);
    assert_same_bits(b, &out, &reqs);
}

fn equal_blocks_after_different_prefixes_are_not_reused(b: Backend) {
    // The same 16 tokens after different first chunks: never reused past the first chunk.
    let tail = stem(5, 16);
    let prompt = |head: u32| stem(6 + head, 8).into_iter().chain(tail.iter().copied()).chain([9]).collect::<Vec<_>>();
    let reqs = vec![request(prompt(0), 0, 4), request(prompt(1), 1, 4), request(prompt(0), 2, 4)];
    let (out, _) = run(b, CACHED, reqs.iter().map(|r| vec![r.clone()]).collect());
    assert_eq!(out.iter().map(|o| o.skipped).collect::<Vec<_>>(), vec![0, 0, 24]);
    assert_same_bits(b, &out, &reqs);
}

fn a_chunk_made_of_two_donors_blocks_changes_no_bit(b: Backend) {
    // The first donor shares 13 tokens, the second 22 (and reuses the first's first chunk). The
    // watched prompt then reuses two chunks, the second of them the first donor's rows 8..12,
    // computed in a chunk whose later rows held other tokens, and the second donor's 12..16.
    let reqs =
        vec![request(sharing(8, 13, 30, 1), 1, 4), request(sharing(8, 22, 30, 2), 2, 4), request(stem(8, 30), 3, 4)];
    let (out, _) = run(b, CACHED, reqs.iter().map(|r| vec![r.clone()]).collect());
    assert_eq!(out.iter().map(|o| o.skipped).collect::<Vec<_>>(), vec![0, 8, 16]);
    assert_same_bits(b, &out, &reqs);
}

fn skipping_requests_and_recording_engines_look_nothing_up(b: Backend) {
    let p = stem(7, 30);
    let skip = GenerationRequest { skip_prefix_cache: true, ..request(p.clone(), 1, 4) };
    let (out, e) =
        run(b, CACHED, vec![vec![request(p.clone(), 0, 4)], vec![skip.clone()], vec![request(p.clone(), 2, 4)]]);
    assert_eq!(out.iter().map(|o| o.skipped).collect::<Vec<_>>(), vec![0, 0, 24]);
    assert_eq!(e.stats().prefix_cache_queries, 60, "the skipping request is no query");
    assert_same_bits(b, &out, &[request(p.clone(), 0, 4), skip, request(p.clone(), 2, 4)]);

    // Recording logits: every row of every request, the uncached run's.
    let (out, e) =
        run(b, Opts { record: true, ..CACHED }, vec![vec![request(p.clone(), 0, 4)], vec![request(p.clone(), 2, 4)]]);
    assert_eq!((e.stats().prefix_cache_queries, e.stats().prefix_cache_hits), (0, 0));
    for (o, seed) in out.iter().zip([0, 2]) {
        let want = uncached(b, request(p.clone(), seed, 4));
        let logits = o.completion.logits.as_ref().expect("recorded");
        assert_eq!(logits.nrows(), 30 + 4 - 1);
        for (pos, bits) in &want.rows {
            assert!(logits.row(*pos).iter().map(|x| x.to_bits()).eq(bits.iter().copied()), "position {pos}");
        }
    }
}
