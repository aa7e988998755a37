//! A [`Path`]: one way of computing HP1 attention that is held against the f64 direct oracle.
//!
//! Every correctness property is written once over a [`Case`] and run for every path in
//! [`all_paths`]: today the oracle's decompositions in f64 and f32 (so the decompositions
//! themselves are proven before any kernel copies them), later the GPU kernels, which implement
//! this trait over the same [`CaseData`] (its f32 tensors are exactly the bf16 values a kernel
//! uploads). A path states its own tolerance, SPEC section 4: `1e-12` for an f64 reordering of
//! the same sum, `4e-3` where weights stay f32, `1e-2` where P is rounded to bf16; each row of
//! its output is held to that tolerance against the row's own scale ([`crate::bound`]).

use ndarray::Array3;
use oracle::hp1::direct::hp1_direct;
use oracle::hp1::fake_decode::hp1_fake_decode;
use oracle::hp1::sparse_pv::{hp1_sparse_pv, hp1_split_k_sparse};
use oracle::hp1::split_k::hp1_split_k;
use oracle::hp1::Hp1Inputs;
use oracle::Scalar;

use crate::bound::{Bound, F32_ROUNDOFF, F64_ROUNDOFF};
use crate::case::{Case, CaseData};
use crate::error::{Error, Result};

/// One implementation of HP1 attention under test.
pub trait Path: Send + Sync {
    /// A stable name, unique in [`all_paths`] (it names test functions and saved cases).
    fn name(&self) -> String;
    /// Whether this path handles `case` at all (a kernel may need, say, `D <= 256`).
    fn supports(&self, case: &Case) -> bool;
    /// The relative error this path may show on a row, against the row's norm and the
    /// root-sum-square of its terms (see [`crate::bound`]).
    fn tolerance(&self) -> f64;
    /// The unit roundoff of the arithmetic this path computes scores and the gate in: f32's
    /// unless the path says otherwise.
    fn score_roundoff(&self) -> f64 {
        F32_ROUNDOFF
    }
    /// Whether several threads may run this path at once. A GPU path is not: its runs share
    /// the device's one stream, so the fuzzer keeps them on one thread.
    fn parallel(&self) -> bool {
        true
    }
    /// [`Path::tolerance`] and [`Path::score_roundoff`] together.
    fn bound(&self) -> Bound {
        Bound { tolerance: self.tolerance(), roundoff: self.score_roundoff() }
    }
    /// Computes `[num_tokens, Hq, D]` into `out`, which arrives filled with NaN so that an
    /// element the path forgets to write fails the check. A path with a device buffer of its
    /// own fills that with NaN before launching, for the same reason.
    fn run(&self, data: &CaseData, out: &mut Array3<f64>) -> Result<()>;
}

/// The float type an oracle path computes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// f32 throughout, on the bf16-exact inputs: the CPU backend's numerics.
    F32,
    /// f64 throughout: only the summation order differs from the reference.
    F64,
}

/// Which oracle decomposition of SPEC section 2 a path runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decomposition {
    /// [`hp1_direct`].
    Direct,
    /// [`hp1_split_k`] with this many keys per chunk.
    SplitK(usize),
    /// [`hp1_sparse_pv`].
    SparsePv,
    /// [`hp1_split_k_sparse`] with this many keys per chunk.
    SplitKSparse(usize),
    /// [`hp1_fake_decode`].
    FakeDecode,
}

impl Decomposition {
    fn run<T: Scalar>(self, inp: &Hp1Inputs<'_, T>) -> oracle::Result<Array3<T>> {
        match self {
            Self::Direct => hp1_direct(inp),
            Self::SplitK(split) => hp1_split_k(inp, split),
            Self::SparsePv => hp1_sparse_pv(inp),
            Self::SplitKSparse(split) => hp1_split_k_sparse(inp, split),
            Self::FakeDecode => hp1_fake_decode(inp),
        }
    }

