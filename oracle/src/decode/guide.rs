//! Guided decoding: the output's text held to a format (vLLM's `guided_choice` and
//! `guided_regex`, OpenAI's `response_format: {"type": "json_object"}`) by masking, before each
//! draw, every token whose bytes could not continue it.
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
//! bytes, 0.18 ms a draw for 256 choices (a walk over the vocabulary took 107 ms); JSON and a
//! regex test every token's bytes against the state, 3 to 6.5 ms for a state met first, then
//! 0.3 to 0.4 ms while the guide keeps that state's mask (inside a string or a word the state
//! stays put for many tokens).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use regex_automata::dfa::{dense, Automaton, StartKind};
use regex_automata::nfa::thompson;
use regex_automata::util::primitives::StateID;
use regex_automata::util::start;
use regex_automata::{Anchored, MatchKind};

use super::byte_table::ByteTable;
use super::json_bytes::JsonObject;
use crate::error::{invalid, Result};

/// Whitespace bytes in a row a guided JSON object may hold ([`JsonObject`]: a sampled model
/// pads wherever whitespace is free).
pub const JSON_WHITESPACE: u8 = 1;
/// Bytes of a `Regex` format's pattern, at most.
pub const MAX_REGEX_BYTES: usize = 4096;
/// Bytes a `Regex` format's DFA (and its determinisation) may take, at most: a pattern whose
/// automaton would be larger is refused rather than built.
pub const REGEX_DFA_BYTES: usize = 2 << 20;
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
    /// A whole match of this regular expression (vLLM's `guided_regex`; Rust's `regex` syntax,
    /// which Python's `re` shares for the common forms), at most [`MAX_REGEX_BYTES`] long and its
    /// DFA within [`REGEX_DFA_BYTES`].
    Regex(String),
}

impl OutputFormat {
    /// The request field a refusal of this format names.
    pub fn field(&self) -> &'static str {
        match self {
            OutputFormat::Choice(_) => "guided_choice",
            OutputFormat::JsonObject => "response_format",
            OutputFormat::Regex(_) => "guided_regex",
        }
    }

    /// Checks the format's own rules, naming its field.
    /// A regex's length is checked here, its compilation by [`OutputFormat::compiles`] (which
    /// [`Guide::new`] does anyway): `validate` stays cheap.
    pub fn validate(&self) -> Result<()> {
        let choices = match self {
            OutputFormat::JsonObject => return Ok(()),
            OutputFormat::Regex(pattern) => return pattern_fits(pattern),
            OutputFormat::Choice(choices) => choices,
        };
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
    Choice { choices: Vec<Vec<u8>>, output: Vec<u8> },
    /// A format followed byte by byte.
    Walk(Walk),
}

/// The state of a format followed byte by byte, after the output so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Walk {
    Json(JsonObject),
    /// A state of the guide's regex DFA.
    Regex(StateID),
}

impl OutputFormat {
    /// Whether a regex format's pattern compiles within the bounds (the others always do), for a
    /// caller that refuses a request before it reaches the engine: up to about 50 ms for a
    /// pattern near [`REGEX_DFA_BYTES`].
    pub fn compiles(&self) -> Result<()> {
        match self {
            OutputFormat::Regex(pattern) => RegexGuide::new(pattern).map(|_| ()),
            _ => Ok(()),
        }
    }
}

/// A regex format's automaton: every string of the pattern's language, anchored at the start.
type RegexDfa = dense::DFA<Vec<u32>>;

/// A regex format: its DFA and the states from which some continuation ends in a whole match.
///
/// The DFA reports a match one byte late (a state entered on the byte after a match says the
/// bytes before it matched), so "not dead" is not "a prefix of the language": after `a` under
/// `a|ab`, every byte leads to a live-looking state that only reports `a`. The output followed
/// by some bytes can still become a match exactly when the state they reach is in `live`.
struct RegexGuide {
    dfa: RegexDfa,
    start: StateID,
    live: HashSet<StateID>,
}

