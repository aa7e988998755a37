//! Loading a checkpoint folder into [`ModelWeights`]: one `model.safetensors`, or a
//! `model.safetensors.index.json` and its shards, memory-mapped; bf16, f16 and f32 tensors
//! converted to `T` (an [`Element`]: f32 or f64 for the CPU oracle, bf16 for the GPU, which a
//! bf16 checkpoint fills by copying bits).
//!
//! Every tensor of SPEC section 1 is looked up by the names of [`super::names`] and checked
//! against the config's shapes before its bytes are decoded. Tensors the model does not use
//! (including `lm_head.weight` in a tied checkpoint) are ignored, as Hugging Face loaders do.
//! Non-finite values are refused: no trained or generated AsyncT has them, and one NaN would
//! silently poison every logit.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use ndarray::{Array1, Array2, ArrayD, Ix1, Ix2};
use oracle::model::weights::{AttnWeights, LayerWeights, ModelDims, ModelWeights, UClipNormWeights};
use serde::Deserialize;

use super::convert::{decode, Element, StoredDtype};
use super::file::SafetensorsFile;
use super::names::{self, Hp1Vector, Matrix, Norm, NormPart, ShapeRule};
use super::{INDEX_FILE, SINGLE_FILE};
use crate::config::ModelConfig;
use crate::error::{Error, Result};

/// `model.safetensors.index.json`: which shard holds each tensor.
#[derive(Deserialize)]
struct ShardIndex {
    weight_map: BTreeMap<String, String>,
}

/// The files of a checkpoint and where each tensor lives.
struct TensorSource {
    /// The file a missing tensor is reported against: the single file or the index.
    origin: PathBuf,
    files: Vec<SafetensorsFile>,
    /// Tensor name to index into `files`.
    location: HashMap<String, usize>,
}

impl TensorSource {
    fn open(dir: &Path) -> Result<Self> {
        let single = dir.join(SINGLE_FILE);
        if single.is_file() {
            let file = SafetensorsFile::read(&single)?;
            return Ok(TensorSource { origin: single, files: vec![file], location: HashMap::new() });
        }
        let index_path = dir.join(INDEX_FILE);
        if !index_path.is_file() {
            return Err(Error::NoCheckpoint { dir: dir.to_path_buf() });
        }
        let text = std::fs::read_to_string(&index_path).map_err(Error::io(&index_path))?;
        let index: ShardIndex = serde_json::from_str(&text).map_err(|e| Error::Json {
            file: index_path.clone(),
            reason: format!("expected {{\"weight_map\": {{tensor name: shard file}}}}: {e}"),
        })?;
        let mut files = Vec::new();
        let mut shard_of: HashMap<&str, usize> = HashMap::new();
        let mut location = HashMap::new();
        for (tensor, shard) in &index.weight_map {
            let k = match shard_of.get(shard.as_str()) {
                Some(&k) => k,
                None => {
                    let path = dir.join(shard);
                    if !path.is_file() {
                        return Err(Error::MissingShard {
                            index: index_path,
                            shard: shard.clone(),
                            tensor: tensor.clone(),
                        });
                    }
                    files.push(SafetensorsFile::read(&path)?);
                    shard_of.insert(shard, files.len() - 1);
                    files.len() - 1
                }
            };
            location.insert(tensor.clone(), k);
        }
        Ok(TensorSource { origin: index_path, files, location })
    }

    /// The file that holds `name`, if any: for a sharded checkpoint the shard the index names.
    fn file_of(&self, name: &str) -> Option<&SafetensorsFile> {
        if self.location.is_empty() {
            self.files.first()
        } else {
            self.location.get(name).map(|&k| &self.files[k])
        }
    }

    fn contains(&self, name: &str) -> bool {
        self.file_of(name).is_some_and(|f| f.info(name).is_some())
    }

    /// Reads `name`, checking its shape against `rule` and its dtype; `None` if absent.
    fn read<T: Element>(&self, name: &str, rule: &ShapeRule) -> Result<Option<ArrayD<T>>> {
        let Some(file) = self.file_of(name) else { return Ok(None) };
        let Some(info) = file.info(name) else {
            if self.location.is_empty() {
                return Ok(None);
            }
            // The index promised this shard holds the tensor: name the shard, not the index.
            return Err(Error::MissingTensor { file: file.path.clone(), tensor: name.into() });
        };
        let ctx = |path: &Path| (path.to_path_buf(), name.to_string());
        if !rule.accepts(&info.shape) {
            let (file, tensor) = ctx(&file.path);
            return Err(Error::Shape { file, tensor, got: info.shape.clone(), expected: rule.to_string() });
        }
        let Some(dtype) = StoredDtype::from_safetensors(info.dtype) else {
            let (file, tensor) = ctx(&file.path);
            return Err(Error::Dtype { file, tensor, got: format!("{:?}", info.dtype) });
        };
        let values = decode::<T>(file.data(info), dtype).map_err(|bad| {
            let (file, tensor) = ctx(&file.path);
            Error::NonFinite { file, tensor, index: bad.index, value: bad.value }
        })?;
        let array = ArrayD::from_shape_vec(info.shape.clone(), values)
            .expect("the safetensors header check ties the byte count to the shape");
        Ok(Some(array))
    }
}

