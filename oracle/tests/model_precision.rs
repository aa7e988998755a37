//! The three numeric modes against each other: f32 (the CPU backend) and bf16-faithful f64 against
//! the f64 reference, and the bf16 mode's promise that every value it stores is a bf16 number.

mod model_common;

use std::collections::HashMap;

use model_common::{prompt, rel_l2, step, tiny, Part};
use ndarray::Array2;
use oracle::model::forward::{Model, Tap};
use oracle::model::init::random_weights;
use oracle::model::kv_cache::KvCache;
use oracle::model::precision::{RoundPoint, Rounding};
use oracle::model::step::{LogitRows, StepInput};
use oracle::scalar::round_bf16;
use oracle::Scalar;

/// Logits of a 40-token prefill and then 3 decodes of the same weights in one mode.
fn logits<T: Scalar>(rounding: Rounding) -> Vec<Array2<T>> {
    let m = Model::new(tiny(), random_weights(&tiny(), 21).cast::<T>(), rounding).unwrap();
    let mut cache = KvCache::new(&m.dims, 4, 16);
    let toks = prompt(5, 43, 512);
    let blocks = [3, 0, 2, 1];
    let mut out = vec![
        step(&m, &mut cache, &[Part { blocks: &blocks, cached: 0, tokens: &toks[..40] }], LogitRows::All).unwrap().0,
    ];
    for p in 40..43 {
        let part = Part { blocks: &blocks, cached: p, tokens: &toks[p..p + 1] };
        out.push(step(&m, &mut cache, &[part], LogitRows::LastPerSeq).unwrap().0);
    }
    out
}

#[test]
fn f32_logits_match_the_f64_reference() {
    let (a, b) = (logits::<f32>(Rounding::Exact), logits::<f64>(Rounding::Exact));
    for (x, y) in a.iter().zip(&b) {
        let e = rel_l2(x, y);
        assert!(e < 1e-5, "f32 vs f64: relative L2 {e}");
    }
}

#[test]
fn bf16_mode_differs_from_exact_but_stays_close() {
    let (a, b) = (logits::<f64>(Rounding::Bf16), logits::<f64>(Rounding::Exact));
    for (x, y) in a.iter().zip(&b) {
        let e = rel_l2(x, y);
        assert!(e > 1e-5 && e < 5e-2, "bf16 vs exact: relative L2 {e}");
    }
}

/// Taps every point of a mixed step (a prefill chunk and a decode) and returns, per (layer, point),
/// how many values were seen and how many of them were not bf16 numbers.
/// Per (layer, point): values seen, values off the bf16 grid.
type Census = HashMap<(Option<usize>, RoundPoint), (usize, usize)>;

fn tapped(rounding: Rounding) -> (Census, KvCache<f64>) {
    let m = Model::new(tiny(), random_weights(&tiny(), 22).cast::<f64>(), rounding).unwrap();
    let mut cache = KvCache::new(&m.dims, 4, 16);
    let toks = prompt(6, 20, 512);
    step(&m, &mut cache, &[Part { blocks: &[0, 1], cached: 0, tokens: &toks[..17] }], LogitRows::All).unwrap();
    let meta = oracle::hp1::AttnMetadata {
        block_table: ndarray::array![[0, 1], [2, 3]],
        seq_lens: vec![18, 3],
        query_start_loc: vec![0, 1, 4],
    };
    let ids = [toks[17], toks[0], toks[1], toks[2]];
    let slots = [17, 32, 33, 34];
    let mut seen = HashMap::new();
    let mut tap = |t: Tap<'_, f64>| {
        let e = seen.entry((t.layer, t.point)).or_insert((0, 0));
        e.0 += t.value.len();
        e.1 += t.value.iter().filter(|&&v| round_bf16(v) != v).count();
    };
    let step = StepInput { token_ids: &ids, meta: &meta, slot_mapping: &slots, logits: LogitRows::All };
    m.forward_tapped(&step, &mut cache, &mut tap).unwrap();
    (seen, cache)
}

#[test]
fn bf16_mode_rounds_at_every_point_and_the_cache_holds_bf16() {
    let (seen, cache) = tapped(Rounding::Bf16);
    let layers = tiny().num_layers;
    for point in RoundPoint::ALL {
        let keys: Vec<Option<usize>> = if point.in_layer() { (0..layers).map(Some).collect() } else { vec![None] };
        for layer in keys {
            let (n, off) = seen.get(&(layer, point)).copied().unwrap_or_default();
            assert!(n > 0, "{point:?} of layer {layer:?} was never tapped");
            assert_eq!(off, 0, "{point:?} of layer {layer:?}: {off} of {n} values are not bf16");
        }
    }
    assert_eq!(seen.len(), layers * 17 + 2);
    for a in cache.key.iter().chain(&cache.value) {
        assert!(a.iter().all(|&v| round_bf16(v) == v), "cache holds a value that is not bf16");
    }
}

#[test]
fn exact_mode_keeps_values_that_are_not_bf16() {
    // The check above can fail: without rounding, GEMM outputs are not bf16 numbers.
    let (seen, _) = tapped(Rounding::Exact);
    for point in [RoundPoint::QProj, RoundPoint::MlpProduct, RoundPoint::AttnResidual, RoundPoint::Logits] {
        let layer = if point.in_layer() { Some(1) } else { None };
        let (n, off) = seen[&(layer, point)];
        assert!(off > n / 2, "{point:?}: only {off} of {n} values are off the bf16 grid");
    }
}