impl RegexGuide {
    fn new(pattern: &str) -> Result<Self> {
        let dfa = regex_dfa(pattern)?;
        let start = dfa
            .start_state(&start::Config::new().anchored(Anchored::Yes))
            .or_else(|e| invalid("guided_regex", format!("has no anchored start: {e}")))?;
        // The states reachable from the start (one byte of each class stands for the class),
        // each with the states that lead to it.
        let bytes: Vec<u8> = dfa.byte_classes().representatives(..).filter_map(|u| u.as_u8()).collect();
        let mut from: HashMap<StateID, Vec<StateID>> = HashMap::from([(start, Vec::new())]);
        let mut todo = vec![start];
        while let Some(s) = todo.pop() {
            for &b in &bytes {
                let next = dfa.next_state(s, b);
                if dfa.is_dead_state(next) || dfa.is_quit_state(next) {
                    continue;
                }
                let seen = from.contains_key(&next);
                from.entry(next).or_default().push(s);
                if !seen {
                    todo.push(next);
                }
            }
        }
        // Live: a whole match at the end of input, or a byte away from a live state.
        let mut live: HashSet<StateID> =
            from.keys().copied().filter(|&s| dfa.is_match_state(dfa.next_eoi_state(s))).collect();
        let mut todo: Vec<StateID> = live.iter().copied().collect();
        while let Some(s) = todo.pop() {
            for &p in &from[&s] {
                if live.insert(p) {
                    todo.push(p);
                }
            }
        }
        Ok(Self { dfa, start, live })
    }
}

/// A regex pattern's length rule.
fn pattern_fits(pattern: &str) -> Result<()> {
    if pattern.len() > MAX_REGEX_BYTES {
        return invalid("guided_regex", format!("must have at most {MAX_REGEX_BYTES} bytes, got {}", pattern.len()));
    }
    Ok(())
}

/// Compiles `pattern` for guidance: `MatchKind::All`, so that a state is dead only when no
/// continuation matches (leftmost-first would stop at `a` of `a|ab`); refused past the bounds.
fn regex_dfa(pattern: &str) -> Result<RegexDfa> {
    pattern_fits(pattern)?;
    let config = dense::Config::new()
        .match_kind(MatchKind::All)
        .start_kind(StartKind::Anchored)
        .dfa_size_limit(Some(REGEX_DFA_BYTES))
        .determinize_size_limit(Some(REGEX_DFA_BYTES));
    dense::Builder::new()
        .configure(config)
        .thompson(thompson::Config::new().nfa_size_limit(Some(REGEX_DFA_BYTES)))
        .build(pattern)
        .or_else(|e| invalid("guided_regex", format!("cannot be compiled within {REGEX_DFA_BYTES} bytes: {e}")))
}

/// A request's format, followed as its tokens come.
pub struct Guide {
    table: Arc<ByteTable>,
    progress: Progress,
    /// A regex format's automaton.
    regex: Option<Arc<RegexGuide>>,
    /// The ids a state allows (one bit an id of the table), for the states met last: an output
    /// stays in a few states for many tokens (inside a JSON string, between values), and testing
    /// the vocabulary anew took 4.4 ms a draw on Qwen3's inside a string.
    masks: Mutex<Vec<(Walk, Arc<[u64]>)>>,
}

/// States whose masks a guide keeps.
const MASKS_KEPT: usize = 16;

impl Clone for Guide {
    fn clone(&self) -> Self {
        let masks = self.masks.lock().unwrap_or_else(PoisonError::into_inner).clone();
        Self {
            table: self.table.clone(),
            progress: self.progress.clone(),
            regex: self.regex.clone(),
            masks: Mutex::new(masks),
        }
    }
}

impl PartialEq for Guide {
    fn eq(&self, other: &Self) -> bool {
        let same_regex = match (&self.regex, &other.regex) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (a, b) => a.is_none() && b.is_none(),
        };
        Arc::ptr_eq(&self.table, &other.table) && same_regex && self.progress == other.progress
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
            Progress::Walk(w) => f.debug_tuple("Guide").field(w).finish(),
        }
    }
}

