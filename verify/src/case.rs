//! A [`Case`]: the small, serialisable description of one HP1 attention call, and
//! [`CaseData`], the inputs it deterministically expands into.
//!
//! A case holds shapes, gate parameters and seeds, never data, so a failing case saved as JSON
//! is a few hundred bytes and replays bit for bit. [`Case::materialise`] draws every value from
//! the counter-based generator in [`crate::rng`], keyed by logical coordinates (sequence, token,
//! head, dim), rounds it to bf16 (so a GPU path fed bf16 sees exactly the oracle's inputs), and
//! places keys and values into a paged cache through a shuffled block table. Cache slots no
//! sequence owns are NaN, so a path that reads outside its sequence poisons its own output.
//!
//! Data model, chosen so the gate's zero fraction is a knob: keys are `0.5 + u`, values `u`,
//! queries `q_mean + input_scale * u` with `u` uniform in `[-1, 1)`. Scaling the inputs alone
//! cannot move the zero fraction (`z` is homogeneous in the scores), so the mean of `q`, which
//! shifts every score by about `sqrt(D) * q_mean / 2`, sets the sign of most scores, and
//! `input_scale` sets their spread around it.

use std::sync::OnceLock;

use half::bf16;
use ndarray::{Array2, Array3, Array4};
use oracle::hp1::{AttnMetadata, Hp1Inputs, Hp1Params};
use oracle::Scalar;
use serde::{Deserialize, Serialize};

use crate::error::{case_err, Result};
use crate::rng::Counter;

/// One sequence of a batch: `prefix_len` tokens cached before this step, `query_len` new ones
/// (decode: `query_len == 1`; prefill: `prefix_len == 0`; otherwise a chunked prefill).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeqShape {
    /// Tokens already in the cache.
    pub prefix_len: usize,
    /// Query tokens this step, at least 1.
    pub query_len: usize,
}

impl SeqShape {
    /// Tokens in the cache after this step.
    pub fn seq_len(&self) -> usize {
        self.prefix_len.saturating_add(self.query_len)
    }

    /// `(query, key)` pairs of this sequence: its causal attention work per head and dim.
    pub fn row_keys(&self) -> u64 {
        let (p, q) = (self.prefix_len as u64, self.query_len as u64);
        q.saturating_mul(p).saturating_add(q.saturating_mul(q.saturating_add(1)) / 2)
    }
}

/// One HP1 attention call, described by its shapes, parameters and seeds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Case {
    /// The batch, in `q` row order.
    pub seqs: Vec<SeqShape>,
    /// Query heads `Hq`.
    pub num_heads: usize,
    /// Key/value heads `Hkv`, dividing `Hq`.
    pub num_kv_heads: usize,
    /// Head dimension `D`.
    pub head_dim: usize,
    /// Tokens per cache block.
    pub block_size: usize,
    /// Cache blocks beyond those the sequences need (they hold NaN).
    pub spare_blocks: usize,
    /// FIR taps `F`.
    pub fir_k: usize,
    /// Whether scores are rectified before the FIR.
    pub relu_pre: bool,
    /// Lower clamp bound.
    pub clip_min: f64,
    /// Upper clamp bound.
    pub clip_max: f64,
    /// `[Hq]` FIR weights.
    pub sigma: Vec<f64>,
    /// `[Hq]` output gains.
    pub gamma: Vec<f64>,
    /// Seed of every q, k and v value.
    pub data_seed: u64,
    /// Mean of the query entries: moves the gate's zero fraction (see the module doc).
    pub q_mean: f64,
    /// Spread of the query entries around their mean.
    pub input_scale: f64,
    /// Seed of the block-table shuffle; changing it must not change any output.
    pub table_seed: u64,
}

/// Which tensor a generated value belongs to (the generator's stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tensor {
    /// Queries, indexed `[q row, query head, dim]`.
    Query,
    /// Keys, indexed `[sequence, token, kv head, dim]`.
    Key,
    /// Values, indexed `[sequence, token, kv head, dim]`.
    Value,
}

