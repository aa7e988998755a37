//! Properties of HP1 and of the case model itself, over drawn cases: the zero-fraction range the
//! strategies promise is reached, HP1 with its gate opened is plain causal attention, the gate of
//! the unscaled products is the gate (the WGMMA prefill's unit form), the sparse list holds
//! exactly the nonzero weights, a shuffled block table changes no bit of any path's output, and
//! every path holds on a few long-context cases.

use ndarray::{Array3, Array4};
use oracle::hp1::direct::hp1_direct;
use oracle::hp1::sparse_pv::nonzero_keys;
use oracle::hp1::{Gate, Hp1Inputs, Hp1Params};
use proptest::strategy::{BoxedStrategy, Strategy, ValueTree};
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use verify::bound::F64_ROUNDOFF;
use verify::{
    all_paths, check_all, compare, large_case, small_case, zero_fraction, Bound, Case, CaseData, Reference, Tensor,
};

fn runner(cases: u32, seed: u64) -> TestRunner {
    TestRunner::new(Config { cases, rng_seed: RngSeed::Fixed(seed), failure_persistence: None, ..Config::default() })
}

fn draw(strategy: &BoxedStrategy<Case>, n: usize, seed: u64) -> Vec<Case> {
    let mut r = runner(1, seed);
    (0..n).map(|_| strategy.new_tree(&mut r).expect("the strategy never rejects").current()).collect()
}

fn run_property(
    strategy: BoxedStrategy<Case>,
    cases: u32,
    seed: u64,
    test: impl Fn(Case) -> Result<(), TestCaseError>,
) {
    if let Err(e) = runner(cases, seed).run(&strategy, test) {
        panic!("{e}");
    }
}

#[test]
fn drawn_cases_reach_both_ends_of_the_zero_fraction_range() {
    // Only cases whose gate can go either way: clip_min == 0 and no head silenced by gamma = 0
    // (clip_min > 0 gives no zeros at all, gamma = 0 all zeros, which would prove nothing).
    let fractions: Vec<f64> = draw(&small_case(), 300, 0x2e50)
        .into_iter()
        .filter(|c| c.clip_min == 0.0 && c.gamma.iter().all(|&g| g != 0.0))
        .map(|c| zero_fraction(&c.materialise().unwrap().inputs_f64()).unwrap())
        .collect();
    let count = |f: &dyn Fn(f64) -> bool| fractions.iter().filter(|&&z| f(z)).count();
    let (low, mid, high) = (count(&|z| z < 0.10), count(&|z| (0.5..=0.85).contains(&z)), count(&|z| z > 0.95));
    println!("{} open-gate cases: {low} under 10% zeros, {mid} in 50-85%, {high} over 95%", fractions.len());
    assert!(low >= 8 && mid >= 8 && high >= 8, "low {low}, mid {mid}, high {high} of {}", fractions.len());
}

/// `[seq][token, kv head, dim]` of one tensor, straight from the generator.
fn logical(case: &Case, tensor: Tensor) -> Vec<Array3<f64>> {
    case.seqs
        .iter()
        .enumerate()
        .map(|(s, shape)| {
            Array3::from_shape_fn((shape.seq_len(), case.num_kv_heads, case.head_dim), |(t, g, j)| {
                f64::from(case.value_at(tensor, [s, t, g, j]))
            })
        })
        .collect()
}

/// `out[i, h] = sum_{t <= pos(i)} scale * (q_i . k_t) v_t`, by loops over the logical tensors.
fn naive_causal(case: &Case) -> Array3<f64> {
    let (keys, values) = (logical(case, Tensor::Key), logical(case, Tensor::Value));
    let (hq, d, group) = (case.num_heads, case.head_dim, case.num_heads / case.num_kv_heads);
    let scale = f64::from(case.scale());
    let mut out = Array3::<f64>::zeros((case.num_tokens(), hq, d));
    let mut row = 0;
    for (s, shape) in case.seqs.iter().enumerate() {
        for j in 0..shape.query_len {
            for h in 0..hq {
                let q: Vec<f64> = (0..d).map(|x| f64::from(case.value_at(Tensor::Query, [row, h, x, 0]))).collect();
                for t in 0..=shape.prefix_len + j {
                    let mut dot = 0.0;
                    for x in 0..d {
                        dot += q[x] * keys[s][[t, h / group, x]];
                    }
                    for x in 0..d {
                        out[[row, h, x]] += scale * dot * values[s][[t, h / group, x]];
                    }
                }
            }
            row += 1;
        }
    }
    out
}

#[test]
fn an_open_gate_is_plain_causal_attention() {
    let open = small_case().prop_map(|c| Case {
        sigma: vec![0.0; c.num_heads],
        gamma: vec![1.0; c.num_heads],
        relu_pre: false,
        clip_min: -1e30,
        clip_max: 1e30,
        ..c
    });
    run_property(open.boxed(), 48, 0x09e4, |case| {
        let data = case.materialise().unwrap();
        let reference = Reference::compute(&data).unwrap();
        compare("naive-causal", &naive_causal(&case), &reference, Bound { tolerance: 1e-12, roundoff: F64_ROUNDOFF })
            .map(|_| ())
            .map_err(|f| TestCaseError::fail(format!("{f}\n{case:?}")))
    });
}