impl Guide {
    /// The guide of `format` (checked by [`OutputFormat::validate`]) over `table`'s tokens,
    /// nothing generated yet; a regex is compiled here, refused as [`OutputFormat::compiles`]
    /// refuses.
    pub fn new(format: &OutputFormat, table: Arc<ByteTable>) -> Result<Self> {
        let (progress, regex) = match format {
            OutputFormat::Choice(choices) => {
                let choices = choices.iter().map(|c| c.as_bytes().to_vec()).collect();
                (Progress::Choice { choices, output: Vec::new() }, None)
            }
            OutputFormat::JsonObject => (Progress::Walk(Walk::Json(JsonObject::new(JSON_WHITESPACE))), None),
            OutputFormat::Regex(pattern) => {
                let regex = RegexGuide::new(pattern)?;
                (Progress::Walk(Walk::Regex(regex.start)), Some(Arc::new(regex)))
            }
        };
        Ok(Self { table, progress, regex, masks: Mutex::new(Vec::new()) })
    }

    /// Records a generated token (its bytes; an end id's are none).
    pub fn push(&mut self, token: u32) {
        let bytes = self.table.bytes(token, true);
        let w = match &mut self.progress {
            Progress::Choice { choices, output } => {
                output.extend_from_slice(bytes);
                choices.retain(|c| c.starts_with(output));
                return;
            }
            Progress::Walk(w) => *w,
        };
        let walked = self.walk(w, bytes);
        // A token the mask allowed keeps the format; one it did not (a forced draw) ends the
        // guidance with nothing allowed but the end ids.
        self.progress = match walked {
            Some(w) => Progress::Walk(w),
            None => Progress::Choice { choices: Vec::new(), output: Vec::new() },
        };
    }

    /// `w` after `bytes`, or `None` when no continuation could make the format of them.
    fn walk(&self, w: Walk, bytes: &[u8]) -> Option<Walk> {
        match (w, &self.regex) {
            (Walk::Json(mut j), _) => j.feed(bytes).then_some(Walk::Json(j)),
            (Walk::Regex(mut s), Some(regex)) => {
                for &b in bytes {
                    s = regex.dfa.next_state(s, b);
                    if !regex.live.contains(&s) {
                        return None;
                    }
                }
                Some(Walk::Regex(s))
            }
            (Walk::Regex(_), None) => None,
        }
    }

    /// Whether the output already is the format.
    pub fn complete(&self) -> bool {
        match (&self.progress, &self.regex) {
            (Progress::Choice { choices, output }, _) => choices.iter().any(|c| c.len() == output.len()),
            (Progress::Walk(Walk::Json(j)), _) => j.complete(),
            (Progress::Walk(Walk::Regex(s)), Some(regex)) => regex.dfa.is_match_state(regex.dfa.next_eoi_state(*s)),
            (Progress::Walk(Walk::Regex(_)), None) => false,
        }
    }

