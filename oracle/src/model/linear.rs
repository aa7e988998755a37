//! `y = x W^T` for the checkpoint's `[out, in]` weight layout: every projection of the forward.
//!
//! The CPU backend's time goes here (the `lm_head` of a 152K vocabulary alone is 78M
//! multiply-adds per token at hidden 512), so the output columns are split over rayon's threads.
//!
//! Every output element is one contiguous dot product over `in` (ndarray's unrolled dot), for any
//! number of rows. A packed GEMM would be faster for long prefills, but its summation order differs
//! from the dot product's, and a row's result must not depend on how many rows share the call: that
//! is what makes a request's output independent of its batch neighbours and of prefill chunking.
//! Weight rows are visited in tiles of `TILE` rows so a tile stays in cache while every row of `x`
//! passes over it. Results do not depend on the thread count either: the split is over outputs.

use ndarray::{Array2, ArrayView2, Axis};
use rayon::prelude::*;

use crate::scalar::Scalar;

/// Weight rows per cache tile (32 rows of 1024 f32 = 128 KiB).
const TILE: usize = 32;
/// Below this many multiply-adds, splitting over threads costs more than it saves.
const PARALLEL_MIN_WORK: usize = 1 << 16;

/// `x W^T`: `x` `[rows, in]`, `w` `[out, in]`, result `[rows, out]`.
///
/// # Panics
/// If the inner sizes differ (the model checks every weight shape when it is built).
pub fn linear<T: Scalar>(x: ArrayView2<'_, T>, w: ArrayView2<'_, T>) -> Array2<T> {
    let (rows, inner) = x.dim();
    let (out, w_inner) = w.dim();
    assert_eq!(inner, w_inner, "linear: x has {inner} columns, the weight {w_inner}");
    let mut y = Array2::zeros((rows, out));
    let work = rows * out * inner;
    let chunk =
        if work < PARALLEL_MIN_WORK { out.max(1) } else { out.div_ceil(4 * rayon::current_num_threads()).max(8) };
    y.axis_chunks_iter_mut(Axis(1), chunk).into_par_iter().zip(w.axis_chunks_iter(Axis(0), chunk)).for_each(
        |(mut yc, wc)| {
            for (t, wt) in wc.axis_chunks_iter(Axis(0), TILE).enumerate() {
                for (i, xr) in x.rows().into_iter().enumerate() {
                    for (o, wr) in wt.rows().into_iter().enumerate() {
                        yc[[i, t * TILE + o]] = wr.dot(&xr);
                    }
                }
            }
        },
    );
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(x: &Array2<f64>, w: &Array2<f64>) -> Array2<f64> {
        Array2::from_shape_fn((x.nrows(), w.nrows()), |(i, o)| (0..x.ncols()).map(|c| x[[i, c]] * w[[o, c]]).sum())
    }

    #[test]
    fn a_row_gets_the_same_bits_whatever_rows_share_the_call() {
        let x = Array2::from_shape_fn((37, 300), |(i, c)| ((i * 31 + c * 17) % 101) as f32 / 7.3 - 6.0);
        let w = Array2::from_shape_fn((500, 300), |(o, c)| ((o * 13 + c * 5) % 97) as f32 / 9.1 - 5.0);
        let all = linear(x.view(), w.view());
        for i in [0, 5, 36] {
            let one = linear(x.slice(ndarray::s![i..i + 1, ..]), w.view());
            assert_eq!(one.row(0), all.row(i), "row {i}");
        }
    }

    #[test]
    fn matches_the_definition_for_few_and_many_rows_small_and_large() {
        for (rows, inner, out) in [(1, 3, 5), (3, 64, 700), (9, 17, 3), (20, 96, 900)] {
            let x = Array2::from_shape_fn((rows, inner), |(i, c)| ((i * 7 + c * 3) % 11) as f64 - 5.0);
            let w = Array2::from_shape_fn((out, inner), |(o, c)| ((o * 5 + c) % 13) as f64 - 6.0);
            // Small integers: every path is exact, so the comparison can be equality.
            assert_eq!(linear(x.view(), w.view()), naive(&x, &w), "{rows}x{inner}x{out}");
        }
    }
}
