//! Every rule of `ModelConfig::validate` refuses a config that breaks it, with an error that
//! names the field and shows the value given; configs that bend only the lenient rules load.

mod common;

use std::path::Path;

use model::config::ModelConfig;
use model::presets::Preset;
use model::Error;
use serde_json::{json, Value};

/// The tiny preset's config.json with `edit` applied, parsed and validated.
fn parse_edited(edit: impl FnOnce(&mut Value)) -> Result<ModelConfig, Error> {
    let mut value: Value = serde_json::from_str(&Preset::Tiny.config().to_json()).unwrap();
    edit(&mut value);
    ModelConfig::from_json(&value.to_string(), Path::new("/ckpt/config.json"))
}

/// Asserts that setting `path` (dotted) to `bad` is refused naming `field` and showing `shown`.
fn refused(path: &str, bad: Value, field: &str, shown: &str) {
    let err = parse_edited(|v| {
        let mut slot = v;
        for key in path.split('.') {
            slot = &mut slot[key];
        }
        *slot = bad.clone();
    })
    .expect_err(&format!("{path} = {bad} must be refused"));
    match &err {
        Error::Config { field: f, .. } => assert_eq!(*f, field, "{err}"),
        other => panic!("{path} = {bad}: expected a config error, got {other}"),
    }
    let msg = err.to_string();
    assert!(msg.contains(&format!("`{field}`")) && msg.contains(shown), "{path} = {bad}: {msg}");
}

#[test]
fn heads_not_divisible_by_kv_heads() {
    refused("num_key_value_heads", json!(3), "num_key_value_heads", "got 3");
}

#[test]
fn clip_min_below_zero() {
    refused("hp1.clip_min", json!(-0.5), "hp1.clip_min", "-0.5");
}

#[test]
fn clip_min_not_below_clip_max() {
    refused("hp1.clip_max", json!(0.0), "hp1.clip_max", "got 0");
    refused("hp1.clip_min", json!(2.0), "hp1.clip_max", "clip_min = 2");
}

#[test]
fn fir_k_below_one() {
    refused("hp1.fir_k", json!(0), "hp1.fir_k", "got 0");
}

#[test]
fn hidden_act_not_silu() {
    refused("hidden_act", json!("gelu"), "hidden_act", "gelu");
}

#[test]
fn zero_sizes() {
    for field in [
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
    ] {
        refused(field, json!(0), field, "got 0");
    }
}

#[test]
fn wrong_architecture_and_model_type() {
    refused("architectures", json!(["LlamaForCausalLM"]), "architectures", "LlamaForCausalLM");
    refused("model_type", json!("qwen3"), "model_type", "qwen3");
}

#[test]
fn other_rules() {
    refused("attention_bias", json!(true), "attention_bias", "got true");
    refused("eos_token_id", json!([1, 512]), "eos_token_id", "got 512");
    refused("head_dim", json!(15), "head_dim", "got 15");
    refused("rope_theta", json!(-1.0), "rope_theta", "-1");
    refused("hp1.scale", json!(-0.1), "hp1.scale", "-0.1");
}

#[test]
fn zero_heads_without_head_dim_is_refused_not_a_panic() {
    let err = parse_edited(|v| {
        v.as_object_mut().unwrap().remove("head_dim");
        v["num_attention_heads"] = json!(0);
    })
    .unwrap_err();
    assert!(matches!(err, Error::Config { .. }), "{err}");
}

#[test]
fn lenient_forms_load() {
    let cfg = parse_edited(|v| {
        v["eos_token_id"] = json!(510);
        v["hp1"]["scale"] = Value::Null;
        v["some_future_field"] = json!({"a": [1, 2]});
        v.as_object_mut().unwrap().remove("head_dim");
    })
    .unwrap();
    assert_eq!(cfg.eos_token_id, vec![510]);
    assert_eq!(cfg.head_dim, 64 / 4);
    assert_eq!(cfg.dims().hp1.scale, 0.25);
}

#[test]
fn bad_json_names_the_file_and_field() {
    let err = parse_edited(|v| v["hidden_size"] = json!("wide")).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("/ckpt/config.json") && msg.contains("invalid type"), "{msg}");
    let err = parse_edited(|v| {
        v.as_object_mut().unwrap().remove("tie_word_embeddings");
    })
    .unwrap_err();
    assert!(err.to_string().contains("tie_word_embeddings"), "{err}");
}

#[test]
fn load_reads_the_folder_and_names_a_missing_file() {
    let scratch = common::Scratch::new("config");
    let err = ModelConfig::load(scratch.path()).unwrap_err();
    assert!(matches!(err, Error::Io { .. }) && err.to_string().contains("config.json"), "{err}");
    common::write_config(scratch.path(), &Preset::Small.config());
    assert_eq!(ModelConfig::load(scratch.path()).unwrap(), Preset::Small.config());
}
