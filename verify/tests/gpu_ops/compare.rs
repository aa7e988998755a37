//! What the op checks share: seeded bf16 data, UClipNorm parameters in every shape, and the
//! comparison of a bf16 output with the oracle's bf16-faithful values.
//!
//! The bound. The kernels compute in f32 and round once to bf16 where the oracle (in f64) rounds,
//! so an element either has the oracle's bits or, when the f32 value sits within f32 rounding
//! of a bf16 midpoint, the neighbouring bf16: one bf16 ulp. Where the formula subtracts (the
//! rotation, `weight * clip + bias`, the residual sum) the f32 error is relative to the operands,
//! not to the result, so each check adds an absolute slack of 2^-17 of the tensor's largest
//! value, 2^9 times tighter than one ulp of that value. Every element must lie within
//! `ulp_bf16(max(|got|, |want|)) + extra + slack` (`extra` carries a rounding of an earlier,
//! separately checked stage), the relative L2 error must be at most 4e-3 (SPEC section 4), and a
//! NaN or infinity never passes.

use std::sync::Arc;

use gpu::ops::UClipNormParams;
use gpu::Gpu;
use half::bf16;
use ndarray::Array1;
use oracle::model::weights::UClipNormWeights;
use verify::rng::Counter;

/// A check's outcome, as `verify::gpu_harness` runs it.
pub type Check = Result<(), String>;

/// SPEC section 4's relative L2 bound for paths whose math stays in f32.
pub const REL_L2: f64 = 4e-3;

/// The bf16 poison written into every output before a launch: a NaN (all bits set).
pub const POISON: bf16 = bf16::from_bits(0xFFFF);

/// A GPU result as a check's error.
pub fn g<T>(r: gpu::Result<T>) -> Result<T, String> {
    r.map_err(|e| e.to_string())
}

/// `n` bf16 values uniform in `[-scale, scale)`, element `i` a function of `(c, i)` only.
pub fn random_bf16(c: &Counter, n: usize, scale: f64) -> Vec<bf16> {
    (0..n).map(|i| bf16::from_f64(scale * c.uniform(&[i as u64]))).collect()
}

/// bf16 values widened to f64.
pub fn widen(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// The absolute slack for a tensor whose largest reference value is `max_abs` (module docs).
pub fn slack(want: &[f64]) -> f64 {
    want.iter().fold(0.0f64, |m, w| m.max(w.abs())) * 2f64.powi(-17)
}

/// The distance from `|x|` rounded to bf16 to the next bf16 up: one ulp at `x`.
pub fn bf16_ulp(x: f64) -> f64 {
    let b = bf16::from_f64(x.abs());
    if !b.is_finite() {
        return f64::INFINITY;
    }
    bf16::from_bits(b.to_bits() + 1).to_f64() - b.to_f64()
}

/// A UClipNorm's parameter shapes: alpha `[1]` or `[C]`, weight `[1]` or `[C]`, bias absent or `[C]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NormShape {
    /// alpha is `[C]` (else `[1]`).
    pub alpha_per_channel: bool,
    /// weight is `[C]` (else `[1]`).
    pub weight_per_channel: bool,
    /// bias is present (`[C]`).
    pub bias: bool,
}

/// All eight combinations.
pub const ALL_NORM_SHAPES: [NormShape; 8] = {
    let mut all = [NormShape { alpha_per_channel: false, weight_per_channel: false, bias: false }; 8];
    let mut i = 0;
    while i < 8 {
        all[i] = NormShape { alpha_per_channel: i & 1 != 0, weight_per_channel: i & 2 != 0, bias: i & 4 != 0 };
        i += 1;
    }
    all
};

/// One drawn norm: the oracle's weights and the same values on the device.
pub struct DrawnNorm {
    /// For `oracle::norm`.
    pub oracle: UClipNormWeights<f64>,
    /// For the kernels.
    pub device: UClipNormParams,
}

