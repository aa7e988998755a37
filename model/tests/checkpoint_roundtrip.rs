//! Checkpoints load back to exactly the weights written: a generated `asynct-tiny`, an untied
//! model, f16 and f32 storage, loading into f64 and into the GPU's raw bf16, and a hand-written
//! two-shard checkpoint.

mod common;

use std::collections::BTreeMap;

use half::{bf16, f16};
use model::byte_tokenizer;
use model::checkpoint::{load_weights, named_tensors, save_checkpoint, StoredDtype, INDEX_FILE};
use model::config::ModelConfig;
use model::presets::{generate, Preset};
use ndarray::Array2;
use oracle::model::init::random_weights;
use oracle::model::weights::ModelWeights;

use common::{encoded, tiny, write_config, write_safetensors, Scratch};

fn load_f32(dir: &std::path::Path, cfg: &ModelConfig) -> ModelWeights<f32> {
    load_weights::<f32>(dir, cfg, &mut |_, _| {}).unwrap()
}

/// `weights` with every value passed through `f`.
fn mapped<T: Clone, U>(weights: &ModelWeights<T>, f: impl Fn(T) -> U + Copy) -> ModelWeights<U> {
    let m2 = |a: &Array2<T>| a.mapv(|x| f(x.clone()));
    let m1 = |a: &ndarray::Array1<T>| a.mapv(|x| f(x.clone()));
    let norm = |n: &oracle::model::weights::UClipNormWeights<T>| oracle::model::weights::UClipNormWeights {
        alpha: m1(&n.alpha),
        weight: m1(&n.weight),
        bias: n.bias.as_ref().map(m1),
    };
    ModelWeights {
        embed_tokens: m2(&weights.embed_tokens),
        layers: weights
            .layers
            .iter()
            .map(|l| oracle::model::weights::LayerWeights {
                attn: oracle::model::weights::AttnWeights {
                    q_proj: m2(&l.attn.q_proj),
                    k_proj: m2(&l.attn.k_proj),
                    v_proj: m2(&l.attn.v_proj),
                    o_proj: m2(&l.attn.o_proj),
                    q_norm: norm(&l.attn.q_norm),
                    k_norm: norm(&l.attn.k_norm),
                    hp1_sigma: m1(&l.attn.hp1_sigma),
                    hp1_gamma: m1(&l.attn.hp1_gamma),
                },
                gate_proj: m2(&l.gate_proj),
                up_proj: m2(&l.up_proj),
                down_proj: m2(&l.down_proj),
                input_layernorm: norm(&l.input_layernorm),
                post_attention_layernorm: norm(&l.post_attention_layernorm),
                pre_feedforward_layernorm: norm(&l.pre_feedforward_layernorm),
                post_feedforward_layernorm: norm(&l.post_feedforward_layernorm),
            })
            .collect(),
        norm: norm(&weights.norm),
        lm_head: weights.lm_head.as_ref().map(m2),
    }
}

#[test]
fn generated_tiny_loads_back_exactly_with_its_config_and_tokenizer() {
    let scratch = Scratch::new("tiny");
    let dir = scratch.path().join("asynct-tiny");
    generate(Preset::Tiny, &dir, 7).unwrap();
    let cfg = ModelConfig::load(&dir).unwrap();
    assert_eq!(cfg, Preset::Tiny.config());
    let want = random_weights(&cfg.dims(), 7);
    let mut calls = Vec::new();
    let got = load_weights::<f32>(&dir, &cfg, &mut |done, total| calls.push((done, total))).unwrap();
    // random_weights gives bf16 values, so the bf16 file holds them exactly.
    assert_eq!(got, want);
    assert_ne!(got, random_weights(&cfg.dims(), 8), "the seed must matter");
    let total = named_tensors(&want, &cfg.dims()).len();
    assert_eq!(calls, (1..=total).map(|done| (done, total)).collect::<Vec<_>>());
    let tokenizer = std::fs::read_to_string(dir.join("tokenizer.json")).unwrap();
    assert_eq!(tokenizer, byte_tokenizer::tokenizer_json().unwrap());
    assert!(dir.join("tokenizer_config.json").is_file());
}

