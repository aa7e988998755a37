//! The bytes each token id stands for under a byte-level decoder, so that streaming text needs no
//! call into the tokenizer.
//!
//! `Tokenizer::decode` looks each id up (an added token's content, else the model's string), drops
//! the ids it does not know and, with `skip_special_tokens`, every token whose string is a special
//! token's content, then hands the strings to its decoder. The `ByteLevel` decoder turns each string
//! into bytes on its own, through GPT-2's byte alphabet (a string holding a character outside the
//! alphabet stands for its own UTF-8 bytes, which is how most added tokens come out), joins the
//! bytes and decodes them lossily. So under that decoder, and only under it, the decode of any ids is
//! `String::from_utf8_lossy` of their entries here, concatenated. Any other decoder (none at all, a
//! `Sequence`, `Metaspace`, `WordPiece`, ...) gets no table, and the detokenizer keeps calling
//! `decode`. Decoding reads no normalizer, pre-tokenizer or post-processor, so they do not matter.
//!
//! A table costs a pass over the vocabulary (about 80 ms for Qwen3's 151,669 ids, on the first
//! request's admission), so [`ByteTable::shared`] builds one per tokenizer and hands every later
//! request the same one.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use tokenizers::decoders::DecoderWrapper;
use tokenizers::Tokenizer;

/// Every id's bytes, as the tokenizer's byte-level decoder produces them.
pub struct ByteTable {
    /// Id `i`'s entry; ids past the end are unknown.
    entries: Vec<Entry>,
    /// The bytes of the ids too long to hold in their entry.
    spill: Vec<u8>,
    /// The most bytes one id has.
    longest: usize,
    /// The ids of each byte string (special ids and those without bytes left out), built at
    /// the first [`ByteTable::ids_with_bytes`].
    by_bytes: OnceLock<HashMap<Box<[u8]>, Vec<u32>>>,
}

/// The bytes an entry holds itself: those of 86% of Qwen3's model tokens (6.4 bytes on average,
/// 128 at most).
const INLINE: usize = 9;

/// One id's bytes and whether it is special, in 16 bytes, so that a lookup reads one cache line
/// (two for a token past `INLINE` bytes). A decode step looks up one id per sequence in a table
/// of 2.4 MB for Qwen3, mostly out of cache; as offsets, flags and bytes in three arrays a lookup
/// read three lines, and under perf those reads were the largest part of the detokenizer's cost
/// at a large batch (RESULTS run 125).
#[derive(Clone, Copy, Default)]
#[repr(C, align(16))]
struct Entry {
    inline: [u8; INLINE],
    /// Whether `decode` drops the id under `skip_special_tokens`.
    special: bool,
    len: u16,
    /// Where the bytes start in `spill` when `len > INLINE`.
    offset: u32,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 16);

/// The tables built so far, each beside the tokenizer it was built from. The `Weak` keeps the
/// tokenizer's allocation, so its address cannot be reused by another tokenizer while the entry
/// stands; an entry whose tokenizer has been dropped is removed at the next lookup.
type Tables = Vec<(Weak<Tokenizer>, Option<Arc<ByteTable>>)>;
static TABLES: Mutex<Tables> = Mutex::new(Vec::new());

impl ByteTable {
    /// The table of `tokenizer`, built at its first call and shared after; `None` when its decoder
    /// is not a plain `ByteLevel` one.
    pub fn shared(tokenizer: &Arc<Tokenizer>) -> Option<Arc<Self>> {
        // Only a panic inside `build` poisons the lock, and it leaves the list as it was.
        let mut tables = TABLES.lock().unwrap_or_else(PoisonError::into_inner);
        tables.retain(|(t, _)| t.strong_count() > 0);
        if let Some((_, table)) = tables.iter().find(|(t, _)| std::ptr::eq(t.as_ptr(), Arc::as_ptr(tokenizer))) {
            return table.clone();
        }
        let table = Self::build(tokenizer).map(Arc::new);
        tables.push((Arc::downgrade(tokenizer), table.clone()));
        table
    }

