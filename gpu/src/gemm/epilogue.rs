//! The buffers of a GEMM's epilogue ([`Epilogue`]): what the skinny kernel does with each finished
//! output, the host-side checks of those buffers, and their kernel arguments.
//!
//! Each fused epilogue gives the bits of the GEMM's plain output followed by the standalone op
//! of [`crate::ops`] that it replaces (`gemm_skinny.cu`'s header says why), in one launch instead
//! of two.

use cudarc::driver::{CudaStream, CudaView, CudaViewMut};
use half::bf16;

use super::plan::{EpilogueKind, GemmShape};
use crate::error::{unsupported, Result};
use crate::ops::{Faults, HeadShape, RopeTable, UClipNormParams};
use crate::runtime::{check_aligned, Launch};

/// Where a GEMM's output goes, and the buffers of the op fused after it; the plan's
/// [`EpilogueKind`] must match.
pub enum Epilogue<'a> {
    /// `y [M, N] = bf16(x W^T)`.
    Store {
        /// `[M, N]`, written.
        y: CudaViewMut<'a, bf16>,
    },
    /// [`crate::ops::PeriLn::residual`] on the product `a = bf16(x W^T)` (`[M, N]`, N = hidden):
    /// `x_out = bf16(x + bf16(after(a)))`, `h_out = bf16(before(x_out))`; `a` is never stored.
    PeriLn {
        /// `[M, N]`, the residual stream before the sublayer (read only).
        x: CudaView<'a, bf16>,
        /// The norm on the sublayer's output, over N.
        after: &'a UClipNormParams,
        /// The next sublayer's input norm, over N.
        before: &'a UClipNormParams,
        /// `[M, N]`, the residual stream after the sublayer.
        x_out: CudaViewMut<'a, bf16>,
        /// `[M, N]`, the next sublayer's input.
        h_out: CudaViewMut<'a, bf16>,
    },
    /// [`crate::ops::SiluMul::run`] on the product `[M, N = 2 I]` of the gate/up weight in its
    /// interleaved layout ([`super::layout`]): `out = bf16(silu(gate) * up)`.
    SiluMul {
        /// `[M, I]`, the MLP's product.
        out: CudaViewMut<'a, bf16>,
    },
    /// [`crate::ops::QkNormRopeCache::run`] on the product `[M, N = (Hq + 2 Hkv) D]` of the qkv
    /// weight in its permuted layout ([`super::layout`]): the queries normed, rotated and rounded
    /// into `q`, the keys likewise and the values rounded into the caches at each token's slot (a
    /// negative slot writes no k or v; a position outside the table is clamped and a slot past
    /// the cache skipped, each recorded in `faults`).
    QkNormRopeCache {
        /// The model's heads: `N` must be their [`HeadShape::qkv_width`].
        heads: HeadShape,
        /// The RoPE table over D ([`crate::ops::QkNormRopeCache::rope`]).
        rope: &'a RopeTable,
        /// Over D.
        q_norm: &'a UClipNormParams,
        /// Over D.
        k_norm: &'a UClipNormParams,
        /// `[M]` absolute positions.
        positions: CudaView<'a, i32>,
        /// `[M]` cache slots `block * block_size + offset`; negative = padding.
        slot_mapping: CudaView<'a, i64>,
        /// `[M, Hq, D]`, the queries.
        q: CudaViewMut<'a, bf16>,
        /// `[num_blocks, block_size, Hkv, D]`; the keys land at their slots.
        key_cache: CudaViewMut<'a, bf16>,
        /// `[num_blocks, block_size, Hkv, D]`; the values land at their slots.
        value_cache: CudaViewMut<'a, bf16>,
        /// The device fault word.
        faults: &'a mut Faults,
    },
}

