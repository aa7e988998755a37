//! The `asynct-tiny` tokenizer: byte-level BPE with 512 ids, built by the project.
//!
//! Ids 0..=255 are the 256 byte symbols (byte `b` is id `b`, in GPT-2's printable byte alphabet,
//! so any UTF-8 text encodes and decodes back exactly), ids 256..=509 are merges learnt from a
//! short English text embedded below, and 510 and 511 are the special tokens `<|endoftext|>`
//! (the end of sequence) and `<|pad|>`. The merges are learnt by a small deterministic
//! counter (ties broken by the lexicographically smallest pair) rather than the tokenizers
//! trainer, so the file is the same bytes on every run and every machine.

use std::collections::BTreeMap;

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Merges, Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{AddedToken, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer, Tokenizer};

use crate::error::{Error, Result};

/// Every id the tokenizer can produce is below this; the tiny model's `vocab_size`.
pub const VOCAB_SIZE: usize = 512;
/// The end-of-sequence token.
pub const EOS_TOKEN: &str = "<|endoftext|>";
/// The padding token.
pub const PAD_TOKEN: &str = "<|pad|>";
/// The id of [`EOS_TOKEN`].
pub const EOS_ID: u32 = 510;
/// The id of [`PAD_TOKEN`].
pub const PAD_ID: u32 = 511;

/// Model (non-special) vocabulary entries: 256 bytes plus the learnt merges.
const MODEL_VOCAB: usize = VOCAB_SIZE - 2;

/// The text the merges are learnt from: ordinary English prose, so that common words and
/// word pieces become single tokens and the tiny model's prompts are not all one byte per id.
const TRAINING_TEXT: &str = "\
The river runs past the old mill and under the stone bridge before it reaches the town. In the \
morning the water is cold and clear, and the children who live near the bank walk along it on their \
way to school. They count the boats, they throw small stones, and they argue about whether the fish \
they see are trout or something else entirely. Nobody has ever settled the question.

When the weather turns, the river changes with it. After a long rain the water rises, brown and \
fast, carrying branches and leaves from the hills. The people of the town have learned to watch \
the marks on the bridge: when the water reaches the third mark, the shop keepers move their goods \
upstairs, and the baker starts making bread for the families who will need it.

A machine that reads text does not see words the way a person does. It sees a sequence of numbers, \
each standing for a piece of a word, and it learns which pieces tend to follow which. Given the \
beginning of a sentence, it predicts the next piece, then the next, until it decides that the \
sentence is finished. The quality of those predictions depends on what it has seen before and on \
how carefully it was trained.

Good engineering is mostly about small, careful steps. Write down what the system must do, test \
each part on its own, and measure before you change anything for speed. When something fails, \
read the message, find the smallest input that shows the problem, and fix the cause rather than \
the symptom. Then write a test, so that the same mistake cannot return without being noticed.

In the evening the town is quiet. Lights come on in the windows one after another, and the sound \
of the river is the only thing that does not stop. Some people say they sleep better because of \
it; others say they never notice it at all, until they travel somewhere far away and find the \
silence strange.";

/// The symbol GPT-2's byte-level alphabet gives byte `b`: printable Latin-1 bytes stand for
/// themselves, the others are shifted past 255 in byte order so every symbol is printable.
fn byte_symbol(b: u8) -> char {
    let printable = |x: u8| matches!(x, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        char::from(b)
    } else {
        let shifted = (0..b).filter(|&x| !printable(x)).count() as u32;
        char::from_u32(256 + shifted).expect("256..=323 are valid scalar values")
    }
}

/// Pre-tokenized words of the training text (in byte symbols) with their counts, in a sorted
/// map so that learning visits them in one fixed order.
fn training_words() -> Result<BTreeMap<String, u64>> {
    let mut text = PreTokenizedString::from(TRAINING_TEXT);
    ByteLevel::new(false, true, true).pre_tokenize(&mut text).map_err(|e| Error::Tokenizer(e.to_string()))?;
    let mut counts = BTreeMap::new();
    for (word, _, _) in text.get_splits(OffsetReferential::Original, OffsetType::Byte) {
        *counts.entry(word.to_string()).or_insert(0) += 1;
    }
    Ok(counts)
}

/// The pair of adjacent symbols seen most often (weighted by word count); among equals the
/// lexicographically smallest, so the choice never depends on iteration order.
fn most_frequent_pair(words: &[(Vec<String>, u64)]) -> Option<(String, String)> {
    let mut pairs: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for (symbols, n) in words {
        for w in symbols.windows(2) {
            *pairs.entry((&w[0], &w[1])).or_insert(0) += n;
        }
    }
    let mut best: Option<((&str, &str), u64)> = None;
    for (&pair, &n) in &pairs {
        if best.is_none_or(|(_, m)| n > m) {
            best = Some((pair, n));
        }
    }
    best.map(|((l, r), _)| (l.to_string(), r.to_string()))
}

