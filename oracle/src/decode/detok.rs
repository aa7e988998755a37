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
//!
//! Decoding through the tokenizer costs two calls per token (about 0.5 us a push with Qwen3's),
//! the largest host cost of a decode step at a large batch. Under a byte-level decoder the decode
//! of any ids is the lossy UTF-8 decode of their bytes from a `ByteTable`, so the window is kept
//! as bytes and decoded with `String::from_utf8_lossy` (about 50 ns a push): the same algorithm
//! on the same text, and no allocation to decode a window of valid UTF-8. Other tokenizers keep
//! the ids and call `decode`.
//!
//! The window is kept although, as long as every emitted window ends on a whole character, the
//! emitted text is just the lossy decode of the bytes since the last emission: `finish` may
//! emit a window that ends inside a character, and the ids pushed after it complete that
//! character in the re-decoded window, which only the window itself reproduces.

use std::borrow::Cow;
use std::sync::Arc;

use tokenizers::Tokenizer;

use super::byte_table::ByteTable;
use crate::error::{Error, Result};

/// The replacement character a lossy UTF-8 decode puts where a character is incomplete.
const REPLACEMENT: char = '\u{FFFD}';

/// Streams the text of a growing sequence of token ids.
#[derive(Clone)]
pub struct IncrementalDetokenizer {
    skip_special_tokens: bool,
    ids: Vec<u32>,
    window: Window,
}

/// What the next push re-decodes, in the form the tokenizer allows.
#[derive(Clone)]
enum Window {
    /// Any tokenizer: `ids[prefix..]`, decoded by the tokenizer; `ids[prefix..read]` is emitted.
    Ids { tokenizer: Arc<Tokenizer>, prefix: usize, read: usize },
    /// A byte-level tokenizer: the bytes of `ids[prefix..]` from its table; `bytes[..read]` is emitted.
    Bytes { table: Arc<ByteTable>, bytes: Vec<u8>, read: usize },
}

impl IncrementalDetokenizer {
    /// An empty stream; `skip_special_tokens` drops tokens the tokenizer marks special (as
    /// `Tokenizer::decode` does).
    pub fn new(tokenizer: Arc<Tokenizer>, skip_special_tokens: bool) -> Self {
        let window = match ByteTable::shared(&tokenizer) {
            Some(table) => Window::Bytes { table, bytes: Vec::new(), read: 0 },
            None => Window::Ids { tokenizer, prefix: 0, read: 0 },
        };
        Self { skip_special_tokens, ids: Vec::new(), window }
    }

    /// Builds now what the first stream of `tokenizer` would otherwise build at its first push
    /// (a byte-level tokenizer's table: about 80 ms for Qwen3's), so that no request waits for it.
    pub fn prepare(tokenizer: &Arc<Tokenizer>) {
        ByteTable::shared(tokenizer);
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
        if let Window::Bytes { table, bytes, .. } = &mut self.window {
            bytes.extend_from_slice(table.bytes(id, self.skip_special_tokens));
        }
        let (done, all) = self.window.decode(&self.ids, self.skip_special_tokens)?;
        if all.len() > done.len() && !all.ends_with(REPLACEMENT) {
            let new = new_suffix(&all, &done);
            self.window.slide(self.ids.len());
            Ok(new)
        } else {
            Ok(String::new())
        }
    }

    /// Releases the text of ids still waiting (a character that never completed decodes to U+FFFD).
    pub fn finish(&mut self) -> Result<String> {
        let (done, all) = self.window.decode(&self.ids, self.skip_special_tokens)?;
        let new = new_suffix(&all, &done);
        self.window.slide(self.ids.len());
        Ok(new)
    }
}

impl Window {
    /// The text already emitted and the whole window's text, both decoded from `prefix`.
    fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<(Cow<'_, str>, Cow<'_, str>)> {
        match self {
            Window::Ids { tokenizer, prefix, read } => {
                let decode = |ids: &[u32]| {
                    tokenizer
                        .decode(ids, skip_special_tokens)
                        .map(Cow::Owned)
                        .map_err(|e| Error::Tokenizer(e.to_string()))
                };
                Ok((decode(&ids[*prefix..*read])?, decode(&ids[*prefix..])?))
            }
            Window::Bytes { bytes, read, .. } => {
                Ok((String::from_utf8_lossy(&bytes[..*read]), String::from_utf8_lossy(bytes)))
            }
        }
    }

