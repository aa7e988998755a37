//! The scale-aware error bound: each (query row, head) output row is held against the size of
//! the sum that produced it, not against the norm of the whole output.
//!
//! Why not the whole-tensor relative L2 alone: a row whose true output is at rounding level (a
//! head with `gamma = 0` beside one whose gate sits on its threshold) makes `|out - ref| / |ref|`
//! rounding noise over rounding noise, so a correct path fails (the fuzzer found such a case,
//! `verify/regressions/oracle-direct-f32-*.json`); and an error confined to one row of a
//! 256-sequence batch is diluted by every other row, so a wrong path passes. A bound per row
//! fixes both.
//!
//! For row `(i, h)` with reference weights `p_t` and values `v_t` (vectors over `D`):
//!
//! ```text
//! |out - ref|  <=  tol * (|ref| + sqrt(sum_t p_t^2 |v_t|^2))  +  u * G  +  floor
//! G = sum over keys near the clamp band of |gamma| (D + F + 4) z_abs_t |v_t|
//! z_abs_t = S_t + |sigma| (S_t + ... + S_{t-F+1}) / F,   S_t = scale * sum_j |q_j k_tj|
//! ```
//!
//! - `tol` is the path's relative tolerance (SPEC section 4). It multiplies the row's own norm
//!   (an output rounded to bf16 is off by up to 2^-9 of it) and the root-sum-square of the
//!   row's terms, which is how rounding errors of independent terms add up (a bf16-rounded P
//!   is off by up to 2^-9 of each `p_t`). Where the terms cancel, the second part carries the
//!   bound; on ordinary rows the two are about equal. A deterministic L1 bound
//!   (`sum_t |p_t| |v_t|`) would be `sqrt(keys)` times looser, loose enough to let a path that
//!   skips a key of an 8K-token row pass.
//! - `u` is the unit roundoff of the arithmetic the path computes scores and the gate in
//!   ([`Path::score_roundoff`](crate::Path::score_roundoff)): `z_t = s_t - sigma * m_t` can
//!   cancel to nothing, and then its rounding error, at most about `(D + F + 4) u z_abs_t`,
//!   is all there is of the weight. Only keys whose `z_t` lies in the clamp band widened by
//!   that error in f32 count (a superset of the keys that matter for an f64 path): outside it
//!   the clamp returns a bound exactly on both sides.
//! - `floor` (`f32::MIN_POSITIVE * sqrt(D)`) lets a device that flushes subnormals pass.
//!
//! The pass that measures these also counts the gate's exact zeros, so the reference costs one
//! pass over the scores beside the direct oracle, as before.

use ndarray::{Array2, Array3, Axis};
use oracle::hp1::Hp1Inputs;
use rayon::prelude::*;

/// Unit roundoff of f32 (2^-24): the score arithmetic of the f32 oracle paths and the kernels.
pub const F32_ROUNDOFF: f64 = f32::EPSILON as f64 / 2.0;
/// Unit roundoff of f64 (2^-53).
pub const F64_ROUNDOFF: f64 = f64::EPSILON / 2.0;

/// The scales of every `(query row, head)` row of a reference output.
#[derive(Clone, Debug, PartialEq)]
pub struct RowScales {
    /// `[num_tokens, Hq]`: `|ref|`, the L2 norm of the reference row.
    pub out_norm: Array2<f64>,
    /// `[num_tokens, Hq]`: `sqrt(sum_t p_t^2 |v_t|^2)`.
    pub term_norm: Array2<f64>,
    /// `[num_tokens, Hq]`: `G`, the gate's conditioning; times a unit roundoff it bounds the
    /// error a path's own score arithmetic puts into the weights.
    pub gate_cond: Array2<f64>,
    /// `sqrt(D)` times the smallest normal f32.
    pub floor: f64,
}

/// What a path may be off by on each row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bound {
    /// Relative tolerance (SPEC section 4).
    pub tolerance: f64,
    /// Unit roundoff of the path's score and gate arithmetic.
    pub roundoff: f64,
}

impl Bound {
    /// `tolerance` for a path whose scores and gate are computed in f32 (every kernel).
    pub fn f32(tolerance: f64) -> Self {
        Self { tolerance, roundoff: F32_ROUNDOFF }
    }
}

