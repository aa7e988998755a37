//! The setup gpu_trained and trained_agreement share: the shipped trained model and its held-out
//! text, CPU engines over it, greedy continuations of held-out openings, and their judgement by
//! `verify::greedy_agreement` (the CPU's bf16 mode against another backend, up to near-ties). A
//! directory module, so that Cargo builds no test binary of its own from it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use model::config::ModelConfig;
use model::cpu_backend::Precision;
use model::engine::{Engine, GenerationRequest, SamplingParams, StopConditions};
use model::executor::StepExecutor;
use model::executor_loader::{load_executor, ExecutorOptions};
use model::perplexity::prediction_rows;
use model::scheduler::SchedulerConfig;
use model::start_times::StartTimes;
use ndarray::{s, Array2};
use tokenizers::Tokenizer;
use verify::greedy_agreement::{relative_l2, Rows, Tally, Verdict};

/// Tokens of each held-out opening.
pub const OPENING: usize = 24;
/// Tokens each continuation generates (eos ignored).
pub const GENERATED: usize = 64;

pub fn err<E: std::fmt::Display>(e: E) -> String {
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

/// The model folder (`ASYNCT_TRAINED_MODEL`, by default `trained/asynct-mini-shakespeare` from
/// `root`), its config and tokenizer, and the held-out text's ids (`ASYNCT_HELDOUT_TEXT`, by
/// default the folder's `heldout.txt`).
pub fn inputs(root: &Path) -> Result<(PathBuf, ModelConfig, Tokenizer, Vec<u32>), String> {
    let dir = path("ASYNCT_TRAINED_MODEL", &root.join("trained/asynct-mini-shakespeare").to_string_lossy())?;
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

/// `count` openings of [`OPENING`] tokens spread evenly over `ids`.
pub fn openings(ids: &[u32], count: usize) -> Vec<Vec<u32>> {
    let step = (ids.len() - OPENING) / count;
    (0..count).map(|k| ids[k * step..k * step + OPENING].to_vec()).collect()
}

/// The scheduler's settings for `batch` sequences at once, prefix caching off.
pub fn scheduler(cfg: &ModelConfig, batch: usize) -> SchedulerConfig {
    SchedulerConfig {
        max_num_seqs: batch,
        max_batched_tokens: 2048,
        prefill_chunk: 512,
        max_model_len: cfg.max_position_embeddings,
        prefix_caching: false,
    }
}

/// An engine over `executor` for `batch` sequences at once.
pub fn engine_over(
    executor: Box<dyn StepExecutor>,
    cfg: &ModelConfig,
    tok: &Tokenizer,
    batch: usize,
) -> Result<Engine, String> {
    Engine::new(executor, Arc::new(tok.clone()), scheduler(cfg, batch), false).map_err(err)
}

/// An engine over the CPU backend in `precision` for `batch` sequences at once.
pub fn cpu_engine(
    precision: Precision,
    dir: &Path,
    cfg: &ModelConfig,
    tok: &Tokenizer,
    batch: usize,
) -> Result<Engine, String> {
    let len = cfg.max_position_embeddings;
    let opts = ExecutorOptions {
        device: "cpu",
        precision,
        max_num_seqs: batch,
        max_model_len: len,
        cpu_blocks: batch * len.div_ceil(16),
        gpu_memory_utilization: 0.9,
        enforce_eager: false,
        decode_kernel: "auto",
        max_num_batched_tokens: Some(2048),
    };
    let loaded = load_executor(dir, cfg, &opts, &mut |_, _| {}, &mut StartTimes::silent()).map_err(err)?;
    engine_over(loaded.executor, cfg, tok, batch)
}

/// The greedy continuation of every opening, [`GENERATED`] tokens each, in order.
pub fn continuations(engine: &mut Engine, cfg: &ModelConfig, openings: &[Vec<u32>]) -> Result<Vec<Vec<u32>>, String> {
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
    let done: Vec<Vec<u32>> = engine.run_to_completion().map_err(err)?.into_iter().map(|c| c.token_ids).collect();
    if let Some(k) = done.iter().position(|c| c.len() != GENERATED) {
        return Err(format!("opening {k}: {} tokens generated, expected {GENERATED}", done[k].len()));
    }
    Ok(done)
}

/// How many continuations agree token for token, and (opening, token) where each other one
/// first differs.
pub fn strict(on_cpu: &[Vec<u32>], other: &[Vec<u32>]) -> (usize, Vec<(usize, usize)>) {
    let splits: Vec<(usize, usize)> = on_cpu
        .iter()
        .zip(other)
        .enumerate()
        .filter_map(|(k, (c, g))| c.iter().zip(g).position(|(a, b)| a != b).map(|at| (k, at)))
        .collect();
    (on_cpu.len() - splits.len(), splits)
}

/// The rows of each scored opening and continuation that predict the continuation's tokens
/// (row `OPENING - 1` predicts its first).
pub fn continuation_rows(
    engine: &mut Engine,
    cfg: &ModelConfig,
    sequences: &[Vec<u32>],
) -> Result<Vec<Array2<f32>>, String> {
    let refs: Vec<&[u32]> = sequences.iter().map(Vec::as_slice).collect();
    let rows = prediction_rows(engine, cfg, &refs).map_err(err)?;
    Ok(rows.into_iter().map(|m| m.slice_move(s![OPENING - 1.., ..])).collect())
}

/// Each opening followed by its continuation.
pub fn scored(openings: &[Vec<u32>], continuations: &[Vec<u32>]) -> Vec<Vec<u32>> {
    openings.iter().zip(continuations).map(|(o, c)| [&o[..], &c[..]].concat()).collect()
}

/// The judgement of another backend's continuations against the CPU bf16 mode's.
pub struct Judged {
    pub tally: Tally,
    /// `opening@token margin/tolerance` of each first flip.
    pub first_flips: Vec<String>,
    /// Per opening, the other backend's relative L2 distance from the f64 rows over the
    /// continuation, in units of the CPU bf16 mode's, sorted.
    pub noise_ratio: Vec<f64>,
}

/// Judges `other` (the other backend's continuations) against `on_bf16` (the CPU bf16 mode's),
/// given every backend's [`continuation_rows`] of the openings followed by `on_bf16`.
pub fn judge(
    on_bf16: &[Vec<u32>],
    other: &[Vec<u32>],
    bf16_rows: &[Array2<f32>],
    exact_rows: &[Array2<f32>],
    other_rows: &[Array2<f32>],
) -> Result<Judged, String> {
    let mut judged = Judged { tally: Tally::default(), first_flips: Vec::new(), noise_ratio: Vec::new() };
    for k in 0..on_bf16.len() {
        let rows = Rows { cpu: bf16_rows[k].view(), reference: exact_rows[k].view(), gpu: other_rows[k].view() };
        let verdict = Verdict::of(&on_bf16[k], &other[k], &rows).map_err(|e| format!("opening {k}: {e}"))?;
        judged.tally.add(k, &verdict);
        if let Some(f) = verdict.first_flip {
            judged.first_flips.push(format!("{k}@{} {:.3}/{:.3}", f.position, f.margin, f.tolerance));
        }
        judged.noise_ratio.push(relative_l2(rows.gpu, rows.reference) / relative_l2(rows.cpu, rows.reference));
    }
    judged.noise_ratio.sort_by(f64::total_cmp);
    Ok(judged)
}

impl Judged {
    /// Prints the tie-aware count, the first flips, the teacher-forced rate and the noise ratio.
    pub fn print(&self, other: &str) {
        let t = &self.tally;
        println!(
            "  up to near-ties, {other} against the CPU's Bf16: {} of {} openings agree ({} identical); first flips \
             (opening@token margin/tolerance): [{}]",
            t.tie_aware,
            t.openings,
            t.strict,
            self.first_flips.join(", ")
        );
        println!(
            "  teacher forced: argmax agrees at {} of {} positions ({:.2}%); flips beyond rounding (opening, flip): {:?}",
            t.teacher_forced_agree,
            t.positions,
            100.0 * t.teacher_forced_rate(),
            t.not_ties
        );
        if let (Some(mid), Some(max)) = (self.noise_ratio.get(self.noise_ratio.len() / 2), self.noise_ratio.last()) {
            println!(
                "  {other}'s logits' relative L2 distance from the f64 mode over each continuation, in units of the \
                 CPU bf16 mode's: median {mid:.3}, largest {max:.3}"
            );
        }
    }
}
