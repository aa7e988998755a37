//! Launching a [`Plan`]: [`Hp1Attention`] holds the plan and its loaded entry points, and
//! [`Hp1Attention::run`] only checks buffer sizes and launches, so a benchmark can time it alone
//! and a CUDA graph can capture it (nothing in it synchronises, allocates or copies).

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, CudaView, CudaViewMut, LaunchConfig};
use half::bf16;

use super::plan::{AttentionPath, Geometry, Plan, MAX_FIR_K};
use crate::error::{unsupported, Error, Result};
use crate::kernels::{HP1_DECODE, HP1_ROWS};
use crate::mega::MegaOp;
use crate::runtime::{check_aligned, launch_error, Gpu, Launch};

/// The gate parameters shared by all heads of a layer (SPEC section 2).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GateParams {
    /// Multiplies `q . k`.
    pub scale: f32,
    /// FIR taps `F`, 1 to [`MAX_FIR_K`].
    pub fir_k: usize,
    /// Whether scores are rectified before the FIR.
    pub relu_pre: bool,
    /// Lower clamp bound.
    pub clip_min: f32,
    /// Upper clamp bound, above `clip_min`.
    pub clip_max: f32,
}

impl GateParams {
    /// Checks `1 <= fir_k <= MAX_FIR_K`, a finite scale and finite `clip_min < clip_max`.
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| Err(Error::Unsupported { entry: "hp1 attention".to_string(), reason });
        if !(1..=MAX_FIR_K).contains(&self.fir_k) {
            return bad(format!("fir_k must be 1 to {MAX_FIR_K}, got {}", self.fir_k));
        }
        if !self.scale.is_finite() {
            return bad(format!("scale must be finite, got {}", self.scale));
        }
        if !(self.clip_min.is_finite() && self.clip_max.is_finite() && self.clip_min < self.clip_max) {
            return bad(format!("need finite clip_min < clip_max, got {} and {}", self.clip_min, self.clip_max));
        }
        Ok(())
    }

    /// Whether the gate may run in the unit form of the WGMMA prefill's specialised entries
    /// (`hp1_prefill_gate.cuh`, UNIT FORM): on `q . k` unscaled, with the bounds divided by
    /// `scale` and `gamma * scale` multiplied into the output. That takes a positive normal
    /// `scale` and bounds whose quotients by it are finite, in f32 as the kernel divides.
    pub fn has_unit_form(&self) -> bool {
        self.scale > 0.0
            && self.scale.is_normal()
            && (self.clip_min / self.scale).is_finite()
            && (self.clip_max / self.scale).is_finite()
    }
}

/// The buffers every HP1 attention launch takes, decode and prefill alike: one layer's queries,
/// its paged cache, its gate weights and the output (shapes in the kernel header of
/// `hp1_decode.cu`). Both launches check their sizes and alignment before anything is launched.
pub struct LayerBuffers<'a> {
    /// `[rows, q_row_stride]`: head `h` of row `r` at `r * q_row_stride + h * D`. Like the
    /// caches and the workspace, it must start on a 16-byte boundary (it is read in vectors).
    pub q: CudaView<'a, bf16>,
    /// Elements between rows of `q`, at least `Hq * D` and a multiple of 8.
    pub q_row_stride: usize,
    /// `[num_blocks, block_size, Hkv, D]`.
    pub key_cache: CudaView<'a, bf16>,
    /// `[num_blocks, block_size, Hkv, D]`.
    pub value_cache: CudaView<'a, bf16>,
    /// `[num_seqs, max_blocks_per_seq]` physical block numbers.
    pub block_table: CudaView<'a, i32>,
    /// `[Hq]` FIR weights.
    pub sigma: CudaView<'a, f32>,
    /// `[Hq]` output gains.
    pub gamma: CudaView<'a, f32>,
    /// `[rows, Hq, D]` out, on a 16-byte boundary (the WGMMA prefill writes it in vectors).
    pub out: CudaViewMut<'a, bf16>,
}

