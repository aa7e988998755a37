//! Properties of UClipNorm and RoPE that the fused GPU kernels rely on: UClipNorm is bounded by
//! its gain and shift for every parameter shape, and RoPE makes `q . k` a function of the position
//! difference only.

use ndarray::{Array1, Array2};
use oracle::model::weights::UClipNormWeights;
use oracle::norm::{uclipnorm, uclipnorm_inplace};
use oracle::rope::{apply_rope, RopeAngles};
use proptest::prelude::*;

/// A norm over `c` channels with `alpha`/`gamma` scalar or per channel and `beta` absent or present.
fn norm_case() -> impl Strategy<Value = (Array2<f64>, UClipNormWeights<f64>)> {
    (1usize..12, 1usize..4, any::<(bool, bool, bool)>()).prop_flat_map(|(c, rows, (a_full, g_full, has_b))| {
        let len = |full: bool| if full { c } else { 1 };
        (
            prop::collection::vec(-50.0f64..50.0, rows * c),
            prop::collection::vec(-5.0f64..5.0, len(a_full)),
            prop::collection::vec(-3.0f64..3.0, len(g_full)),
            prop::collection::vec(-2.0f64..2.0, c),
        )
            .prop_map(move |(x, a, g, b)| {
                let w = UClipNormWeights {
                    alpha: Array1::from(a),
                    weight: Array1::from(g),
                    bias: has_b.then(|| Array1::from(b)),
                };
                (Array2::from_shape_vec((rows, c), x).expect("rows * c values"), w)
            })
    })
}

/// Parameter `p` (`[1]` or `[C]`) at channel `c`.
fn at(p: &Array1<f64>, c: usize) -> f64 {
    if p.len() == 1 {
        p[0]
    } else {
        p[c]
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `x` (`[1, D]`) rotated to `pos`.
fn rotated(x: &[f64], pos: usize, theta: f64) -> Vec<f64> {
    let mut a = Array2::from_shape_vec((1, x.len()), x.to_vec()).expect("one row");
    apply_rope(a.view_mut(), pos, theta);
    a.into_raw_vec_and_offset().0
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn uclipnorm_stays_within_gain_plus_shift_per_channel((x, w) in norm_case()) {
        let y = uclipnorm(x.view(), &w);
        for ((r, c), &v) in y.indexed_iter() {
            let beta = w.bias.as_ref().map_or(0.0, |b| b[c]);
            prop_assert!(v.abs() <= at(&w.weight, c).abs() + beta.abs() + 1e-12, "channel {c}: {v}");
            // Saturated inputs land exactly on gamma * sign + beta.
            let ax = at(&w.alpha, c) * x[[r, c]];
            if ax.abs() >= 1.0 {
                prop_assert_eq!(v, at(&w.weight, c) * ax.signum() + beta);
            }
        }
        let mut z = x.clone();
        uclipnorm_inplace(z.view_mut(), &w);
        prop_assert_eq!(&z, &y);
        // A scalar parameter acts like the same value in every channel.
        let c = x.ncols();
        let full = |p: &Array1<f64>| Array1::from_shape_fn(c, |i| at(p, i));
        let wide = UClipNormWeights { alpha: full(&w.alpha), weight: full(&w.weight), bias: w.bias.clone() };
        prop_assert_eq!(uclipnorm(x.view(), &wide), y);
    }

    #[test]
    fn rope_dot_products_depend_only_on_the_position_difference(
        half in 1usize..16,
        seed_q in prop::collection::vec(-2.0f64..2.0, 32),
        seed_k in prop::collection::vec(-2.0f64..2.0, 32),
        m in 0usize..4096,
        n in 0usize..4096,
        shift in 0usize..4096,
        big_theta in any::<bool>(),
    ) {
        let d = 2 * half;
        let theta = if big_theta { 1_000_000.0 } else { 10_000.0 };
        let (q, k) = (&seed_q[..d], &seed_k[..d]);
        let a = dot(&rotated(q, m, theta), &rotated(k, n, theta));
        let b = dot(&rotated(q, m + shift, theta), &rotated(k, n + shift, theta));
        let scale = dot(q, q).sqrt() * dot(k, k).sqrt();
        prop_assert!((a - b).abs() <= 1e-9 * scale.max(1e-300), "{a} vs {b}");
        // A rotation keeps the norm.
        let r = rotated(q, m, theta);
        prop_assert!((dot(&r, &r) - dot(q, q)).abs() <= 1e-12 * dot(q, q).max(1e-300));
    }

    #[test]
    fn rope_at_position_zero_is_the_identity(
        x in (1usize..8).prop_flat_map(|half| prop::collection::vec(-1e3f64..1e3, 2 * half))
    ) {
        prop_assert_eq!(rotated(&x, 0, 10_000.0), x);
    }
}

#[test]
fn uclipnorm_matches_its_formula_on_a_hand_case() {
    let x = ndarray::array![[0.1, -0.7, 3.0, -9.0]];
    let w = UClipNormWeights {
        alpha: ndarray::array![2.0, 1.0, 0.5, 0.25],
        weight: ndarray::array![-1.5],
        bias: Some(ndarray::array![0.0, 1.0, 0.0, -1.0]),
    };
    // alpha*x = [0.2, -0.7, 1.5, -2.25] -> clamp [0.2, -0.7, 1, -1] -> * -1.5 -> + beta
    let want: Array2<f64> = ndarray::array![[-0.3, 2.05, -1.5, 0.5]];
    let y = uclipnorm(x.view(), &w);
    assert!(y.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-15), "{y}");
}

#[test]
fn rope_angles_reused_across_heads_match_per_call_rotation() {
    let x = Array2::from_shape_fn((3, 8), |(h, j)| (h * 8 + j) as f64 * 0.1 - 1.0);
    let mut a = x.clone();
    RopeAngles::new(77, 8, 10_000.0).apply(a.view_mut());
    for h in 0..3 {
        let row: Vec<f64> = x.row(h).to_vec();
        assert_eq!(a.row(h).to_vec(), rotated(&row, 77, 10_000.0));
    }
}
