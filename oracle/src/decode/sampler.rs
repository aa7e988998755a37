//! Choosing the next token from a row of logits: greedy, temperature, top-k, top-p, min-p,
//! per-request seed.
//!
//! A sampled token is the Gumbel-max draw `argmax_v (logit_v / T + gumbel(seed, step, v))` over the
//! tokens that survive top-k, top-p and min-p (SPEC section 5). The row given is the one after the
//! request's logits processors ([`super::processors`]): this module is step 4 of SPEC 5's order.
//! The Gumbel noise comes from [`philox`](super::philox), keyed by the request's seed, the step and the token id, so a GPU kernel
//! that follows the steps below draws the same token from the same logits, with no generator state.
//!
//! # Exact order of operations
//!
//! 1. Refuse an empty row, a NaN or `+inf` logit, and a row whose logits are all `-inf`
//!    (a `-inf` logit is a masked token: it is never drawn while a finite one survives).
//! 2. `T == 0`: return the first index of the largest logit (f32 comparison; `-0.0 == 0.0`).
//! 3. Order the tokens by logit descending, ties by lower id (f32 comparison); this is the
//!    probability order, since `exp` is monotone. Top-k (`k > 0`) keeps the first `min(k, n)`.
//! 4. Top-p (`p < 1`), over the kept tokens in that order, all in f64:
//!    `s_i = (logit_i as f64) / (T as f64)`, `w_i = exp(s_i - s_0)`, `Z = w_0 + w_1 + ...` summed
//!    left to right, then keep tokens `0..=i` for the first `i` where the running sum
//!    `w_0 + ... + w_i` (same order) is `>= (p as f64) * Z`. Because the last running sum is `Z`
//!    itself and `p <= 1`, this always stops, and it keeps at least one token.
//! 5. Min-p (`min_p > 0`), over the tokens kept so far, in f64: keep `v` when
//!    `exp(s_v - s_max) >= min_p`, i.e. its probability after temperature is at least `min_p`
//!    times the largest (`s_max` is the most probable token's, which top-k and top-p always keep,
//!    so the ratio is the same over the whole row or the kept tokens). The most probable token
//!    always stays.
//! 6. For each survivor `v`: `score_v = (logit_v as f64) / (T as f64) + gumbel(seed, step, v)` in f64;
//!    return the survivor with the largest score, ties to the lower id.
//!
//! Division and addition are correctly rounded on both sides; only `exp` (steps 4 and 5) and `ln` (inside
//! `gumbel`) may differ in the last ulp between libm and CUDA, which can change the outcome only
//! on a near-exact tie.
//!
//! `step` is the index of the token being drawn among the request's generated tokens (0 for the
//! first), so a request replays the same tokens whatever its prompt length or batch.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use super::philox::gumbel;
use crate::error::{invalid, Result};

/// How one request picks its tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SamplingParams {
    /// Softmax temperature; `0` is greedy. Finite and `>= 0`.
    pub temperature: f32,
    /// Keep only the `top_k` largest logits; `0` keeps all.
    pub top_k: usize,
    /// Keep the smallest most-probable set whose probability reaches `top_p`; in `(0, 1]`, `1` keeps all.
    pub top_p: f32,
    /// Drop tokens whose probability after temperature is below `min_p` times the largest; in
    /// `[0, 1]`, `0` keeps all.
    #[serde(default)]
    pub min_p: f32,
    /// Keys the Philox draws; the same seed, step and logits give the same token.
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self::greedy()
    }
}

impl SamplingParams {
    /// Greedy decoding: temperature 0, no truncation.
    pub fn greedy() -> Self {
        Self { temperature: 0.0, top_k: 0, top_p: 1.0, min_p: 0.0, seed: 0 }
    }

    /// Sampling at `temperature` with `seed`, no truncation.
    pub fn with_temperature(temperature: f32, seed: u64) -> Self {
        Self { temperature, seed, ..Self::greedy() }
    }

