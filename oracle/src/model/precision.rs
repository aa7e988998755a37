//! Where the GPU model rounds to bf16, in one place (SPEC section 4).
//!
//! The GPU stores weights and activations in bf16 and computes norms, RoPE and the HP1 gate in
//! f32. The oracle computes in `T` (f64 for the reference) and, with [`Rounding::Bf16`], rounds
//! to bf16 at exactly the points [`RoundPoint`] lists, in the order listed, so the oracle and a
//! GPU forward differ only by accumulation order. A GPU kernel that fuses several steps (q/k norm +
//! RoPE + cache write; post-attention norm + residual + pre-feedforward norm) must still round in
//! registers at each point listed here, or it is a different model.
//!
//! Not rounding points: the embedding gather (its rows are already bf16 weights), the cache
//! write (K and V are already rounded at [`RoundPoint::KNormRope`] and [`RoundPoint::VProj`]),
//! the HP1 scores and gate weights `p` (f32 on the GPU; a tensor-core PV that rounds `p` is
//! held to a looser bound instead, SPEC section 4).

use ndarray::{ArrayBase, DataMut, Dimension};

use crate::scalar::{round_bf16, Scalar};

/// How the forward pass treats intermediate values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Rounding {
    /// No rounding: every value stays in `T` (the f64 reference and the f32 CPU backend).
    #[default]
    Exact,
    /// Round to bf16 (nearest, ties to even) at every [`RoundPoint`], as the GPU model stores.
    Bf16,
}

/// Every point of the forward pass where the GPU model stores a bf16 tensor, in forward order.
///
/// Per layer, `x` the residual stream:
///
/// | point | value rounded | shape |
/// |---|---|---|
/// | `InputNorm` | `h = input_layernorm(x)` | `[tokens, hidden]` |
/// | `QProj`, `KProj`, `VProj` | the GEMM outputs `h Wq^T`, `h Wk^T`, `h Wv^T` | `[tokens, H*D]` |
/// | `QNormRope`, `KNormRope` | `rope(q_norm(q))`, `rope(k_norm(k))`, once after both (fused kernel) | `[tokens, H*D]` |
/// | `AttnOutput` | the HP1 output | `[tokens, Hq*D]` |
/// | `OProj` | the GEMM output `a Wo^T` | `[tokens, hidden]` |
/// | `PostAttnNorm` | `post_attention_layernorm(a)` | `[tokens, hidden]` |
/// | `AttnResidual` | `x + post_attention_layernorm(a)` | `[tokens, hidden]` |
/// | `PreFfnNorm` | `pre_feedforward_layernorm(x)` | `[tokens, hidden]` |
/// | `GateProj`, `UpProj` | the GEMM outputs `h Wg^T`, `h Wu^T` | `[tokens, I]` |
/// | `MlpProduct` | `silu(gate) * up` | `[tokens, I]` |
/// | `DownProj` | the GEMM output `m Wd^T` | `[tokens, hidden]` |
/// | `PostFfnNorm` | `post_feedforward_layernorm(m)` | `[tokens, hidden]` |
/// | `FfnResidual` | `x + post_feedforward_layernorm(m)` | `[tokens, hidden]` |
///
/// After the layers, on the rows whose logits are asked for: `FinalNorm` (`norm(x)`) and
/// `Logits` (the `lm_head` GEMM output).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RoundPoint {
    /// Output of `input_layernorm`.
    InputNorm,
    /// Output of the `q_proj` GEMM.
    QProj,
    /// Output of the `k_proj` GEMM.
    KProj,
    /// Output of the `v_proj` GEMM; this is what the value cache holds.
    VProj,
    /// Queries after `q_norm` and RoPE.
    QNormRope,
    /// Keys after `k_norm` and RoPE; this is what the key cache holds.
    KNormRope,
    /// HP1 attention output.
    AttnOutput,
    /// Output of the `o_proj` GEMM.
    OProj,
    /// Output of `post_attention_layernorm`.
    PostAttnNorm,
    /// Residual stream after the attention sublayer.
    AttnResidual,
    /// Output of `pre_feedforward_layernorm`.
    PreFfnNorm,
    /// Output of the `gate_proj` GEMM.
    GateProj,
    /// Output of the `up_proj` GEMM.
    UpProj,
    /// `silu(gate) * up`.
    MlpProduct,
    /// Output of the `down_proj` GEMM.
    DownProj,
    /// Output of `post_feedforward_layernorm`.
    PostFfnNorm,
    /// Residual stream after the MLP sublayer.
    FfnResidual,
    /// Output of the final `norm`.
    FinalNorm,
    /// Output of the `lm_head` GEMM.
    Logits,
}

impl RoundPoint {
    /// Every point, in forward order (the per-layer points, then the two after the layers).
    pub const ALL: [RoundPoint; 19] = [
        RoundPoint::InputNorm,
        RoundPoint::QProj,
        RoundPoint::KProj,
        RoundPoint::VProj,
        RoundPoint::QNormRope,
        RoundPoint::KNormRope,
        RoundPoint::AttnOutput,
        RoundPoint::OProj,
        RoundPoint::PostAttnNorm,
        RoundPoint::AttnResidual,
        RoundPoint::PreFfnNorm,
        RoundPoint::GateProj,
        RoundPoint::UpProj,
        RoundPoint::MlpProduct,
        RoundPoint::DownProj,
        RoundPoint::PostFfnNorm,
        RoundPoint::FfnResidual,
        RoundPoint::FinalNorm,
        RoundPoint::Logits,
    ];

    /// Whether the point is inside a decoder layer (every point but `FinalNorm` and `Logits`).
    pub fn in_layer(self) -> bool {
        !matches!(self, RoundPoint::FinalNorm | RoundPoint::Logits)
    }
}

impl Rounding {
    /// Applies this rounding to every element of `a`, as the GPU's store at a [`RoundPoint`] does.
    pub fn apply<T: Scalar, S: DataMut<Elem = T>, D: Dimension>(self, a: &mut ArrayBase<S, D>) {
        if self == Rounding::Bf16 {
            a.mapv_inplace(round_bf16);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn exact_leaves_values_and_bf16_rounds_to_8_bit_mantissa() {
        let x = 1.0 + 2f64.powi(-10);
        let mut a = array![x, -x, 3.0];
        Rounding::Exact.apply(&mut a);
        assert_eq!(a, array![x, -x, 3.0]);
        Rounding::Bf16.apply(&mut a);
        // bf16 keeps 7 explicit mantissa bits: 1 + 2^-10 rounds to 1.
        assert_eq!(a, array![1.0, -1.0, 3.0]);
    }

    #[test]
    fn all_lists_each_point_once_with_two_after_the_layers() {
        let set: std::collections::HashSet<_> = RoundPoint::ALL.iter().collect();
        assert_eq!(set.len(), RoundPoint::ALL.len());
        assert_eq!(RoundPoint::ALL.iter().filter(|p| !p.in_layer()).count(), 2);
    }
}
