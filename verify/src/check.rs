//! The comparison of SPEC section 4, made scale-aware: a path's output against the f64 direct
//! oracle on the same case, every element checked, NaN never passing, and every (query row,
//! head) row within its own bound ([`crate::bound`]). The whole-tensor relative L2 error stays
//! in the report beside the worst row's share of its bound.
//!
//! The reference (direct f64 output, the rows' scales and the gate's zero fraction) is computed
//! once per case in [`Reference`] and shared by every path checked on that case.

use ndarray::Array3;
use oracle::hp1::direct::hp1_direct;
use oracle::hp1::Hp1Inputs;

use crate::bound::{row_scales, Bound, RowScales};
use crate::case::{Case, CaseData};
use crate::error::Error;
use crate::path::Path;

/// What one passing check measured.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckReport {
    /// The path's name.
    pub path: String,
    /// Whole-tensor `|out - ref| / |ref|`, or `|out - ref|` where the reference is all zeros.
    pub error: f64,
    /// Whether `error` is absolute (the reference was all zeros).
    pub absolute: bool,
    /// The largest `|out - ref| / bound` over the rows: at most 1 on a pass.
    pub bound_use: f64,
    /// `[token, head]` of that row.
    pub worst_row: [usize; 2],
    /// The path's relative tolerance.
    pub tolerance: f64,
    /// Fraction of the case's gate weights that are exactly zero.
    pub zero_fraction: f64,
    /// Elements compared.
    pub elements: usize,
}

/// Why a check did not pass.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The case could not be built, the reference failed, or the path refused to run.
    #[error("{0}")]
    Error(#[from] Error),
    /// The path was asked to check a case it does not support.
    #[error("path `{path}` does not support this case")]
    Unsupported {
        /// The path's name.
        path: String,
    },
    /// An output element is NaN or infinite (or the reference's is, which is an oracle bug).
    #[error("path `{path}`: element {index:?} is {got}, reference {want}")]
    NotFinite {
        /// The path's name.
        path: String,
        /// `[token, head, dim]`.
        index: [usize; 3],
        /// The path's value.
        got: f64,
        /// The reference value.
        want: f64,
    },
    /// A row's error exceeds its bound.
    #[error(
        "path `{path}`: row [token {}, head {}] is off by {diff:.3e}, over its bound {bound:.3e} \
         (row norm {row_norm:.3e}, tolerance {tolerance:.0e}; worst element {index:?}: got {got}, reference {want}; \
         whole-output relative L2 {error:.3e})",
        row[0], row[1]
    )]
    Tolerance {
        /// The path's name.
        path: String,
        /// `[token, head]` of the row furthest over its bound.
        row: [usize; 2],
        /// `|out - ref|` over that row.
        diff: f64,
        /// The row's bound.
        bound: f64,
        /// `|ref|` of that row.
        row_norm: f64,
        /// The path's relative tolerance.
        tolerance: f64,
        /// Whole-tensor relative L2 error (absolute where the reference is all zeros).
        error: f64,
        /// `[token, head, dim]` of the largest difference in that row.
        index: [usize; 3],
        /// The path's value there.
        got: f64,
        /// The reference value there.
        want: f64,
    },
}

impl Failure {
    /// The name of the failing path, where the failure belongs to one.
    pub fn path(&self) -> Option<&str> {
        match self {
            Self::Error(Error::Path { path, .. })
            | Self::Unsupported { path }
            | Self::NotFinite { path, .. }
            | Self::Tolerance { path, .. } => Some(path),
            Self::Error(_) => None,
        }
    }
}

/// The f64 direct output of a case, the scales of its rows and its gate's zero fraction.
#[derive(Clone, Debug)]
pub struct Reference {
    /// `[num_tokens, Hq, D]` from [`hp1_direct`] in f64.
    pub out: Array3<f64>,
    /// Each row's scales, from which a path's row bounds follow.
    pub scales: RowScales,
    /// See [`zero_fraction`].
    pub zero_fraction: f64,
}

impl Reference {
    /// Runs the direct f64 oracle and the pass over its scores on `inp`.
    pub fn of(inp: &Hp1Inputs<'_, f64>) -> Result<Self, Error> {
        let out = hp1_direct(inp)?;
        let (scales, zeros, total) = row_scales(inp, &out)?;
        Ok(Self { out, scales, zero_fraction: fraction(zeros, total) })
    }

    /// [`Reference::of`] the case's f64 inputs.
    pub fn compute(data: &CaseData) -> Result<Self, Error> {
        Self::of(&data.inputs_f64())
    }
}

fn fraction(zeros: usize, total: usize) -> f64 {
    if total == 0 {
        0.0
    } else {
        zeros as f64 / total as f64
    }
}

