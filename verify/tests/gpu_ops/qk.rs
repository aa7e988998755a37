//! The fused q/k UClipNorm + RoPE + KV-cache write against the oracle's norm, `RopeAngles` and
//! the QNormRope / KNormRope round points, on shuffled slots with padding. The qkv input is drawn
//! in the stacked order (q, k, v heads, channels in order) the oracle reads, and uploaded in the
//! permuted order of the qkv weight (`gpu::gemm::layout`) the kernel reads.

use std::collections::HashSet;
use std::sync::Arc;

use gpu::gemm::layout;
use gpu::ops::{Faults, HeadShape, QkNormRopeCache, QkvInputs, QkvOutputs, RopeTable};
use gpu::Gpu;
use half::bf16;
use ndarray::Array2;
use oracle::model::weights::UClipNormWeights;
use oracle::norm::uclipnorm_inplace;
use oracle::rope::RopeAngles;
use oracle::scalar::round_bf16;
use verify::rng::Counter;

use super::compare::{
    compare_bf16, draw_norm, g, random_bf16, same_bits, slack, Check, DrawnNorm, ALL_NORM_SHAPES, POISON,
};

const THETA: f64 = 1e6;
const BLOCK_SIZE: usize = 16;

/// One step's host inputs.
struct Step {
    /// `[tokens, (Hq + 2 Hkv) D]` in the stacked order.
    qkv: Vec<bf16>,
    positions: Vec<i32>,
    slots: Vec<i64>,
    num_slots: usize,
}

impl Step {
    /// `tokens` tokens at random positions below `max_pos` (the first at `max_pos - 1`), each at
    /// a distinct shuffled slot of a cache with 3 spare blocks, every fifth token padding (-1).
    fn draw(seed: u64, tokens: usize, heads: HeadShape, max_pos: usize) -> Self {
        let qkv = random_bf16(&Counter::new(seed, 20), tokens * heads.qkv_width(), 3.0);
        let pick = Counter::new(seed, 21);
        let mut positions: Vec<i32> = (0..tokens).map(|t| pick.below(max_pos as u64, &[t as u64]) as i32).collect();
        positions[0] = max_pos as i32 - 1;
        let num_slots = (tokens / BLOCK_SIZE + 3) * BLOCK_SIZE;
        let perm = Counter::new(seed, 22).permutation(num_slots);
        let slots = (0..tokens).map(|t| if t % 5 == 2 { -1 } else { perm[t] as i64 }).collect();
        Self { qkv, positions, slots, num_slots }
    }
}

/// What the kernel wrote: q, and the two whole caches.
struct Written {
    q: Vec<bf16>,
    key_cache: Vec<bf16>,
    value_cache: Vec<bf16>,
}

/// One launch; with `queries` false it is given no q buffer (q stays poisoned).
fn launch(
    gpu: &Arc<Gpu>,
    op: &QkNormRopeCache,
    norms: (&DrawnNorm, &DrawnNorm),
    step: &Step,
    faults: &mut Faults,
    queries: bool,
) -> Result<Written, String> {
    let h = op.heads();
    let cache_len = step.num_slots * h.num_kv_heads * h.head_dim;
    let permuted: Vec<bf16> = step
        .qkv
        .chunks(h.qkv_width())
        .flat_map(|row| layout::permute_rows(row, 1, |r| layout::qkv_source(r, h)))
        .collect();
    let (qkv, positions, slots) =
        (g(gpu.upload(&permuted))?, g(gpu.upload(&step.positions))?, g(gpu.upload(&step.slots))?);
    let mut q = g(gpu.upload(&vec![POISON; step.positions.len() * h.num_heads * h.head_dim]))?;
    let mut key_cache = g(gpu.upload(&vec![POISON; cache_len]))?;
    let mut value_cache = g(gpu.upload(&vec![POISON; cache_len]))?;
    let inputs = QkvInputs { qkv: qkv.as_view(), positions: positions.as_view(), slot_mapping: slots.as_view() };
    {
        let mut outputs = QkvOutputs {
            q: queries.then(|| q.as_view_mut()),
            key_cache: key_cache.as_view_mut(),
            value_cache: value_cache.as_view_mut(),
        };
        g(op.run(&norms.0.device, &norms.1.device, &inputs, &mut outputs, faults))?;
    }
    Ok(Written {
        q: g(gpu.download(&q))?,
        key_cache: g(gpu.download(&key_cache))?,
        value_cache: g(gpu.download(&value_cache))?,
    })
}

/// Heads `first..first + count` of token `t`, normed, rotated at `pos` and rounded, as the oracle's
/// `norm_rope` and round point do.
fn normed_rotated(
    step: &Step,
    h: HeadShape,
    t: usize,
    first: usize,
    count: usize,
    pos: usize,
    w: &UClipNormWeights<f64>,
) -> Vec<f64> {
    let d = h.head_dim;
    let row = &step.qkv[t * h.qkv_width()..];
    let mut x = Array2::from_shape_fn((count, d), |(i, c)| row[(first + i) * d + c].to_f64());
    uclipnorm_inplace(x.view_mut(), w);
    RopeAngles::new(pos, d, THETA).apply(x.view_mut());
    x.iter().map(|&v| round_bf16(v)).collect()
}

