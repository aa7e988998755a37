//! Logits processors: steps 1 to 3 of SPEC section 5, applied to a request's raw f32 logits row
//! before the draw of [`super::sampler`] (step 4).
//!
//! In this order, each over the whole row, in f32:
//! 1. `logit_bias`: `l_v += bias_v` for each listed token.
//! 2. `min_tokens`: while fewer than `min_tokens` tokens have been generated, every id of
//!    [`ProcessorState`]'s end ids (the request's eos ids and `stop_token_ids`) gets `-inf`.
//! 3. Penalties over the request's own tokens: `repetition_penalty` `r` on every token seen in the
//!    prompt or the output, once per token whatever its count: `l_v = l_v / r` if `l_v > 0`, else
//!    `l_v * r`; then `frequency_penalty` `f` and `presence_penalty` `p` over output tokens only:
//!    `l_v -= f * count_v + p * [count_v > 0]`, with `f * count_v + p` computed in f32 first.
//!
//! Every step changes only listed tokens and each token's value depends on its own logit alone,
//! so the four steps are one sparse edit a token ([`ProcessorEdit`], in id order, from
//! [`ProcessorState::edits`]): [`ProcessorState::apply`] runs them, and a device kernel that runs
//! the same edits with the same f32 operations gives the same row.
//!
//! A guided request ([`LogitsProcessors::guide`], [`super::guide`]) then masks every token that
//! could not continue its format: a dense step, so its rows are drawn on the host.
//!
//! [`draw`] joins these to the sampler, so the CPU backend and the GPU backend's host path pick a
//! token from the same function. A request that sets none of them ([`LogitsProcessors::is_none`])
//! has no [`ProcessorState`]: its row goes straight to the sampler, as on the device.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::byte_table::ByteTable;
use super::guide::{Guide, OutputFormat};
use super::sampler::{sample, SamplingParams};
use crate::error::{invalid, Result};

/// The largest `|bias|` of a `logit_bias` entry, as OpenAI allows.
pub const MAX_LOGIT_BIAS: f32 = 100.0;
/// The largest `|frequency_penalty|` and `|presence_penalty|`, as OpenAI allows.
pub const MAX_PENALTY: f32 = 2.0;

/// One request's settings for steps 1 to 3 (OpenAI's and vLLM's names and meanings).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogitsProcessors {
    /// `(token id, bias)` pairs, ids distinct, each bias in `[-100, 100]`.
    pub logit_bias: Vec<(u32, f32)>,
    /// Tokens generated before an end id may be drawn.
    pub min_tokens: usize,
    /// `> 0`; `1` is off.
    pub repetition_penalty: f32,
    /// In `[-2, 2]`; `0` is off.
    pub frequency_penalty: f32,
    /// In `[-2, 2]`; `0` is off.
    pub presence_penalty: f32,
    /// The format the output must take, if any ([`super::guide`]).
    #[serde(default)]
    pub guide: Option<OutputFormat>,
}

impl Default for LogitsProcessors {
    fn default() -> Self {
        Self::none()
    }
}

impl LogitsProcessors {
    /// Every step off.
    pub fn none() -> Self {
        Self {
            logit_bias: Vec::new(),
            min_tokens: 0,
            repetition_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            guide: None,
        }
    }

    /// Whether these settings change no row (so the row may go to the sampler untouched).
    pub fn is_none(&self) -> bool {
        self.logit_bias.is_empty()
            && self.min_tokens == 0
            && self.repetition_penalty == 1.0
            && self.frequency_penalty == 0.0
            && self.presence_penalty == 0.0
            && self.guide.is_none()
    }

    /// Checks each field's rule for a vocabulary of `vocab_size`, naming the field and the value.
    pub fn validate(&self, vocab_size: usize) -> Result<()> {
        let mut ids = BTreeSet::new();
        for &(id, bias) in &self.logit_bias {
            if id as usize >= vocab_size {
                return invalid("logit_bias", format!("token ids must be < {vocab_size}, got {id}"));
            }
            if !(-MAX_LOGIT_BIAS..=MAX_LOGIT_BIAS).contains(&bias) {
                return invalid("logit_bias", format!("biases must be in [-100, 100], got {bias} for token {id}"));
            }
            if !ids.insert(id) {
                return invalid("logit_bias", format!("token {id} is given twice"));
            }
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return invalid("repetition_penalty", format!("must be finite and > 0, got {}", self.repetition_penalty));
        }
        for (name, value) in
            [("frequency_penalty", self.frequency_penalty), ("presence_penalty", self.presence_penalty)]
        {
            if !(-MAX_PENALTY..=MAX_PENALTY).contains(&value) {
                return invalid(name, format!("must be in [-2, 2], got {value}"));
            }
        }
        if let Some(guide) = &self.guide {
            guide.validate()?;
            if self.min_tokens > 0 {
                // min_tokens masks the end ids a complete output leaves alone: nothing to draw.
                return invalid(guide.field(), "cannot be combined with min_tokens");
            }
        }
        Ok(())
    }
}