#[test]
fn untied_model_with_lm_head_roundtrips_in_f64() {
    let scratch = Scratch::new("untied");
    let (mut cfg, mut weights) = tiny(11);
    cfg.tie_word_embeddings = false;
    weights.lm_head = Some(weights.embed_tokens.mapv(|x| -x * 0.5));
    save_checkpoint(scratch.path(), &cfg, &weights, StoredDtype::Bf16).unwrap();
    let got = load_weights::<f64>(scratch.path(), &ModelConfig::load(scratch.path()).unwrap(), &mut |_, _| {}).unwrap();
    assert_eq!(got, mapped(&weights, f64::from));
}

#[test]
fn f16_and_f32_storage_load_with_their_rounding() {
    let (cfg, weights) = tiny(3);
    let f32_dir = Scratch::new("f32");
    save_checkpoint(f32_dir.path(), &cfg, &weights, StoredDtype::F32).unwrap();
    assert_eq!(ModelConfig::load(f32_dir.path()).unwrap().torch_dtype, "float32");
    assert_eq!(load_f32(f32_dir.path(), &cfg), weights);

    let f16_dir = Scratch::new("f16");
    save_checkpoint(f16_dir.path(), &cfg, &weights, StoredDtype::F16).unwrap();
    let want = mapped(&weights, |x| f16::from_f32(x).to_f32());
    assert_ne!(want, weights, "some bf16 values are not f16 values, so the case tests conversion");
    assert_eq!(load_f32(f16_dir.path(), &cfg), want);
}

#[test]
fn mixed_dtypes_in_one_file_load() {
    let scratch = Scratch::new("mixed");
    let (cfg, weights) = tiny(5);
    let dims = cfg.dims();
    let dtypes = [StoredDtype::Bf16, StoredDtype::F16, StoredDtype::F32];
    let tensors = named_tensors(&weights, &dims)
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            (
                t.name,
                model::checkpoint::TensorBytes::encode(
                    &t.view.mapv(|x| f16::from_f32(x).to_f32()).view(),
                    dtypes[i % 3],
                ),
            )
        })
        .collect();
    write_config(scratch.path(), &cfg);
    write_safetensors(&scratch.path().join("model.safetensors"), tensors);
    assert_eq!(load_f32(scratch.path(), &cfg), mapped(&weights, |x| f16::from_f32(x).to_f32()));
}

#[test]
fn two_shard_checkpoint_loads_through_its_index() {
    let scratch = Scratch::new("sharded");
    let (cfg, weights) = tiny(9);
    write_config(scratch.path(), &cfg);
    let mut shards: [Vec<_>; 2] = [Vec::new(), Vec::new()];
    let mut weight_map = BTreeMap::new();
    for (i, (name, bytes)) in encoded(&cfg, &weights, StoredDtype::Bf16).into_iter().enumerate() {
        let file = format!("model-0000{}-of-00002.safetensors", i % 2 + 1);
        weight_map.insert(name.clone(), file);
        shards[i % 2].push((name, bytes));
    }
    for (k, shard) in shards.into_iter().enumerate() {
        write_safetensors(&scratch.path().join(format!("model-0000{}-of-00002.safetensors", k + 1)), shard);
    }
    let index = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": weight_map});
    std::fs::write(scratch.path().join(INDEX_FILE), index.to_string()).unwrap();
    assert!(!scratch.path().join("model.safetensors").exists());
    assert_eq!(load_f32(scratch.path(), &cfg), weights);
}

#[test]
fn bf16_loads_copy_bf16_bits_and_round_other_storage_to_nearest() {
    let (cfg, weights) = tiny(13);
    // Values that are not bf16, so the f32 and f16 files test the rounding.
    let fine = mapped(&weights, |x| x * (1.0 + 1.0 / 1024.0));
    for (dtype, name) in [(StoredDtype::Bf16, "bf16"), (StoredDtype::F16, "f16"), (StoredDtype::F32, "f32")] {
        let scratch = Scratch::new(&format!("raw-{name}"));
        save_checkpoint(scratch.path(), &cfg, &fine, dtype).unwrap();
        let stored = load_f32(scratch.path(), &cfg);
        let got = load_weights::<bf16>(scratch.path(), &cfg, &mut |_, _| {}).unwrap();
        let bits = |w: &ModelWeights<bf16>| mapped(w, |x| x.to_bits());
        assert_eq!(bits(&got), bits(&mapped(&stored, bf16::from_f32)), "{name}");
        if dtype != StoredDtype::Bf16 {
            assert_ne!(mapped(&got, f32::from), stored, "{name}: the stored values are not all bf16");
        }
    }
}
