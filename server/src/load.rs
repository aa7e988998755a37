//! What `generate`, `eval`, `serve` and `bench` each load from a checkpoint folder: its
//! tokenizer, the executor the engine flags name (behind a progress bar), and the scheduler's
//! limits.

use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use model::config::ModelConfig;
use model::cpu_backend::Precision;
use model::executor_loader::{load_executor, ExecutorOptions, LoadedExecutor, PREFILL_CHUNK};
use model::scheduler::SchedulerConfig;
use model::start_times::StartTimes;
use tokenizers::Tokenizer;

use crate::cli::EngineArgs;

/// The checkpoint's `tokenizer.json`; the error names the file.
pub fn tokenizer(model: &Path) -> Result<Tokenizer, String> {
    let path = model.join("tokenizer.json");
    Tokenizer::from_file(&path).map_err(|e| format!("{}: {e}", path.display()))
}

impl EngineArgs {
    /// The executor these flags name, for `max_num_seqs` sequences of at most `max_model_len`
    /// tokens in a CPU cache of `cpu_blocks` blocks (the GPU sizes its own), the CPU computing in
    /// `precision`.
    pub fn executor_options(
        &self,
        precision: Precision,
        max_num_seqs: usize,
        max_model_len: usize,
        cpu_blocks: usize,
    ) -> ExecutorOptions<'_> {
        ExecutorOptions {
            device: &self.device,
            precision,
            max_num_seqs,
            max_model_len,
            cpu_blocks,
            gpu_memory_utilization: self.gpu_memory_utilization,
            enforce_eager: self.enforce_eager,
            decode_kernel: &self.decode_kernel,
            max_num_batched_tokens: self.max_num_batched_tokens,
        }
    }
}

/// [`load_executor`] with a progress bar over the tensors, cleared once loaded.
pub fn executor_with_progress(
    model: &Path,
    cfg: &ModelConfig,
    opts: &ExecutorOptions,
) -> Result<LoadedExecutor, String> {
    let bar = ProgressBar::new(0).with_message(format!("loading {}", model.display()));
    bar.set_style(ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len}").expect("valid template"));
    let mut progress = |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    };
    let executor =
        load_executor(model, cfg, opts, &mut progress, &mut StartTimes::silent()).map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    Ok(executor)
}

/// The scheduler's limits for `max_num_seqs` sequences of at most `max_model_len` tokens, with the
/// executor loader's chunk and the step budget `loaded` is sized for, and prefix caching on
/// unless `--no-prefix-caching`.
pub fn scheduler_config(
    max_num_seqs: usize,
    loaded: &LoadedExecutor,
    max_model_len: usize,
    prefix_caching: bool,
) -> SchedulerConfig {
    SchedulerConfig {
        max_num_seqs,
        max_batched_tokens: loaded.max_batched_tokens,
        prefill_chunk: PREFILL_CHUNK,
        max_model_len,
        prefix_caching,
    }
}