    /// Builds the table of `tokenizer`; `None` when its decoder is not a plain `ByteLevel` one, or
    /// when an entry cannot hold a token's length or its spill offset (a token of 64 KiB, or 4 GiB
    /// of long tokens), so that the detokenizer calls `decode` instead.
    pub fn build(tokenizer: &Tokenizer) -> Option<Self> {
        // The decoder's settings (prefix space, offset trimming) shape encoding only.
        let Some(DecoderWrapper::ByteLevel(_)) = tokenizer.get_decoder() else {
            return None;
        };
        let specials: HashSet<String> =
            tokenizer.get_added_tokens_decoder().into_values().filter(|t| t.special).map(|t| t.content).collect();
        let num_ids = tokenizer.get_vocab(true).into_values().max().map_or(0, |id| id as usize + 1);
        let mut table =
            Self { entries: Vec::with_capacity(num_ids), spill: Vec::new(), longest: 0, by_bytes: OnceLock::new() };
        let mut bytes = Vec::new();
        for id in 0..num_ids as u32 {
            // The lookup `decode` makes: an added token's content first, then the model's string.
            let token = tokenizer.id_to_token(id);
            let mut entry = Entry { special: token.as_ref().is_some_and(|t| specials.contains(t)), ..Entry::default() };
            bytes.clear();
            if let Some(token) = token {
                push_token_bytes(&token, &mut bytes);
            }
            entry.len = u16::try_from(bytes.len()).ok()?;
            table.longest = table.longest.max(bytes.len());
            if bytes.len() <= INLINE {
                entry.inline[..bytes.len()].copy_from_slice(&bytes);
            } else {
                entry.offset = u32::try_from(table.spill.len()).ok()?;
                table.spill.extend_from_slice(&bytes);
            }
            table.entries.push(entry);
        }
        Some(table)
    }

    /// How many ids it holds (ids from 0).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds no id.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The most bytes one id has.
    pub fn longest(&self) -> usize {
        self.longest
    }

    /// The ids whose bytes are exactly `bytes`, special ones aside (a model token and an added
    /// one may share them).
    pub fn ids_with_bytes(&self, bytes: &[u8]) -> &[u32] {
        let index = self.by_bytes.get_or_init(|| {
            let mut index: HashMap<Box<[u8]>, Vec<u32>> = HashMap::new();
            for id in 0..self.entries.len() as u32 {
                let b = self.bytes(id, true);
                if !b.is_empty() {
                    index.entry(b.into()).or_default().push(id);
                }
            }
            index
        });
        index.get(bytes).map_or(&[], Vec::as_slice)
    }

    /// The bytes `id` adds to a decode: none for an unknown id, nor for a special token when
    /// `skip_special_tokens`.
    pub fn bytes(&self, id: u32, skip_special_tokens: bool) -> &[u8] {
        let Some(entry) = self.entries.get(id as usize) else { return &[] };
        let len = usize::from(entry.len);
        if skip_special_tokens && entry.special {
            &[]
        } else if len <= INLINE {
            &entry.inline[..len]
        } else {
            &self.spill[entry.offset as usize..][..len]
        }
    }
}

/// Appends a token string's bytes as the `ByteLevel` decoder reads them: symbol by symbol through
/// the byte alphabet, or, if any character is outside it, the string's own UTF-8.
fn push_token_bytes(token: &str, out: &mut Vec<u8>) {
    let start = out.len();
    for c in token.chars() {
        let Some(b) = alphabet_byte(c) else {
            out.truncate(start);
            out.extend_from_slice(token.as_bytes());
            return;
        };
        out.push(b);
    }
}

