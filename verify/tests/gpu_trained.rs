//! The trained model on the GPU against the CPU backend (issue 17):
//! - held-out perplexity from `model::perplexity` (what `asynct eval` prints) on the GPU within 0.5%
//!   of the CPU backend's (f32);
//! - greedy continuations (64 tokens, eos ignored) of 100 held-out openings agree token for token
//!   between the CPU and the GPU on at least 95 of them. The CPU runs the oracle's bf16 mode here,
//!   the GPU's twin (SPEC 4: the same rounding points, only the order of accumulation differs):
//!   against f32 a trained model's near-ties flip within 64 tokens on most openings (RESULTS run
//!   52: 37 of 100 agreed), which says nothing about the GPU. The f32 figure is printed beside it.
//!
//! The model is `trained/asynct-mini-shakespeare` (or the folder `ASYNCT_TRAINED_MODEL` names),
//! the text the model folder's `heldout.txt` (training copies the corpus's held-out plays there;
//! or the file `ASYNCT_HELDOUT_TEXT` names). Run from the repository root; without a GPU every
//! check prints that it was skipped (`verify::gpu_harness`); a missing model or text is a failure
//! that names the path.

use std::path::PathBuf;
use std::sync::Arc;

use gpu::Gpu;
use model::config::ModelConfig;
use model::cpu_backend::Precision;
use model::engine::{Engine, GenerationRequest, SamplingParams, StopConditions};
use model::executor::StepExecutor;
use model::executor_loader::{load_executor, ExecutorOptions};
use model::gpu_backend::executor::{GpuExecutor, GpuOptions};
use model::perplexity::{score, windows};
use model::scheduler::SchedulerConfig;
use model::start_times::StartTimes;
use tokenizers::Tokenizer;

fn main() {
    verify::gpu_harness::run(
        "gpu_trained",
        &[
            ("heldout_perplexity_on_the_gpu_is_within_half_a_percent_of_the_cpu", perplexity_agrees),
            ("greedy_continuations_agree_on_95_of_100_heldout_openings", greedy_agrees),
        ],
    )
}

type Check = Result<(), String>;

const WINDOW: usize = 256;
const BATCH: usize = 100;
const OPENING: usize = 24;
const GENERATED: usize = 64;

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

fn path(var: &str, default: &str) -> Result<PathBuf, String> {
    let p = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| PathBuf::from(default));
    if p.exists() {
        Ok(p)
    } else {
        Err(format!("{} is missing (set {var}, or run from the repository root with it carried)", p.display()))
    }
}

/// The model folder, its config and tokenizer, and the held-out text's ids.
fn inputs() -> Result<(PathBuf, ModelConfig, Tokenizer, Vec<u32>), String> {
    let dir = path("ASYNCT_TRAINED_MODEL", "trained/asynct-mini-shakespeare")?;
    let text = match std::env::var_os("ASYNCT_HELDOUT_TEXT") {
        Some(_) => path("ASYNCT_HELDOUT_TEXT", "")?,
        None => path("ASYNCT_HELDOUT_TEXT", &dir.join("heldout.txt").to_string_lossy())?,
    };
    let cfg = ModelConfig::load(&dir).map_err(err)?;
    let tokenizer = Tokenizer::from_file(dir.join("tokenizer.json")).map_err(err)?;
    let text = std::fs::read_to_string(&text).map_err(err)?;
    let ids = tokenizer.encode(text.as_str(), false).map_err(err)?.get_ids().to_vec();
    Ok((dir, cfg, tokenizer, ids))
}

/// An engine over the GPU, or over the CPU backend in `precision`, for `BATCH` sequences at once.
fn engine(
    gpu: Option<&Arc<Gpu>>,
    precision: Precision,
    dir: &std::path::Path,
    cfg: &ModelConfig,
    tok: &Tokenizer,
) -> Result<Engine, String> {
    let len = cfg.max_position_embeddings;
    let executor: Box<dyn StepExecutor> = match gpu {
        Some(gpu) => {
            let options = GpuOptions {
                max_num_seqs: BATCH,
                max_batched_tokens: 2048,
                max_model_len: len,
                block_size: 16,
                memory_utilization: 0.5,
                cuda_graphs: true,
                kv_blocks: None,
            };
            Box::new(GpuExecutor::load(gpu, dir, cfg, options, &mut |_, _| {}, &mut StartTimes::silent()).map_err(err)?)
        }
        None => {
            let opts = ExecutorOptions {
                device: "cpu",
                precision,
                max_num_seqs: BATCH,
                max_model_len: len,
                cpu_blocks: BATCH * len.div_ceil(16),
                gpu_memory_utilization: 0.9,
                enforce_eager: false,
            };
            load_executor(dir, cfg, &opts, &mut |_, _| {}, &mut StartTimes::silent()).map_err(err)?
        }
    };
    let sched = SchedulerConfig {
        max_num_seqs: BATCH,
        max_batched_tokens: 2048,
        prefill_chunk: 512,
        max_model_len: len,
        prefix_caching: false,
    };
    Engine::new(executor, Arc::new(tok.clone()), sched, false).map_err(err)
}

