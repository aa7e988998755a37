//! Helpers shared by the checkpoint tests: scratch folders, the tiny model's weights, and
//! writing hand-made safetensors files (so the reader is tested against files its own writer
//! did not produce).

#![allow(dead_code)] // each test binary uses its own subset of these helpers

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use model::checkpoint::{named_tensors, StoredDtype, TensorBytes};
use model::config::ModelConfig;
use model::presets::Preset;
use oracle::model::init::random_weights;
use oracle::model::weights::ModelWeights;

/// A fresh folder under the system temp dir, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(label: &str) -> Self {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join("asynct-model-tests").join(format!("{}-{n}-{label}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("the temp dir is writable");
        Scratch(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The tiny preset's config and its seeded weights.
pub fn tiny(seed: u64) -> (ModelConfig, ModelWeights<f32>) {
    let cfg = Preset::Tiny.config();
    let weights = random_weights(&cfg.dims(), seed);
    (cfg, weights)
}

/// Every tensor of `weights`, named and encoded as `dtype`, in file order.
pub fn encoded(cfg: &ModelConfig, weights: &ModelWeights<f32>, dtype: StoredDtype) -> Vec<(String, TensorBytes)> {
    named_tensors(weights, &cfg.dims()).into_iter().map(|t| (t.name, TensorBytes::encode(&t.view, dtype))).collect()
}

/// Writes `tensors` as one safetensors file.
pub fn write_safetensors(path: &Path, tensors: Vec<(String, TensorBytes)>) {
    safetensors::serialize_to_file(tensors, None, path).expect("test tensors serialize");
}

/// Writes `config.json` for `cfg` into `dir`.
pub fn write_config(dir: &Path, cfg: &ModelConfig) {
    std::fs::write(dir.join("config.json"), cfg.to_json()).expect("the config is writable");
}

/// The name of the tensor whose data ends last in a safetensors file, read from its header.
pub fn last_tensor_in_file(path: &Path) -> String {
    let bytes = std::fs::read(path).expect("the file exists");
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    header
        .iter()
        .filter(|(k, _)| k.as_str() != "__metadata__")
        .max_by_key(|(_, v)| v["data_offsets"][1].as_u64().unwrap())
        .map(|(k, _)| k.clone())
        .unwrap()
}