const BLOCK_STREAM: u64 = 3;
/// A case may not ask for more cache or query elements than this (a bound on memory, so a
/// hand-edited JSON cannot make `materialise` allocate without limit).
const MAX_ELEMENTS: u64 = 1 << 28;

/// The HP1 inputs in one float type, owned.
#[derive(Clone, Debug)]
pub struct Tensors<T> {
    /// `[num_tokens, Hq, D]` queries.
    pub q: Array3<T>,
    /// `[num_blocks, block_size, Hkv, D]` keys; slots no sequence owns are NaN.
    pub key_cache: Array4<T>,
    /// `[num_blocks, block_size, Hkv, D]` values; slots no sequence owns are NaN.
    pub value_cache: Array4<T>,
    /// `[Hq]` FIR weights.
    pub sigma: Vec<T>,
    /// `[Hq]` output gains.
    pub gamma: Vec<T>,
    /// Shared gate parameters.
    pub params: Hp1Params<T>,
}

impl<T: Scalar> Tensors<T> {
    /// The oracle's view of these tensors under `meta`.
    pub fn inputs<'a>(&'a self, meta: &'a AttnMetadata) -> Hp1Inputs<'a, T> {
        Hp1Inputs {
            q: self.q.view(),
            key_cache: self.key_cache.view(),
            value_cache: self.value_cache.view(),
            meta,
            sigma: &self.sigma,
            gamma: &self.gamma,
            params: self.params,
        }
    }

    /// The same values in another float type (exact when widening).
    pub fn cast<U: Scalar>(&self) -> Tensors<U> {
        let c = |x: &T| U::of(x.f64());
        Tensors {
            q: self.q.map(c),
            key_cache: self.key_cache.map(c),
            value_cache: self.value_cache.map(c),
            sigma: self.sigma.iter().map(c).collect(),
            gamma: self.gamma.iter().map(c).collect(),
            params: self.params.cast(),
        }
    }
}

/// A materialised case: metadata plus the same inputs as f32 (every value exactly a bf16,
/// what a GPU path uploads) and widened to f64 (what the f64 oracle reads).
#[derive(Debug)]
pub struct CaseData {
    /// Block table, sequence lengths, query offsets.
    pub meta: AttnMetadata,
    /// The inputs as f32; q, k and v values are exact bf16 values.
    pub f32: Tensors<f32>,
    /// The same inputs widened to f64.
    pub f64: Tensors<f64>,
    /// q, k and v as bf16, built on first use: every GPU path of a case uploads the same bits,
    /// and the fuzzer builds them beside the reference on a worker thread.
    bf16: OnceLock<Bf16Tensors>,
}

/// A case's q, k and v in bf16, in the layouts of [`Tensors`].
#[derive(Debug)]
pub struct Bf16Tensors {
    /// `[num_tokens, Hq, D]` queries.
    pub q: Vec<bf16>,
    /// `[num_blocks, block_size, Hkv, D]` keys (NaN where no sequence owns the slot).
    pub key_cache: Vec<bf16>,
    /// `[num_blocks, block_size, Hkv, D]` values.
    pub value_cache: Vec<bf16>,
}

/// A clone starts without the bf16 copy: clones are made to be changed (a sequence cut out, a
/// length moved), and a copy of the original's bits would then be stale.
impl Clone for CaseData {
    fn clone(&self) -> Self {
        Self::new(self.meta.clone(), self.f32.clone())
    }
}

impl CaseData {
    /// The case of `meta` over `f32` (widened to f64 here).
    pub fn new(meta: AttnMetadata, f32: Tensors<f32>) -> Self {
        let f64 = f32.cast();
        Self { meta, f32, f64, bf16: OnceLock::new() }
    }

    /// q, k and v as bf16 (exact: every value is a bf16), converted on the first call. Change
    /// no tensor of a `CaseData` after this; clone it and change the clone.
    pub fn bf16(&self) -> &Bf16Tensors {
        self.bf16.get_or_init(|| {
            let to_bf16 = |a: &[f32]| a.iter().map(|&x| bf16::from_f32(x)).collect();
            Bf16Tensors {
                q: to_bf16(self.f32.q.as_slice().expect("q is built in standard layout")),
                key_cache: to_bf16(self.f32.key_cache.as_slice().expect("the cache is built in standard layout")),
                value_cache: to_bf16(self.f32.value_cache.as_slice().expect("the cache is built in standard layout")),
            }
        })
    }

