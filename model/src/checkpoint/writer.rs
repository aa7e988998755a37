//! Writing a checkpoint folder: `config.json` and one `model.safetensors`, named by the same
//! table the reader uses, so whatever is written loads back.

use std::collections::HashMap;
use std::path::Path;

use oracle::model::weights::ModelWeights;

use super::convert::{StoredDtype, TensorBytes};
use super::names::{self, named_tensors};
use super::SINGLE_FILE;
use crate::config::{ModelConfig, CONFIG_FILE};
use crate::error::{Error, Result};

/// Writes `cfg` (its `torch_dtype` set to `dtype`) and `weights`, stored as `dtype`, into `dir`,
/// creating it if needed.
///
/// The weights are checked against the config first (layer count, every shape, `lm_head` present
/// exactly when untied), so a checkpoint that would not load is never written.
pub fn save_checkpoint(dir: &Path, cfg: &ModelConfig, weights: &ModelWeights<f32>, dtype: StoredDtype) -> Result<()> {
    cfg.validate()?;
    let file = dir.join(SINGLE_FILE);
    if weights.layers.len() != cfg.num_hidden_layers {
        return Err(Error::Config {
            field: "num_hidden_layers",
            reason: format!("is {} but the weights have {} layers", cfg.num_hidden_layers, weights.layers.len()),
        });
    }
    match (cfg.tie_word_embeddings, weights.lm_head.is_some()) {
        (true, true) => {
            return Err(Error::Config {
                field: "tie_word_embeddings",
                reason: "is true but the weights carry their own lm_head".into(),
            })
        }
        (false, false) => return Err(Error::MissingTensor { file, tensor: names::LM_HEAD.into() }),
        _ => {}
    }
    let dims = cfg.dims();
    let mut tensors = Vec::new();
    for t in named_tensors(weights, &dims) {
        if !t.rule.accepts(t.view.shape()) {
            return Err(Error::Shape {
                file,
                tensor: t.name,
                got: t.view.shape().to_vec(),
                expected: t.rule.to_string(),
            });
        }
        tensors.push((t.name, TensorBytes::encode(&t.view, dtype)));
    }
    std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
    let mut stored_cfg = cfg.clone();
    stored_cfg.torch_dtype = dtype.torch_name().into();
    let cfg_path = dir.join(CONFIG_FILE);
    std::fs::write(&cfg_path, stored_cfg.to_json()).map_err(Error::io(&cfg_path))?;
    // "format": "pt" is what Hugging Face loaders expect in the header metadata.
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize_to_file(tensors, Some(metadata), &file).map_err(|e| match e {
        safetensors::SafeTensorError::IoError(source) => Error::Io { path: file.clone(), source },
        other => Error::Serialize { file: file.clone(), reason: other.to_string() },
    })
}
