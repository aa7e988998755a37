//! Shared helpers of the model tests: the preset dimensions, and a step builder that turns
//! "these sequences, with these blocks, this many tokens already cached, these new tokens" into
//! the metadata and slot mapping a forward takes.

#![allow(dead_code)]

use ndarray::Array2;
use oracle::hp1::{AttnMetadata, Hp1Params};
use oracle::model::forward::Model;
use oracle::model::gate_stats::GateStats;
use oracle::model::kv_cache::KvCache;
use oracle::model::step::{LogitRows, StepInput};
use oracle::model::weights::ModelDims;
use oracle::{Result, Scalar};

/// SPEC's `hp1` config for head dim `d`.
pub fn hp1(d: usize) -> Hp1Params<f64> {
    Hp1Params { scale: 1.0 / (d as f64).sqrt(), fir_k: 3, relu_pre: true, clip_min: 0.0, clip_max: 1.0 }
}

/// The `asynct-tiny` preset.
pub fn tiny() -> ModelDims {
    ModelDims {
        vocab_size: 512,
        hidden_size: 64,
        intermediate_size: 192,
        num_layers: 2,
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: 16,
        rope_theta: 10000.0,
        max_position_embeddings: 2048,
        hp1: hp1(16),
    }
}

/// The `asynct-small` preset with `layers` layers.
pub fn small(layers: usize) -> ModelDims {
    ModelDims {
        vocab_size: 151936,
        hidden_size: 512,
        intermediate_size: 1536,
        num_layers: layers,
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: 128,
        rope_theta: 1_000_000.0,
        max_position_embeddings: 32768,
        hp1: hp1(128),
    }
}

/// One sequence's part of a step.
pub struct Part<'a> {
    /// Its physical blocks, in logical order.
    pub blocks: &'a [i32],
    /// Tokens already in the cache.
    pub cached: usize,
    /// This step's tokens.
    pub tokens: &'a [u32],
}

/// Runs one step of `parts` and returns the logits and gate counts.
pub fn step<T: Scalar>(
    model: &Model<T>,
    cache: &mut KvCache<T>,
    parts: &[Part<'_>],
    logits: LogitRows<'_>,
) -> Result<(Array2<T>, GateStats)> {
    let bs = cache.block_size();
    let width = parts.iter().map(|p| p.blocks.len()).max().unwrap_or(0);
    let mut table = Array2::from_elem((parts.len(), width), -1);
    let (mut ids, mut slots, mut qsl, mut lens) = (vec![], vec![], vec![0], vec![]);
    for (s, p) in parts.iter().enumerate() {
        for (j, &b) in p.blocks.iter().enumerate() {
            table[[s, j]] = b;
        }
        for (j, &t) in p.tokens.iter().enumerate() {
            let pos = p.cached + j;
            ids.push(t);
            slots.push((p.blocks[pos / bs] as usize * bs + pos % bs) as i64);
        }
        qsl.push(ids.len() as i32);
        lens.push((p.cached + p.tokens.len()) as i32);
    }
    let meta = AttnMetadata { block_table: table, seq_lens: lens, query_start_loc: qsl };
    model.forward_with_stats(&StepInput { token_ids: &ids, meta: &meta, slot_mapping: &slots, logits }, cache)
}

/// Seeded pseudo-random token ids below `vocab`.
pub fn prompt(seed: u64, len: usize, vocab: usize) -> Vec<u32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % vocab as u64) as u32
        })
        .collect()
}

/// `|a - b| / |b|` over all elements.
pub fn rel_l2<T: Scalar, U: Scalar>(a: &Array2<T>, b: &Array2<U>) -> f64 {
    assert_eq!(a.dim(), b.dim());
    let num: f64 = a.iter().zip(b).map(|(x, y)| (x.f64() - y.f64()).powi(2)).sum();
    let den: f64 = b.iter().map(|y| y.f64().powi(2)).sum();
    (num / den).sqrt()
}