    /// The oracle's f32 inputs.
    pub fn inputs_f32(&self) -> Hp1Inputs<'_, f32> {
        self.f32.inputs(&self.meta)
    }

    /// The oracle's f64 inputs.
    pub fn inputs_f64(&self) -> Hp1Inputs<'_, f64> {
        self.f64.inputs(&self.meta)
    }

    /// Output shape `[num_tokens, Hq, D]`.
    pub fn out_shape(&self) -> (usize, usize, usize) {
        self.f32.q.dim()
    }
}

fn round_bf16(x: f64) -> f32 {
    bf16::from_f64(x).to_f32()
}

impl Case {
    /// Query rows of the batch.
    pub fn num_tokens(&self) -> usize {
        self.seqs.iter().fold(0usize, |n, s| n.saturating_add(s.query_len))
    }

    /// Causal `(query, key)` pairs times query heads times `D`: the multiply-adds of one QK pass.
    pub fn work(&self) -> u64 {
        let rk = self.seqs.iter().fold(0u64, |n, s| n.saturating_add(s.row_keys()));
        rk.saturating_mul(self.num_heads as u64).saturating_mul(self.head_dim as u64)
    }

    /// The generated value of `tensor` at logical coordinates `idx`, before rounding to bf16
    /// (see [`Tensor`] for the index order). [`Case::materialise`] stores `bf16(sample)`; a test
    /// may recompute any input from here without going through the paged layout.
    pub fn sample(&self, tensor: Tensor, idx: [usize; 4]) -> f64 {
        let idx = idx.map(|i| i as u64);
        match tensor {
            Tensor::Query => self.q_mean + self.input_scale * Counter::new(self.data_seed, 0).uniform(&idx),
            Tensor::Key => 0.5 + Counter::new(self.data_seed, 1).uniform(&idx),
            Tensor::Value => Counter::new(self.data_seed, 2).uniform(&idx),
        }
    }

    /// The stored (bf16-rounded) value of `tensor` at logical coordinates `idx`.
    pub fn value_at(&self, tensor: Tensor, idx: [usize; 4]) -> f32 {
        round_bf16(self.sample(tensor, idx))
    }

    /// The score scale, `1/sqrt(D)` rounded to f32 (the value every path is handed).
    pub fn scale(&self) -> f32 {
        (1.0 / (self.head_dim as f64).sqrt()) as f32
    }

