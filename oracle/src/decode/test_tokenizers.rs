//! Tokenizers for the decode module's unit tests: Qwen3's, the mini model's, a constructed
//! byte-level one with odd added tokens, and the same with decoders that get no byte table.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::decoders::metaspace::Metaspace;
use tokenizers::decoders::sequence::Sequence;
use tokenizers::decoders::wordpiece::WordPiece;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::{AddedToken, Tokenizer};

/// The constructed tokenizer's added tokens, none special: all symbols in the byte alphabet, one
/// with a plain space, two symbols that spell no character, one character outside the alphabet.
pub(crate) const ADDED: [&str; 4] = ["Ġhi", "a b", "éè", "你"];
/// Its special tokens; the second is also a model token, so skipping it drops the model's id.
pub(crate) const SPECIAL: [&str; 2] = ["<s>", "Ġt"];

fn load(path: PathBuf, what: &str) -> Tokenizer {
    assert!(path.is_file(), "the {what} tokenizer is missing at {}", path.display());
    Tokenizer::from_file(&path)
        .unwrap_or_else(|e| panic!("cannot load the {what} tokenizer at {}: {e}", path.display()))
}

/// The 11 MB Qwen3 tokenizer from `../shared` beside the workspace (in CI too, as for
/// `tests/decode_text.rs`: a missing file fails rather than skips), parsed once per test binary.
pub(crate) fn qwen3() -> Arc<Tokenizer> {
    static TOKENIZER: OnceLock<Arc<Tokenizer>> = OnceLock::new();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/tokenizers/qwen3/tokenizer.json");
    TOKENIZER.get_or_init(|| Arc::new(load(path, "Qwen3"))).clone()
}

/// The 4,096-id byte-level BPE the `asynct-mini-shakespeare` checkpoint ships with, parsed once.
pub(crate) fn shakespeare() -> Arc<Tokenizer> {
    static TOKENIZER: OnceLock<Arc<Tokenizer>> = OnceLock::new();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../trained/asynct-mini-shakespeare/tokenizer.json");
    TOKENIZER.get_or_init(|| Arc::new(load(path, "asynct-mini-shakespeare"))).clone()
}

/// A byte-level BPE over the 256 byte symbols and one merge (`Ġt`), with [`ADDED`] and [`SPECIAL`].
pub(crate) fn constructed() -> Tokenizer {
    let mut symbols: Vec<String> = ByteLevel::alphabet().into_iter().map(String::from).collect();
    symbols.sort();
    symbols.push("Ġt".to_string());
    let vocab: Vocab = symbols.into_iter().zip(0u32..).collect();
    let merges = vec![("Ġ".to_string(), "t".to_string())];
    let bpe = BPE::builder().vocab_and_merges(vocab, merges).build().expect("the constructed BPE builds");
    let mut tokenizer = Tokenizer::new(bpe);
    tokenizer.with_pre_tokenizer(Some(ByteLevel::default().add_prefix_space(false)));
    tokenizer.with_decoder(Some(ByteLevel::default()));
    tokenizer.add_tokens(&ADDED.map(|t| AddedToken::from(t, false)));
    tokenizer.add_special_tokens(&SPECIAL.map(|t| AddedToken::from(t, true)));
    tokenizer
}

/// [`constructed`] under decoders that are not a plain `ByteLevel`, each with its name.
pub(crate) fn refused() -> Vec<(&'static str, Tokenizer)> {
    let with = |decoder: Option<DecoderWrapper>| {
        let mut tokenizer = constructed();
        tokenizer.with_decoder(decoder);
        tokenizer
    };
    let byte_level_in_a_sequence = Sequence::new(vec![ByteLevel::default().into()]);
    vec![
        ("no decoder", with(None)),
        ("Metaspace", with(Some(Metaspace::default().into()))),
        ("WordPiece", with(Some(WordPiece::default().into()))),
        ("Sequence[ByteLevel]", with(Some(byte_level_in_a_sequence.into()))),
    ]
}
