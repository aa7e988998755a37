//! HP1 attention on the GPU over the paged KV cache: decode, split-K decode, sparse-index PV,
//! fake decode and the tensor-core prefills, MMA and WGMMA (SPEC section 6), planned on the host
//! and launched from `hp1_decode.cu`, `hp1_rows.cu`, `hp1_prefill_mma.cu` and
//! `hp1_prefill_wgmma.cu`.
//!
//! A brief overview:
//! - [`Plan`] (in [`plan`]) is pure host code: from static facts only ([`Geometry`]: the batch
//!   bucket, the head shape, the block table's capacity) it picks the [`AttentionPath`], the
//!   CTA [`Form`] (the QK [`GroupSize`], the [`HeadsPerCta`], the [`QkRounds`] in flight), the
//!   grids and the split-K workspace. [`Plan::auto`] is the dispatcher; [`Plan::new`] and
//!   [`Plan::with_form`] force a plan for tests and benchmarks. A step of decode rows may also
//!   take a second plan, chosen per step from its rows' lengths ([`EvenRows`], in [`even_rows`]).
//! - [`Hp1Attention`] loads a plan's kernels once; [`Hp1Attention::build_rows`] builds the row
//!   metadata of a batch step (every query row becomes a decode row of its own: that is fake
//!   decode, and a decode batch is its special case), and [`Hp1Attention::run`] launches the
//!   attention of one layer on it. Both only launch, so a benchmark times them alone and a CUDA
//!   graph captures them.
//! - [`PrefillPlan`] (in [`prefill_plan`]) is the plan of a tensor-core prefill, and
//!   [`prefill_path`] the step dispatcher choosing among fake decode, MMA and WGMMA from static
//!   facts ([`StepGeometry`]: the decode geometry, the most sequences, the longest query a
//!   sequence may bring) and the device. [`Hp1Prefill`] launches it on [`PrefillOperands`].
//!   The prefill kernels round P to bf16 for the tensor-core PV, so their bits differ from the
//!   decode paths' (SPEC section 4 bounds them at 1e-2 relative L2); they are deterministic and
//!   batch-invariant in their own right (a CTA's work depends on its tile alone).
//! - [`AttnBuffers`] uploads one call's inputs for tests and benchmarks and hands out the
//!   [`Operands`] and [`RowOperands`] views the launches take; the engine builds those views over
//!   buffers of its own.
//!
//! Every path and form gives the same bits for a row (fixed 126-key
//! chunks, fixed reduction orders, an ordered nonzero list): the dispatcher's choice and a
//! request's batch never change its output.
//!
//! ```
//! use gpu::attention::{AttentionPath, Form, Geometry, Plan};
//!
//! // A decode step of 1 sequence with room for 8K tokens.
//! let geometry = Geometry {
//!     rows: 1, num_heads: 8, num_kv_heads: 4, head_dim: 128, block_size: 16, max_blocks_per_seq: 512,
//! };
//! let plan = Plan::auto(geometry).unwrap();
//! assert!(matches!(plan.path, AttentionPath::SplitK(_)));
//! assert_eq!(plan.attention.grid, 8 * 66); // rows x heads x 126-key chunks of the capacity
//! // 32 rows make a grid large enough to give each CTA the two heads of a kv head.
//! let plan = Plan::auto(Geometry { rows: 32, ..geometry }).unwrap();
//! assert_eq!((plan.form, plan.attention.grid), (Form::PAIRED, 32 * 4 * 66));
//! ```
//!
//! Timing a launch (with a GPU): `let attn = Hp1Attention::new(&gpu, plan)?;` and
//! `let mut bufs = AttnBuffers::upload(&gpu, geometry, &host)?;` and
//! `bufs.reserve_workspace(&gpu, attn.plan().workspace_len)?;` once (it also allocates the
//! split-K counters), then
//! `attn.build_rows(bufs.row_operands())?; attn.run(bufs.operands(Settled::Nothing), &gate)?;`
//! per step.

pub mod buffers;
pub mod even_rows;
pub mod gate_stats;
pub mod launch;
pub mod plan;
pub mod prefill_launch;
pub mod prefill_plan;
pub mod rows;

pub use buffers::{AttnBuffers, HostBatch, HostInputs};
pub use even_rows::{DecodeAttention, EvenRows};
pub use gate_stats::{GateCounts, GateStats};
pub use launch::{GateParams, Hp1Attention, LayerBuffers, Operands, Settled};
pub use plan::{
    bucket, dispatch, AttentionPath, Form, Geometry, GroupSize, HeadsPerCta, LaunchShape, Plan, Pv, QkRounds, CHUNK,
    HEAD_DIMS, MAX_FIR_K, PAIR_MIN_CTAS, TWO_ROUND_MAX_CTAS,
};
pub use prefill_launch::{Hp1Prefill, PrefillOperands, QueryNorm};
pub use prefill_plan::{
    prefill_path, PrefillKernel, PrefillPath, PrefillPlan, StepGeometry, FAKE_DECODE_MAX_QUERY, KEY_TILE,
};
pub use rows::{row_metadata, RowOperands};
