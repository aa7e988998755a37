//! `asynct generate`: load a checkpoint, run one batch of requests to completion on the GPU
//! backend (`--device cuda`, or `auto` on a machine with a GPU) or the CPU backend, print the
//! output and a one-line summary.

use std::sync::Arc;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use model::block_pool::blocks_for;
use model::config::ModelConfig;
use model::cpu_backend::{load_cpu_executor, Precision};
use model::engine::{Engine, GenerationRequest, SamplingParams, StopConditions};
use model::executor::StepExecutor;
use model::gpu_backend::executor::{open_gpu, GpuExecutor, GpuOptions};
use model::scheduler::SchedulerConfig;
use tokenizers::Tokenizer;

use crate::cli::GenerateArgs;
use crate::logits_dump;

const BLOCK_SIZE: usize = 16;
const PREFILL_CHUNK: usize = 512;

/// A step's token budget: one whole prefill chunk beside a decode row of every sequence. With only
/// a chunk's worth, a decoding sequence leaves too little room for any other's next chunk (chunks
/// are never cut, for batch invariance), and the batch runs one request at a time.
fn step_budget(batch: usize) -> usize {
    PREFILL_CHUNK + batch
}

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
    let tok_path = args.model.join("tokenizer.json");
    let tokenizer = Tokenizer::from_file(&tok_path).map_err(|e| format!("{}: {e}", tok_path.display()))?;
    let prompt = match (&args.prompt, &args.prompt_ids) {
        (_, Some(ids)) => ids.clone(),
        (Some(text), None) => tokenizer
            .encode(text.as_str(), false)
            .map_err(|e| format!("tokenizing the prompt: {e}"))?
            .get_ids()
            .to_vec(),
        (None, None) => return Err("give --prompt or --prompt-ids".into()),
    };
    let bar = ProgressBar::new(0).with_message(format!("loading {}", args.model.display()));
    bar.set_style(ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len}").expect("valid template"));
    let mut progress = |done: usize, total: usize| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    };
    let executor: Box<dyn StepExecutor> = match Device::parse(&args.device, cfg.head_dim)? {
        Device::Cuda(gpu) => {
            if args.gpu_memory_utilization <= 0.0 || args.gpu_memory_utilization > 1.0 {
                return Err(format!("--gpu-memory-utilization must be in (0, 1], got {}", args.gpu_memory_utilization));
            }
            let options = GpuOptions {
                max_num_seqs: args.batch,
                max_batched_tokens: step_budget(args.batch),
                max_model_len: cfg.max_position_embeddings,
                block_size: BLOCK_SIZE,
                memory_utilization: args.gpu_memory_utilization,
            };
            Box::new(GpuExecutor::load(&gpu, &args.model, &cfg, options, &mut progress).map_err(|e| e.to_string())?)
        }
        Device::Cpu => {
            // Room for every request's whole life at once, so this batch never preempts; the
            // engine sizes its scheduler from the executor's cache.
            let max_len = (prompt.len() + args.max_tokens).min(cfg.max_position_embeddings);
            let num_blocks = blocks_for(max_len, BLOCK_SIZE) * args.batch;
            load_cpu_executor(&args.model, &cfg, precision, num_blocks, BLOCK_SIZE, &mut progress)
                .map_err(|e| e.to_string())?
        }
    };
    bar.finish_and_clear();
    eprintln!("running on {}", executor.describe());

    let sched = SchedulerConfig {
        max_num_seqs: args.batch,
        max_batched_tokens: step_budget(args.batch),
        prefill_chunk: PREFILL_CHUNK,
        max_model_len: cfg.max_position_embeddings,
    };
    let mut engine =
        Engine::new(executor, Arc::new(tokenizer), sched, args.dump_logits.is_some()).map_err(|e| e.to_string())?;
    for i in 0..args.batch {
        let request = GenerationRequest {
            prompt: prompt.clone(),
            sampling: SamplingParams {
                temperature: args.temperature,
                top_k: args.top_k,
                top_p: args.top_p,
                seed: args.seed + i as u64,
            },
            stop: StopConditions {
                eos_token_ids: cfg.eos_token_id.clone(),
                stop: args.stop.clone(),
                max_tokens: args.max_tokens,
                max_model_len: cfg.max_position_embeddings,
                ignore_eos: args.ignore_eos,
            },
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

/// Where `--device` runs the model.
enum Device {
    Cpu,
    Cuda(std::sync::Arc<gpu::Gpu>),
}

impl Device {
    /// `auto` takes the GPU when one opens and its kernels take the model's head dim; `cuda`
    /// without a GPU, or for a head dim the kernels do not take, is an error before any work.
    fn parse(device: &str, head_dim: usize) -> Result<Self, String> {
        let kernels_take = gpu::attention::HEAD_DIMS.contains(&head_dim);
        match device {
            "cpu" => Ok(Self::Cpu),
            "cuda" if !kernels_take => Err(format!(
                "--device cuda: the GPU kernels take head dims {:?}, the model's is {head_dim}",
                gpu::attention::HEAD_DIMS
            )),
            "cuda" => open_gpu().map(Self::Cuda).map_err(|e| e.to_string()),
            "auto" if !kernels_take => Ok(Self::Cpu),
            "auto" => Ok(open_gpu().map_or(Self::Cpu, Self::Cuda)),
            other => Err(format!("--device must be auto, cpu or cuda, got `{other}`")),
        }
    }
}