/// The identity the WGMMA prefill's unit form rests on (`hp1_prefill_gate.cuh`, UNIT FORM): for
/// scale > 0, the gate of the scores `scale a` is `gamma * scale` times the gate of the unscaled
/// products `a` with scale and gamma 1 and both bounds divided by scale (`max(scale a, 0)` is
/// `scale max(a, 0)`, so `z` is `scale z'`), in f64 up to its rounding, with the zeros of the
/// sparse PV in the same places.
#[test]
fn the_gate_of_the_unscaled_products_times_gamma_scale_is_the_gate() {
    run_property(small_case(), 64, 0x0417, |case| {
        let data = case.materialise().unwrap();
        let inp = data.inputs_f64();
        let p = inp.params;
        proptest::prop_assert!(p.scale > 0.0);
        let unit_params = Hp1Params { scale: 1.0, clip_min: p.clip_min / p.scale, clip_max: p.clip_max / p.scale, ..p };
        let unit = Hp1Inputs { params: unit_params, ..inp };
        for row in data.meta.rows() {
            for h in 0..case.num_heads {
                let keys = 0..row.pos + 1;
                let (s, a) = (inp.scores(row, h, keys.clone()), unit.scores(row, h, keys));
                let (mut w, mut w_unit) = (vec![0.0; s.len()], vec![0.0; s.len()]);
                inp.gate(h).apply(&[], &s, &mut w);
                Gate { gamma: 1.0, ..unit.gate(h) }.apply(&[], &a, &mut w_unit);
                let gain = inp.gamma[h] * p.scale;
                let size = w.iter().fold(f64::MIN_POSITIVE, |m, x| m.max(x.abs()));
                for (t, (&x, &y)) in w.iter().zip(&w_unit).enumerate() {
                    proptest::prop_assert!(
                        (x - gain * y).abs() <= 1e-12 * size,
                        "row {row:?} head {h} key {t}: {x} against {gain} * {y}"
                    );
                    proptest::prop_assert!(gain == 0.0 || (x == 0.0) == (y == 0.0), "key {t}: {x} and {y}");
                }
            }
        }
        Ok(())
    });
}

#[test]
fn the_sparse_list_holds_exactly_the_nonzero_weights() {
    run_property(small_case(), 64, 0x5a45, |case| {
        let data = case.materialise().unwrap();
        let inp = data.inputs_f64();
        for row in data.meta.rows() {
            for h in 0..case.num_heads {
                let s = inp.scores(row, h, 0..row.pos + 1);
                let mut p = vec![0.0; s.len()];
                inp.gate(h).apply(&[], &s, &mut p);
                let list = nonzero_keys(&p);
                let nonzero = p.iter().filter(|&&x| x != 0.0).count();
                proptest::prop_assert_eq!(list.len(), nonzero);
                proptest::prop_assert!(list.windows(2).all(|w| w[0] < w[1]), "not increasing: {:?}", list);
                proptest::prop_assert!(list.iter().all(|&t| p[t as usize] != 0.0));
            }
        }
        Ok(())
    });
}

/// Every path's output on `data`, from a NaN-poisoned buffer.
fn outputs(data: &CaseData) -> Vec<(String, Array3<f64>)> {
    let mut all = vec![("direct-f64".to_string(), hp1_direct(&data.inputs_f64()).unwrap())];
    for path in all_paths() {
        let mut out = Array3::from_elem(data.out_shape(), f64::NAN);
        path.run(data, &mut out).unwrap();
        all.push((path.name(), out));
    }
    all
}

fn bits(a: &Array3<f64>) -> Vec<u64> {
    a.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn a_shuffled_block_table_changes_no_bit() {
    let mut moved = 0;
    for case in draw(&small_case(), 24, 0x7ab1) {
        let other = Case { table_seed: case.table_seed ^ 0x9e37_79b9, ..case.clone() };
        let (a, b) = (case.materialise().unwrap(), other.materialise().unwrap());
        if a.meta.block_table != b.meta.block_table {
            moved += 1;
        }
        let caches: [&Array4<f32>; 2] = [&a.f32.key_cache, &b.f32.key_cache];
        assert_eq!(caches[0].dim(), caches[1].dim());
        for ((name, x), (_, y)) in outputs(&a).iter().zip(outputs(&b).iter()) {
            assert!(bits(x) == bits(y), "{name} changed with the block table on {case:?}");
        }
    }
    assert!(moved >= 20, "only {moved} of 24 redraws moved any block: the property was barely exercised");
}

#[test]
fn every_path_holds_on_long_contexts() {
    for case in draw(&large_case(), 2, 0x1a46e) {
        let longest = case.seqs.iter().map(|s| s.seq_len()).max().unwrap_or(0);
        for result in check_all(&all_paths(), &case) {
            match result {
                Ok(r) => println!(
                    "{} at {longest} tokens: error {:.2e}, zeros {:.0}%",
                    r.path,
                    r.error,
                    r.zero_fraction * 100.0
                ),
                Err(f) => panic!("{f}\n{case:?}"),
            }
        }
    }
}
