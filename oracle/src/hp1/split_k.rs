//! Split-K HP1: each query row's keys cut into fixed chunks that are gated and summed alone
//! (SPEC section 2, second consequence; SPEC section 6, "split-K decode").
//!
//! A chunk of keys `c0..c1` is gated given the raw scores of the up to `F - 1` keys to its left
//! (the FIR overlap), so its weights equal those the direct pass computes for the same keys.
//! Each chunk's `sum p_t v_t` lands in a partial of its own, and the partials are added in chunk
//! order 0, 1, 2, ... into the output: no max, no rescaling, and a fixed reduction order, as the
//! GPU's stage 2 does. This module holds the chunking; how a chunk's weights meet the values
//! (every key, or only the nonzero ones) is passed in, so [`super::sparse_pv`] reuses it.

use ndarray::{Array1, Array3, ArrayViewMut1, Axis};
use rayon::prelude::*;

use super::{Hp1Inputs, QueryRow};
use crate::error::{invalid, Result};
use crate::scalar::Scalar;

/// `[num_tokens, Hq, D]` HP1 output computed in chunks of `split` keys per query row (the last
/// chunk of a row may be shorter). Refuses `split == 0`.
pub fn hp1_split_k<T: Scalar>(inp: &Hp1Inputs<'_, T>, split: usize) -> Result<Array3<T>> {
    split_k_with(inp, split, accumulate_dense)
}

/// Adds `p_i * v_{t0 + i}` for every weight of a chunk to `acc`, zeros included, in key order.
pub(crate) fn accumulate_dense<T: Scalar>(
    inp: &Hp1Inputs<'_, T>,
    seq: usize,
    g: usize,
    t0: usize,
    p: &[T],
    mut acc: ArrayViewMut1<'_, T>,
) {
    for (i, &pt) in p.iter().enumerate() {
        acc.scaled_add(pt, &inp.value(seq, t0 + i, g));
    }
}