/// Checks q, the keys and values at each written slot, and that every other slot is untouched.
fn check_written(
    label: &str,
    got: &Written,
    step: &Step,
    h: HeadShape,
    norms: (&DrawnNorm, &DrawnNorm),
    clamp_to: usize,
) -> Check {
    let (d, slot_width) = (h.head_dim, h.num_kv_heads * h.head_dim);
    let (mut q_want, mut k_want, mut k_got, mut v_want, mut v_got) = (vec![], vec![], vec![], vec![], vec![]);
    let mut written = HashSet::new();
    for (t, (&pos, &slot)) in step.positions.iter().zip(&step.slots).enumerate() {
        let pos = (pos.max(0) as usize).min(clamp_to - 1);
        q_want.extend(normed_rotated(step, h, t, 0, h.num_heads, pos, &norms.0.oracle));
        if slot < 0 || slot as usize >= step.num_slots {
            continue;
        }
        let at = slot as usize * slot_width;
        written.insert(slot as usize);
        k_want.extend(normed_rotated(step, h, t, h.num_heads, h.num_kv_heads, pos, &norms.1.oracle));
        k_got.extend_from_slice(&got.key_cache[at..at + slot_width]);
        let v_at = t * h.qkv_width() + (h.num_heads + h.num_kv_heads) * d;
        v_want.extend_from_slice(&step.qkv[v_at..v_at + slot_width]);
        v_got.extend_from_slice(&got.value_cache[at..at + slot_width]);
    }
    compare_bf16(&format!("q {label}"), &got.q, &q_want, None, slack(&q_want))?;
    compare_bf16(&format!("key cache {label}"), &k_got, &k_want, None, slack(&k_want))?;
    same_bits(&format!("value cache {label}"), &v_got, &v_want)?;
    for s in (0..step.num_slots).filter(|s| !written.contains(s)) {
        let untouched = |c: &[bf16]| c[s * slot_width..][..slot_width].iter().all(|v| v.to_bits() == POISON.to_bits());
        if !untouched(&got.key_cache) || !untouched(&got.value_cache) {
            return Err(format!("{label}: slot {s} was written though no token maps to it"));
        }
    }
    Ok(())
}

pub fn qk_norm_rope_cache_matches_the_oracle(gpu: &Arc<Gpu>) -> Check {
    let mut faults = g(Faults::new(gpu))?;
    let cases = [
        (1usize, 8usize, 4usize, 128usize, 32_768usize),
        (7, 4, 2, 64, 4096),
        (300, 2, 1, 256, 4096),
        (300, 8, 4, 128, 32_768),
        (7, 4, 2, 16, 512),
        (300, 4, 4, 64, 4096),
    ];
    for (case, &(tokens, num_heads, num_kv_heads, head_dim, max_pos)) in cases.iter().enumerate() {
        let h = HeadShape { num_heads, num_kv_heads, head_dim };
        let op = g(QkNormRopeCache::new(gpu, h, g(RopeTable::new(gpu, head_dim, max_pos, THETA))?))?;
        for i in 0..ALL_NORM_SHAPES.len() {
            let seed = 700 + 16 * case as u64 + i as u64;
            let q_norm = draw_norm(gpu, seed, ALL_NORM_SHAPES[i], head_dim)?;
            let k_norm = draw_norm(gpu, seed + 1000, ALL_NORM_SHAPES[7 - i], head_dim)?;
            let step = Step::draw(seed, tokens, h, max_pos);
            let got = launch(gpu, &op, (&q_norm, &k_norm), &step, &mut faults, true)?;
            let label = format!("tokens {tokens} heads {num_heads}/{num_kv_heads} D {head_dim} norms {i}/{}", 7 - i);
            check_written(&label, &got, &step, h, (&q_norm, &k_norm), max_pos)?;
            g(faults.check())?;
            // Without a q buffer (a prefill that norms its own queries): the same caches, no q.
            let kv_only = launch(gpu, &op, (&q_norm, &k_norm), &step, &mut faults, false)?;
            same_bits(&format!("key cache without q, {label}"), &kv_only.key_cache, &got.key_cache)?;
            same_bits(&format!("value cache without q, {label}"), &kv_only.value_cache, &got.value_cache)?;
            if kv_only.q.iter().any(|v| v.to_bits() != POISON.to_bits()) {
                return Err(format!("{label}: q was written though none was given"));
            }
            g(faults.check())?;
        }
    }
    Ok(())
}

pub fn qk_norm_rope_cache_masks_and_reports_bad_positions_and_slots(gpu: &Arc<Gpu>) -> Check {
    let mut faults = g(Faults::new(gpu))?;
    let (h, max_pos) = (HeadShape { num_heads: 4, num_kv_heads: 2, head_dim: 64 }, 4096);
    let op = g(QkNormRopeCache::new(gpu, h, g(RopeTable::new(gpu, 64, max_pos, THETA))?))?;
    let q_norm = draw_norm(gpu, 1, ALL_NORM_SHAPES[3], 64)?;
    let k_norm = draw_norm(gpu, 2, ALL_NORM_SHAPES[5], 64)?;
    let mut step = Step::draw(3, 7, h, max_pos);
    step.positions[0] = max_pos as i32 + 3;
    step.slots[1] = (step.num_slots + 7) as i64;
    let got = launch(gpu, &op, (&q_norm, &k_norm), &step, &mut faults, true)?;
    // Token 0 is rotated at the clamped position; token 1 writes nothing; the rest as usual.
    check_written("with bad inputs", &got, &step, h, (&q_norm, &k_norm), max_pos)?;
    let report = faults.check().map_err(|e| e.to_string());
    match &report {
        Err(e) if e.contains("1 position(s)") && e.contains(&(max_pos + 3).to_string()) && e.contains("1 slot(s)") => {
            Ok(())
        }
        _ => Err(format!("the fault word should report position {} and one slot, got {report:?}", max_pos + 3)),
    }
}
