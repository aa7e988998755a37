//! The engine over the CPU backend on asynct-tiny: batch invariance, seed reproducibility,
//! recorded logits against a plain prefill, and the stop rules end to end.

use std::sync::Arc;

use model::byte_tokenizer;
use model::cpu_backend::CpuExecutor;
use model::engine::{Completion, Engine, EngineEvent, GenerationRequest};
use model::presets::Preset;
use model::scheduler::SchedulerConfig;
use ndarray::Array2;
use oracle::decode::sampler::SamplingParams;
use oracle::decode::stop::{FinishReason, StopConditions};
use oracle::hp1::AttnMetadata;
use oracle::model::forward::{LogitRows, Model, StepInput};
use oracle::model::init::random_weights;
use oracle::model::kv_cache::KvCache;
use oracle::model::precision::Rounding;
use oracle::Scalar;

const BLOCK: usize = 4;

fn model<T: Scalar>() -> Model<T> {
    let dims = Preset::Tiny.config().dims();
    let w = random_weights(&dims, 11).cast::<T>();
    Model::new(dims, w, Rounding::Exact).unwrap()
}

fn engine_with(record_logits: bool, prefill_chunk: usize, f64_mode: bool) -> Engine {
    let exec: Box<dyn model::executor::StepExecutor> = if f64_mode {
        Box::new(CpuExecutor::new(model::<f64>(), 256, BLOCK, "cpu f64"))
    } else {
        Box::new(CpuExecutor::new(model::<f32>(), 256, BLOCK, "cpu f32"))
    };
    let tok = Arc::new(byte_tokenizer::build().unwrap());
    let sched = SchedulerConfig {
        block_size: BLOCK,
        num_blocks: 256,
        max_num_seqs: 8,
        max_batched_tokens: 64,
        prefill_chunk,
        max_model_len: 2048,
    };
    Engine::new(exec, tok, sched, record_logits).unwrap()
}

fn request(prompt: Vec<u32>, seed: u64, max_tokens: usize) -> GenerationRequest {
    GenerationRequest {
        prompt,
        sampling: SamplingParams { temperature: 1.3, top_k: 50, top_p: 0.95, seed },
        stop: StopConditions {
            eos_token_ids: vec![byte_tokenizer::EOS_ID],
            stop: vec![],
            max_tokens,
            max_model_len: 2048,
            ignore_eos: true,
        },
    }
}

fn prompts() -> Vec<Vec<u32>> {
    (0..5).map(|i| (0..(3 + 9 * i)).map(|t| ((t * 37 + i * 11) % 500) as u32).collect()).collect()
}

fn run(engine: &mut Engine, reqs: Vec<GenerationRequest>) -> Vec<Completion> {
    for r in reqs {
        engine.add_request(r).unwrap();
    }
    engine.run_to_completion().unwrap()
}

#[test]
fn a_request_in_a_batch_gets_the_bits_it_gets_alone() {
    let reqs: Vec<_> = prompts().into_iter().enumerate().map(|(i, p)| request(p, 100 + i as u64, 12)).collect();
    let batched = run(&mut engine_with(true, 16, false), reqs.clone());
    for (r, b) in reqs.into_iter().zip(&batched) {
        let alone = run(&mut engine_with(true, 16, false), vec![r]);
        assert_eq!(alone[0].token_ids, b.token_ids);
        assert_eq!(alone[0].logits, b.logits, "logits differ bitwise for prompt of {} tokens", b.prompt_tokens);
    }
}

#[test]
fn the_same_seed_gives_the_same_tokens_and_other_seeds_differ() {
    let p = prompts()[2].clone();
    let a = run(&mut engine_with(false, 16, false), vec![request(p.clone(), 5, 24)]);
    let b = run(&mut engine_with(false, 16, false), vec![request(p.clone(), 5, 24)]);
    assert_eq!(a[0].token_ids, b[0].token_ids);
    let others: Vec<_> = (6..10).map(|s| run(&mut engine_with(false, 16, false), vec![request(p.clone(), s, 24)])).collect();
    assert!(others.iter().any(|o| o[0].token_ids != a[0].token_ids), "four other seeds all drew the same 24 tokens");
}

/// Recorded logits (chunked prefill, then decode steps) equal one plain prefill of the prompt and
/// all generated tokens but the last, to f64 rounding.
#[test]
fn recorded_logits_equal_one_prefill_of_the_whole_sequence() {
    let p = prompts()[4].clone();
    let done = run(&mut engine_with(true, 7, true), vec![request(p.clone(), 9, 10)]);
    let c = &done[0];
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
    let reference = m.forward(&step, &mut cache).unwrap().mapv(|x| x as f32);
    let err = (&reference - logits).mapv(|x| (x as f64).powi(2)).sum().sqrt() / reference.mapv(|x| (x as f64).powi(2)).sum().sqrt();
    assert!(err < 1e-6, "relative L2 {err:e}");
}

#[test]
fn eos_max_tokens_and_stop_strings_end_requests() {
    let tok = byte_tokenizer::build().unwrap();
    let mut e = engine_with(false, 16, false);
    let greedy = |max_tokens| GenerationRequest {
        prompt: tok.encode("abc", false).unwrap().get_ids().to_vec(),
        sampling: SamplingParams::greedy(),
        stop: StopConditions { eos_token_ids: vec![], stop: vec![], max_tokens, max_model_len: 2048, ignore_eos: false },
    };
    let free = run(&mut e, vec![greedy(6)]);
    assert_eq!(free[0].finish, FinishReason::MaxTokens);
    assert_eq!(free[0].token_ids.len(), 6);

    let third = free[0].token_ids[2];
    let mut as_eos = greedy(6);
    as_eos.stop.eos_token_ids = vec![third];
    let ended = run(&mut e, vec![as_eos]);
    assert_eq!(ended[0].finish, FinishReason::Eos);
    assert_eq!(ended[0].token_ids, free[0].token_ids[..=free[0].token_ids.iter().position(|&t| t == third).unwrap()]);

    let text = &free[0].text;
    let stop: String = text.chars().skip(1).take(2).collect();
    let mut with_stop = greedy(6);
    with_stop.stop.stop = vec![stop.clone()];
    let stopped = run(&mut e, vec![with_stop]);
    assert_eq!(stopped[0].finish, FinishReason::StopString(stop.clone()));
    assert!(!stopped[0].text.contains(&stop) && text.starts_with(&stopped[0].text));
}

#[test]
fn events_stream_every_token_and_one_finish() {
    let mut e = engine_with(false, 16, false);
    let id = e.add_request(request(prompts()[1].clone(), 1, 5)).unwrap();
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
}

#[test]
fn bad_requests_are_refused_and_leave_the_engine_usable() {
    let mut e = engine_with(false, 16, false);
    assert!(e.add_request(request(vec![], 0, 4)).is_err());
    assert!(e.add_request(request(vec![1, 600], 0, 4)).unwrap_err().to_string().contains("600"));
    let mut hot = request(vec![1, 2], 0, 4);
    hot.sampling.top_p = 0.0;
    assert!(e.add_request(hot).unwrap_err().to_string().contains("top_p"));
    let ok = run(&mut e, vec![request(vec![1, 2, 3], 0, 4)]);
    assert_eq!(ok[0].token_ids.len(), 4);
}
