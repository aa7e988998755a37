//! Building a [`StepExecutor`] from a checkpoint folder for `--device auto|cpu|cuda`: the one place
//! that `asynct generate`, `asynct serve`, `asynct bench` and the Python `LLM` share, so all pick
//! devices, size caches and budget steps alike.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crate::block_pool::blocks_for;
use crate::config::ModelConfig;
use crate::cpu_backend::{check_host_bytes, cpu_block_bytes, format_bytes, load_cpu_executor, Precision};
use crate::error::{Error, Result};
use crate::executor::StepExecutor;
use crate::gpu_backend::decode_kernel::DecodeKernel;
use crate::gpu_backend::executor::{open_gpu, GpuExecutor, GpuOptions};
use crate::gpu_backend::step_buffers::step_memory;
use crate::start_times::{StartPhase, StartTimes};

/// Tokens per KV-cache block, on both backends.
pub const BLOCK_SIZE: usize = 16;
/// Tokens a prefilling sequence computes per step, at most.
pub const PREFILL_CHUNK: usize = 512;

/// Prefill chunks a CPU step may carry beside its decode rows by default. One chunk per step left
/// the GPU's prefill bound by the eager step's ~320 launches (62K prompt tokens/s in
/// prefill_heavy_b16, RESULTS run 33); four gave each launch four times the rows, while a decoding
/// request waits at most one such step. The CPU keeps that budget: its GEMMs gain nothing past it.
pub const CHUNKS_PER_STEP: usize = 4;

/// The GPU's step budget when `--max-num-batched-tokens` is not given, beside a decode row of
/// every sequence: prefill chunk rows go through cuBLASLt, which on the H200 runs this model's
/// GEMMs at 678-739 TFLOP/s only at M in the tens of thousands (issue 18), so a prefill-heavy step
/// should carry many chunks. RESULTS run 55 took 16 chunks (8,192) while a sequence brought one
/// chunk a step: past that only more sequences could fill a step. Since a sequence takes as many
/// whole chunks as fit (runs 141-142, asynct-0.5b, prompt tokens/s, 2-3 passes each):
/// prefill_heavy_b16 435-445K at 8,192, 462-481K at 16,384, 475-495K at 32,768; balanced_b32
/// 486-495K, 543-551K and 521-540K; the decode steps between them unchanged. 32 chunks: the
/// largest gain that is not within the passes' spread comes at 16,384, while a decoding request
/// waits behind one step's prefill twice as long at 32,768 (about 65 ms). vLLM's offline default
/// is also 16,384. Run 189 measured the cost in time to first token: at 32,800 prefill_heavy_b16
/// gains 3-7% prompt tok/s (a figure that waits for the last request) but loses 27-31% of its
/// mean time to first token, balanced_b32 4-8%, and long_decode_b32's decoders wait 80 ms behind
/// a step instead of 41.
pub const GPU_STEP_TOKENS: usize = 16384;

/// Where a step budget's default comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetDevice {
    /// `CHUNKS_PER_STEP` chunks beside the decode rows.
    Cpu,
    /// [`GPU_STEP_TOKENS`] beside the decode rows.
    Gpu,
}

/// The default step budget on `device`: its chunk rows beside a decode row of every sequence.
pub fn default_step_budget(device: BudgetDevice, max_num_seqs: usize) -> usize {
    let chunks = match device {
        BudgetDevice::Cpu => CHUNKS_PER_STEP * PREFILL_CHUNK,
        BudgetDevice::Gpu => GPU_STEP_TOKENS,
    };
    chunks.saturating_add(max_num_seqs)
}

/// The least step budget for `max_num_seqs` sequences: one whole prefill chunk beside a decode
/// row of every other sequence. The scheduler serves running sequences oldest first, and chunks
/// are never cut (their boundaries are fixed for batch invariance), so with this much the first
/// prefilling sequence of every step gets its chunk whatever decodes before it. With less (down
/// to the one chunk the scheduler itself needs to make progress), a single decoding request leaves
/// no room for another's chunk and the batch prefills one request at a time behind the decodes.
/// vLLM asks only for `max_num_seqs` (a decode row each); this also holds that.
pub fn least_step_budget(max_num_seqs: usize) -> usize {
    PREFILL_CHUNK.saturating_add(max_num_seqs)
}

