//! When a request stops, and the stop-string matcher that holds back text which may yet become one.
//!
//! A stop string can arrive split over several chunks of text ("ST" then "OP"), so text that could
//! be the start of a stop string is held back until the next chunk proves it is or is not. Held text
//! is always a suffix of what has arrived that is a prefix of some stop string; anything before it
//! can never be part of a match, so it is released at once.
//!
//! Matches are found as if the text arrived one character at a time: the stop string that completes
//! first wins (the earliest end), and of two completing at the same character the longer one (the
//! earlier start). So the output does not depend on how the text was cut into tokens.

use serde::{Deserialize, Serialize};

use crate::error::{invalid, Result};

/// The rules that end one request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopConditions {
    /// Tokens that end the request (the model's `eos_token_id` list); never rendered into text.
    pub eos_token_ids: Vec<u32>,
    /// Strings that end the request; the output stops just before the first one found.
    pub stop: Vec<String>,
    /// The most tokens to generate (eos included), at least 1.
    pub max_tokens: usize,
    /// The model's context length: prompt plus generated tokens may not exceed it.
    pub max_model_len: usize,
    /// Keep generating through eos tokens (benchmarks that need exact output lengths).
    pub ignore_eos: bool,
    /// Further tokens that end the request as eos does (OpenAI's `stop_token_ids`), even under
    /// `ignore_eos`; rendered into text only with `include_stop_str_in_output`.
    #[serde(default)]
    pub stop_token_ids: Vec<u32>,
    /// Keep the matched stop string, or the stop token's text, at the end of the output.
    #[serde(default)]
    pub include_stop_str_in_output: bool,
}

impl StopConditions {
    /// Checks these conditions for a prompt of `prompt_len` tokens, naming the field and the values.
    pub fn validate(&self, prompt_len: usize) -> Result<()> {
        if self.max_tokens == 0 {
            return invalid("max_tokens", "must be >= 1, got 0");
        }
        if let Some(i) = self.stop.iter().position(String::is_empty) {
            return invalid("stop", format!("stop strings must be non-empty, got \"\" at index {i}"));
        }
        if prompt_len >= self.max_model_len {
            return invalid(
                "prompt_len",
                format!("must be < max_model_len = {}, got {prompt_len}", self.max_model_len),
            );
        }
        Ok(())
    }
}

/// Why a request ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FinishReason {
    /// An eos token was generated.
    Eos,
    /// This stop string appeared in the text.
    StopString(String),
    /// This id of `stop_token_ids` was generated.
    StopToken(u32),
    /// `max_tokens` tokens were generated.
    MaxTokens,
    /// Prompt plus generated tokens reached `max_model_len`.
    ModelLength,
}

impl FinishReason {
    /// The OpenAI `finish_reason`: `"stop"` for eos, stop strings and stop tokens, `"length"` for the two limits.
    pub fn as_openai(&self) -> &'static str {
        match self {
            FinishReason::Eos | FinishReason::StopString(_) | FinishReason::StopToken(_) => "stop",
            FinishReason::MaxTokens | FinishReason::ModelLength => "length",
        }
    }
}

/// What the matcher makes of the text so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matched {
    /// Text now safe to emit.
    pub text: String,
    /// The stop string found, if any; `text` then ends just before it and the matcher is spent.
    pub stop: Option<String>,
}

/// Finds stop strings in a stream of text chunks, holding back what may be the start of one.
#[derive(Clone, Debug)]
pub struct StopMatcher {
    stop: Vec<String>,
    held: String,
}

impl StopMatcher {
    /// A matcher for these stop strings (each non-empty, as [`StopConditions::validate`] checks).
    pub fn new(stop: Vec<String>) -> Self {
        Self { stop, held: String::new() }
    }

    /// The text held back so far.
    pub fn held(&self) -> &str {
        &self.held
    }

    /// Appends `chunk`; returns the text that can no longer be part of a stop string, or the text
    /// before the first stop string and that string. Without stop strings nothing is ever held,
    /// and the chunk comes back as it is, not copied.
    pub fn push(&mut self, chunk: impl Into<String>) -> Matched {
        let chunk = chunk.into();
        if self.stop.is_empty() {
            return Matched { text: chunk, stop: None };
        }
        self.held.push_str(&chunk);
        if let Some((start, stop)) = self.first_match() {
            let text = self.held[..start].to_string();
            self.held.clear();
            return Matched { text, stop: Some(stop) };
        }
        let keep_from = self.longest_stop_prefix_suffix();
        let text = self.held[..keep_from].to_string();
        self.held.drain(..keep_from);
        Matched { text, stop: None }
    }

    /// Releases everything still held: the stream has ended, so no stop string can complete.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// The start and the string of the match that ends first (then the longest), if any.
    fn first_match(&self) -> Option<(usize, String)> {
        let mut best: Option<(usize, usize, &String)> = None; // (end, start, stop)
        for s in &self.stop {
            if let Some(start) = self.held.find(s.as_str()) {
                let end = start + s.len();
                let better = match best {
                    None => true,
                    Some((e, st, _)) => end < e || (end == e && start < st),
                };
                if better {
                    best = Some((end, start, s));
                }
            }
        }
        best.map(|(_, start, s)| (start, s.clone()))
    }