    /// Checks the rules on each field, naming the field and the value it refuses.
    pub fn validate(&self) -> Result<()> {
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return invalid("temperature", format!("must be finite and >= 0, got {}", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return invalid("top_p", format!("must be in (0, 1], got {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return invalid("min_p", format!("must be in [0, 1], got {}", self.min_p));
        }
        Ok(())
    }
}

/// Draws the token for decoding step `step` from `logits` (one row over the vocabulary).
///
/// Fails, never panics, on invalid `params`, an empty row, a NaN or `+inf` logit, or a row that is all `-inf`.
pub fn sample(logits: &[f32], params: &SamplingParams, step: u64) -> Result<u32> {
    params.validate()?;
    check_logits(logits)?;
    if params.temperature == 0.0 {
        return Ok(argmax_first(logits.iter().copied()) as u32);
    }
    Ok(gumbel_max(logits, survivor_keys(logits, params), params, step))
}

/// The token ids [`sample`] may return (steps 1 to 5 of the module docs), in an unspecified order:
/// the greedy token alone at temperature 0, else those that survive top-k, top-p then min-p (every
/// id when none is on).
pub fn survivors(logits: &[f32], params: &SamplingParams) -> Result<Vec<u32>> {
    params.validate()?;
    check_logits(logits)?;
    if params.temperature == 0.0 {
        return Ok(vec![argmax_first(logits.iter().copied()) as u32]);
    }
    Ok(survivor_keys(logits, params).into_iter().map(|key| key as u32).collect())
}

/// Token `id`'s place in step 3's order as one integer: ascending keys are logits descending,
/// ties by lower id (`-0.0` and `0.0` equal). Sorting plain integers instead of ids by a
/// comparison that looks both logits up is 6x faster over Qwen3's 151,936 tokens (15 ms to 2.4).
fn order_key(logit: f32, id: u32) -> u64 {
    let bits = if logit == 0.0 { 0 } else { logit.to_bits() };
    // The usual order-preserving map of f32 bits to u32 (ascending with the logit), inverted.
    let ascending = if bits >> 31 == 1 { !bits } else { bits | 0x8000_0000 };
    (u64::from(!ascending) << 32) | u64::from(id)
}

/// Steps 3 to 5 on a valid row at a positive temperature: the surviving tokens' order keys, in
/// an unspecified order.
fn survivor_keys(logits: &[f32], params: &SamplingParams) -> Vec<u64> {
    let n = logits.len();
    let k = if params.top_k == 0 { n } else { params.top_k.min(n) };
    let mut keys: Vec<u64> = logits.iter().zip(0u32..).map(|(&l, v)| order_key(l, v)).collect();
    if k < n {
        keys.select_nth_unstable(k - 1);
        keys.truncate(k);
    }
    if params.top_p < 1.0 {
        match k < n {
            true => keys.sort_unstable(),
            false => keys = sorted_from_id_order(keys),
        }
        let keep = nucleus_len(&keys, logits, params.temperature, params.top_p);
        keys.truncate(keep);
    }
    if params.min_p > 0.0 {
        let t = f64::from(params.temperature);
        let top = *keys.iter().min().expect("top-k and top-p keep at least one token");
        let s_max = f64::from(logits[top as u32 as usize]) / t;
        let floor = f64::from(params.min_p);
        keys.retain(|&key| key == top || (f64::from(logits[key as u32 as usize]) / t - s_max).exp() >= floor);
    }
    keys
}

/// From this many keys a row's keys are radix-sorted.
const RADIX_FROM: usize = 4096;

/// `keys` (one a token, in id order) sorted ascending. A stable sort by the logit half alone
/// keeps equal logits in id order, which is the whole key's order: four 8-bit counting passes,
/// 0.6 ms over Qwen3's vocabulary against 2.4 for a comparison sort.
fn sorted_from_id_order(keys: Vec<u64>) -> Vec<u64> {
    if keys.len() < RADIX_FROM {
        let mut keys = keys;
        keys.sort_unstable();
        return keys;
    }
    let mut to = vec![0u64; keys.len()];
    let mut from = keys;
    for shift in [32, 40, 48, 56] {
        let digit = |key: u64| ((key >> shift) & 0xff) as usize;
        let mut start = [0usize; 256];
        for &key in &from {
            start[digit(key)] += 1;
        }
        if start.contains(&from.len()) {
            continue;
        }
        let mut total = 0;
        for slot in start.iter_mut() {
            (*slot, total) = (total, total + *slot);
        }
        for &key in &from {
            let d = digit(key);
            to[start[d]] = key;
            start[d] += 1;
        }
        std::mem::swap(&mut from, &mut to);
    }
    from
}

/// Above every Gumbel draw: the largest uniform, `1 - 2^-33`, gives `-ln(-ln u)` = 22.87.
const GUMBEL_BOUND: f64 = 24.0;

/// Tokens whose scores are computed before the rest are looked at (step 6).
const FIRST_SCORED: usize = 256;

/// Step 6 over the survivors `keys`: the largest `logit / T + gumbel`, ties to the lower id.
///
/// A token whose `logit / T + GUMBEL_BOUND` is below the best score so far cannot win, nor can any
/// less probable one, so the scores are taken most probable first and stop there: the most
/// probable `FIRST_SCORED` in order, then the others only where they could still win. Most of a
/// real row lies that far below its best, and each score costs a Philox draw and two logs.
fn gumbel_max(logits: &[f32], mut keys: Vec<u64>, params: &SamplingParams, step: u64) -> u32 {
    let t = f64::from(params.temperature);
    let scaled = |key: u64| f64::from(logits[key as u32 as usize]) / t;
    let first = keys.len().min(FIRST_SCORED);
    if keys.len() > first {
        keys.select_nth_unstable(first - 1);
    }
    let (head, tail) = keys.split_at_mut(first);
    head.sort_unstable();
    let mut best: Option<(f64, u32)> = None;
    let mut consider = |key: u64| -> bool {
        let s = scaled(key);
        if best.is_some_and(|(b, _)| s + GUMBEL_BOUND < b) {
            return false;
        }
        let v = key as u32;
        let score = s + gumbel(params.seed, step, v);
        if best.is_none_or(|(b, bv)| score > b || (score == b && v < bv)) {
            best = Some((score, v));
        }
        true
    };
    // The tail only where no token of the head stopped the scan: every tail token is less
    // probable than the whole head.
    if head.iter().all(|&key| consider(key)) {
        tail.iter().for_each(|&key| {
            consider(key);
        });
    }
    best.expect("at least one token survives").1
}

/// How many of `sorted` (order keys, most probable first) top-p keeps: step 4 of the module docs.
fn nucleus_len(sorted: &[u64], logits: &[f32], temperature: f32, top_p: f32) -> usize {
    let t = f64::from(temperature);
    let scaled = |key: u64| f64::from(logits[key as u32 as usize]) / t;
    let s0 = scaled(sorted[0]);
    let weights: Vec<f64> = sorted.iter().map(|&key| (scaled(key) - s0).exp()).collect();
    let total: f64 = weights.iter().fold(0.0, |acc, w| acc + w);
    let target = f64::from(top_p) * total;
    let mut running = 0.0;
    for (i, w) in weights.iter().enumerate() {
        running += w;
        if running >= target {
            return i + 1;
        }
    }
    sorted.len()
}

/// Refuses what has no sampling meaning: nothing, NaN, `+inf`, or nothing but `-inf`.
fn check_logits(logits: &[f32]) -> Result<()> {
    if logits.is_empty() {
        return invalid("logits", "expected at least one logit, got an empty row");
    }
    if logits.len() > u32::MAX as usize {
        return invalid("logits", format!("expected at most 2^32 - 1 logits, got {}", logits.len()));
    }
    if let Some((i, l)) = logits.iter().enumerate().find(|(_, l)| l.is_nan() || **l == f32::INFINITY) {
        return invalid("logits", format!("expected no NaN or +inf, got {l} at token {i}"));
    }
    if logits.iter().all(|l| *l == f32::NEG_INFINITY) {
        return invalid("logits", format!("expected a finite logit, got all {} equal to -inf", logits.len()));
    }
    Ok(())
}

/// The first index of the largest value (ties go to the lower index); the input must be non-empty.
fn argmax_first<T: PartialOrd>(values: impl Iterator<Item = T>) -> usize {
    let mut best: Option<(usize, T)> = None;
    for (i, v) in values.enumerate() {
        let better = match &best {
            None => true,
            Some((_, b)) => v.partial_cmp(b) == Some(Ordering::Greater),
        };
        if better {
            best = Some((i, v));
        }
    }
    best.expect("argmax of a non-empty row").0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32, top_k: usize, top_p: f32, seed: u64) -> SamplingParams {
        SamplingParams { temperature, top_k, top_p, min_p: 0.0, seed }
    }

    #[test]
    fn greedy_breaks_ties_to_the_lowest_id_and_treats_signed_zeros_as_equal() {
        assert_eq!(sample(&[1.0, 3.0, 3.0, 2.0], &SamplingParams::greedy(), 0).unwrap(), 1);
        assert_eq!(sample(&[-1.0, -0.0, 0.0], &SamplingParams::greedy(), 0).unwrap(), 1);
        assert_eq!(sample(&[f32::NEG_INFINITY, -5.0], &SamplingParams::greedy(), 0).unwrap(), 1);
    }

    #[test]
    fn refuses_bad_rows_without_panicking() {
        let p = params(1.0, 0, 1.0, 0);
        for (row, needle) in [
            (vec![], "empty"),
            (vec![0.0, f32::NAN], "NaN at token 1"),
            (vec![f32::INFINITY], "inf at token 0"),
            (vec![f32::NEG_INFINITY; 3], "all 3 equal to -inf"),
        ] {
            let err = sample(&row, &p, 0).unwrap_err().to_string();
            assert!(err.contains("logits") && err.contains(needle), "{row:?}: {err}");
            let err = sample(&row, &SamplingParams::greedy(), 0).unwrap_err().to_string();
            assert!(err.contains(needle), "greedy {row:?}: {err}");
        }
    }

    #[test]
    fn validate_names_the_field_and_the_value() {
        for (p, field, value) in [
            (params(-0.5, 0, 1.0, 0), "temperature", "-0.5"),
            (params(f32::NAN, 0, 1.0, 0), "temperature", "NaN"),
            (params(f32::INFINITY, 0, 1.0, 0), "temperature", "inf"),
            (params(1.0, 0, 0.0, 0), "top_p", "0"),
            (params(1.0, 0, 1.5, 0), "top_p", "1.5"),
            (params(1.0, 0, f32::NAN, 0), "top_p", "NaN"),
            (SamplingParams { min_p: -0.1, ..params(1.0, 0, 1.0, 0) }, "min_p", "-0.1"),
            (SamplingParams { min_p: 1.5, ..params(1.0, 0, 1.0, 0) }, "min_p", "1.5"),
            (SamplingParams { min_p: f32::NAN, ..params(1.0, 0, 1.0, 0) }, "min_p", "NaN"),
        ] {
            let err = p.validate().unwrap_err().to_string();
            assert!(err.contains(field) && err.contains(value), "{p:?}: {err}");
            assert_eq!(sample(&[0.0], &p, 0).unwrap_err().to_string(), err);
        }
        params(0.0, 5, 1.0, 0).validate().unwrap();
        params(2.0, 0, 1e-6, 0).validate().unwrap();
    }

    #[test]
    fn top_k_ties_keep_the_lower_ids() {
        let s = survivors(&[1.0, 2.0, 2.0, 2.0, 0.0], &params(1.0, 2, 1.0, 0)).unwrap();
        let mut s = s;
        s.sort();
        assert_eq!(s, vec![1, 2]);
    }

    #[test]
    fn nucleus_stops_at_the_first_prefix_reaching_top_p() {
        // Probabilities 0.5, 0.25, 0.125, 0.125 at T = 1.
        let l = [2f32.ln() * 3.0, 2f32.ln() * 2.0, 2f32.ln(), 2f32.ln()];
        let kept = |p: f32| {
            let mut s = survivors(&l, &params(1.0, 0, p, 0)).unwrap();
            s.sort();
            s
        };
        assert_eq!(kept(0.4), vec![0]);
        assert_eq!(kept(0.6), vec![0, 1]);
        assert_eq!(kept(0.8), vec![0, 1, 2]);
        assert_eq!(kept(0.9), vec![0, 1, 2, 3]);
    }

    #[test]
    fn nucleus_reaching_top_p_exactly_stops_there() {
        // Equal logits: every weight is exactly 1, so half the mass is reached exactly at two tokens.
        let mut s = survivors(&[0.0; 4], &params(1.0, 0, 0.5, 0)).unwrap();
        s.sort();
        assert_eq!(s, vec![0, 1]);
    }

    #[test]
    fn min_p_keeps_tokens_at_least_that_fraction_of_the_largest_probability() {
        // Probabilities proportional to 8, 4, 2, 1 at T = 1; at T = 2 to sqrt of those.
        let l = [2f32.ln() * 3.0, 2f32.ln() * 2.0, 2f32.ln(), 0.0];
        let kept = |t: f32, min_p: f32| {
            let mut s = survivors(&l, &SamplingParams { min_p, ..params(t, 0, 1.0, 0) }).unwrap();
            s.sort();
            s
        };
        assert_eq!(kept(1.0, 0.45), vec![0, 1]);
        assert_eq!(kept(1.0, 0.2), vec![0, 1, 2]);
        assert_eq!(kept(1.0, 1.0), vec![0]);
        assert_eq!(kept(2.0, 0.45), vec![0, 1, 2]);
        assert_eq!(kept(1.0, 0.0), vec![0, 1, 2, 3]);
        // After top-k 2, min_p still measures against the largest.
        let mut s = survivors(&l, &SamplingParams { min_p: 0.1, ..params(1.0, 2, 1.0, 0) }).unwrap();
        s.sort();
        assert_eq!(s, vec![0, 1]);
    }

    /// The sampler as first written, sorting ids by a comparison of their logits and scoring
    /// every survivor: what the keyed sort and the bounded scan must reproduce token for token.
    fn sample_by_sorting_ids(logits: &[f32], params: &SamplingParams, step: u64) -> (u32, Vec<u32>) {
        let n = logits.len();
        let k = if params.top_k == 0 { n } else { params.top_k.min(n) };
        let mut ids: Vec<u32> = (0..n as u32).collect();
        let by_prob = |a: &u32, b: &u32| {
            let (la, lb) = (logits[*a as usize], logits[*b as usize]);
            lb.partial_cmp(&la).unwrap().then(a.cmp(b))
        };
        ids.sort_by(by_prob);
        ids.truncate(k);
        let t = f64::from(params.temperature);
        if params.top_p < 1.0 {
            let s0 = f64::from(logits[ids[0] as usize]) / t;
            let w: Vec<f64> = ids.iter().map(|&v| (f64::from(logits[v as usize]) / t - s0).exp()).collect();
            let target = f64::from(params.top_p) * w.iter().fold(0.0, |acc, x| acc + x);
            let mut running = 0.0;
            let keep = w.iter().position(|x| {
                running += x;
                running >= target
            });
            ids.truncate(keep.map_or(ids.len(), |i| i + 1));
        }
        if params.min_p > 0.0 {
            let s_max = f64::from(logits[ids[0] as usize]) / t;
            let top = ids[0];
            let floor = f64::from(params.min_p);
            ids.retain(|&v| v == top || (f64::from(logits[v as usize]) / t - s_max).exp() >= floor);
        }
        ids.sort_unstable();
        let scores = ids.iter().map(|&v| f64::from(logits[v as usize]) / t + gumbel(params.seed, step, v));
        (ids[argmax_first(scores)], ids)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 400, ..Default::default() })]