/// `tokens` as the step budget for `max_num_seqs` sequences, or an error naming `option` (the
/// CLI's `--max-num-batched-tokens` or the Python keyword) when it is below
/// [`least_step_budget`]. What fits the device is the GPU loader's check.
pub fn check_step_budget(tokens: usize, max_num_seqs: usize, option: &str) -> Result<usize> {
    let least = least_step_budget(max_num_seqs);
    if tokens < least {
        return Err(Error::Options(format!(
            "{option}: must be at least {least}, got {tokens}: a step holds a whole prefill chunk of {PREFILL_CHUNK} \
             tokens (chunks are never cut) beside a decode row for each of the {max_num_seqs} sequences it may run"
        )));
    }
    Ok(tokens)
}

/// The CPU KV cache's memory when none is given, in GiB (vLLM's CPU backend also takes 4).
pub const DEFAULT_CPU_KV_CACHE_GIB: f64 = 4.0;

/// The CPU KV cache in blocks of [`BLOCK_SIZE`] tokens: room for `max_num_seqs` sequences of
/// `max_model_len` (so a full batch never preempts), but no more than `gib` GiB. `gib` given
/// (under the name `option`) must hold one sequence of `max_model_len`, which the scheduler needs
/// to admit one; by default ([`DEFAULT_CPU_KV_CACHE_GIB`]) the cache grows to one such sequence
/// if it must, and the loader refuses it if that passes the machine's memory.
pub fn cpu_kv_cache_blocks(
    cfg: &ModelConfig,
    precision: Precision,
    max_num_seqs: usize,
    max_model_len: usize,
    gib: Option<f64>,
    option: &str,
) -> Result<usize> {
    let block_bytes = cpu_block_bytes(cfg, precision, BLOCK_SIZE).ok_or_else(|| Error::Memory {
        what: "one KV-cache block".into(),
        need: "more than 2^64 bytes".into(),
        limit: "what can be addressed".into(),
        hint: "the config's num_hidden_layers, num_key_value_heads or head_dim is wrong".into(),
    })?;
    let one_seq = blocks_for(max_model_len, BLOCK_SIZE);
    let every_seq = one_seq.saturating_mul(max_num_seqs);
    let budget = gib.unwrap_or(DEFAULT_CPU_KV_CACHE_GIB);
    if !(budget.is_finite() && budget > 0.0) {
        return Err(Error::Options(format!("{option}: must be > 0, got {budget}")));
    }
    // f64 to usize saturates, so a huge budget is simply every sequence's room.
    let budget_blocks = (budget * (1u64 << 30) as f64 / block_bytes as f64) as usize;
    match gib {
        Some(g) if budget_blocks < one_seq => Err(Error::Options(format!(
            "{option}: {g} GiB holds {budget_blocks} blocks of {BLOCK_SIZE} tokens; one sequence of max_model_len \
             {max_model_len} needs {one_seq} ({})",
            format_bytes((one_seq as u64).saturating_mul(block_bytes))
        ))),
        Some(_) => Ok(every_seq.min(budget_blocks)),
        None => Ok(every_seq.min(budget_blocks.max(one_seq))),
    }
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
    /// `--decode-kernel`: auto, graph or mega (`gpu_backend::decode_kernel`).
    pub decode_kernel: &'a str,
    /// `--max-num-batched-tokens`: query tokens in one step, at most; `None` takes the device's
    /// [`default_step_budget`].
    pub max_num_batched_tokens: Option<usize>,
}

/// A loaded executor and the step budget it is sized for, which the scheduler must keep.
pub struct LoadedExecutor {
    /// The executor.
    pub executor: Box<dyn StepExecutor>,
    /// Query tokens in one step, at most: the flag's value, else the device's default.
    pub max_batched_tokens: usize,
}

