//! The logprobs objects of OpenAI's two routes, built from the engine's [`TokenLogprobs`] (the raw
//! row's log-softmax, SPEC section 5):
//! - `/v1/completions`: `{tokens, token_logprobs, top_logprobs, text_offset}`, one entry per
//!   position; under `echo` the prompt's tokens come first, the first with `null` logprob and top;
//!   each top map holds the `logprobs` likeliest tokens and the chosen one (as vLLM's does);
//! - `/v1/chat/completions`: `{content: [{token, logprob, bytes, top_logprobs: [{token, logprob,
//!   bytes}]}]}`, with exactly `top_logprobs` alternatives;
//! - vLLM's `prompt_logprobs` (either route): one entry per prompt position, `null` for the first,
//!   then a map from token id to `{logprob, rank, decoded_token}` holding the prompt token and the
//!   `prompt_logprobs` likeliest tokens. `rank` is the place in the row from 1, larger logit first
//!   and ties to the lower id, so the k-th likeliest has rank k.
//!
//! A token's text is its id decoded alone (special tokens kept), as vLLM reports it, so a piece of
//! a multi-byte character shows as U+FFFD; `bytes` are the token's own bytes, as OpenAI defines
//! them (the pieces of a character join into it): for a byte-level BPE tokenizer (GPT-2's byte
//! alphabet, as the shipped tokenizers use) read back from its vocabulary entry, else the text's. `text_offset` counts characters (Unicode scalar values) of the token
//! texts before each position. A `-inf` logprob, which JSON cannot hold, is reported as
//! [`MIN_LOGPROB`], vLLM's floor.

use std::collections::BTreeMap;

use model::engine::TokenLogprobs;
use oracle::decode::logprobs::token_text;
use serde::Serialize;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::Tokenizer;

/// The smallest logprob reported.
pub const MIN_LOGPROB: f64 = -9999.0;

fn reported(logprob: f64) -> f64 {
    // `max` also turns a NaN into the floor rather than into invalid JSON.
    logprob.max(MIN_LOGPROB)
}

/// Token `id`'s own bytes (the module docs).
pub fn token_bytes(tokenizer: &Tokenizer, id: u32) -> Vec<u8> {
    let byte_level = matches!(tokenizer.get_decoder(), Some(DecoderWrapper::ByteLevel(_)));
    let piece = tokenizer.id_to_token(id).filter(|_| byte_level && !is_special(tokenizer, id));
    match piece.and_then(|p| p.chars().map(byte_of).collect::<Option<Vec<u8>>>()) {
        Some(bytes) => bytes,
        None => token_text(tokenizer, id).into_bytes(),
    }
}

fn is_special(tokenizer: &Tokenizer, id: u32) -> bool {
    tokenizer.get_added_tokens_decoder().get(&id).is_some_and(|t| t.special)
}

