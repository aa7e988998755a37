//! The CPU reference for AsyncT: exact HP1 attention, UClipNorm, RoPE, the whole model forward,
//! and decoding (sampling, stop conditions, incremental detokenisation).
//!
//! Everything numeric is generic over [`Scalar`] (`f32` or `f64`): in f64 it is the reference every
//! GPU path is held against, in f32 it is the CPU backend. The HP1 entry points take exactly the
//! inputs of a GPU kernel (`q`, the paged `key_cache`/`value_cache`, block table, sequence lengths,
//! query offsets, per-head `sigma`/`gamma`), so a kernel and the oracle can be handed one case.
//!
//! ```
//! use ndarray::{Array2, Array3, Array4};
//! use oracle::hp1::{direct::hp1_direct, AttnMetadata, Hp1Inputs, Hp1Params};
//!
//! // One sequence of 3 tokens decoding its last one; one head, D = 4, one block of 4 slots.
//! let q = Array3::<f64>::ones((1, 1, 4));
//! let k = Array4::<f64>::ones((1, 4, 1, 4));
//! let meta = AttnMetadata::decode(Array2::zeros((1, 1)), vec![3]);
//! let params = Hp1Params { scale: 0.5, fir_k: 3, relu_pre: true, clip_min: 0.0, clip_max: 1.0 };
//! let inputs = Hp1Inputs { q: q.view(), key_cache: k.view(), value_cache: k.view(), meta: &meta,
//!                          sigma: &[0.0], gamma: &[1.0], params };
//! let out = hp1_direct(&inputs).unwrap();
//! assert_eq!(out[[0, 0, 0]], 3.0); // three keys, each gated to clamp(2.0) = 1
//! ```
//!
//! Neighbours: this crate uses no other workspace crate. `model` loads checkpoints into
//! [`model::weights::ModelWeights`] and drives [`model`]; `verify` holds GPU paths against [`hp1`].

#![deny(missing_docs)]

pub mod decode;
pub mod error;
pub mod hp1;
pub mod model;
pub mod norm;
pub mod rope;
pub mod scalar;

pub use error::{Error, Result};
pub use scalar::Scalar;