impl Epilogue<'_> {
    /// The plan kind that launches this epilogue.
    pub fn kind(&self) -> EpilogueKind {
        match self {
            Epilogue::Store { .. } => EpilogueKind::Store,
            Epilogue::PeriLn { .. } => EpilogueKind::PeriLn,
            Epilogue::SiluMul { .. } => EpilogueKind::SiluMul,
            Epilogue::QkNormRopeCache { .. } => EpilogueKind::QkNormRopeCache,
        }
    }

    /// Checks every buffer's length and 16-byte alignment against `shape`; errors name `entry`
    /// and the buffer.
    pub(super) fn check(&self, entry: &str, stream: &CudaStream, shape: GemmShape) -> Result<()> {
        let mn = shape.m * shape.n;
        let len = |what: &str, got: usize, want: usize| -> Result<()> {
            if got == want {
                Ok(())
            } else {
                Err(unsupported(entry, format!("`{what}` has {got} elements, {want} for {shape}")))
            }
        };
        let output = |what: &str, buf: &CudaViewMut<'_, bf16>, want: usize| -> Result<()> {
            len(what, buf.len(), want)?;
            check_aligned(stream, entry, what, buf)
        };
        match self {
            Epilogue::Store { y } => output("y", y, mn),
            Epilogue::PeriLn { x, after, before, x_out, h_out } => {
                for (what, norm) in [("after", after), ("before", before)] {
                    if norm.channels() != shape.n {
                        return Err(unsupported(
                            entry,
                            format!("the `{what}` norm has {} channels, expected N = {}", norm.channels(), shape.n),
                        ));
                    }
                }
                len("x (the residual)", x.len(), mn)?;
                check_aligned(stream, entry, "x (the residual)", x)?;
                output("x_out", x_out, mn)?;
                output("h_out", h_out, mn)
            }
            Epilogue::SiluMul { out } => output("out", out, mn / 2),
            Epilogue::QkNormRopeCache {
                heads,
                rope,
                q_norm,
                k_norm,
                positions,
                slot_mapping,
                q,
                key_cache,
                value_cache,
                ..
            } => {
                heads.check(entry, rope)?;
                if shape.n != heads.qkv_width() {
                    return Err(unsupported(
                        entry,
                        format!(
                            "N = {} is not the qkv width (Hq + 2 Hkv) D = {} of {heads:?}",
                            shape.n,
                            heads.qkv_width()
                        ),
                    ));
                }
                heads.check_norms(entry, q_norm, k_norm)?;
                len("positions", positions.len(), shape.m)?;
                len("slot_mapping", slot_mapping.len(), shape.m)?;
                heads.cache_slots(entry, key_cache.len(), value_cache.len())?;
                output("q", q, shape.m * heads.q_width())?;
                check_aligned(stream, entry, "key_cache", key_cache)?;
                check_aligned(stream, entry, "value_cache", value_cache)
            }
        }
    }

    /// Appends the epilogue's kernel arguments, in the order of its `*_PARAMS` in `gemm_skinny.cu`.
    pub(super) fn push(&mut self, entry: &str, b: &mut Launch<'_>) -> Result<()> {
        match self {
            Epilogue::Store { y } => {
                b.arg(y);
            }
            Epilogue::PeriLn { x, after, before, x_out, h_out } => {
                b.arg(&*x);
                after.push(b);
                before.push(b);
                b.arg(x_out).arg(h_out);
            }
            Epilogue::SiluMul { out } => {
                b.arg(out);
            }
            Epilogue::QkNormRopeCache {
                heads,
                rope,
                q_norm,
                k_norm,
                positions,
                slot_mapping,
                q,
                key_cache,
                value_cache,
                faults,
            } => {
                let [max_pos, num_heads, num_kv_heads, head_dim] = heads.ints(entry, rope)?;
                let num_slots = heads.cache_slots(entry, key_cache.len(), value_cache.len())?;
                b.arg(&*positions).arg(&*slot_mapping).arg(rope.table()).arg(&max_pos);
                q_norm.push(b);
                k_norm.push(b);
                b.arg(q)
                    .arg(key_cache)
                    .arg(value_cache)
                    .arg(&num_slots)
                    .arg(&num_heads)
                    .arg(&num_kv_heads)
                    .arg(&head_dim)
                    .arg(faults.word());
            }
        }
        Ok(())
    }
}
