//! A step's attention plan: from its static facts (and, for a step of decode rows, the
//! [`DecodeAttention`] its caller chose from the rows' lengths), the decode-path launch for its
//! decode and fake-decode rows and the tensor-core prefill for its chunks; and the layout of the
//! split-K partials that o_proj's folded GEMM reads.

use oracle::model::weights::ModelDims;

use gpu::attention::{
    prefill_path, AttentionPath, DecodeAttention, EvenRows, Geometry, Hp1Attention, Hp1Prefill, Plan, PrefillPath,
    StepGeometry,
};
use gpu::gemm::FoldLayout;

use super::GpuModel;
use crate::error::{Error, Result};
use crate::gpu_backend::step_buffers::Split;

/// How a step's attention runs, decided once per step from its static facts.
pub(super) enum AttnPlan {
    /// Every row through the decode-path kernels (decodes, fake-decode rows or both).
    Decode(Hp1Attention),
    /// The leading decode rows (if any) through the decode kernels, the chunks through a
    /// tensor-core prefill.
    Split { decodes: Option<Hp1Attention>, prefill: Box<Hp1Prefill>, rows: usize },
}

impl GpuModel {
    /// What [`EvenRows`]' rule needs of this model and device.
    pub fn even_rows(&self) -> Result<EvenRows> {
        Ok(EvenRows::on(&self.gpu, self.dims.num_heads, self.dims.num_kv_heads)?)
    }

    fn geometry(&self, rows: usize, width: usize) -> Geometry {
        let d = &self.dims;
        Geometry {
            rows,
            num_heads: d.num_heads,
            num_kv_heads: d.num_kv_heads,
            head_dim: d.head_dim,
            block_size: self.cache.block_size,
            max_blocks_per_seq: width,
        }
    }

    /// The step's attention launches, from its static facts (`decode_rows` the attention of a
    /// step of decode rows only).
    pub(super) fn plan_attention(
        &mut self,
        split: Split,
        tokens: usize,
        width: usize,
        decode_rows: DecodeAttention,
    ) -> Result<AttnPlan> {
        let decode = |model: &mut Self, rows: usize, attention: DecodeAttention| -> Result<Hp1Attention> {
            let plan = Plan::decode_rows(model.geometry(rows, width), attention)?;
            Ok(Hp1Attention::new(&model.gpu, plan)?)
        };
        if split.decodes == split.seqs {
            return Ok(AttnPlan::Decode(decode(self, tokens, decode_rows)?));
        }
        if decode_rows != DecodeAttention::Dispatched {
            return Err(Error::Executor(format!(
                "{decode_rows:?} attention is for steps of decode rows only, not {split:?}"
            )));
        }
        let prefill_rows = tokens - split.decodes;
        let geometry = StepGeometry {
            base: self.geometry(prefill_rows, width),
            max_seqs: split.seqs - split.decodes,
            max_query_len: split.max_query_len,
        };
        match prefill_path(geometry, self.gpu.info().compute_capability)? {
            // Fake decode runs the decode kernels, whose rows are invariant to their neighbours:
            // one launch serves decodes and chunks alike.
            PrefillPath::FakeDecode(_) => Ok(AttnPlan::Decode(decode(self, tokens, DecodeAttention::Dispatched)?)),
            PrefillPath::Prefill(plan) => {
                let decodes = match split.decodes {
                    0 => None,
                    n => Some(decode(self, n, DecodeAttention::Dispatched)?),
                };
                Ok(AttnPlan::Split {
                    decodes,
                    prefill: Box::new(Hp1Prefill::new(&self.gpu, plan)?),
                    rows: prefill_rows,
                })
            }
        }
    }
}

/// The layout of the partials the step's attention leaves where it runs split-K over every row
/// (what o_proj's folded GEMM reads, [`crate::gpu_backend::step_program::Op::FoldedO`]).
pub(super) fn fold_layout(attn: &AttnPlan, d: &ModelDims) -> Option<FoldLayout> {
    match attn {
        AttnPlan::Decode(a) if matches!(a.plan().path, AttentionPath::SplitK(_)) => {
            Some(FoldLayout { heads: d.num_heads, head_dim: d.head_dim, max_chunks: a.plan().geometry.max_chunks() })
        }
        _ => None,
    }
}

/// [`fold_layout`] for a step whose program has an [`crate::gpu_backend::step_program::Op::FoldedO`], which only such an attention
/// allows.
pub(super) fn folded_o_layout(attn: &AttnPlan, d: &ModelDims) -> Result<FoldLayout> {
    fold_layout(attn, d).ok_or_else(|| Error::Executor("a folded o_proj beside no split-K attention".into()))
}
