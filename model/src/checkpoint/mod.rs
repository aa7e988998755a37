//! Checkpoint I/O: safetensors files (one, or an index with shards) to and from
//! [`oracle::model::weights::ModelWeights`], with the tensor names of SPEC section 1.
//!
//! [`load_weights`] reads bf16, f16 or f32 tensors, memory-mapped, into any [`Element`] (f32,
//! f64, or bf16 copied as stored);
//! [`save_checkpoint`] writes `config.json` and `model.safetensors`. Both take their names from
//! [`names`], the one table of tensor names and shapes.

mod convert;
mod file;
pub mod names;
mod reader;
mod writer;

pub use convert::{Element, StoredDtype, TensorBytes};
pub use names::{named_tensors, NamedTensor, ShapeRule};
pub use reader::load_weights;
pub use writer::save_checkpoint;

/// The single-file checkpoint's name.
pub const SINGLE_FILE: &str = "model.safetensors";
/// The shard index's name; its `weight_map` maps each tensor to a shard file in the same folder.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