/// The fraction of gate weights `p_t` that are exactly zero, over every query row, query head
/// and causal key: the direct pass's gate, counted. 0 for a batch with no query rows.
pub fn zero_fraction(inp: &Hp1Inputs<'_, f64>) -> oracle::Result<f64> {
    let reference = hp1_direct(inp)?;
    let (_, zeros, total) = row_scales(inp, &reference)?;
    Ok(fraction(zeros, total))
}

/// Holds `got` against `reference` under `bound`: any non-finite element fails; otherwise every
/// row's `|out - ref|` must be within [`RowScales::row_bound`].
pub fn compare(path: &str, got: &Array3<f64>, reference: &Reference, bound: Bound) -> Result<CheckReport, Failure> {
    let want = &reference.out;
    if got.dim() != want.dim() {
        return Err(Failure::Error(Error::Path {
            path: path.to_string(),
            reason: format!("output has shape {:?}, reference {:?}", got.shape(), want.shape()),
        }));
    }
    let (tokens, heads, dims) = want.dim();
    let (mut diff2, mut ref2) = (0.0f64, 0.0f64);
    // (|out - ref| / bound, row, |out - ref|, row bound, worst element of the row)
    let mut worst = (0.0f64, [0usize; 2], 0.0f64, 0.0f64, [0usize; 3]);
    for i in 0..tokens {
        for h in 0..heads {
            let (mut row2, mut peak) = (0.0f64, (-1.0f64, [i, h, 0]));
            for k in 0..dims {
                let (g, w) = (got[[i, h, k]], want[[i, h, k]]);
                if !g.is_finite() || !w.is_finite() {
                    return Err(Failure::NotFinite { path: path.to_string(), index: [i, h, k], got: g, want: w });
                }
                let d = (g - w).abs();
                if d > peak.0 {
                    peak = (d, [i, h, k]);
                }
                row2 += d * d;
                ref2 += w * w;
            }
            diff2 += row2;
            let (diff, row_bound) = (row2.sqrt(), reference.scales.row_bound([i, h], bound));
            let share = diff / row_bound;
            if share > worst.0 {
                worst = (share, [i, h], diff, row_bound, peak.1);
            }
        }
    }
    let absolute = ref2 == 0.0;
    let error = if absolute { diff2.sqrt() } else { (diff2 / ref2).sqrt() };
    let (bound_use, row, diff, row_bound, index) = worst;
    if bound_use <= 1.0 {
        return Ok(CheckReport {
            path: path.to_string(),
            error,
            absolute,
            bound_use,
            worst_row: row,
            tolerance: bound.tolerance,
            zero_fraction: reference.zero_fraction,
            elements: want.len(),
        });
    }
    Err(Failure::Tolerance {
        path: path.to_string(),
        row,
        diff,
        bound: row_bound,
        row_norm: reference.scales.out_norm[row],
        tolerance: bound.tolerance,
        error,
        index,
        got: got[index],
        want: want[index],
    })
}

/// Runs `path` on already materialised `data` into a NaN-poisoned buffer and compares it with
/// `reference`.
pub fn check_data(path: &dyn Path, data: &CaseData, reference: &Reference) -> Result<CheckReport, Failure> {
    let mut out = Array3::from_elem(data.out_shape(), f64::NAN);
    path.run(data, &mut out)?;
    compare(&path.name(), &out, reference, path.bound())
}

/// Materialises `case`, computes its reference and checks `path` on it.
pub fn check(path: &dyn Path, case: &Case) -> Result<CheckReport, Failure> {
    if !path.supports(case) {
        return Err(Failure::Unsupported { path: path.name() });
    }
    let data = case.materialise()?;
    check_data(path, &data, &Reference::compute(&data)?)
}

