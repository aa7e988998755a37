//! SPEC section 7's end-to-end scenarios through the engine: every request submitted at once,
//! stepped to completion, each step classified by its shape and timed.

use std::collections::BTreeSet;
use std::time::Instant;

use model::engine::{Engine, EngineEvent, StepRows, StepTimes};
use serde::Serialize;

use super::{millis, profiler, PromptSource, StepCounts, Summary};

/// An end-to-end scenario of SPEC section 7.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Scenario {
    /// Its name in SPEC section 7.
    pub name: String,
    /// Requests, all submitted at once.
    pub requests: usize,
    /// Prompt tokens of each.
    pub prompt_len: usize,
    /// Tokens each generates.
    pub output_len: usize,
}

/// SPEC section 7's table: (name, requests, prompt, output).
const SCENARIOS: [(&str, usize, usize, usize); 4] = [
    ("prefill_heavy_b16", 16, 2048, 16),
    ("balanced_b32", 32, 512, 512),
    ("decode_heavy_b32", 32, 128, 1024),
    ("long_decode_b32", 32, 4096, 512),
];

/// The scenarios `names` picks (`all` is every one), each with the overrides applied.
pub fn scenarios(
    names: &[String],
    requests: Option<usize>,
    prompt_len: Option<usize>,
    output_len: Option<usize>,
) -> Result<Vec<Scenario>, String> {
    let mut picked = Vec::new();
    for name in names {
        let rows: Vec<_> = SCENARIOS.iter().filter(|s| name == "all" || s.0 == name).collect();
        if rows.is_empty() {
            let known: Vec<_> = SCENARIOS.iter().map(|s| s.0).collect();
            return Err(format!("--scenario must be all or one of {}, got `{name}`", known.join(", ")));
        }
        for &&(name, r, p, o) in &rows {
            let s = Scenario {
                name: name.into(),
                requests: requests.unwrap_or(r),
                prompt_len: prompt_len.unwrap_or(p),
                output_len: output_len.unwrap_or(o),
            };
            if s.requests == 0 || s.prompt_len == 0 || s.output_len == 0 {
                return Err(format!(
                    "scenario {}: requests, prompt and output lengths must be positive: {s:?}",
                    s.name
                ));
            }
            if !picked.contains(&s) {
                picked.push(s);
            }
        }
    }
    Ok(picked)
}

/// One scenario's figures.
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioResult {
    #[serde(flatten)]
    scenario: Scenario,
    prompt_tokens: usize,
    generated_tokens: usize,
    wall_s: f64,
    prefill_s: f64,
    prefill_tok_s: f64,
    ttft_ms: Option<Summary>,
    /// `None` when no token follows the first (an output length of 1).
    decode_tok_s: Option<f64>,
    decode_step_ms: Option<Summary>,
    /// The executor's part of those steps.
    decode_step_executor_ms: Option<Summary>,
    steps: StepCounts,
    /// Every step that carried a prefill chunk, in order.
    chunk_steps: Vec<ChunkStep>,
    preemptions: u64,
}

/// One step with a prefill chunk: its rows and where its wall time went.
#[derive(Clone, Debug, Serialize)]
struct ChunkStep {
    tokens: usize,
    decodes: usize,
    wall_ms: f64,
    schedule_ms: f64,
    executor_ms: f64,
    hand_out_ms: f64,
}

impl ChunkStep {
    fn new(rows: StepRows, wall_ms: f64, times: StepTimes) -> Self {
        ChunkStep {
            tokens: rows.num_tokens,
            decodes: rows.num_decodes,
            wall_ms,
            schedule_ms: millis(times.schedule),
            executor_ms: millis(times.execute),
            hand_out_ms: millis(times.hand_out),
        }
    }
}

