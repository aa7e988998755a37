//! Guided decoding: the output's text held to a format (vLLM's `guided_choice`, OpenAI's
//! `response_format: {"type": "json_object"}`) by masking, before each draw, every token whose
//! bytes could not continue it.
//!
//! The output is its tokens' bytes under the tokenizer's byte-level decoder ([`ByteTable`]; a
//! tokenizer without one cannot be guided). Before each draw:
//! - a token that is not one of the request's end ids is allowed when it has bytes (special and
//!   unknown ids have none) and the output followed by them can still become the format;
//! - an end id (eos, a `stop_token_ids` entry) is allowed exactly when the output already is the
//!   format, so a guided output never ends incomplete by its own choice (only `max_tokens` or the
//!   model's length can cut it);
//! - should nothing be allowed (a tokenizer without single-byte tokens), the end ids are, so that
//!   the request ends rather than fails.
//!
//! Every other token's logit becomes `-inf`, after SPEC 5's steps 1 to 3 and before the draw; a
//! step that leaves a logit finite cannot make an allowed one `-inf`, so the row keeps a finite
//! logit ([`super::processors::LogitsProcessors::validate`] refuses `min_tokens` with a guide,
//! which would mask the end ids the guide leaves alone).
//!
//! The mask is made on the host (a guided request draws there, as one with processors does). On
//! Qwen3's vocabulary, here (release build, one core): a choice list finds its tokens by their
//! bytes, 0.18 ms a draw for 256 choices (a walk over the vocabulary took 107 ms); JSON tests
//! every token's bytes against the state, 5 ms for a state met first, then 0.3 ms while the
//! guide keeps that state's mask (inside a string the state stays put for many tokens).

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use super::byte_table::ByteTable;
use super::json_bytes::JsonObject;
use crate::error::{invalid, Result};

/// Whitespace bytes in a row a guided JSON object may hold ([`JsonObject`]: a sampled model
/// pads wherever whitespace is free).
pub const JSON_WHITESPACE: u8 = 1;
/// Choices a `Choice` format may list, at most.
pub const MAX_CHOICES: usize = 256;
/// Bytes of one choice, at most.
pub const MAX_CHOICE_BYTES: usize = 1024;

/// What a guided request's output must be.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutputFormat {
    /// Exactly one of these strings (vLLM's `guided_choice`): non-empty, distinct.
    Choice(Vec<String>),
    /// One JSON object ([`JsonObject`]'s bounds, at most [`JSON_WHITESPACE`] whitespace bytes in
    /// a row).
    JsonObject,
}

impl OutputFormat {
    /// The request field a refusal of this format names.
    pub fn field(&self) -> &'static str {
        match self {
            OutputFormat::Choice(_) => "guided_choice",
            OutputFormat::JsonObject => "response_format",
        }
    }

    /// Checks the format's own rules, naming its field.
    pub fn validate(&self) -> Result<()> {
        let OutputFormat::Choice(choices) = self else { return Ok(()) };
        if choices.is_empty() || choices.len() > MAX_CHOICES {
            return invalid(self.field(), format!("must list 1 to {MAX_CHOICES} strings, got {}", choices.len()));
        }
        for (i, c) in choices.iter().enumerate() {
            if c.is_empty() || c.len() > MAX_CHOICE_BYTES {
                return invalid(
                    self.field(),
                    format!("each choice must have 1 to {MAX_CHOICE_BYTES} bytes, got {} at {i}", c.len()),
                );
            }
            if choices[..i].contains(c) {
                return invalid(self.field(), format!("choice {c:?} is listed twice"));
            }
        }
        Ok(())
    }
}

/// Where a guided request's output stands.
#[derive(Clone, PartialEq, Eq)]
enum Progress {
    /// The output's bytes so far, and the choices they still begin.
    Choice {
        choices: Vec<Vec<u8>>,
        output: Vec<u8>,
    },
    Json(JsonObject),
}