/// Walks the expected tensors in order, reporting progress.
struct Loader<'a> {
    source: TensorSource,
    dims: ModelDims,
    done: usize,
    total: usize,
    progress: &'a mut dyn FnMut(usize, usize),
}

impl Loader<'_> {
    fn optional<T: Element>(&mut self, name: &str, rule: ShapeRule) -> Result<Option<ArrayD<T>>> {
        let array = self.source.read(name, &rule)?;
        if array.is_some() {
            self.done += 1;
            (self.progress)(self.done, self.total);
        }
        Ok(array)
    }

    fn required<T: Element>(&mut self, name: &str, rule: ShapeRule) -> Result<ArrayD<T>> {
        self.optional(name, rule)?
            .ok_or_else(|| Error::MissingTensor { file: self.source.origin.clone(), tensor: name.into() })
    }

    fn matrix<T: Element>(&mut self, name: &str, shape: [usize; 2]) -> Result<Array2<T>> {
        let array = self.required(name, ShapeRule::Exact(shape.to_vec()))?;
        Ok(array.into_dimensionality::<Ix2>().expect("the shape rule admitted only 2-d shapes"))
    }

    fn vector<T: Element>(&mut self, name: &str, rule: ShapeRule) -> Result<Array1<T>> {
        let array = self.required(name, rule)?;
        Ok(array.into_dimensionality::<Ix1>().expect("the shape rule admitted only 1-d shapes"))
    }

    fn norm<T: Element>(&mut self, prefix: &str, channels: usize) -> Result<UClipNormWeights<T>> {
        let alpha = self.vector(&NormPart::Alpha.name(prefix), NormPart::Alpha.rule(channels))?;
        let weight = self.vector(&NormPart::Weight.name(prefix), NormPart::Weight.rule(channels))?;
        let bias = self
            .optional(&NormPart::Bias.name(prefix), NormPart::Bias.rule(channels))?
            .map(|b| b.into_dimensionality::<Ix1>().expect("the shape rule admitted only 1-d shapes"));
        Ok(UClipNormWeights { alpha, weight, bias })
    }

    fn layer<T: Element>(&mut self, i: usize) -> Result<LayerWeights<T>> {
        let dims = self.dims.clone();
        let heads = || ShapeRule::Exact(vec![dims.num_heads]);
        let m = |s: &mut Self, which: Matrix| s.matrix::<T>(&which.name(i), which.shape(&dims));
        let attn = AttnWeights {
            q_proj: m(self, Matrix::Q)?,
            k_proj: m(self, Matrix::K)?,
            v_proj: m(self, Matrix::V)?,
            o_proj: m(self, Matrix::O)?,
            q_norm: self.norm(&Norm::Q.prefix(i), Norm::Q.channels(&dims))?,
            k_norm: self.norm(&Norm::K.prefix(i), Norm::K.channels(&dims))?,
            hp1_sigma: self.vector(&Hp1Vector::Sigma.name(i), heads())?,
            hp1_gamma: self.vector(&Hp1Vector::Gamma.name(i), heads())?,
        };
        let norm = |s: &mut Self, which: Norm| s.norm::<T>(&which.prefix(i), which.channels(&dims));
        Ok(LayerWeights {
            attn,
            gate_proj: m(self, Matrix::Gate)?,
            up_proj: m(self, Matrix::Up)?,
            down_proj: m(self, Matrix::Down)?,
            input_layernorm: norm(self, Norm::Input)?,
            post_attention_layernorm: norm(self, Norm::PostAttention)?,
            pre_feedforward_layernorm: norm(self, Norm::PreFeedforward)?,
            post_feedforward_layernorm: norm(self, Norm::PostFeedforward)?,
        })
    }
}

/// Loads the checkpoint in `dir` (whose config is `cfg`) into weights of type `T`
/// (`load_weights::<half::bf16>` for the GPU's raw bf16).
///
/// Reads `model.safetensors`, or else `model.safetensors.index.json` and the shards it names.
/// `progress(done, total)` is called after each tensor. Every failure is an [`Error`] naming the
/// file and the tensor: no file, a missing tensor or shard, a wrong shape or dtype, a truncated
/// file or corrupt header, a NaN or infinity.
pub fn load_weights<T: Element>(
    dir: &Path,
    cfg: &ModelConfig,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<ModelWeights<T>> {
    let source = TensorSource::open(dir)?;
    let dims = cfg.dims();
    let per_layer = Matrix::ALL.len() + Hp1Vector::ALL.len() + 2 * Norm::ALL.len();
    let biases =
        names::norm_prefixes(&dims).iter().filter(|(prefix, _)| source.contains(&NormPart::Bias.name(prefix))).count();
    let total = 1 + dims.num_layers * per_layer + 2 + biases + usize::from(!cfg.tie_word_embeddings);
    let mut loader = Loader { source, dims: dims.clone(), done: 0, total, progress };
    let vocab = [dims.vocab_size, dims.hidden_size];
    let embed_tokens = loader.matrix(names::EMBED_TOKENS, vocab)?;
    let layers = (0..dims.num_layers).map(|i| loader.layer(i)).collect::<Result<Vec<_>>>()?;
    let norm = loader.norm(names::FINAL_NORM, dims.hidden_size)?;
    let lm_head = if cfg.tie_word_embeddings { None } else { Some(loader.matrix(names::LM_HEAD, vocab)?) };
    Ok(ModelWeights { embed_tokens, layers, norm, lm_head })
}
