//! The scale-aware bound (`verify/src/bound.rs`) against the two ways the whole-tensor relative
//! L2 went wrong: a correct path failed on a case whose true output is rounding noise (the
//! saved near-threshold case), and a wrong path passed because its error sat in one row of a
//! large batch. Wrong paths here are the direct f64 oracle run on deliberately broken inputs,
//! held to a kernel's tolerance, so only the bound decides.

use std::path::Path as FsPath;

use ndarray::Array3;
use oracle::hp1::direct::hp1_direct;
use verify::gpu_cases::{case, decodes, spread};
use verify::gpu_paths::GPU_TOLERANCE;
use verify::{all_paths, check, check_all, Case, CaseData, Failure, Path, Regression};

/// The direct oracle on inputs `broken` has changed, checked as a kernel would be.
struct Wrong {
    name: &'static str,
    broken: fn(&CaseData) -> CaseData,
}

impl Path for Wrong {
    fn name(&self) -> String {
        self.name.into()
    }
    fn supports(&self, _: &Case) -> bool {
        true
    }
    fn tolerance(&self) -> f64 {
        GPU_TOLERANCE
    }
    fn run(&self, data: &CaseData, out: &mut Array3<f64>) -> verify::Result<()> {
        out.assign(&hp1_direct(&(self.broken)(data).inputs_f64())?);
        Ok(())
    }
}

/// `data` with the value of the key of largest weight for sequence `seq`'s last query row and
/// head 0 zeroed: a kernel that skips that one key.
fn skip_heaviest_key(data: &CaseData, seq: usize) -> CaseData {
    let inp = data.inputs_f64();
    let row = inp.meta.rows().into_iter().rfind(|r| r.seq == seq).expect("the sequence has a query row");
    let s = inp.scores(row, 0, 0..row.pos + 1);
    let mut p = vec![0.0; s.len()];
    inp.gate(0).apply(&[], &s, &mut p);
    let t = (0..p.len()).max_by(|&a, &b| p[a].abs().total_cmp(&p[b].abs())).expect("at least one key");
    let (block, offset) = data.meta.slot(seq, t, data.f32.value_cache.dim().1);
    let mut f32 = data.f32.clone();
    f32.value_cache.slice_mut(ndarray::s![block, offset, 0, ..]).fill(0.0);
    CaseData::new(data.meta.clone(), f32)
}

fn saved_near_threshold_case() -> Case {
    let file = FsPath::new(env!("CARGO_MANIFEST_DIR")).join("regressions/oracle-direct-f32-near-threshold.json");
    Regression::load(&file).unwrap_or_else(|e| panic!("{e}")).case
}

#[test]
fn the_near_threshold_case_passes_every_path_and_is_rounding_noise() {
    let case = saved_near_threshold_case();
    for result in check_all(&all_paths(), &case) {
        let r = result.unwrap_or_else(|f| panic!("{f}"));
        println!("{:<32} row bound use {:.2e}, whole relative L2 {:.2e}", r.path, r.bound_use, r.error);
        if r.path == "oracle-direct-f32" {
            assert!(r.error > r.tolerance, "the whole-tensor error alone fails this path: {r:?}");
        }
    }
    // Why: head 0 is silenced by gamma = 0, and head 1's only nonzero weight is key 0, where
    // z = s - (sigma / 3) s with sigma = 3 - 2^-22: sigma / 3 is 1 but for rounding (1 - 2^-24 in
    // f32, about 1 - 8e-8 in f64), so z is s times a rounding difference.
    let data = case.materialise().unwrap();
    let inp = data.inputs_f64();
    let row = inp.meta.rows()[0];
    let s = inp.scores(row, 1, 0..row.pos + 1);
    let mut p = vec![0.0; s.len()];
    inp.gate(1).apply(&[], &s, &mut p);
    let nonzero: Vec<usize> = (0..p.len()).filter(|&t| p[t] != 0.0).collect();
    assert!(nonzero.iter().all(|&t| t == 0), "nonzero weights at {nonzero:?}");
    assert!(p[0].abs() < 1e-7 * s[0].abs(), "key 0's weight {} is not rounding level for s = {}", p[0], s[0]);
}

#[test]
fn a_wrong_path_still_fails_the_near_threshold_case() {
    // Every query head of a kv head gated with the first one's sigma: head 1 loses its
    // sigma = 3 and opens its gate to clip_max on every key.
    let shared_sigma = Wrong {
        name: "sigma-per-kv-head",
        broken: |data| {
            let mut f32 = data.f32.clone();
            f32.sigma = vec![f32.sigma[0]; f32.sigma.len()];
            CaseData::new(data.meta.clone(), f32)
        },
    };
    let f = check(&shared_sigma, &saved_near_threshold_case()).unwrap_err();
    assert!(matches!(f, Failure::Tolerance { row: [0, 1], .. }), "{f}");
}

#[test]
fn skipping_one_key_of_a_long_row_fails() {
    let long = case(&decodes(&[8192]), (8, 4), 128, 16, 81);
    let skip = Wrong { name: "skip-one-key", broken: |data| skip_heaviest_key(data, 0) };
    let f = check(&skip, &long).unwrap_err();
    assert!(matches!(f, Failure::Tolerance { row: [0, 0 | 1], .. }), "{f}");
}

#[test]
fn skipping_one_key_in_one_row_of_256_sequences_fails() {
    let batch = case(&decodes(&spread(256, 2000, 3)), (4, 2), 64, 16, 82);
    let skip = Wrong { name: "skip-one-key", broken: |data| skip_heaviest_key(data, 100) };
    match check(&skip, &batch).unwrap_err() {
        Failure::Tolerance { row, error, .. } => {
            // Heads 0 and 1 share the kv head whose value was zeroed.
            assert!(row[0] == 100 && row[1] < 2, "row {row:?}");
            println!("one key skipped in row 100: whole-output relative L2 {error:.2e}");
            assert!(error < GPU_TOLERANCE, "the whole-tensor error ({error:.2e}) would have let it pass");
        }
        other => panic!("{other}"),
    }
}
