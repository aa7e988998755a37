//! `asynct.oracle.forward_logits`: the oracle's whole-model forward (SPEC section 1) over one
//! sequence of a checkpoint, every position's logits.
//!
//! The checkpoint is read by `model`'s loader and run by the oracle's [`Model`] in one prefill
//! step over a paged cache just big enough, the same forward the CPU backend runs: in f64 (the
//! reference), f32 (the CPU backend's default) or bf16-faithful f64.

use std::path::{Path, PathBuf};

use model::block_pool::blocks_for;
use model::checkpoint::{load_weights, Element as StoredElement};
use model::config::ModelConfig;
use model::cpu_backend::{rounding_of, Precision};
use ndarray::Array2;
use numpy::{Element, IntoPyArray};
use oracle::hp1::AttnMetadata;
use oracle::model::forward::Model;
use oracle::model::kv_cache::KvCache;
use oracle::model::step::{LogitRows, StepInput};
use oracle::Scalar;
use pyo3::prelude::*;

use crate::args::{ints, parse_precision, scalar};
use crate::errors::{from_model, value_error};

/// Cache block size of the one-step forward; the logits do not depend on it.
const BLOCK: usize = 16;

/// `[len(token_ids), vocab]` logits of the checkpoint in `model_dir` over `token_ids`: row `i`
/// predicts the token after position `i`. float64 for `precision` "f64" and "bf16", float32 for
/// "f32".
#[pyfunction]
#[pyo3(signature = (model_dir, token_ids, precision=None), text_signature = "(model_dir, token_ids, precision=\"f64\")")]
pub fn forward_logits<'py>(
    py: Python<'py>,
    model_dir: &Bound<'py, PyAny>,
    token_ids: &Bound<'py, PyAny>,
    precision: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let model_dir: PathBuf = scalar(Some(model_dir), PathBuf::new(), "model_dir", "a path")?;
    let precision: String = scalar(precision, "f64".to_string(), "precision", "a string")?;
    let precision = parse_precision(&precision)?;
    let cfg = ModelConfig::load(&model_dir).map_err(from_model)?;
    let ids = ints(token_ids, "token_ids")?;
    if ids.is_empty() {
        return Err(value_error("token_ids", "expected at least one token, got none"));
    }
    if let Some((i, id)) = ids.iter().enumerate().find(|(_, &id)| id < 0 || id as usize >= cfg.vocab_size) {
        return Err(value_error(
            "token_ids",
            format!("entry {i} is {id}, outside the vocabulary of {}", cfg.vocab_size),
        ));
    }
    if ids.len() > cfg.max_position_embeddings {
        return Err(value_error(
            "token_ids",
            format!(
                "has {} tokens, more than the model's max_position_embeddings {}",
                ids.len(),
                cfg.max_position_embeddings
            ),
        ));
    }
    let ids: Vec<u32> = ids.into_iter().map(|id| id as u32).collect();
    match precision {
        Precision::F32 => {
            let logits = py.detach(|| run::<f32>(&model_dir, &cfg, precision, &ids)).map_err(from_model)?;
            Ok(logits.into_pyarray(py).into_any())
        }
        Precision::F64 | Precision::Bf16 => {
            let logits = py.detach(|| run::<f64>(&model_dir, &cfg, precision, &ids)).map_err(from_model)?;
            Ok(logits.into_pyarray(py).into_any())
        }
    }
}

/// Loads the checkpoint in `T` and runs one prefill of `ids` from position 0.
fn run<T: Scalar + StoredElement + Element>(
    dir: &Path,
    cfg: &ModelConfig,
    precision: Precision,
    ids: &[u32],
) -> model::Result<Array2<T>> {
    let weights = load_weights::<T>(dir, cfg, &mut |_, _| {})?;
    let model = Model::new(cfg.dims(), weights, rounding_of(precision))?;
    let num_blocks = blocks_for(ids.len(), BLOCK);
    let mut cache = KvCache::new(&model.dims, num_blocks, BLOCK);
    let block_table = Array2::from_shape_fn((1, num_blocks), |(_, b)| b as i32);
    let meta =
        AttnMetadata { block_table, seq_lens: vec![ids.len() as i32], query_start_loc: vec![0, ids.len() as i32] };
    let slot_mapping: Vec<i64> = (0..ids.len() as i64).collect();
    let step = StepInput { token_ids: ids, meta: &meta, slot_mapping: &slot_mapping, logits: LogitRows::All };
    Ok(model.forward(&step, &mut cache)?)
}
