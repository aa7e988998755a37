//! Launching a [`PrefillPlan`]: [`Hp1Prefill`] holds the plan and its loaded entry point, and
//! [`Hp1Prefill::run`] checks buffer sizes and launches, nothing else, so a benchmark times it
//! alone. The prefill kernels read the batch straight from `seq_lens` and `query_start_loc`
//! (no row metadata). Given a [`QueryNorm`], they read their queries from the qkv projection and
//! norm and rotate them themselves (`norm_rope.cuh`), with the bits of
//! [`crate::ops::QkNormRopeCache`], which then need not write q at all.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, CudaView, LaunchConfig};

use super::launch::{check_len, GateParams, LayerBuffers};
use super::prefill_plan::{PrefillKernel, PrefillPlan};
use crate::error::{unsupported, Error, Result};
use crate::kernels::{HP1_PREFILL_MMA, HP1_PREFILL_WGMMA};
use crate::ops::{RopeTable, UClipNormParams};
use crate::runtime::{launch_error, Gpu, Launch};

/// The q norm and RoPE a prefill kernel applies to its queries itself: `layer.q` is then the
/// qkv projection's rows (`[rows, (Hq + 2 Hkv) * D]`, q heads first, each in the permuted
/// layout of [`crate::gemm::layout`]) and `q_row_stride` their width. A query is rotated at its
/// place in its sequence (`seq_len - query_len + i`), which is where the causal mask puts it and
/// what the engine's positions hold for it; past the table it is clamped into it, as the qk pass
/// clamps (and reports) it.
pub struct QueryNorm<'a> {
    /// The RoPE table over D.
    pub rope: &'a RopeTable,
    /// The layer's q norm over D.
    pub norm: &'a UClipNormParams,
}

/// The device buffers of one prefill call: the layer's buffers and the batch metadata the
/// prefill kernels read directly (no row metadata; shapes in the header of `hp1_prefill_mma.cu`).
pub struct PrefillOperands<'a> {
    /// Queries, cache, gate weights and output; rows of `out` past the batch's last query are
    /// left as they are.
    pub layer: LayerBuffers<'a>,
    /// `[num_seqs]` tokens cached after this step.
    pub seq_lens: CudaView<'a, i32>,
    /// `[num_seqs + 1]` cumulative query counts from 0.
    pub query_start_loc: CudaView<'a, i32>,
    /// Sequences in the batch, at most the plan's `max_seqs`.
    pub num_seqs: usize,
    /// `Some`: `layer.q` holds the qkv rows, normed and rotated by the kernel; `None`: `layer.q`
    /// holds the normed, rotated queries.
    pub query_norm: Option<QueryNorm<'a>>,
}

/// A prefill plan with its entry points loaded: the general gate and, where the kernel has one,
/// the variant specialised at compile time for the model's gate (3 taps, `relu_pre`; the WGMMA
/// kernel's gates in the unit form).
pub struct Hp1Prefill {
    plan: PrefillPlan,
    stream: Arc<CudaStream>,
    general: CudaFunction,
    specialised: Option<CudaFunction>,
    late_clamp: bool,
}

impl Hp1Prefill {
    /// Loads the plan's kernel (compiling its file on first use) and allows its shared memory.
    pub fn new(gpu: &Gpu, plan: PrefillPlan) -> Result<Self> {
        let cc = gpu.info().compute_capability;
        if !plan.kernel.runs_on(cc) {
            return Err(Error::Unsupported {
                entry: plan.entry.clone(),
                reason: format!("{} does not run on compute capability {}.{}", plan.kernel.name(), cc.0, cc.1),
            });
        }
        let kernel = match plan.kernel {
            PrefillKernel::Mma => &HP1_PREFILL_MMA,
            PrefillKernel::Wgmma => &HP1_PREFILL_WGMMA,
        };
        let general = gpu.function(kernel, &plan.entry)?;
        gpu.set_max_dynamic_smem(&general, plan.shared_bytes)?;
        let specialised = match &plan.specialised_entry {
            Some(entry) => {
                let f = gpu.function(kernel, entry)?;
                gpu.set_max_dynamic_smem(&f, plan.shared_bytes)?;
                Some(f)
            }
            None => None,
        };
        Ok(Self { plan, stream: gpu.stream().clone(), general, specialised, late_clamp: true })
    }