/// Whether byte `b` prints as itself in Latin-1, so that GPT-2's alphabet uses it as its own symbol.
const fn prints(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// The 68 bytes that do not print, in byte order: the `n`-th is spelt `U+0100 + n`.
const SHIFTED: [u8; 68] = {
    let mut out = [0u8; 68];
    let (mut b, mut n) = (0usize, 0usize);
    while b < 256 {
        if !prints(b as u8) {
            out[n] = b as u8;
            n += 1;
        }
        b += 1;
    }
    out
};

/// The byte GPT-2's byte alphabet spells with `c`, if `c` is one of its 256 symbols.
fn alphabet_byte(c: char) -> Option<u8> {
    match u8::try_from(c) {
        Ok(b) if prints(b) => Some(b),
        _ => (c as u32).checked_sub(256).and_then(|n| SHIFTED.get(n as usize).copied()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::test_tokenizers::{constructed, qwen3, refused, shakespeare, ADDED};
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;

    #[test]
    fn the_alphabet_is_byte_levels_and_spells_each_byte_once() {
        let symbols: Vec<char> =
            (0..512u32).filter_map(char::from_u32).filter(|&c| alphabet_byte(c).is_some()).collect();
        assert_eq!(symbols.iter().copied().collect::<HashSet<char>>(), ByteLevel::alphabet().into_iter().collect());
        let bytes: HashSet<u8> = symbols.iter().map(|&c| alphabet_byte(c).unwrap()).collect();
        assert_eq!((symbols.len(), bytes.len()), (256, 256));
        assert_eq!((alphabet_byte('Ġ'), alphabet_byte('Ċ'), alphabet_byte('A')), (Some(b' '), Some(b'\n'), Some(b'A')));
        assert_eq!((alphabet_byte(' '), alphabet_byte('\u{144}')), (None, None));
    }

    /// Each id decoded alone equals its entry, which with the concatenation rule is the whole claim.
    fn check_every_id(tokenizer: &Tokenizer, extra_ids: &[u32]) {
        let table = ByteTable::build(tokenizer).expect("a byte-level tokenizer gets a table");
        let num_ids = table.entries.len() as u32;
        for id in (0..num_ids).chain(extra_ids.iter().copied()) {
            for skip in [false, true] {
                let want = tokenizer.decode(&[id], skip).unwrap();
                assert_eq!(String::from_utf8_lossy(table.bytes(id, skip)), want, "id {id}, skip_special_tokens {skip}");
            }
        }
    }

    #[test]
    fn every_qwen3_id_decodes_to_its_entry() {
        check_every_id(&qwen3(), &[151_669, 151_900, u32::MAX]);
    }

    #[test]
    fn every_small_tokenizer_id_decodes_to_its_entry() {
        check_every_id(&shakespeare(), &[4096, 5000]);
        check_every_id(&constructed(), &[1000]);
    }

    #[test]
    fn added_tokens_go_through_the_byte_alphabet_unless_a_character_is_outside_it() {
        let tokenizer = constructed();
        let table = ByteTable::build(&tokenizer).unwrap();
        let bytes = |content: &str| table.bytes(tokenizer.token_to_id(content).unwrap(), false).to_vec();
        assert_eq!(bytes(ADDED[0]), b" hi"); // "Ġhi": every symbol in the alphabet
        assert_eq!(bytes(ADDED[1]), b"a b"); // a plain space is outside it: the content's own bytes
        assert_eq!(bytes(ADDED[2]), [0xE9, 0xE8]); // "éè": the symbols of two bytes that make no character
        assert_eq!(bytes(ADDED[3]), "你".as_bytes());
    }

    #[test]
    fn special_tokens_are_dropped_only_when_skipped() {
        let tokenizer = qwen3();
        let table = ByteTable::build(&tokenizer).unwrap();
        let im_end = tokenizer.token_to_id("<|im_end|>").unwrap();
        let think = tokenizer.token_to_id("<think>").unwrap();
        assert_eq!((table.bytes(im_end, false), table.bytes(im_end, true)), (&b"<|im_end|>"[..], &b""[..]));
        assert_eq!(table.bytes(think, true), b"<think>"); // added, but not special
    }

    #[test]
    fn other_decoders_get_no_table() {
        for (name, tokenizer) in refused() {
            assert!(ByteTable::build(&tokenizer).is_none(), "{name} got a byte table");
        }
    }

    #[test]
    fn one_table_per_tokenizer_shared_until_it_is_dropped() {
        let (a, b) = (Arc::new(constructed()), Arc::new(constructed()));
        let first = ByteTable::shared(&a).unwrap();
        assert!(Arc::ptr_eq(&first, &ByteTable::shared(&a).unwrap()));
        assert!(!Arc::ptr_eq(&first, &ByteTable::shared(&b).unwrap()));
        let weak = Arc::downgrade(&a);
        drop(a);
        ByteTable::shared(&b);
        let tables = TABLES.lock().unwrap();
        assert!(!tables.iter().any(|(t, _)| t.ptr_eq(&weak)), "the dropped tokenizer's entry stayed");
    }
}
