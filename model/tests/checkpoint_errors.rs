//! Every kind of bad checkpoint stops the load with an error, never a panic, and the message
//! names the file and (where one is at fault) the tensor, with what was expected and found.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use model::checkpoint::{load_weights, save_checkpoint, StoredDtype, TensorBytes, INDEX_FILE, SINGLE_FILE};
use model::config::ModelConfig;
use model::Error;
use ndarray::Array2;
use safetensors::Dtype;

use common::{encoded, last_tensor_in_file, tiny, write_safetensors, Scratch};

const K_PROJ: &str = "model.layers.1.self_attn.k_proj.weight";
const SIGMA: &str = "model.layers.0.self_attn.hp1_sigma";

/// Writes the tiny model's tensors after `edit` into a fresh single-file checkpoint.
fn write_edited(label: &str, edit: impl FnOnce(&mut Vec<(String, TensorBytes)>)) -> (Scratch, ModelConfig) {
    let scratch = Scratch::new(label);
    let (cfg, weights) = tiny(1);
    let mut tensors = encoded(&cfg, &weights, StoredDtype::Bf16);
    edit(&mut tensors);
    write_safetensors(&scratch.path().join(SINGLE_FILE), tensors);
    (scratch, cfg)
}

fn load_err(dir: &Path, cfg: &ModelConfig) -> (Error, String) {
    let err = load_weights::<f32>(dir, cfg, &mut |_, _| {}).expect_err("the checkpoint is bad");
    let msg = err.to_string();
    (err, msg)
}

fn assert_names(msg: &str, parts: &[&str]) {
    for part in parts {
        assert!(msg.contains(part), "message lacks `{part}`: {msg}");
    }
}

fn file_str(dir: &Path, name: &str) -> String {
    dir.join(name).display().to_string()
}

fn replace(tensors: &mut [(String, TensorBytes)], name: &str, with: TensorBytes) {
    let slot = tensors.iter_mut().find(|(n, _)| n == name).expect("the tensor exists");
    slot.1 = with;
}

#[test]
fn missing_tensor() {
    let (dir, cfg) = write_edited("missing", |t| t.retain(|(n, _)| n != K_PROJ));
    let (err, msg) = load_err(dir.path(), &cfg);
    assert!(matches!(err, Error::MissingTensor { .. }), "{msg}");
    assert_names(&msg, &[&file_str(dir.path(), SINGLE_FILE), K_PROJ]);
}

#[test]
fn wrong_shape() {
    let (dir, cfg) = write_edited("shape", |t| {
        replace(t, K_PROJ, TensorBytes::encode(&Array2::<f32>::zeros((33, 64)).into_dyn().view(), StoredDtype::Bf16))
    });
    let (err, msg) = load_err(dir.path(), &cfg);
    assert!(matches!(err, Error::Shape { .. }), "{msg}");
    // k_proj is [Hkv * D, hidden] = [2 * 16, 64].
    assert_names(&msg, &[&file_str(dir.path(), SINGLE_FILE), K_PROJ, "[33, 64]", "[32, 64]"]);
}

#[test]
fn norm_alpha_of_a_third_shape() {
    let alpha = "model.layers.0.input_layernorm.alpha";
    let (dir, cfg) = write_edited("norm-shape", |t| {
        replace(t, alpha, TensorBytes::encode(&ndarray::Array1::<f32>::ones(2).into_dyn().view(), StoredDtype::Bf16))
    });
    let (_, msg) = load_err(dir.path(), &cfg);
    assert_names(&msg, &[alpha, "[2]", "[1] or [64]"]);
}

#[test]
fn wrong_dtype() {
    let (dir, cfg) = write_edited("dtype", |t| replace(t, SIGMA, TensorBytes::raw(Dtype::I32, vec![4], vec![0; 16])));
    let (err, msg) = load_err(dir.path(), &cfg);
    assert!(matches!(err, Error::Dtype { .. }), "{msg}");
    assert_names(&msg, &[&file_str(dir.path(), SINGLE_FILE), SIGMA, "I32", "BF16, F16 or F32"]);
}