impl LayerBuffers<'_> {
    /// Checks `q`'s stride and reach, the caches, the per-head arrays, the output and the
    /// alignment of the buffers read or written in vectors against `g` (the block table's shape
    /// is the caller's: decode and prefill read it differently).
    pub(super) fn check(&self, entry: &str, g: &Geometry, stream: &CudaStream) -> Result<()> {
        let head_row = g.num_heads * g.head_dim;
        let stride = self.q_row_stride;
        if stride < head_row || !stride.is_multiple_of(8) {
            return Err(unsupported(
                entry,
                format!("q_row_stride must be a multiple of 8 of at least Hq * D = {head_row}, got {stride}"),
            ));
        }
        check_len(entry, "q", self.q.len(), (g.rows - 1) * stride + head_row)?;
        check_caches(entry, g, self.key_cache.len(), self.value_cache.len())?;
        check_len(entry, "sigma", self.sigma.len(), g.num_heads)?;
        check_len(entry, "gamma", self.gamma.len(), g.num_heads)?;
        check_len(entry, "out", self.out.len(), g.rows * head_row)?;
        check_aligned(stream, entry, "q", &self.q)?;
        check_aligned(stream, entry, "key_cache", &self.key_cache)?;
        check_aligned(stream, entry, "value_cache", &self.value_cache)?;
        check_aligned(stream, entry, "out", &self.out)
    }
}

/// The device buffers of a decode or split-K launch: the layer's buffers and the row metadata.
pub struct Operands<'a> {
    /// Queries, cache, gate weights and output.
    pub layer: LayerBuffers<'a>,
    /// `[rows]` from [`Hp1Attention::build_rows`].
    pub row_seq: CudaView<'a, i32>,
    /// `[rows]` from [`Hp1Attention::build_rows`].
    pub row_len: CudaView<'a, i32>,
    /// At least [`Plan::workspace_len`] f32s for split-K; `None` is fine for decode.
    pub workspace: Option<CudaViewMut<'a, f32>>,
    /// At least [`Plan::counter_len`] i32s for split-K, all zero (a launch leaves them zero);
    /// `None` for decode, and for split-K that leaves its partials.
    pub counters: Option<CudaViewMut<'a, i32>>,
    /// Split-K only: leave the chunks' partials in `workspace` for their reader to add
    /// ([`crate::gemm::FoldedX`], the same additions) instead of counting them on `counters`;
    /// `out` then gets only the zeros of rows without keys.
    pub leave_partials: bool,
    /// What the kernel launched just before this one on the stream left alone.
    pub settled: Settled,
}

/// What an attention launch's predecessor on the stream (the kernel launched just before it)
/// did not write: the attention reads it while that kernel finishes (PDL). Each variant says
/// more than the one before it; a claim that is not true is a race.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// Nothing: the kernel waits for its predecessor before it reads anything. Always safe.
    Nothing,
    /// `row_seq`, `row_len` and the block table were written before the predecessor started
    /// (not right after [`Hp1Attention::build_rows`]): two memory round trips off the start.
    Rows,
    /// As [`Settled::Rows`], and each row's keys but its newest (`row_len - 1`) were in the
    /// caches before the predecessor started: true of decode rows, whose newest key the step
    /// writes, and never of a prefill chunk's rows. Split-K's small-grid entries then load their
    /// first K before the wait (`hp1_attention.cuh`'s EARLY K), the same bits.
    OlderKeys,
}

impl Settled {
    /// The entry's `settled` argument (`hp1_decode.cu`).
    fn code(self) -> i32 {
        match self {
            Settled::Nothing => 0,
            Settled::Rows => 1,
            Settled::OlderKeys => 2,
        }
    }
}

/// A plan with its entry points loaded, ready to launch on the GPU's stream.
pub struct Hp1Attention {
    plan: Plan,
    stream: Arc<CudaStream>,
    rows: CudaFunction,
    attention: CudaFunction,
}

impl Hp1Attention {
    /// Loads the plan's kernels (compiling `hp1_decode.cu` and `hp1_rows.cu` on first use).
    pub fn new(gpu: &Gpu, plan: Plan) -> Result<Self> {
        let rows = gpu.function(&HP1_ROWS, &plan.rows.entry)?;
        let attention = gpu.function(&HP1_DECODE, &plan.attention.entry)?;
        Ok(Self { plan, stream: gpu.stream().clone(), rows, attention })
    }

