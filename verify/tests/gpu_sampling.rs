//! Every sampling parameter through the GPU engine (issue 16): requests with logit bias, min
//! tokens, each penalty, min-p, top-p, stop token ids, logprobs and echo run through the real
//! engine over the GPU executor, and every token the executor returns is checked against the
//! oracle's definition (`oracle::decode::draw`, the processors then the sampler) applied to the
//! very logits row it was drawn from (read back from the device after each step). Rows whose
//! request sets a parameter the device sampler lacks take the host path, the others the kernel;
//! both must give the oracle's token. The logits handed to the engine for logprobs (the scored
//! rows alone, beside neighbours whose rows stay on the device) must be the bits the tokens were
//! drawn from. Then each request's tokens and logprobs are the same bits alone, beside the
//! others, with graphs off, and beside an `echo` request (whose step brings back its prompt rows),
//! whose own tokens and prompt logprobs are those it gets alone.
//!
//! The model is gpu_engine's (two layers, hidden 256, head dim 128, the byte tokenizer's
//! vocabulary, random weights). Without a GPU every check prints that it was skipped.

use std::path::Path;
use std::sync::{Arc, Mutex};

use gpu::Gpu;
use model::block_pool::KvCapacity;
use model::config::ModelConfig;
use model::engine::{Completion, Engine, GenerationRequest, LogitsProcessors, SamplingParams, StopConditions};
use model::executor::{scored_rows, LogitsWanted, SamplingRow, StepExecutor, StepOutput};
use model::gpu_backend::executor::GpuExecutor;
use model::scheduler::StepPlan;
use model::start_times::StartTimes;
use oracle::decode::guide::OutputFormat;
use small_model::{err, gpu_options, scheduler_config, write_model};

mod small_model;

fn main() {
    verify::gpu_harness::run(
        "gpu_sampling",
        &[
            ("each_token_is_the_oracles_draw_from_its_device_row_with_each_parameter", oracle_draws),
            ("each_parameter_set_gives_the_same_bits_alone_batched_and_eager", same_bits),
            ("beside_an_echo_request_the_bits_hold", beside_echo),
        ],
    )
}

const MAX_SEQS: usize = 32;
const EOS: u32 = model::byte_tokenizer::EOS_ID;

type Check = Result<(), String>;

/// What the checking executor saw: oracle mismatches, rows checked (host, device).
#[derive(Default)]
struct Seen {
    mismatches: Vec<String>,
    host_rows: usize,
    device_rows: usize,
}

/// The GPU executor, each step's tokens checked against the oracle's draw from the rows read back.
struct Checked {
    inner: GpuExecutor,
    seen: Arc<Mutex<Seen>>,
}