    /// Checks the case's own rules: a nonempty batch of sequences with at least one query each,
    /// heads that divide, nonzero sizes, one sigma and gamma per head, finite numbers, and a size
    /// bound of 2^28 elements per tensor.
    pub fn validate(&self) -> Result<()> {
        if self.seqs.is_empty() {
            return case_err("seqs", "the batch has no sequences");
        }
        if let Some(i) = self.seqs.iter().position(|s| s.query_len == 0) {
            return case_err("seqs", format!("sequence {i} has query_len 0, expected at least 1"));
        }
        if self.num_kv_heads == 0 || !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return case_err(
                "num_kv_heads",
                format!("{} kv heads must divide {} query heads", self.num_kv_heads, self.num_heads),
            );
        }
        for (field, v) in [("head_dim", self.head_dim), ("block_size", self.block_size), ("fir_k", self.fir_k)] {
            if v == 0 {
                return case_err(field, "must be at least 1, got 0");
            }
        }
        for (field, v) in [("sigma", &self.sigma), ("gamma", &self.gamma)] {
            if v.len() != self.num_heads {
                return case_err(field, format!("has {} entries, expected one per head ({})", v.len(), self.num_heads));
            }
            if v.iter().any(|x| !x.is_finite()) {
                return case_err(field, format!("must be finite, got {v:?}"));
            }
        }
        for (field, v) in [("q_mean", self.q_mean), ("input_scale", self.input_scale)] {
            if !v.is_finite() {
                return case_err(field, format!("must be finite, got {v}"));
            }
        }
        let slots = self
            .seqs
            .iter()
            .fold(0u64, |n, s| n.saturating_add(s.seq_len() as u64).saturating_add(self.block_size as u64))
            .saturating_add((self.spare_blocks as u64).saturating_mul(self.block_size as u64));
        let cache = slots.saturating_mul(self.num_kv_heads as u64).saturating_mul(self.head_dim as u64);
        let queries =
            (self.num_tokens() as u64).saturating_mul(self.num_heads as u64).saturating_mul(self.head_dim as u64);
        if cache.max(queries) > MAX_ELEMENTS {
            return case_err(
                "seqs",
                format!("needs {} cache and {queries} query elements, the limit is {MAX_ELEMENTS}", cache),
            );
        }
        Ok(())
    }

    /// The batch metadata: blocks of all sequences plus the spares, shuffled by `table_seed`
    /// and dealt out in order; table entries past a sequence's last block are 0, as vLLM pads.
    pub fn metadata(&self) -> Result<AttnMetadata> {
        self.validate()?;
        let need: Vec<usize> = self.seqs.iter().map(|s| s.seq_len().div_ceil(self.block_size)).collect();
        let num_blocks = need.iter().sum::<usize>() + self.spare_blocks;
        let perm = Counter::new(self.table_seed, BLOCK_STREAM).permutation(num_blocks);
        let cols = need.iter().copied().max().unwrap_or(1);
        let mut table = Array2::<i32>::zeros((self.seqs.len(), cols));
        let mut next = perm.iter();
        for (s, &n) in need.iter().enumerate() {
            for b in 0..n {
                table[[s, b]] = *next.next().expect("the permutation holds every needed block") as i32;
            }
        }
        let seq_lens = self.seqs.iter().map(|s| s.seq_len() as i32).collect();
        let mut query_start_loc = vec![0i32];
        for s in &self.seqs {
            query_start_loc.push(query_start_loc.last().copied().unwrap_or(0) + s.query_len as i32);
        }
        Ok(AttnMetadata { block_table: table, seq_lens, query_start_loc })
    }

    /// Builds every input of the case, deterministically from its fields.
    pub fn materialise(&self) -> Result<CaseData> {
        let meta = self.metadata()?;
        let (hq, hkv, d, bs) = (self.num_heads, self.num_kv_heads, self.head_dim, self.block_size);
        let q =
            Array3::from_shape_fn((self.num_tokens(), hq, d), |(r, h, j)| self.value_at(Tensor::Query, [r, h, j, 0]));
        let num_blocks = self.seqs.iter().map(|s| s.seq_len().div_ceil(bs)).sum::<usize>() + self.spare_blocks;
        let mut key_cache = Array4::<f32>::from_elem((num_blocks, bs, hkv, d), f32::NAN);
        let mut value_cache = key_cache.clone();
        for (s, shape) in self.seqs.iter().enumerate() {
            for t in 0..shape.seq_len() {
                let (b, o) = meta.slot(s, t, bs);
                for g in 0..hkv {
                    for j in 0..d {
                        key_cache[[b, o, g, j]] = self.value_at(Tensor::Key, [s, t, g, j]);
                        value_cache[[b, o, g, j]] = self.value_at(Tensor::Value, [s, t, g, j]);
                    }
                }
            }
        }
        let f32 = Tensors {
            q,
            key_cache,
            value_cache,
            sigma: self.sigma.iter().map(|&x| x as f32).collect(),
            gamma: self.gamma.iter().map(|&x| x as f32).collect(),
            params: Hp1Params {
                scale: self.scale(),
                fir_k: self.fir_k,
                relu_pre: self.relu_pre,
                clip_min: self.clip_min as f32,
                clip_max: self.clip_max as f32,
            },
        };
        f32.params.validate()?;
        Ok(CaseData::new(meta, f32))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A two-sequence case (a decode of 5 and a chunked prefill 3 + 4) over blocks of 2.
    pub(crate) fn small() -> Case {
        Case {
            seqs: vec![SeqShape { prefix_len: 4, query_len: 1 }, SeqShape { prefix_len: 3, query_len: 4 }],
            num_heads: 4,
            num_kv_heads: 2,
            head_dim: 8,
            block_size: 2,
            spare_blocks: 2,
            fir_k: 3,
            relu_pre: true,
            clip_min: 0.0,
            clip_max: 1.0,
            sigma: vec![0.0, 0.5, 1.0, 2.0],
            gamma: vec![1.0, 0.0, 0.5, 2.0],
            data_seed: 11,
            q_mean: 0.25,
            input_scale: 1.0,
            table_seed: 3,
        }
    }

    #[test]
    fn materialise_places_logical_values_through_the_table() {
        let case = small();
        let data = case.materialise().unwrap();
        assert_eq!(data.meta.seq_lens, vec![5, 7]);
        assert_eq!(data.meta.query_start_loc, vec![0, 1, 5]);
        assert_eq!(data.f32.key_cache.dim(), (3 + 4 + 2, 2, 2, 8));
        for (s, shape) in case.seqs.iter().enumerate() {
            for t in 0..shape.seq_len() {
                let b = data.meta.block_table[[s, t / 2]] as usize;
                assert_eq!(data.f32.key_cache[[b, t % 2, 1, 5]], case.value_at(Tensor::Key, [s, t, 1, 5]));
                assert_eq!(data.f32.value_cache[[b, t % 2, 0, 2]], case.value_at(Tensor::Value, [s, t, 0, 2]));
            }
        }
        assert_eq!(data.f32.q[[3, 2, 7]], case.value_at(Tensor::Query, [3, 2, 7, 0]));
        // 9 blocks of 2 slots; the sequences own 5 + 7 of them, the rest are NaN.
        let nan_slots = data.f32.key_cache.iter().filter(|x| x.is_nan()).count() / (2 * 8);
        assert_eq!(nan_slots, 18 - 12);
    }

    #[test]
    fn materialise_is_deterministic_and_bf16_exact() {
        let case = small();
        let (a, b) = (case.materialise().unwrap(), case.materialise().unwrap());
        assert_eq!(a.f32.q, b.f32.q);
        assert_eq!(a.meta, b.meta);
        for &x in a.f32.q.iter().chain(a.f32.value_cache.iter().filter(|x| !x.is_nan())) {
            assert_eq!(half::bf16::from_f32(x).to_f32(), x);
        }
        assert!(a.f64.key_cache.iter().zip(a.f32.key_cache.iter()).all(|(&w, &n)| w == n as f64 || w.is_nan()));
    }

    #[test]
    fn table_seed_moves_blocks_but_not_values() {
        let case = small();
        let other = Case { table_seed: 4, ..case.clone() };
        let (a, b) = (case.metadata().unwrap(), other.metadata().unwrap());
        assert_ne!(a.block_table, b.block_table);
        let mut used: Vec<i32> = a.block_table.iter().copied().collect();
        used.sort_unstable();
        used.dedup();
        assert_eq!(used.len(), 3 + 4, "blocks of different sequences must not collide");
    }

    #[test]
    fn broken_cases_are_refused_with_the_field_named() {
        let bad = |f: fn(&mut Case), field: &str| {
            let mut c = small();
            f(&mut c);
            let err = c.materialise().unwrap_err().to_string();
            assert!(err.contains(field), "expected `{field}` in: {err}");
        };
        bad(|c| c.seqs.clear(), "seqs");
        bad(|c| c.seqs[1].query_len = 0, "seqs");
        bad(|c| c.num_kv_heads = 3, "num_kv_heads");
        bad(|c| c.block_size = 0, "block_size");
        bad(
            |c| {
                c.sigma.pop();
            },
            "sigma",
        );
        bad(|c| c.gamma[0] = f64::NAN, "gamma");
        bad(|c| c.seqs[0].prefix_len = usize::MAX, "seqs");
        bad(|c| c.head_dim = usize::MAX, "seqs");
        bad(|c| c.clip_max = -1.0, "clip_min");
    }
}
