//! Every sampling parameter through the engine on asynct-tiny, each case run on every CPU
//! backend: each token is the oracle's draw (processors rebuilt here from the prompt and the
//! tokens before it) from the logits row it came from; logprobs are the raw row's log-softmax,
//! the prompt's under `echo` included; and with each parameter set a request gets the same bits
//! alone, beside others, twice, with and without recording, and after preemptions.

mod common;

use std::sync::Arc;

use model::byte_tokenizer;
use model::cpu_backend::CpuExecutor;
use model::engine::{
    Completion, Engine, EngineEvent, FinishReason, GenerationRequest, LogitsProcessors, SamplingParams, StopConditions,
};
use model::executor::StepExecutor;
use model::scheduler::SchedulerConfig;
use model::Error;
use oracle::decode::byte_table::ByteTable;
use oracle::decode::guide::{OutputFormat, JSON_WHITESPACE};
use oracle::decode::json_bytes::JsonObject;
use oracle::decode::{draw, token_logprobs, ProcessorState};
use oracle::model::forward::Model;
use oracle::model::precision::Rounding;
use oracle::Scalar;

const BLOCK: usize = 4;
const MAX_MODEL_LEN: usize = 2048;
const EOS: u32 = byte_tokenizer::EOS_ID;

fn model<T: Scalar>() -> Model<T> {
    let (cfg, weights) = common::tiny(11);
    Model::new(cfg.dims(), weights.cast::<T>(), Rounding::Exact).unwrap()
}

type Make = fn(usize) -> Box<dyn StepExecutor>;

fn cpu_f32(blocks: usize) -> Box<dyn StepExecutor> {
    Box::new(CpuExecutor::new(model::<f32>(), blocks, BLOCK, "cpu f32"))
}

fn cpu_f64(blocks: usize) -> Box<dyn StepExecutor> {
    Box::new(CpuExecutor::new(model::<f64>(), blocks, BLOCK, "cpu f64"))
}

