//! The fuzz loop behind `asynct-verify fuzz`: draw cases from a seed until time runs out, check
//! every path on each, and on the first failure shrink the case and save it.
//!
//! Cases come from a proptest [`TestRunner`] seeded with the given seed, so one seed draws one
//! sequence of cases. The loop drives the [`ValueTree`] itself rather than calling
//! `TestRunner::run`, because it must stop on a clock and check many paths per case; shrinking
//! follows proptest's own rule (simplify while the case still fails, complicate when it passes)
//! against the path that failed first, under a time limit of its own.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use proptest::strategy::{BoxedStrategy, Strategy, ValueTree};
use proptest::test_runner::{Config, RngSeed, TestRunner};

use crate::case::Case;
use crate::check::{check, check_all, Failure};
use crate::error::{Error, Result};
use crate::path::Path;
use crate::regression::Regression;

/// How long and from which seed to fuzz, and where a failing case goes.
#[derive(Clone, Debug, PartialEq)]
pub struct FuzzConfig {
    /// Seed of the case sequence.
    pub seed: u64,
    /// Drawing stops once this much time has passed (a case under way finishes).
    pub duration: Duration,
    /// Shrinking a failure stops after this long and keeps the smallest failing case so far.
    pub shrink_time: Duration,
    /// Folder for the shrunk failing case.
    pub out_dir: PathBuf,
}

/// What a fuzz run did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FuzzOutcome {
    /// Cases drawn.
    pub cases: usize,
    /// Cases each path was checked on.
    pub per_path: BTreeMap<String, usize>,
    /// Smallest and largest gate zero fraction over the cases that passed.
    pub zero_fraction: Option<(f64, f64)>,
    /// The saved file and its content, if a case failed.
    pub failure: Option<(PathBuf, Regression)>,
}

/// Fuzzes `paths` with cases from `strategy` as `config` says.
pub fn fuzz(paths: &[Box<dyn Path>], strategy: &BoxedStrategy<Case>, config: &FuzzConfig) -> Result<FuzzOutcome> {
    let deadline = Instant::now() + config.duration;
    let mut runner = TestRunner::new(Config {
        rng_seed: RngSeed::Fixed(config.seed),
        failure_persistence: None,
        ..Config::default()
    });
    let mut outcome = FuzzOutcome::default();
    while Instant::now() < deadline {
        let mut tree = strategy.new_tree(&mut runner).map_err(|e| Error::Draw(e.to_string()))?;
        let case = tree.current();
        outcome.cases += 1;
        for p in paths.iter().filter(|p| p.supports(&case)) {
            *outcome.per_path.entry(p.name()).or_default() += 1;
        }
        let mut first_failure = None;
        for result in check_all(paths, &case) {
            match result {
                Ok(r) => {
                    let (lo, hi) = outcome.zero_fraction.unwrap_or((r.zero_fraction, r.zero_fraction));
                    outcome.zero_fraction = Some((lo.min(r.zero_fraction), hi.max(r.zero_fraction)));
                }
                Err(f) => {
                    first_failure.get_or_insert(f);
                }
            }
        }
        if let Some(failure) = first_failure {
            let path = failure.path().map(str::to_string);
            let fails = |c: &Case| still_fails(paths, path.as_deref(), c);
            let (case, failure) = shrink(&mut tree, fails, (case, failure), Instant::now() + config.shrink_time);
            let regression = Regression { path, failure: failure.to_string(), case };
            let file = regression.save(&config.out_dir)?;
            outcome.failure = Some((file, regression));
            break;
        }
    }
    Ok(outcome)
}

/// Whether `case` still fails: on the path `path` where the first failure had one, otherwise on
/// any path. A path that does not support the shrunk case counts as passing.
fn still_fails(paths: &[Box<dyn Path>], path: Option<&str>, case: &Case) -> Option<Failure> {
    match path.and_then(|name| paths.iter().find(|p| p.name() == name)) {
        Some(p) => match check(p.as_ref(), case) {
            Err(Failure::Unsupported { .. }) | Ok(_) => None,
            Err(f) => Some(f),
        },
        None => check_all(paths, case).into_iter().find_map(|r| r.err()),
    }
}

