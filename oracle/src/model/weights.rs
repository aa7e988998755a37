//! The AsyncT weights and dimensions, as the forward pass reads them (SPEC section 1).
//!
//! Tensor names map one to one onto checkpoint names (`model.layers.{i}.self_attn.q_proj.weight`
//! is `layers[i].attn.q_proj`); the `model` crate loads a checkpoint into these structs.
//! Linear weights keep the checkpoint's `[out, in]` layout, so `y = x . W^T`.

use ndarray::{Array1, Array2};

use crate::hp1::Hp1Params;
use crate::scalar::Scalar;

/// The sizes and fixed hyper-parameters of a model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelDims {
    /// Vocabulary entries (rows of `embed_tokens`).
    pub vocab_size: usize,
    /// Residual width.
    pub hidden_size: usize,
    /// MLP inner width `I`.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_layers: usize,
    /// Query heads `Hq`.
    pub num_heads: usize,
    /// Key/value heads `Hkv`, dividing `Hq`.
    pub num_kv_heads: usize,
    /// Head dimension `D`.
    pub head_dim: usize,
    /// RoPE base.
    pub rope_theta: f64,
    /// Longest sequence the model accepts.
    pub max_position_embeddings: usize,
    /// HP1 parameters shared by all layers, with `scale` resolved.
    pub hp1: Hp1Params<f64>,
}

/// One UClipNorm: `y = weight * clamp(alpha * x, -1, 1) + bias`, per channel (SPEC section 3).
#[derive(Clone, Debug, PartialEq)]
pub struct UClipNormWeights<T> {
    /// `[1]` (scalar) or `[C]`.
    pub alpha: Array1<T>,
    /// Gamma: `[1]` (scalar) or `[C]`.
    pub weight: Array1<T>,
    /// Beta: `[C]`, or absent for zero.
    pub bias: Option<Array1<T>>,
}

/// The attention sublayer of one layer.
#[derive(Clone, Debug, PartialEq)]
pub struct AttnWeights<T> {
    /// `[Hq*D, hidden]`.
    pub q_proj: Array2<T>,
    /// `[Hkv*D, hidden]`.
    pub k_proj: Array2<T>,
    /// `[Hkv*D, hidden]`.
    pub v_proj: Array2<T>,
    /// `[hidden, Hq*D]`.
    pub o_proj: Array2<T>,
    /// UClipNorm over `D`, shared by all query heads.
    pub q_norm: UClipNormWeights<T>,
    /// UClipNorm over `D`, shared by all kv heads.
    pub k_norm: UClipNormWeights<T>,
    /// `[Hq]` HP1 FIR weights.
    pub hp1_sigma: Array1<T>,
    /// `[Hq]` HP1 output gains.
    pub hp1_gamma: Array1<T>,
}

/// One decoder layer (Peri-LN: a norm on both sides of each sublayer).
#[derive(Clone, Debug, PartialEq)]
pub struct LayerWeights<T> {
    /// Attention projections, q/k norms and HP1 gains.
    pub attn: AttnWeights<T>,
    /// `[I, hidden]`.
    pub gate_proj: Array2<T>,
    /// `[I, hidden]`.
    pub up_proj: Array2<T>,
    /// `[hidden, I]`.
    pub down_proj: Array2<T>,
    /// Before attention.
    pub input_layernorm: UClipNormWeights<T>,
    /// On the attention output, before the residual add.
    pub post_attention_layernorm: UClipNormWeights<T>,
    /// Before the MLP.
    pub pre_feedforward_layernorm: UClipNormWeights<T>,
    /// On the MLP output, before the residual add.
    pub post_feedforward_layernorm: UClipNormWeights<T>,
}

/// A whole model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelWeights<T> {
    /// `[vocab, hidden]`.
    pub embed_tokens: Array2<T>,
    /// The decoder layers in order.
    pub layers: Vec<LayerWeights<T>>,
    /// Final norm before the head.
    pub norm: UClipNormWeights<T>,
    /// `[vocab, hidden]`, or `None` when tied to `embed_tokens`.
    pub lm_head: Option<Array2<T>>,
}

impl<T: Scalar> ModelWeights<T> {
    /// The output projection: `lm_head`, or `embed_tokens` when tied.
    pub fn head(&self) -> &Array2<T> {
        self.lm_head.as_ref().unwrap_or(&self.embed_tokens)
    }

    /// The same weights in another float type (f32 checkpoints widen to the f64 reference exactly).
    pub fn cast<U: Scalar>(&self) -> ModelWeights<U> {
        ModelWeights {
            embed_tokens: cast(&self.embed_tokens),
            layers: self.layers.iter().map(LayerWeights::cast).collect(),
            norm: self.norm.cast(),
            lm_head: self.lm_head.as_ref().map(cast),
        }
    }
}

impl<T: Scalar> LayerWeights<T> {
    /// The same layer in another float type.
    pub fn cast<U: Scalar>(&self) -> LayerWeights<U> {
        LayerWeights {
            attn: self.attn.cast(),
            gate_proj: cast(&self.gate_proj),
            up_proj: cast(&self.up_proj),
            down_proj: cast(&self.down_proj),
            input_layernorm: self.input_layernorm.cast(),
            post_attention_layernorm: self.post_attention_layernorm.cast(),
            pre_feedforward_layernorm: self.pre_feedforward_layernorm.cast(),
            post_feedforward_layernorm: self.post_feedforward_layernorm.cast(),
        }
    }
}

impl<T: Scalar> AttnWeights<T> {
    /// The same attention weights in another float type.
    pub fn cast<U: Scalar>(&self) -> AttnWeights<U> {
        AttnWeights {
            q_proj: cast(&self.q_proj),
            k_proj: cast(&self.k_proj),
            v_proj: cast(&self.v_proj),
            o_proj: cast(&self.o_proj),
            q_norm: self.q_norm.cast(),
            k_norm: self.k_norm.cast(),
            hp1_sigma: cast(&self.hp1_sigma),
            hp1_gamma: cast(&self.hp1_gamma),
        }
    }
}

impl<T: Scalar> UClipNormWeights<T> {
    /// The same norm in another float type.
    pub fn cast<U: Scalar>(&self) -> UClipNormWeights<U> {
        UClipNormWeights { alpha: cast(&self.alpha), weight: cast(&self.weight), bias: self.bias.as_ref().map(cast) }
    }
}

fn cast<T: Scalar, U: Scalar, D: ndarray::Dimension>(a: &ndarray::Array<T, D>) -> ndarray::Array<U, D> {
    a.mapv(|v| U::of(v.f64()))
}
