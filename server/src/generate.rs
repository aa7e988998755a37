//! `asynct generate`: load a checkpoint, run one batch of requests to completion on the GPU
//! backend (`--device cuda`, or `auto` on a machine with a GPU) or the CPU backend, print the
//! output and a one-line summary.

use std::sync::Arc;
use std::time::Instant;

use model::block_pool::blocks_for;
use model::config::ModelConfig;
use model::cpu_backend::Precision;
use model::engine::{Engine, GenerationRequest, SamplingParams, StopConditions};

use crate::cli::GenerateArgs;
use crate::{load, logits_dump};
use model::executor_loader::BLOCK_SIZE;

/// Runs the command; the error is the message to print.
pub fn run(args: &GenerateArgs) -> Result<(), String> {
    if args.batch == 0 {
        return Err("--batch must be at least 1".into());
    }
    if args.dump_logits.is_some() && args.batch != 1 {
        return Err(format!("--dump-logits records one request, but --batch is {}", args.batch));
    }
    let precision: Precision = args.precision.parse().map_err(|e: model::Error| e.to_string())?;
    let cfg = ModelConfig::load(&args.model).map_err(|e| e.to_string())?;
    let tokenizer = load::tokenizer(&args.model)?;
    let prompt = match (&args.prompt, &args.prompt_ids) {
        (_, Some(ids)) => ids.clone(),
        (Some(text), None) => tokenizer
            .encode(text.as_str(), false)
            .map_err(|e| format!("tokenizing the prompt: {e}"))?
            .get_ids()
            .to_vec(),
        (None, None) => return Err("give --prompt or --prompt-ids".into()),
    };
    // On the CPU, room for every request's whole life at once, so this batch never preempts; the
    // engine sizes its scheduler from the executor's cache.
    let max_len = prompt.len().saturating_add(args.max_tokens).min(cfg.max_position_embeddings);
    let cpu_blocks = blocks_for(max_len, BLOCK_SIZE).saturating_mul(args.batch);
    let opts = args.engine.executor_options(precision, args.batch, cfg.max_position_embeddings, cpu_blocks);
    let loaded = load::executor_with_progress(&args.model, &cfg, &opts)?;
    eprintln!("running on {}", loaded.executor.describe());

    let sched =
        load::scheduler_config(args.batch, &loaded, cfg.max_position_embeddings, !args.scheduling.no_prefix_caching);
    let mut engine = Engine::new(loaded.executor, Arc::new(tokenizer), sched, args.dump_logits.is_some())
        .map_err(|e| e.to_string())?;
    engine.set_pipelining(!args.scheduling.no_pipelining);
    for i in 0..args.batch {
        let request = GenerationRequest {
            prompt: prompt.clone(),
            sampling: SamplingParams {
                temperature: args.temperature,
                top_k: args.top_k,
                top_p: args.top_p,
                seed: args.seed + i as u64,
                ..SamplingParams::greedy()
            },
            stop: StopConditions {
                eos_token_ids: cfg.eos_token_id.clone(),
                stop: args.stop.clone(),
                max_tokens: args.max_tokens,
                max_model_len: cfg.max_position_embeddings,
                ignore_eos: args.ignore_eos,
                ..Default::default()
            },
            ..Default::default()
        };
        engine.add_request(request).map_err(|e| e.to_string())?;
    }

    let start = Instant::now();
    let done = engine.run_to_completion().map_err(|e| e.to_string())?;
    let secs = start.elapsed().as_secs_f64();

    for c in &done {
        if args.batch > 1 {
            println!("--- request {} ({}) ---", c.id, c.finish.as_openai());
        }
        if args.prompt_ids.is_some() {
            println!("{}", c.token_ids.iter().map(u32::to_string).collect::<Vec<_>>().join(","));
        } else {
            println!("{}", c.text);
        }
    }
    if let (Some(path), Some(logits)) = (&args.dump_logits, done.first().and_then(|c| c.logits.as_ref())) {
        logits_dump::write(path, logits)?;
    }
    let generated: usize = done.iter().map(|c| c.token_ids.len()).sum();
    eprintln!(
        "{} requests, prompt {} tokens each, generated {} tokens in {:.2} s: {:.1} tok/s ({})",
        done.len(),
        prompt.len(),
        generated,
        secs,
        generated as f64 / secs,
        engine.describe()
    );
    Ok(())
}