    /// The plan being launched.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    pub(super) fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub(super) fn rows_function(&self) -> &CudaFunction {
        &self.rows
    }

    /// Launches the attention kernel (decode or split-K) on the row metadata in
    /// `ops`; checks the gate parameters and every buffer's size first. Launch only.
    pub fn run(&self, ops: Operands<'_>, gate: &GateParams) -> Result<()> {
        let entry = self.plan.attention.entry.as_str();
        let cfg = launch_config(self.plan.attention.grid, self.plan.attention.block);
        let mut launch = Launch::new(&self.stream, &self.attention);
        self.push(&mut launch, ops, gate)?;
        // SAFETY: the arguments match the entry's signature (HP1_ATTENTION_PARAMS, then `out` for
        // decode, or the partials, the counters (zero, as every launch leaves them, or null to
        // leave the partials) and `out` for split-K, then `settled`), and every buffer was
        // checked against the grid's reach.
        unsafe { launch.launch(cfg) }.map_err(launch_error(entry, &cfg))?;
        Ok(())
    }

    /// What [`Hp1Attention::run`] would launch, as a task of the decode megakernel instead
    /// ([`crate::mega`]): the same checks, then the entry's arguments.
    pub fn record(&self, ops: Operands<'_>, gate: &GateParams) -> Result<MegaOp> {
        if ops.leave_partials {
            let why = "the megakernel's split-K finishes its rows itself: it leaves no partials".into();
            return Err(unsupported(&self.plan.attention.entry, why));
        }
        let mut launch = Launch::new(&self.stream, &self.attention);
        self.push(&mut launch, ops, gate)?;
        MegaOp::attention(&self.plan, launch.into_slots())
    }

    /// Checks the gate parameters and every buffer against the plan, then appends the entry's
    /// arguments.
    fn push(&self, launch: &mut Launch<'_>, ops: Operands<'_>, gate: &GateParams) -> Result<()> {
        gate.validate()?;
        let Operands { layer, row_seq, row_len, workspace, counters, leave_partials, settled } = ops;
        let g = self.plan.geometry;
        let entry = self.plan.attention.entry.as_str();
        layer.check(entry, &g, &self.stream)?;
        let block_table_len = layer.block_table.len();
        if block_table_len < g.max_blocks_per_seq || block_table_len % g.max_blocks_per_seq != 0 {
            return Err(unsupported(
                entry,
                format!("block_table must be whole rows of {} entries, got {block_table_len}", g.max_blocks_per_seq),
            ));
        }
        check_len(entry, "row_seq", row_seq.len(), g.rows)?;
        check_len(entry, "row_len", row_len.len(), g.rows)?;
        let LayerBuffers { q, q_row_stride, key_cache, value_cache, block_table, sigma, gamma, mut out } = layer;

        let q_row_stride = q_row_stride as i64;
        let (max_blocks, heads, kv_heads) = (g.max_blocks_per_seq as i32, g.num_heads as i32, g.num_kv_heads as i32);
        let (log2_block, max_chunks) = (g.block_size.trailing_zeros() as i32, g.max_chunks() as i32);
        let (fir_k, relu_pre) = (gate.fir_k as i32, i32::from(gate.relu_pre));
        launch
            .arg(&q)
            .arg(&q_row_stride)
            .arg(&key_cache)
            .arg(&value_cache)
            .arg(&block_table)
            .arg(&max_blocks)
            .arg(&row_seq)
            .arg(&row_len)
            .arg(&sigma)
            .arg(&gamma)
            .arg(&heads)
            .arg(&kv_heads)
            .arg(&log2_block)
            .arg(&max_chunks)
            .arg(&gate.scale)
            .arg(&fir_k)
            .arg(&relu_pre)
            .arg(&gate.clip_min)
            .arg(&gate.clip_max);
        let settled = settled.code();
        match self.plan.path {
            AttentionPath::Decode(_) if leave_partials => {
                return Err(unsupported(entry, "only split-K leaves partials for their reader".into()));
            }
            AttentionPath::Decode(_) => {
                launch.arg(&mut out).arg(&settled);
            }
            AttentionPath::SplitK(_) => {
                let mut workspace = workspace.ok_or_else(|| {
                    unsupported(entry, format!("split-K needs a workspace of {} f32s", self.plan.workspace_len))
                })?;
                check_len(entry, "workspace", workspace.len(), self.plan.workspace_len)?;
                check_aligned(&self.stream, entry, "workspace", &workspace)?;
                launch.arg(&mut workspace);
                match (counters, leave_partials) {
                    (None, true) => launch.arg(&0u64),
                    (Some(_), true) => {
                        return Err(unsupported(entry, "counters given to a launch that leaves its partials".into()))
                    }
                    (Some(mut counters), false) => {
                        check_len(entry, "counters", counters.len(), self.plan.counter_len)?;
                        launch.arg(&mut counters)
                    }
                    (None, false) => {
                        return Err(unsupported(
                            entry,
                            format!("split-K needs {} zeroed i32 counters", self.plan.counter_len),
                        ))
                    }
                };
                launch.arg(&mut out).arg(&settled);
            }
        }
        Ok(())
    }
}

fn launch_config(grid: u32, block: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (block, 1, 1), shared_mem_bytes: 0 }
}

