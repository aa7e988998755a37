//! What the engine keeps of one unfinished request besides the scheduler's tokens: how it samples
//! (its parameters and its processors' state), its decoder, and the logprobs it asked for.
//!
//! The processors read the request's own tokens only (its prompt, then each token as it is
//! generated), so a request's rows are processed the same alone or in any batch. Prompt logprobs
//! (OpenAI's `echo` with `logprobs`) come from the logits of every prompt position, recorded as
//! first computed: position `i`'s row gives the logprob of prompt token `i + 1`, and the first
//! prompt token has none. A recomputation after a preemption starts again at position 0 and
//! records nothing twice.

use ndarray::ArrayView1;
use oracle::decode::logprobs::{token_logprobs, TokenLogprobs};
use oracle::decode::processors::ProcessorState;
use oracle::decode::request::RequestDecoder;
use oracle::decode::sampler::SamplingParams;
use rayon::prelude::*;

use crate::executor::SamplingRow;

/// One unfinished request.
pub struct RequestState {
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// The draw's parameters.
    pub sampling: SamplingParams,
    /// The logits processors and the history they read; `None` when the request sets none.
    pub processing: Option<ProcessorState>,
    /// Text, stop rules and the generated ids.
    pub decoder: RequestDecoder,
    /// Alternatives per generated token whose logprobs are reported, when logprobs were asked.
    pub logprobs: Option<usize>,
    /// Alternatives per prompt token, when the prompt's logprobs were asked.
    pub prompt_logprobs: Option<usize>,
    /// Logprobs of each generated token (when asked).
    pub token_logprobs: Vec<TokenLogprobs>,
    /// Logprobs of each prompt token recorded so far, `None` for the first (when asked).
    pub prompt_record: Vec<Option<TokenLogprobs>>,
    /// Whether the prompt's logprobs were handed out (with the first generated token).
    pub prompt_sent: bool,
    /// Recorded logits rows, `[positions, vocab]` flattened (the engine's `record_logits`).
    pub logits: Vec<f32>,
    /// Its draws in steps submitted and not yet handed out (steps planned ahead).
    pub draws_in_flight: u64,
}

impl RequestState {
    /// The row that draws this request's next token.
    pub fn sampling_row(&self) -> SamplingRow<'_> {
        SamplingRow {
            params: self.sampling,
            step: self.decoder.token_ids().len() as u64 + self.draws_in_flight,
            processing: self.processing.as_ref(),
            scored: self.logprobs.is_some(),
        }
    }

    /// Whether its tokens are drawn on the device and no logits of its prompt are still wanted,
    /// so a step may be planned before its previous token is on the host (its tokens' logprobs
    /// come from their scored rows when each step is collected). A request with prompt logprobs
    /// draws plainly once they are recorded: a recomputation after a preemption reads no row.
    pub fn draws_plainly(&self) -> bool {
        self.sampling_row().on_device() && !self.records_prompt()
    }

    /// Whether some prompt position's logprobs are still to be recorded.
    fn records_prompt(&self) -> bool {
        self.prompt_logprobs.is_some() && self.prompt_record.len() < self.prompt.len()
    }

    /// Whether computing positions `start..start + len` still records prompt logprobs.
    pub fn wants_prompt_rows(&self, start: usize, len: usize) -> bool {
        let next = self.prompt_record.len().saturating_sub(1);
        self.records_prompt() && start + len > next
    }

    /// Records the prompt logprobs that `row(pos)` (the logits of position `pos`) gives, for
    /// `pos` in `start..start + len` not recorded yet; the positions' log-softmaxes run in
    /// parallel (0.7 ms a row of Qwen3's vocabulary on one core, a chunk has 512).
    pub fn record_prompt_rows<'r>(
        &mut self,
        start: usize,
        len: usize,
        row: impl Fn(usize) -> ArrayView1<'r, f32> + Sync,
    ) {
        let Some(top) = self.prompt_logprobs else { return };
        if self.prompt_record.is_empty() {
            self.prompt_record.push(None);
        }
        let end = (start + len).min(self.prompt.len() - 1);
        let prompt = &self.prompt;
        let scored: Vec<Option<TokenLogprobs>> = ((self.prompt_record.len() - 1).max(start)..end)
            .into_par_iter()
            .map(|pos| {
                Some(token_logprobs(row(pos).as_slice().expect("logits rows are contiguous"), prompt[pos + 1], top))
            })
            .collect();
        self.prompt_record.extend(scored);
    }

    /// The prompt's logprobs, once, when they are complete (asked and every position recorded).
    pub fn take_prompt_logprobs(&mut self) -> Option<Vec<Option<TokenLogprobs>>> {
        let complete = self.prompt_record.len() == self.prompt.len();
        (self.prompt_logprobs.is_some() && complete && !self.prompt_sent).then(|| {
            self.prompt_sent = true;
            self.prompt_record.clone()
        })
    }

    /// The logprobs of `token` under `row`, the raw row it was drawn from, when the request asks
    /// for them (`None` otherwise, or without a row).
    pub fn score(&self, token: u32, row: Option<ArrayView1<'_, f32>>) -> Option<TokenLogprobs> {
        let (top, row) = (self.logprobs?, row?);
        Some(token_logprobs(row.as_slice().expect("logits rows are contiguous"), token, top))
    }

    /// Records `token` with its logprobs (from [`RequestState::score`]) and in the processors'
    /// history.
    pub fn push_sampled(&mut self, token: u32, logprobs: Option<&TokenLogprobs>) {
        if let Some(p) = &mut self.processing {
            p.push(token);
        }
        if let Some(lp) = logprobs {
            self.token_logprobs.push(lp.clone());
        }
    }
}
