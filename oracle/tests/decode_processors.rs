//! The logits processors, min-p and logprobs against SPEC section 5's definitions, each written
//! out here a token at a time and independently of `oracle::decode`, and the order of the steps:
//! bias, then min_tokens, then repetition, then frequency and presence, then temperature and the
//! truncations, then the draw.

use oracle::decode::{draw, sample, survivors, token_logprobs, LogitsProcessors, ProcessorState, SamplingParams};
use proptest::prelude::*;

const VOCAB: usize = 24;

/// SPEC 5 steps 1 to 3 for token `v`, transcribed: bias, the min_tokens mask, repetition over the
/// prompt and output, frequency and presence over the output.
fn transcribed(row: &[f32], p: &LogitsProcessors, end_ids: &[u32], prompt: &[u32], output: &[u32]) -> Vec<f32> {
    (0..row.len() as u32)
        .map(|v| {
            let mut l = row[v as usize];
            if let Some(&(_, b)) = p.logit_bias.iter().find(|(id, _)| *id == v) {
                l += b;
            }
            if output.len() < p.min_tokens && end_ids.contains(&v) {
                l = f32::NEG_INFINITY;
            }
            if prompt.contains(&v) || output.contains(&v) {
                let r = p.repetition_penalty;
                l = if l > 0.0 { l / r } else { l * r };
            }
            let count = output.iter().filter(|&&t| t == v).count();
            if count > 0 {
                l -= p.frequency_penalty * count as f32 + p.presence_penalty;
            }
            l
        })
        .collect()
}

fn processors() -> impl Strategy<Value = LogitsProcessors> {
    let bias = prop::collection::btree_map(0..VOCAB as u32, -100f32..=100.0, 0..5);
    (bias, 0usize..6, prop_oneof![Just(1.0f32), 0.2f32..3.0], -2f32..=2.0, -2f32..=2.0).prop_map(
        |(bias, min_tokens, repetition_penalty, frequency_penalty, presence_penalty)| LogitsProcessors {
            logit_bias: bias.into_iter().collect(),
            min_tokens,
            repetition_penalty,
            frequency_penalty,
            presence_penalty,
            guide: None,
        },
    )
}

fn row() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(-8f32..8.0, VOCAB)
}

fn tokens(max: usize) -> impl Strategy<Value = Vec<u32>> {
    prop::collection::vec(0..VOCAB as u32, 0..max)
}

