//! Log-probabilities as OpenAI's `logprobs` and vLLM report them (SPEC section 5): the float64
//! log-softmax of a request's raw f32 logits row, before any processor, temperature or truncation,
//! so they describe the model and not the sampling settings.
//!
//! `logprob_v = (l_v as f64) - m - ln(sum_u exp((l_u as f64) - m))` with `m` the row's largest
//! logit and the sum taken in id order. A `-inf` logit gets `-inf`.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};
use tokenizers::Tokenizer;

/// One position's log-probabilities: the token there and the likeliest alternatives.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprobs {
    /// The token at this position (sampled, or the prompt's).
    pub token: u32,
    /// Its log-probability.
    pub logprob: f64,
    /// Its place in the row, from 1, in the order of `top` (larger logit first, ties to the
    /// lower id): vLLM's `rank`, which `top`'s k-th entry would carry as k.
    pub rank: u32,
    /// The `top` likeliest tokens with their log-probabilities, most likely first (ties to the
    /// lower id); empty when none were asked for.
    pub top: Vec<(u32, f64)>,
}

impl TokenLogprobs {
    /// Each token this position names, with its logprob and rank: the `top` likeliest (ranks 1
    /// on), then the token itself, which may repeat one of them (vLLM's maps by id keep one).
    pub fn ranked(&self) -> impl Iterator<Item = (u32, f64, u32)> + '_ {
        let likeliest = self.top.iter().zip(1..).map(|(&(id, logprob), rank)| (id, logprob, rank));
        likeliest.chain([(self.token, self.logprob, self.rank)])
    }
}

/// A token's text where logprobs name it, as vLLM reports it: its id decoded alone, special
/// tokens kept, so a piece of a multi-byte character shows as U+FFFD.
pub fn token_text(tokenizer: &Tokenizer, id: u32) -> String {
    tokenizer.decode(&[id], false).unwrap_or_default()
}

/// `ln(sum_v exp(l_v))` of `row` in f64 (the module docs' form).
pub fn logsumexp(row: &[f32]) -> f64 {
    let max = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(f64::from(x)));
    if max == f64::NEG_INFINITY {
        return max;
    }
    let sum = row.iter().fold(0.0, |acc, &x| acc + (f64::from(x) - max).exp());
    max + sum.ln()
}

/// The log-probabilities of `token` and of the `top` likeliest tokens under `row`.
pub fn token_logprobs(row: &[f32], token: u32, top: usize) -> TokenLogprobs {
    let lse = logsumexp(row);
    let logprob = |v: u32| f64::from(row[v as usize]) - lse;
    TokenLogprobs {
        token,
        logprob: logprob(token),
        rank: rank(row, token),
        top: likeliest(row, top).into_iter().map(|v| (v, logprob(v))).collect(),
    }
}

/// `token`'s place in `row`, from 1, under [`likeliest`]'s order: one more than the ids ahead of
/// it (a larger logit, or an equal one at a lower id).
pub fn rank(row: &[f32], token: u32) -> u32 {
    let at = row[token as usize];
    let ahead = row.iter().enumerate().filter(|&(v, &x)| x > at || (x == at && (v as u32) < token)).count();
    ahead as u32 + 1
}

/// The `top` ids of `row` with the largest logits, largest first, ties to the lower id.
///
/// One pass that keeps the best `top` so far (the OpenAI API asks for at most 20): a later id
/// enters only with a logit strictly above the worst kept, since at an equal logit the lower id,
/// seen first, ranks ahead. The sort of every id it replaced took twice the row's log-softmax.
pub fn likeliest(row: &[f32], top: usize) -> Vec<u32> {
    let top = top.min(row.len());
    let ahead = |a: u32, b: u32| {
        let (x, y) = (row[a as usize], row[b as usize]);
        y.partial_cmp(&x).unwrap_or(Ordering::Equal).then(a.cmp(&b)) == Ordering::Less
    };
    let mut best: Vec<u32> = Vec::with_capacity(top + 1);
    if top == 0 {
        return best;
    }
    for v in 0..row.len() as u32 {
        if let (true, Some(&worst)) = (best.len() == top, best.last()) {
            if row[v as usize].partial_cmp(&row[worst as usize]) != Some(Ordering::Greater) {
                continue;
            }
        }
        let at = best.partition_point(|&b| ahead(b, v));
        best.insert(at, v);
        best.truncate(top);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_are_the_log_softmax_of_the_row() {
        // Probabilities 0.5, 0.25, 0.25.
        let row = [2f32.ln() * 2.0, 2f32.ln(), 2f32.ln()];
        let lp = token_logprobs(&row, 2, 2);
        assert!((lp.logprob - 0.25f64.ln()).abs() < 1e-7, "{lp:?}");
        assert_eq!(lp.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![0, 1]);
        assert!((lp.top[0].1 - 0.5f64.ln()).abs() < 1e-7);
        let total: f64 = (0..3).map(|v| token_logprobs(&row, v, 0).logprob.exp()).sum();
        assert!((total - 1.0).abs() < 1e-12);
    }

    /// The definition `likeliest` must keep: every id sorted by logit, largest first, ties to
    /// the lower id, the first `top` kept.
    fn likeliest_by_sorting(row: &[f32], top: usize) -> Vec<u32> {
        let mut ids: Vec<u32> = (0..row.len() as u32).collect();
        ids.sort_by(|&a, &b| row[b as usize].partial_cmp(&row[a as usize]).unwrap().then(a.cmp(&b)));
        ids.truncate(top);
        ids
    }

    proptest::proptest! {
        /// Logits from a handful of values (ties everywhere), -inf and both zeros among them.
        #[test]
        fn the_one_pass_top_is_the_sorted_top(
            row in crate::decode::test_rows::rows(-4..4, 0.5, -30.0..30.0, 0..300),
            top in 0usize..40,
        ) {
            proptest::prop_assert_eq!(likeliest(&row, top), likeliest_by_sorting(&row, top.min(row.len())));
        }

        /// A token's rank is its place, from 1, in the whole row sorted as `likeliest` sorts.
        #[test]
        fn rank_is_the_place_in_the_sorted_row(
            row in crate::decode::test_rows::rows(-4..4, 0.5, -30.0..30.0, 1..300),
            pick in 0usize..300,
        ) {
            let token = (pick % row.len()) as u32;
            let sorted = likeliest_by_sorting(&row, row.len());
            let place = sorted.iter().position(|&v| v == token).unwrap() as u32 + 1;
            proptest::prop_assert_eq!(rank(&row, token), place);
            proptest::prop_assert_eq!(token_logprobs(&row, token, 0).rank, place);
        }
    }

    #[test]
    fn masked_tokens_get_minus_infinity_and_top_is_capped_at_the_row() {
        let lp = token_logprobs(&[0.0, f32::NEG_INFINITY], 1, 5);
        assert_eq!(lp.logprob, f64::NEG_INFINITY);
        assert_eq!(lp.top, vec![(0, 0.0), (1, f64::NEG_INFINITY)]);
        assert!(token_logprobs(&[1.0, 1.0], 0, 0).top.is_empty());
    }
}
