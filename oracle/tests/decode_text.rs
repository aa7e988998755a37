//! Streaming text with the real Qwen3 tokenizer: whole characters only, stop strings held back and
//! cut, eos and the two length limits (SPEC section 5).
//!
//! The tokenizer lives in `../shared/tokenizers/qwen3/` beside the workspace, in CI too; a missing
//! file fails these tests rather than skipping them.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use oracle::decode::{Emitted, FinishReason, IncrementalDetokenizer, RequestDecoder, StopConditions};
use proptest::prelude::*;
use tokenizers::Tokenizer;

const IM_END: u32 = 151645;

/// The 11 MB tokenizer, parsed once per test binary.
fn tokenizer() -> Arc<Tokenizer> {
    static TOKENIZER: OnceLock<Arc<Tokenizer>> = OnceLock::new();
    TOKENIZER
        .get_or_init(|| {
            let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/tokenizers/qwen3/tokenizer.json");
            assert!(
                path.is_file(),
                "the Qwen3 tokenizer is missing at {}: these tests need ../shared beside the workspace",
                path.display()
            );
            let t = Tokenizer::from_file(&path)
                .unwrap_or_else(|e| panic!("cannot load the Qwen3 tokenizer at {}: {e}", path.display()));
            Arc::new(t)
        })
        .clone()
}

fn ids(text: &str) -> Vec<u32> {
    tokenizer().encode(text, false).expect("encode").get_ids().to_vec()
}

fn decode(ids: &[u32]) -> String {
    tokenizer().decode(ids, true).expect("decode")
}

fn conditions(stop: &[&str], max_tokens: usize) -> StopConditions {
    StopConditions {
        eos_token_ids: vec![151643, IM_END],
        stop: stop.iter().map(|s| s.to_string()).collect(),
        max_tokens,
        max_model_len: 1 << 20,
        ignore_eos: false,
        ..Default::default()
    }
}

fn decoder(stop: &[&str], max_tokens: usize) -> RequestDecoder {
    RequestDecoder::new(tokenizer(), conditions(stop, max_tokens), 4).unwrap()
}

/// Pushes every id of `fragment`; returns the text emitted and the finish reason, if any.
fn push_text(d: &mut RequestDecoder, fragment: &str) -> (String, Option<FinishReason>) {
    let mut text = String::new();
    for id in ids(fragment) {
        let e = d.push(id).unwrap();
        text.push_str(&e.text);
        if e.finish.is_some() {
            return (text, e.finish);
        }
    }
    (text, None)
}

/// Streams `ids` through a fresh detokenizer, checking that no chunk carries a partial character.
fn stream(ids: &[u32]) -> (Vec<String>, String) {
    let mut d = IncrementalDetokenizer::new(tokenizer(), true);
    let mut chunks = Vec::new();
    for &id in ids {
        let chunk = d.push(id).unwrap();
        assert!(!chunk.contains('\u{FFFD}'), "chunk {chunk:?} after id {id} holds a replacement character");
        chunks.push(chunk);
    }
    let tail = d.finish().unwrap();
    let all = chunks.concat() + &tail;
    assert_eq!(tail, "", "every character completed, nothing should be left for finish()");
    (chunks, all)
}

#[test]
fn multibyte_characters_split_over_tokens_stream_whole() {
    let text = "你好，世界！🎉😀👨‍👩‍👧 naïve café ∑ 𝔸 ꙮ 龘";
    let ids = ids(text);
    let split = ids.iter().filter(|&&id| decode(&[id]).contains('\u{FFFD}')).count();
    assert!(split >= 4, "expected several tokens holding part of a character, found {split} in {ids:?}");
    let (chunks, all) = stream(&ids);
    assert!(chunks.iter().any(String::is_empty), "no token was held back: {chunks:?}");
    assert_eq!(all, decode(&ids));
    assert_eq!(all, text);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn any_text_streams_to_its_full_decode(
        pieces in prop::collection::vec(
            prop::sample::select(vec!["a", " the", "é", "ß", "你", "好", "龘", "𝔸", "∑", "🎉", "👨‍👩‍👧", "ꙮ", "\n", " ", "ٱ", "ก"]),
            1..24,
        )
    ) {
        let text = pieces.concat();
        let ids = ids(&text);
        let (_, all) = stream(&ids);
        prop_assert_eq!(&all, &decode(&ids));
        prop_assert_eq!(all, text);
    }

    #[test]
    fn streamed_output_is_the_full_text_cut_at_the_first_stop_string(
        pieces in prop::collection::vec(
            prop::sample::select(vec!["ab", "c", " STOP", "ST", "OP", "S", "你好", "𝔸", "é", "\n", "#", " ##"]),
            1..20,
        ),
        stops in prop::collection::vec(prop::sample::select(vec!["STOP", "##", "好𝔸", "\n\n", "c#", "é"]), 0..3),
    ) {
        let text = pieces.concat();
        let ids = ids(&text);
        let full = decode(&ids);
        // The stop string that ends first in the whole text (the longer one on a tie) decides.
        let first = stops
            .iter()
            .filter_map(|s| full.find(s).map(|start| (start + s.len(), start, *s)))
            .min_by_key(|&(end, start, _)| (end, start));
        let mut d = decoder(&stops, ids.len());
        let mut out = String::new();
        let mut finish = None;
        for &id in &ids {
            let e = d.push(id).unwrap();
            out.push_str(&e.text);
            if e.finish.is_some() {
                finish = e.finish;
                break;
            }
        }
        match first {
            Some((_, start, s)) => {
                prop_assert_eq!(&out, &full[..start]);
                prop_assert_eq!(finish, Some(FinishReason::StopString(s.to_string())));
            }
            None => {
                prop_assert_eq!(&out, &full);
                prop_assert_eq!(finish, Some(FinishReason::MaxTokens));
            }
        }
        prop_assert_eq!(d.text(), out.as_str());
    }
}