    /// The WGMMA kernel gating every tile in f32 as the oracle writes it, where it otherwise
    /// clamps the tiles below the diagonal after rounding them to bf16 pairs (the same bits,
    /// `hp1_prefill_gate.cuh`'s `clamp_bf16x2`, in fewer instructions): the other side of the GPU
    /// check that holds the two equal. The MMA kernel gates in f32 either way.
    pub fn with_exact_gate(mut self) -> Self {
        self.late_clamp = false;
        self
    }

    /// The plan being launched.
    pub fn plan(&self) -> &PrefillPlan {
        &self.plan
    }

    /// Launches the prefill kernel; checks the gate parameters and every buffer's size first.
    pub fn run(&self, ops: PrefillOperands<'_>, gate: &GateParams) -> Result<()> {
        gate.validate()?;
        let PrefillOperands { layer, seq_lens, query_start_loc, num_seqs, query_norm } = ops;
        let sg = self.plan.geometry;
        let g = sg.base;
        let entry = self.plan.entry_for(gate);
        let function = match &self.specialised {
            Some(f) if entry != self.plan.entry => f,
            _ => &self.general,
        };
        if num_seqs == 0 || num_seqs > sg.max_seqs {
            return Err(unsupported(entry, format!("num_seqs must be 1 to {}, got {num_seqs}", sg.max_seqs)));
        }
        layer.check(entry, &g, &self.stream)?;
        check_len(entry, "block_table", layer.block_table.len(), num_seqs * g.max_blocks_per_seq)?;
        check_len(entry, "seq_lens", seq_lens.len(), num_seqs)?;
        check_len(entry, "query_start_loc", query_start_loc.len(), num_seqs + 1)?;
        if let Some(qn) = &query_norm {
            for (what, d) in [("the RoPE table", qn.rope.head_dim()), ("the q norm", qn.norm.channels())] {
                if d != g.head_dim {
                    return Err(unsupported(
                        entry,
                        format!("{what} is over {d} channels, not head_dim {}", g.head_dim),
                    ));
                }
            }
        }
        let LayerBuffers { q, q_row_stride, key_cache, value_cache, block_table, sigma, gamma, mut out } = layer;

        let q_row_stride = q_row_stride as i64;
        let (max_blocks, seqs) = (g.max_blocks_per_seq as i32, num_seqs as i32);
        let (heads, kv_heads, log2_block) =
            (g.num_heads as i32, g.num_kv_heads as i32, g.block_size.trailing_zeros() as i32);
        let (fir_k, relu_pre) = (gate.fir_k as i32, i32::from(gate.relu_pre));
        let cfg = LaunchConfig {
            grid_dim: (self.plan.grid.0, self.plan.grid.1, 1),
            block_dim: (self.plan.block, 1, 1),
            shared_mem_bytes: self.plan.shared_bytes,
        };
        let mut launch = Launch::new(&self.stream, function);
        launch.arg(&q).arg(&q_row_stride);
        match &query_norm {
            Some(qn) => {
                let max_pos = i32::try_from(qn.rope.max_pos())
                    .map_err(|_| unsupported(entry, "the RoPE table has more than i32::MAX rows".into()))?;
                launch.arg(qn.rope.table()).arg(&max_pos);
                qn.norm.push(&mut launch);
            }
            // No table: q is already normed; the norm is never read.
            None => {
                launch.arg(&0u64).arg(&0i32);
                UClipNormParams::push_absent(&mut launch);
            }
        }
        launch
            .arg(&key_cache)
            .arg(&value_cache)
            .arg(&block_table)
            .arg(&max_blocks)
            .arg(&seq_lens)
            .arg(&query_start_loc)
            .arg(&seqs)
            .arg(&sigma)
            .arg(&gamma)
            .arg(&heads)
            .arg(&kv_heads)
            .arg(&log2_block)
            .arg(&gate.scale)
            .arg(&fir_k)
            .arg(&relu_pre)
            .arg(&gate.clip_min)
            .arg(&gate.clip_max)
            .arg(&mut out);
        if self.plan.kernel == PrefillKernel::Wgmma {
            launch.arg(&i32::from(self.late_clamp));
        }
        // SAFETY: the arguments match the prefill entries' signature (the header of
        // hp1_prefill_mma.cu, shared by hp1_prefill_wgmma.cu, whose entries add `late_clamp`),
        // and every buffer was checked above against what the grid reaches (positions are clamped
        // into the RoPE table on the device); block-table entries were checked when uploaded.
        unsafe { launch.launch(cfg) }.map_err(launch_error(entry, &cfg))?;
        Ok(())
    }
}
