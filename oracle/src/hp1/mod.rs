//! HP1 attention over the paged KV cache (SPEC section 2), and the decompositions the GPU
//! paths use, each a function of its own so a property test can hold it against [`direct`].
//!
//! Every entry point takes an [`Hp1Inputs`]: exactly what a GPU kernel is handed (`q`, the
//! two caches, the batch metadata, per-head `sigma`/`gamma` and the shared parameters).

pub mod direct;
pub mod fake_decode;
pub mod gate;
pub mod metadata;
pub mod sparse_pv;
pub mod split_k;

use ndarray::{ArrayView1, ArrayView3, ArrayView4};
use serde::{Deserialize, Serialize};

use crate::error::{invalid, Error, Result};
use crate::scalar::Scalar;
pub use gate::Gate;
pub use metadata::{AttnMetadata, QueryRow};

/// The HP1 parameters shared by all heads of a layer.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hp1Params<T> {
    /// Multiplies `q . k` (config `hp1.scale`, `1/sqrt(D)` when null).
    pub scale: T,
    /// FIR taps `F` along the keys, at least 1.
    pub fir_k: usize,
    /// Whether scores are rectified before the FIR.
    pub relu_pre: bool,
    /// Lower clamp bound.
    pub clip_min: T,
    /// Upper clamp bound, above `clip_min`.
    pub clip_max: T,
}

impl<T: Scalar> Hp1Params<T> {
    /// Checks `fir_k >= 1`, finite bounds and `clip_min < clip_max`.
    pub fn validate(&self) -> Result<()> {
        if self.fir_k < 1 {
            return invalid("fir_k", format!("must be at least 1, got {}", self.fir_k));
        }
        if !self.scale.is_finite() {
            return invalid("scale", format!("must be finite, got {}", self.scale));
        }
        if !(self.clip_min.is_finite() && self.clip_max.is_finite() && self.clip_min < self.clip_max) {
            return invalid(
                "clip_min",
                format!("need finite clip_min < clip_max, got {} and {}", self.clip_min, self.clip_max),
            );
        }
        Ok(())
    }

    /// The same parameters in another float type.
    pub fn cast<U: Scalar>(&self) -> Hp1Params<U> {
        Hp1Params {
            scale: U::of(self.scale.f64()),
            fir_k: self.fir_k,
            relu_pre: self.relu_pre,
            clip_min: U::of(self.clip_min.f64()),
            clip_max: U::of(self.clip_max.f64()),
        }
    }
}

/// Everything one HP1 attention call reads.
#[derive(Clone, Copy, Debug)]
pub struct Hp1Inputs<'a, T> {
    /// `[num_tokens, Hq, D]` queries, already normed and rotated.
    pub q: ArrayView3<'a, T>,
    /// `[num_blocks, block_size, Hkv, D]` keys (the vLLM flash layout).
    pub key_cache: ArrayView4<'a, T>,
    /// `[num_blocks, block_size, Hkv, D]` values.
    pub value_cache: ArrayView4<'a, T>,
    /// Block table, sequence lengths, query offsets.
    pub meta: &'a AttnMetadata,
    /// `[Hq]` FIR weights.
    pub sigma: &'a [T],
    /// `[Hq]` output gains.
    pub gamma: &'a [T],
    /// Shared parameters.
    pub params: Hp1Params<T>,
}

/// The sizes an [`Hp1Inputs`] implies, once validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hp1Dims {
    /// Query rows.
    pub num_tokens: usize,
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads; `num_heads` is a multiple of it.
    pub num_kv_heads: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Cache blocks.
    pub num_blocks: usize,
    /// Tokens per block.
    pub block_size: usize,
}

impl Hp1Dims {
    /// Query heads per kv head.
    pub fn group(&self) -> usize {
        self.num_heads / self.num_kv_heads
    }
}

impl<'a, T: Scalar> Hp1Inputs<'a, T> {
    /// Checks every shape and metadata rule and returns the sizes.
    pub fn validate(&self) -> Result<Hp1Dims> {
        self.params.validate()?;
        let (num_tokens, num_heads, head_dim) = self.q.dim();
        let (num_blocks, block_size, num_kv_heads, kd) = self.key_cache.dim();
        if num_kv_heads == 0 || num_heads % num_kv_heads != 0 {
            return invalid("key_cache", format!("{num_kv_heads} kv heads do not divide {num_heads} query heads"));
        }
        if kd != head_dim || block_size == 0 {
            return Err(Error::Shape {
                name: "key_cache",
                got: self.key_cache.shape().to_vec(),
                expected: format!("[blocks, block_size > 0, Hkv, {head_dim}]"),
            });
        }
        if self.value_cache.dim() != self.key_cache.dim() {
            return Err(Error::Shape {
                name: "value_cache",
                got: self.value_cache.shape().to_vec(),
                expected: format!("{:?} (as key_cache)", self.key_cache.shape()),
            });
        }
        for (name, v) in [("sigma", self.sigma), ("gamma", self.gamma)] {
            if v.len() != num_heads {
                return Err(Error::Shape { name, got: vec![v.len()], expected: format!("[{num_heads}]") });
            }
        }
        self.meta.validate(num_blocks, block_size, num_tokens)?;
        Ok(Hp1Dims { num_tokens, num_heads, num_kv_heads, head_dim, num_blocks, block_size })
    }

    /// The gate of query head `h`.
    pub fn gate(&self, h: usize) -> Gate<T> {
        Gate { params: self.params, sigma: self.sigma[h], gamma: self.gamma[h] }
    }

    /// Key `t` of sequence `seq` for kv head `g`.
    pub fn key(&self, seq: usize, t: usize, g: usize) -> ArrayView1<'_, T> {
        let (b, o) = self.meta.slot(seq, t, self.key_cache.dim().1);
        self.key_cache.slice(ndarray::s![b, o, g, ..])
    }

    /// Value `t` of sequence `seq` for kv head `g`.
    pub fn value(&self, seq: usize, t: usize, g: usize) -> ArrayView1<'_, T> {
        let (b, o) = self.meta.slot(seq, t, self.value_cache.dim().1);
        self.value_cache.slice(ndarray::s![b, o, g, ..])
    }

    /// Raw scores `s_t = scale * q . k_t` of one query row and head, for keys `range`.
    pub fn scores(&self, row: QueryRow, h: usize, range: std::ops::Range<usize>) -> Vec<T> {
        let g = h / (self.q.dim().1 / self.key_cache.dim().2);
        let q = self.q.slice(ndarray::s![row.token, h, ..]);
        range.map(|t| self.params.scale * q.dot(&self.key(row.seq, t, g))).collect()
    }
}
