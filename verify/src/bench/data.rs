//! Benchmark inputs: a paged bf16 cache filled fast and reproducibly, gated like a trained model.
//!
//! q and k entries are standard normal, so `s = q.k / sqrt(D)` is about N(0, 1); with `sigma` in
//! [1, 2] about 60-75% of the gate's weights are exact zeros, close to a trained AsyncT's 70%.
//! The measured zero fraction (over a sample of rows, with the oracle's gate) is reported.

use half::bf16;
use rayon::prelude::*;

use oracle::hp1::{Gate, Hp1Params};

use crate::rng::Counter;

/// Hq, Hkv, D and block size of the SPEC section 7 grid.
pub const HQ: usize = 8;
/// Key/value heads.
pub const HKV: usize = 4;
/// Head dimension.
pub const D: usize = 128;
/// Tokens per cache block.
pub const BLOCK: usize = 16;

/// One decode step's host inputs.
pub struct DecodeData {
    /// `[batch, Hq, D]`.
    pub q: Vec<bf16>,
    /// `[num_blocks, BLOCK, Hkv, D]`.
    pub key_cache: Vec<bf16>,
    /// `[num_blocks, BLOCK, Hkv, D]`.
    pub value_cache: Vec<bf16>,
    /// `[batch, context / BLOCK]`, a permutation of all blocks.
    pub block_table: Vec<i32>,
    /// `[batch]`, all `context`.
    pub seq_lens: Vec<i32>,
    /// `0..=batch`.
    pub query_start_loc: Vec<i32>,
    /// `[Hq]` in [1, 2].
    pub sigma: Vec<f32>,
    /// `[Hq]` in [0.5, 1].
    pub gamma: Vec<f32>,
}

/// The gate parameters of SPEC section 1's config.
pub fn params() -> Hp1Params<f64> {
    Hp1Params { scale: 1.0 / (D as f64).sqrt(), fir_k: 3, relu_pre: true, clip_min: 0.0, clip_max: 1.0 }
}

/// `n` standard normal values (Box-Muller on two counter draws), rounded to bf16.
fn normal_bf16(seed: u64, stream: u64, n: usize) -> Vec<bf16> {
    let rng = Counter::new(seed, stream);
    (0..n)
        .into_par_iter()
        .map(|i| {
            let u1 = (rng.uniform(&[i as u64, 0]) + 1.0) / 2.0;
            let u2 = (rng.uniform(&[i as u64, 1]) + 1.0) / 2.0;
            let r = (-2.0 * (1.0 - u1).ln()).sqrt();
            bf16::from_f64(r * (std::f64::consts::TAU * u2).cos())
        })
        .collect()
}

impl DecodeData {
    /// A decode step of `batch` sequences of `context` tokens each (`context` a multiple of 16).
    pub fn new(batch: usize, context: usize, seed: u64) -> Self {
        let per_seq = context.div_ceil(BLOCK);
        let num_blocks = batch * per_seq;
        let slots = num_blocks * BLOCK * HKV * D;
        let perm = Counter::new(seed, 0).permutation(num_blocks);
        Self {
            q: normal_bf16(seed, 1, batch * HQ * D),
            key_cache: normal_bf16(seed, 2, slots),
            value_cache: normal_bf16(seed, 3, slots),
            block_table: perm.into_iter().map(|b| b as i32).collect(),
            seq_lens: vec![context as i32; batch],
            query_start_loc: (0..=batch as i32).collect(),
            sigma: (0..HQ).map(|h| 1.0 + h as f32 / HQ as f32).collect(),
            gamma: (0..HQ).map(|h| 0.5 + h as f32 / (2 * HQ) as f32).collect(),
        }
    }

    /// Bytes of K and V a softmax decode must read: the whole cache of every sequence.
    pub fn kv_bytes(&self, context: usize) -> usize {
        2 * self.seq_lens.len() * context * HKV * D * 2
    }

    /// The gate's zero fraction over up to `rows` sequences, every head, every key.
    pub fn zero_fraction(&self, context: usize, rows: usize) -> f64 {
        let per_seq = context.div_ceil(BLOCK);
        let p = params();
        let (mut zeros, mut total) = (0u64, 0u64);
        for s in 0..self.seq_lens.len().min(rows) {
            for h in 0..HQ {
                let g = h / (HQ / HKV);
                let q = &self.q[(s * HQ + h) * D..][..D];
                let scores: Vec<f64> = (0..context)
                    .map(|t| {
                        let block = self.block_table[s * per_seq + t / BLOCK] as usize;
                        let k = &self.key_cache[((block * BLOCK + t % BLOCK) * HKV + g) * D..][..D];
                        p.scale * q.iter().zip(k).map(|(a, b)| a.to_f64() * b.to_f64()).sum::<f64>()
                    })
                    .collect();
                let gate = Gate { params: p, sigma: self.sigma[h] as f64, gamma: self.gamma[h] as f64 };
                let mut w = vec![0.0; context];
                gate.apply(&[], &scores, &mut w);
                zeros += w.iter().filter(|&&x| x == 0.0).count() as u64;
                total += context as u64;
            }
        }
        zeros as f64 / total.max(1) as f64
    }
}
