//! Building a [`StepExecutor`] from a checkpoint folder for `--device auto|cpu|cuda`: the one place
//! that `asynct generate`, `asynct serve`, `asynct bench` and the Python `LLM` share, so all pick
//! devices, size caches and budget steps alike.

use std::path::Path;
use std::sync::Arc;

use crate::config::ModelConfig;
use crate::cpu_backend::{load_cpu_executor, Precision};
use crate::error::{Error, Result};
use crate::executor::StepExecutor;
use crate::gpu_backend::executor::{open_gpu, GpuExecutor, GpuOptions};

/// Tokens per KV-cache block, on both backends.
pub const BLOCK_SIZE: usize = 16;
/// Tokens a prefilling sequence computes per step, at most.
pub const PREFILL_CHUNK: usize = 512;

/// Prefill chunks a step may carry beside its decode rows. One chunk per step left the GPU's
/// prefill bound by the eager step's ~320 launches (62K prompt tokens/s in prefill_heavy_b16,
/// RESULTS run 33); four give each launch four times the rows, while a decoding request waits at
/// most one such step.
pub const CHUNKS_PER_STEP: usize = 4;

/// A step's token budget: `CHUNKS_PER_STEP` whole prefill chunks beside a decode row of every
/// sequence. With only a chunk's worth, a decoding request leaves too little room for any
/// other's next chunk (chunks are never cut, for batch invariance), and the batch runs one
/// request at a time.
pub fn step_budget(max_num_seqs: usize) -> usize {
    CHUNKS_PER_STEP * PREFILL_CHUNK + max_num_seqs
}

/// What the executor is sized for.
pub struct ExecutorOptions<'a> {
    /// `--device`: auto, cpu or cuda.
    pub device: &'a str,
    /// The CPU backend's arithmetic.
    pub precision: Precision,
    /// Sequences in one step, at most.
    pub max_num_seqs: usize,
    /// Longest sequence, prompt and output.
    pub max_model_len: usize,
    /// The CPU cache in blocks; the GPU sizes its own from free memory.
    pub cpu_blocks: usize,
    /// The fraction of GPU memory the weights, buffers and KV cache may take together.
    pub gpu_memory_utilization: f64,
    /// No whole-step CUDA graphs on the GPU: every step runs eagerly.
    pub enforce_eager: bool,
}

/// Loads the checkpoint in `dir` onto the device `opts.device` names; `progress(done, total)`
/// follows the tensors.
pub fn load_executor(
    dir: &Path,
    cfg: &ModelConfig,
    opts: &ExecutorOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Box<dyn StepExecutor>> {
    match Device::parse(opts.device, cfg.head_dim)? {
        Device::Cuda(gpu) => {
            let utilization = opts.gpu_memory_utilization;
            if utilization <= 0.0 || utilization > 1.0 {
                return Err(Error::Options(format!("--gpu-memory-utilization must be in (0, 1], got {utilization}")));
            }
            let options = GpuOptions {
                max_num_seqs: opts.max_num_seqs,
                max_batched_tokens: step_budget(opts.max_num_seqs),
                max_model_len: opts.max_model_len,
                block_size: BLOCK_SIZE,
                memory_utilization: utilization,
                cuda_graphs: !opts.enforce_eager,
                kv_blocks: None,
            };
            let executor = GpuExecutor::load(&gpu, dir, cfg, options, progress)?;
            Ok(Box::new(executor))
        }
        Device::Cpu => load_cpu_executor(dir, cfg, opts.precision, opts.cpu_blocks, BLOCK_SIZE, progress),
    }
}

/// Where `--device` runs the model.
enum Device {
    Cpu,
    Cuda(Arc<gpu::Gpu>),
}

impl Device {
    /// `auto` takes the GPU when one opens and its kernels take the model's head dim; `cuda`
    /// without a GPU, or for a head dim the kernels do not take, is an error before any work.
    fn parse(device: &str, head_dim: usize) -> Result<Self> {
        let kernels_take = gpu::attention::HEAD_DIMS.contains(&head_dim);
        match device {
            "cpu" => Ok(Self::Cpu),
            "cuda" if !kernels_take => Err(Error::Options(format!(
                "--device cuda: the GPU kernels take head dims {:?}, the model's is {head_dim}",
                gpu::attention::HEAD_DIMS
            ))),
            "cuda" => open_gpu().map(Self::Cuda),
            "auto" if !kernels_take => Ok(Self::Cpu),
            "auto" => Ok(open_gpu().map_or(Self::Cpu, Self::Cuda)),
            other => Err(Error::Options(format!("--device must be auto, cpu or cuda, got `{other}`"))),
        }
    }
}
