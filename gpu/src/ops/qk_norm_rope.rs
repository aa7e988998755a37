//! The fused q/k UClipNorm + RoPE + paged KV-cache write between the qkv GEMM and attention
//! (`qk_norm_rope_cache.cu`).
//!
//! One launch per layer reads the fused projection `[tokens, (Hq + 2 Hkv) * D]` (q heads, then
//! k heads, then v heads, each q and k head's channels in the permuted order of the qkv weight,
//! [`crate::gemm::layout`]), writes the normed, rotated, bf16-rounded queries `[tokens, Hq, D]`
//! for attention (unless the prefill attention norms them itself,
//! [`crate::attention::QueryNorm`]), and stores the normed, rotated keys and the values into the
//! paged cache at each token's slot (a negative slot is padding: nothing is written). The skinny GEMM's
//! [`crate::gemm::EpilogueKind::QkNormRopeCache`] does the same inside the qkv GEMM, with the
//! same bits (decode rows); this op serves the rows cuBLASLt computes.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, CudaView, CudaViewMut};
use half::bf16;

use super::{as_i32, check_aligned, check_len, elementwise_config, unsupported, Faults, RopeTable, UClipNormParams};
use crate::error::Result;
use crate::kernels::QK_NORM_ROPE_CACHE;
use crate::runtime::{launch_error, Gpu, Launch};

/// The kernel's entry point, and the name its errors carry.
const ENTRY: &str = "qk_norm_rope_cache";

/// Heads and channels of a model's attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadShape {
    /// `Hq`, query heads.
    pub num_heads: usize,
    /// `Hkv`, key/value heads.
    pub num_kv_heads: usize,
    /// `D`, channels per head: a multiple of 16 here (8 rotation pairs per thread).
    pub head_dim: usize,
}

impl HeadShape {
    /// Elements in one token's row of the fused qkv projection: `(Hq + 2 Hkv) * D`.
    pub fn qkv_width(&self) -> usize {
        (self.num_heads + 2 * self.num_kv_heads) * self.head_dim
    }

    /// Elements in one token's row of q (and of the attention output): `Hq * D`.
    pub fn q_width(&self) -> usize {
        self.num_heads * self.head_dim
    }

    /// Checks what the kernels take: Hq a positive multiple of Hkv, D a positive multiple of 16
    /// matching `rope`, and a qkv row within an `int`; errors name `entry`.
    pub(crate) fn check(&self, entry: &str, rope: &RopeTable) -> Result<()> {
        let HeadShape { num_heads, num_kv_heads, head_dim } = *self;
        if num_kv_heads == 0 || num_heads == 0 || !num_heads.is_multiple_of(num_kv_heads) {
            return Err(unsupported(
                entry,
                format!("num_heads ({num_heads}) must be a positive multiple of num_kv_heads ({num_kv_heads})"),
            ));
        }
        if head_dim == 0 || !head_dim.is_multiple_of(16) {
            return Err(unsupported(entry, format!("head_dim must be a positive multiple of 16, got {head_dim}")));
        }
        if rope.head_dim() != head_dim {
            return Err(unsupported(
                entry,
                format!("the RoPE table is for head_dim {}, not {head_dim}", rope.head_dim()),
            ));
        }
        as_i32(entry, "qkv row width", self.qkv_width())?;
        Ok(())
    }

    /// The kernels' ints `max_pos, num_heads, num_kv_heads, head_dim`, after [`HeadShape::check`].
    pub(crate) fn ints(&self, entry: &str, rope: &RopeTable) -> Result<[i32; 4]> {
        Ok([
            as_i32(entry, "max_pos", rope.max_pos())?,
            as_i32(entry, "num_heads", self.num_heads)?,
            as_i32(entry, "num_kv_heads", self.num_kv_heads)?,
            as_i32(entry, "head_dim", self.head_dim)?,
        ])
    }

    /// Checks that `q_norm` and `k_norm` are over D.
    pub(crate) fn check_norms(&self, entry: &str, q_norm: &UClipNormParams, k_norm: &UClipNormParams) -> Result<()> {
        for (what, norm) in [("q_norm", q_norm), ("k_norm", k_norm)] {
            if norm.channels() != self.head_dim {
                return Err(unsupported(
                    entry,
                    format!("{what} has {} channels, expected {}", norm.channels(), self.head_dim),
                ));
            }
        }
        Ok(())
    }

    /// The slots of a key cache and value cache of `key` and `value` elements, which must be
    /// equal whole slots of `Hkv * D`.
    pub(crate) fn cache_slots(&self, entry: &str, key: usize, value: usize) -> Result<i64> {
        let slot_width = self.num_kv_heads * self.head_dim;
        if !key.is_multiple_of(slot_width) || value != key {
            return Err(unsupported(
                entry,
                format!(
                    "key_cache ({key}) and value_cache ({value}) must be equal whole slots of Hkv * D = {slot_width}"
                ),
            ));
        }
        Ok((key / slot_width) as i64)
    }
}

