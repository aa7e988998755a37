//! The AsyncT forward on the GPU: one step (any mix of prefill chunks and decodes) through every
//! layer, all of it on the device, rounding to bf16 at the points of
//! `oracle::model::precision::RoundPoint` (each kernel rounds what it stores).
//!
//! Per layer, with `x` the residual stream and `h` the normed input:
//!
//! ```text
//! qkv  = h Wqkv^T                       one GEMM for q, k and v (stacked weights)
//! q, K, V cache <- qk_norm_rope_cache(qkv)
//! attn = HP1(q, cache)                  decode kernels for decode rows, the step dispatcher
//!                                       (fake decode or a tensor-core prefill) for the chunks;
//!                                       a tensor-core prefill norms its rows' q from qkv
//!                                       itself, and the pass writes their K and V only
//! x', h = peri_ln(attn Wo^T, x)         post-attention norm + residual + pre-FFN norm
//! m    = silu_mul(h Wgu^T)              one GEMM for gate and up
//! x, h = peri_ln(m Wd^T, x')            post-FFN norm + residual + next input norm (final
//!                                       norm after the last layer)
//! ```
//!
//! then the rows that get logits are gathered (the embedding kernel, over `h`) and go through the
//! head GEMM. Decode rows never share a launch with a tensor-core prefill chunk, so a decode
//! row's bits do not depend on its neighbours (the decode kernels' own invariance covers mixing
//! decode rows with fake-decode rows); the GEMMs follow the same rule ([`super::linear`]).
//!
//! A step runs in three parts: [`GpuModel::upload`] copies its inputs and returns its
//! [`StepFacts`], the static facts that alone pick kernels and size grids; [`GpuModel::plan`]
//! makes (and loads) the launches of a shape; [`GpuModel::enqueue`] puts them on the stream. The
//! eager path does all three per step. A CUDA graph ([`GpuModel::capture`]) records `enqueue` once
//! per shape and replays it after each `upload` of a step of that shape. Where the step program
//! runs the layers in the decode megakernel, `plan` also records their ops into its table; one
//! walk over the ops (`bindings`) binds each op to its buffers for both. Logits rows reach the host
//! through `logits`; `attention_plan` plans a step's attention.

mod attention_plan;
mod bindings;
mod inputs;
mod logits;

use attention_plan::{fold_layout, folded_o_layout, AttnPlan};

pub use logits::widen_rows;

use std::sync::Arc;

use cudarc::driver::CudaSlice;
use half::bf16;
use ndarray::Array2;
use oracle::model::weights::{ModelDims, ModelWeights};

use gpu::attention::{DecodeAttention, GateCounts, GateParams, GateStats, Hp1Attention};
use gpu::gemm::{EpilogueKind, GemmPlan, GemmShape};
use gpu::mega::{DecodeMega, MegaTable};
use gpu::ops::{Embedding, Faults, HeadShape, PeriLn, QkNormRopeCache, RopeTable, SiluMul};
use gpu::{Gpu, Graph};

use super::decode_kernel::DecodeKernel;
use super::linear::{decode_forms, DecodeCublas, Linears, RowSplit};
use super::pending_feed::FeedRun;
use super::step_buffers::{step_memory, widest_decode_plan, Capacity, DeviceStep, Split, StepBuffers};
use super::step_program::{Fusion, Op, ProgramShape, StepProgram, Weight};
use super::weights::{ClassSteps, DeviceWeights};
use crate::error::{Error, Result};
use crate::start_times::StartTimes;

/// `(n, k)` of a weight's GEMM: what planning loads and enqueueing launches.
fn gemm_nk(dims: &ModelDims, heads: &HeadShape, weight: Weight) -> (usize, usize) {
    let (hidden, inter) = (dims.hidden_size, dims.intermediate_size);
    match weight {
        Weight::Qkv => (heads.qkv_width(), hidden),
        Weight::O => (hidden, heads.q_width()),
        Weight::GateUp => (2 * inter, hidden),
        Weight::Down => (hidden, inter),
    }
}

/// The LM head's GEMM over `picked` logit rows: what planning loads and enqueueing launches.
fn head_shape(dims: &ModelDims, picked: usize) -> GemmShape {
    GemmShape { m: picked, n: dims.vocab_size, k: dims.hidden_size }
}