    /// Sets every token of `row` the module docs do not allow to `-inf`; `end_ids` are the ids
    /// that end the request.
    pub fn mask(&self, row: &mut [f32], end_ids: &[u32]) {
        let complete = self.complete();
        let any = match &self.progress {
            Progress::Choice { choices, output } => self.mask_choices(row, end_ids, choices, output.len(), complete),
            Progress::Walk(w) => {
                let bits = self.walk_mask(*w);
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

    /// The ids of the table that `w` allows (those with bytes it can take), one bit each:
    /// kept from an earlier draw in the same state, else tested anew and kept.
    fn walk_mask(&self, w: Walk) -> Arc<[u64]> {
        let mut masks = self.masks.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, bits)) = masks.iter().find(|(state, _)| *state == w) {
            return bits.clone();
        }
        let n = self.table.len();
        let mut bits = vec![0u64; n.div_ceil(64)];
        for id in 0..n {
            let bytes = self.table.bytes(id as u32, true);
            if !bytes.is_empty() && self.walk(w, bytes).is_some() {
                bits[id / 64] |= 1 << (id % 64);
            }
        }
        let bits: Arc<[u64]> = bits.into();
        if masks.len() == MASKS_KEPT {
            masks.remove(0);
        }
        masks.push((w, bits.clone()));
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
        let mut g = Guide::new(&format, t.clone()).unwrap();
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
        let mut g = Guide::new(&OutputFormat::JsonObject, t.clone()).unwrap();
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
        let mut g = Guide::new(&OutputFormat::JsonObject, t.clone()).unwrap();
        g.push(id_of(&t, vocab, b"x"));
        assert_eq!(allowed(&g, vocab, &[3, 5]), vec![3, 5]);
    }

    /// The module docs' rule, token by token: what `mask` must leave finite.
    fn by_definition(g: &Guide, vocab: usize, ends: &[u32]) -> Vec<u32> {
        let continues = |bytes: &[u8]| match &g.progress {
            Progress::Choice { choices, output } => choices.iter().any(|c| c[output.len()..].starts_with(bytes)),
            Progress::Walk(w) => g.walk(*w, bytes).is_some(),
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
        /// share prefixes, for JSON and for regexes (masks kept from earlier states included).
        #[test]
        fn the_mask_is_the_definition_along_any_path(
            choices in proptest::collection::btree_set("[ab {}\":1]{1,6}", 1..5),
            kind in 0usize..3,
            regex in proptest::sample::select(vec!["a|ab", "(ab)+ ?b*", "[a-c]{2,4}!?", "\\{\"a\":[0-9]+\\}", "a b"]),
            picks in proptest::collection::vec(0usize..1000, 0..12),
        ) {
            let (t, vocab, eos) = table();
            let format = match kind {
                0 => OutputFormat::JsonObject,
                1 => OutputFormat::Regex(regex.to_string()),
                _ => OutputFormat::Choice(choices.into_iter().collect()),
            };
            let mut g = Guide::new(&format, t.clone()).unwrap();
            // Whole matches told apart by another construction: an unanchored search for the
            // pattern between ^ and $.
            let whole = regex_automata::dfa::regex::Regex::new(&format!("^(?:{regex})$")).unwrap();
            let mut output = Vec::new();
            for pick in picks {
                let want = by_definition(&g, vocab, &[eos]);
                proptest::prop_assert_eq!(allowed(&g, vocab, &[eos]), want.clone());
                if kind == 1 {
                    proptest::prop_assert_eq!(g.complete(), whole.is_match(&output), "{:?}", output);
                }
                let token = want[pick % want.len()];
                if token == eos {
                    break;
                }
                g.push(token);
                output.extend_from_slice(t.bytes(token, true));
            }
        }
    }

    #[test]
    fn a_regex_allows_every_continuation_of_a_match_and_ends_on_a_whole_one() {
        let (t, vocab, eos) = table();
        // Leftmost-first matching would stop at "a"; every string of the language counts here.
        let mut g = Guide::new(&OutputFormat::Regex("a|ab".into()), t.clone()).unwrap();
        assert!(!g.complete());
        g.push(id_of(&t, vocab, b"a"));
        assert!(g.complete());
        let mut want = vec![id_of(&t, vocab, b"b"), eos];
        want.sort();
        assert_eq!(allowed(&g, vocab, &[eos]), want);
        g.push(id_of(&t, vocab, b"b"));
        assert_eq!(allowed(&g, vocab, &[eos]), vec![eos]);
        // Unicode classes match whole characters: "é" is two byte tokens in a row.
        let mut g = Guide::new(&OutputFormat::Regex("\\p{L}+".into()), t.clone()).unwrap();
        g.push(id_of(&t, vocab, &[0xc3]));
        assert!(!g.complete() && allowed(&g, vocab, &[eos]).contains(&id_of(&t, vocab, &[0xa9])));
        g.push(id_of(&t, vocab, &[0xa9]));
        assert!(g.complete());
    }

    #[test]
    fn regexes_that_cannot_compile_or_grow_past_the_bound_are_refused() {
        let refused = |p: &str| OutputFormat::Regex(p.into()).compiles().unwrap_err().to_string();
        assert!(refused("(a").contains("guided_regex"));
        assert!(refused(&"a".repeat(MAX_REGEX_BYTES + 1)).contains("at most 4096 bytes"));
        // 2^17 states to remember the last 18 letters; a long Unicode word.
        let exploding = refused("(a|b)*a(a|b){16}");
        assert!(refused("\\w{1,200}").contains("cannot be compiled within"));
        assert!(exploding.contains("cannot be compiled within"), "{exploding}");
        assert!(OutputFormat::Regex("[0-9]{3}-[0-9]{4}".into()).compiles().is_ok());
        assert!(OutputFormat::Regex("(a".into()).validate().is_ok(), "validate checks the length alone");
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
