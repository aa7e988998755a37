//! Rotary position embedding, the rotate-half form over the whole head (SPEC section 1).
//!
//! For `j < D/2`, `f_j = theta^(-2j/D)`, angle `a = pos * f_j`:
//! `y[j] = x[j] cos a - x[j+D/2] sin a`, `y[j+D/2] = x[j+D/2] cos a + x[j] sin a`.
//!
//! Angles, cosines and sines are computed in f64 whatever `T` is: at positions near 32K an f32
//! angle is already off by ~1e-3 rad, which would be the largest error of the whole f32 path.
//! The rotation itself is done in `T`.

use ndarray::ArrayViewMut2;

use crate::scalar::Scalar;

/// The cosines and sines of one position, for every frequency of a head.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeAngles {
    cos: Vec<f64>,
    sin: Vec<f64>,
}

impl RopeAngles {
    /// The angles of absolute position `pos` for heads of `head_dim` (even) channels.
    pub fn new(pos: usize, head_dim: usize, theta: f64) -> Self {
        let half = head_dim / 2;
        let (cos, sin) = (0..half)
            .map(|j| {
                let a = pos as f64 * theta.powf(-2.0 * j as f64 / head_dim as f64);
                (a.cos(), a.sin())
            })
            .unzip();
        Self { cos, sin }
    }

    /// Rotates every row of `x` (`[heads, D]`, one token) in place.
    ///
    /// # Panics
    /// If `D` is not the `head_dim` the angles were made for (the model checks this when built).
    pub fn apply<T: Scalar>(&self, mut x: ArrayViewMut2<'_, T>) {
        let half = self.cos.len();
        assert_eq!(x.ncols(), 2 * half, "RoPE angles were made for head_dim {}", 2 * half);
        for mut row in x.rows_mut() {
            for j in 0..half {
                let (c, s) = (T::of(self.cos[j]), T::of(self.sin[j]));
                let (a, b) = (row[j], row[j + half]);
                row[j] = a * c - b * s;
                row[j + half] = b * c + a * s;
            }
        }
    }
}

/// Rotates `x` (`[heads, D]`, one token at absolute position `pos`) in place.
///
/// # Panics
/// If `D` is odd.
pub fn apply_rope<T: Scalar>(x: ArrayViewMut2<'_, T>, pos: usize, theta: f64) {
    let d = x.ncols();
    assert!(d.is_multiple_of(2), "RoPE needs an even head_dim, got {d}");
    RopeAngles::new(pos, d, theta).apply(x);
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn rotates_pairs_j_and_j_plus_half_by_pos_times_frequency() {
        // D = 4, theta = 100: f_0 = 1, f_1 = 100^(-1/2) = 0.1; at pos 5 the angles are 5 and 0.5.
        let mut x = array![[1.0, 2.0, 3.0, 4.0]];
        apply_rope(x.view_mut(), 5, 100.0);
        let (a0, a1) = (5.0f64, 0.5f64);
        let want = [
            1.0 * a0.cos() - 3.0 * a0.sin(),
            2.0 * a1.cos() - 4.0 * a1.sin(),
            3.0 * a0.cos() + 1.0 * a0.sin(),
            4.0 * a1.cos() + 2.0 * a1.sin(),
        ];
        for (got, want) in x.iter().zip(want) {
            assert!((got - want).abs() < 1e-14, "{got} vs {want}");
        }
    }
}