    /// Marks the window emitted up to `len` ids: it now starts where the emitted text ended.
    fn slide(&mut self, len: usize) {
        match self {
            Window::Ids { prefix, read, .. } => {
                *prefix = *read;
                *read = len;
            }
            Window::Bytes { bytes, read, .. } => {
                bytes.drain(..*read);
                *read = bytes.len();
            }
        }
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
    use crate::decode::test_tokenizers::{constructed, qwen3, shakespeare};
    use proptest::prelude::*;
    use proptest::test_runner::TestCaseResult;

    /// Text whose characters take two to four bytes and often several tokens each, and one
    /// special token spelt out (which encodes as its id).
    const TEXTS: [&str; 6] = [
        "你好，世界！今天的天气怎么样？我们去公园散步吧。",
        "👩‍👩‍👧‍👦 family, 🇯🇵 flag, 🤖🦀✨ and 🧑🏽‍🚀 astronaut",
        "𠀀𠀁𪚥 rare CJK, 鬱 and 龘 dense ones, then ASCII",
        "日本語のテキスト、カタカナとひらがな。<|im_end|>",
        "Ünïcödé wïth çombining e\u{301} and ﬁ ligatures",
        "mixed 中文 and English 词语 with spaces  and\n\nnewlines",
    ];

    /// The path every tokenizer can take, whatever [`IncrementalDetokenizer::new`] picks.
    fn decoding(tokenizer: Arc<Tokenizer>, skip_special_tokens: bool) -> IncrementalDetokenizer {
        IncrementalDetokenizer {
            skip_special_tokens,
            ids: Vec::new(),
            window: Window::Ids { tokenizer, prefix: 0, read: 0 },
        }
    }

    /// One step of a stream: `None` finishes it (pushing on after `finish` is allowed).
    fn steps(tokenizer: &Tokenizer, raw: &[(u8, u32, u32)]) -> Vec<Option<u32>> {
        let encoded: Vec<Vec<u32>> =
            TEXTS.iter().map(|t| tokenizer.encode(*t, false).unwrap().get_ids().to_vec()).collect();
        let num_ids = tokenizer.get_vocab(true).into_values().max().unwrap() + 1;
        let mut added: Vec<u32> = tokenizer.get_added_tokens_decoder().into_keys().collect();
        added.sort();
        let mut out = Vec::new();
        for &(kind, x, y) in raw {
            match kind {
                0..=4 => {
                    let ids = &encoded[x as usize % encoded.len()];
                    let start = y as usize % ids.len();
                    out.extend(ids[start..ids.len().min(start + 1 + x as usize % 8)].iter().map(|&id| Some(id)));
                }
                5 | 6 => out.push(Some(x % num_ids)),
                7 => out.push(Some(added[x as usize % added.len()])),
                8 => out.push(Some(if x % 2 == 0 { 151_900 } else { num_ids + y % 300 })),
                _ => out.push(None),
            }
        }
        out
    }

    /// Streams `steps` through the tokenizer's path and the byte table's, comparing every output.
    fn same_text(tokenizer: Arc<Tokenizer>, steps: &[Option<u32>], skip: bool) -> TestCaseResult {
        let mut slow = decoding(tokenizer.clone(), skip);
        let mut fast = IncrementalDetokenizer::new(tokenizer, skip);
        prop_assert!(matches!(fast.window, Window::Bytes { .. }), "a byte-level tokenizer decodes through its table");
        for (i, step) in steps.iter().enumerate() {
            let (want, got) = match step {
                Some(id) => (slow.push(*id).unwrap(), fast.push(*id).unwrap()),
                None => (slow.finish().unwrap(), fast.finish().unwrap()),
            };
            prop_assert_eq!(want, got, "step {} ({:?}) of ids {:?}", i, step, slow.ids());
        }
        prop_assert_eq!(slow.finish().unwrap(), fast.finish().unwrap(), "finish of ids {:?}", slow.ids());
        prop_assert_eq!(slow.ids(), fast.ids());
        Ok(())
    }

    fn raw_steps() -> impl Strategy<Value = Vec<(u8, u32, u32)>> {
        prop::collection::vec((0u8..10, any::<u32>(), any::<u32>()), 0..40)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn qwen3_streams_the_same_text_through_its_table(raw in raw_steps(), skip in any::<bool>()) {
            let tokenizer = qwen3();
            same_text(tokenizer.clone(), &steps(&tokenizer, &raw), skip)?;
        }

        #[test]
        fn small_tokenizers_stream_the_same_text_through_their_tables(raw in raw_steps(), skip in any::<bool>()) {
            for tokenizer in [shakespeare(), Arc::new(constructed())] {
                same_text(tokenizer.clone(), &steps(&tokenizer, &raw), skip)?;
            }
        }
    }

    #[test]
    fn new_suffix_takes_the_tail_after_the_emitted_text() {
        assert_eq!(new_suffix("hello world", "hello"), " world");
        assert_eq!(new_suffix("你好", "你"), "好");
        // A rewritten start: cut at the old length, moved back onto a character boundary.
        assert_eq!(new_suffix("é好x", "ab"), "好x");
        assert_eq!(new_suffix("ab", "abc"), "");
    }

    #[test]
    fn a_character_split_by_finish_streams_the_same_text() {
        let tokenizer = Arc::new(constructed());
        let ids = tokenizer.encode("好好", false).unwrap().get_ids().to_vec();
        assert_eq!(ids.len(), 6, "one byte symbol per byte");
        // finish releases "好" and a U+FFFD for the second's first byte; its other two bytes then
        // complete it in the re-decoded window, no longer than that U+FFFD, so nothing follows.
        let steps: Vec<Option<u32>> =
            ids[..4].iter().map(|&id| Some(id)).chain([None]).chain(ids[4..].iter().map(|&id| Some(id))).collect();
        for skip in [false, true] {
            same_text(tokenizer.clone(), &steps, skip).unwrap();
        }
    }

    #[test]
    fn other_tokenizers_decode_through_the_tokenizer() {
        for (name, tokenizer) in crate::decode::test_tokenizers::refused() {
            let d = IncrementalDetokenizer::new(Arc::new(tokenizer), true);
            assert!(matches!(d.window, Window::Ids { .. }), "{name} took the byte table");
        }
    }
}
