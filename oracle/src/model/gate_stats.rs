//! How sparse the HP1 gate is: the count of exactly-zero weights `p_t` (SPEC section 2).
//!
//! Sparsity is what the GPU's zero-skipping PV paths live on, and what a generated checkpoint
//! is scaled to (50% to 85% zeros, a trained AsyncT about 70%), so the oracle reports it from the
//! same scores and gate the attention uses.

use std::ops::AddAssign;

use rayon::prelude::*;

use crate::error::Result;
use crate::hp1::Hp1Inputs;
use crate::scalar::Scalar;

/// Exact zeros among gate weights, over (layer, head, query row, key) quadruples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GateStats {
    /// Gate weights that are exactly zero.
    pub zeros: u64,
    /// Gate weights computed: per query row at position `pos`, `pos + 1` keys for every head.
    pub total: u64,
}

impl GateStats {
    /// `zeros / total`, or 0 when nothing was counted.
    pub fn zero_fraction(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.zeros as f64 / self.total as f64
        }
    }

    /// Counts the gate weights of one attention call: every query row, head and causal key.
    pub fn of_inputs<T: Scalar>(inp: &Hp1Inputs<'_, T>) -> Result<Self> {
        let dims = inp.validate()?;
        let rows = inp.meta.rows();
        Ok(rows
            .par_iter()
            .map(|&row| {
                let mut st = GateStats::default();
                let mut p = vec![T::zero(); row.pos + 1];
                for h in 0..dims.num_heads {
                    let s = inp.scores(row, h, 0..row.pos + 1);
                    inp.gate(h).apply(&[], &s, &mut p);
                    st.zeros += p.iter().filter(|&&x| x == T::zero()).count() as u64;
                    st.total += p.len() as u64;
                }
                st
            })
            .reduce(GateStats::default, |mut a, b| {
                a += b;
                a
            }))
    }
}

impl AddAssign for GateStats {
    fn add_assign(&mut self, o: Self) {
        self.zeros += o.zeros;
        self.total += o.total;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hp1::{AttnMetadata, Hp1Params};
    use ndarray::{Array2, Array3, Array4};

    #[test]
    fn counts_causal_keys_and_zeros_of_negative_scores() {
        // One head, D = 1, keys 1, -1, 1 at positions 0..3; query 1 at the last position.
        let q = Array3::<f64>::ones((1, 1, 1));
        let k = Array4::from_shape_vec((1, 4, 1, 1), vec![1.0, -1.0, 1.0, 0.0]).unwrap();
        let meta = AttnMetadata::decode(Array2::zeros((1, 1)), vec![3]);
        let params = Hp1Params { scale: 1.0, fir_k: 1, relu_pre: true, clip_min: 0.0, clip_max: 1.0 };
        let inp = Hp1Inputs {
            q: q.view(),
            key_cache: k.view(),
            value_cache: k.view(),
            meta: &meta,
            sigma: &[0.5],
            gamma: &[1.0],
            params,
        };
        // z = s - 0.5 * max(s, 0): 0.5, -1, 0.5 -> one zero of three.
        let st = GateStats::of_inputs(&inp).unwrap();
        assert_eq!(st, GateStats { zeros: 1, total: 3 });
        assert!((st.zero_fraction() - 1.0 / 3.0).abs() < 1e-15);
        assert_eq!(GateStats::default().zero_fraction(), 0.0);
    }
}