/// The split-K computation with a caller-chosen PV step: `pv(inp, seq, g, t0, p, partial)`
/// adds the chunk starting at key `t0` with weights `p` into `partial`.
pub(crate) fn split_k_with<T, P>(inp: &Hp1Inputs<'_, T>, split: usize, pv: P) -> Result<Array3<T>>
where
    T: Scalar,
    P: Fn(&Hp1Inputs<'_, T>, usize, usize, usize, &[T], ArrayViewMut1<'_, T>) + Sync,
{
    if split < 1 {
        return invalid("split", format!("must be at least 1 key per chunk, got {split}"));
    }
    let dims = inp.validate()?;
    let mut out = Array3::<T>::zeros((dims.num_tokens, dims.num_heads, dims.head_dim));
    let rows = inp.meta.rows();
    out.axis_iter_mut(Axis(0)).into_par_iter().zip(rows.par_iter()).for_each(|(mut o, &row)| {
        for h in 0..dims.num_heads {
            let mut acc = o.row_mut(h);
            let mut partial = Array1::<T>::zeros(dims.head_dim);
            for (c0, c1) in chunks(row, split) {
                partial.fill(T::zero());
                chunk_into(inp, row, h, dims.group(), c0..c1, &pv, partial.view_mut());
                acc.zip_mut_with(&partial, |a, &b| *a = *a + b);
            }
        }
    });
    Ok(out)
}

/// The `(start, end)` key ranges of a row's chunks, in order; they tile `0..=row.pos`.
fn chunks(row: QueryRow, split: usize) -> impl Iterator<Item = (usize, usize)> {
    let n = row.pos + 1;
    (0..n).step_by(split).map(move |c0| (c0, c0.saturating_add(split).min(n)))
}

/// Gates keys `range` of one row and head with their FIR overlap and runs `pv` on them.
fn chunk_into<T, P>(
    inp: &Hp1Inputs<'_, T>,
    row: QueryRow,
    h: usize,
    group: usize,
    range: std::ops::Range<usize>,
    pv: &P,
    partial: ArrayViewMut1<'_, T>,
) where
    T: Scalar,
    P: Fn(&Hp1Inputs<'_, T>, usize, usize, usize, &[T], ArrayViewMut1<'_, T>),
{
    let overlap = inp.params.fir_k - 1;
    let left = inp.scores(row, h, range.start.saturating_sub(overlap)..range.start);
    let s = inp.scores(row, h, range.clone());
    let mut p = vec![T::zero(); s.len()];
    inp.gate(h).apply(&left, &s, &mut p);
    pv(inp, row.seq, h / group, range.start, &p, partial);
}

#[cfg(test)]
pub(crate) mod tests {
    use ndarray::{Array2, Array3, Array4};

    use super::*;
    use crate::hp1::direct::hp1_direct;
    use crate::hp1::{AttnMetadata, Hp1Params};

    /// `(q, key_cache, value_cache, meta)` of a [`prefill`].
    pub(crate) type Prefill = (Array3<f64>, Array4<f64>, Array4<f64>, AttnMetadata);

    /// One sequence of `n` tokens, all of them queries (a prefill), one head, D = 1, keys and
    /// values from the closures, block size 2 with the blocks in reverse order.
    pub(crate) fn prefill(n: usize, key: impl Fn(usize) -> f64, value: impl Fn(usize) -> f64) -> Prefill {
        let blocks = n.div_ceil(2);
        let mut k = Array4::zeros((blocks, 2, 1, 1));
        let mut v = Array4::zeros((blocks, 2, 1, 1));
        let table = Array2::from_shape_fn((1, blocks), |(_, b)| (blocks - 1 - b) as i32);
        for t in 0..n {
            let phys = blocks - 1 - t / 2;
            k[[phys, t % 2, 0, 0]] = key(t);
            v[[phys, t % 2, 0, 0]] = value(t);
        }
        let meta = AttnMetadata { block_table: table, seq_lens: vec![n as i32], query_start_loc: vec![0, n as i32] };
        (Array3::ones((n, 1, 1)), k, v, meta)
    }

    pub(crate) fn params(fir_k: usize) -> Hp1Params<f64> {
        Hp1Params { scale: 1.0, fir_k, relu_pre: true, clip_min: 0.0, clip_max: 10.0 }
    }

    /// The one-head inputs of `case` with this gate.
    pub(crate) fn inputs<'a>(
        case: &'a Prefill,
        sigma: &'a [f64],
        gamma: &'a [f64],
        fir_k: usize,
    ) -> Hp1Inputs<'a, f64> {
        let (q, k, v, meta) = case;
        Hp1Inputs { q: q.view(), key_cache: k.view(), value_cache: v.view(), meta, sigma, gamma, params: params(fir_k) }
    }

    #[test]
    fn worked_decode_row_matches_hand_computation() {
        // Scores 1, 2, 4 (q = 1, scale 1), F = 2, sigma = 1: z = s - (r_t + r_{t-1}) / 2
        // gives 0.5, 0.5, 1.0; values 1, 10, 100, so the last row is 0.5 + 5 + 100 = 105.5.
        let keys = [1.0, 2.0, 4.0];
        let vals = [1.0, 10.0, 100.0];
        let case = prefill(3, |t| keys[t], |t| vals[t]);
        let inp = inputs(&case, &[1.0], &[1.0], 2);
        for split in [1, 2, 3, 5] {
            let out = hp1_split_k(&inp, split).unwrap();
            // Row 0 sees key 0 only: z = 1 - 0.5 = 0.5. Row 1: 0.5 + 0.5 * 10 = 5.5.
            assert_eq!(out[[0, 0, 0]], 0.5, "split {split}");
            assert_eq!(out[[1, 0, 0]], 5.5, "split {split}");
            assert_eq!(out[[2, 0, 0]], 105.5, "split {split}");
        }
    }

    #[test]
    fn every_split_matches_direct_and_one_chunk_is_bit_identical() {
        let n = 11;
        let case = prefill(n, |t| ((t * 7 % 5) as f64 - 1.5) * 0.75, |t| (t as f64 * 0.37).sin());
        let inp = inputs(&case, &[0.6], &[1.25], 3);
        let direct = hp1_direct(&inp).unwrap();
        for split in 1..=n + 2 {
            let got = hp1_split_k(&inp, split).unwrap();
            let err = (&got - &direct).mapv(f64::abs).fold(0.0f64, |a, &b| a.max(b));
            assert!(err < 1e-14, "split {split}: max error {err}");
        }
        assert_eq!(hp1_split_k(&inp, n).unwrap(), direct, "a single chunk must add the same terms in the same order");
    }

    #[test]
    fn zero_split_is_refused_with_its_value() {
        let case = prefill(2, |_| 1.0, |_| 1.0);
        let inp = inputs(&case, &[0.0], &[1.0], 3);
        let err = hp1_split_k(&inp, 0).unwrap_err().to_string();
        assert!(err.contains("split") && err.contains("got 0"), "{err}");
    }
}