/// What the processors read of one request's tokens: which were seen (prompt or output) and how
/// often each was generated.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TokenHistory {
    seen: BTreeSet<u32>,
    output_counts: BTreeMap<u32, u32>,
    generated: usize,
}

impl TokenHistory {
    /// The history of a request with `prompt` and nothing generated yet.
    pub fn new(prompt: &[u32]) -> Self {
        Self { seen: prompt.iter().copied().collect(), output_counts: BTreeMap::new(), generated: 0 }
    }

    /// Records a generated token.
    pub fn push(&mut self, token: u32) {
        self.seen.insert(token);
        *self.output_counts.entry(token).or_insert(0) += 1;
        self.generated += 1;
    }

    /// Tokens generated so far.
    pub fn generated(&self) -> usize {
        self.generated
    }

    /// How many times `token` was generated.
    pub fn count(&self, token: u32) -> u32 {
        self.output_counts.get(&token).copied().unwrap_or(0)
    }

    /// Whether `token` is in the prompt or the output.
    pub fn seen(&self, token: u32) -> bool {
        self.seen.contains(&token)
    }
}

/// What steps 1 to 3 do to one token of a row: each field is one step, in the module doc's order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProcessorEdit {
    /// The token.
    pub id: u32,
    /// Step 1: its `logit_bias` entry.
    pub bias: Option<f32>,
    /// Step 2: `min_tokens` masks it now (an end id, fewer tokens generated than asked).
    pub masked: bool,
    /// Step 3: the repetition penalty divides or multiplies it (seen in the prompt or output,
    /// with a penalty other than 1).
    pub repeated: bool,
    /// Step 3: how many times it was generated, where a frequency or presence penalty is set
    /// (0 otherwise: no subtraction).
    pub count: u32,
}

impl ProcessorEdit {
    /// The token's logit `l` after the steps, with `p`'s penalties, each operation one f32
    /// rounding: `l + bias`, `-inf`, `l / r` or `l * r`, `l - (f * count + p)`.
    pub fn apply(&self, mut l: f32, p: &LogitsProcessors) -> f32 {
        if let Some(bias) = self.bias {
            l += bias;
        }
        if self.masked {
            l = f32::NEG_INFINITY;
        }
        if self.repeated {
            let r = p.repetition_penalty;
            l = if l > 0.0 { l / r } else { l * r };
        }
        if self.count > 0 {
            l -= p.frequency_penalty * self.count as f32 + p.presence_penalty;
        }
        l
    }
}

/// A request's processors, the ids `min_tokens` masks, the history they read, and its guide.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessorState {
    processors: LogitsProcessors,
    end_ids: Vec<u32>,
    history: TokenHistory,
    guide: Option<Guide>,
}

impl ProcessorState {
    /// The state of a request with `prompt` and nothing generated; `end_ids` are the ids that end
    /// it (eos and `stop_token_ids`), masked while fewer than `min_tokens` are generated. A guided
    /// request needs its tokenizer's byte table (`table`), and is refused without one.
    pub fn new(
        processors: LogitsProcessors,
        end_ids: Vec<u32>,
        prompt: &[u32],
        table: Option<Arc<ByteTable>>,
    ) -> Result<Self> {
        let guide = match (&processors.guide, table) {
            (None, _) => None,
            (Some(format), Some(table)) => Some(Guide::new(format, table)?),
            (Some(format), None) => {
                return invalid(format.field(), "needs a tokenizer with a byte-level decoder, which this model lacks")
            }
        };
        Ok(Self { processors, end_ids, history: TokenHistory::new(prompt), guide })
    }

    /// Records a generated token.
    pub fn push(&mut self, token: u32) {
        self.history.push(token);
        if let Some(guide) = &mut self.guide {
            guide.push(token);
        }
    }

    /// The history so far.
    pub fn history(&self) -> &TokenHistory {
        &self.history
    }