/// Loads the checkpoint in `dir` onto the device `opts.device` names, with its step budget;
/// `progress(done, total)` follows the tensors, and each phase's wall time goes to `times` (on
/// the CPU one phase, [`StartPhase::CheckpointRead`], which there includes building the executor).
pub fn load_executor(
    dir: &Path,
    cfg: &ModelConfig,
    opts: &ExecutorOptions,
    progress: &mut dyn FnMut(usize, usize),
    times: &mut StartTimes,
) -> Result<LoadedExecutor> {
    let flag = "--max-num-batched-tokens";
    let given = opts.max_num_batched_tokens.map(|n| check_step_budget(n, opts.max_num_seqs, flag)).transpose()?;
    let budget = |device| given.unwrap_or_else(|| default_step_budget(device, opts.max_num_seqs));
    let decode_kernel: DecodeKernel = opts.decode_kernel.parse()?;
    let opening = Instant::now();
    match Device::parse(opts.device, cfg.head_dim)? {
        Device::Cuda(gpu) => {
            times.record(StartPhase::DeviceOpen, opening.elapsed());
            let max_batched_tokens = budget(BudgetDevice::Gpu);
            let utilization = opts.gpu_memory_utilization;
            if utilization <= 0.0 || utilization > 1.0 {
                return Err(Error::Options(format!("--gpu-memory-utilization must be in (0, 1], got {utilization}")));
            }
            let options = GpuOptions {
                max_num_seqs: opts.max_num_seqs,
                max_batched_tokens,
                max_model_len: opts.max_model_len,
                block_size: BLOCK_SIZE,
                memory_utilization: utilization,
                cuda_graphs: !opts.enforce_eager,
                decode_kernel,
                kv_blocks: None,
            };
            check_gpu_sizes(&gpu, cfg, opts)?;
            check_step_memory(&gpu, cfg, &options)?;
            times.time(StartPhase::KernelLoad, || load_kernels(&gpu))?;
            let executor = GpuExecutor::load(&gpu, dir, cfg, options, progress, times)?;
            Ok(LoadedExecutor { executor: Box::new(executor), max_batched_tokens })
        }
        Device::Cpu => {
            // The CPU backend allocates each step's activations at that step's size.
            let executor = times.time(StartPhase::CheckpointRead, || {
                load_cpu_executor(dir, cfg, opts.precision, opts.cpu_blocks, BLOCK_SIZE, progress)
            })?;
            Ok(LoadedExecutor { executor, max_batched_tokens: budget(BudgetDevice::Cpu) })
        }
    }
}

/// Loads every kernel the device runs before the weights. On a machine's first start (or after
/// a kernel, NVRTC or the driver changed) NVRTC compiles them, the slow part of that start, so
/// each compile is announced on stderr; later starts read the cubins from the kernel cache.
fn load_kernels(gpu: &gpu::Gpu) -> Result<()> {
    let kernels = gpu::kernels::for_device(gpu.info().compute_capability);
    let dir = gpu::runtime::kernel_cache::cache_dir();
    gpu.load_kernels(&kernels, &mut |n, total, kernel| {
        eprintln!(
            "compiling kernel {n} of {total} ({}) for {}; kept for later starts in {}",
            kernel.name,
            gpu.arch(),
            dir.display()
        )
    })?;
    Ok(())
}

/// Refuses, before the GPU backend allocates them, the buffers sized by flags and config fields
/// that could never fit: the RoPE table (built on the host, then uploaded), the block table
/// (`max_num_seqs` rows of `max_model_len`) and the sampler's logits (`max_num_seqs` rows of the
/// vocabulary). What remains is sized from the device's memory by the backend itself.
fn check_gpu_sizes(gpu: &gpu::Gpu, cfg: &ModelConfig, opts: &ExecutorOptions) -> Result<()> {
    let mul = |a: usize, b: usize, c: usize| (a as u64).checked_mul(b as u64)?.checked_mul(c as u64);
    let rope = mul(cfg.max_position_embeddings, cfg.head_dim, 4);
    let hint = "lower the config's max_position_embeddings";
    check_host_bytes(|| format!("the RoPE table ({} positions)", cfg.max_position_embeddings), rope, hint)?;
    let rows = opts.max_num_seqs;
    let table = mul(rows, blocks_for(opts.max_model_len, BLOCK_SIZE), 4);
    let logits = mul(rows, cfg.vocab_size, 4);
    let need = [rope, table, logits].into_iter().try_fold(0u64, |acc, b| acc.checked_add(b?));
    let (_, total) = gpu.memory()?;
    if need.is_none_or(|n| n > total as u64) {
        return Err(Error::Memory {
            what: format!(
                "the GPU's RoPE table, block table and logits ({} positions, {rows} sequences of {} tokens)",
                cfg.max_position_embeddings, opts.max_model_len
            ),
            need: need.map_or_else(|| "more than 2^64 bytes".into(), format_bytes),
            limit: format!("the device's {}", format_bytes(total as u64)),
            hint: "lower --max-num-seqs, --max-model-len or the config's max_position_embeddings".into(),
        });
    }
    Ok(())
}

