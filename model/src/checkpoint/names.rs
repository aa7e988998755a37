//! The one table of checkpoint tensor names and shapes (SPEC section 1), shared by the reader
//! and the writer so a name is spelled in exactly one place.
//!
//! Each per-layer tensor kind is an enum variant that knows its name, its expected shape and
//! which field of [`LayerWeights`] holds it; [`named_tensors`] walks a whole model in file order.

use std::fmt;

use ndarray::{ArrayView1, ArrayView2, ArrayViewD};
use oracle::model::weights::{LayerWeights, ModelDims, ModelWeights, UClipNormWeights};

/// `[vocab, hidden]` token embeddings.
pub const EMBED_TOKENS: &str = "model.embed_tokens.weight";
/// `[vocab, hidden]` output head, absent when tied.
pub const LM_HEAD: &str = "lm_head.weight";
/// Prefix of the final UClipNorm's tensors.
pub const FINAL_NORM: &str = "model.norm";

fn layer_prefix(layer: usize) -> String {
    format!("model.layers.{layer}")
}

/// The shapes a stored tensor may have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShapeRule {
    /// Exactly this shape.
    Exact(Vec<usize>),
    /// `[1]` (one value broadcast) or `[C]` (per channel), as UClipNorm `alpha` and `weight` allow.
    ScalarOrChannels(usize),
}

impl ShapeRule {
    /// Whether a stored shape satisfies the rule.
    pub fn accepts(&self, shape: &[usize]) -> bool {
        match self {
            ShapeRule::Exact(want) => shape == want.as_slice(),
            ShapeRule::ScalarOrChannels(c) => shape == [1] || shape == [*c],
        }
    }
}

impl fmt::Display for ShapeRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShapeRule::Exact(want) => write!(f, "{want:?}"),
            ShapeRule::ScalarOrChannels(c) => write!(f, "[1] or [{c}]"),
        }
    }
}

/// The linear weights of a layer, stored `[out, in]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Matrix {
    /// `self_attn.q_proj`: `[Hq*D, hidden]`.
    Q,
    /// `self_attn.k_proj`: `[Hkv*D, hidden]`.
    K,
    /// `self_attn.v_proj`: `[Hkv*D, hidden]`.
    V,
    /// `self_attn.o_proj`: `[hidden, Hq*D]`.
    O,
    /// `mlp.gate_proj`: `[I, hidden]`.
    Gate,
    /// `mlp.up_proj`: `[I, hidden]`.
    Up,
    /// `mlp.down_proj`: `[hidden, I]`.
    Down,
}

impl Matrix {
    /// Every matrix of a layer, in file order.
    pub const ALL: [Matrix; 7] = [Matrix::Q, Matrix::K, Matrix::V, Matrix::O, Matrix::Gate, Matrix::Up, Matrix::Down];

    /// The checkpoint name in layer `layer`.
    pub fn name(self, layer: usize) -> String {
        let suffix = match self {
            Matrix::Q => "self_attn.q_proj",
            Matrix::K => "self_attn.k_proj",
            Matrix::V => "self_attn.v_proj",
            Matrix::O => "self_attn.o_proj",
            Matrix::Gate => "mlp.gate_proj",
            Matrix::Up => "mlp.up_proj",
            Matrix::Down => "mlp.down_proj",
        };
        format!("{}.{suffix}.weight", layer_prefix(layer))
    }

    /// `[rows, cols]` for a model of size `dims`.
    pub fn shape(self, dims: &ModelDims) -> [usize; 2] {
        let (hidden, inner) = (dims.hidden_size, dims.intermediate_size);
        let (q, kv) = (dims.num_heads * dims.head_dim, dims.num_kv_heads * dims.head_dim);
        match self {
            Matrix::Q => [q, hidden],
            Matrix::K | Matrix::V => [kv, hidden],
            Matrix::O => [hidden, q],
            Matrix::Gate | Matrix::Up => [inner, hidden],
            Matrix::Down => [hidden, inner],
        }
    }

    /// The field of `layer` that holds it.
    pub fn of<T>(self, layer: &LayerWeights<T>) -> ArrayView2<'_, T> {
        match self {
            Matrix::Q => layer.attn.q_proj.view(),
            Matrix::K => layer.attn.k_proj.view(),
            Matrix::V => layer.attn.v_proj.view(),
            Matrix::O => layer.attn.o_proj.view(),
            Matrix::Gate => layer.gate_proj.view(),
            Matrix::Up => layer.up_proj.view(),
            Matrix::Down => layer.down_proj.view(),
        }
    }
}