/// Runs one scenario to completion and checks every request got exactly its output length; its
/// first `profile_steps` steps run between `cuProfilerStart` and `cuProfilerStop`.
pub fn run_scenario(
    engine: &mut Engine,
    s: &Scenario,
    prompts: &PromptSource,
    profile_steps: Option<usize>,
) -> Result<ScenarioResult, String> {
    let preempted_before = engine.stats().num_preemptions;
    let mut waiting_first = BTreeSet::new();
    for (i, prompt) in prompts.prompts(&vec![s.prompt_len; s.requests])?.into_iter().enumerate() {
        let request = prompts.request(i, prompt, s.output_len);
        waiting_first.insert(engine.add_request(request).map_err(|e| e.to_string())?);
    }
    let (mut steps, mut generated, mut prefill_s) = (StepCounts::default(), 0, None);
    let (mut decode_ms, mut executor_ms, mut chunk_steps) = (Vec::new(), Vec::new(), Vec::new());
    let mut ttft_ms = Vec::with_capacity(s.requests);
    let start = Instant::now();
    let mut unprofiled = profile_steps.unwrap_or(0);
    if unprofiled > 0 {
        profiler(true);
    }
    while engine.has_work() {
        let t = Instant::now();
        let events = engine.step();
        if unprofiled > 0 {
            unprofiled = if events.is_err() { 0 } else { unprofiled - 1 };
            if unprofiled == 0 {
                profiler(false);
            }
        }
        let events = events.map_err(|e| format!("scenario {}: {e}", s.name))?;
        let ms = millis(t.elapsed());
        let (rows, times) = (engine.last_step(), engine.last_step_times());
        steps.add(rows);
        if rows.is_decode_only() {
            decode_ms.push(ms);
            executor_ms.push(millis(times.execute));
        } else if rows.num_seqs > 0 {
            chunk_steps.push(ChunkStep::new(rows, ms, times));
        }
        for ev in &events {
            if let EngineEvent::Token { request, .. } = ev {
                generated += 1;
                if waiting_first.remove(request) {
                    ttft_ms.push(millis(start.elapsed()));
                }
            }
        }
        if prefill_s.is_none() && waiting_first.is_empty() {
            prefill_s = Some(start.elapsed().as_secs_f64());
        }
    }
    let wall_s = start.elapsed().as_secs_f64();
    let prefill_s = prefill_s.ok_or_else(|| format!("scenario {}: a request never got a token", s.name))?;
    let done = engine.take_finished();
    if done.len() != s.requests {
        return Err(format!("scenario {}: {} of {} requests finished", s.name, done.len(), s.requests));
    }
    for c in done {
        if c.token_ids.len() != s.output_len {
            return Err(format!(
                "scenario {}: request {} generated {} tokens, expected {}",
                s.name,
                c.id,
                c.token_ids.len(),
                s.output_len
            ));
        }
    }
    let prompt_tokens = s.requests * s.prompt_len;
    let after_first = generated - s.requests;
    let decode_s = wall_s - prefill_s;
    Ok(ScenarioResult {
        scenario: s.clone(),
        prompt_tokens,
        generated_tokens: generated,
        wall_s,
        prefill_s,
        prefill_tok_s: prompt_tokens as f64 / prefill_s,
        ttft_ms: Summary::of(&ttft_ms),
        decode_tok_s: (after_first > 0 && decode_s > 0.0).then(|| after_first as f64 / decode_s),
        decode_step_ms: Summary::of(&decode_ms),
        decode_step_executor_ms: Summary::of(&executor_ms),
        steps,
        chunk_steps,
        preemptions: engine.stats().num_preemptions - preempted_before,
    })
}

/// One line per scenario, every figure of [`super::DEFINITIONS`] in it.
pub fn print_scenario(r: &ScenarioResult) {
    let s = &r.scenario;
    let decode = r.decode_tok_s.map_or("no decode tokens".into(), |t| format!("{t:.0} tok/s"));
    let ttft = r
        .ttft_ms
        .map_or(String::new(), |t| format!(", time to first token mean {:.1} ms, median {:.1}", t.mean, t.median));
    let step = match (r.decode_step_ms, r.decode_step_executor_ms) {
        (Some(m), Some(e)) => format!("mean {:.3} ms, median {:.3} ms (executor {:.3})", m.mean, m.median, e.median),
        _ => "no decode-only step".into(),
    };
    println!(
        "scenario {}: {} x {} -> {}: wall {:.3} s; prefill {:.0} tok/s ({} tokens by {:.3} s{ttft}); decode {decode} \
         ({} tokens); decode step {step}; steps {} decode, {} mixed, {} prefill; {} preemptions",
        s.name,
        s.requests,
        s.prompt_len,
        s.output_len,
        r.wall_s,
        r.prefill_tok_s,
        r.prompt_tokens,
        r.prefill_s,
        r.generated_tokens - s.requests,
        r.steps.decode,
        r.steps.mixed,
        r.steps.prefill,
        r.preemptions
    );
    for p in &r.chunk_steps {
        println!(
            "  step of {} tokens ({} decode rows): wall {:.3} ms = schedule {:.3} + executor {:.3} + hand_out {:.3} + rest",
            p.tokens, p.decodes, p.wall_ms, p.schedule_ms, p.executor_ms, p.hand_out_ms
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_follow_spec_section_7_and_take_overrides() {
        let all = scenarios(&["all".into()], None, None, None).unwrap();
        let table: Vec<_> = all.iter().map(|s| (s.name.as_str(), s.requests, s.prompt_len, s.output_len)).collect();
        assert_eq!(table, SCENARIOS.to_vec());
        let small = scenarios(&["balanced_b32".into(), "balanced_b32".into()], Some(3), None, Some(4)).unwrap();
        assert_eq!(small, vec![Scenario { name: "balanced_b32".into(), requests: 3, prompt_len: 512, output_len: 4 }]);
        let err = scenarios(&["huge".into()], None, None, None).unwrap_err();
        assert!(err.contains("huge") && err.contains("long_decode_b32"), "{err}");
        assert!(scenarios(&["all".into()], Some(0), None, None).is_err());
    }
}
