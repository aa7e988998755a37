//! Seeded random weights for the generated presets (SPEC section 1, "Presets"): deterministic,
//! every value a bf16 number, scaled so that activations stay in a sensible range through every
//! layer and the HP1 gate is mostly exact zeros (50% to 85%, as a trained AsyncT's ~70%).
//!
//! Each tensor draws from its own stream, seeded from the model seed and the tensor's checkpoint
//! name, and each row of a matrix from a stream of its own, so the result does not depend on
//! generation order or thread count.
//!
//! How the scales were chosen (`H` hidden, `D` head dim, `L` layers):
//! - Every projection is `N(0, 1/fan_in)`, so a GEMM keeps its input's spread.
//! - `embed_tokens` is `N(0, (4/sqrt(H))^2)`. The head is tied, so a logit is a dot product of
//!   `H` norm outputs (spread ~0.5) with an embedding row: spread ~2, whatever `H` is.
//! - Each norm's `alpha` is about `0.5 / spread of its input` (jittered per channel by +-25%),
//!   so `alpha * x` has a spread near 0.5 and the clamp to `[-1, 1]` bites on a few percent
//!   of values, as a working UClipNorm should. The residual stream grows by one post-norm output
//!   per sublayer, so the input norms' `alpha` shrinks with depth to match the grown spread.
//! - The post-sublayer norms' gamma is the embedding's spread, so every sublayer adds about a
//!   quarter of the embedding's variance to the stream: finite and still dominated by no one part.
//! - q/k norms: `alpha` per channel over `D`, gamma one scalar (SPEC section 3) of 2.0, giving
//!   scores `s = (q . k) / sqrt(D)` a spread near 1, where the gate's clamp to `[0, 1]` is neither
//!   always saturated nor always tiny.
//! - `hp1_sigma` uniform in `[1.0, 2.0]` per head: for scores of spread ~1 the FIR term
//!   `sigma * mean(r_t, r_t-1, r_t-2)` then gates off 30% to 60% of the positive scores besides
//!   every non-positive one, about 70% zeros overall. (`sigma >= F` would make every weight zero.)
//! - `hp1_gamma` uniform in `[0.25, 0.5]`: the output sums `p_t v_t` without normalisation, so
//!   the gain keeps a few hundred keys' sum in range before the post-attention norm clamps it.
//! - Norm shapes vary on purpose so every path of the broadcast is exercised: `[C]`/`[C]` for
//!   the input norm, `[1]`/`[C]` + bias for the post-attention norm, `[C]`/`[1]` for the
//!   pre-feedforward norm, `[C]`/`[C]` + bias for the post-feedforward and final norms.

use ndarray::{Array1, Array2, Axis};
use rayon::prelude::*;

use super::weights::{AttnWeights, LayerWeights, ModelDims, ModelWeights, UClipNormWeights};
use crate::scalar::round_bf16;

/// Random weights for `dims`, the same for the same `seed` on every machine.
pub fn random_weights(dims: &ModelDims, seed: u64) -> ModelWeights<f32> {
    let g = Draw { seed };
    let h = dims.hidden_size;
    let sigma_e = 4.0 / (h as f64).sqrt();
    // Variance a post-sublayer norm adds to the stream, relative to the embedding's.
    let added = 0.25;
    let stream = |sublayers: usize| sigma_e * (1.0 + added * sublayers as f64).sqrt();
    let layers = (0..dims.num_layers).map(|i| layer(&g, dims, i, stream(2 * i), stream(2 * i + 1), sigma_e)).collect();
    ModelWeights {
        embed_tokens: g.normal("model.embed_tokens.weight", (dims.vocab_size, h), sigma_e),
        layers,
        norm: UClipNormWeights {
            alpha: g.jittered("model.norm.alpha", h, 0.5 / stream(2 * dims.num_layers)),
            weight: g.jittered("model.norm.weight", h, 1.0),
            bias: Some(g.normal_vec("model.norm.bias", h, 0.05)),
        },
        lm_head: None,
    }
}