/// One step's inputs.
pub struct QkvInputs<'a> {
    /// `[tokens, (Hq + 2 Hkv) * D]` bf16, the fused q/k/v projection (q heads, k heads, v heads;
    /// q and k channels in the permuted order of [`crate::gemm::layout`]).
    pub qkv: CudaView<'a, bf16>,
    /// `[tokens]` absolute positions, each below the RoPE table's `max_pos`.
    pub positions: CudaView<'a, i32>,
    /// `[tokens]` cache slots `block * block_size + offset`; negative = padding (no write).
    pub slot_mapping: CudaView<'a, i64>,
}

/// Where one step's results go.
pub struct QkvOutputs<'a> {
    /// `[tokens, Hq, D]` bf16 queries, normed and rotated; `None` writes no queries (the
    /// prefill attention norms them from qkv itself).
    pub q: Option<CudaViewMut<'a, bf16>>,
    /// `[num_blocks, block_size, Hkv, D]` bf16; the keys land at their slots.
    pub key_cache: CudaViewMut<'a, bf16>,
    /// `[num_blocks, block_size, Hkv, D]` bf16; the values land at their slots.
    pub value_cache: CudaViewMut<'a, bf16>,
}

/// `qk_norm_rope_cache.cu`, loaded, with the model's head shape and RoPE table.
pub struct QkNormRopeCache {
    stream: Arc<CudaStream>,
    func: CudaFunction,
    heads: HeadShape,
    rope: RopeTable,
}

impl QkNormRopeCache {
    /// Loads the kernel for `heads` (Hq a positive multiple of Hkv, D a multiple of 16 matching
    /// the table).
    pub fn new(gpu: &Gpu, heads: HeadShape, rope: RopeTable) -> Result<Self> {
        heads.check(ENTRY, &rope)?;
        Ok(Self { stream: gpu.stream().clone(), func: gpu.function(&QK_NORM_ROPE_CACHE, ENTRY)?, heads, rope })
    }

    /// The head shape launched for.
    pub fn heads(&self) -> HeadShape {
        self.heads
    }

    /// The RoPE table (for the qkv GEMM's fused epilogue, [`crate::gemm::Epilogue::QkNormRopeCache`]).
    pub fn rope(&self) -> &RopeTable {
        &self.rope
    }

    /// Norms and rotates q and k of every token, writes q to `out.q` (if any) and k, v to the
    /// caches at the token's slot. `q_norm` and `k_norm` are over `D`. A position outside the table or a
    /// slot past the cache is masked and recorded in `faults`. Launch only.
    pub fn run(
        &self,
        q_norm: &UClipNormParams,
        k_norm: &UClipNormParams,
        inputs: &QkvInputs<'_>,
        out: &mut QkvOutputs<'_>,
        faults: &mut Faults,
    ) -> Result<()> {
        let head_dim = self.heads.head_dim;
        self.heads.check_norms(ENTRY, q_norm, k_norm)?;
        let tokens = inputs.positions.len();
        check_len(ENTRY, "slot_mapping", inputs.slot_mapping.len(), tokens)?;
        check_len(ENTRY, "qkv", inputs.qkv.len(), tokens * self.heads.qkv_width())?;
        if let Some(q) = &out.q {
            check_len(ENTRY, "q", q.len(), tokens * self.heads.q_width())?;
            check_aligned(&self.stream, ENTRY, "q", q)?;
        }
        let num_slots = self.heads.cache_slots(ENTRY, out.key_cache.len(), out.value_cache.len())?;
        check_aligned(&self.stream, ENTRY, "qkv", &inputs.qkv)?;
        check_aligned(&self.stream, ENTRY, "key_cache", &out.key_cache)?;
        check_aligned(&self.stream, ENTRY, "value_cache", &out.value_cache)?;
        if tokens == 0 {
            return Ok(());
        }
        // One thread per 8-pair chunk of a token (qk_norm_rope_cache.cu, Work).
        let per_token = head_dim / 16;
        let [max_pos, heads_i, kv_heads_i, head_dim_i] = self.heads.ints(ENTRY, &self.rope)?;
        let tokens_i = as_i32(ENTRY, "tokens", tokens)?;
        let cfg = elementwise_config((tokens * per_token) as u64);
        let mut b = Launch::new(&self.stream, &self.func);
        b.arg(&inputs.qkv).arg(&inputs.positions).arg(&inputs.slot_mapping).arg(self.rope.table()).arg(&max_pos);
        q_norm.push(&mut b);
        k_norm.push(&mut b);
        match &mut out.q {
            Some(q) => b.arg(q),
            None => b.arg(&0u64),
        };
        b.arg(&mut out.key_cache)
            .arg(&mut out.value_cache)
            .arg(&num_slots)
            .arg(&tokens_i)
            .arg(&heads_i)
            .arg(&kv_heads_i)
            .arg(&head_dim_i)
            .arg(faults.word());
        // SAFETY: the arguments match `qk_norm_rope_cache` in qk_norm_rope_cache.cu; every
        // buffer's size and alignment was checked above (a null q is never written), positions
        // are clamped into the table and slots outside [0, num_slots) are skipped by the kernel.
        unsafe { b.launch(cfg) }.map_err(launch_error(ENTRY, &cfg))?;
        Ok(())
    }
}