#[test]
fn non_finite_value() {
    let (dir, cfg) = write_edited("nan", |t| {
        let values = ndarray::arr1(&[0.5f32, 1.0, f32::NAN, 2.0]).into_dyn();
        replace(t, SIGMA, TensorBytes::encode(&values.view(), StoredDtype::F32))
    });
    let (err, msg) = load_err(dir.path(), &cfg);
    assert!(matches!(err, Error::NonFinite { index: 2, .. }), "{msg}");
    assert_names(&msg, &[&file_str(dir.path(), SINGLE_FILE), SIGMA, "NaN"]);
    // The GPU's bf16 load copies bf16 bits without widening them, and still checks them.
    let (dir, cfg) = write_edited("nan-bf16", |t| {
        let values = ndarray::arr1(&[0.5f32, f32::INFINITY, 1.0, 2.0]).into_dyn();
        replace(t, SIGMA, TensorBytes::encode(&values.view(), StoredDtype::Bf16))
    });
    let err = load_weights::<half::bf16>(dir.path(), &cfg, &mut |_, _| {}).expect_err("an infinity is refused");
    assert!(matches!(err, Error::NonFinite { index: 1, .. }), "{err}");
    assert_names(&err.to_string(), &[SIGMA, "inf"]);
}

#[test]
fn truncated_file() {
    let (dir, cfg) = write_edited("truncated", |_| {});
    let path = dir.path().join(SINGLE_FILE);
    let cut = last_tensor_in_file(&path);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
    let (err, msg) = load_err(dir.path(), &cfg);
    assert!(matches!(err, Error::Truncated { .. }), "{msg}");
    assert_names(&msg, &[&path.display().to_string(), &cut, "truncated"]);
    // Cut inside the header: the file is still named, the header blamed.
    std::fs::write(&path, &bytes[..40]).unwrap();
    let (err, msg) = load_err(dir.path(), &cfg);
    assert!(matches!(err, Error::Truncated { .. }), "{msg}");
    assert_names(&msg, &[&path.display().to_string(), "header length"]);
}

#[test]
fn corrupt_header() {
    let (dir, cfg) = write_edited("corrupt", |_| {});
    let path = dir.path().join(SINGLE_FILE);
    let good = std::fs::read(&path).unwrap();
    // Corrupt one entry's dtype in place (same length, so every offset still holds).
    let text = String::from_utf8_lossy(&good).into_owned();
    let at = text.find(&format!("\"{SIGMA}\"")).expect("the header names sigma");
    let dtype_at = at + text[at..].find("\"BF16\"").unwrap() + 1;
    let mut bad = good.clone();
    bad[dtype_at..dtype_at + 4].copy_from_slice(b"XF16");
    std::fs::write(&path, &bad).unwrap();
    let (err, msg) = load_err(dir.path(), &cfg);
    assert!(matches!(err, Error::CorruptHeader { .. }), "{msg}");
    assert_names(&msg, &[&path.display().to_string(), SIGMA, "corrupt header"]);
    // Break the JSON itself: no tensor can be named, the file still is.
    let mut bad = good;
    bad[8] = b'#';
    std::fs::write(&path, &bad).unwrap();
    let (err, msg) = load_err(dir.path(), &cfg);
    assert!(matches!(err, Error::CorruptHeader { .. }), "{msg}");
    assert_names(&msg, &[&path.display().to_string(), "JSON"]);
}

#[test]
fn missing_lm_head_when_untied() {
    let (dir, mut cfg) = write_edited("untied", |_| {});
    cfg.tie_word_embeddings = false;
    let (err, msg) = load_err(dir.path(), &cfg);
    assert!(matches!(err, Error::MissingTensor { .. }), "{msg}");
    assert_names(&msg, &[&file_str(dir.path(), SINGLE_FILE), "lm_head.weight"]);
}

#[test]
fn no_checkpoint_file() {
    let scratch = Scratch::new("empty");
    let (cfg, _) = tiny(1);
    let (err, msg) = load_err(scratch.path(), &cfg);
    assert!(matches!(err, Error::NoCheckpoint { .. }), "{msg}");
    assert_names(&msg, &[&scratch.path().display().to_string(), SINGLE_FILE, INDEX_FILE]);
}