fn gib(bytes: usize) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// How large the KV cache is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KvSize {
    /// This many blocks.
    Blocks(usize),
    /// As many blocks as fit once the weights and step buffers are in, keeping the device's use
    /// at or under this fraction of its memory (vLLM's `--gpu-memory-utilization`).
    MemoryFraction(f64),
}

/// The paged KV cache of every layer on the device.
pub struct DeviceCache {
    /// Per layer, `[num_blocks, block_size, Hkv, D]` keys.
    pub key: Vec<CudaSlice<bf16>>,
    /// Per layer, `[num_blocks, block_size, Hkv, D]` values.
    pub value: Vec<CudaSlice<bf16>>,
    /// Blocks per layer the scheduler may use.
    pub num_blocks: usize,
    /// Tokens per block.
    pub block_size: usize,
}

impl DeviceCache {
    /// Bytes one block takes over every layer, keys and values.
    pub fn block_bytes(dims: &ModelDims, block_size: usize) -> usize {
        2 * dims.num_layers * block_size * dims.num_kv_heads * dims.head_dim * std::mem::size_of::<bf16>()
    }

    /// A zeroed cache of `num_blocks` blocks for every layer of `dims`.
    pub fn new(gpu: &Gpu, dims: &ModelDims, num_blocks: usize, block_size: usize) -> gpu::Result<Self> {
        let len = num_blocks * block_size * dims.num_kv_heads * dims.head_dim;
        let layer = || gpu.zeros::<bf16>(len);
        Ok(Self {
            key: (0..dims.num_layers).map(|_| layer()).collect::<gpu::Result<_>>()?,
            value: (0..dims.num_layers).map(|_| layer()).collect::<gpu::Result<_>>()?,
            num_blocks,
            block_size,
        })
    }
}

/// The kernels a forward launches, loaded once.
struct Kernels {
    embedding: Embedding,
    peri_ln: PeriLn,
    qk: QkNormRopeCache,
    silu: SiluMul,
    faults: Faults,
}

/// A model on the GPU: weights, cache, step buffers and loaded kernels.
pub struct GpuModel {
    gpu: Arc<Gpu>,
    dims: ModelDims,
    weights: DeviceWeights,
    cache: DeviceCache,
    bufs: StepBuffers,
    kernels: Kernels,
    linears: Linears,
    gate: GateParams,
    heads: HeadShape,
    fusion: Fusion,
    chunk_fusion: Fusion,
    prefill_norms_queries: bool,
    /// The most rounds of loads at which o_proj adds the split-K attention's partials itself
    /// ([`ProgramShape::fold_o`], [`FoldLayout::load_rounds`]): 1, where it pays, unless
    /// `ASYNCT_FOLD_O` names another count (0 turns it off).
    fold_rounds: usize,
    /// Whether decode rows' attention reads their older keys before the op before it ends
    /// ([`gpu::attention::Settled::OlderKeys`]); `ASYNCT_EARLY_KEYS=0` turns it off, to measure
    /// it (the same bits).
    early_keys: bool,
    gates: Option<GateMeter>,
    decode_kernel: DecodeKernel,
    /// The megakernel entries loaded so far, one per row tile.
    megas: Vec<DecodeMega>,
}

/// The gate-statistics kernel and its two counters, while the gates are being measured.
struct GateMeter {
    kernel: GateStats,
    counters: CudaSlice<u64>,
}

/// A step's static facts: all that picks its kernels and sizes its launches (SPEC section 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StepFacts {
    /// Query rows.
    pub tokens: usize,
    /// How its sequences split between decode rows and prefill chunks.
    pub split: Split,
    /// Rows that get logits.
    pub picked: usize,
    /// Whether those are every row in order (the LM head then reads `h` with no gather).
    pub picked_all: bool,
    /// Columns its block tables were uploaded with.
    pub width: usize,
}

/// The planned launches of one [`StepFacts`]; a graph recorded from them keeps them alive.
pub struct StepLaunch {
    shape: StepFacts,
    attn: AttnPlan,
    program: StepProgram,
    /// The megakernel's table of the program's persistent ops, when it has any, and the index in
    /// `GpuModel::megas` of the entry it was checked against.
    mega: Option<(usize, MegaTable)>,
}

impl StepLaunch {
    /// The shape planned for.
    pub fn shape(&self) -> StepFacts {
        self.shape
    }

    /// The launches, in order.
    pub fn program(&self) -> &StepProgram {
        &self.program
    }

