//! `--dump-logits`: a safetensors file holding one f32 tensor `logits` of shape `[positions, vocab]`.

use std::path::Path;

use ndarray::Array2;
use safetensors::tensor::{Dtype, TensorView};

/// Writes `logits` as the tensor `logits` (f32, row-major) to `path`.
pub fn write(path: &Path, logits: &Array2<f32>) -> Result<(), String> {
    let bytes: Vec<u8> = logits.iter().flat_map(|x| x.to_le_bytes()).collect();
    let shape = vec![logits.nrows(), logits.ncols()];
    let view = TensorView::new(Dtype::F32, shape, &bytes).map_err(|e| format!("logits tensor: {e}"))?;
    safetensors::serialize_to_file([("logits", view)], None, path)
        .map_err(|e| format!("{}: cannot write logits: {e}", path.display()))
}
