//! Incremental detokenisation: token ids in one at a time, text out that never ends in half a character.
//!
//! A byte-level BPE token may carry only part of a UTF-8 character (a Chinese character or an
//! emoji is often spread over two or three tokens), and decoding such a token alone yields U+FFFD.
//! So the decoder keeps two offsets into the ids: `prefix` (where the window it re-decodes starts)
//! and `read` (where the text already emitted ends). Each push decodes `ids[prefix..read]` and
//! `ids[prefix..]`; if the second is longer and does not end in U+FFFD, the difference is new, whole
//! text: it is emitted and the window slides (`prefix = read`, `read = len`). Otherwise nothing is
//! emitted and the ids wait for the rest of their character. Re-decoding from `prefix` rather than
//! from `read` keeps context that some decoders use at a token's start (a leading-space rule).

use std::sync::Arc;

use tokenizers::Tokenizer;

use crate::error::{Error, Result};

/// The replacement character a lossy UTF-8 decode puts where a character is incomplete.
const REPLACEMENT: char = '\u{FFFD}';

/// Streams the text of a growing sequence of token ids.
#[derive(Clone)]
pub struct IncrementalDetokenizer {
    tokenizer: Arc<Tokenizer>,
    skip_special_tokens: bool,
    ids: Vec<u32>,
    prefix: usize,
    read: usize,
}

impl IncrementalDetokenizer {
    /// An empty stream; `skip_special_tokens` drops tokens the tokenizer marks special (as
    /// `Tokenizer::decode` does).
    pub fn new(tokenizer: Arc<Tokenizer>, skip_special_tokens: bool) -> Self {
        Self { tokenizer, skip_special_tokens, ids: Vec::new(), prefix: 0, read: 0 }
    }

    /// Every id pushed so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// Appends `id` and returns the text it completes: empty while a character is still partial.
    /// An id the tokenizer does not know adds no text: a model's vocabulary is often padded past
    /// its tokenizer's (Qwen3's 151,936 logits rows over 151,669 ids), and a sampled padding id is
    /// the model's output all the same, kept in the ids, not an error that would end the request.
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.ids.push(id);
        let done = self.decode(self.prefix..self.read)?;
        let all = self.decode(self.prefix..self.ids.len())?;
        if all.len() > done.len() && !all.ends_with(REPLACEMENT) {
            let new = new_suffix(&all, &done);
            self.prefix = self.read;
            self.read = self.ids.len();
            Ok(new)
        } else {
            Ok(String::new())
        }
    }

    /// Releases the text of ids still waiting (a character that never completed decodes to U+FFFD).
    pub fn finish(&mut self) -> Result<String> {
        let done = self.decode(self.prefix..self.read)?;
        let all = self.decode(self.prefix..self.ids.len())?;
        self.prefix = self.read;
        self.read = self.ids.len();
        Ok(new_suffix(&all, &done))
    }

    fn decode(&self, range: std::ops::Range<usize>) -> Result<String> {
        self.tokenizer.decode(&self.ids[range], self.skip_special_tokens).map_err(|e| Error::Tokenizer(e.to_string()))
    }
}

/// The text `all` adds after `done`. A decoder that rewrites its window's start (so `all` does not
/// begin with `done`) still yields whole characters: the cut is moved back to a boundary.
fn new_suffix(all: &str, done: &str) -> String {
    match all.strip_prefix(done) {
        Some(rest) => rest.to_string(),
        None => {
            let mut cut = done.len().min(all.len());
            while !all.is_char_boundary(cut) {
                cut -= 1;
            }
            all[cut..].to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_suffix_takes_the_tail_after_the_emitted_text() {
        assert_eq!(new_suffix("hello world", "hello"), " world");
        assert_eq!(new_suffix("你好", "你"), "好");
        // A rewritten start: cut at the old length, moved back onto a character boundary.
        assert_eq!(new_suffix("é好x", "ab"), "好x");
        assert_eq!(new_suffix("ab", "abc"), "");
    }
}