    /// Split-K workspace and counter elements the launches use.
    fn workspace(&self) -> (usize, usize) {
        let decode = |a: &Hp1Attention| (a.plan().workspace_len, a.plan().counter_len);
        match &self.attn {
            AttnPlan::Decode(a) => decode(a),
            AttnPlan::Split { decodes, .. } => decodes.as_ref().map_or((0, 0), decode),
        }
    }
}

impl GpuModel {
    /// Uploads `weights`, allocates step buffers for `cap` (the split-K workspace included), then
    /// a cache of `block_size`-token blocks sized by `kv` from the memory left. Refuses, before
    /// uploading, a checkpoint that with the step buffers does not fit the free memory, and a
    /// cache too small for one sequence of `cap.max_blocks_per_seq` blocks. The weights' layout
    /// and upload are recorded in `times`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        gpu: &Arc<Gpu>,
        dims: ModelDims,
        weights: &ModelWeights<bf16>,
        kv: KvSize,
        block_size: usize,
        cap: Capacity,
        progress: &mut dyn FnMut(usize, usize),
        times: &mut StartTimes,
    ) -> Result<Self> {
        let heads = HeadShape { num_heads: dims.num_heads, num_kv_heads: dims.num_kv_heads, head_dim: dims.head_dim };
        let wgmma = gpu::gemm::wgmma_runs_on(gpu.info().compute_capability);
        let nk = |weight| gemm_nk(&dims, &heads, weight);
        let forms = decode_forms(wgmma);
        let class_steps = ClassSteps::for_model(nk, cap.max_seqs, gpu.multiprocessors()?, forms);
        let need = DeviceWeights::bytes_of(weights) + class_steps.bytes(nk, dims.num_layers);
        let (free, total) = gpu.memory()?;
        if need > free {
            return Err(Error::Executor(format!(
                "the checkpoint's weights take {:.2} GiB, the GPU has {:.2} GiB free of {:.2} GiB",
                gib(need),
                gib(free),
                gib(total)
            )));
        }
        let step = step_memory(&dims, &cap, block_size, gpu.info().compute_capability)?;
        if step.is_none_or(|b| b.saturating_add(need as u64) > free as u64) {
            return Err(Error::Executor(format!(
                "the step buffers for {} tokens of {} sequences take {}, beside {:.2} GiB of weights on a GPU with \
                 {:.2} GiB free",
                cap.max_tokens,
                cap.max_seqs,
                step.map_or_else(|| "more than 2^64 bytes".into(), |b| format!("{:.2} GiB", gib(b as usize))),
                gib(need),
                gib(free)
            )));
        }
        let rope = RopeTable::new(gpu, dims.head_dim, dims.max_position_embeddings, dims.rope_theta)?;
        let kernels = Kernels {
            embedding: Embedding::new(gpu)?,
            peri_ln: PeriLn::new(gpu)?,
            qk: QkNormRopeCache::new(gpu, heads, rope)?,
            silu: SiluMul::new(gpu)?,
            faults: Faults::new(gpu)?,
        };
        let p = dims.hp1;
        let gate = GateParams {
            scale: p.scale as f32,
            fir_k: p.fir_k,
            relu_pre: p.relu_pre,
            clip_min: p.clip_min as f32,
            clip_max: p.clip_max as f32,
        };
        gate.validate()?;
        let weights = DeviceWeights::upload(gpu, weights, &dims, class_steps, progress, times)?;
        let mut bufs = StepBuffers::new(gpu, &dims, cap)?;
        // The widest step's split-K workspace, once and before the cache takes the memory left:
        // no plan needs more, so the device memory in use is the same from the first step on,
        // and no step moves memory a graph points at.
        let widest = widest_decode_plan(&dims, &cap, block_size, gpu.info().compute_capability)?;
        bufs.workspace = gpu.zeros(widest.workspace_len.max(1))?;
        bufs.counters = gpu.zeros(widest.counter_len.max(1))?;
        let block_bytes = DeviceCache::block_bytes(&dims, block_size);
        let num_blocks = match kv {
            KvSize::Blocks(n) => n,
            KvSize::MemoryFraction(f) => {
                let (free, total) = gpu.memory()?;
                let keep = ((1.0 - f.clamp(0.0, 1.0)) * total as f64) as usize;
                free.saturating_sub(keep) / block_bytes
            }
        };
        if num_blocks < cap.max_blocks_per_seq {
            return Err(Error::Executor(format!(
                "a KV cache of {num_blocks} blocks ({} tokens, {:.2} GiB) cannot hold one sequence of {} tokens",
                num_blocks * block_size,
                gib(num_blocks * block_bytes),
                cap.max_blocks_per_seq * block_size
            )));
        }
        let mut model = Self {
            cache: DeviceCache::new(gpu, &dims, num_blocks, block_size)?,
            weights,
            bufs,
            linears: Linears::new(gpu, cap.max_tokens, DecodeCublas::from_env()?, forms)?,
            gpu: gpu.clone(),
            dims,
            kernels,
            gate,
            heads,
            fusion: Fusion::from_env("ASYNCT_FUSION", Fusion::ALL),
            chunk_fusion: Fusion::NONE,
            prefill_norms_queries: std::env::var("ASYNCT_PREFILL_QUERY_NORM").map_or(true, |v| v != "0"),
            fold_rounds: match std::env::var("ASYNCT_FOLD_O") {
                Err(_) => 1,
                Ok(v) => v.parse().map_err(|_| {
                    Error::Executor(format!("ASYNCT_FOLD_O must be a count of load rounds (0: no fold), not {v:?}"))
                })?,
            },
            early_keys: std::env::var("ASYNCT_EARLY_KEYS").map_or(true, |v| v != "0"),
            gates: None,
            decode_kernel: DecodeKernel::default(),
            megas: Vec::new(),
        };
        model.set_chunk_fusion(Fusion::from_env("ASYNCT_CHUNK_FUSION", Fusion::NONE));
        Ok(model)
    }

    /// The dimensions.
    pub fn dims(&self) -> &ModelDims {
        &self.dims
    }

    /// The cache.
    pub fn cache(&self) -> &DeviceCache {
        &self.cache
    }

    /// Starts (zeroing the counts) or stops counting the gate's exact zeros in the decode rows'
    /// attention of every step planned after. Graphs captured before do not count: a caller
    /// measuring runs its steps eagerly.
    pub fn measure_gates(&mut self, on: bool) -> Result<()> {
        self.gates = match on {
            false => None,
            true => {
                let kernel = GateStats::new(&self.gpu)?;
                let mut counters = self.gpu.zeros::<u64>(2)?;
                kernel.zero(&mut counters.as_view_mut())?;
                Some(GateMeter { kernel, counters })
            }
        };
        Ok(())
    }

    /// How pure decode steps planned after this launch their layers (graphs captured before keep
    /// theirs).
    pub fn set_decode_kernel(&mut self, kernel: DecodeKernel) {
        self.decode_kernel = kernel;
    }

    /// The fusions chunk rows of steps planned after this take: `fusion`, less those the device
    /// or the model's shapes do not allow (graphs hold decode rows only, so none is affected).
    pub fn set_chunk_fusion(&mut self, fusion: Fusion) {
        let cc = self.gpu.info().compute_capability;
        self.chunk_fusion = fusion.and(chunk_fusion_fits(cc, &self.dims, &self.heads));
    }

    /// Whether the tensor-core prefill of steps planned after this norms and rotates its chunk
    /// rows' queries from the qkv buffer itself (on by default; `ASYNCT_PREFILL_QUERY_NORM=0`
    /// starts a model with it off), so the qk pass writes only their keys and values. The
    /// bits are the same either way.
    pub fn set_prefill_norms_queries(&mut self, on: bool) {
        self.prefill_norms_queries = on;
    }

    /// The fusions chunk rows of steps planned from now on take ([`GpuModel::set_chunk_fusion`]).
    pub fn chunk_fusion(&self) -> Fusion {
        self.chunk_fusion
    }

    /// The gate counts since [`GpuModel::measure_gates`] began, if it is on (waits for the device).
    pub fn gate_counts(&self) -> Result<Option<GateCounts>> {
        self.gates.as_ref().map(|g| Ok(g.kernel.read(&g.counters.as_view())?)).transpose()
    }

    /// Device bytes of the weights.
    pub fn weight_bytes(&self) -> usize {
        self.weights.bytes
    }

    /// Runs `step`, writing its K/V into the cache, and returns the bf16 logits of its picked
    /// rows widened to f32, `[picked, vocab]` in that order (waits for the device).
    pub fn forward(&mut self, step: &DeviceStep<'_>) -> Result<Array2<f32>> {
        self.forward_with(step, DecodeAttention::Dispatched)
    }

    /// [`GpuModel::forward`] with `decode_rows` the attention of a step of decode rows only
    /// ([`GpuModel::plan_with`]).
    pub fn forward_with(&mut self, step: &DeviceStep<'_>, decode_rows: DecodeAttention) -> Result<Array2<f32>> {
        self.launch_with(step, None, &[], decode_rows)?;
        self.kernels.faults.check()?;
        self.download_logit_rows(&(0..step.picked.len()).collect::<Vec<_>>())
    }

    /// The last step's bf16 logits, `[rows, vocab]` for the rows it picked, on the device, beside
    /// the fault word, for a kernel that reads the one and records into the other (the sampler).
    pub fn logits_and_faults(&mut self, rows: usize) -> (cudarc::driver::CudaView<'_, bf16>, &mut Faults) {
        (self.bufs.logits.slice(..rows * self.dims.vocab_size), &mut self.kernels.faults)
    }

    /// The fault word every kernel of a step records into: checking it waits for the device.
    pub fn faults(&mut self) -> &mut Faults {
        &mut self.kernels.faults
    }

    /// Enqueues the whole step, the logits of its picked rows (in that order) last, planned
    /// for this step alone (the eager path), with `runs` of the step's ids copied from `drawn`
    /// (the step before's draws, on the device) over the uploaded ones ([`GpuModel::feed_ids`]).
    /// Launch only: the caller checks [`GpuModel::faults`] once the results are read.
    pub fn launch_fed(
        &mut self,
        step: &DeviceStep<'_>,
        drawn: Option<&CudaSlice<u32>>,
        runs: &[FeedRun],
    ) -> Result<()> {
        self.launch_with(step, drawn, runs, DecodeAttention::Dispatched)
    }

    fn launch_with(
        &mut self,
        step: &DeviceStep<'_>,
        drawn: Option<&CudaSlice<u32>>,
        runs: &[FeedRun],
        decode_rows: DecodeAttention,
    ) -> Result<()> {
        let shape = self.upload(step)?;
        if let Some(drawn) = drawn {
            self.feed_ids(drawn, runs)?;
        }
        self.end_inputs()?;
        let launch = self.plan_with(shape, decode_rows)?;
        self.enqueue(&launch)
    }

    /// Plans the launches of `shape`: its attention, then its program, loading every kernel and
    /// GEMM the program names.
    pub fn plan(&mut self, shape: StepFacts) -> Result<StepLaunch> {
        self.plan_with(shape, DecodeAttention::Dispatched)
    }

    /// [`GpuModel::plan`] with `decode_rows` the attention of a step of decode rows only (its
    /// [`DecodeAttention::Even`] plan refused for any other step).
    pub fn plan_with(&mut self, shape: StepFacts, decode_rows: DecodeAttention) -> Result<StepLaunch> {
        let attn = self.plan_attention(shape.split, shape.tokens, shape.width, decode_rows)?;
        let rows = row_split(shape);
        let program = StepProgram::build(ProgramShape {
            layers: self.dims.num_layers,
            rows,
            attention_on_rows: matches!(attn, AttnPlan::Decode(_)),
            picked: shape.picked,
            picked_all: shape.picked_all,
            fusion: self.fusion,
            decode_cublas: self.linears.decode_cublas(),
            chunk_fusion: self.chunk_fusion,
            gate_stats: self.gates.is_some(),
            prefill_norms_queries: self.prefill_norms_queries,
            persistent: self.decode_kernel.persistent(shape.tokens),
            fold_o: fold_layout(&attn, &self.dims).is_some_and(|l| l.load_rounds(rows.decodes) <= self.fold_rounds),
        });
        for op in &program.expanded() {
            match *op {
                Op::FoldedO { epilogue, .. } => {
                    let layout = folded_o_layout(&attn, &self.dims)?;
                    let (n, k) = gemm_nk(&self.dims, &self.heads, Weight::O);
                    self.linears.prepare_folded(GemmShape { m: rows.decodes, n, k }, epilogue, layout)?;
                }
                Op::Linear { weight, lane, epilogue, .. } => {
                    let (n, k) = gemm_nk(&self.dims, &self.heads, weight);
                    let m = rows.lane(lane).1;
                    self.linears.prepare(lane, weight, GemmShape { m, n, k }, epilogue)?;
                }
                Op::LmHead { .. } => {
                    self.linears.prepare_head(head_shape(&self.dims, shape.picked))?;
                }
                _ => {}
            }
        }
        let mut launch = StepLaunch { shape, attn, program, mega: None };
        let (ws, counters) = launch.workspace();
        if ws > self.bufs.workspace.len() || counters > self.bufs.counters.len() {
            return Err(Error::Executor(format!(
                "{shape:?} needs {ws} split-K workspace and {counters} counter elements, more than the {} and {} \
                 reserved for the widest step",
                self.bufs.workspace.len(),
                self.bufs.counters.len()
            )));
        }
        if !launch.program.persistent.is_empty() {
            let mut ops = Vec::new();
            self.walk(&launch, &launch.program.persistent, &mut bindings::Sink::Record(&mut ops))?;
            let mega = self.mega(shape.tokens)?;
            launch.mega = Some((mega, self.megas[mega].upload(&self.gpu, &ops)?));
        }
        Ok(launch)
    }

    /// The index in `megas` of the megakernel entry for steps of `rows` rows, loaded on first use.
    fn mega(&mut self, rows: usize) -> Result<usize> {
        let tile = gpu::mega::row_tile(rows)
            .ok_or_else(|| Error::Executor(format!("no megakernel row tile holds a step of {rows} rows")))?;
        if let Some(i) = self.megas.iter().position(|m| m.rows() == tile) {
            return Ok(i);
        }
        self.megas.push(DecodeMega::new(&self.gpu, tile, self.dims.head_dim)?);
        Ok(self.megas.len() - 1)
    }

    /// Records the launch that spreads the inputs' block, `launch` (so each replay runs on the
    /// inputs of the last [`GpuModel::upload_inputs`]), then what `after` enqueues, into a CUDA
    /// graph. Graphs and eager steps share the step buffers and
    /// the split-K workspace: they run one after another on one stream, and none of it moves.
    pub fn capture(&mut self, launch: &StepLaunch, after: impl FnOnce(&mut Self) -> Result<()>) -> Result<Graph> {
        let gpu = self.gpu.clone();
        gpu.capture(|| {
            self.bufs.inputs.spread()?;
            self.enqueue(launch)?;
            after(self)
        })
    }

    /// Enqueues `launch` over the inputs of the last [`GpuModel::upload`] (of `launch`'s shape):
    /// its program's ops, in order.
    pub fn enqueue(&mut self, launch: &StepLaunch) -> Result<()> {
        self.walk(launch, &launch.program.ops, &mut bindings::Sink::Launch)
    }
}

