//! The AsyncT forward pass over a paged KV cache (SPEC section 1), one batch step at a time.
//!
//! A step is any mix of prefill chunks and decodes: the rows of every sequence in
//! `query_start_loc` order, each at its absolute position `prefix_len + j`. Each layer writes the
//! step's keys and values into the cache through the slot mapping and then runs
//! [`hp1_direct`] over the cache, the same function the GPU attention paths are held against, so
//! a chunked prefill or a decode reads exactly what an earlier step wrote.
//!
//! With `T = f64` and [`Rounding::Exact`] this is the reference; `T = f32` and `Exact` is the CPU
//! backend; `T = f64` and [`Rounding::Bf16`] rounds at every [`RoundPoint`] as the GPU stores
//! (the weights are then expected to be bf16 values already).

use ndarray::{Array2, ArrayView2, ArrayView3, Axis, Zip};
use rayon::prelude::*;

pub use super::gate_stats::GateStats;
use super::kv_cache::KvCache;
use super::linear::linear;
use super::precision::{RoundPoint, Rounding};
use super::step::StepInput;
use super::validate::{check_dims, check_step, check_weights};
use super::weights::{LayerWeights, ModelDims, ModelWeights, UClipNormWeights};
use crate::error::Result;
use crate::hp1::direct::hp1_direct;
use crate::hp1::{Hp1Inputs, Hp1Params};
use crate::norm::{uclipnorm, uclipnorm_inplace};
use crate::rope::RopeAngles;
use crate::scalar::Scalar;

/// One intermediate value of the forward, seen right after its [`RoundPoint`] (rounded when the
/// model rounds): for comparing a GPU forward layer by layer, and for testing the rounding.
#[derive(Clone, Copy, Debug)]
pub struct Tap<'a, T> {
    /// The decoder layer, or `None` for `FinalNorm` and `Logits`.
    pub layer: Option<usize>,
    /// Which point.
    pub point: RoundPoint,
    /// `[rows, width]`; for q and k, `[tokens, heads * D]`.
    pub value: ArrayView2<'a, T>,
}

/// A model ready to run: dimensions, weights whose shapes have been checked, and the rounding.
#[derive(Clone, Debug)]
pub struct Model<T> {
    /// Sizes and hyper-parameters.
    pub dims: ModelDims,
    /// The weights, shapes checked against `dims`.
    pub weights: ModelWeights<T>,
    /// Whether intermediate values are rounded to bf16.
    pub rounding: Rounding,
}

/// What every sublayer of one forward call reads: the step, its rows' RoPE angles, whether to
/// count the gate, and where rounded values go.
struct Pass<'a, T> {
    step: &'a StepInput<'a>,
    angles: Vec<RopeAngles>,
    want_stats: bool,
    rounding: Rounding,
    tap: &'a mut dyn FnMut(Tap<'_, T>),
    /// The layer being run, `None` after the layers.
    layer: Option<usize>,
}

impl<T: Scalar> Pass<'_, T> {
    fn at(&mut self, point: RoundPoint, a: &mut Array2<T>) {
        self.rounding.apply(a);
        (self.tap)(Tap { layer: self.layer, point, value: a.view() });
    }
}

impl<T: Scalar> Model<T> {
    /// Checks `dims` and every weight shape (errors name the checkpoint tensor, e.g.
    /// `model.layers.3.self_attn.q_norm.alpha`).
    pub fn new(dims: ModelDims, weights: ModelWeights<T>, rounding: Rounding) -> Result<Self> {
        check_dims(&dims)?;
        check_weights(&dims, &weights)?;
        Ok(Self { dims, weights, rounding })
    }

    /// Runs one step: writes its K/V into `cache` and returns the logits of `step.logits` rows,
    /// `[num_tokens or num_seqs, vocab]`.
    pub fn forward(&self, step: &StepInput<'_>, cache: &mut KvCache<T>) -> Result<Array2<T>> {
        Ok(self.run(step, cache, false, &mut |_| {})?.0)
    }

    /// As [`Model::forward`], also counting the gate's exact zeros over every layer, head and
    /// (query row, causal key) pair. Counting recomputes the scores, so it costs extra QK work.
    pub fn forward_with_stats(&self, step: &StepInput<'_>, cache: &mut KvCache<T>) -> Result<(Array2<T>, GateStats)> {
        self.run(step, cache, true, &mut |_| {})
    }