impl StepExecutor for Checked {
    fn execute(
        &mut self,
        plan: &StepPlan,
        sampling: &[SamplingRow<'_>],
        wanted: &LogitsWanted,
    ) -> model::Result<StepOutput> {
        let out = self.inner.execute(plan, sampling, wanted)?;
        let rows = self.inner.last_logits(sampling.len())?;
        let mut seen = self.seen.lock().unwrap();
        let scored = scored_rows(sampling);
        if let (Some(l), LogitsWanted::ScoredRows) = (&out.logits, wanted) {
            if l.nrows() != scored.len() {
                seen.mismatches.push(format!("{} logits rows handed up for {} scored rows", l.nrows(), scored.len()));
            }
        }
        for (j, row) in sampling.iter().enumerate() {
            let raw = rows.row(j);
            let want = row.draw(raw.as_slice().expect("contiguous"))?;
            if row.on_device() {
                seen.device_rows += 1;
            } else {
                seen.host_rows += 1;
            }
            if want != out.sampled[j] {
                let path = if row.on_device() { "device" } else { "host" };
                seen.mismatches
                    .push(format!("{path} row {j} (step {}): got {}, oracle {want}", row.step, out.sampled[j]));
            }
            // The row handed up for logprobs is the row the token came from.
            let handed = match (&out.logits, wanted) {
                (Some(l), LogitsWanted::ScoredRows) => {
                    scored.iter().position(|&k| k == j).filter(|&k| k < l.nrows()).map(|k| l.row(k).to_owned())
                }
                (Some(l), LogitsWanted::QueryRows(r)) => {
                    let s = plan.seqs.iter().enumerate().filter(|(_, p)| p.samples).nth(j).map(|(i, _)| i);
                    let last = s.map(|i| plan.last_row(i));
                    last.and_then(|last| r.binary_search(&last).ok()).map(|k| l.row(k).to_owned())
                }
                _ => None,
            };
            if let Some(h) = handed {
                if h.iter().zip(raw.iter()).any(|(a, b)| a.to_bits() != b.to_bits()) {
                    seen.mismatches.push(format!("row {j}: the logits handed up differ from the sampled row"));
                }
            }
        }
        Ok(out)
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

fn engine(gpu: &Arc<Gpu>, dir: &Path, cfg: &ModelConfig, graphs: bool) -> Result<(Engine, Arc<Mutex<Seen>>), String> {
    // A fixed cache rather than a fraction of free memory: two of these engines are alive at
    // once below, and the second would find the first's share taken.
    let blocks = MAX_SEQS * cfg.max_position_embeddings.div_ceil(small_model::BLOCK);
    let options = gpu_options(MAX_SEQS, cfg.max_position_embeddings, Some(blocks));
    let mut inner =
        GpuExecutor::load(gpu, dir, cfg, options, &mut |_, _| {}, &mut StartTimes::silent()).map_err(err)?;
    inner.set_graph_replay(graphs);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let tokenizer = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).map_err(err)?;
    let sched = scheduler_config(MAX_SEQS, cfg.max_position_embeddings, false);
    let exec = Checked { inner, seen: seen.clone() };
    Ok((Engine::new(Box::new(exec), Arc::new(tokenizer), sched, false).map_err(err)?, seen))
}

fn prompt(i: usize) -> Vec<u32> {
    (0..(9 + 23 * i)).map(|t| ((t * 37 + i * 11) % 250) as u32 + 3).collect()
}

fn base(i: usize, sampling: SamplingParams) -> GenerationRequest {
    let stop = StopConditions { eos_token_ids: vec![EOS], max_tokens: 12, max_model_len: 4096, ..Default::default() };
    GenerationRequest { prompt: prompt(i), sampling, stop, ..Default::default() }
}

/// The guided case's choices: one a prefix of another.
fn choices() -> OutputFormat {
    OutputFormat::Choice(vec!["the river".into(), "the".into(), "a moon".into()])
}

/// One request per parameter, and one with all of them.
fn parameter_sets() -> Vec<(&'static str, GenerationRequest)> {
    let hot = |i| SamplingParams { top_k: 40, ..SamplingParams::with_temperature(1.1, 7 + i as u64) };
    let with = |i, p: LogitsProcessors| GenerationRequest { processors: p, ..base(i, hot(i)) };
    let none = LogitsProcessors::none;
    let bias: Vec<(u32, f32)> = prompt(0).iter().take(3).map(|&t| (t, 8.0)).collect();
    vec![
        ("plain", base(0, hot(0))),
        ("greedy", base(1, SamplingParams::greedy())),
        ("logit_bias", with(2, LogitsProcessors { logit_bias: bias.clone(), ..none() })),
        ("min_tokens", with(3, LogitsProcessors { min_tokens: 6, logit_bias: vec![(EOS, 6.0)], ..none() })),
        ("repetition_penalty", with(4, LogitsProcessors { repetition_penalty: 1.8, ..none() })),
        ("frequency_penalty", with(5, LogitsProcessors { frequency_penalty: 1.5, ..none() })),
        ("presence_penalty", with(6, LogitsProcessors { presence_penalty: -1.2, ..none() })),
        ("min_p", base(7, SamplingParams { min_p: 0.3, ..hot(7) })),
        ("top_p", base(8, SamplingParams { top_p: 0.7, ..hot(8) })),
        (
            "all processors, greedy",
            GenerationRequest {
                processors: LogitsProcessors {
                    logit_bias: bias,
                    min_tokens: 3,
                    repetition_penalty: 1.3,
                    frequency_penalty: 0.4,
                    presence_penalty: 0.6,
                    guide: None,
                },
                ..base(9, SamplingParams::greedy())
            },
        ),
        ("guided_choice", with(11, LogitsProcessors { guide: Some(choices()), ..none() })),
        ("json_object", with(12, LogitsProcessors { guide: Some(OutputFormat::JsonObject), ..none() })),
        (
            "stop_token_ids",
            GenerationRequest {
                stop: StopConditions { stop_token_ids: vec![prompt(10)[1]], ..base(10, hot(10)).stop },
                processors: LogitsProcessors { logit_bias: vec![(prompt(10)[1], 3.0)], ..none() },
                ..base(10, hot(10))
            },
        ),
        ("logprobs", GenerationRequest { logprobs: Some(3), ..base(11, hot(11)) }),
    ]
}

fn echo_request() -> GenerationRequest {
    GenerationRequest { logprobs: Some(2), prompt_logprobs: Some(2), ..base(12, SamplingParams::greedy()) }
}

/// Tokens, text, finish and logprob bits: what must not depend on the neighbours.
type Bits = (Vec<u32>, String, String, Vec<u64>);

fn bits(c: &Completion) -> Bits {
    let lp = c.logprobs.iter().flatten().flat_map(|l| l.top.iter().map(|t| t.1.to_bits()).chain([l.logprob.to_bits()]));
    (c.token_ids.clone(), c.text.clone(), format!("{:?}", c.finish), lp.collect())
}

fn run(engine: &mut Engine, reqs: &[GenerationRequest]) -> Result<Vec<Completion>, String> {
    for r in reqs {
        engine.add_request(r.clone()).map_err(err)?;
    }
    engine.run_to_completion().map_err(err)
}

fn verdict(seen: &Arc<Mutex<Seen>>, what: &str) -> Check {
    let seen = seen.lock().unwrap();
    if !seen.mismatches.is_empty() {
        return Err(format!(
            "{what}: {} mismatches, first: {}",
            seen.mismatches.len(),
            seen.mismatches[..3.min(seen.mismatches.len())].join("; ")
        ));
    }
    if seen.host_rows == 0 || seen.device_rows == 0 {
        return Err(format!(
            "{what}: {} host rows and {} device rows checked; both paths must run",
            seen.host_rows, seen.device_rows
        ));
    }
    println!(
        "  {what}: {} host-drawn and {} device-drawn tokens equal the oracle's draw",
        seen.host_rows, seen.device_rows
    );
    Ok(())
}

fn oracle_draws(gpu: &Arc<Gpu>) -> Check {
    let (dir, cfg) = write_model("gpu-sampling", "draws")?;
    let reqs: Vec<GenerationRequest> = parameter_sets().into_iter().map(|(_, r)| r).chain([echo_request()]).collect();
    for graphs in [true, false] {
        let (mut e, seen) = engine(gpu, &dir, &cfg, graphs)?;
        run(&mut e, &reqs)?;
        verdict(&seen, if graphs { "with graphs" } else { "eager" })?;
    }
    std::fs::remove_dir_all(&dir).map_err(err)?;
    Ok(())
}

fn same_bits(gpu: &Arc<Gpu>) -> Check {
    let (dir, cfg) = write_model("gpu-sampling", "bits")?;
    let sets = parameter_sets();
    let all: Vec<GenerationRequest> = sets.iter().map(|(_, r)| r.clone()).collect();
    let (mut e, _) = engine(gpu, &dir, &cfg, true)?;
    let batched = run(&mut e, &all)?;
    let again = run(&mut e, &all)?;
    let (mut eager, _) = engine(gpu, &dir, &cfg, false)?;
    let eager = run(&mut eager, &all)?;
    for (i, (name, r)) in sets.iter().enumerate() {
        let alone = bits(&run(&mut e, std::slice::from_ref(r))?[0]);
        for (what, got) in [("beside the others", &batched[i]), ("a second time", &again[i]), ("eager", &eager[i])] {
            if bits(got) != alone {
                return Err(format!("{name}: {what} gives tokens {:?}, alone {:?}", got.token_ids, alone.0));
            }
        }
    }
    std::fs::remove_dir_all(&dir).map_err(err)?;
    println!("  {} parameter sets: the same bits alone, beside the others, twice and eager", sets.len());
    Ok(())
}

fn beside_echo(gpu: &Arc<Gpu>) -> Check {
    let (dir, cfg) = write_model("gpu-sampling", "echo")?;
    let sets = parameter_sets();
    let (mut e, _) = engine(gpu, &dir, &cfg, true)?;
    let prompt_bits = |c: &Completion| {
        let lp = c.prompt_logprobs.iter().flatten().flatten();
        lp.flat_map(|l| l.top.iter().map(|t| t.1.to_bits()).chain([l.logprob.to_bits()])).collect::<Vec<_>>()
    };
    let echo_alone = run(&mut e, &[echo_request()])?.remove(0);
    for (name, r) in &sets {
        let alone = bits(&run(&mut e, std::slice::from_ref(r))?[0]);
        let together = run(&mut e, &[echo_request(), r.clone()])?;
        if bits(&together[1]) != alone {
            return Err(format!(
                "{name}: beside an echo request (its prompt rows' logits picked) tokens {:?}, alone {:?}",
                together[1].token_ids, alone.0
            ));
        }
        let prompt_lp = together[0].prompt_logprobs.as_ref().map_or(0, Vec::len);
        if prompt_lp != echo_request().prompt.len() {
            return Err(format!(
                "the echo request got {prompt_lp} prompt logprobs for {} tokens",
                echo_request().prompt.len()
            ));
        }
        if (bits(&together[0]), prompt_bits(&together[0])) != (bits(&echo_alone), prompt_bits(&echo_alone)) {
            return Err(format!("{name}: the echo request's tokens or logprobs differ beside it from alone"));
        }
    }
    std::fs::remove_dir_all(&dir).map_err(err)?;
    println!("  {} parameter sets: the same bits beside an echo request", sets.len());
    Ok(())
}