/// Draws bf16-exact parameters of `shape` over `channels`: alpha of either sign with magnitude
/// 0.25 to 1.75 (inputs of a few units then clip often), weight of either sign 0.5 to 1.5, bias
/// within 0.5.
pub fn draw_norm(gpu: &Arc<Gpu>, seed: u64, shape: NormShape, channels: usize) -> Result<DrawnNorm, String> {
    let values = |stream: u64, n: usize, lo: f64, hi: f64, signed: bool| -> Vec<f32> {
        let c = Counter::new(seed, stream);
        (0..n)
            .map(|i| {
                let u = c.uniform(&[i as u64]);
                let m = lo + (hi - lo) * u.abs();
                let v = if signed && u < 0.0 { -m } else { m };
                bf16::from_f64(v).to_f32()
            })
            .collect()
    };
    let len = |per_channel: bool| if per_channel { channels } else { 1 };
    let alpha = values(1, len(shape.alpha_per_channel), 0.25, 1.75, true);
    let weight = values(2, len(shape.weight_per_channel), 0.5, 1.5, true);
    let bias = shape.bias.then(|| values(3, channels, 0.0, 0.5, true));
    let to_f64 = |v: &[f32]| Array1::from_iter(v.iter().map(|&x| f64::from(x)));
    let oracle = UClipNormWeights { alpha: to_f64(&alpha), weight: to_f64(&weight), bias: bias.as_deref().map(to_f64) };
    let device = g(UClipNormParams::upload(gpu, "drawn", channels, &alpha, &weight, bias.as_deref()))?;
    Ok(DrawnNorm { oracle, device })
}

/// Holds `got` against `want` (module docs): every element finite and within
/// `ulp + extra[i] + slack`, and the relative L2 error within [`REL_L2`].
pub fn compare_bf16(what: &str, got: &[bf16], want: &[f64], extra: Option<&[f64]>, slack: f64) -> Check {
    if got.len() != want.len() {
        return Err(format!("{what}: {} elements, reference {}", got.len(), want.len()));
    }
    let (mut diff2, mut ref2, mut differing) = (0.0f64, 0.0f64, 0usize);
    for (i, (&gb, &w)) in got.iter().zip(want).enumerate() {
        let gv = gb.to_f64();
        if !gv.is_finite() || !w.is_finite() {
            return Err(format!("{what}[{i}]: got {gv}, want {w} (bits {:#06x})", gb.to_bits()));
        }
        let d = (gv - w).abs();
        let bound = bf16_ulp(gv.abs().max(w.abs())) + extra.map_or(0.0, |e| e[i]) + slack;
        if d > bound {
            return Err(format!("{what}[{i}]: got {gv}, want {w}: off by {d:e}, more than {bound:e}"));
        }
        differing += usize::from(d > 0.0);
        diff2 += d * d;
        ref2 += w * w;
    }
    rel_l2_check(what, diff2, ref2, differing, got.len())
}

/// Holds `got` against `want` by the relative L2 bound alone (for a whole chain of roundings,
/// whose stages are held elementwise separately).
pub fn compare_l2(what: &str, got: &[bf16], want: &[f64]) -> Check {
    let (mut diff2, mut ref2, mut differing) = (0.0f64, 0.0f64, 0usize);
    for (i, (&gb, &w)) in got.iter().zip(want).enumerate() {
        let gv = gb.to_f64();
        if !gv.is_finite() || !w.is_finite() {
            return Err(format!("{what}[{i}]: got {gv}, want {w}"));
        }
        differing += usize::from(gv != w);
        diff2 += (gv - w) * (gv - w);
        ref2 += w * w;
    }
    rel_l2_check(what, diff2, ref2, differing, got.len())
}

fn rel_l2_check(what: &str, diff2: f64, ref2: f64, differing: usize, n: usize) -> Check {
    let err = if ref2 == 0.0 { diff2.sqrt() } else { (diff2 / ref2).sqrt() };
    if err <= REL_L2 {
        Ok(())
    } else {
        Err(format!("{what}: relative L2 error {err:e} over {REL_L2:e} ({differing} of {n} elements differ)"))
    }
}

/// Fails unless `got` has exactly the bits of `want`.
pub fn same_bits(what: &str, got: &[bf16], want: &[bf16]) -> Check {
    if got.len() != want.len() {
        return Err(format!("{what}: {} elements, expected {}", got.len(), want.len()));
    }
    match got.iter().zip(want).position(|(a, b)| a.to_bits() != b.to_bits()) {
        None => Ok(()),
        Some(i) => Err(format!("{what}[{i}]: bits {:#06x}, expected {:#06x}", got[i].to_bits(), want[i].to_bits())),
    }
}