fn perplexity_agrees(gpu: &Arc<Gpu>) -> Check {
    let (dir, cfg, tok, ids) = inputs()?;
    let ws = windows(&ids, WINDOW);
    let mut cpu = engine(None, Precision::F32, &dir, &cfg, &tok)?;
    let mut gpu_engine = engine(Some(gpu), Precision::F32, &dir, &cfg, &tok)?;
    let on_cpu = score(&mut cpu, &cfg, &ws, 16, &mut |_| {}).map_err(err)?;
    let on_gpu = score(&mut gpu_engine, &cfg, &ws, 16, &mut |_| {}).map_err(err)?;
    let gap = (on_gpu.perplexity() / on_cpu.perplexity() - 1.0).abs();
    println!(
        "  {} predictions: perplexity cpu {:.4} gpu {:.4} ({:+.3}%), accuracy cpu {:.4} gpu {:.4}",
        on_cpu.predictions,
        on_cpu.perplexity(),
        on_gpu.perplexity(),
        100.0 * (on_gpu.perplexity() / on_cpu.perplexity() - 1.0),
        on_cpu.accuracy(),
        on_gpu.accuracy()
    );
    if gap > 0.005 {
        return Err(format!("the GPU's perplexity is {:.3}% from the CPU's, more than 0.5%", 100.0 * gap));
    }
    Ok(())
}

/// The greedy continuations of every opening, in order.
fn continuations(engine: &mut Engine, cfg: &ModelConfig, openings: &[Vec<u32>]) -> Result<Vec<Vec<u32>>, String> {
    for prompt in openings {
        let request = GenerationRequest {
            prompt: prompt.clone(),
            sampling: SamplingParams::greedy(),
            stop: StopConditions {
                eos_token_ids: cfg.eos_token_id.clone(),
                max_tokens: GENERATED,
                max_model_len: cfg.max_position_embeddings,
                ignore_eos: true,
                ..Default::default()
            },
            ..Default::default()
        };
        engine.add_request(request).map_err(err)?;
    }
    Ok(engine.run_to_completion().map_err(err)?.into_iter().map(|c| c.token_ids).collect())
}

fn greedy_agrees(gpu: &Arc<Gpu>) -> Check {
    let (dir, cfg, tok, ids) = inputs()?;
    let step = (ids.len() - OPENING) / BATCH;
    let openings: Vec<Vec<u32>> = (0..BATCH).map(|k| ids[k * step..k * step + OPENING].to_vec()).collect();
    let on_gpu = continuations(&mut engine(Some(gpu), Precision::F32, &dir, &cfg, &tok)?, &cfg, &openings)?;
    let sample = tok.decode(&on_gpu[0], false).map_err(err)?;
    println!("  opening 0 on the GPU: {:?} >>> {:?}", tok.decode(&openings[0], false).map_err(err)?, sample);
    let mut agree_bf16 = 0;
    for precision in [Precision::F32, Precision::Bf16] {
        let on_cpu = continuations(&mut engine(None, precision, &dir, &cfg, &tok)?, &cfg, &openings)?;
        let (agree, first_split) = agreement(&on_cpu, &on_gpu)?;
        println!(
            "  against the CPU's {precision:?}: {agree} of {BATCH} continuations agree for all {GENERATED} tokens; \
             diverging (opening, token): {first_split:?}"
        );
        agree_bf16 = agree;
    }
    if agree_bf16 * 100 < 95 * BATCH {
        return Err(format!("{agree_bf16} of {BATCH} continuations agree with the CPU's bf16 mode, fewer than 95"));
    }
    Ok(())
}

/// How many continuations agree token for token, and where each other one first differs.
fn agreement(on_cpu: &[Vec<u32>], on_gpu: &[Vec<u32>]) -> Result<(usize, Vec<(usize, usize)>), String> {
    let mut agree = 0;
    let mut first_split = Vec::new();
    for (k, (c, g)) in on_cpu.iter().zip(on_gpu).enumerate() {
        if c.len() != GENERATED || g.len() != GENERATED {
            return Err(format!(
                "opening {k}: {} tokens on the CPU, {} on the GPU, expected {GENERATED}",
                c.len(),
                g.len()
            ));
        }
        match c.iter().zip(g).position(|(a, b)| a != b) {
            None => agree += 1,
            Some(at) => first_split.push((k, at)),
        }
    }
    Ok((agree, first_split))
}
