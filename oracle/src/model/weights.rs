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
}