/// The byte GPT-2's byte-level alphabet writes as `c`: the printable bytes as themselves, the
/// other 68 in order as U+0100 onwards.
fn byte_of(c: char) -> Option<u8> {
    let printable = |b: u32| (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
    let n = c as u32;
    match n {
        0..=0xff if printable(n) => Some(n as u8),
        0x100..=0x143 => (0..=0xffu32).filter(|&b| !printable(b)).nth((n - 0x100) as usize).map(|b| b as u8),
        _ => None,
    }
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
        self.text_offset.push(offset);
        self.token_logprobs.push(lp.map(|l| reported(l.logprob)));
        self.top_logprobs.push(lp.map(|l| {
            let mut top: BTreeMap<String, f64> =
                l.top.iter().map(|&(id, p)| (token_text(tokenizer, id), reported(p))).collect();
            // The chosen token is `token` itself: its text is decoded once, above.
            let chosen = if l.token == token { text.clone() } else { token_text(tokenizer, l.token) };
            top.insert(chosen, reported(l.logprob));
            top
        }));
        self.tokens.push(text);
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
    /// Its bytes.
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
    /// Its bytes.
    pub bytes: Vec<u8>,
}

impl TopLogprob {
    fn new(tokenizer: &Tokenizer, id: u32, logprob: f64) -> Self {
        Self { token: token_text(tokenizer, id), bytes: token_bytes(tokenizer, id), logprob: reported(logprob) }
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

/// vLLM's `Logprob`: one token of a `prompt_logprobs` entry.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankedLogprob {
    /// Its logprob.
    pub logprob: f64,
    /// Its place in the row, from 1.
    pub rank: u32,
    /// Its text.
    pub decoded_token: String,
}

/// vLLM's `prompt_logprobs` of one prompt: per position, `None` for the first, then the prompt
/// token's entry and those of its `top` likeliest tokens, by id.
pub type PromptLogprobs = Vec<Option<BTreeMap<u32, RankedLogprob>>>;

/// The `prompt_logprobs` of a prompt from the engine's scores `lps` (one per position, `None` for
/// the first), keeping the `top` likeliest of each (the engine may have scored more, for `echo`).
pub fn prompt_logprobs(tokenizer: &Tokenizer, lps: &[Option<TokenLogprobs>], top: usize) -> PromptLogprobs {
    let named = |(id, logprob, rank): (u32, f64, u32)| {
        (id, RankedLogprob { logprob: reported(logprob), rank, decoded_token: token_text(tokenizer, id) })
    };
    let asked = |l: &TokenLogprobs| {
        let token = l.token;
        l.ranked().filter(move |&(id, _, rank)| rank as usize <= top || id == token).map(named).collect()
    };
    lps.iter().map(|lp| lp.as_ref().map(asked)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, to_value};

    fn tokenizer() -> Tokenizer {
        model::byte_tokenizer::build().unwrap()
    }

    fn lp(token: u32, logprob: f64, top: &[(u32, f64)]) -> TokenLogprobs {
        let rank = top.iter().position(|t| t.0 == token).map_or(top.len() + 1, |i| i + 1) as u32;
        TokenLogprobs { token, logprob, rank, top: top.to_vec() }
    }

    #[test]
    fn prompt_logprobs_map_ids_to_logprob_rank_and_text_keeping_the_top_asked() {
        let t = tokenizer();
        let (a, b, c) = (u32::from(b'a'), u32::from(b'b'), u32::from(b'c'));
        let scored = [None, Some(lp(b, -2.0, &[(a, -0.5), (c, -1.0)])), Some(lp(a, -0.1, &[(a, -0.1), (c, -3.0)]))];
        assert_eq!(
            to_value(prompt_logprobs(&t, &scored, 1)).unwrap(),
            json!([
                null,
                {
                    a.to_string(): {"logprob": -0.5, "rank": 1, "decoded_token": "a"},
                    b.to_string(): {"logprob": -2.0, "rank": 3, "decoded_token": "b"},
                },
                {a.to_string(): {"logprob": -0.1, "rank": 1, "decoded_token": "a"}},
            ])
        );
        let none_asked = prompt_logprobs(&t, &scored, 0);
        assert_eq!(none_asked[1].as_ref().unwrap().keys().collect::<Vec<_>>(), vec![&b]);
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
    fn bytes_are_the_tokens_own_even_for_a_piece_of_a_character() {
        let t = tokenizer();
        // "é" is the two bytes C3 A9, each a token of its own, each shown alone as U+FFFD.
        for b in [0xc3u8, 0xa9, b' ', b'a', 0x00] {
            assert_eq!(token_bytes(&t, u32::from(b)), vec![b]);
        }
        assert_eq!(token_text(&t, 0xc3), "\u{fffd}");
        let merged = t.encode(" the", false).unwrap().get_ids().to_vec();
        assert_eq!(merged.len(), 1, "\" the\" is one merge of the tiny tokenizer");
        assert_eq!(token_bytes(&t, merged[0]), b" the");
        assert_eq!(token_bytes(&t, model::byte_tokenizer::EOS_ID), model::byte_tokenizer::EOS_TOKEN.as_bytes());
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
