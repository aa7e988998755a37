//! Finding the Qwen3 tokenizer for the large presets: the search order, the error that lists
//! every folder tried, and that generation fails before writing anything when it is missing.

mod common;

use std::path::PathBuf;

use model::presets::{generate_with, Preset, Qwen3TokenizerSearch, QWEN3_TOKENIZER_ENV};
use model::Error;

use common::Scratch;

#[test]
fn empty_env_folder_and_nothing_else_gives_an_error_listing_every_folder() {
    let scratch = Scratch::new("qwen3-missing");
    let env_dir = scratch.path().join("env");
    std::fs::create_dir_all(&env_dir).unwrap();
    let search = Qwen3TokenizerSearch {
        env_dir: Some(env_dir.clone()),
        start_dir: Some(scratch.path().into()),
        build_time_shared: None,
    };
    // The scratch folder's ancestors (the temp dir's) must hold no tokenizer for the case to
    // mean anything; a TMPDIR inside a checkout would break that premise, so say so plainly.
    let stray = search.candidates().into_iter().find(|d| d.join("tokenizer.json").is_file());
    assert!(stray.is_none(), "a Qwen3 tokenizer lies above the temp dir at {stray:?}; set TMPDIR elsewhere");
    let err = search.find().unwrap_err();
    let Error::TokenizerNotFound { searched } = &err else { panic!("expected TokenizerNotFound, got {err}") };
    assert_eq!(searched[0], env_dir);
    assert_eq!(searched[1], scratch.path().join("shared/tokenizers/qwen3"));
    assert_eq!(searched.last(), Some(&PathBuf::from("/shared/tokenizers/qwen3")));
    let msg = err.to_string();
    assert!(msg.contains(&env_dir.display().to_string()) && msg.contains(QWEN3_TOKENIZER_ENV), "{msg}");

    let out = scratch.path().join("out");
    let err = generate_with(Preset::Small, &out, 1, &search).unwrap_err();
    assert!(matches!(err, Error::TokenizerNotFound { .. }), "{err}");
    assert!(!out.exists(), "nothing is written when the tokenizer is missing");
}

#[test]
fn env_folder_wins_then_shared_beside_an_ancestor() {
    let scratch = Scratch::new("qwen3-found");
    let shared = scratch.path().join("shared/tokenizers/qwen3");
    let checkout = scratch.path().join("checkout/model");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::create_dir_all(&checkout).unwrap();
    std::fs::write(shared.join("tokenizer.json"), "{}").unwrap();
    let mut search = Qwen3TokenizerSearch { env_dir: None, start_dir: Some(checkout.clone()), build_time_shared: None };
    assert_eq!(search.find().unwrap(), shared);

    let env_dir = scratch.path().join("env");
    std::fs::create_dir_all(&env_dir).unwrap();
    std::fs::write(env_dir.join("tokenizer.json"), "{}").unwrap();
    search.env_dir = Some(env_dir.clone());
    assert_eq!(search.find().unwrap(), env_dir);
}

#[test]
fn build_time_shared_is_the_last_resort() {
    let scratch = Scratch::new("qwen3-build");
    let build_shared = scratch.path().join("elsewhere/shared");
    std::fs::create_dir_all(build_shared.join("tokenizers/qwen3")).unwrap();
    std::fs::write(build_shared.join("tokenizers/qwen3/tokenizer.json"), "{}").unwrap();
    let search = Qwen3TokenizerSearch {
        env_dir: None,
        start_dir: Some(scratch.path().join("nowhere")),
        build_time_shared: Some(build_shared.clone()),
    };
    assert_eq!(search.find().unwrap(), build_shared.join("tokenizers/qwen3"));
}

#[test]
fn this_checkout_finds_the_real_tokenizer() {
    // The repository's own search (env, cwd ancestors, the build-time shared/) must succeed in
    // this workspace and in CI, where shared/ sits beside the clone.
    let dir = Qwen3TokenizerSearch::from_environment().find().unwrap();
    let tokenizer = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    assert_eq!(tokenizer.token_to_id("<|im_end|>"), Some(151645));
    assert!(tokenizer.get_vocab_size(true) <= Preset::Small.config().vocab_size);
}