    /// As [`Model::forward`], handing every [`RoundPoint`]'s value to `tap` in forward order.
    pub fn forward_tapped(
        &self,
        step: &StepInput<'_>,
        cache: &mut KvCache<T>,
        tap: &mut dyn FnMut(Tap<'_, T>),
    ) -> Result<Array2<T>> {
        Ok(self.run(step, cache, false, tap)?.0)
    }

    fn run(
        &self,
        step: &StepInput<'_>,
        cache: &mut KvCache<T>,
        want_stats: bool,
        tap: &mut dyn FnMut(Tap<'_, T>),
    ) -> Result<(Array2<T>, GateStats)> {
        let rows = check_step(&self.dims, step, cache)?;
        let d = &self.dims;
        let angles: Vec<RopeAngles> = rows.iter().map(|r| RopeAngles::new(r.pos, d.head_dim, d.rope_theta)).collect();
        let embed = &self.weights.embed_tokens;
        let mut x = Array2::zeros((rows.len(), d.hidden_size));
        for (mut xr, &id) in x.rows_mut().into_iter().zip(step.token_ids) {
            xr.assign(&embed.row(id as usize));
        }
        let mut pass = Pass { step, angles, want_stats, rounding: self.rounding, tap, layer: None };
        let mut stats = GateStats::default();
        for (l, lw) in self.weights.layers.iter().enumerate() {
            pass.layer = Some(l);
            stats += self.attention(&mut pass, lw, l, &mut x, cache)?;
            self.mlp(&mut pass, lw, &mut x);
        }
        pass.layer = None;
        let picked = step.logit_rows();
        let mut h = uclipnorm(x.select(Axis(0), &picked).view(), &self.weights.norm);
        pass.at(RoundPoint::FinalNorm, &mut h);
        let mut logits = linear(h.view(), self.weights.head().view());
        pass.at(RoundPoint::Logits, &mut logits);
        Ok((logits, stats))
    }

    /// The attention sublayer, `x += post_attention_layernorm(o_proj(HP1(...)))`, returning the
    /// gate counts when asked for.
    fn attention(
        &self,
        pass: &mut Pass<'_, T>,
        lw: &LayerWeights<T>,
        l: usize,
        x: &mut Array2<T>,
        cache: &mut KvCache<T>,
    ) -> Result<GateStats> {
        let step = pass.step;
        let d = &self.dims;
        let (n, hd) = (x.nrows(), d.head_dim);
        let a = &lw.attn;
        let mut h = uclipnorm(x.view(), &lw.input_layernorm);
        pass.at(RoundPoint::InputNorm, &mut h);
        let mut q = linear(h.view(), a.q_proj.view());
        pass.at(RoundPoint::QProj, &mut q);
        let mut k = linear(h.view(), a.k_proj.view());
        pass.at(RoundPoint::KProj, &mut k);
        let mut v = linear(h.view(), a.v_proj.view());
        pass.at(RoundPoint::VProj, &mut v);
        norm_rope(&mut q, d.num_heads, hd, &a.q_norm, &pass.angles);
        pass.at(RoundPoint::QNormRope, &mut q);
        norm_rope(&mut k, d.num_kv_heads, hd, &a.k_norm, &pass.angles);
        pass.at(RoundPoint::KNormRope, &mut k);
        cache.write(l, step.slot_mapping, per_head(&k, d.num_kv_heads), per_head(&v, d.num_kv_heads))?;
        let (sigma, gamma) = (a.hp1_sigma.to_vec(), a.hp1_gamma.to_vec());
        let inputs = Hp1Inputs {
            q: per_head(&q, d.num_heads),
            key_cache: cache.key[l].view(),
            value_cache: cache.value[l].view(),
            meta: step.meta,
            sigma: &sigma,
            gamma: &gamma,
            params: self.params(),
        };
        let stats = if pass.want_stats { GateStats::of_inputs(&inputs)? } else { GateStats::default() };
        let mut att = hp1_direct(&inputs)?
            .into_shape_with_order((n, d.num_heads * hd))
            .expect("hp1_direct returns a standard [n, Hq, D] array");
        pass.at(RoundPoint::AttnOutput, &mut att);
        let mut o = linear(att.view(), a.o_proj.view());
        pass.at(RoundPoint::OProj, &mut o);
        uclipnorm_inplace(o.view_mut(), &lw.post_attention_layernorm);
        pass.at(RoundPoint::PostAttnNorm, &mut o);
        x.zip_mut_with(&o, |x, &o| *x = *x + o);
        pass.at(RoundPoint::AttnResidual, x);
        Ok(stats)
    }

    /// The MLP sublayer, `x += post_feedforward_layernorm(down(silu(gate h) * up h))`.
    fn mlp(&self, pass: &mut Pass<'_, T>, lw: &LayerWeights<T>, x: &mut Array2<T>) {
        let mut h = uclipnorm(x.view(), &lw.pre_feedforward_layernorm);
        pass.at(RoundPoint::PreFfnNorm, &mut h);
        let mut g = linear(h.view(), lw.gate_proj.view());
        pass.at(RoundPoint::GateProj, &mut g);
        let mut u = linear(h.view(), lw.up_proj.view());
        pass.at(RoundPoint::UpProj, &mut u);
        Zip::from(&mut g).and(&u).par_for_each(|g, &u| *g = silu(*g) * u);
        pass.at(RoundPoint::MlpProduct, &mut g);
        let mut m = linear(g.view(), lw.down_proj.view());
        pass.at(RoundPoint::DownProj, &mut m);
        uclipnorm_inplace(m.view_mut(), &lw.post_feedforward_layernorm);
        pass.at(RoundPoint::PostFfnNorm, &mut m);
        x.zip_mut_with(&m, |x, &m| *x = *x + m);
        pass.at(RoundPoint::FfnResidual, x);
    }

    fn params(&self) -> Hp1Params<T> {
        self.dims.hp1.cast()
    }
}

/// `m` `[tokens, heads * D]` seen as `[tokens, heads, D]`.
fn per_head<T: Scalar>(m: &Array2<T>, heads: usize) -> ArrayView3<'_, T> {
    let (n, width) = m.dim();
    m.view()
        .into_shape_with_order((n, heads, width / heads))
        .expect("projection outputs are standard [tokens, heads * D] arrays")
}

/// `x sigmoid(x)`.
fn silu<T: Scalar>(x: T) -> T {
    x / (T::one() + (-x).exp())
}

/// The per-head norm over `D` (shared by all heads) and then RoPE at each row's position, on
/// `m` `[tokens, heads * D]`.
fn norm_rope<T: Scalar>(m: &mut Array2<T>, heads: usize, hd: usize, w: &UClipNormWeights<T>, angles: &[RopeAngles]) {
    m.axis_iter_mut(Axis(0)).into_par_iter().zip(angles.par_iter()).for_each(|(row, ang)| {
        let mut r = row.into_shape_with_order((heads, hd)).expect("a row of a standard array is contiguous");
        uclipnorm_inplace(r.view_mut(), w);
        ang.apply(r);
    });
}