    /// The byte offset where the longest suffix of the held text that starts some stop string
    /// begins (the held text's length when there is none).
    fn longest_stop_prefix_suffix(&self) -> usize {
        let h = &self.held;
        let longest_stop = self.stop.iter().map(String::len).max().unwrap_or(0);
        let earliest = h.len().saturating_sub(longest_stop);
        h.char_indices()
            .map(|(i, _)| i)
            .filter(|&i| i >= earliest)
            .find(|&i| self.stop.iter().any(|s| s.starts_with(&h[i..])))
            .unwrap_or(h.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher(stops: &[&str]) -> StopMatcher {
        StopMatcher::new(stops.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn holds_a_possible_start_and_releases_it_when_the_match_fails() {
        let mut m = matcher(&["STOP"]);
        assert_eq!(m.push("go ST").text, "go ");
        assert_eq!(m.held(), "ST");
        assert_eq!(m.push("AY").text, "STAY");
        assert_eq!(m.held(), "");
    }

    #[test]
    fn a_match_across_three_chunks_cuts_before_the_stop_string() {
        let mut m = matcher(&["STOP"]);
        assert_eq!(m.push("a S").text, "a ");
        assert_eq!(m.push("T").text, "");
        let got = m.push("OP and more");
        assert_eq!(got, Matched { text: String::new(), stop: Some("STOP".into()) });
    }

    #[test]
    fn the_stop_string_completing_first_wins_whatever_the_chunking() {
        let stops = ["bc", "abcd", "cd"];
        let text = "xabcdy";
        // Character by character is the definition; every split of the text must agree with it.
        let mut by_char = matcher(&stops);
        let mut want = String::new();
        let mut want_stop = None;
        for c in text.chars() {
            let m = by_char.push(c.to_string());
            want.push_str(&m.text);
            if m.stop.is_some() {
                want_stop = m.stop;
                break;
            }
        }
        assert_eq!((want.as_str(), want_stop.as_deref()), ("xa", Some("bc")));
        for cut in 0..=text.len() {
            let mut m = matcher(&stops);
            let first = m.push(&text[..cut]);
            let (got, stop) = match first.stop {
                Some(s) => (first.text, Some(s)),
                None => {
                    let second = m.push(&text[cut..]);
                    (first.text + &second.text, second.stop)
                }
            };
            assert_eq!((got.as_str(), stop.as_deref()), ("xa", Some("bc")), "cut at {cut}");
        }
    }

    #[test]
    fn equal_ends_prefer_the_longer_stop_string() {
        let mut m = matcher(&["cd", "bcd"]);
        assert_eq!(m.push("abcde").stop.as_deref(), Some("bcd"));
    }

    #[test]
    fn multibyte_holds_stay_on_character_boundaries() {
        let mut m = matcher(&["好的！"]);
        assert_eq!(m.push("你好").text, "你");
        assert_eq!(m.push("的").text, "");
        assert_eq!(m.push("吗").text, "好的吗");
        assert_eq!(m.finish(), "");
    }

    #[test]
    fn without_stop_strings_every_chunk_comes_back_whole() {
        let mut m = matcher(&[]);
        for chunk in ["go", " ST", "OP", "é", ""] {
            assert_eq!(m.push(chunk), Matched { text: chunk.to_string(), stop: None });
            assert_eq!(m.held(), "");
        }
        assert_eq!(m.finish(), "");
    }

    #[test]
    fn finish_releases_the_held_text() {
        let mut m = matcher(&["</s>"]);
        assert_eq!(m.push("end </").text, "end ");
        assert_eq!(m.finish(), "</");
    }

    #[test]
    fn validate_names_each_field() {
        let ok = StopConditions { max_tokens: 4, max_model_len: 16, ..Default::default() };
        ok.validate(15).unwrap();
        let e = StopConditions { max_tokens: 0, ..ok.clone() }.validate(1).unwrap_err().to_string();
        assert!(e.contains("max_tokens") && e.contains("got 0"), "{e}");
        let e =
            StopConditions { stop: vec!["a".into(), String::new()], ..ok.clone() }.validate(1).unwrap_err().to_string();
        assert!(e.contains("stop") && e.contains("index 1"), "{e}");
        let e = ok.validate(16).unwrap_err().to_string();
        assert!(e.contains("prompt_len") && e.contains("16"), "{e}");
    }

    #[test]
    fn openai_reasons() {
        assert_eq!(FinishReason::Eos.as_openai(), "stop");
        assert_eq!(FinishReason::StopString("x".into()).as_openai(), "stop");
        assert_eq!(FinishReason::MaxTokens.as_openai(), "length");
        assert_eq!(FinishReason::ModelLength.as_openai(), "length");
    }
}