/// A request's format, followed as its tokens come.
pub struct Guide {
    table: Arc<ByteTable>,
    progress: Progress,
    /// The ids a JSON state allows (one bit an id of the table), for the states met last: an
    /// object's output stays in a few states for many tokens (inside a string, between values),
    /// and testing the vocabulary anew took 4.4 ms a draw on Qwen3's inside a string.
    json_masks: Mutex<Vec<(JsonObject, Arc<[u64]>)>>,
}

/// JSON states whose masks a guide keeps.
const JSON_MASKS_KEPT: usize = 16;

impl Clone for Guide {
    fn clone(&self) -> Self {
        let masks = self.json_masks.lock().unwrap_or_else(PoisonError::into_inner).clone();
        Self { table: self.table.clone(), progress: self.progress.clone(), json_masks: Mutex::new(masks) }
    }
}

impl PartialEq for Guide {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.table, &other.table) && self.progress == other.progress
    }
}

impl fmt::Debug for Guide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.progress {
            Progress::Choice { choices, output } => f
                .debug_struct("Guide")
                .field("choices", &choices.len())
                .field("output", &String::from_utf8_lossy(output))
                .finish(),
            Progress::Json(j) => f.debug_tuple("Guide").field(j).finish(),
        }
    }
}

impl Guide {
    /// The guide of `format` over `table`'s tokens, nothing generated yet.
    pub fn new(format: &OutputFormat, table: Arc<ByteTable>) -> Self {
        let progress = match format {
            OutputFormat::Choice(choices) => Progress::Choice {
                choices: choices.iter().map(|c| c.as_bytes().to_vec()).collect(),
                output: Vec::new(),
            },
            OutputFormat::JsonObject => Progress::Json(JsonObject::new(JSON_WHITESPACE)),
        };
        Self { table, progress, json_masks: Mutex::new(Vec::new()) }
    }

    /// Records a generated token (its bytes; an end id's are none).
    pub fn push(&mut self, token: u32) {
        let bytes = self.table.bytes(token, true);
        match &mut self.progress {
            Progress::Choice { choices, output } => {
                output.extend_from_slice(bytes);
                choices.retain(|c| c.starts_with(output));
            }
            Progress::Json(j) => {
                // A token the mask allowed keeps it whole; one it did not (a forced draw) ends the
                // guidance with nothing allowed but the end ids.
                if !j.feed(bytes) {
                    self.progress = Progress::Choice { choices: Vec::new(), output: Vec::new() };
                }
            }
        }
    }

    /// Whether the output already is the format.
    pub fn complete(&self) -> bool {
        match &self.progress {
            Progress::Choice { choices, output } => choices.iter().any(|c| c.len() == output.len()),
            Progress::Json(j) => j.complete(),
        }
    }

    /// Sets every token of `row` the module docs do not allow to `-inf`; `end_ids` are the ids
    /// that end the request.
    pub fn mask(&self, row: &mut [f32], end_ids: &[u32]) {
        let complete = self.complete();
        let any = match &self.progress {
            Progress::Choice { choices, output } => self.mask_choices(row, end_ids, choices, output.len(), complete),
            Progress::Json(j) => {
                let bits = self.json_mask(j);
                let mut any = false;
                for (id, l) in row.iter_mut().enumerate() {
                    let allowed = match end_ids.contains(&(id as u32)) {
                        true => complete,
                        false => bits.get(id / 64).is_some_and(|w| w >> (id % 64) & 1 == 1),
                    };
                    any |= allowed;
                    if !allowed {
                        *l = f32::NEG_INFINITY;
                    }
                }
                any
            }
        };
        if !any {
            // Masked above, and none of them is NaN: the step's own values are gone, so the end
            // ids get an equal logit each.
            for &id in end_ids {
                if let Some(l) = row.get_mut(id as usize) {
                    *l = 0.0;
                }
            }
        }
    }

