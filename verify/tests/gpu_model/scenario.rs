//! The scenarios `gpu_model` runs: sequences of seeded tokens in shuffled cache blocks, their
//! steps' inputs, the models (random weights of a preset's shape, as the GPU and the oracle read
//! them), and the distances between GPU and oracle (logits rows, and K/V cache rows layer by
//! layer).

use std::sync::Arc;

use gpu::Gpu;
use half::bf16;
use model::checkpoint::{load_weights, save_checkpoint, StoredDtype};
use model::config::ModelConfig;
use model::gpu_backend::forward::{GpuModel, KvSize};
use model::gpu_backend::step_buffers::Capacity;
use model::presets::Preset;
use model::start_times::StartTimes;
use ndarray::Array2;
use oracle::hp1::AttnMetadata;
use oracle::model::init::random_weights;
use oracle::model::kv_cache::KvCache;
use oracle::model::weights::ModelWeights;

/// Tokens a cache block.
pub const BLOCK: usize = 16;
/// Blocks of the scenarios' caches, and the most a sequence's table holds.
pub const BLOCKS: usize = 96;

/// A sequence of a scenario: its token ids and the cache blocks it owns.
pub struct Seq {
    pub tokens: Vec<u32>,
    pub blocks: Vec<i32>,
}

/// One step: `(sequence, first position, query tokens)` per sequence, decodes first.
pub type Step = Vec<(usize, usize, usize)>;

/// The step's ids, metadata and slots over `seqs`.
pub fn step_input(seqs: &[Seq], step: &Step) -> (Vec<u32>, AttnMetadata, Vec<i64>) {
    let width = step.iter().map(|&(s, _, _)| seqs[s].blocks.len()).max().unwrap_or(1);
    let mut table = Array2::<i32>::zeros((step.len(), width));
    let (mut ids, mut slots, mut seq_lens, mut qsl) = (Vec::new(), Vec::new(), Vec::new(), vec![0i32]);
    for (i, &(s, start, len)) in step.iter().enumerate() {
        for (j, &b) in seqs[s].blocks.iter().enumerate() {
            table[[i, j]] = b;
        }
        for t in start..start + len {
            ids.push(seqs[s].tokens[t]);
            slots.push((seqs[s].blocks[t / BLOCK] as usize * BLOCK + t % BLOCK) as i64);
        }
        seq_lens.push((start + len) as i32);
        qsl.push(qsl[i] + len as i32);
    }
    (ids, AttnMetadata { block_table: table, seq_lens, query_start_loc: qsl }, slots)
}

/// Sequences of these lengths with seeded token ids and disjoint, shuffled blocks.
pub fn sequences(lens: &[usize], vocab: usize, seed: u64) -> Vec<Seq> {
    sequences_among(lens, vocab, seed, BLOCKS)
}

/// [`sequences`] in a cache of `blocks` blocks.
pub fn sequences_among(lens: &[usize], vocab: usize, seed: u64, blocks: usize) -> Vec<Seq> {
    let mut order: Vec<i32> = (0..blocks as i32).collect();
    let mut x = seed;
    for i in (1..order.len()).rev() {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        order.swap(i, (x >> 33) as usize % (i + 1));
    }
    let mut next = order.into_iter();
    lens.iter()
        .map(|&len| {
            let tokens =
                (0..len).map(|t| ((t as u64 * 7919 + seed * 104_729 + len as u64) % vocab as u64) as u32).collect();
            Seq { tokens, blocks: next.by_ref().take(len.div_ceil(BLOCK)).collect() }
        })
        .collect()
}

/// The asynct-small shape with random weights, as the GPU loads it (raw bf16 from a checkpoint)
/// and as the oracle reads it.
pub fn small_model(seed: u64) -> Result<(ModelConfig, ModelWeights<f32>, ModelWeights<bf16>), String> {
    preset_model(Preset::Small, seed)
}

/// A preset's shape with random weights, as the GPU and the oracle read it.
pub fn preset_model(preset: Preset, seed: u64) -> Result<(ModelConfig, ModelWeights<f32>, ModelWeights<bf16>), String> {
    let cfg = preset.config();
    let weights = random_weights(&cfg.dims(), seed);
    let dir = std::env::temp_dir().join(format!("asynct-gpu-model-small-{}-{seed}", std::process::id()));
    save_checkpoint(&dir, &cfg, &weights, StoredDtype::Bf16).map_err(|e| e.to_string())?;
    let host = load_weights::<bf16>(&dir, &cfg, &mut |_, _| {}).map_err(|e| e.to_string())?;
    std::fs::remove_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok((cfg, weights, host))
}

/// A GPU model of `cfg` with `host`'s weights, its buffers for steps of 256 tokens and 8
/// sequences of up to [`BLOCKS`] blocks, its cache [`BLOCKS`] blocks.
pub fn gpu_model(gpu: &Arc<Gpu>, cfg: &ModelConfig, host: &ModelWeights<bf16>) -> Result<GpuModel, String> {
    let cap = Capacity { max_tokens: 256, max_seqs: 8, max_blocks_per_seq: BLOCKS };
    GpuModel::new(gpu, cfg.dims(), host, KvSize::Blocks(BLOCKS), BLOCK, cap, &mut |_, _| {}, &mut StartTimes::silent())
        .map_err(|e| e.to_string())
}

/// Relative L2 of `got` against `want` (f64), and the worst row's; any non-finite value fails.
pub fn errors(got: &Array2<f32>, want: &Array2<f64>) -> Result<(f64, f64), String> {
    let (mut diff2, mut ref2, mut worst_row) = (0.0f64, 0.0f64, 0.0f64);
    for (g, w) in got.rows().into_iter().zip(want.rows()) {
        let (mut d2, mut r2) = (0.0, 0.0);
        for (&g, &w) in g.iter().zip(w.iter()) {
            if !g.is_finite() {
                return Err(format!("a logit is {g}"));
            }
            d2 += (f64::from(g) - w).powi(2);
            r2 += w * w;
        }
        worst_row = worst_row.max((d2 / r2).sqrt());
        diff2 += d2;
        ref2 += r2;
    }
    Ok(((diff2 / ref2).sqrt(), worst_row))
}

/// The relative L2 of every layer's K and V cache rows at `slots`, GPU against oracle: where the
/// two forwards part, layer by layer.
pub fn cache_errors(model: &GpuModel, cache: &KvCache<f64>, gpu: &Gpu, slots: &[i64]) -> Result<String, String> {
    let width = model.dims().num_kv_heads * model.dims().head_dim;
    let mut out = Vec::new();
    for l in 0..model.dims().num_layers {
        let mut parts = Vec::new();
        for (name, dev, host) in
            [("K", &model.cache().key[l], &cache.key[l]), ("V", &model.cache().value[l], &cache.value[l])]
        {
            let got = gpu.download(dev).map_err(|e| e.to_string())?;
            let flat = host.as_slice().ok_or("the oracle's cache is contiguous")?;
            let (mut d2, mut r2) = (0.0f64, 0.0f64);
            for &slot in slots {
                let at = slot as usize * width;
                for j in at..at + width {
                    d2 += (got[j].to_f64() - flat[j]).powi(2);
                    r2 += flat[j] * flat[j];
                }
            }
            parts.push(format!("{name} {:.1e}", (d2 / r2).sqrt()));
        }
        out.push(format!("layer {l}: {}", parts.join(", ")));
    }
    Ok(out.join("; "))
}