    /// The edits steps 1 to 3 make now, one per token they touch, in ascending id order.
    pub fn edits(&self) -> Vec<ProcessorEdit> {
        let p = &self.processors;
        let mut edits: BTreeMap<u32, ProcessorEdit> = BTreeMap::new();
        fn edit(edits: &mut BTreeMap<u32, ProcessorEdit>, id: u32) -> &mut ProcessorEdit {
            edits.entry(id).or_insert(ProcessorEdit { id, bias: None, masked: false, repeated: false, count: 0 })
        }
        for &(id, bias) in &p.logit_bias {
            edit(&mut edits, id).bias = Some(bias);
        }
        if self.history.generated < p.min_tokens {
            for &id in &self.end_ids {
                edit(&mut edits, id).masked = true;
            }
        }
        if p.repetition_penalty != 1.0 {
            for &id in &self.history.seen {
                edit(&mut edits, id).repeated = true;
            }
        }
        if p.frequency_penalty != 0.0 || p.presence_penalty != 0.0 {
            for (&id, &count) in &self.history.output_counts {
                edit(&mut edits, id).count = count;
            }
        }
        edits.into_values().collect()
    }

    /// Steps 1 to 3 of the module docs on `row`, in place, then the guide's mask ([`ProcessorState::edits`], each
    /// [`ProcessorEdit::apply`]). Refuses a listed id outside the row, changing nothing.
    pub fn apply(&self, row: &mut [f32]) -> Result<()> {
        let p = &self.processors;
        let n = row.len();
        let outside = |id: u32| id as usize >= n;
        if let Some(&(id, _)) = p.logit_bias.iter().find(|(id, _)| outside(*id)) {
            return invalid("logit_bias", format!("token ids must be < {n}, got {id}"));
        }
        if let Some(&id) = self.end_ids.iter().chain(&self.history.seen).find(|&&id| outside(id)) {
            return invalid("logits", format!("a row of {n} logits cannot hold token {id}"));
        }
        for e in self.edits() {
            let l = &mut row[e.id as usize];
            *l = e.apply(*l, p);
        }
        if let Some(guide) = &self.guide {
            guide.mask(row, &self.end_ids);
        }
        Ok(())
    }
}