/// Writes a two-shard checkpoint whose index maps every tensor to one of the two shards.
fn write_sharded(label: &str) -> (Scratch, ModelConfig, BTreeMap<String, String>) {
    let scratch = Scratch::new(label);
    let (cfg, weights) = tiny(2);
    let mut shards: [Vec<_>; 2] = [Vec::new(), Vec::new()];
    let mut map = BTreeMap::new();
    for (i, (name, bytes)) in encoded(&cfg, &weights, StoredDtype::Bf16).into_iter().enumerate() {
        map.insert(name.clone(), format!("shard-{}.safetensors", i % 2));
        shards[i % 2].push((name, bytes));
    }
    for (k, shard) in shards.into_iter().enumerate() {
        write_safetensors(&scratch.path().join(format!("shard-{k}.safetensors")), shard);
    }
    write_index(scratch.path(), &map);
    (scratch, cfg, map)
}

fn write_index(dir: &Path, map: &BTreeMap<String, String>) {
    std::fs::write(dir.join(INDEX_FILE), serde_json::json!({ "weight_map": map }).to_string()).unwrap();
}

#[test]
fn missing_shard() {
    let (dir, cfg, map) = write_sharded("no-shard");
    std::fs::remove_file(dir.path().join("shard-1.safetensors")).unwrap();
    let (err, msg) = load_err(dir.path(), &cfg);
    assert!(matches!(err, Error::MissingShard { .. }), "{msg}");
    let first_in_shard_1 = map.iter().find(|(_, s)| s.as_str() == "shard-1.safetensors").unwrap().0;
    assert_names(&msg, &[&file_str(dir.path(), INDEX_FILE), "shard-1.safetensors", first_in_shard_1]);
}

#[test]
fn index_points_to_the_wrong_shard() {
    let (dir, cfg, mut map) = write_sharded("wrong-shard");
    let wrong = if map[K_PROJ] == "shard-0.safetensors" { "shard-1.safetensors" } else { "shard-0.safetensors" };
    map.insert(K_PROJ.into(), wrong.into());
    write_index(dir.path(), &map);
    let (err, msg) = load_err(dir.path(), &cfg);
    assert!(matches!(err, Error::MissingTensor { .. }), "{msg}");
    assert_names(&msg, &[&file_str(dir.path(), wrong), K_PROJ]);
}

#[test]
fn tensor_absent_from_the_index() {
    let (dir, cfg, mut map) = write_sharded("not-indexed");
    map.remove(K_PROJ);
    write_index(dir.path(), &map);
    let (_, msg) = load_err(dir.path(), &cfg);
    assert_names(&msg, &[&file_str(dir.path(), INDEX_FILE), K_PROJ, "missing"]);
}

#[test]
fn corrupt_index_json() {
    let (dir, cfg, _) = write_sharded("bad-index");
    std::fs::write(dir.path().join(INDEX_FILE), "{\"weight_map\": [1, 2]}").unwrap();
    let (err, msg) = load_err(dir.path(), &cfg);
    assert!(matches!(err, Error::Json { .. }), "{msg}");
    assert_names(&msg, &[&file_str(dir.path(), INDEX_FILE), "weight_map"]);
}

#[test]
fn writer_refuses_weights_that_disagree_with_the_config() {
    let scratch = Scratch::new("writer");
    let (cfg, mut weights) = tiny(4);
    let target: PathBuf = scratch.path().join("out");
    weights.layers[1].attn.k_proj = Array2::zeros((33, 64));
    let msg = save_checkpoint(&target, &cfg, &weights, StoredDtype::Bf16).unwrap_err().to_string();
    assert_names(&msg, &[&target.join(SINGLE_FILE).display().to_string(), K_PROJ, "[33, 64]", "[32, 64]"]);
    assert!(!target.exists(), "nothing is written for refused weights");

    let (cfg, mut weights) = tiny(4);
    weights.layers.pop();
    let msg = save_checkpoint(&target, &cfg, &weights, StoredDtype::Bf16).unwrap_err().to_string();
    assert_names(&msg, &["num_hidden_layers", "1 layers"]);

    let (mut cfg, weights) = tiny(4);
    cfg.tie_word_embeddings = false;
    let msg = save_checkpoint(&target, &cfg, &weights, StoredDtype::Bf16).unwrap_err().to_string();
    assert_names(&msg, &["lm_head.weight", "missing"]);
}