/// The UClipNorms of a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Norm {
    /// `self_attn.q_norm`, over `D`.
    Q,
    /// `self_attn.k_norm`, over `D`.
    K,
    /// `input_layernorm`, over `hidden`.
    Input,
    /// `post_attention_layernorm`, over `hidden`.
    PostAttention,
    /// `pre_feedforward_layernorm`, over `hidden`.
    PreFeedforward,
    /// `post_feedforward_layernorm`, over `hidden`.
    PostFeedforward,
}

impl Norm {
    /// Every norm of a layer, in file order.
    pub const ALL: [Norm; 6] =
        [Norm::Q, Norm::K, Norm::Input, Norm::PostAttention, Norm::PreFeedforward, Norm::PostFeedforward];

    /// The name prefix of its `alpha`/`weight`/`bias` in layer `layer`.
    pub fn prefix(self, layer: usize) -> String {
        let suffix = match self {
            Norm::Q => "self_attn.q_norm",
            Norm::K => "self_attn.k_norm",
            Norm::Input => "input_layernorm",
            Norm::PostAttention => "post_attention_layernorm",
            Norm::PreFeedforward => "pre_feedforward_layernorm",
            Norm::PostFeedforward => "post_feedforward_layernorm",
        };
        format!("{}.{suffix}", layer_prefix(layer))
    }

    /// The channel count `C` it normalises.
    pub fn channels(self, dims: &ModelDims) -> usize {
        match self {
            Norm::Q | Norm::K => dims.head_dim,
            _ => dims.hidden_size,
        }
    }

    /// The field of `layer` that holds it.
    pub fn of<T>(self, layer: &LayerWeights<T>) -> &UClipNormWeights<T> {
        match self {
            Norm::Q => &layer.attn.q_norm,
            Norm::K => &layer.attn.k_norm,
            Norm::Input => &layer.input_layernorm,
            Norm::PostAttention => &layer.post_attention_layernorm,
            Norm::PreFeedforward => &layer.pre_feedforward_layernorm,
            Norm::PostFeedforward => &layer.post_feedforward_layernorm,
        }
    }
}

/// The three tensors of a UClipNorm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormPart {
    /// Input scale, `[1]` or `[C]`.
    Alpha,
    /// Gamma, `[1]` or `[C]`.
    Weight,
    /// Beta, `[C]`, optional.
    Bias,
}

impl NormPart {
    /// The full name under a norm prefix.
    pub fn name(self, prefix: &str) -> String {
        let part = match self {
            NormPart::Alpha => "alpha",
            NormPart::Weight => "weight",
            NormPart::Bias => "bias",
        };
        format!("{prefix}.{part}")
    }

    /// The shapes it may have over `channels`.
    pub fn rule(self, channels: usize) -> ShapeRule {
        match self {
            NormPart::Alpha | NormPart::Weight => ShapeRule::ScalarOrChannels(channels),
            NormPart::Bias => ShapeRule::Exact(vec![channels]),
        }
    }
}

/// The per-head HP1 gate parameters of a layer, each `[Hq]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hp1Vector {
    /// `self_attn.hp1_sigma`, the FIR weights.
    Sigma,
    /// `self_attn.hp1_gamma`, the output gains.
    Gamma,
}

impl Hp1Vector {
    /// Both, in file order.
    pub const ALL: [Hp1Vector; 2] = [Hp1Vector::Sigma, Hp1Vector::Gamma];

    /// The checkpoint name in layer `layer`.
    pub fn name(self, layer: usize) -> String {
        let suffix = match self {
            Hp1Vector::Sigma => "hp1_sigma",
            Hp1Vector::Gamma => "hp1_gamma",
        };
        format!("{}.self_attn.{suffix}", layer_prefix(layer))
    }

    /// The field of `layer` that holds it.
    pub fn of<T>(self, layer: &LayerWeights<T>) -> ArrayView1<'_, T> {
        match self {
            Hp1Vector::Sigma => layer.attn.hp1_sigma.view(),
            Hp1Vector::Gamma => layer.attn.hp1_gamma.view(),
        }
    }
}