/// proptest's shrinking rule, with a deadline: after a failing candidate simplify further, after
/// a passing one step back (complicate); stop when neither moves. Returns the smallest failing
/// case seen and its failure.
fn shrink<T, F>(tree: &mut T, fails: F, mut best: (Case, Failure), deadline: Instant) -> (Case, Failure)
where
    T: ValueTree<Value = Case>,
    F: Fn(&Case) -> Option<Failure>,
{
    if !tree.simplify() {
        return best;
    }
    while Instant::now() < deadline {
        let candidate = tree.current();
        let moved = match fails(&candidate) {
            Some(f) => {
                best = (candidate, f);
                tree.simplify()
            }
            None => tree.complicate(),
        };
        if !moved {
            break;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use ndarray::Array3;

    use super::*;
    use crate::case::CaseData;
    use crate::path::all_paths;
    use crate::strategy::small_case;

    /// A path that is wrong whenever the batch holds a sequence of 3 or more tokens.
    struct WrongPastTwo;
    impl Path for WrongPastTwo {
        fn name(&self) -> String {
            "wrong-past-two".into()
        }
        fn supports(&self, _: &Case) -> bool {
            true
        }
        fn tolerance(&self) -> f64 {
            1e-12
        }
        fn run(&self, data: &CaseData, out: &mut Array3<f64>) -> crate::Result<()> {
            let mut got = oracle::hp1::direct::hp1_direct(&data.inputs_f64())?;
            if data.meta.seq_lens.iter().any(|&l| l >= 3) {
                got.mapv_inplace(|x| x + 1.0);
            }
            out.assign(&got);
            Ok(())
        }
    }

    fn scratch() -> PathBuf {
        std::env::temp_dir().join(format!("verify-fuzz-{}", std::process::id()))
    }

    #[test]
    fn a_failure_is_shrunk_to_a_minimal_case_and_saved() {
        let out_dir = scratch();
        let paths: Vec<Box<dyn Path>> = vec![Box::new(WrongPastTwo)];
        let config = FuzzConfig {
            seed: 5,
            duration: Duration::from_secs(60),
            shrink_time: Duration::from_secs(30),
            out_dir: out_dir.clone(),
        };
        let outcome = fuzz(&paths, &small_case(), &config).unwrap();
        let (file, reg) = outcome.failure.expect("a path wrong on most cases must fail");
        assert_eq!(reg.path.as_deref(), Some("wrong-past-two"));
        // Minimal: one sequence of exactly 3 tokens, one head, the smallest D drawn.
        assert_eq!(reg.case.seqs.len(), 1, "{:?}", reg.case);
        assert_eq!(reg.case.seqs[0].seq_len(), 3, "{:?}", reg.case);
        assert_eq!((reg.case.num_heads, reg.case.head_dim), (1, 16), "{:?}", reg.case);
        assert_eq!(Regression::load(&file).unwrap(), reg);
        std::fs::remove_dir_all(&out_dir).unwrap();
    }

    #[test]
    fn a_clean_run_counts_cases_per_path_and_stops_on_time() {
        let config = FuzzConfig {
            seed: 9,
            duration: Duration::from_millis(300),
            shrink_time: Duration::from_secs(1),
            out_dir: scratch(),
        };
        let paths = all_paths();
        let outcome = fuzz(&paths, &small_case(), &config).unwrap();
        assert!(outcome.failure.is_none(), "{:?}", outcome.failure);
        assert!(outcome.cases >= 1);
        assert_eq!(outcome.per_path.len(), paths.len());
        assert!(outcome.per_path.values().all(|&n| n == outcome.cases));
    }
}