fn state(p: &LogitsProcessors, end_ids: &[u32], prompt: &[u32], output: &[u32]) -> ProcessorState {
    let mut s = ProcessorState::new(p.clone(), end_ids.to_vec(), prompt, None).unwrap();
    for &t in output {
        s.push(t);
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn processors_are_their_definition_to_the_bit(
        row in row(), p in processors(), end_ids in tokens(3), prompt in tokens(10), output in tokens(8),
    ) {
        let mut got = row.clone();
        state(&p, &end_ids, &prompt, &output).apply(&mut got).unwrap();
        let want = transcribed(&row, &p, &end_ids, &prompt, &output);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        prop_assert_eq!(bits(&got), bits(&want));
    }

    #[test]
    fn the_draw_samples_the_processed_row(
        row in row(), p in processors(), end_ids in tokens(3), prompt in tokens(10), output in tokens(8),
        t in prop_oneof![Just(0.0f32), 0.3f32..2.0], top_k in 0usize..8, seed in any::<u64>(),
    ) {
        let s = state(&p, &end_ids, &prompt, &output);
        let processed = transcribed(&row, &p, &end_ids, &prompt, &output);
        prop_assume!(processed.iter().any(|l| l.is_finite()));
        let params = SamplingParams { top_k, ..SamplingParams::with_temperature(t, seed) };
        let step = output.len() as u64;
        prop_assert_eq!(draw(&row, &params, step, Some(&s)).unwrap(), sample(&processed, &params, step).unwrap());
        // Greedy is the argmax after steps 1 to 3.
        let greedy = draw(&row, &SamplingParams::greedy(), step, Some(&s)).unwrap();
        let best = processed.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        prop_assert_eq!(greedy as usize, processed.iter().position(|&l| l == best).unwrap());
        // No processors: the row goes to the sampler untouched.
        prop_assert_eq!(draw(&row, &params, step, None).unwrap(), sample(&row, &params, step).unwrap());
    }

    #[test]
    fn min_p_keeps_exactly_the_tokens_at_least_min_p_times_the_largest_probability(
        row in row(), t in 0.3f32..2.0, min_p in 0f32..=1.0,
    ) {
        let params = SamplingParams { min_p, ..SamplingParams::with_temperature(t, 1) };
        let mut got = survivors(&row, &params).unwrap();
        got.sort_unstable();
        // Probabilities after temperature, in f64, against min_p times the largest.
        let z: f64 = row.iter().map(|&l| (f64::from(l) / f64::from(t)).exp()).sum();
        let prob: Vec<f64> = row.iter().map(|&l| (f64::from(l) / f64::from(t)).exp() / z).collect();
        let largest = prob.iter().cloned().fold(0.0, f64::max);
        for (v, &pv) in prob.iter().enumerate() {
            let margin = (pv / largest - f64::from(min_p)).abs();
            prop_assume!(margin > 1e-9 || pv == largest);
            prop_assert_eq!(got.binary_search(&(v as u32)).is_ok(), pv >= f64::from(min_p) * largest || pv == largest);
        }
    }

    #[test]
    fn logprobs_are_the_raw_rows_log_softmax(row in row(), token in 0..VOCAB as u32, top in 0usize..6) {
        let lp = token_logprobs(&row, token, top);
        let z: f64 = row.iter().map(|&l| f64::from(l).exp()).sum();
        let want = |v: u32| (f64::from(row[v as usize]).exp() / z).ln();
        prop_assert!((lp.logprob - want(token)).abs() < 1e-9);
        prop_assert_eq!(lp.top.len(), top);
        let mut ranked: Vec<u32> = (0..VOCAB as u32).collect();
        ranked.sort_by(|&a, &b| row[b as usize].partial_cmp(&row[a as usize]).unwrap().then(a.cmp(&b)));
        for (i, &(v, l)) in lp.top.iter().enumerate() {
            prop_assert_eq!(v, ranked[i]);
            prop_assert!((l - want(v)).abs() < 1e-9);
        }
    }
}

/// The steps' order matters and is SPEC 5's: each pair below gives another result in the other order.
#[test]
fn the_steps_run_in_spec_order() {
    let none = LogitsProcessors::none;
    // Bias before repetition: -1 + 3 = 2 is positive, so divided (1.0); repetition first gives -2 + 3 = 1.
    let p = LogitsProcessors { logit_bias: vec![(0, 3.0)], repetition_penalty: 2.0, ..none() };
    let mut row = [-1.0f32, 0.0];
    state(&p, &[], &[0], &[]).apply(&mut row).unwrap();
    assert_eq!(row[0], 1.0);
    // Repetition before frequency: 3 / 2 - 1 = 0.5; frequency first gives (3 - 1) / 2 = 1.
    let p = LogitsProcessors { frequency_penalty: 1.0, repetition_penalty: 2.0, ..none() };
    let mut row = [3.0f32, 0.0];
    state(&p, &[], &[], &[0]).apply(&mut row).unwrap();
    assert_eq!(row[0], 0.5);
    // Bias before temperature: [0, 0] biased to [0, 1] then divided by T = 0.5 is [0, 2], and
    // min_p 0.2 drops token 0 (exp(-2) < 0.2); a bias added after dividing ([0, 1]) would keep it.
    let p = LogitsProcessors { logit_bias: vec![(1, 1.0)], ..none() };
    let s = state(&p, &[], &[], &[]);
    let params = SamplingParams { min_p: 0.2, ..SamplingParams::with_temperature(0.5, 3) };
    let drawn: Vec<u32> = (0..64).map(|step| draw(&[0.0, 0.0], &params, step, Some(&s)).unwrap()).collect();
    assert_eq!(drawn, vec![1; 64]);
    let unbiased = SamplingParams { min_p: 0.2, ..SamplingParams::with_temperature(1.0, 3) };
    let both: std::collections::BTreeSet<u32> =
        (0..64).map(|step| draw(&[0.0, 1.0], &unbiased, step, None).unwrap()).collect();
    assert_eq!(both.len(), 2, "at T = 1, [0, 1] keeps both tokens under min_p 0.2");
    // min_tokens masks after the bias: a +100 bias on an end id cannot lift the mask.
    let p = LogitsProcessors { logit_bias: vec![(0, 100.0)], min_tokens: 1, ..none() };
    assert_eq!(draw(&[0.0, 0.0], &SamplingParams::greedy(), 0, Some(&state(&p, &[0], &[], &[]))).unwrap(), 1);
}