macro_rules! backend_tests {
    ($($case:ident),* $(,)?) => {
        mod cpu_f32 { $( #[test] fn $case() { super::$case(super::cpu_f32) } )* }
        mod cpu_f64 { $( #[test] fn $case() { super::$case(super::cpu_f64) } )* }
    };
}

backend_tests!(
    each_token_is_the_oracles_draw_from_its_row_with_each_parameter,
    logprobs_are_the_raw_rows_log_softmax_for_output_and_prompt,
    each_parameter_set_gives_the_same_bits_alone_batched_recorded_and_preempted,
    min_tokens_holds_off_eos_and_stop_token_ids_end_requests,
    bad_parameters_are_refused_naming_the_parameter,
    guided_outputs_take_their_format,
);

fn engine(make: Make, blocks: usize, max_num_seqs: usize, record: bool) -> Engine {
    let tok = Arc::new(byte_tokenizer::build().unwrap());
    let sched = SchedulerConfig {
        max_num_seqs,
        max_batched_tokens: 64,
        prefill_chunk: 8,
        max_model_len: MAX_MODEL_LEN,
        prefix_caching: false,
    };
    Engine::new(make(blocks), tok, sched, record).unwrap()
}

fn prompt(i: usize) -> Vec<u32> {
    (0..(5 + 7 * i)).map(|t| ((t * 37 + i * 11) % 250) as u32 + 3).collect()
}

/// A request over `prompt(i)` with `max_tokens` 10, eos live.
fn base(i: usize, sampling: SamplingParams) -> GenerationRequest {
    GenerationRequest {
        prompt: prompt(i),
        sampling,
        stop: StopConditions {
            eos_token_ids: vec![EOS],
            max_tokens: 10,
            max_model_len: MAX_MODEL_LEN,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The guided cases' choices: words of the tiny tokenizer, one a prefix of another.
fn choices() -> OutputFormat {
    OutputFormat::Choice(vec!["the river".into(), "the".into(), "a moon".into()])
}

/// The tiny tokenizer's byte table, as the engine builds it for a guided request.
fn byte_table() -> Option<Arc<ByteTable>> {
    ByteTable::shared(&Arc::new(byte_tokenizer::build().unwrap()))
}

/// One request per parameter (and a few together), seeded temperature sampling unless greedy.
fn parameter_sets() -> Vec<(&'static str, GenerationRequest)> {
    let hot = |i| SamplingParams { top_k: 40, ..SamplingParams::with_temperature(1.1, 7 + i as u64) };
    let with = |i, p: LogitsProcessors| GenerationRequest { processors: p, ..base(i, hot(i)) };
    let none = LogitsProcessors::none;
    let popular: Vec<(u32, f32)> = prompt(0).iter().take(3).map(|&t| (t, 8.0)).collect();
    vec![
        ("plain", base(0, hot(0))),
        ("greedy", base(1, SamplingParams::greedy())),
        ("logit_bias", with(2, LogitsProcessors { logit_bias: popular.clone(), ..none() })),
        ("min_tokens", with(3, LogitsProcessors { min_tokens: 6, logit_bias: vec![(EOS, 6.0)], ..none() })),
        ("repetition_penalty", with(4, LogitsProcessors { repetition_penalty: 1.8, ..none() })),
        ("frequency_penalty", with(5, LogitsProcessors { frequency_penalty: 1.5, ..none() })),
        ("presence_penalty", with(6, LogitsProcessors { presence_penalty: -1.2, ..none() })),
        ("min_p", base(7, SamplingParams { min_p: 0.3, ..hot(7) })),
        ("top_p", base(8, SamplingParams { top_p: 0.7, ..hot(8) })),
        (
            "greedy with every processor",
            GenerationRequest {
                processors: LogitsProcessors {
                    logit_bias: popular,
                    min_tokens: 3,
                    repetition_penalty: 1.3,
                    frequency_penalty: 0.4,
                    presence_penalty: 0.6,
                    guide: None,
                },
                ..base(9, SamplingParams::greedy())
            },
        ),
        ("guided_choice", with(13, LogitsProcessors { guide: Some(choices()), ..none() })),
        ("json_object", with(14, LogitsProcessors { guide: Some(OutputFormat::JsonObject), ..none() })),
        (
            "guided_regex",
            with(15, LogitsProcessors { guide: Some(OutputFormat::Regex("[a-z ]{2,8}\\.".into())), ..none() }),
        ),
        (
            "stop_token_ids and include_stop_str_in_output",
            GenerationRequest {
                stop: StopConditions {
                    stop_token_ids: vec![prompt(10)[0], prompt(10)[1]],
                    include_stop_str_in_output: true,
                    ..base(10, hot(10)).stop
                },
                processors: LogitsProcessors { logit_bias: vec![(prompt(10)[1], 3.0)], ..none() },
                ..base(10, hot(10))
            },
        ),
        ("logprobs", GenerationRequest { logprobs: Some(3), ..base(11, hot(11)) }),
        ("echo", GenerationRequest { logprobs: Some(2), prompt_logprobs: Some(2), ..base(12, hot(12)) }),
    ]
}

fn run(e: &mut Engine, reqs: Vec<GenerationRequest>) -> Vec<Completion> {
    for r in reqs {
        e.add_request(r).unwrap();
    }
    let done = e.run_to_completion().unwrap();
    e.scheduler().pool().check_invariants();
    done
}

fn each_token_is_the_oracles_draw_from_its_row_with_each_parameter(make: Make) {
    let sets = parameter_sets();
    let done = run(&mut engine(make, 512, 16, true), sets.iter().map(|(_, r)| r.clone()).collect());
    for ((name, r), c) in sets.iter().zip(&done) {
        let logits = c.logits.as_ref().unwrap();
        let ends = r.stop.eos_token_ids.iter().chain(&r.stop.stop_token_ids).copied().collect();
        let mut state = ProcessorState::new(r.processors.clone(), ends, &r.prompt, byte_table()).unwrap();
        for (g, &token) in c.token_ids.iter().enumerate() {
            let row = logits.row(r.prompt.len() - 1 + g);
            let want = draw(row.as_slice().unwrap(), &r.sampling, g as u64, Some(&state)).unwrap();
            assert_eq!(token, want, "{name}: token {g}");
            state.push(token);
        }
    }
}

fn logprobs_are_the_raw_rows_log_softmax_for_output_and_prompt(make: Make) {
    let sets = parameter_sets();
    let (_, echo) = sets.iter().find(|(n, _)| *n == "echo").unwrap().clone();
    let c = run(&mut engine(make, 512, 4, true), vec![echo.clone()]).remove(0);
    let logits = c.logits.as_ref().unwrap();
    let p = echo.prompt.len();
    let out = c.logprobs.as_ref().unwrap();
    assert_eq!(out.len(), c.token_ids.len());
    for (g, (lp, &token)) in out.iter().zip(&c.token_ids).enumerate() {
        assert_eq!(lp, &token_logprobs(logits.row(p - 1 + g).as_slice().unwrap(), token, 2), "token {g}");
    }
    let prompt_lp = c.prompt_logprobs.as_ref().unwrap();
    assert_eq!(prompt_lp.len(), p);
    assert_eq!(prompt_lp[0], None, "the first prompt token has no logprob");
    for (i, (got, &token)) in prompt_lp.iter().zip(&echo.prompt).enumerate().skip(1) {
        let want = token_logprobs(logits.row(i - 1).as_slice().unwrap(), token, 2);
        assert_eq!(got.as_ref(), Some(&want), "prompt token {i}");
    }
    // Without recording, the engine asks for the rows itself and streams the same numbers: the
    // prompt's once, just before the first token.
    let mut e = engine(make, 512, 4, false);
    let id = e.add_request(echo).unwrap();
    let mut events = Vec::new();
    while e.has_work() {
        events.extend(e.step().unwrap());
    }
    let first_token = events.iter().position(|ev| matches!(ev, EngineEvent::Token { .. })).unwrap();
    match &events[first_token - 1] {
        EngineEvent::PromptLogprobs { request, logprobs } => assert_eq!((request, logprobs), (&id, prompt_lp)),
        other => panic!("expected the prompt's logprobs before the first token, got {other:?}"),
    }
    assert_eq!(events.iter().filter(|ev| matches!(ev, EngineEvent::PromptLogprobs { .. })).count(), 1);
    let streamed: Vec<_> = events
        .iter()
        .filter_map(|ev| match ev {
            EngineEvent::Token { logprobs, .. } => logprobs.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(&streamed, out);
}

/// What a request produced that must not depend on its neighbours.
fn bits(c: &Completion) -> (Vec<u32>, String, FinishReason, Vec<u64>) {
    let mut lp: Vec<u64> = c.logprobs.iter().flatten().flat_map(|l| l.top.iter().map(|t| t.1.to_bits())).collect();
    lp.extend(c.prompt_logprobs.iter().flatten().flatten().map(|l| l.logprob.to_bits()));
    (c.token_ids.clone(), c.text.clone(), c.finish.clone(), lp)
}

fn each_parameter_set_gives_the_same_bits_alone_batched_recorded_and_preempted(make: Make) {
    let sets = parameter_sets();
    let all: Vec<GenerationRequest> = sets.iter().map(|(_, r)| r.clone()).collect();
    let batched = run(&mut engine(make, 512, 16, false), all.clone());
    let recorded = run(&mut engine(make, 512, 16, true), all.clone());
    // 40 blocks of 4 tokens for 13 requests (the longest needs 25): preemptions.
    let mut small = engine(make, 40, 16, false);
    let preempted = run(&mut small, all.clone());
    assert!(small.stats().num_preemptions > 0, "the small cache preempted nothing");
    for (i, (name, r)) in sets.iter().enumerate() {
        let alone = bits(&run(&mut engine(make, 512, 1, false), vec![r.clone()])[0]);
        let again = bits(&run(&mut engine(make, 512, 1, false), vec![r.clone()])[0]);
        assert_eq!(again, alone, "{name}: twice");
        assert_eq!(bits(&batched[i]), alone, "{name}: beside {} others", sets.len() - 1);
        assert_eq!(bits(&recorded[i]), alone, "{name}: recording logits");
        assert_eq!(bits(&preempted[i]), alone, "{name}: under preemption");
    }
}

fn guided_outputs_take_their_format(make: Make) {
    let OutputFormat::Choice(words) = choices() else { unreachable!() };
    let guided = |i: usize, guide: OutputFormat, max_tokens: usize| {
        let hot = SamplingParams::with_temperature(1.0, 100 + i as u64);
        let mut r = GenerationRequest {
            processors: LogitsProcessors { guide: Some(guide), ..LogitsProcessors::none() },
            ..base(i, hot)
        };
        r.stop.max_tokens = max_tokens;
        r
    };
    let mut reqs: Vec<GenerationRequest> = (0..8).map(|i| guided(i, choices(), 16)).collect();
    reqs.extend((0..8).map(|i| guided(i, OutputFormat::JsonObject, 48)));
    let done = run(&mut engine(make, 512, 16, false), reqs);
    let mut picked = std::collections::BTreeSet::new();
    for c in &done[..8] {
        // Each a whole choice, ended by eos as soon as no longer choice goes on from it.
        assert!(words.contains(&c.text) && c.finish == FinishReason::Eos, "{:?} {:?}", c.text, c.finish);
        picked.insert(c.text.clone());
    }
    assert!(picked.len() > 1, "eight seeds drew one choice: {picked:?}");
    for c in &done[8..] {
        // Each the start of an object, and a whole one when the model ended it.
        let mut j = JsonObject::new(JSON_WHITESPACE);
        assert!(j.feed(c.text.as_bytes()), "{:?}", c.text);
        if c.finish == FinishReason::Eos {
            assert!(j.complete(), "{:?}", c.text);
            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&c.text).unwrap();
        }
    }
    assert!(done[8..].iter().any(|c| c.finish == FinishReason::Eos), "no object was finished");
    // Refused: a guide beside min_tokens, and an empty choice list.
    let mut e = engine(make, 512, 4, false);
    let mut both = guided(0, choices(), 16);
    both.processors.min_tokens = 2;
    let empty = guided(1, OutputFormat::Choice(vec![]), 16);
    for bad in [both, empty] {
        match e.add_request(bad) {
            Err(Error::Oracle(oracle::Error::Invalid { name: "guided_choice", .. })) => {}
            other => panic!("expected a refusal naming guided_choice, got {other:?}"),
        }
    }
}

fn min_tokens_holds_off_eos_and_stop_token_ids_end_requests(make: Make) {
    // A +100 bias makes eos the greedy choice as soon as the mask lifts.
    let eager_eos = |min_tokens| GenerationRequest {
        processors: LogitsProcessors { logit_bias: vec![(EOS, 100.0)], min_tokens, ..LogitsProcessors::none() },
        ..base(0, SamplingParams::greedy())
    };
    let done = run(&mut engine(make, 512, 4, false), vec![eager_eos(0), eager_eos(5)]);
    assert_eq!((done[0].token_ids.clone(), done[0].finish.clone()), (vec![EOS], FinishReason::Eos));
    assert_eq!(done[1].token_ids.len(), 6);
    assert!(!done[1].token_ids[..5].contains(&EOS));
    assert_eq!(done[1].finish, FinishReason::Eos);
    // A stop token ends the request (under ignore_eos too); its text shows only when included.
    let x = u32::from(b'x'); // byte b is id b
    let stopper = |include| GenerationRequest {
        processors: LogitsProcessors { logit_bias: vec![(x, 100.0)], min_tokens: 2, ..LogitsProcessors::none() },
        stop: StopConditions {
            stop_token_ids: vec![x],
            include_stop_str_in_output: include,
            ignore_eos: true,
            ..base(0, SamplingParams::greedy()).stop
        },
        ..base(0, SamplingParams::greedy())
    };
    let done = run(&mut engine(make, 512, 4, false), vec![stopper(false), stopper(true)]);
    for (c, include) in done.iter().zip([false, true]) {
        assert_eq!(c.token_ids.len(), 3, "masked for two tokens, then drawn: {:?}", c.token_ids);
        assert_eq!(c.finish, FinishReason::StopToken(x));
        assert_eq!(c.text.ends_with('x'), include, "{:?}", c.text);
    }
}

fn bad_parameters_are_refused_naming_the_parameter(make: Make) {
    let mut e = engine(make, 512, 4, false);
    let none = LogitsProcessors::none;
    let vocab = e.executor_mut().vocab_size() as u32;
    let cases: Vec<(GenerationRequest, &str)> = vec![
        (
            GenerationRequest {
                processors: LogitsProcessors { logit_bias: vec![(vocab, 1.0)], ..none() },
                ..base(0, SamplingParams::greedy())
            },
            "logit_bias",
        ),
        (
            GenerationRequest {
                processors: LogitsProcessors { repetition_penalty: -1.0, ..none() },
                ..base(0, SamplingParams::greedy())
            },
            "repetition_penalty",
        ),
        (
            GenerationRequest {
                processors: LogitsProcessors { min_tokens: 11, ..none() },
                ..base(0, SamplingParams::greedy())
            },
            "min_tokens",
        ),
        (
            GenerationRequest {
                sampling: SamplingParams { min_p: 2.0, ..SamplingParams::greedy() },
                ..base(0, SamplingParams::greedy())
            },
            "min_p",
        ),
        (
            GenerationRequest {
                stop: StopConditions { stop_token_ids: vec![vocab + 3], ..base(0, SamplingParams::greedy()).stop },
                ..base(0, SamplingParams::greedy())
            },
            "stop_token_ids",
        ),
    ];
    for (r, param) in cases {
        let err = e.add_request(r).unwrap_err();
        let named = match &err {
            Error::Invalid { param, .. } => *param,
            Error::Oracle(oracle::Error::Invalid { name, .. }) => name,
            other => panic!("{param}: {other}"),
        };
        assert_eq!(named, param, "{err}");
    }
    assert_eq!(run(&mut e, vec![base(0, SamplingParams::greedy())]).len(), 1, "the engine still serves");
}
