//! The HP1 gate: scores in, attention weights out (SPEC section 2).
//!
//! ```text
//! r_t = relu_pre ? max(s_t, 0) : s_t            (r_t = 0 for t < 0)
//! m_t = (r_t + ... + r_{t-F+1}) / F
//! z_t = s_t - sigma * m_t
//! p_t = gamma * clamp(z_t, clip_min, clip_max)
//! ```
//!
//! Computed as `z_t = fma(-(sigma / F), r_t + ... + r_{t-F+1}, s_t)`: `sigma / F` is formed once
//! per head as `sigma * (1 / F)` (the quotient and the product each rounded) and the key's sum
//! meets it in one fused multiply-add, the same value as SPEC section 2's in exact arithmetic.
//! Every GPU path computes these operations in f32 in this order (`hp1_prefill_gate.cuh`,
//! `hp1_attention.cuh`, `hp1_gate_stats.cu`), which the f32 instantiation here reproduces bit
//! for bit; the fused form is one instruction a key where `s - sigma * (sum / F)` took three, in
//! kernels bound by issuing the gate's instructions. One exception: the WGMMA prefill's entries
//! for the model's gate run it in the unit form (`hp1_prefill_gate.cuh`, UNIT FORM: on `q . k`
//! unscaled, with scale and gamma 1 and the bounds divided by scale, the output multiplied by
//! `gamma * scale`), the same value in exact arithmetic and rounded otherwise; a property test
//! in `verify` holds the identity.
//!
//! The gate of key `t` reads the raw scores of keys `t-F+1..=t` only, so a chunk of keys can
//! be gated alone once it is handed the `F - 1` scores to its left: that is the whole of the
//! split-K and prefill-tile decompositions.

use serde::{Deserialize, Serialize};

use super::Hp1Params;
use crate::scalar::Scalar;

/// The per-head gate: the shared parameters plus this head's `sigma` and `gamma`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gate<T> {
    /// Shared HP1 parameters.
    pub params: Hp1Params<T>,
    /// This head's FIR weight.
    pub sigma: T,
    /// This head's output gain.
    pub gamma: T,
}

impl<T: Scalar> Gate<T> {
    fn rectify(&self, s: T) -> T {
        if self.params.relu_pre {
            s.max(T::zero())
        } else {
            s
        }
    }

    /// Clamps to `[clip_min, clip_max]`, letting NaN through so that a bad input is never
    /// masked into a plausible weight.
    fn clamp(&self, z: T) -> T {
        if z < self.params.clip_min {
            self.params.clip_min
        } else if z > self.params.clip_max {
            self.params.clip_max
        } else {
            z
        }
    }

    /// Gates `scores` (keys `t0..t0 + scores.len()`) into `out`, given `left`, the raw scores of
    /// the up to `F - 1` keys just before `t0` (fewer only where they would be before key 0).
    pub fn apply(&self, left: &[T], scores: &[T], out: &mut [T]) {
        let f = self.params.fir_k;
        debug_assert!(left.len() < f, "left context holds {} scores, F - 1 = {}", left.len(), f - 1);
        debug_assert_eq!(scores.len(), out.len());
        let sigma_over_f = self.sigma * (T::one() / T::of(f as f64));
        let at = |i: isize| -> T {
            if i < 0 {
                let li = left.len() as isize + i;
                if li < 0 {
                    T::zero()
                } else {
                    self.rectify(left[li as usize])
                }
            } else {
                self.rectify(scores[i as usize])
            }
        };
        for (i, (&s, o)) in scores.iter().zip(out.iter_mut()).enumerate() {
            let mut sum = T::zero();
            for back in 0..f as isize {
                sum = sum + at(i as isize - back);
            }
            let z = (-sigma_over_f).mul_add(sum, s);
            *o = self.gamma * self.clamp(z);
        }
    }
}
