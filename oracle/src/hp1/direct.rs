//! The direct HP1 formula: every query row against all of its keys at once. This is the
//! definition every other path is held against.

use ndarray::{Array3, Axis};
use rayon::prelude::*;

use super::Hp1Inputs;
use crate::error::Result;
use crate::scalar::Scalar;

/// `[num_tokens, Hq, D]` HP1 output: for each query row and head, all scores, the gate over
/// them from key 0, then `sum_t p_t v_t` in key order.
pub fn hp1_direct<T: Scalar>(inp: &Hp1Inputs<'_, T>) -> Result<Array3<T>> {
    let dims = inp.validate()?;
    let mut out = Array3::<T>::zeros((dims.num_tokens, dims.num_heads, dims.head_dim));
    let rows = inp.meta.rows();
    out.axis_iter_mut(Axis(0)).into_par_iter().zip(rows.par_iter()).for_each(|(mut o, &row)| {
        for h in 0..dims.num_heads {
            let g = h / dims.group();
            let s = inp.scores(row, h, 0..row.pos + 1);
            let mut p = vec![T::zero(); s.len()];
            inp.gate(h).apply(&[], &s, &mut p);
            let mut acc = o.row_mut(h);
            for (t, &pt) in p.iter().enumerate() {
                acc.scaled_add(pt, &inp.value(row.seq, t, g));
            }
        }
    });
    Ok(out)
}