/// Checks every path in `paths` that supports `case`, sharing one reference; a case that cannot
/// be built or referenced is one failure.
pub fn check_all(paths: &[Box<dyn Path>], case: &Case) -> Vec<Result<CheckReport, Failure>> {
    let prepared = case.materialise().and_then(|data| Reference::compute(&data).map(|r| (data, r)));
    match prepared {
        Err(e) => vec![Err(Failure::Error(e))],
        Ok((data, reference)) => {
            paths.iter().filter(|p| p.supports(case)).map(|p| check_data(p.as_ref(), &data, &reference)).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use ndarray::{array, Array2, Axis};

    use super::*;
    use crate::bound::F64_ROUNDOFF;
    use crate::case::tests::small;
    use crate::path::all_paths;

    /// A reference whose rows are bounded by their own norm alone (no terms, no gate, no floor).
    fn by_norm(out: Array3<f64>) -> Reference {
        let out_norm = out.map_axis(Axis(2), |r| r.dot(&r).sqrt());
        let zeros = Array2::zeros(out_norm.dim());
        Reference {
            scales: RowScales { out_norm, term_norm: zeros.clone(), gate_cond: zeros, floor: 0.0 },
            out,
            zero_fraction: 0.5,
        }
    }

    fn a(x: [f64; 2]) -> Array3<f64> {
        array![[[x[0], x[1]]]]
    }

    fn tol(tolerance: f64) -> Bound {
        Bound { tolerance, roundoff: F64_ROUNDOFF }
    }

    #[test]
    fn a_row_is_held_against_its_own_norm() {
        // |(3, 4.004) - (3, 4)| = 0.004 against 1e-3 * |(3, 4)| = 5e-3.
        let r = compare("p", &a([3.0, 4.004]), &by_norm(a([3.0, 4.0])), tol(1e-3)).unwrap();
        assert!((r.bound_use - 0.8).abs() < 1e-9 && (r.error - 8e-4).abs() < 1e-12 && !r.absolute, "{r:?}");
        let f = compare("p", &a([3.0, 4.004]), &by_norm(a([3.0, 4.0])), tol(7e-4)).unwrap_err();
        assert!(matches!(f, Failure::Tolerance { row: [0, 0], index: [0, 0, 1], .. }), "{f}");
    }

    #[test]
    fn nan_and_infinity_never_pass() {
        for bad in [f64::NAN, f64::INFINITY] {
            let f = compare("p", &a([1.0, bad]), &by_norm(a([1.0, 2.0])), tol(1e9)).unwrap_err();
            assert!(matches!(f, Failure::NotFinite { index: [0, 0, 1], .. }), "{f}");
        }
        assert!(compare("p", &a([f64::NAN, 0.0]), &by_norm(a([f64::NAN, 0.0])), tol(1e9)).is_err());
    }

    #[test]
    fn a_zero_row_takes_nothing_but_its_floor() {
        let mut zero = by_norm(a([0.0, 0.0]));
        assert!(compare("p", &a([0.0, 1e-30]), &zero, tol(1e-2)).is_err());
        zero.scales.floor = 1e-29;
        let r = compare("p", &a([0.0, 1e-30]), &zero, tol(1e-2)).unwrap();
        assert!(r.absolute && r.error == 1e-30, "{r:?}");
    }

    #[test]
    fn one_wrong_row_of_many_fails_though_the_whole_output_is_close() {
        let want = Array3::from_shape_fn((256, 2, 4), |(i, h, k)| ((i * 8 + h * 4 + k) % 7) as f64 - 3.0);
        let mut got = want.clone();
        let row_norm = want.slice(ndarray::s![100, 1, ..]).mapv(|x| x * x).sum().sqrt();
        got[[100, 1, 2]] += 0.05 * row_norm;
        let f = compare("p", &got, &by_norm(want), tol(4e-3)).unwrap_err();
        match f {
            Failure::Tolerance { row, error, .. } => {
                assert_eq!(row, [100, 1]);
                assert!(error < 4e-3, "the whole-output error {error} alone would have passed");
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn every_path_passes_the_small_case_and_reports_its_zero_fraction() {
        let case = small();
        let results = check_all(&all_paths(), &case);
        assert_eq!(results.len(), all_paths().len());
        for r in results {
            let r = r.unwrap();
            assert!(r.zero_fraction > 0.0 && r.zero_fraction < 1.0, "{r:?}");
            assert!(r.bound_use <= 1.0, "{r:?}");
            assert_eq!(r.elements, 5 * 4 * 8);
        }
    }

    #[test]
    fn zero_fraction_counts_every_weight() {
        // clip_min > 0 leaves no zero weight; gamma = 0 makes every weight zero.
        let positive = Case { clip_min: 0.25, gamma: vec![1.0, 0.5, 2.0, 0.25], ..small() };
        let data = positive.materialise().unwrap();
        assert_eq!(zero_fraction(&data.inputs_f64()).unwrap(), 0.0);
        let silent = Case { gamma: vec![0.0; 4], ..small() };
        let data = silent.materialise().unwrap();
        assert_eq!(zero_fraction(&data.inputs_f64()).unwrap(), 1.0);
        assert_eq!(Reference::compute(&data).unwrap().zero_fraction, 1.0);
    }

    #[test]
    fn a_path_that_leaves_the_poison_is_caught() {
        struct Lazy;
        impl Path for Lazy {
            fn name(&self) -> String {
                "lazy".into()
            }
            fn supports(&self, _: &Case) -> bool {
                true
            }
            fn tolerance(&self) -> f64 {
                1.0
            }
            fn run(&self, data: &CaseData, out: &mut Array3<f64>) -> crate::Result<()> {
                // Writes every query row but the last.
                let full = hp1_direct(&data.inputs_f64())?;
                let n = full.dim().0 - 1;
                out.slice_mut(ndarray::s![..n, .., ..]).assign(&full.slice(ndarray::s![..n, .., ..]));
                Ok(())
            }
        }
        let f = check(&Lazy, &small()).unwrap_err();
        assert!(matches!(f, Failure::NotFinite { index: [4, 0, 0], .. }), "{f}");
        assert_eq!(f.path(), Some("lazy"));
    }
}