fn layer(g: &Draw, d: &ModelDims, i: usize, attn_in: f64, mlp_in: f64, sigma_e: f64) -> LayerWeights<f32> {
    let p = format!("model.layers.{i}");
    let (h, m) = (d.hidden_size, d.intermediate_size);
    let n = |name: &str| format!("{p}.{name}");
    // Spreads of the sublayer outputs the post norms see, for unit-gain inputs of spread ~0.5:
    // o_proj of a gated sum of values, and down_proj of silu(gate) * up.
    let (attn_out, mlp_out) = (0.25, 0.15);
    LayerWeights {
        attn: attention(g, d, &format!("{p}.self_attn")),
        gate_proj: g.normal(&n("mlp.gate_proj.weight"), (m, h), 1.0 / (h as f64).sqrt()),
        up_proj: g.normal(&n("mlp.up_proj.weight"), (m, h), 1.0 / (h as f64).sqrt()),
        down_proj: g.normal(&n("mlp.down_proj.weight"), (h, m), 1.0 / (m as f64).sqrt()),
        input_layernorm: UClipNormWeights {
            alpha: g.jittered(&n("input_layernorm.alpha"), h, 0.5 / attn_in),
            weight: g.jittered(&n("input_layernorm.weight"), h, 1.0),
            bias: None,
        },
        post_attention_layernorm: UClipNormWeights {
            alpha: g.jittered(&n("post_attention_layernorm.alpha"), 1, 0.5 / attn_out),
            weight: g.jittered(&n("post_attention_layernorm.weight"), h, sigma_e),
            bias: Some(g.normal_vec(&n("post_attention_layernorm.bias"), h, 0.1 * sigma_e)),
        },
        pre_feedforward_layernorm: UClipNormWeights {
            alpha: g.jittered(&n("pre_feedforward_layernorm.alpha"), h, 0.5 / mlp_in),
            weight: g.jittered(&n("pre_feedforward_layernorm.weight"), 1, 1.0),
            bias: None,
        },
        post_feedforward_layernorm: UClipNormWeights {
            alpha: g.jittered(&n("post_feedforward_layernorm.alpha"), h, 0.5 / mlp_out),
            weight: g.jittered(&n("post_feedforward_layernorm.weight"), h, sigma_e),
            bias: Some(g.normal_vec(&n("post_feedforward_layernorm.bias"), h, 0.1 * sigma_e)),
        },
    }
}

fn attention(g: &Draw, d: &ModelDims, p: &str) -> AttnWeights<f32> {
    let (h, hd) = (d.hidden_size, d.head_dim);
    let n = |name: &str| format!("{p}.{name}");
    let w_in = 1.0 / (h as f64).sqrt();
    // q and k leave their projections with a spread near 0.45 (input norm output times unit gain).
    let qk_alpha = 0.5 / 0.45;
    let qk_gain = 2.0;
    AttnWeights {
        q_proj: g.normal(&n("q_proj.weight"), (d.num_heads * hd, h), w_in),
        k_proj: g.normal(&n("k_proj.weight"), (d.num_kv_heads * hd, h), w_in),
        v_proj: g.normal(&n("v_proj.weight"), (d.num_kv_heads * hd, h), w_in),
        o_proj: g.normal(&n("o_proj.weight"), (h, d.num_heads * hd), 1.0 / ((d.num_heads * hd) as f64).sqrt()),
        q_norm: UClipNormWeights {
            alpha: g.jittered(&n("q_norm.alpha"), hd, qk_alpha),
            weight: Array1::from_elem(1, bf16(qk_gain)),
            bias: None,
        },
        k_norm: UClipNormWeights {
            alpha: g.jittered(&n("k_norm.alpha"), hd, qk_alpha),
            weight: Array1::from_elem(1, bf16(qk_gain)),
            bias: None,
        },
        hp1_sigma: g.uniform(&n("hp1_sigma"), d.num_heads, 1.0, 2.0),
        hp1_gamma: g.uniform(&n("hp1_gamma"), d.num_heads, 0.25, 0.5),
    }
}