/// Draws the token of a request's decoding step `step` from its raw logits `row`: SPEC 5's whole
/// order, the processors of `state` (none when `None`) on a copy of the row, then [`sample`].
pub fn draw(row: &[f32], params: &SamplingParams, step: u64, state: Option<&ProcessorState>) -> Result<u32> {
    match state {
        None => sample(row, params, step),
        Some(state) => {
            let mut processed = row.to_vec();
            state.apply(&mut processed)?;
            sample(&processed, params, step)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(processors: LogitsProcessors, end_ids: &[u32], prompt: &[u32], output: &[u32]) -> ProcessorState {
        let mut s = ProcessorState::new(processors, end_ids.to_vec(), prompt, None).unwrap();
        for &t in output {
            s.push(t);
        }
        s
    }

    fn applied(s: &ProcessorState, row: &[f32]) -> Vec<f32> {
        let mut out = row.to_vec();
        s.apply(&mut out).unwrap();
        out
    }

    #[test]
    fn none_is_the_default_and_changes_nothing() {
        let p = LogitsProcessors::default();
        assert!(p.is_none());
        let row = [0.5, -1.0, 2.0];
        assert_eq!(applied(&state(p, &[0], &[1, 2], &[2]), &row), row);
        assert!(!LogitsProcessors { min_tokens: 1, ..LogitsProcessors::none() }.is_none());
    }

    #[test]
    fn validate_names_the_field_and_the_value() {
        let none = LogitsProcessors::none;
        for (p, field, needle) in [
            (LogitsProcessors { logit_bias: vec![(9, 1.0)], ..none() }, "logit_bias", "got 9"),
            (LogitsProcessors { logit_bias: vec![(1, 100.5)], ..none() }, "logit_bias", "100.5"),
            (LogitsProcessors { logit_bias: vec![(1, f32::NAN)], ..none() }, "logit_bias", "NaN"),
            (LogitsProcessors { logit_bias: vec![(1, 1.0), (1, 2.0)], ..none() }, "logit_bias", "twice"),
            (LogitsProcessors { repetition_penalty: 0.0, ..none() }, "repetition_penalty", "got 0"),
            (LogitsProcessors { repetition_penalty: f32::INFINITY, ..none() }, "repetition_penalty", "inf"),
            (LogitsProcessors { frequency_penalty: 2.5, ..none() }, "frequency_penalty", "2.5"),
            (LogitsProcessors { presence_penalty: -3.0, ..none() }, "presence_penalty", "-3"),
        ] {
            let err = p.validate(8).unwrap_err().to_string();
            assert!(err.contains(field) && err.contains(needle), "{p:?}: {err}");
        }
        LogitsProcessors { logit_bias: vec![(7, -100.0)], presence_penalty: 2.0, ..none() }.validate(8).unwrap();
    }

    #[test]
    fn an_id_outside_the_row_is_refused_not_a_panic() {
        let s = state(LogitsProcessors { logit_bias: vec![(5, 1.0)], ..LogitsProcessors::none() }, &[], &[], &[]);
        assert!(s.apply(&mut [0.0; 3]).unwrap_err().to_string().contains("got 5"));
        let s = state(LogitsProcessors { min_tokens: 1, ..LogitsProcessors::none() }, &[7], &[], &[]);
        assert!(s.apply(&mut [0.0; 3]).unwrap_err().to_string().contains("token 7"));
    }

    #[test]
    fn repetition_divides_positive_and_multiplies_negative_logits_once_per_token() {
        let p = LogitsProcessors { repetition_penalty: 2.0, ..LogitsProcessors::none() };
        // Token 0 in the prompt, 1 twice in the output, 3 in neither.
        let s = state(p, &[], &[0], &[1, 1, 2]);
        assert_eq!(applied(&s, &[3.0, -3.0, 0.0, 5.0]), vec![1.5, -6.0, 0.0, 5.0]);
    }

    #[test]
    fn frequency_and_presence_count_output_tokens_only() {
        let p = LogitsProcessors { frequency_penalty: 0.5, presence_penalty: 0.25, ..LogitsProcessors::none() };
        let s = state(p, &[], &[0], &[1, 1, 1, 2]);
        assert_eq!(applied(&s, &[1.0, 1.0, 1.0, 1.0]), vec![1.0, 1.0 - 1.75, 1.0 - 0.75, 1.0]);
    }

    #[test]
    fn min_tokens_masks_end_ids_until_enough_are_generated() {
        let p = LogitsProcessors { min_tokens: 2, ..LogitsProcessors::none() };
        let mut s = state(p, &[0, 2], &[], &[]);
        let row = [9.0, 1.0, 9.0];
        let masked = vec![f32::NEG_INFINITY, 1.0, f32::NEG_INFINITY];
        assert_eq!(applied(&s, &row), masked);
        assert_eq!(draw(&row, &SamplingParams::greedy(), 0, Some(&s)).unwrap(), 1);
        s.push(1);
        assert_eq!(applied(&s, &row), masked);
        s.push(1);
        assert_eq!(applied(&s, &row), row);
        assert_eq!(draw(&row, &SamplingParams::greedy(), 2, Some(&s)).unwrap(), 0);
    }

    #[test]
    fn edits_are_one_per_touched_token_in_id_order() {
        let p = LogitsProcessors {
            logit_bias: vec![(5, 1.5), (1, -2.0)],
            min_tokens: 3,
            repetition_penalty: 2.0,
            frequency_penalty: 0.5,
            ..LogitsProcessors::none()
        };
        let e = |id, bias, masked, repeated, count| ProcessorEdit { id, bias, masked, repeated, count };
        let s = state(p.clone(), &[0], &[3], &[1, 1]);
        assert_eq!(
            s.edits(),
            vec![
                e(0, None, true, false, 0),
                e(1, Some(-2.0), false, true, 2),
                e(3, None, false, true, 0),
                e(5, Some(1.5), false, false, 0)
            ]
        );
        // Enough tokens generated: the end id is no longer masked, so it has no edit.
        let s = state(LogitsProcessors { repetition_penalty: 1.0, ..p }, &[0], &[3], &[1, 1, 1]);
        assert_eq!(s.edits(), vec![e(1, Some(-2.0), false, false, 3), e(5, Some(1.5), false, false, 0)]);
    }

    #[test]
    fn bias_comes_before_the_penalties() {
        // Bias first turns token 0 positive, so repetition divides it; the other order would multiply.
        let p = LogitsProcessors { logit_bias: vec![(0, 3.0)], repetition_penalty: 2.0, ..LogitsProcessors::none() };
        let s = state(p, &[], &[0], &[]);
        assert_eq!(applied(&s, &[-1.0, 0.0]), vec![1.0, 0.0]);
    }
}
