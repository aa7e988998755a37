//! Benchmark inputs: a paged bf16 cache filled fast and reproducibly, gated like a trained model.
//!
//! A [`BatchData`] is one batch step of any sequence shapes (a prefix already cached, a query of
//! new tokens): a decode step is `(context - 1, 1)` per sequence, a full prefill `(0, length)`, a
//! chunked prefill `(prefix, chunk)`. q and k entries are standard normal, so
//! `s = q.k / sqrt(D)` is about N(0, 1); with `sigma` in [1, 2] about 60-75% of the gate's
//! weights are exact zeros, close to a trained AsyncT's 70%. The measured zero fraction (over a
//! sample of rows, with the oracle's gate) is reported.

use half::bf16;
use rayon::prelude::*;

use gpu::attention::{GateParams, Geometry, HostBatch, HostInputs};
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

/// How a decode batch's sequences' lengths are laid out up to its context: the SPEC's grid is
/// `Uniform`; the other two are the batches a continuous batcher makes, where one CTA a row
/// waits on its longest row and split-K on the total work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Lengths {
    /// Every sequence `context` tokens.
    #[default]
    Uniform,
    /// Sequence `i` of `b` has `ceil(context (i + 1) / b)` tokens: evenly spread up to `context`.
    Spread,
    /// Sequence 0 has `context` tokens, every other [`ONE_LONG_SHORT`] (or `context` if shorter).
    OneLong,
}

/// Tokens of each short sequence of [`Lengths::OneLong`]: half a chunk of the attention.
pub const ONE_LONG_SHORT: usize = 64;

impl Lengths {
    /// Each sequence's tokens, `batch` of them, the longest `context` (both at least 1).
    pub fn lens(self, batch: usize, context: usize) -> Vec<usize> {
        (0..batch)
            .map(|i| match self {
                Self::Uniform => context,
                Self::Spread => (context * (i + 1)).div_ceil(batch),
                Self::OneLong if i == 0 => context,
                Self::OneLong => ONE_LONG_SHORT.min(context),
            })
            .collect()
    }

    /// What a point's key carries after `B{batch}_L{context}`: nothing for `Uniform`.
    pub fn suffix(self) -> &'static str {
        match self {
            Self::Uniform => "",
            Self::Spread => "_spread",
            Self::OneLong => "_one-long",
        }
    }
}

/// One batch step's host inputs. `batch.block_table` is `[num_seqs, max_blocks_per_seq]`: the
/// used entries of all rows together are a permutation of all blocks, and a shorter sequence's
/// row is padded with block 0; `batch.seq_lens` is prefix + query of each sequence; `batch.sigma`
/// lies in [1, 2] and `batch.gamma` in [0.5, 1].
pub struct BatchData {
    /// The inputs, `q` holding the query rows of every sequence in order.
    pub batch: HostBatch,
    /// Columns of the block table: the blocks of the longest sequence.
    pub max_blocks_per_seq: usize,
}

/// The gate parameters of SPEC section 1's config.
pub fn params() -> Hp1Params<f64> {
    Hp1Params { scale: 1.0 / (D as f64).sqrt(), fir_k: 3, relu_pre: true, clip_min: 0.0, clip_max: 1.0 }
}