        /// Rows past the first scored tokens, coarse (ties everywhere) or spread wide enough that
        /// the scan stops early, with masked tokens; every filter on and off.
        #[test]
        fn the_keyed_sampler_draws_what_sorting_ids_draws(
            row in crate::decode::test_rows::rows(-16..16, 0.5, -80.0..40.0, 1..1200),
            t in 0.05f32..4.0,
            top_k in proptest::prop_oneof![proptest::strategy::Just(0usize), 1usize..400],
            top_p in proptest::prop_oneof![proptest::strategy::Just(1.0f32), 0.05f32..1.0],
            min_p in proptest::prop_oneof![proptest::strategy::Just(0.0f32), 0.0001f32..0.5],
            seed: u64,
            step in 0u64..1000,
        ) {
            proptest::prop_assume!(row.iter().any(|l| l.is_finite()));
            let p = SamplingParams { temperature: t, top_k, top_p, min_p, seed };
            let (want, kept) = sample_by_sorting_ids(&row, &p, step);
            let mut got = survivors(&row, &p).unwrap();
            got.sort_unstable();
            proptest::prop_assert_eq!(got, kept);
            proptest::prop_assert_eq!(sample(&row, &p, step).unwrap(), want);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 24, ..Default::default() })]

        /// Rows long enough for the radix sort, with few distinct logits (long runs of ties).
        #[test]
        fn long_rows_sort_by_the_whole_key(
            row in crate::decode::test_rows::rows(-8..8, 0.25, -1e30..1e30, RADIX_FROM..3 * RADIX_FROM),
        ) {
            let keys: Vec<u64> = row.iter().zip(0u32..).map(|(&l, v)| order_key(l, v)).collect();
            let mut want = keys.clone();
            want.sort_unstable();
            proptest::prop_assert_eq!(sorted_from_id_order(keys), want);
        }
    }

    #[test]
    fn no_gumbel_draw_reaches_the_bound() {
        let largest = (f64::from(u32::MAX) + 0.5) * (1.0 / 4_294_967_296.0);
        assert!(-(-largest.ln()).ln() < GUMBEL_BOUND - 1.0);
    }

    #[test]
    fn masked_tokens_are_never_drawn() {
        let l = [f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY, 0.0];
        for step in 0..200 {
            let v = sample(&l, &params(5.0, 0, 1.0, 9), step).unwrap();
            assert!(v == 1 || v == 3, "step {step} drew masked token {v}");
        }
    }
}