/// Every norm prefix of a model (each layer's six, then the final norm) with its channel count.
pub fn norm_prefixes(dims: &ModelDims) -> Vec<(String, usize)> {
    let per_layer = (0..dims.num_layers).flat_map(|i| Norm::ALL.map(|n| (n.prefix(i), n.channels(dims))));
    per_layer.chain([(FINAL_NORM.to_string(), dims.hidden_size)]).collect()
}

/// One tensor of a model as it is stored: its name, the shapes it may have, and its values.
#[derive(Clone, Debug)]
pub struct NamedTensor<'a, T> {
    /// The checkpoint name.
    pub name: String,
    /// The shapes a model of the given dims allows.
    pub rule: ShapeRule,
    /// The values, row-major.
    pub view: ArrayViewD<'a, T>,
}

/// Every tensor of `weights` in file order (embeddings, layers, final norm, `lm_head` when
/// untied); absent biases are skipped.
pub fn named_tensors<'a, T>(weights: &'a ModelWeights<T>, dims: &ModelDims) -> Vec<NamedTensor<'a, T>> {
    let mut out = Vec::new();
    let vocab_rule = ShapeRule::Exact(vec![dims.vocab_size, dims.hidden_size]);
    out.push(NamedTensor {
        name: EMBED_TOKENS.into(),
        rule: vocab_rule.clone(),
        view: weights.embed_tokens.view().into_dyn(),
    });
    let push_norm =
        |out: &mut Vec<NamedTensor<'a, T>>, prefix: &str, channels: usize, norm: &'a UClipNormWeights<T>| {
            let parts = [
                (NormPart::Alpha, Some(&norm.alpha)),
                (NormPart::Weight, Some(&norm.weight)),
                (NormPart::Bias, norm.bias.as_ref()),
            ];
            for (part, values) in parts {
                if let Some(values) = values {
                    out.push(NamedTensor {
                        name: part.name(prefix),
                        rule: part.rule(channels),
                        view: values.view().into_dyn(),
                    });
                }
            }
        };
    for (i, layer) in weights.layers.iter().enumerate() {
        for m in Matrix::ALL {
            out.push(NamedTensor {
                name: m.name(i),
                rule: ShapeRule::Exact(m.shape(dims).to_vec()),
                view: m.of(layer).into_dyn(),
            });
        }
        for v in Hp1Vector::ALL {
            out.push(NamedTensor {
                name: v.name(i),
                rule: ShapeRule::Exact(vec![dims.num_heads]),
                view: v.of(layer).into_dyn(),
            });
        }
        for n in Norm::ALL {
            push_norm(&mut out, &n.prefix(i), n.channels(dims), n.of(layer));
        }
    }
    push_norm(&mut out, FINAL_NORM, dims.hidden_size, &weights.norm);
    if let Some(head) = &weights.lm_head {
        out.push(NamedTensor { name: LM_HEAD.into(), rule: vocab_rule, view: head.view().into_dyn() });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_spec_table() {
        assert_eq!(Matrix::K.name(3), "model.layers.3.self_attn.k_proj.weight");
        assert_eq!(Matrix::Down.name(0), "model.layers.0.mlp.down_proj.weight");
        assert_eq!(NormPart::Alpha.name(&Norm::Q.prefix(1)), "model.layers.1.self_attn.q_norm.alpha");
        assert_eq!(
            NormPart::Bias.name(&Norm::PostFeedforward.prefix(2)),
            "model.layers.2.post_feedforward_layernorm.bias"
        );
        assert_eq!(Hp1Vector::Gamma.name(4), "model.layers.4.self_attn.hp1_gamma");
        assert_eq!(NormPart::Weight.name(FINAL_NORM), "model.norm.weight");
    }

    #[test]
    fn shape_rules_accept_only_their_shapes() {
        let norm = ShapeRule::ScalarOrChannels(8);
        assert!(norm.accepts(&[1]) && norm.accepts(&[8]));
        assert!(!norm.accepts(&[4]) && !norm.accepts(&[1, 8]) && !norm.accepts(&[]));
        let exact = ShapeRule::Exact(vec![2, 3]);
        assert!(exact.accepts(&[2, 3]) && !exact.accepts(&[3, 2]));
        assert_eq!(norm.to_string(), "[1] or [8]");
        assert_eq!(exact.to_string(), "[2, 3]");
    }
}
