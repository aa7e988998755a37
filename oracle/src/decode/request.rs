//! One request's output side: generated tokens in, streamed text and the finish reason out.
//!
//! [`RequestDecoder`] joins the [`IncrementalDetokenizer`] (whole characters only) and the
//! [`StopMatcher`] (stop strings held back until decided) with the token-count limits. For each
//! pushed token, in this order:
//!
//! 1. the id is recorded (eos included: [`RequestDecoder::token_ids`] is what the model generated);
//! 2. an eos id (unless `ignore_eos`) finishes with [`FinishReason::Eos`]; an eos id is never rendered
//!    into text, even under `ignore_eos`;
//! 3. an id of `stop_token_ids` finishes with [`FinishReason::StopToken`] (under `ignore_eos` too);
//!    its text is rendered only with `include_stop_str_in_output`;
//! 4. any other id is detokenised and its text goes through the stop matcher; a stop string
//!    finishes with [`FinishReason::StopString`], the text cut just before it (just after it with
//!    `include_stop_str_in_output`);
//! 5. `max_tokens` generated finishes with [`FinishReason::MaxTokens`], else prompt plus generated
//!    reaching `max_model_len` with [`FinishReason::ModelLength`].
//!
//! Finishing by eos or a limit releases everything held: partial characters (as U+FFFD) and a
//! partial stop string, which can no longer complete. That released tail is still searched for
//! stop strings, so a stop string is never emitted.

use std::sync::Arc;

use tokenizers::Tokenizer;

use super::detok::IncrementalDetokenizer;
use super::stop::{FinishReason, StopConditions, StopMatcher};
use crate::error::{invalid, Result};

/// What one pushed token produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Emitted {
    /// Text to send now (often empty: a partial character or a possible stop string is held).
    pub text: String,
    /// Set on the token that ends the request; later pushes are refused.
    pub finish: Option<FinishReason>,
}

/// The decoding state of one request: its tokens, its text and whether and why it has finished.
#[derive(Clone)]
pub struct RequestDecoder {
    conditions: StopConditions,
    prompt_len: usize,
    detok: IncrementalDetokenizer,
    matcher: StopMatcher,
    token_ids: Vec<u32>,
    text: String,
    finish: Option<FinishReason>,
}

impl RequestDecoder {
    /// A decoder for a request whose prompt has `prompt_len` tokens; special tokens are not rendered.
    /// Refuses conditions that [`StopConditions::validate`] refuses.
    pub fn new(tokenizer: Arc<Tokenizer>, conditions: StopConditions, prompt_len: usize) -> Result<Self> {
        conditions.validate(prompt_len)?;
        let matcher = StopMatcher::new(conditions.stop.clone());
        Ok(Self {
            conditions,
            prompt_len,
            detok: IncrementalDetokenizer::new(tokenizer, true),
            matcher,
            token_ids: Vec::new(),
            text: String::new(),
            finish: None,
        })
    }

    /// Takes the next generated token; fails on an unknown id or once the request has finished.
    pub fn push(&mut self, token: u32) -> Result<Emitted> {
        if let Some(reason) = &self.finish {
            return invalid("token", format!("request already finished ({reason:?}), got token {token}"));
        }
        let is_eos = self.conditions.eos_token_ids.contains(&token);
        let is_stop_token = self.conditions.stop_token_ids.contains(&token);
        let include = self.conditions.include_stop_str_in_output;
        let mut text = String::new();
        let mut finish = None;
        if !is_eos && (!is_stop_token || include) {
            let chunk = self.detok.push(token)?;
            let matched = self.matcher.push(chunk);
            text = matched.text;
            if let Some(stop) = matched.stop {
                if include {
                    text.push_str(&stop);
                }
                finish = Some(FinishReason::StopString(stop));
            }
        }
        self.token_ids.push(token);
        if finish.is_none() {
            finish = self.limit_reached(token, is_eos, is_stop_token);
            if finish.is_some() {
                let tail = self.detok.finish()?;
                let matched = self.matcher.push(tail);
                text.push_str(&matched.text);
                match matched.stop {
                    Some(stop) => {
                        if include {
                            text.push_str(&stop);
                        }
                        finish = Some(FinishReason::StopString(stop))
                    }
                    None => text.push_str(&self.matcher.finish()),
                }
            }
        }
        self.text.push_str(&text);
        self.finish.clone_from(&finish);
        Ok(Emitted { text, finish })
    }

    /// Why the request finished, once it has.
    pub fn finish_reason(&self) -> Option<&FinishReason> {
        self.finish.as_ref()
    }

    /// Every token pushed, eos included.
    pub fn token_ids(&self) -> &[u32] {
        &self.token_ids
    }

    /// All text emitted so far (the concatenation of every [`Emitted::text`]).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The reason this token ends the request with, other than a stop string or token (steps 2, 3 and 5).
    fn limit_reached(&self, token: u32, is_eos: bool, is_stop_token: bool) -> Option<FinishReason> {
        let generated = self.token_ids.len();
        if is_eos && !self.conditions.ignore_eos {
            Some(FinishReason::Eos)
        } else if is_stop_token {
            Some(FinishReason::StopToken(token))
        } else if generated >= self.conditions.max_tokens {
            Some(FinishReason::MaxTokens)
        } else if self.prompt_len + generated >= self.conditions.max_model_len {
            Some(FinishReason::ModelLength)
        } else {
            None
        }
    }
}
