//! UClipNorm (SPEC section 3): `y = gamma * clamp(alpha * x, -1, 1) + beta`, per channel.
//!
//! There is no reduction over the row, so every output element depends on one input element
//! only: that is what lets the GPU fuse it into neighbouring kernels. `alpha` and `gamma` are
//! each `[1]` (one value for all channels) or `[C]`; `beta` is `[C]` or absent. The clamp lets
//! NaN through so a bad activation is never hidden behind a plausible bounded value.

use ndarray::{Array1, Array2, ArrayView2, ArrayViewMut1, ArrayViewMut2, Zip};

use crate::error::{invalid, Result};
use crate::model::weights::UClipNormWeights;
use crate::scalar::Scalar;

/// Checks that `w` fits rows of `channels` channels; `tensor` is the checkpoint prefix
/// (`model.layers.3.self_attn.q_norm`) the error names.
pub fn validate_uclipnorm<T: Scalar>(w: &UClipNormWeights<T>, channels: usize, tensor: &str) -> Result<()> {
    let check = |part: &str, a: &Array1<T>, scalar_ok: bool| -> Result<()> {
        let n = a.len();
        if n == channels || (scalar_ok && n == 1) {
            return Ok(());
        }
        let expected = if scalar_ok { format!("[1] or [{channels}]") } else { format!("[{channels}]") };
        invalid("weights", format!("{tensor}.{part} has shape [{n}], expected {expected}"))
    };
    check("alpha", &w.alpha, true)?;
    check("weight", &w.weight, true)?;
    if let Some(b) = &w.bias {
        check("bias", b, false)?;
    }
    Ok(())
}

/// The norm's parameters broadcast to `[C]`, so the per-element loop needs no shape cases.
struct Broadcast<T> {
    alpha: Array1<T>,
    gamma: Array1<T>,
    beta: Array1<T>,
}

impl<T: Scalar> Broadcast<T> {
    fn new(w: &UClipNormWeights<T>, channels: usize) -> Self {
        let full = |a: &Array1<T>| -> Array1<T> {
            if a.len() == 1 {
                Array1::from_elem(channels, a[0])
            } else {
                assert_eq!(a.len(), channels, "UClipNorm parameter does not fit {channels} channels");
                a.clone()
            }
        };
        let beta = match &w.bias {
            Some(b) => full(b),
            None => Array1::zeros(channels),
        };
        Self { alpha: full(&w.alpha), gamma: full(&w.weight), beta }
    }

    fn row(&self, mut x: ArrayViewMut1<'_, T>) {
        Zip::from(&mut x)
            .and(&self.alpha)
            .and(&self.gamma)
            .and(&self.beta)
            .for_each(|x, &a, &g, &b| *x = g * clip_unit(a * *x) + b);
    }
}

/// `clamp(v, -1, 1)` that keeps NaN.
fn clip_unit<T: Scalar>(v: T) -> T {
    if v < -T::one() {
        -T::one()
    } else if v > T::one() {
        T::one()
    } else {
        v
    }
}

/// UClipNorm of every row of `x` (`[rows, C]`).
///
/// # Panics
/// If `w` does not fit `C` channels; [`validate_uclipnorm`] checks that first (the model does so
/// once, when it is built).
pub fn uclipnorm<T: Scalar>(x: ArrayView2<'_, T>, w: &UClipNormWeights<T>) -> Array2<T> {
    let mut y = x.to_owned();
    uclipnorm_inplace(y.view_mut(), w);
    y
}

/// UClipNorm of every row of `x` (`[rows, C]`), in place.
///
/// # Panics
/// As [`uclipnorm`].
pub fn uclipnorm_inplace<T: Scalar>(mut x: ArrayViewMut2<'_, T>, w: &UClipNormWeights<T>) {
    let b = Broadcast::new(w, x.ncols());
    for r in x.rows_mut() {
        b.row(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    fn w(alpha: Array1<f64>, weight: Array1<f64>, bias: Option<Array1<f64>>) -> UClipNormWeights<f64> {
        UClipNormWeights { alpha, weight, bias }
    }

    #[test]
    fn clamps_then_scales_and_shifts_per_channel() {
        let x = array![[0.25, 4.0, -4.0]];
        let n = w(array![2.0], array![1.0, 2.0, 3.0], Some(array![0.5, 0.0, -0.5]));
        // alpha*x = [0.5, 8, -8] -> clamp [0.5, 1, -1] -> gamma [0.5, 2, -3] -> + beta.
        assert_eq!(uclipnorm(x.view(), &n), array![[1.0, 2.0, -3.5]]);
        let mut y = x.clone();
        uclipnorm_inplace(y.view_mut(), &n);
        assert_eq!(y, array![[1.0, 2.0, -3.5]]);
    }

    #[test]
    fn nan_passes_through() {
        let y = uclipnorm(array![[f64::NAN]].view(), &w(array![1.0], array![1.0], None));
        assert!(y[[0, 0]].is_nan());
    }

    #[test]
    fn validate_names_the_tensor_and_shapes() {
        let n = w(array![1.0, 2.0], array![1.0], None);
        let e = validate_uclipnorm(&n, 3, "model.norm").unwrap_err().to_string();
        assert!(e.contains("model.norm.alpha") && e.contains("[2]") && e.contains("[1] or [3]"), "{e}");
        let n = w(array![1.0], array![1.0], Some(array![0.0]));
        let e = validate_uclipnorm(&n, 3, "model.norm").unwrap_err().to_string();
        assert!(e.contains("model.norm.bias") && e.contains("expected [3]"), "{e}");
        assert!(validate_uclipnorm(&w(array![1.0], array![1.0, 1.0, 1.0], None), 3, "n").is_ok());
    }
}