#[test]
fn a_character_that_never_completes_is_flushed_by_finish() {
    let partial = ids(" 𝔸")[0];
    let mut d = IncrementalDetokenizer::new(tokenizer(), true);
    assert_eq!(d.push(partial).unwrap(), "");
    let tail = d.finish().unwrap();
    assert!(tail.ends_with('\u{FFFD}'), "{tail:?}");
    assert_eq!(tail, decode(&[partial]));
}

#[test]
fn ids_past_the_tokenizers_vocabulary_add_no_text_and_are_kept() {
    // Qwen3's checkpoints have 151,936 logits rows over the tokenizer's 151,669 ids: a model may
    // sample a padding id, which must not end its request.
    let padding = 151_700;
    assert!(tokenizer().id_to_token(padding).is_none());
    let mut d = IncrementalDetokenizer::new(tokenizer(), true);
    let mut text = String::new();
    let mut pushed = ids("Hello");
    pushed.push(padding);
    pushed.extend(ids(" world"));
    for &id in &pushed {
        text += &d.push(id).unwrap();
    }
    text += &d.finish().unwrap();
    assert_eq!((text.as_str(), d.ids()), ("Hello world", pushed.as_slice()));
    assert_eq!(decoder(&[], 8).push(u32::MAX).unwrap().text, "");
}

#[test]
fn stop_string_over_two_tokens_is_cut_and_ends_the_request() {
    assert_eq!((ids(" ST").len(), ids("OP").len()), (1, 1), "the fragments should be one token each");
    let mut d = decoder(&["STOP"], 64);
    assert_eq!(push_text(&mut d, "Say"), ("Say".to_string(), None));
    assert_eq!(push_text(&mut d, " ST"), (" ".to_string(), None));
    assert_eq!(push_text(&mut d, "OP"), (String::new(), Some(FinishReason::StopString("STOP".into()))));
    assert_eq!(d.text(), "Say ");
    assert_eq!(d.token_ids(), [ids("Say"), ids(" ST"), ids("OP")].concat());
    let err = d.push(ids(" now")[0]).unwrap_err().to_string();
    assert!(err.contains("already finished"), "{err}");
}

#[test]
fn stop_string_over_three_tokens_is_cut_and_ends_the_request() {
    for piece in [" S", "T", "OP"] {
        assert_eq!(ids(piece).len(), 1, "{piece:?} should be one token");
    }
    let mut d = decoder(&["STOP"], 64);
    assert_eq!(push_text(&mut d, "Go"), ("Go".to_string(), None));
    assert_eq!(push_text(&mut d, " S"), (" ".to_string(), None));
    assert_eq!(push_text(&mut d, "T"), (String::new(), None));
    assert_eq!(push_text(&mut d, "OP"), (String::new(), Some(FinishReason::StopString("STOP".into()))));
    assert_eq!(d.text(), "Go ");
}

#[test]
fn held_text_is_released_when_the_match_fails() {
    let mut d = decoder(&["STOP"], 64);
    assert_eq!(push_text(&mut d, "Go"), ("Go".to_string(), None));
    assert_eq!(push_text(&mut d, " ST"), (" ".to_string(), None));
    assert_eq!(push_text(&mut d, "AY"), ("STAY".to_string(), None));
    assert_eq!(push_text(&mut d, " home"), (" home".to_string(), None));
    assert_eq!(d.text(), "Go STAY home");
}

#[test]
fn stop_string_whose_bytes_span_tokens_is_cut_before_it() {
    let mut d = decoder(&["𝔸"], 64);
    let (text, finish) = push_text(&mut d, "x 𝔸 y");
    assert_eq!((text.as_str(), finish), ("x ", Some(FinishReason::StopString("𝔸".into()))));
    assert!(ids("x 𝔸 y").len() > d.token_ids().len(), "the request should end before \" y\"");
}

