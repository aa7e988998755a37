//! The fuzz loop behind `asynct-verify fuzz`: draw cases from a seed until time runs out, check
//! every path on each, and shrink and save every failure, going on after it.
//!
//! Cases come from a proptest [`TestRunner`] seeded with the given seed, so one seed draws one
//! sequence of cases whatever the machine. The loop drives the [`ValueTree`]s itself rather than
//! calling `TestRunner::run`, because it must stop on a clock, check many paths per case and go
//! on after a failure; shrinking follows proptest's own rule (simplify while the case still
//! fails, complicate when it passes) against the path that failed first, under a time limit.
//!
//! The CPU side (building a case, its f64 reference, the oracle paths) is the slow part, so cases
//! are drawn in batches: a batch is built and checked on the host paths by every core while the
//! paths that must run one at a time ([`Path::parallel`] false: the GPU paths, which share one
//! stream) go through the batch before it on the calling thread.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use proptest::strategy::{BoxedStrategy, Strategy, ValueTree};
use proptest::test_runner::{Config, RngSeed, TestRunner};
use rayon::prelude::*;

use crate::case::{Case, CaseData};
use crate::check::{check, check_all, check_data, CheckReport, Failure, Reference};
use crate::error::{Error, Result};
use crate::path::Path;
use crate::regression::Regression;

/// Failures of one path that are shrunk and saved; later ones are counted only, so a path that
/// fails everywhere does not spend the run shrinking.
pub const MAX_SAVED_PER_PATH: usize = 3;

/// How long and from which seed to fuzz, and where failing cases go.
#[derive(Clone, Debug, PartialEq)]
pub struct FuzzConfig {
    /// Seed of the case sequence.
    pub seed: u64,
    /// Drawing stops once this much time has passed (the batch under way finishes, and so does
    /// the shrinking of its failures).
    pub duration: Duration,
    /// Shrinking a failure stops after this long and keeps the smallest failing case so far.
    pub shrink_time: Duration,
    /// Folder for the shrunk failing cases.
    pub out_dir: PathBuf,
}

/// What one path did over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PathCount {
    /// Cases it was checked on.
    pub run: usize,
    /// Checks that passed.
    pub passed: usize,
    /// Checks that failed.
    pub failed: usize,
    /// The largest share of its row bound a passing check used.
    pub worst_bound_use: f64,
    /// The largest whole-output relative L2 error of a passing check.
    pub worst_error: f64,
    /// The path's relative tolerance.
    pub tolerance: f64,
}

/// What a fuzz run did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FuzzOutcome {
    /// Cases drawn.
    pub cases: usize,
    /// Threads that built cases and ran the host paths.
    pub workers: usize,
    /// Each path's counts, by name; every path given is listed, even one that ran nothing.
    pub per_path: BTreeMap<String, PathCount>,
    /// Smallest and largest gate zero fraction over the cases that could be built.
    pub zero_fraction: Option<(f64, f64)>,
    /// Each saved file and its content.
    pub failures: Vec<(PathBuf, Regression)>,
}

impl FuzzOutcome {
    /// Paths checked on fewer than `min` cases (a `supports` that wrongly refuses shows here).
    pub fn under(&self, min: usize) -> Vec<(&str, usize)> {
        self.per_path.iter().filter(|(_, c)| c.run < min).map(|(p, c)| (p.as_str(), c.run)).collect()
    }
}

impl PathCount {
    /// Counts one check's result.
    pub fn record(&mut self, result: &std::result::Result<CheckReport, Failure>) {
        self.run += 1;
        match result {
            Ok(r) => {
                self.passed += 1;
                self.worst_bound_use = self.worst_bound_use.max(r.bound_use);
                self.worst_error = self.worst_error.max(r.error);
            }
            Err(_) => self.failed += 1,
        }
    }
}

/// A drawn case's proptest tree, kept on the drawing thread to shrink it.
type Tree = Box<dyn ValueTree<Value = Case>>;

/// A drawn case after the host side: its inputs and reference (or why they could not be
/// built), and the host paths' results.
struct Prepared {
    case: Case,
    built: Result<(CaseData, Reference)>,
    host: Vec<(String, std::result::Result<CheckReport, Failure>)>,
}

