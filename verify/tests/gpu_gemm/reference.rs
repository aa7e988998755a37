//! The f64 reference of a bf16 GEMM and the bound a GPU result is held to.
//!
//! For output `y[m][n] = sum_k x[m][k] w[n][k]` the reference sums the products in f64 (each
//! product of two bf16 is exact in f32, so only the sum is rounded, at f64's 2^-53). Every
//! element, row and the whole output must pass:
//!
//! ```text
//! element   |got - ref|            <= TOL * (|ref| + sqrt(sum_k (x[m][k] w[n][k])^2))
//! row m     |got_m - ref_m|_2      <= TOL * |ref_m|_2
//! whole     |got - ref|_2          <= TOL * |ref|_2
//! ```
//!
//! with `TOL` = 1e-2 (SPEC section 4) and a NaN or infinity never passing. A correct kernel is
//! off by the bf16 rounding of its output (half an ulp: up to 2^-8 of `|ref|`, 2^-9 typically)
//! and its f32 sum (about 2^-24 sqrt(K) of the root-sum-square of the terms), so the element
//! bound has a margin of at least 2.5x (an f32 sum rounded to bf16 measured 2.8e-3 at most on
//! 11K elements of K = 1024) and the row and whole bounds about 5x. The
//! element bound carries the root-sum-square of the element's terms because a sum that cancels
//! to nearly nothing still carries the rounding of its terms; it is tight enough that one step of
//! 32 products left out (about 18% of that scale at K = 1024) fails it. The row bound holds every
//! row to its own norm, so one wrong row among 512, or a row of small values beside large ones
//! (the drawn x rows span 2^-4 to 2^4), is not diluted by the rest.

use half::bf16;
use rayon::prelude::*;
use verify::rng::Counter;

/// The relative tolerance of every bound (SPEC section 4, a bf16 output).
pub const TOL: f64 = 1e-2;

/// The bf16 poison written into every output before a run: a NaN (all bits set).
pub const POISON: bf16 = bf16::from_bits(0xFFFF);

/// `n` bf16 values uniform in `[-scale, scale)`, element `i` a function of `(seed, stream, i)`.
pub fn uniform_bf16(seed: u64, stream: u64, n: usize, scale: f64) -> Vec<bf16> {
    let c = Counter::new(seed, stream);
    (0..n).into_par_iter().map(|i| bf16::from_f64(scale * c.uniform(&[i as u64]))).collect()
}

/// An x of `m` rows of `k`, row `r` uniform in `[-s_r, s_r)` with `s_r = 2^((r mod 9) - 4)`, so
/// the rows' sizes differ by up to 2^8.
pub fn draw_x(seed: u64, m: usize, k: usize) -> Vec<bf16> {
    let c = Counter::new(seed, 1);
    (0..m * k)
        .into_par_iter()
        .map(|i| {
            let scale = 2f64.powi((i / k % 9) as i32 - 4);
            bf16::from_f64(scale * c.uniform(&[i as u64]))
        })
        .collect()
}

/// A weight of `n` rows of `k`, uniform in `[-1/16, 1/16)` (the size of a trained projection's
/// entries).
pub fn draw_w(seed: u64, n: usize, k: usize) -> Vec<bf16> {
    uniform_bf16(seed, 2, n * k, 1.0 / 16.0)
}

/// The reference of `x [m, k] w^T` with each element's term scale.
pub struct Reference {
    /// Columns of the output (N).
    pub n: usize,
    /// `[m, n]`: the sums in f64.
    pub value: Vec<f64>,
    /// `[m, n]`: `sqrt(sum_k (x[m][k] w[n][k])^2)`.
    pub terms: Vec<f64>,
}

impl Reference {
    /// Computes it on all cores, one task per row of W (`k` a multiple of 8).
    pub fn new(x: &[bf16], w: &[bf16], k: usize) -> Self {
        let (m, n) = (x.len() / k, w.len() / k);
        let xf: Vec<f32> = x.par_iter().map(|v| v.to_f32()).collect();
        let wf: Vec<f32> = w.par_iter().map(|v| v.to_f32()).collect();
        // One task per W row: its outputs in every row of x, then scattered into [m, n].
        let cols: Vec<(Vec<f64>, Vec<f64>)> = (0..n)
            .into_par_iter()
            .map(|j| {
                let wr = &wf[j * k..][..k];
                (0..m)
                    .map(|i| {
                        let xr = &xf[i * k..][..k];
                        // Eight partial sums (K is a multiple of 8): independent adds vectorise,
                        // and in f64 their order moves the result by about 2^-53 only.
                        let (mut sum, mut sq) = ([0.0f64; 8], [0.0f64; 8]);
                        for (a, b) in xr.chunks_exact(8).zip(wr.chunks_exact(8)) {
                            for l in 0..8 {
                                let p = f64::from(a[l] * b[l]);
                                sum[l] += p;
                                sq[l] += p * p;
                            }
                        }
                        (sum.iter().sum::<f64>(), sq.iter().sum::<f64>().sqrt())
                    })
                    .unzip()
            })
            .collect();
        let mut value = vec![0.0; m * n];
        let mut terms = vec![0.0; m * n];
        for (j, (v, t)) in cols.into_iter().enumerate() {
            for i in 0..m {
                value[i * n + j] = v[i];
                terms[i * n + j] = t[i];
            }
        }
        Self { n, value, terms }
    }

    /// Holds `got` (`[m, n]`) to the bounds of the module docs; `what` names the run.
    pub fn check(&self, what: &str, got: &[bf16]) -> Result<(), String> {
        if got.len() != self.value.len() {
            return Err(format!("{what}: {} outputs, expected {}", got.len(), self.value.len()));
        }
        let (mut diff2, mut ref2) = (0.0f64, 0.0f64);
        for (row, (g_row, r_row)) in got.chunks(self.n).zip(self.value.chunks(self.n)).enumerate() {
            let (mut row_diff2, mut row_ref2) = (0.0f64, 0.0f64);
            for (col, (g, &r)) in g_row.iter().zip(r_row).enumerate() {
                let gv = g.to_f64();
                let d = (gv - r).abs();
                let bound = TOL * (r.abs() + self.terms[row * self.n + col]);
                // Written so that a NaN fails: NaN <= bound is false.
                if !(gv.is_finite() && d <= bound) {
                    return Err(format!(
                        "{what}: y[{row}][{col}] = {gv} (bits {:#06x}), reference {r}: off by {d:e}, bound {bound:e}",
                        g.to_bits()
                    ));
                }
                row_diff2 += d * d;
                row_ref2 += r * r;
            }
            if row_diff2.sqrt() > TOL * row_ref2.sqrt() {
                let rel = (row_diff2 / row_ref2).sqrt();
                return Err(format!("{what}: row {row} has relative L2 error {rel:e}, over {TOL:e}"));
            }
            diff2 += row_diff2;
            ref2 += row_ref2;
        }
        let rel = (diff2 / ref2).sqrt();
        if rel <= TOL {
            Ok(())
        } else {
            Err(format!("{what}: relative L2 error {rel:e}, over {TOL:e}"))
        }
    }
}

/// Fails unless `got` has exactly the bits of `want`.
pub fn same_bits(what: &str, got: &[bf16], want: &[bf16]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{what}: {} elements, expected {}", got.len(), want.len()));
    }
    match got.iter().zip(want).position(|(a, b)| a.to_bits() != b.to_bits()) {
        None => Ok(()),
        Some(i) => Err(format!("{what}[{i}]: bits {:#06x}, expected {:#06x}", got[i].to_bits(), want[i].to_bits())),
    }
}