    /// The choices' mask: the tokens whose bytes begin what some choice has left after the
    /// output's `at` bytes, found by their bytes (a choice's prefixes, no walk over the
    /// vocabulary), and the end ids if `complete`. Whether any token is left.
    fn mask_choices(&self, row: &mut [f32], end_ids: &[u32], choices: &[Vec<u8>], at: usize, complete: bool) -> bool {
        let mut kept: Vec<(usize, f32)> = Vec::new();
        let mut keep = |id: u32| {
            if let Some(&l) = row.get(id as usize) {
                kept.push((id as usize, l));
            }
        };
        for rest in choices.iter().map(|c| &c[at..]) {
            for k in 1..=rest.len().min(self.table.longest()) {
                self.table
                    .ids_with_bytes(&rest[..k])
                    .iter()
                    .filter(|id| !end_ids.contains(id))
                    .for_each(|&id| keep(id));
            }
        }
        if complete {
            end_ids.iter().for_each(|&id| keep(id));
        }
        row.fill(f32::NEG_INFINITY);
        for &(id, l) in &kept {
            row[id] = l;
        }
        !kept.is_empty()
    }

    /// The ids of the table that `j` allows (those with bytes it can take), one bit each:
    /// kept from an earlier draw in the same state, else tested anew and kept.
    fn json_mask(&self, j: &JsonObject) -> Arc<[u64]> {
        let mut masks = self.json_masks.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, bits)) = masks.iter().find(|(state, _)| state == j) {
            return bits.clone();
        }
        let n = self.table.len();
        let mut bits = vec![0u64; n.div_ceil(64)];
        for id in 0..n {
            let bytes = self.table.bytes(id as u32, true);
            if !bytes.is_empty() && j.clone().feed(bytes) {
                bits[id / 64] |= 1 << (id % 64);
            }
        }
        let bits: Arc<[u64]> = bits.into();
        if masks.len() == JSON_MASKS_KEPT {
            masks.remove(0);
        }
        masks.push((*j, bits.clone()));
        bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::test_tokenizers;

    /// The constructed byte-level tokenizer's table, its number of ids and its special `<s>` (the
    /// tests' end id).
    fn table() -> (Arc<ByteTable>, usize, u32) {
        let tokenizer = test_tokenizers::constructed();
        let vocab = tokenizer.get_vocab_size(true);
        let eos = tokenizer.token_to_id("<s>").expect("<s> is added");
        (Arc::new(ByteTable::build(&tokenizer).expect("a byte-level tokenizer")), vocab, eos)
    }

    /// The ids `mask` leaves finite.
    fn allowed(g: &Guide, vocab: usize, ends: &[u32]) -> Vec<u32> {
        let mut row = vec![0.5f32; vocab];
        g.mask(&mut row, ends);
        (0..vocab as u32).filter(|&i| row[i as usize].is_finite()).collect()
    }

    fn id_of(t: &ByteTable, vocab: usize, bytes: &[u8]) -> u32 {
        (0..vocab as u32).find(|&i| t.bytes(i, true) == bytes).unwrap_or_else(|| panic!("no token {bytes:?}"))
    }

    #[test]
    fn choices_allow_their_prefixes_and_end_once_whole() {
        let (t, vocab, eos) = table();
        let format = OutputFormat::Choice(vec!["yes".into(), "yes!".into(), "no".into()]);
        let mut g = Guide::new(&format, t.clone());
        let first: Vec<Vec<u8>> = allowed(&g, vocab, &[eos]).iter().map(|&i| t.bytes(i, true).to_vec()).collect();
        assert!(first.iter().all(|b| b"yes!".starts_with(b) || b"no".starts_with(b)), "{first:?}");
        assert!(first.contains(&b"y".to_vec()) && first.contains(&b"n".to_vec()));
        for b in [&b"y"[..], b"e", b"s"] {
            assert!(!g.complete());
            g.push(id_of(&t, vocab, b));
        }
        // "yes" is whole and "yes!" goes on: both the end and "!" are allowed, nothing else.
        let mut want = vec![id_of(&t, vocab, b"!"), eos];
        want.sort();
        assert_eq!(allowed(&g, vocab, &[eos]), want);
        g.push(id_of(&t, vocab, b"!"));
        assert_eq!(allowed(&g, vocab, &[eos]), vec![eos]);
    }

    #[test]
    fn json_allows_what_continues_an_object_and_ends_when_it_closes() {
        let (t, vocab, eos) = table();
        let mut g = Guide::new(&OutputFormat::JsonObject, t.clone());
        // The object opens at once: "{" and the constructed tokenizer's tokens that begin with it.
        let first = allowed(&g, vocab, &[eos]);
        assert!(first.iter().all(|&i| t.bytes(i, true).starts_with(b"{")), "{first:?}");
        assert!(first.contains(&id_of(&t, vocab, b"{")) && !first.contains(&eos));
        for b in [&b"{"[..], b"\"", b"a", b"\"", b":", b" ", b"1", b"}"] {
            assert!(!g.complete());
            g.push(id_of(&t, vocab, b));
        }
        assert!(g.complete());
        assert_eq!(allowed(&g, vocab, &[eos]), vec![eos], "nothing after the object but the end");
    }

    #[test]
    fn nothing_allowed_leaves_the_end_ids() {
        let (t, vocab, _) = table();
        let mut g = Guide::new(&OutputFormat::JsonObject, t.clone());
        g.push(id_of(&t, vocab, b"x"));
        assert_eq!(allowed(&g, vocab, &[3, 5]), vec![3, 5]);
    }

    /// The module docs' rule, token by token: what `mask` must leave finite.
    fn by_definition(g: &Guide, vocab: usize, ends: &[u32]) -> Vec<u32> {
        let continues = |bytes: &[u8]| match &g.progress {
            Progress::Choice { choices, output } => choices.iter().any(|c| c[output.len()..].starts_with(bytes)),
            Progress::Json(j) => j.clone().feed(bytes),
        };
        let allowed: Vec<u32> = (0..vocab as u32)
            .filter(|id| match ends.contains(id) {
                true => g.complete(),
                false => {
                    let b = g.table.bytes(*id, true);
                    !b.is_empty() && continues(b)
                }
            })
            .collect();
        if allowed.is_empty() {
            ends.to_vec()
        } else {
            allowed
        }
    }

    proptest::proptest! {
        /// Along random paths of allowed tokens, the mask is the definition's, for choices that
        /// share prefixes and for JSON (its masks kept from earlier states included).
        #[test]
        fn the_mask_is_the_definition_along_any_path(
            choices in proptest::collection::btree_set("[ab {}\":1]{1,6}", 1..5),
            json in proptest::bool::ANY,
            picks in proptest::collection::vec(0usize..1000, 0..12),
        ) {
            let (t, vocab, eos) = table();
            let format = match json {
                true => OutputFormat::JsonObject,
                false => OutputFormat::Choice(choices.into_iter().collect()),
            };
            let mut g = Guide::new(&format, t);
            for pick in picks {
                let want = by_definition(&g, vocab, &[eos]);
                proptest::prop_assert_eq!(allowed(&g, vocab, &[eos]), want.clone());
                let token = want[pick % want.len()];
                if token == eos {
                    break;
                }
                g.push(token);
            }
        }
    }

    #[test]
    fn choice_lists_are_checked() {
        let c = |v: &[&str]| OutputFormat::Choice(v.iter().map(|s| s.to_string()).collect()).validate();
        assert!(c(&["a", "b"]).is_ok());
        for (bad, needle) in [(vec![], "got 0"), (vec![""], "got 0 at 0"), (vec!["a", "a"], "twice")] {
            let e = c(&bad).unwrap_err().to_string();
            assert!(e.contains("guided_choice") && e.contains(needle), "{e}");
        }
        assert!(OutputFormat::JsonObject.validate().is_ok());
    }
}