/// Builds `cases` and checks them on `host_paths`, every case on a thread of `pool`; with
/// `device_bits`, also converts each case's inputs to the bf16 the serial (GPU) paths upload.
fn prepare(pool: &rayon::ThreadPool, host_paths: &[&dyn Path], cases: Vec<Case>, device_bits: bool) -> Vec<Prepared> {
    pool.install(|| {
        cases
            .into_par_iter()
            .map(|case| {
                let built = case.materialise().and_then(|data| Reference::compute(&data).map(|r| (data, r)));
                let host = match &built {
                    Ok((data, reference)) => {
                        if device_bits {
                            data.bf16();
                        }
                        host_paths
                            .iter()
                            .filter(|p| p.supports(&case))
                            .map(|p| (p.name(), check_data(*p, data, reference)))
                            .collect()
                    }
                    Err(_) => Vec::new(),
                };
                Prepared { case, built, host }
            })
            .collect()
    })
}

/// Fuzzes `paths` with cases from `strategy` as `config` says.
pub fn fuzz(paths: &[Box<dyn Path>], strategy: &BoxedStrategy<Case>, config: &FuzzConfig) -> Result<FuzzOutcome> {
    let deadline = Instant::now() + config.duration;
    let mut runner = TestRunner::new(Config {
        rng_seed: RngSeed::Fixed(config.seed),
        failure_persistence: None,
        ..Config::default()
    });
    let (host, serial): (Vec<&dyn Path>, Vec<&dyn Path>) = paths.iter().map(|p| p.as_ref()).partition(|p| p.parallel());
    let mut outcome = FuzzOutcome::default();
    for p in paths {
        outcome.per_path.insert(p.name(), PathCount { tolerance: p.tolerance(), ..PathCount::default() });
    }
    // The serial paths' thread needs a core of its own: it is the one that waits on the GPU.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = if serial.is_empty() { threads } else { threads.saturating_sub(1).max(1) };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .build()
        .map_err(|e| Error::Workers(format!("{workers} threads: {e}")))?;
    outcome.workers = workers;
    let batch = (2 * workers).max(4);
    let mut current: Option<(Vec<Tree>, Vec<Prepared>)> = None;
    loop {
        let mut trees = Vec::new();
        while Instant::now() < deadline && trees.len() < batch {
            trees.push(strategy.new_tree(&mut runner).map_err(|e| Error::Draw(e.to_string()))?);
        }
        let cases: Vec<Case> = trees.iter().map(|t| t.current()).collect();
        let (prepared, finished) = std::thread::scope(|s| {
            let next = s.spawn(|| prepare(&pool, &host, cases, !serial.is_empty()));
            let finished = match current.take() {
                Some((trees, prepared)) => finish(paths, &serial, trees, prepared, config, &mut outcome),
                None => Ok(()),
            };
            (next.join().expect("preparing a batch does not panic"), finished)
        });
        finished?;
        if trees.is_empty() {
            return Ok(outcome);
        }
        current = Some((trees, prepared));
    }
}

