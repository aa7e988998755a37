//! Building and checking GPU cases, shared by the GPU test binaries: a [`case`] from batch
//! shapes with ordinary gate settings, drawing GPU-supported cases from a strategy ([`draw`]),
//! and checking every path that supports a case against the f64 oracle ([`check_cases`]), with
//! the oracle's work spread over the CPU cores while the GPU runs one case after another, and
//! each path's count and worst errors reported beside its bound.

use std::collections::BTreeMap;

use proptest::strategy::{BoxedStrategy, Strategy, ValueTree};
use proptest::test_runner::{Config, RngSeed, TestRunner};
use rayon::prelude::*;

use crate::check::{check_data, Reference};
use crate::fuzz::PathCount;
use crate::gpu_paths::gpu_supports;
use ndarray::{s, Array2};
use oracle::hp1::AttnMetadata;

use crate::{Case, CaseData, Path, SeqShape};

/// A batch of `seqs` as `(prefix_len, query_len)` with ordinary gate settings (about half the
/// weights zero); tests override fields with struct update syntax.
pub fn case(seqs: &[(usize, usize)], heads: (usize, usize), head_dim: usize, block_size: usize, seed: u64) -> Case {
    let (hq, hkv) = heads;
    Case {
        seqs: seqs.iter().map(|&(prefix_len, query_len)| SeqShape { prefix_len, query_len }).collect(),
        num_heads: hq,
        num_kv_heads: hkv,
        head_dim,
        block_size,
        spare_blocks: 2,
        fir_k: 3,
        relu_pre: true,
        clip_min: 0.0,
        clip_max: 1.0,
        sigma: (0..hq).map(|h| [0.0, 0.5, 1.0, 1.5][h % 4]).collect(),
        gamma: (0..hq).map(|h| [1.0, 0.75, 2.0][h % 3]).collect(),
        data_seed: seed,
        q_mean: 0.125,
        input_scale: 1.0,
        table_seed: seed ^ 0x5eed,
    }
}

/// Decode sequences of these lengths.
pub fn decodes(lens: &[usize]) -> Vec<(usize, usize)> {
    lens.iter().map(|&l| (l - 1, 1)).collect()
}

/// `n` lengths in `1..=max`, spread by a fixed stride (deterministic, mixed).
pub fn spread(n: usize, max: usize, seed: usize) -> Vec<usize> {
    (0..n).map(|i| 1 + (i * 7919 + seed * 104_729) % max).collect()
}

/// `n` GPU-supported cases drawn from `strategy` with a fixed seed.
pub fn draw(strategy: BoxedStrategy<Case>, n: usize, seed: u64) -> Result<Vec<Case>, String> {
    let mut runner = TestRunner::new(Config { rng_seed: RngSeed::Fixed(seed), ..Config::default() });
    let mut cases = Vec::new();
    for _ in 0..n * 20 {
        let c = strategy.new_tree(&mut runner).map_err(|e| e.to_string())?.current();
        if gpu_supports(&c) {
            cases.push(c);
            if cases.len() == n {
                return Ok(cases);
            }
        }
    }
    Err(format!("drew only {} GPU-supported cases of {n}", cases.len()))
}

/// What [`check_cases`] measured: each case's gate zero fraction and each path's counts.
pub struct Checked {
    /// The reference's zero fraction of each case, in order.
    pub zero_fractions: Vec<f64>,
    /// Each path's checks, by name (every path given is listed, even one that ran nothing).
    pub per_path: BTreeMap<String, PathCount>,
}

impl Checked {
    /// Fails unless every path was checked on at least `min` cases, so a `supports` that wrongly
    /// refuses cannot pass by running nothing.
    pub fn each_path_ran(&self, min: usize) -> Result<(), String> {
        let short: Vec<String> =
            self.per_path.iter().filter(|(_, c)| c.run < min).map(|(p, c)| format!("{p} ran {}", c.run)).collect();
        match short.is_empty() {
            true => Ok(()),
            false => Err(format!("paths checked on fewer than {min} cases: {}", short.join(", "))),
        }
    }
}

/// Checks every path that supports each case against the f64 oracle and prints each path's
/// count and worst errors beside its bound; returns what was measured, or every failure with
/// its case.
pub fn check_cases(paths: &[Box<dyn Path>], cases: &[Case]) -> Result<Checked, String> {
    let mut failures = Vec::new();
    let mut checked = Checked { zero_fractions: Vec::new(), per_path: BTreeMap::new() };
    for p in paths {
        checked.per_path.insert(p.name(), PathCount { tolerance: p.tolerance(), ..PathCount::default() });
    }
    for batch in cases.chunks(8) {
        let prepared: Vec<_> = batch
            .par_iter()
            .map(|c| c.materialise().and_then(|data| Reference::compute(&data).map(|r| (data, r))))
            .collect();
        for (case, prepared) in batch.iter().zip(prepared) {
            let json = serde_json::to_string(case).unwrap_or_default();
            let (data, reference) = match prepared {
                Ok(p) => p,
                Err(e) => {
                    failures.push(format!("case could not be built: {e}\ncase JSON: {json}"));
                    continue;
                }
            };
            checked.zero_fractions.push(reference.zero_fraction);
            for path in paths.iter().filter(|p| p.supports(case)) {
                let result = check_data(path.as_ref(), &data, &reference);
                checked.per_path.entry(path.name()).or_default().record(&result);
                if let Err(f) = result {
                    failures.push(format!("{f}\ncase JSON: {json}"));
                }
            }
        }
    }
    let checks: usize = checked.per_path.values().map(|c| c.run).sum();
    println!("  {} cases, {checks} path checks", cases.len());
    for (path, c) in &checked.per_path {
        println!(
            "    {path:<28} {:>5} checks, worst row at {:.3} of its bound, worst relative L2 {:.2e} (tolerance {:.0e})",
            c.run, c.worst_bound_use, c.worst_error, c.tolerance
        );
    }
    if failures.is_empty() {
        Ok(checked)
    } else {
        Err(format!("{} of {checks} checks failed:\n{}", failures.len(), failures.join("\n")))
    }
}

/// Sequence `s` of `data` alone, over the same cache.
pub fn alone(data: &CaseData, s: usize) -> CaseData {
    let meta = &data.meta;
    let (q0, q1) = (meta.query_start_loc[s] as usize, meta.query_start_loc[s + 1] as usize);
    let block_table: Array2<i32> = meta.block_table.slice(s![s..s + 1, ..]).to_owned();
    let meta =
        AttnMetadata { block_table, seq_lens: vec![meta.seq_lens[s]], query_start_loc: vec![0, (q1 - q0) as i32] };
    let mut f32 = data.f32.clone();
    f32.q = data.f32.q.slice(s![q0..q1, .., ..]).to_owned();
    CaseData::new(meta, f32)
}