#[test]
fn eos_ends_the_request_unrendered_and_releases_held_text() {
    let mut d = decoder(&["Hi there"], 64);
    assert_eq!(push_text(&mut d, "Hi"), (String::new(), None), "\"Hi\" may start the stop string");
    let e = d.push(IM_END).unwrap();
    assert_eq!(e, Emitted { text: "Hi".into(), finish: Some(FinishReason::Eos) });
    assert_eq!(d.token_ids().last(), Some(&IM_END));
    assert_eq!(FinishReason::Eos.as_openai(), "stop");
}

#[test]
fn ignore_eos_keeps_going_and_still_does_not_render_eos() {
    // An ordinary token as the eos id, so that rendering it would show in the text.
    let bang = ids("!")[0];
    let stop = StopConditions { eos_token_ids: vec![bang], ignore_eos: true, ..conditions(&[], 3) };
    let mut d = RequestDecoder::new(tokenizer(), stop.clone(), 1).unwrap();
    let hi = ids("Hi")[0];
    assert_eq!(d.push(hi).unwrap().finish, None);
    assert_eq!(d.push(bang).unwrap(), Emitted { text: String::new(), finish: None });
    assert_eq!(d.push(hi).unwrap().finish, Some(FinishReason::MaxTokens));
    assert_eq!(d.text(), "HiHi");
    assert_eq!(d.token_ids(), [hi, bang, hi]);
    let mut d = RequestDecoder::new(tokenizer(), StopConditions { ignore_eos: false, ..stop }, 1).unwrap();
    d.push(hi).unwrap();
    assert_eq!(d.push(bang).unwrap().finish, Some(FinishReason::Eos));
}

#[test]
fn max_tokens_ends_the_request_and_flushes_a_partial_character() {
    let mut d = decoder(&[], 3);
    let words = ids(" one two three four");
    let finishes: Vec<_> = words[..3].iter().map(|&id| d.push(id).unwrap().finish).collect();
    assert_eq!(finishes, [None, None, Some(FinishReason::MaxTokens)]);
    assert_eq!(d.text(), decode(&words[..3]));
    assert_eq!(FinishReason::MaxTokens.as_openai(), "length");

    let partial = ids(" 𝔸")[0];
    let mut d = decoder(&[], 1);
    let e = d.push(partial).unwrap();
    assert_eq!(e, Emitted { text: decode(&[partial]), finish: Some(FinishReason::MaxTokens) });
}

#[test]
fn model_length_ends_the_request_after_prompt_plus_generated_tokens() {
    let word = ids(" word")[0];
    let limits = StopConditions { max_model_len: 13, ..conditions(&[], 100) };
    let mut d = RequestDecoder::new(tokenizer(), limits.clone(), 10).unwrap();
    let finishes: Vec<_> = (0..3).map(|_| d.push(word).unwrap().finish).collect();
    assert_eq!(finishes, [None, None, Some(FinishReason::ModelLength)]);
    assert_eq!(FinishReason::ModelLength.as_openai(), "length");
    // Both limits on the same token: max_tokens is reported.
    let mut d = RequestDecoder::new(tokenizer(), StopConditions { max_tokens: 3, ..limits.clone() }, 10).unwrap();
    let last = (0..3).map(|_| d.push(word).unwrap().finish).last().flatten();
    assert_eq!(last, Some(FinishReason::MaxTokens));
    let err = RequestDecoder::new(tokenizer(), limits, 13).err().expect("a full prompt is refused").to_string();
    assert!(err.contains("prompt_len") && err.contains("13"), "{err}");
}

#[test]
fn a_stop_token_ends_the_request_unrendered_unless_included_and_even_under_ignore_eos() {
    let bang = ids("!")[0];
    let hi = ids("Hi")[0];
    for (include, text) in [(false, "Hi"), (true, "Hi!")] {
        let stop = StopConditions {
            stop_token_ids: vec![bang],
            include_stop_str_in_output: include,
            ignore_eos: true,
            ..conditions(&["Hi there"], 8)
        };
        let mut d = RequestDecoder::new(tokenizer(), stop, 1).unwrap();
        assert_eq!(d.push(hi).unwrap().text, "", "\"Hi\" may start the stop string");
        let e = d.push(bang).unwrap();
        assert_eq!(e, Emitted { text: text.into(), finish: Some(FinishReason::StopToken(bang)) }, "include {include}");
        assert_eq!(d.token_ids(), [hi, bang]);
    }
    assert_eq!(FinishReason::StopToken(bang).as_openai(), "stop");
}

#[test]
fn include_stop_str_in_output_keeps_the_matched_stop_string() {
    let stop = StopConditions { include_stop_str_in_output: true, ..conditions(&["STOP"], 64) };
    let mut d = RequestDecoder::new(tokenizer(), stop, 1).unwrap();
    let (first, _) = push_text(&mut d, "say ST");
    let (second, finish) = push_text(&mut d, "OP now");
    assert_eq!(finish, Some(FinishReason::StopString("STOP".into())));
    assert_eq!(format!("{first}{second}"), "say STOP");
    assert_eq!(d.text(), "say STOP");
}
