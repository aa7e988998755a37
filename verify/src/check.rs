//! The comparison of SPEC section 4: a path's output against the f64 direct oracle on the same
//! case, every element checked, relative L2 error within the path's bound, NaN never passing.
//!
//! The reference (direct f64 output and the gate's zero fraction) is computed once per case in
//! [`Reference`] and shared by every path checked on that case.

use ndarray::Array3;
use oracle::hp1::direct::hp1_direct;
use oracle::hp1::Hp1Inputs;

use crate::case::{Case, CaseData};
use crate::error::Error;
use crate::path::Path;

/// What one passing check measured.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckReport {
    /// The path's name.
    pub path: String,
    /// `|out - ref| / |ref|`, or `|out - ref|` where the reference is all zeros.
    pub error: f64,
    /// Whether `error` is absolute (the reference was all zeros).
    pub absolute: bool,
    /// The path's bound.
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
    /// The error exceeds the path's bound.
    #[error(
        "path `{path}`: {} error {error:.3e} exceeds {tolerance:.0e} (worst element {index:?}: got {got}, reference {want})",
        if *absolute { "absolute" } else { "relative L2" }
    )]
    Tolerance {
        /// The path's name.
        path: String,
        /// The measured error.
        error: f64,
        /// Whether it is absolute (all-zero reference).
        absolute: bool,
        /// The path's bound.
        tolerance: f64,
        /// `[token, head, dim]` of the largest difference.
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

/// The f64 direct output of a case and its gate's zero fraction.
#[derive(Clone, Debug)]
pub struct Reference {
    /// `[num_tokens, Hq, D]` from [`hp1_direct`] in f64.
    pub out: Array3<f64>,
    /// See [`zero_fraction`].
    pub zero_fraction: f64,
}

impl Reference {
    /// Runs the direct f64 oracle and the zero-fraction pass on `data`.
    pub fn compute(data: &CaseData) -> Result<Self, Error> {
        let inp = data.inputs_f64();
        Ok(Self { out: hp1_direct(&inp)?, zero_fraction: zero_fraction(&inp)? })
    }
}

/// The fraction of gate weights `p_t` that are exactly zero, over every query row, query head
/// and causal key: the direct pass's gate, counted. 0 for a batch with no query rows.
pub fn zero_fraction(inp: &Hp1Inputs<'_, f64>) -> oracle::Result<f64> {
    let dims = inp.validate()?;
    let (mut zeros, mut total) = (0usize, 0usize);
    for row in inp.meta.rows() {
        for h in 0..dims.num_heads {
            let s = inp.scores(row, h, 0..row.pos + 1);
            let mut p = vec![0.0; s.len()];
            inp.gate(h).apply(&[], &s, &mut p);
            zeros += p.iter().filter(|&&x| x == 0.0).count();
            total += p.len();
        }
    }
    Ok(if total == 0 { 0.0 } else { zeros as f64 / total as f64 })
}

/// Holds `got` against `want` with bound `tolerance`: any non-finite element fails; otherwise
/// the relative L2 error (absolute where `want` is all zeros) must be at most `tolerance`.
pub fn compare(path: &str, got: &Array3<f64>, want: &Array3<f64>, tolerance: f64) -> Result<CheckReport, Failure> {
    if got.dim() != want.dim() {
        return Err(Failure::Error(Error::Path {
            path: path.to_string(),
            reason: format!("output has shape {:?}, reference {:?}", got.shape(), want.shape()),
        }));
    }
    let (mut diff2, mut ref2, mut worst) = (0.0f64, 0.0f64, (0.0f64, [0usize; 3]));
    for ((i, j, k), &w) in want.indexed_iter() {
        let g = got[[i, j, k]];
        if !g.is_finite() || !w.is_finite() {
            return Err(Failure::NotFinite { path: path.to_string(), index: [i, j, k], got: g, want: w });
        }
        let d = (g - w).abs();
        if d > worst.0 {
            worst = (d, [i, j, k]);
        }
        diff2 += d * d;
        ref2 += w * w;
    }
    let absolute = ref2 == 0.0;
    let error = if absolute { diff2.sqrt() } else { (diff2 / ref2).sqrt() };
    if error <= tolerance {
        return Ok(CheckReport {
            path: path.to_string(),
            error,
            absolute,
            tolerance,
            zero_fraction: f64::NAN,
            elements: want.len(),
        });
    }
    let index = worst.1;
    Err(Failure::Tolerance {
        path: path.to_string(),
        error,
        absolute,
        tolerance,
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
    let mut report = compare(&path.name(), &out, &reference.out, path.tolerance())?;
    report.zero_fraction = reference.zero_fraction;
    Ok(report)
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
    use ndarray::array;

    use super::*;
    use crate::case::tests::small;
    use crate::path::all_paths;

    fn a(x: [f64; 2]) -> Array3<f64> {
        array![[[x[0], x[1]]]]
    }

    #[test]
    fn relative_error_is_measured_against_the_reference_norm() {
        // |(3, 4.004) - (3, 4)| / |(3, 4)| = 0.004 / 5 = 8e-4.
        let r = compare("p", &a([3.0, 4.004]), &a([3.0, 4.0]), 1e-3).unwrap();
        assert!((r.error - 8e-4).abs() < 1e-12 && !r.absolute, "{r:?}");
        let f = compare("p", &a([3.0, 4.004]), &a([3.0, 4.0]), 7e-4).unwrap_err();
        assert!(matches!(f, Failure::Tolerance { index: [0, 0, 1], .. }), "{f}");
    }

    #[test]
    fn nan_and_infinity_never_pass() {
        for bad in [f64::NAN, f64::INFINITY] {
            let f = compare("p", &a([1.0, bad]), &a([1.0, 2.0]), 1e9).unwrap_err();
            assert!(matches!(f, Failure::NotFinite { index: [0, 0, 1], .. }), "{f}");
        }
        assert!(compare("p", &a([f64::NAN, 0.0]), &a([f64::NAN, 0.0]), 1e9).is_err());
    }

    #[test]
    fn an_all_zero_reference_is_compared_absolutely() {
        let r = compare("p", &a([0.0, 1e-13]), &a([0.0, 0.0]), 1e-12).unwrap();
        assert!(r.absolute && r.error == 1e-13);
        assert!(compare("p", &a([0.0, 1e-3]), &a([0.0, 0.0]), 1e-12).is_err());
    }

    #[test]
    fn every_path_passes_the_small_case_and_reports_its_zero_fraction() {
        let case = small();
        let results = check_all(&all_paths(), &case);
        assert_eq!(results.len(), all_paths().len());
        for r in results {
            let r = r.unwrap();
            assert!(r.zero_fraction > 0.0 && r.zero_fraction < 1.0, "{r:?}");
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
