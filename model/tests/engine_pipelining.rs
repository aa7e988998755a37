//! The engine planning each step ahead of the draws in flight, over an executor that queues
//! steps as a device does (`queued`): the tokens, text and finish of every request are those of
//! steps planned one at a time, through stop strings learnt a step late, preemptions, admissions
//! mid-run and aborts while a step is in flight; a request with logprobs is planned ahead too; a
//! request drawn on the host turns planning ahead off while it lives, and one scoring its prompt
//! until its prompt is scored.

mod common;
mod queued;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use model::byte_tokenizer;
use model::cpu_backend::CpuExecutor;
use model::engine::{
    Completion, Engine, EngineEvent, FinishReason, GenerationRequest, LogitsProcessors, SamplingParams, StopConditions,
};
use model::scheduler::SchedulerConfig;
use oracle::model::forward::Model;
use oracle::model::precision::Rounding;
use queued::{QueueLog, Queued};

const BLOCK: usize = 4;
const MAX_MODEL_LEN: usize = 256;

/// An engine over the tiny model on a queueing executor of `num_blocks` blocks.
fn engine(num_blocks: usize, pipelining: bool) -> (Engine, Arc<QueueLog>) {
    engine_over(num_blocks, pipelining, None, 4)
}

/// [`engine`] with collect `fail_at` failing and `max_num_seqs` sequences at most.
fn engine_over(
    num_blocks: usize,
    pipelining: bool,
    fail_at: Option<usize>,
    max_num_seqs: usize,
) -> (Engine, Arc<QueueLog>) {
    let (cfg, weights) = common::tiny(11);
    let model = Model::new(cfg.dims(), weights, Rounding::Exact).unwrap();
    let cpu = Box::new(CpuExecutor::new(model, num_blocks, BLOCK, "cpu f32"));
    let (exec, log) = match fail_at {
        Some(n) => Queued::failing_at(cpu, n),
        None => Queued::wrap(cpu),
    };
    let sched = SchedulerConfig {
        max_num_seqs,
        max_batched_tokens: 32,
        prefill_chunk: 8,
        max_model_len: MAX_MODEL_LEN,
        prefix_caching: true,
    };
    let tok = Arc::new(byte_tokenizer::build().unwrap());
    let mut e = Engine::new(Box::new(exec), tok, sched, false).unwrap();
    e.set_pipelining(pipelining);
    (e, log)
}

/// Request `i`: greedy or seeded at temperature, of its own length, with a stop string on some
/// (cut from the text it generates unstopped, so that it is found mid-run).
fn request(i: usize, stop: Option<String>) -> GenerationRequest {
    let prompt = (0..3 + 5 * i).map(|t| ((t * 37 + i * 11) % 200) as u32 + 1).collect();
    let sampling = match i % 2 {
        0 => SamplingParams::greedy(),
        _ => SamplingParams { top_k: 200, ..SamplingParams::with_temperature(4.0, i as u64) },
    };
    let stop = StopConditions {
        eos_token_ids: vec![byte_tokenizer::EOS_ID],
        stop: stop.into_iter().collect(),
        max_tokens: 6 + 3 * (i % 4),
        max_model_len: MAX_MODEL_LEN,
        ignore_eos: true,
        ..Default::default()
    };
    GenerationRequest { prompt, sampling, stop, ..Default::default() }
}

/// A run's completions and each request's events in order.
type Run = (Vec<Completion>, BTreeMap<u64, Vec<EngineEvent>>);

/// Runs `reqs` to the end; returns the completions and each request's events in order.
fn run(e: &mut Engine, reqs: &[GenerationRequest]) -> Run {
    for r in reqs {
        e.add_request(r.clone()).unwrap();
    }
    let mut events: BTreeMap<u64, Vec<EngineEvent>> = BTreeMap::new();
    while e.has_work() {
        for ev in e.step().unwrap() {
            let id = match &ev {
                EngineEvent::Token { request, .. } | EngineEvent::Finished { request, .. } => *request,
                EngineEvent::PromptLogprobs { request, .. } => *request,
            };
            events.entry(id).or_default().push(ev);
        }
    }
    assert_eq!(e.stats().num_blocks_used, 0, "every block came back");
    e.scheduler().check_invariants();
    (e.take_finished(), events)
}