/// Draws tensors from per-tensor, per-row streams of one model seed.
struct Draw {
    seed: u64,
}

impl Draw {
    fn stream(&self, name: &str, row: usize) -> SplitMix64 {
        SplitMix64(mix(mix(self.seed, fnv1a(name)), row as u64))
    }

    /// `[rows, cols]` of `N(0, std^2)`, rounded to bf16.
    fn normal(&self, name: &str, shape: (usize, usize), std: f64) -> Array2<f32> {
        let mut a = Array2::zeros(shape);
        a.axis_iter_mut(Axis(0)).into_par_iter().enumerate().for_each(|(r, mut row)| {
            let mut rng = self.stream(name, r);
            row.iter_mut().for_each(|v| *v = bf16(std * rng.normal()));
        });
        a
    }

    fn normal_vec(&self, name: &str, len: usize, std: f64) -> Array1<f32> {
        let mut rng = self.stream(name, 0);
        Array1::from_shape_fn(len, |_| bf16(std * rng.normal()))
    }

    fn uniform(&self, name: &str, len: usize, lo: f64, hi: f64) -> Array1<f32> {
        let mut rng = self.stream(name, 0);
        Array1::from_shape_fn(len, |_| bf16(lo + (hi - lo) * rng.uniform()))
    }

    /// `len` values of `center` times a factor uniform in `[0.75, 1.25]`.
    fn jittered(&self, name: &str, len: usize, center: f64) -> Array1<f32> {
        self.uniform(name, len, 0.75 * center, 1.25 * center)
    }
}

fn bf16(x: f64) -> f32 {
    round_bf16(x as f32)
}

/// Steele, Lea and Flood's SplitMix64: tiny, fast, and every seed (zero included) is good.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        finalize(self.0)
    }

    /// Uniform in the open interval `(0, 1)`, so the logarithm below is finite.
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal by Box-Muller (one of the pair; simplicity beats the saved draw here).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// SplitMix64's output function: a bijective avalanche of 64 bits.
fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Combines a seed and a value into a new seed.
fn mix(seed: u64, v: u64) -> u64 {
    finalize(seed ^ finalize(v.wrapping_add(0x9E37_79B9_7F4A_7C15)))
}

/// FNV-1a of a tensor name.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xCBF2_9CE4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01B3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hp1::Hp1Params;

    fn tiny() -> ModelDims {
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
            hp1: Hp1Params { scale: 0.25, fir_k: 3, relu_pre: true, clip_min: 0.0, clip_max: 1.0 },
        }
    }

    #[test]
    fn same_seed_same_weights_other_seed_other_weights() {
        let a = random_weights(&tiny(), 7);
        assert_eq!(a, random_weights(&tiny(), 7));
        assert_ne!(a.embed_tokens, random_weights(&tiny(), 8).embed_tokens);
    }

    #[test]
    fn every_value_is_bf16_and_finite() {
        let w = random_weights(&tiny(), 1);
        let mut all: Vec<f32> = w.embed_tokens.iter().copied().collect();
        for l in &w.layers {
            all.extend(l.attn.q_proj.iter().chain(&l.down_proj).chain(&l.attn.hp1_sigma));
            all.extend(l.post_attention_layernorm.bias.iter().flatten());
        }
        assert!(all.iter().all(|&v| v.is_finite() && round_bf16(v) == v));
    }

    #[test]
    fn normal_draws_have_unit_spread() {
        let mut rng = SplitMix64(3);
        let xs: Vec<f64> = (0..20000).map(|_| rng.normal()).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!(mean.abs() < 0.03 && (var - 1.0).abs() < 0.05, "mean {mean}, var {var}");
    }
}
