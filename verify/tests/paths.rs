//! The one correctness property, written once and expanded per registered path (as candle
//! expands each test per device): on drawn cases, the path agrees with the f64 direct oracle
//! within its tolerance, every element finite. A test at the end makes sure no registered path
//! is left without its expansion.

use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use verify::{all_paths, check, small_case, Path};

/// Cases per path: 17 paths share two cores, so each gets a few dozen small cases here and
/// `asynct-verify fuzz` does the long runs.
const CASES: u32 = 64;

fn agrees_with_direct(name: &str) {
    let paths = all_paths();
    let path: &dyn Path =
        paths.iter().find(|p| p.name() == name).unwrap_or_else(|| panic!("no registered path `{name}`")).as_ref();
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        rng_seed: RngSeed::Fixed(0x5eed_0001),
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&small_case(), |case| {
        if !path.supports(&case) {
            return Ok(());
        }
        check(path, &case).map(|_| ()).map_err(|failure| {
            TestCaseError::fail(format!("{failure}\ncase JSON: {}", serde_json::to_string(&case).unwrap_or_default()))
        })
    });
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
}

macro_rules! per_path {
    ($($test:ident => $name:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                agrees_with_direct($name);
            }
        )*

        #[test]
        fn every_registered_path_has_a_test() {
            let mut expanded = vec![$($name.to_string()),*];
            let mut registered: Vec<String> = all_paths().iter().map(|p| p.name()).collect();
            expanded.sort();
            registered.sort();
            assert_eq!(expanded, registered, "add the new path to per_path! in tests/paths.rs");
        }
    };
}

per_path! {
    direct_f32 => "oracle-direct-f32",
    split_k_1_f64 => "oracle-split-k-1-f64",
    split_k_7_f64 => "oracle-split-k-7-f64",
    split_k_16_f64 => "oracle-split-k-16-f64",
    split_k_256_f64 => "oracle-split-k-256-f64",
    split_k_1_f32 => "oracle-split-k-1-f32",
    split_k_7_f32 => "oracle-split-k-7-f32",
    split_k_16_f32 => "oracle-split-k-16-f32",
    split_k_256_f32 => "oracle-split-k-256-f32",
    sparse_pv_f64 => "oracle-sparse-pv-f64",
    sparse_pv_f32 => "oracle-sparse-pv-f32",
    split_k_sparse_7_f64 => "oracle-split-k-sparse-7-f64",
    split_k_sparse_256_f64 => "oracle-split-k-sparse-256-f64",
    split_k_sparse_7_f32 => "oracle-split-k-sparse-7-f32",
    split_k_sparse_256_f32 => "oracle-split-k-sparse-256-f32",
    fake_decode_f64 => "oracle-fake-decode-f64",
    fake_decode_f32 => "oracle-fake-decode-f32",
}