/// `reqs` run planned one step at a time, then ahead: both runs' completions and events, and
/// the run ahead's queue log, once their tokens, text and finishes are checked equal.
fn stepwise_and_ahead(reqs: &[GenerationRequest]) -> (Run, Run, Arc<QueueLog>) {
    let (mut stepwise, _) = engine(512, false);
    let want = run(&mut stepwise, reqs);
    let (mut e, log) = engine(512, true);
    let got = run(&mut e, reqs);
    assert_eq!(outcome(&got.0), outcome(&want.0));
    (want, got, log)
}

/// Eight requests, the odd ones ending at a stop string cut from their unstopped text.
fn workload() -> Vec<GenerationRequest> {
    let (mut e, _) = engine(512, false);
    let free: Vec<GenerationRequest> = (0..8).map(|i| request(i, None)).collect();
    let (done, _) = run(&mut e, &free);
    (0..8)
        .map(|i| {
            let text: String = done[i].text.chars().collect();
            let cut = (i % 2 == 1 && text.chars().count() > 4).then(|| text.chars().skip(2).take(2).collect());
            request(i, cut)
        })
        .collect()
}

fn outcome(done: &[Completion]) -> Vec<(u64, Vec<u32>, String, String)> {
    done.iter().map(|c| (c.id, c.token_ids.clone(), c.text.clone(), format!("{:?}", c.finish))).collect()
}

#[test]
fn planned_ahead_steps_give_every_request_the_bits_of_steps_planned_one_at_a_time() {
    let reqs = workload();
    assert!(reqs.iter().any(|r| !r.stop.stop.is_empty()), "no request stops at a string");
    // 24 blocks of 4 for up to four sequences of up to 47 tokens: they preempt each other.
    for num_blocks in [512, 24] {
        let (mut stepwise, stepwise_log) = engine(num_blocks, false);
        let (want, want_events) = run(&mut stepwise, &reqs);
        assert_eq!(stepwise_log.pending_rows.load(Ordering::Relaxed), 0);
        let (mut ahead, log) = engine(num_blocks, true);
        let (got, got_events) = run(&mut ahead, &reqs);
        let late = got.iter().filter(|c| matches!(c.finish, FinishReason::StopString(_)) && c.token_ids.len() > 1);
        assert!(late.count() >= 2, "fewer than two requests stopped at a string mid-run");
        assert_eq!(outcome(&got), outcome(&want), "{num_blocks} blocks");
        assert_eq!(got_events, want_events, "{num_blocks} blocks: the events, request by request");
        assert_eq!(log.deepest.load(Ordering::Relaxed), 2, "a step was planned while another ran");
        assert!(log.pending_rows.load(Ordering::Relaxed) > 20, "few rows read a token on the device");
        if num_blocks == 24 {
            assert!(ahead.stats().num_preemptions >= 1, "24 blocks never preempted");
        }
    }
}

#[test]
fn an_abort_while_its_step_is_in_flight_drops_its_token_and_frees_its_blocks() {
    let reqs: Vec<GenerationRequest> = (0..3).map(|i| request(i, None)).collect();
    let (mut alone, _) = engine(512, false);
    let (want, _) = run(&mut alone, &reqs[..2]);
    let (mut e, _) = engine(512, true);
    let ids: Vec<u64> = reqs.iter().map(|r| e.add_request(r.clone()).unwrap()).collect();
    let mut aborted_events = 0;
    for _ in 0..4 {
        e.step().unwrap();
    }
    e.abort(ids[2]).unwrap();
    while e.has_work() {
        for ev in e.step().unwrap() {
            aborted_events += usize::from(matches!(ev, EngineEvent::Token { request, .. } if request == ids[2]));
        }
    }
    assert_eq!(aborted_events, 0, "a token of the aborted request was handed out");
    assert_eq!(outcome(&e.take_finished()), outcome(&want));
    assert_eq!(e.stats().num_blocks_used, 0);
    e.scheduler().check_invariants();
}

#[test]
fn a_request_that_wants_logprobs_is_planned_ahead_and_gets_the_logprobs_of_steps_one_at_a_time() {
    let mut reqs: Vec<GenerationRequest> = (0..3).map(|i| request(i, None)).collect();
    reqs[1].logprobs = Some(2);
    let ((want, want_events), (got, events), log) = stepwise_and_ahead(&reqs);
    assert_eq!(got[1].logprobs, want[1].logprobs);
    assert_eq!(got[1].logprobs.as_ref().map(Vec::len), Some(got[1].token_ids.len()));
    assert_eq!(events, want_events, "the streamed logprobs too");
    // 6, 9 and 12 tokens: every decode row after the first three steps reads a pending token.
    let pending = log.pending_rows.load(Ordering::Relaxed);
    assert!(pending >= 15, "only {pending} rows read a pending token");
}