/// Runs the serial paths on a prepared batch, tallies every result and shrinks and saves each
/// failing case.
fn finish(
    paths: &[Box<dyn Path>],
    serial: &[&dyn Path],
    trees: Vec<Tree>,
    prepared: Vec<Prepared>,
    config: &FuzzConfig,
    outcome: &mut FuzzOutcome,
) -> Result<()> {
    for (mut tree, p) in trees.into_iter().zip(prepared) {
        outcome.cases += 1;
        let mut results = p.host;
        match p.built {
            Ok((data, reference)) => {
                let z = reference.zero_fraction;
                let (lo, hi) = outcome.zero_fraction.unwrap_or((z, z));
                outcome.zero_fraction = Some((lo.min(z), hi.max(z)));
                for path in serial.iter().filter(|s| s.supports(&p.case)) {
                    results.push((path.name(), check_data(*path, &data, &reference)));
                }
            }
            Err(e) => results.push((String::new(), Err(Failure::Error(e)))),
        }
        let mut first_failure = None;
        for (name, result) in results {
            if !name.is_empty() {
                outcome.per_path.entry(name).or_default().record(&result);
            }
            if let Err(f) = result {
                first_failure.get_or_insert(f);
            }
        }
        let Some(failure) = first_failure else { continue };
        let path = failure.path().map(str::to_string);
        let saved = outcome.failures.iter().filter(|(_, r)| r.path == path).count();
        if saved >= MAX_SAVED_PER_PATH {
            continue;
        }
        let fails = |c: &Case| still_fails(paths, path.as_deref(), c);
        let (case, failure) = shrink(&mut tree, fails, (p.case, failure), Instant::now() + config.shrink_time);
        let regression = Regression { path, failure: failure.to_string(), case };
        let file = regression.save(&config.out_dir)?;
        outcome.failures.push((file, regression));
    }
    Ok(())
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
    T: ValueTree<Value = Case> + ?Sized,
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
    use std::sync::{Arc, Mutex};
    use std::thread::ThreadId;

    use ndarray::Array3;

    use super::*;
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

    /// A correct path that must run on one thread, recording which thread ran it.
    struct Serial(Arc<Mutex<Vec<ThreadId>>>);
    impl Path for Serial {
        fn name(&self) -> String {
            "serial".into()
        }
        fn supports(&self, _: &Case) -> bool {
            true
        }
        fn tolerance(&self) -> f64 {
            1e-12
        }
        fn parallel(&self) -> bool {
            false
        }
        fn run(&self, data: &CaseData, out: &mut Array3<f64>) -> crate::Result<()> {
            self.0.lock().unwrap().push(std::thread::current().id());
            out.assign(&oracle::hp1::direct::hp1_direct(&data.inputs_f64())?);
            Ok(())
        }
    }

    /// A path that claims no case.
    struct Refuses;
    impl Path for Refuses {
        fn name(&self) -> String {
            "refuses".into()
        }
        fn supports(&self, _: &Case) -> bool {
            false
        }
        fn tolerance(&self) -> f64 {
            1e-12
        }
        fn run(&self, _: &CaseData, _: &mut Array3<f64>) -> crate::Result<()> {
            unreachable!("never supported")
        }
    }

    fn config(seed: u64, millis: u64, name: &str) -> FuzzConfig {
        FuzzConfig {
            seed,
            duration: Duration::from_millis(millis),
            shrink_time: Duration::from_secs(30),
            out_dir: std::env::temp_dir().join(format!("verify-fuzz-{name}-{}", std::process::id())),
        }
    }

    #[test]
    fn failures_are_shrunk_saved_and_the_run_goes_on() {
        let config = config(5, 1500, "wrong");
        let paths: Vec<Box<dyn Path>> = vec![Box::new(WrongPastTwo)];
        let outcome = fuzz(&paths, &small_case(), &config).unwrap();
        let count = outcome.per_path["wrong-past-two"];
        assert!(count.failed > MAX_SAVED_PER_PATH, "the run went on after its first failure: {count:?}");
        assert_eq!(count.run, count.passed + count.failed);
        assert_eq!(count.run, outcome.cases);
        assert_eq!(outcome.failures.len(), MAX_SAVED_PER_PATH, "later failures are counted, not saved");
        // Minimal: one sequence of exactly 3 tokens, one head, the smallest D drawn.
        let (file, reg) = &outcome.failures[0];
        assert_eq!(reg.path.as_deref(), Some("wrong-past-two"));
        assert_eq!(reg.case.seqs.len(), 1, "{:?}", reg.case);
        assert_eq!(reg.case.seqs[0].seq_len(), 3, "{:?}", reg.case);
        assert_eq!((reg.case.num_heads, reg.case.head_dim), (1, 16), "{:?}", reg.case);
        assert_eq!(&Regression::load(file).unwrap(), reg);
        std::fs::remove_dir_all(&config.out_dir).unwrap();
    }

    #[test]
    fn a_clean_run_counts_every_path_and_serial_paths_stay_on_the_calling_thread() {
        let threads = Arc::new(Mutex::new(Vec::new()));
        let mut paths = all_paths();
        paths.push(Box::new(Serial(threads.clone())));
        paths.push(Box::new(Refuses));
        let outcome = fuzz(&paths, &small_case(), &config(9, 300, "clean")).unwrap();
        assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
        assert!(outcome.cases >= 1);
        assert_eq!(outcome.per_path.len(), paths.len());
        for (name, count) in &outcome.per_path {
            let want = if name == "refuses" { 0 } else { outcome.cases };
            assert_eq!((count.run, count.passed, count.failed), (want, want, 0), "{name}");
        }
        assert_eq!(outcome.under(1), vec![("refuses", 0)]);
        assert!(outcome.per_path["oracle-direct-f32"].worst_bound_use > 0.0);
        let threads = threads.lock().unwrap();
        assert_eq!(threads.len(), outcome.cases);
        assert!(threads.iter().all(|&t| t == std::thread::current().id()), "a serial path ran off the calling thread");
    }
}