/// The fusions chunk rows can take on a device of compute capability `cc`: those whose GEMMs the
/// WGMMA kernel runs there (sm_90) at the model's shapes. A model takes none of them unless
/// `ASYNCT_CHUNK_FUSION` (a list as `ASYNCT_FUSION`'s for decode rows) or
/// [`GpuModel::set_chunk_fusion`] names some: the WGMMA GEMM with its fused epilogues measured
/// slower than cuBLASLt followed by the separate ops (prefill_heavy_b16 383-391K against
/// 425-427K prompt tok/s on the H200, RESULTS session 14). Unlike decode rows' fusion, this one
/// moves a chunk GEMM from cuBLASLt to the WGMMA kernel, which sums in another order: chunk rows'
/// bits differ between settings, never between the steps of one setting.
fn chunk_fusion_fits(cc: (i32, i32), dims: &ModelDims, heads: &HeadShape) -> Fusion {
    if !gpu::gemm::wgmma_runs_on(cc) {
        return Fusion::NONE;
    }
    let fits = |weight: Weight, epilogue: EpilogueKind| {
        let (n, k) = gemm_nk(dims, heads, weight);
        GemmPlan::wgmma_epilogue(GemmShape { m: 1, n, k }, epilogue).is_ok()
    };
    Fusion {
        qkv: fits(Weight::Qkv, EpilogueKind::QkNormRopeCache),
        peri_ln: fits(Weight::O, EpilogueKind::PeriLn) && fits(Weight::Down, EpilogueKind::PeriLn),
        silu: fits(Weight::GateUp, EpilogueKind::SiluMul),
    }
}

/// The linear layers' row split of a step: its decode rows, then its chunk rows.
fn row_split(shape: StepFacts) -> RowSplit {
    RowSplit { decodes: shape.split.decodes, chunks: shape.tokens - shape.split.decodes }
}