/// Learns merges until the model vocabulary (bytes plus merge results) has `MODEL_VOCAB`
/// entries. Returns the vocabulary in id order and the merges in rank order.
fn learn_merges() -> Result<(Vec<String>, Merges)> {
    let mut vocab: Vec<String> = (0..=255u8).map(|b| byte_symbol(b).to_string()).collect();
    let mut words: Vec<(Vec<String>, u64)> =
        training_words()?.into_iter().map(|(w, n)| (w.chars().map(String::from).collect(), n)).collect();
    let mut merges = Vec::new();
    while vocab.len() < MODEL_VOCAB {
        let Some((left, right)) = most_frequent_pair(&words) else {
            return Err(Error::Tokenizer(format!("training text allows only {} merges", merges.len())));
        };
        let merged = format!("{left}{right}");
        for (symbols, _) in &mut words {
            let mut i = 0;
            while i + 1 < symbols.len() {
                if symbols[i] == left && symbols[i + 1] == right {
                    symbols[i] = merged.clone();
                    symbols.remove(i + 1);
                }
                i += 1;
            }
        }
        // Two merge paths can spell one token ("a"+"bc", "ab"+"c"): it keeps its first id.
        if !vocab.contains(&merged) {
            vocab.push(merged);
        }
        merges.push((left, right));
    }
    Ok((vocab, merges))
}

/// Builds the tiny tokenizer: ByteLevel pre-tokenizer and decoder, the learnt BPE, the specials.
pub fn build() -> Result<Tokenizer> {
    let tok_err = |e: tokenizers::Error| Error::Tokenizer(e.to_string());
    let (symbols, merges) = learn_merges()?;
    let vocab: Vocab = symbols.into_iter().zip(0u32..).collect();
    let bpe = BPE::builder().vocab_and_merges(vocab, merges).build().map_err(tok_err)?;
    let mut tokenizer = Tokenizer::new(bpe);
    tokenizer.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
    tokenizer.add_special_tokens(&[AddedToken::from(EOS_TOKEN, true), AddedToken::from(PAD_TOKEN, true)]);
    Ok(tokenizer)
}

/// The tokenizer as `tokenizer.json` text (pretty-printed, the same bytes on every call).
pub fn tokenizer_json() -> Result<String> {
    build()?.to_string(true).map_err(|e| Error::Tokenizer(e.to_string()))
}

/// `tokenizer_config.json` for the tiny model: the special tokens and the context length.
pub fn tokenizer_config_json(model_max_length: usize) -> String {
    let cfg = serde_json::json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "add_bos_token": false,
        "model_max_length": model_max_length,
    });
    serde_json::to_string_pretty(&cfg).expect("a json! value serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::OnceLock;

    fn tiny() -> &'static Tokenizer {
        static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
        TOKENIZER.get_or_init(|| build().expect("the tiny tokenizer builds"))
    }

    #[test]
    fn byte_symbols_are_the_byte_level_alphabet() {
        let ours: std::collections::BTreeSet<char> = (0..=255u8).map(byte_symbol).collect();
        let theirs: std::collections::BTreeSet<char> = ByteLevel::alphabet().into_iter().collect();
        assert_eq!(ours, theirs);
        assert_eq!(byte_symbol(b' '), '\u{120}');
        assert_eq!(byte_symbol(b'A'), 'A');
    }

    #[test]
    fn vocab_is_exactly_512_with_specials_last() {
        let t = tiny();
        assert_eq!(t.get_vocab_size(true), VOCAB_SIZE);
        let ids: std::collections::BTreeSet<u32> = t.get_vocab(true).into_values().collect();
        assert_eq!(ids, (0..VOCAB_SIZE as u32).collect());
        assert_eq!(t.token_to_id(EOS_TOKEN), Some(EOS_ID));
        assert_eq!(t.token_to_id(PAD_TOKEN), Some(PAD_ID));
        assert_eq!(t.decode(&[EOS_ID], true).unwrap(), "");
    }

    #[test]
    fn json_is_the_same_bytes_every_time_and_reloads() {
        let a = tokenizer_json().unwrap();
        assert_eq!(a, tokenizer_json().unwrap());
        let reloaded: Tokenizer = a.parse().unwrap();
        let text = "The river runs past the old mill.";
        assert_eq!(reloaded.encode(text, false).unwrap().get_ids(), tiny().encode(text, false).unwrap().get_ids());
    }

    #[test]
    fn english_compresses_and_specials_encode_as_one_id() {
        let text = "the water in the river";
        let ids = tiny().encode(text, false).unwrap().get_ids().to_vec();
        assert!(ids.len() * 2 < text.len(), "{} ids for {} bytes", ids.len(), text.len());
        let ids = tiny().encode(format!("end{EOS_TOKEN}"), false).unwrap().get_ids().to_vec();
        assert_eq!(ids.last(), Some(&EOS_ID));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn any_utf8_roundtrips(text in any::<String>()) {
            let ids = tiny().encode(text.as_str(), false).unwrap().get_ids().to_vec();
            prop_assert!(ids.iter().all(|&id| (id as usize) < VOCAB_SIZE));
            prop_assert_eq!(tiny().decode(&ids, false).unwrap(), text);
        }

        #[test]
        fn ascii_with_spaces_roundtrips(text in "[ -~\\n\\t]{0,80}") {
            let ids = tiny().encode(text.as_str(), false).unwrap().get_ids().to_vec();
            prop_assert_eq!(tiny().decode(&ids, false).unwrap(), text);
        }
    }
}