impl RowScales {
    /// The largest `|out - ref|` row `[token, head]` may show under `bound`.
    pub fn row_bound(&self, row: [usize; 2], bound: Bound) -> f64 {
        bound.tolerance * (self.out_norm[row] + self.term_norm[row]) + bound.roundoff * self.gate_cond[row] + self.floor
    }
}

/// The scales of `reference` (the direct f64 output of `inp`) and the number of exactly-zero
/// gate weights over every row, head and causal key, with the number of weights.
pub fn row_scales(inp: &Hp1Inputs<'_, f64>, reference: &Array3<f64>) -> oracle::Result<(RowScales, usize, usize)> {
    let dims = inp.validate()?;
    let (hq, d) = (dims.num_heads, dims.head_dim);
    let rows = inp.meta.rows();
    let per_row: Vec<Vec<HeadScale>> =
        rows.par_iter().map(|&row| (0..hq).map(|h| head_scale(inp, row, h)).collect()).collect();
    let mut scales = RowScales {
        out_norm: reference.map_axis(Axis(2), |r| r.dot(&r).sqrt()),
        term_norm: Array2::zeros((dims.num_tokens, hq)),
        gate_cond: Array2::zeros((dims.num_tokens, hq)),
        floor: f64::from(f32::MIN_POSITIVE) * (d as f64).sqrt(),
    };
    let (mut zeros, mut total) = (0, 0);
    for (row, heads) in rows.iter().zip(per_row) {
        for (h, s) in heads.into_iter().enumerate() {
            scales.term_norm[[row.token, h]] = s.term2.sqrt();
            scales.gate_cond[[row.token, h]] = s.gate_cond;
            zeros += s.zeros;
            total += s.keys;
        }
    }
    Ok((scales, zeros, total))
}

struct HeadScale {
    term2: f64,
    gate_cond: f64,
    zeros: usize,
    keys: usize,
}

/// One row and head: scores and their magnitudes in one pass over the keys, the oracle's gate
/// for the weights, and the FIR of the scores again for `z_t` (where it lies against the
/// clamp band) and of the magnitudes for `z_abs_t`.
fn head_scale(inp: &Hp1Inputs<'_, f64>, row: oracle::hp1::QueryRow, h: usize) -> HeadScale {
    let p = inp.params;
    let g = h / (inp.q.dim().1 / inp.key_cache.dim().2);
    let q = inp.q.slice(ndarray::s![row.token, h, ..]);
    let keys = row.pos + 1;
    let (mut s, mut mag) = (Vec::with_capacity(keys), Vec::with_capacity(keys));
    for t in 0..keys {
        let k = inp.key(row.seq, t, g);
        let (dot, abs) = q.iter().zip(k.iter()).fold((0.0, 0.0), |(d, a), (&x, &y)| (d + x * y, a + (x * y).abs()));
        s.push(p.scale * dot);
        mag.push(p.scale.abs() * abs);
    }
    let mut w = vec![0.0; keys];
    inp.gate(h).apply(&[], &s, &mut w);
    let (sigma, gamma, f) = (inp.sigma[h], inp.gamma[h], p.fir_k);
    let cond = (q.len() + f + 4) as f64;
    let rectify = |x: f64| if p.relu_pre { x.max(0.0) } else { x };
    let window = |t: usize, of: &dyn Fn(usize) -> f64| (t.saturating_sub(f - 1)..=t).map(of).sum::<f64>() / f as f64;
    let mut out = HeadScale { term2: 0.0, gate_cond: 0.0, zeros: 0, keys };
    for t in 0..keys {
        let v = inp.value(row.seq, t, g);
        let v2 = v.dot(&v);
        out.term2 += w[t] * w[t] * v2;
        out.zeros += usize::from(w[t] == 0.0);
        let z = s[t] - sigma * window(t, &|i| rectify(s[i]));
        let z_abs = mag[t] + sigma.abs() * window(t, &|i| mag[i]);
        let slack = cond * F32_ROUNDOFF * z_abs;
        if z >= p.clip_min - slack && z <= p.clip_max + slack {
            out.gate_cond += gamma.abs() * cond * z_abs * v2.sqrt();
        }
    }
    out
}
