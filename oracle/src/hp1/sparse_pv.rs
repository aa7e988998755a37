//! Sparse-index PV: the gate pass writes the ordered list of keys whose weight is nonzero, and
//! the PV step walks only that list (SPEC section 6, "sparse-index PV").
//!
//! With `clip_min == 0` most weights are exactly zero (SPEC section 2, first consequence), so
//! skipping them skips the value load and the multiply-add. The list is ordered, not built
//! with atomics, so the sum runs in key order and the result is deterministic; since a skipped
//! term is `0 * v_t`, the sparse sum equals the dense one for finite values.

use ndarray::{Array3, ArrayViewMut1, Axis};
use rayon::prelude::*;

use super::split_k::split_k_with;
use super::Hp1Inputs;
use crate::error::Result;
use crate::scalar::Scalar;

/// The indices `i` into `p` with `p[i] != 0`, increasing. NaN weights are kept, so a bad
/// score still reaches the output. Indices are relative to `p`'s first key.
pub fn nonzero_keys<T: Scalar>(p: &[T]) -> Vec<u32> {
    p.iter()
        .enumerate()
        .filter(|(_, &pt)| pt != T::zero())
        .map(|(i, _)| u32::try_from(i).expect("a row has fewer than 2^32 keys"))
        .collect()
}

/// `[num_tokens, Hq, D]` HP1 output: per query row and head, all scores, the gate from key 0,
/// the nonzero list, then `sum p_t v_t` over the list in key order.
pub fn hp1_sparse_pv<T: Scalar>(inp: &Hp1Inputs<'_, T>) -> Result<Array3<T>> {
    let dims = inp.validate()?;
    let mut out = Array3::<T>::zeros((dims.num_tokens, dims.num_heads, dims.head_dim));
    let rows = inp.meta.rows();
    out.axis_iter_mut(Axis(0)).into_par_iter().zip(rows.par_iter()).for_each(|(mut o, &row)| {
        for h in 0..dims.num_heads {
            let s = inp.scores(row, h, 0..row.pos + 1);
            let mut p = vec![T::zero(); s.len()];
            inp.gate(h).apply(&[], &s, &mut p);
            accumulate_sparse(inp, row.seq, h / dims.group(), 0, &p, o.row_mut(h));
        }
    });
    Ok(out)
}

/// Split-K with sparse PV inside each chunk, as the GPU's split-K decode runs it: each chunk
/// lists its own nonzero keys, and the partials are added in chunk order. Refuses `split == 0`.
pub fn hp1_split_k_sparse<T: Scalar>(inp: &Hp1Inputs<'_, T>, split: usize) -> Result<Array3<T>> {
    split_k_with(inp, split, accumulate_sparse)
}

/// Adds `p_i * v_{t0 + i}` to `acc` for the listed keys only, in list order.
fn accumulate_sparse<T: Scalar>(
    inp: &Hp1Inputs<'_, T>,
    seq: usize,
    g: usize,
    t0: usize,
    p: &[T],
    mut acc: ArrayViewMut1<'_, T>,
) {
    for i in nonzero_keys(p) {
        let i = i as usize;
        acc.scaled_add(p[i], &inp.value(seq, t0 + i, g));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hp1::direct::hp1_direct;
    use crate::hp1::split_k::hp1_split_k;
    use crate::hp1::split_k::tests::{inputs, prefill};

    #[test]
    fn nonzero_keys_lists_exactly_the_nonzero_weights_in_order() {
        assert_eq!(nonzero_keys::<f64>(&[]), Vec::<u32>::new());
        assert_eq!(nonzero_keys(&[0.0f32, 0.5, -0.0, 0.0, 2.0, f32::NAN]), vec![1, 4, 5]);
        assert_eq!(nonzero_keys(&[1.0f64, -1.0]), vec![0, 1]);
    }

    #[test]
    fn skipping_zero_weights_never_reads_their_values() {
        // Scores alternate 1, -1 (q = 1); with relu_pre and sigma = 0 every odd key has p = 0.
        // Its value is NaN: a dense walk turns 0 * NaN into NaN, the sparse walk never looks.
        let n = 7;
        let mut case = prefill(n, |t| if t % 2 == 0 { 1.0 } else { -1.0 }, |t| t as f64 + 1.0);
        for t in (1..n).step_by(2) {
            let phys = n.div_ceil(2) - 1 - t / 2;
            case.2[[phys, t % 2, 0, 0]] = f64::NAN;
        }
        let inp = inputs(&case, &[0.0], &[1.0], 3);
        let sparse = hp1_sparse_pv(&inp).unwrap();
        // Last row: keys 0, 2, 4, 6 with weight 1 and values 1, 3, 5, 7.
        assert_eq!(sparse[[n - 1, 0, 0]], 16.0);
        for split in [1, 2, 3, 4, 8] {
            assert_eq!(hp1_split_k_sparse(&inp, split).unwrap(), sparse, "split {split}");
        }
        assert!(hp1_direct(&inp).unwrap()[[n - 1, 0, 0]].is_nan());
    }

    #[test]
    fn sparse_equals_dense_on_finite_values() {
        let n = 13;
        let case = prefill(n, |t| (t as f64 * 1.3).cos() * 2.0, |t| (t as f64 * 0.61).sin());
        let inp = inputs(&case, &[0.8], &[0.5], 4);
        assert_eq!(hp1_sparse_pv(&inp).unwrap(), hp1_direct(&inp).unwrap());
        for split in [1, 3, 5, 16] {
            assert_eq!(hp1_split_k_sparse(&inp, split).unwrap(), hp1_split_k(&inp, split).unwrap());
        }
        assert!(hp1_split_k_sparse(&inp, 0).is_err());
    }
}