#[test]
fn a_request_drawn_on_the_host_turns_planning_ahead_off_while_it_lives() {
    let mut reqs: Vec<GenerationRequest> = (0..3).map(|i| request(i, None)).collect();
    reqs[1].processors = LogitsProcessors { repetition_penalty: 1.5, ..LogitsProcessors::none() };
    let (_, _, log) = stepwise_and_ahead(&reqs);
    // Request 1 generates 9 tokens and the others 6 and 12: only request 2's last 3 run ahead.
    let pending = log.pending_rows.load(Ordering::Relaxed);
    assert!((1..=3).contains(&pending), "{pending} rows read a pending token");
}

/// Planning ahead stops while a prompt's logprobs are being recorded (the step reads its rows
/// on the host) and resumes once they are: here the three prompts fill the first step, which
/// then runs at once, so only the first decode step's three rows are not planned ahead.
#[test]
fn a_request_scoring_its_prompt_turns_planning_ahead_off_until_its_prompt_is_scored() {
    let plain: Vec<GenerationRequest> = (0..3).map(|i| request(i, None)).collect();
    let mut reqs = plain.clone();
    reqs[1].prompt_logprobs = Some(1);
    let ((want, _), (got, _), log) = stepwise_and_ahead(&reqs);
    assert_eq!(got[1].prompt_logprobs, want[1].prompt_logprobs);
    assert_eq!(got[1].prompt_logprobs.as_ref().map(Vec::len), Some(reqs[1].prompt.len()));
    let (mut ahead, plain_log) = engine(512, true);
    run(&mut ahead, &plain);
    let (pending, plain_pending) =
        (log.pending_rows.load(Ordering::Relaxed), plain_log.pending_rows.load(Ordering::Relaxed));
    assert_eq!(pending + 3, plain_pending, "planning ahead resumes after the prompt's step");
}

#[test]
fn settle_hands_out_the_step_in_flight_and_leaves_nothing_queued() {
    let reqs: Vec<GenerationRequest> = (0..3).map(|i| request(i, None)).collect();
    let (mut stepwise, _) = engine(512, false);
    let (want, _) = run(&mut stepwise, &reqs);
    let (mut e, log) = engine(512, true);
    for r in &reqs {
        e.add_request(r.clone()).unwrap();
    }
    for _ in 0..5 {
        e.step().unwrap();
    }
    assert_eq!(log.deepest.load(Ordering::Relaxed), 2, "nothing was planned ahead");
    let tokens = e.settle().unwrap().iter().filter(|ev| matches!(ev, EngineEvent::Token { .. })).count();
    assert_eq!(tokens, 3, "the step in flight drew for the three requests");
    assert!(e.executor_mut().collect().is_err(), "a step is still queued");
    assert!(e.settle().unwrap().is_empty());
    let (done, _) = run(&mut e, &[]);
    assert_eq!(outcome(&done), outcome(&want));
}

#[test]
fn a_failed_step_ends_the_requests_drawing_in_flight_and_the_rest_run_on() {
    let reqs: Vec<GenerationRequest> = (0..4).map(|i| request(i, None)).collect();
    let (mut stepwise, _) = engine_over(512, false, None, 2);
    let (want, _) = run(&mut stepwise, &reqs);
    let (mut e, log) = engine_over(512, true, Some(4), 2);
    let ids: Vec<u64> = reqs.iter().map(|r| e.add_request(r.clone()).unwrap()).collect();
    let mut failures = 0;
    while e.has_work() {
        if let Err(err) = e.step() {
            assert!(err.to_string().contains("injected"), "{err}");
            failures += 1;
            // The two running requests were drawing in the steps in flight; the two waiting run on.
            assert_eq!((e.stats().num_running, e.stats().num_waiting), (0, 2));
            assert!(e.executor_mut().collect().is_err(), "a step was left queued");
            e.scheduler().check_invariants();
        }
    }
    assert_eq!((failures, e.stats().num_blocks_used), (1, 0));
    assert!(log.collected.load(Ordering::Relaxed) > 5);
    let done = e.take_finished();
    assert_eq!(done.iter().map(|c| c.id).collect::<Vec<_>>(), &ids[2..]);
    assert_eq!(outcome(&done), outcome(&want[2..]));
}