/// Refuses caches that are not whole blocks, or that hold more token rows than the kernels'
/// 31-bit cache-row indices reach (`block * block_size + offset` is an `int` on the device).
fn check_caches(entry: &str, g: &Geometry, key_len: usize, value_len: usize) -> Result<()> {
    let block = g.block_size * g.num_kv_heads * g.head_dim;
    if key_len < block || !key_len.is_multiple_of(block) || value_len != key_len {
        return Err(unsupported(
            entry,
            format!("key_cache and value_cache must both be whole blocks of {block} elements, got {key_len} and {value_len}"),
        ));
    }
    let token_rows = key_len / (g.num_kv_heads * g.head_dim);
    if token_rows > i32::MAX as usize {
        return Err(unsupported(
            entry,
            format!("the caches hold {token_rows} token rows, the kernels index at most {}", i32::MAX),
        ));
    }
    Ok(())
}

/// Refuses a buffer shorter than a launch reaches.
pub(super) fn check_len(entry: &str, name: &str, got: usize, need: usize) -> Result<()> {
    if got < need {
        return Err(unsupported(entry, format!("`{name}` holds {got} elements, the launch needs {need}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::plan::{AttentionPath, Form, Geometry, Pv, HEAD_DIMS};
    use crate::runtime::cubin::functions;
    use crate::runtime::kernel_cache::compile;
    use crate::runtime::nvrtc_available;

    #[test]
    fn gate_parameters_are_checked_with_their_values() {
        let ok = GateParams { scale: 0.125, fir_k: 3, relu_pre: true, clip_min: 0.0, clip_max: 1.0 };
        ok.validate().unwrap();
        for (bad, needle) in [
            (GateParams { fir_k: 0, ..ok }, "fir_k must be 1 to 8, got 0"),
            (GateParams { fir_k: 9, ..ok }, "got 9"),
            (GateParams { scale: f32::NAN, ..ok }, "scale"),
            (GateParams { clip_min: 1.0, ..ok }, "got 1 and 1"),
            (GateParams { clip_max: f32::INFINITY, ..ok }, "clip_min < clip_max"),
        ] {
            let err = bad.validate().unwrap_err().to_string();
            assert!(err.contains(needle), "expected `{needle}` in: {err}");
        }
    }

    #[test]
    fn caches_must_be_whole_blocks_with_rows_indexable_in_31_bits() {
        let g =
            Geometry { rows: 1, num_heads: 8, num_kv_heads: 4, head_dim: 128, block_size: 16, max_blocks_per_seq: 4 };
        let block = 16 * 4 * 128;
        check_caches("e", &g, 3 * block, 3 * block).unwrap();
        for (key, value, needle) in [
            (0, 0, "whole blocks of 8192 elements, got 0 and 0"),
            (3 * block + 1, 3 * block + 1, "got 24577"),
            (3 * block, 2 * block, "got 24576 and 16384"),
        ] {
            let err = check_caches("e", &g, key, value).unwrap_err().to_string();
            assert!(err.contains(needle), "expected `{needle}` in: {err}");
        }
        // The last indexable row count passes, one block more does not.
        let rows_max = (i32::MAX as usize + 1) / 16 * 16;
        let fits = (rows_max - 16) * 4 * 128;
        check_caches("e", &g, fits, fits).unwrap();
        let over = rows_max * 4 * 128;
        let err = check_caches("e", &g, over, over).unwrap_err().to_string();
        assert!(err.contains(&format!("hold {rows_max} token rows")), "{err}");
    }

    #[test]
    fn every_entry_a_plan_can_name_is_in_the_compiled_kernels() {
        if !nvrtc_available() {
            println!("SKIPPED: no NVRTC library here (scripts/local-nvrtc.sh installs one)");
            return;
        }
        let entries = |k| functions(&compile(k, "sm_90a").unwrap_or_else(|e| panic!("{e}"))).unwrap();
        let (decode, rows) = (entries(&HP1_DECODE), entries(&HP1_ROWS));
        let has = |names: &[String], entry: &str| names.iter().any(|n| n == entry);
        for d in HEAD_DIMS {
            let g = Geometry {
                rows: 4,
                num_heads: 2,
                num_kv_heads: 1,
                head_dim: d,
                block_size: 16,
                max_blocks_per_seq: 64,
            };
            for path in [Pv::Dense, Pv::Sparse]
                .into_iter()
                .flat_map(|pv| [AttentionPath::Decode(pv), AttentionPath::SplitK(pv)])
            {
                for form in Form::ALL {
                    let plan = Plan::with_form(g, path, form).unwrap();
                    assert!(has(&decode, &plan.attention.entry), "{} missing", plan.attention.entry);
                    assert!(has(&rows, &plan.rows.entry));
                }
            }
        }
    }
}