    fn label(self) -> String {
        match self {
            Self::Direct => "direct".into(),
            Self::SplitK(split) => format!("split-k-{split}"),
            Self::SparsePv => "sparse-pv".into(),
            Self::SplitKSparse(split) => format!("split-k-sparse-{split}"),
            Self::FakeDecode => "fake-decode".into(),
        }
    }
}

/// An oracle decomposition in one precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OraclePath {
    /// What it computes.
    pub decomposition: Decomposition,
    /// In which float type.
    pub precision: Precision,
}

impl Path for OraclePath {
    fn name(&self) -> String {
        let p = match self.precision {
            Precision::F32 => "f32",
            Precision::F64 => "f64",
        };
        format!("oracle-{}-{p}", self.decomposition.label())
    }

    fn supports(&self, _case: &Case) -> bool {
        true
    }

    fn tolerance(&self) -> f64 {
        match self.precision {
            Precision::F32 => 4e-3,
            Precision::F64 => 1e-12,
        }
    }

    fn score_roundoff(&self) -> f64 {
        match self.precision {
            Precision::F32 => F32_ROUNDOFF,
            Precision::F64 => F64_ROUNDOFF,
        }
    }

    fn run(&self, data: &CaseData, out: &mut Array3<f64>) -> Result<()> {
        let got = match self.precision {
            Precision::F64 => self.decomposition.run(&data.inputs_f64())?,
            Precision::F32 => self.decomposition.run(&data.inputs_f32())?.mapv(f64::from),
        };
        if got.dim() != out.dim() {
            return Err(Error::Path {
                path: self.name(),
                reason: format!("output has shape {:?}, expected {:?}", got.shape(), out.shape()),
            });
        }
        out.assign(&got);
        Ok(())
    }
}

/// The split sizes the oracle's split-K paths are run with: one key per chunk (every chunk
/// needs its overlap), odd, the block size, and the GPU's split.
pub const SPLITS: [usize; 4] = [1, 7, 16, 256];

/// Every registered path. The reference itself (direct in f64) is not among them: checking
/// it against itself would prove nothing.
pub fn all_paths() -> Vec<Box<dyn Path>> {
    let mut decompositions = vec![Decomposition::Direct];
    decompositions.extend(SPLITS.map(Decomposition::SplitK));
    decompositions.push(Decomposition::SparsePv);
    decompositions.extend([7, 256].map(Decomposition::SplitKSparse));
    decompositions.push(Decomposition::FakeDecode);
    let mut paths: Vec<Box<dyn Path>> = Vec::new();
    for precision in [Precision::F64, Precision::F32] {
        for &decomposition in &decompositions {
            if decomposition == Decomposition::Direct && precision == Precision::F64 {
                continue;
            }
            paths.push(Box::new(OraclePath { decomposition, precision }));
        }
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::tests::small;

    #[test]
    fn names_are_unique_and_the_reference_is_not_a_path() {
        let names: Vec<String> = all_paths().iter().map(|p| p.name()).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        assert!(!names.contains(&"oracle-direct-f64".to_string()));
        assert!(names.contains(&"oracle-split-k-7-f32".to_string()));
    }

    #[test]
    fn a_path_overwrites_every_poisoned_element() {
        let data = small().materialise().unwrap();
        for path in all_paths() {
            let mut out = Array3::from_elem(data.out_shape(), f64::NAN);
            path.run(&data, &mut out).unwrap();
            assert!(out.iter().all(|x| x.is_finite()), "{}", path.name());
        }
    }

    #[test]
    fn a_wrong_output_shape_is_an_error_not_a_panic() {
        let data = small().materialise().unwrap();
        let path = OraclePath { decomposition: Decomposition::SparsePv, precision: Precision::F32 };
        let mut out = Array3::from_elem((1, 1, 1), f64::NAN);
        let err = path.run(&data, &mut out).unwrap_err().to_string();
        assert!(err.contains("oracle-sparse-pv-f32") && err.contains("[5, 4, 8]"), "{err}");
    }
}
