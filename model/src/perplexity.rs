//! Perplexity and next-token accuracy of a token sequence through the [`Engine`], every position's
//! logits recorded as `asynct generate --dump-logits` records them: what `asynct eval` prints and
//! the GPU harness compares between backends. `python -m asynct.eval` is the same definition in
//! PyTorch:
//!
//! - the ids are cut into consecutive windows of `max_len` tokens ([`windows`]; the last one
//!   shorter, a window of one token predicts nothing and is dropped), each run from position 0;
//! - a window of `n` tokens is one request whose prompt is its first `n - 1` tokens, generating
//!   one token: its `n - 1` recorded rows predict tokens `1..n`;
//! - the loss is the mean of `-log softmax(row)[next]` (in f64) over every prediction, the
//!   perplexity its `exp`, the accuracy the fraction whose greedy pick (the lowest id among equal
//!   maxima, as the sampler's) is the next token.
//!
//! [`prediction_rows`] hands back those rows themselves (teacher forcing), for a caller that
//! compares backends position by position (`gpu_trained`'s greedy agreement).

use ndarray::{Array2, ArrayView1};

use crate::config::ModelConfig;
use crate::engine::{Engine, GenerationRequest, SamplingParams, StopConditions};
use crate::error::{Error, Result};

/// Sums over every prediction scored.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Score {
    /// Sum of `-log p(next)`.
    pub nll: f64,
    /// Predictions scored.
    pub predictions: usize,
    /// Predictions whose greedy pick was the next token.
    pub correct: usize,
}

impl Score {
    /// Adds the prediction of `next` from one logits `row`.
    pub fn add(&mut self, row: ArrayView1<'_, f32>, next: u32) {
        let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
        let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
        self.nll += max + sum.ln() - row[next as usize] as f64;
        let pick = row.iter().enumerate().fold(0, |best, (i, &v)| if v > row[best] { i } else { best });
        self.correct += usize::from(pick == next as usize);
        self.predictions += 1;
    }

    /// Mean negative log-likelihood, nats per token.
    pub fn loss(&self) -> f64 {
        self.nll / self.predictions as f64
    }

    /// `exp` of the loss.
    pub fn perplexity(&self) -> f64 {
        self.loss().exp()
    }

    /// The fraction of predictions whose greedy pick was the next token.
    pub fn accuracy(&self) -> f64 {
        self.correct as f64 / self.predictions as f64
    }
}

/// The windows of `ids`: consecutive pieces of `max_len`, those of fewer than 2 tokens dropped.
pub fn windows(ids: &[u32], max_len: usize) -> Vec<&[u32]> {
    ids.chunks(max_len.max(1)).filter(|w| w.len() >= 2).collect()
}

/// Scores `windows` through `engine` (idle; its logits recording is turned on), `batch` requests
/// at a time; `progress(predictions)` is called after each batch with the count it scored.
pub fn score(
    engine: &mut Engine,
    cfg: &ModelConfig,
    windows: &[&[u32]],
    batch: usize,
    progress: &mut dyn FnMut(usize),
) -> Result<Score> {
    let mut score = Score::default();
    for group in windows.chunks(batch.max(1)) {
        let mut scored = 0;
        for (logits, w) in prediction_rows(engine, cfg, group)?.iter().zip(group) {
            for (row, &next) in logits.rows().into_iter().zip(&w[1..]) {
                score.add(row, next);
            }
            scored += w.len() - 1;
        }
        progress(scored);
    }
    Ok(score)
}

/// The logits rows that predict each of `sequences` (each of at least 2 tokens) from its own
/// earlier tokens, all run at once through `engine` (idle; its logits recording is turned on):
/// `[len - 1, vocab]` per sequence, row `j` predicting token `j + 1` (teacher forcing).
pub fn prediction_rows(engine: &mut Engine, cfg: &ModelConfig, sequences: &[&[u32]]) -> Result<Vec<Array2<f32>>> {
    if let Some(k) = sequences.iter().position(|s| s.len() < 2) {
        return Err(Error::Request(format!("sequence {k} has {} tokens; predicting needs 2", sequences[k].len())));
    }
    engine.set_record_logits(true)?;
    for s in sequences {
        engine.add_request(one_token(cfg, &s[..s.len() - 1]))?;
    }
    let done = engine.run_to_completion()?;
    if done.len() != sequences.len() {
        return Err(Error::Executor(format!("{} requests finished of {}", done.len(), sequences.len())));
    }
    done.into_iter()
        .zip(sequences)
        .map(|(c, s)| {
            let logits = c.logits.ok_or_else(|| Error::Executor("the engine recorded no logits".into()))?;
            if logits.nrows() != s.len() - 1 {
                return Err(Error::Executor(format!(
                    "request {}: {} logits rows, expected {}",
                    c.id,
                    logits.nrows(),
                    s.len() - 1
                )));
            }
            Ok(logits)
        })
        .collect()
}

/// A greedy request for one token after `prompt`, eos ignored, so every prompt row is recorded.
fn one_token(cfg: &ModelConfig, prompt: &[u32]) -> GenerationRequest {
    GenerationRequest {
        prompt: prompt.to_vec(),
        sampling: SamplingParams::greedy(),
        stop: StopConditions {
            eos_token_ids: cfg.eos_token_id.clone(),
            max_tokens: 1,
            max_model_len: cfg.max_position_embeddings,
            ignore_eos: true,
            ..Default::default()
        },
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn windows_are_consecutive_and_drop_single_tokens() {
        let ids: Vec<u32> = (0..11).collect();
        assert_eq!(windows(&ids, 4), vec![&ids[0..4], &ids[4..8], &ids[8..11]]);
        assert_eq!(windows(&ids[..9], 4), vec![&ids[0..4], &ids[4..8]]);
        assert!(windows(&ids[..1], 4).is_empty());
    }

    #[test]
    fn score_is_the_log_softmax_and_the_lowest_id_wins_ties() {
        let mut s = Score::default();
        s.add(array![0.0f32, 0.0, 0.0, 0.0].view(), 0);
        assert!((s.nll - 4f64.ln()).abs() < 1e-12);
        assert_eq!(s.correct, 1, "a four-way tie picks id 0");
        s.add(array![1000.0f32, 0.0, 1000.0].view(), 2);
        assert!((s.nll - 4f64.ln() - 2f64.ln()).abs() < 1e-9, "no overflow at large logits: {}", s.nll);
        assert_eq!((s.correct, s.predictions), (1, 2), "the tie goes to id 0, not the target 2");
        assert!((s.loss() - (4f64.ln() + 2f64.ln()) / 2.0).abs() < 1e-9);
        assert!((s.accuracy() - 0.5).abs() < 1e-12 && (s.perplexity() - s.loss().exp()).abs() < 1e-12);
    }
}
