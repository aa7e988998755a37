//! The setup gpu_engine and gpu_sampling share: their model (two layers, hidden 256, the GPU's
//! head dim 128, the byte tokenizer's vocabulary, random weights of seed 77) written to a fresh
//! folder, and the executor's and scheduler's settings around it (blocks of 16 tokens, prefill
//! chunks of 128, each binary with its own sequence count). A directory module, so that Cargo
//! builds no test binary of its own from it.

use std::path::PathBuf;

use model::checkpoint::{save_checkpoint, StoredDtype};
use model::config::ModelConfig;
use model::gpu_backend::decode_kernel::DecodeKernel;
use model::gpu_backend::executor::GpuOptions;
use model::presets::Preset;
use model::scheduler::SchedulerConfig;
use oracle::model::init::random_weights;

pub const BLOCK: usize = 16;
pub const CHUNK: usize = 128;

pub fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// The model with the byte tokenizer, written to `asynct-{binary}-{tag}-{pid}` in the temporary
/// folder.
pub fn write_model(binary: &str, tag: &str) -> Result<(PathBuf, ModelConfig), String> {
    let dir = std::env::temp_dir().join(format!("asynct-{binary}-{tag}-{}", std::process::id()));
    let mut cfg = Preset::Tiny.config();
    (cfg.head_dim, cfg.hidden_size, cfg.intermediate_size) = (128, 256, 512);
    save_checkpoint(&dir, &cfg, &random_weights(&cfg.dims(), 77), StoredDtype::Bf16).map_err(err)?;
    std::fs::write(dir.join("tokenizer.json"), model::byte_tokenizer::tokenizer_json().map_err(err)?).map_err(err)?;
    Ok((dir, cfg))
}

/// The executor's options: `max_seqs` sequences beside a chunk, graphs on, 30% of the memory.
pub fn gpu_options(max_seqs: usize, max_model_len: usize, kv_blocks: Option<usize>) -> GpuOptions {
    GpuOptions {
        max_num_seqs: max_seqs,
        max_batched_tokens: CHUNK + max_seqs,
        max_model_len,
        block_size: BLOCK,
        memory_utilization: 0.3,
        cuda_graphs: true,
        decode_kernel: DecodeKernel::default(),
        kv_blocks,
    }
}

/// The scheduler's settings to match [`gpu_options`].
pub fn scheduler_config(max_seqs: usize, max_model_len: usize, prefix_caching: bool) -> SchedulerConfig {
    SchedulerConfig {
        max_num_seqs: max_seqs,
        max_batched_tokens: CHUNK + max_seqs,
        prefill_chunk: CHUNK,
        max_model_len,
        prefix_caching,
    }
}