/// Refuses, before anything is allocated, step buffers (activations, logits and the split-K
/// workspace, all sized by the step's rows) that would leave no room in the memory
/// `--gpu-memory-utilization` allows: a large `--max-num-batched-tokens` is an error naming it,
/// not a failed allocation part-way through the load.
fn check_step_memory(gpu: &gpu::Gpu, cfg: &ModelConfig, options: &GpuOptions) -> Result<()> {
    let (_, total) = gpu.memory()?;
    let allowed = (options.memory_utilization * total as f64) as u64;
    let need = step_memory(&cfg.dims(), &options.capacity(), BLOCK_SIZE, gpu.info().compute_capability)?;
    if need.is_none_or(|n| n > allowed) {
        return Err(Error::Memory {
            what: format!(
                "the GPU's step buffers for --max-num-batched-tokens {} ({} sequences of {} tokens)",
                options.max_batched_tokens, options.max_num_seqs, options.max_model_len
            ),
            need: need.map_or_else(|| "more than 2^64 bytes".into(), format_bytes),
            limit: format!(
                "--gpu-memory-utilization {} of the device's {}",
                options.memory_utilization,
                format_bytes(total as u64)
            ),
            hint: "lower --max-num-batched-tokens (or --max-num-seqs, --max-model-len)".into(),
        });
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets::Preset;

    fn blocks(max_num_seqs: usize, max_model_len: usize, gib: Option<f64>) -> Result<usize> {
        cpu_kv_cache_blocks(
            &Preset::Tiny.config(),
            Precision::F32,
            max_num_seqs,
            max_model_len,
            gib,
            "--kv-cache-memory",
        )
    }

    #[test]
    fn cpu_cache_holds_every_sequence_within_the_budget() {
        // asynct-tiny's block: 2 layers x (K, V) x 16 tokens x 2 heads x 16 x 4 bytes = 8 KiB.
        assert_eq!(blocks(4, 2048, None).unwrap(), 4 * 128);
        assert_eq!(blocks(10_000_000, 2048, None).unwrap(), 4 << 17);
        assert_eq!(blocks(usize::MAX, usize::MAX, None).unwrap(), usize::MAX / 16 + 1);
        assert_eq!(blocks(64, 2048, Some(1.0 / 1024.0)).unwrap(), 128);
    }

    #[test]
    fn a_cpu_budget_below_one_sequence_or_not_positive_is_refused_by_name() {
        let msg = blocks(1, 2048, Some(0.0001)).unwrap_err().to_string();
        assert!(msg.starts_with("--kv-cache-memory: 0.0001 GiB holds 13 blocks") && msg.contains("needs 128"), "{msg}");
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let msg = blocks(1, 64, Some(bad)).unwrap_err().to_string();
            assert!(msg.starts_with("--kv-cache-memory: must be > 0"), "{msg}");
        }
    }

    #[test]
    fn default_budgets_are_per_device_and_saturate() {
        assert_eq!(default_step_budget(BudgetDevice::Cpu, 64), 4 * 512 + 64);
        assert_eq!(default_step_budget(BudgetDevice::Gpu, 64), GPU_STEP_TOKENS + 64);
        assert_eq!(default_step_budget(BudgetDevice::Gpu, usize::MAX), usize::MAX);
        for device in [BudgetDevice::Cpu, BudgetDevice::Gpu] {
            let n = default_step_budget(device, 256);
            assert_eq!(check_step_budget(n, 256, "--max-num-batched-tokens").unwrap(), n);
        }
    }

    #[test]
    fn a_budget_below_a_chunk_beside_every_decode_row_is_refused_by_name() {
        assert_eq!(check_step_budget(512 + 16, 16, "--max-num-batched-tokens").unwrap(), 528);
        assert_eq!(check_step_budget(1 << 40, 16, "x").unwrap(), 1 << 40);
        for bad in [0, 1, 511, 512, 527] {
            let msg = check_step_budget(bad, 16, "--max-num-batched-tokens").unwrap_err().to_string();
            assert!(msg.contains(&format!("--max-num-batched-tokens: must be at least 528, got {bad}")), "{msg}");
        }
        let msg = check_step_budget(5, usize::MAX, "max_num_batched_tokens").unwrap_err().to_string();
        assert!(msg.contains(&format!("max_num_batched_tokens: must be at least {}", usize::MAX)), "{msg}");
    }

    #[test]
    fn a_given_budget_is_checked_before_the_device_is_opened() {
        let opts = ExecutorOptions {
            device: "no-such-device",
            precision: Precision::F32,
            max_num_seqs: 8,
            max_model_len: 64,
            cpu_blocks: 4,
            gpu_memory_utilization: 0.9,
            enforce_eager: true,
            decode_kernel: "auto",
            max_num_batched_tokens: Some(0),
        };
        let cfg = Preset::Tiny.config();
        let err = load_executor(Path::new("/nonexistent"), &cfg, &opts, &mut |_, _| {}, &mut StartTimes::silent())
            .err()
            .expect("refused");
        assert!(err.to_string().contains("--max-num-batched-tokens: must be at least 520, got 0"), "{err}");
    }
}
