//! The logprobs objects of OpenAI's two routes, built from the engine's [`TokenLogprobs`] (the raw
//! row's log-softmax, SPEC section 5):
//! - `/v1/completions`: `{tokens, token_logprobs, top_logprobs, text_offset}`, one entry per
//!   position; under `echo` the prompt's tokens come first, the first with `null` logprob and top;
//!   each top map holds the `logprobs` likeliest tokens and the chosen one (as vLLM's does);
//! - `/v1/chat/completions`: `{content: [{token, logprob, bytes, top_logprobs: [{token, logprob,
//!   bytes}]}]}`, with exactly `top_logprobs` alternatives.
//!
//! A token's text is its id decoded alone (special tokens kept), as vLLM reports it; `bytes` are
//! that text's UTF-8 bytes. `text_offset` counts characters (Unicode scalar values) of the token
//! texts before each position. A `-inf` logprob, which JSON cannot hold, is reported as
//! [`MIN_LOGPROB`], vLLM's floor.

use std::collections::BTreeMap;

use model::engine::TokenLogprobs;
use serde::Serialize;
use tokenizers::Tokenizer;

/// The smallest logprob reported.
pub const MIN_LOGPROB: f64 = -9999.0;

fn reported(logprob: f64) -> f64 {
    // `max` also turns a NaN into the floor rather than into invalid JSON.
    logprob.max(MIN_LOGPROB)
}

/// Token `id` decoded alone.
pub fn token_text(tokenizer: &Tokenizer, id: u32) -> String {
    tokenizer.decode(&[id], false).unwrap_or_default()
}

/// `/v1/completions`' `logprobs`: one entry per position in each list.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CompletionLogprobs {
    /// Each position's token text.
    pub tokens: Vec<String>,
    /// Each token's logprob; `null` for the first prompt token under `echo`.
    pub token_logprobs: Vec<Option<f64>>,
    /// The likeliest tokens' logprobs by text, with the chosen token's; `null` where the logprob is.
    pub top_logprobs: Vec<Option<BTreeMap<String, f64>>>,
    /// Each token's character offset in the choice's text.
    pub text_offset: Vec<usize>,
}

impl CompletionLogprobs {
    /// Appends `token` at character `offset` with its logprobs `lp` (`None`: the first prompt
    /// token); returns the offset after it.
    pub fn push(&mut self, tokenizer: &Tokenizer, token: u32, lp: Option<&TokenLogprobs>, offset: usize) -> usize {
        let text = token_text(tokenizer, token);
        let next = offset + text.chars().count();
        self.tokens.push(text);
        self.text_offset.push(offset);
        self.token_logprobs.push(lp.map(|l| reported(l.logprob)));
        self.top_logprobs.push(lp.map(|l| {
            let mut top: BTreeMap<String, f64> =
                l.top.iter().map(|&(id, p)| (token_text(tokenizer, id), reported(p))).collect();
            top.insert(token_text(tokenizer, l.token), reported(l.logprob));
            top
        }));
        next
    }
}

/// `/v1/chat/completions`' `logprobs`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ChatLogprobs {
    /// One per generated token.
    pub content: Vec<ChatTokenLogprob>,
}

/// One generated token of a chat choice.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChatTokenLogprob {
    /// Its text.
    pub token: String,
    /// Its logprob.
    pub logprob: f64,
    /// Its text's UTF-8 bytes.
    pub bytes: Vec<u8>,
    /// The `top_logprobs` likeliest tokens, most likely first.
    pub top_logprobs: Vec<TopLogprob>,
}

/// One alternative of a chat token.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TopLogprob {
    /// Its text.
    pub token: String,
    /// Its logprob.
    pub logprob: f64,
    /// Its text's UTF-8 bytes.
    pub bytes: Vec<u8>,
}

impl TopLogprob {
    fn new(tokenizer: &Tokenizer, id: u32, logprob: f64) -> Self {
        let token = token_text(tokenizer, id);
        Self { bytes: token.as_bytes().to_vec(), token, logprob: reported(logprob) }
    }
}

impl ChatTokenLogprob {
    /// The entry of a generated token.
    pub fn new(tokenizer: &Tokenizer, lp: &TokenLogprobs) -> Self {
        let TopLogprob { token, logprob, bytes } = TopLogprob::new(tokenizer, lp.token, lp.logprob);
        let top_logprobs = lp.top.iter().map(|&(id, p)| TopLogprob::new(tokenizer, id, p)).collect();
        Self { token, logprob, bytes, top_logprobs }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, to_value};

    fn tokenizer() -> Tokenizer {
        model::byte_tokenizer::build().unwrap()
    }

    fn lp(token: u32, logprob: f64, top: &[(u32, f64)]) -> TokenLogprobs {
        TokenLogprobs { token, logprob, top: top.to_vec() }
    }

    #[test]
    fn completion_logprobs_have_openais_four_lists() {
        let t = tokenizer();
        let (a, b) = (u32::from(b'a'), u32::from(b'b'));
        let mut l = CompletionLogprobs::default();
        let next = l.push(&t, a, None, 0);
        let next = l.push(&t, b, Some(&lp(b, -0.5, &[(a, -0.25)])), next);
        assert_eq!(next, 2);
        assert_eq!(
            to_value(&l).unwrap(),
            json!({
                "tokens": ["a", "b"],
                "token_logprobs": [null, -0.5],
                "top_logprobs": [null, {"a": -0.25, "b": -0.5}],
                "text_offset": [0, 1],
            })
        );
    }

    #[test]
    fn chat_logprobs_carry_bytes_and_exactly_the_top_asked() {
        let t = tokenizer();
        let e = ChatTokenLogprob::new(&t, &lp(u32::from(b'h'), f64::NEG_INFINITY, &[(u32::from(b'i'), -0.1)]));
        assert_eq!(
            to_value(ChatLogprobs { content: vec![e] }).unwrap(),
            json!({"content": [{
                "token": "h", "logprob": MIN_LOGPROB, "bytes": [104],
                "top_logprobs": [{"token": "i", "logprob": -0.1, "bytes": [105]}],
            }]})
        );
    }
}