/// [`params`] as the GPU launches take them.
pub fn gate_params() -> GateParams {
    let p = params();
    GateParams {
        scale: p.scale as f32,
        fir_k: p.fir_k,
        relu_pre: p.relu_pre,
        clip_min: p.clip_min as f32,
        clip_max: p.clip_max as f32,
    }
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

impl BatchData {
    /// A step of one sequence per `(prefix, query)` pair: `prefix` tokens already cached and
    /// `query` new ones (at least 1), all of whose K/V are in the cache.
    pub fn new(seqs: &[(usize, usize)], seed: u64) -> Self {
        let lens: Vec<usize> = seqs.iter().map(|&(prefix, query)| prefix + query).collect();
        let needs: Vec<usize> = lens.iter().map(|l| l.div_ceil(BLOCK)).collect();
        let max_blocks_per_seq = needs.iter().copied().max().unwrap_or(0).max(1);
        let num_blocks: usize = needs.iter().sum::<usize>().max(1);
        let perm = Counter::new(seed, 0).permutation(num_blocks);
        let mut block_table = vec![0i32; seqs.len() * max_blocks_per_seq];
        let mut next = perm.iter();
        for (s, &need) in needs.iter().enumerate() {
            for (slot, block) in block_table[s * max_blocks_per_seq..][..need].iter_mut().zip(&mut next) {
                *slot = *block as i32;
            }
        }
        let mut query_start_loc = vec![0i32];
        for &(_, query) in seqs {
            query_start_loc.push(query_start_loc[query_start_loc.len() - 1] + query as i32);
        }
        let num_tokens: usize = seqs.iter().map(|&(_, query)| query).sum();
        let slots = num_blocks * BLOCK * HKV * D;
        let batch = HostBatch {
            q: normal_bf16(seed, 1, num_tokens * HQ * D),
            key_cache: normal_bf16(seed, 2, slots),
            value_cache: normal_bf16(seed, 3, slots),
            block_table,
            seq_lens: lens.iter().map(|&l| l as i32).collect(),
            query_start_loc,
            sigma: (0..HQ).map(|h| 1.0 + h as f32 / HQ as f32).collect(),
            gamma: (0..HQ).map(|h| 0.5 + h as f32 / (2 * HQ) as f32).collect(),
        };
        Self { batch, max_blocks_per_seq }
    }

    /// A decode step of `batch` sequences of `context` tokens each (`context` at least 1).
    pub fn decode(batch: usize, context: usize, seed: u64) -> Self {
        Self::decode_lengths(batch, context, Lengths::Uniform, seed)
    }

    /// A decode step of `batch` sequences whose tokens `lengths` lays out up to `context`.
    pub fn decode_lengths(batch: usize, context: usize, lengths: Lengths, seed: u64) -> Self {
        let seqs: Vec<(usize, usize)> = lengths.lens(batch, context).into_iter().map(|l| (l - 1, 1)).collect();
        Self::new(&seqs, seed)
    }

    /// Query rows of the step.
    pub fn num_tokens(&self) -> usize {
        self.batch.query_start_loc.last().map_or(0, |&n| n as usize)
    }

    /// The launch geometry of exactly this step's rows and table.
    pub fn geometry(&self) -> Geometry {
        Geometry {
            rows: self.num_tokens(),
            num_heads: HQ,
            num_kv_heads: HKV,
            head_dim: D,
            block_size: BLOCK,
            max_blocks_per_seq: self.max_blocks_per_seq,
        }
    }

    /// The inputs as [`gpu::attention::AttnBuffers::upload`] takes them.
    pub fn host(&self) -> HostInputs<'_> {
        self.batch.inputs()
    }

    /// Bytes of K and V a softmax decode must read: the whole cache of every sequence.
    pub fn kv_bytes(&self) -> usize {
        let tokens: usize = self.batch.seq_lens.iter().map(|&l| l as usize).sum();
        2 * tokens * HKV * D * 2
    }

    /// Bytes of q and the K/V of every sequence: what the SDPA anchor counts as one input set
    /// (`2 * b * (Hq + 2 Hkv) * t * D` for a full prefill).
    pub fn qkv_bytes(&self) -> usize {
        self.batch.q.len() * 2 + self.kv_bytes()
    }

    /// Useful flops of causal attention over the step, QK and PV at 2 flops per multiply-add:
    /// `4 * D * Hq * sum over query rows of the keys the row sees`, i.e. for a sequence of prefix
    /// `P` and query `Q`, `Q * P + Q * (Q + 1) / 2` keys summed. For a full prefill (`P = 0`) this
    /// is `4 * b * Hq * D * T * (T + 1) / 2`, exactly the `causal_flops` of
    /// `scripts/attention_anchor.py`, so TFLOP/s here and there compare like with like.
    pub fn causal_flops(&self) -> f64 {
        let keys: f64 = self
            .batch
            .query_start_loc
            .windows(2)
            .zip(&self.batch.seq_lens)
            .map(|(w, &len)| {
                let (query, prefix) = ((w[1] - w[0]) as f64, (len - (w[1] - w[0])) as f64);
                query * prefix + query * (query + 1.0) / 2.0
            })
            .sum();
        4.0 * (D * HQ) as f64 * keys
    }

    /// The gate's zero fraction (every head, every key a row sees) over up to `rows_per_seq`
    /// query rows, evenly spaced from the last, of each of the first `seqs` sequences.
    pub fn zero_fraction(&self, seqs: usize, rows_per_seq: usize) -> f64 {
        let mut picks = Vec::new();
        for s in 0..self.batch.seq_lens.len().min(seqs) {
            let (start, end) = (self.batch.query_start_loc[s] as usize, self.batch.query_start_loc[s + 1] as usize);
            let query = end - start;
            let prefix = self.batch.seq_lens[s] as usize - query;
            for k in 0..rows_per_seq.min(query) {
                let local = query - 1 - k * query / rows_per_seq.min(query);
                for h in 0..HQ {
                    picks.push((s, start + local, prefix + local + 1, h));
                }
            }
        }
        let p = params();
        let (zeros, total) = picks
            .par_iter()
            .map(|&(s, row, keys, h)| {
                let g = h / (HQ / HKV);
                let q = &self.batch.q[(row * HQ + h) * D..][..D];
                let scores: Vec<f64> = (0..keys)
                    .map(|t| {
                        let block = self.batch.block_table[s * self.max_blocks_per_seq + t / BLOCK] as usize;
                        let k = &self.batch.key_cache[((block * BLOCK + t % BLOCK) * HKV + g) * D..][..D];
                        p.scale * q.iter().zip(k).map(|(a, b)| a.to_f64() * b.to_f64()).sum::<f64>()
                    })
                    .collect();
                let gate = Gate { params: p, sigma: self.batch.sigma[h] as f64, gamma: self.batch.gamma[h] as f64 };
                let mut w = vec![0.0; keys];
                gate.apply(&[], &scores, &mut w);
                (w.iter().filter(|&&x| x == 0.0).count() as u64, keys as u64)
            })
            .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        zeros as f64 / total.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_holds_every_block_once_and_each_sequence_its_own() {
        let seqs = [(0, 17), (32, 1), (5, 3), (100, 60)];
        let data = BatchData::new(&seqs, 7);
        let needs = [2, 3, 1, 10];
        assert_eq!(data.max_blocks_per_seq, 10);
        assert_eq!(data.batch.seq_lens, [17, 33, 8, 160]);
        assert_eq!(data.batch.query_start_loc, [0, 17, 18, 21, 81]);
        assert_eq!(data.batch.q.len(), 81 * HQ * D);
        assert_eq!(data.batch.key_cache.len(), 16 * BLOCK * HKV * D);
        let mut used: Vec<i32> =
            needs.iter().enumerate().flat_map(|(s, &n)| data.batch.block_table[s * 10..][..n].to_vec()).collect();
        used.sort_unstable();
        assert_eq!(used, (0..16).collect::<Vec<i32>>());
        // The geometry's checks on upload (the GPU side) would refuse anything else.
        let g = data.geometry();
        assert_eq!((g.rows, g.max_blocks_per_seq), (81, 10));
    }

    #[test]
    fn the_length_profiles_reach_the_context_and_spread_or_skew_below_it() {
        assert_eq!(Lengths::Uniform.lens(3, 100), [100, 100, 100]);
        assert_eq!(Lengths::Spread.lens(4, 100), [25, 50, 75, 100]);
        assert_eq!(Lengths::Spread.lens(3, 2), [1, 2, 2]);
        assert_eq!(Lengths::OneLong.lens(3, 4096), [4096, 64, 64]);
        assert_eq!(Lengths::OneLong.lens(2, 10), [10, 10]);
        for lengths in [Lengths::Uniform, Lengths::Spread, Lengths::OneLong] {
            assert_eq!(lengths.lens(1, 7), [7], "{lengths:?}");
            let data = BatchData::decode_lengths(5, 300, lengths, 2);
            let want: Vec<i32> = lengths.lens(5, 300).iter().map(|&l| l as i32).collect();
            assert_eq!(data.batch.seq_lens, want, "{lengths:?}");
            assert_eq!((data.num_tokens(), data.max_blocks_per_seq), (5, 300usize.div_ceil(BLOCK)));
        }
        assert_eq!(BatchData::decode(2, 48, 1).batch.seq_lens, [48, 48]);
    }

    #[test]
    fn causal_flops_match_the_anchor_and_split_across_chunks() {
        for (b, t) in [(4usize, 64usize), (1, 1000), (3, 17)] {
            let anchor = 4.0 * b as f64 * HQ as f64 * D as f64 * t as f64 * (t as f64 + 1.0) / 2.0;
            let data = BatchData::new(&vec![(0, t); b], 1);
            assert_eq!(data.causal_flops(), anchor, "B{b}_T{t}");
        }
        // A chunk after a prefix does the work of the whole prefill less that of the prefix.
        let whole = BatchData::new(&[(0, 96)], 1).causal_flops();
        let prefix = BatchData::new(&[(0, 64)], 1).causal_flops();
        assert_eq!(BatchData::new(&[(64, 32)], 1).causal_flops(), whole - prefix);
        // A decode row sees its whole context.
        assert_eq!(BatchData::decode(2, 48, 1).causal_flops(), (4 * HQ * D * 2 * 48) as f64);
    }

    #[test]
    fn the_gate_zeros_about_as_many_weights_as_a_trained_model() {
        for data in [BatchData::decode(4, 512, 3), BatchData::new(&[(0, 256), (128, 64)], 4)] {
            let z = data.zero_fraction(4, 4);
            assert!((0.5..0.85).contains(&z), "zero fraction {z}");
        }
    }

    #[test]
    fn the_zero_fraction_counts_the_keys_each_sampled_row_sees() {
        // A row that sees one key: s = scale q.k, m = max(s, 0) / 3, z = s - sigma m; with
        // sigma <= 2 the weight is zero exactly when s <= 0.
        let data = BatchData::new(&[(0, 1)], 9);
        let p = params();
        let zeros = (0..HQ)
            .filter(|&h| {
                let g = h / (HQ / HKV);
                let q = &data.batch.q[h * D..][..D];
                let block = data.batch.block_table[0] as usize;
                let k = &data.batch.key_cache[(block * BLOCK * HKV + g) * D..][..D];
                p.scale * q.iter().zip(k).map(|(a, b)| a.to_f64() * b.to_f64()).sum::<f64>() <= 0.0
            })
            .count();
        assert_eq!(data.zero_fraction(1, 4), zeros as f64 / HQ as f64);
    }
}
