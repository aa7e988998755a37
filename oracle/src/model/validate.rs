//! Every check the forward pass relies on, done before any arithmetic: dimensions, each weight
//! tensor's shape (named by its checkpoint name), and each step's inputs against the model and
//! the cache. After these pass, the forward's shape assumptions are internal invariants.

use ndarray::{Array1, Array2};

use super::kv_cache::KvCache;
use super::step::{ascending_below, LogitRows, StepInput};
use super::weights::{AttnWeights, LayerWeights, ModelDims, ModelWeights};
use crate::error::{invalid, Result};
use crate::hp1::QueryRow;
use crate::norm::validate_uclipnorm;
use crate::scalar::Scalar;

/// Checks the sizes and hyper-parameters a forward needs.
pub fn check_dims(d: &ModelDims) -> Result<()> {
    for (name, v) in [
        ("vocab_size", d.vocab_size),
        ("hidden_size", d.hidden_size),
        ("intermediate_size", d.intermediate_size),
        ("num_attention_heads", d.num_heads),
        ("num_key_value_heads", d.num_kv_heads),
        ("max_position_embeddings", d.max_position_embeddings),
    ] {
        if v == 0 {
            return invalid(name, "must be at least 1, got 0");
        }
    }
    if !d.num_heads.is_multiple_of(d.num_kv_heads) {
        return invalid(
            "num_key_value_heads",
            format!("{} does not divide num_attention_heads {}", d.num_kv_heads, d.num_heads),
        );
    }
    if d.head_dim == 0 || !d.head_dim.is_multiple_of(2) {
        return invalid("head_dim", format!("must be even and positive for RoPE, got {}", d.head_dim));
    }
    if !(d.rope_theta.is_finite() && d.rope_theta > 0.0) {
        return invalid("rope_theta", format!("must be finite and positive, got {}", d.rope_theta));
    }
    d.hp1.validate()
}

fn matrix<T>(a: &Array2<T>, rows: usize, cols: usize, tensor: &str) -> Result<()> {
    if a.dim() == (rows, cols) {
        return Ok(());
    }
    invalid("weights", format!("{tensor} has shape {:?}, expected [{rows}, {cols}]", a.shape()))
}

fn vector<T>(a: &Array1<T>, len: usize, tensor: &str) -> Result<()> {
    if a.len() == len {
        return Ok(());
    }
    invalid("weights", format!("{tensor} has shape [{}], expected [{len}]", a.len()))
}

fn check_attn<T: Scalar>(d: &ModelDims, a: &AttnWeights<T>, p: &str) -> Result<()> {
    let (hq, hkv, hd, hidden) = (d.num_heads * d.head_dim, d.num_kv_heads * d.head_dim, d.head_dim, d.hidden_size);
    matrix(&a.q_proj, hq, hidden, &format!("{p}.q_proj.weight"))?;
    matrix(&a.k_proj, hkv, hidden, &format!("{p}.k_proj.weight"))?;
    matrix(&a.v_proj, hkv, hidden, &format!("{p}.v_proj.weight"))?;
    matrix(&a.o_proj, hidden, hq, &format!("{p}.o_proj.weight"))?;
    validate_uclipnorm(&a.q_norm, hd, &format!("{p}.q_norm"))?;
    validate_uclipnorm(&a.k_norm, hd, &format!("{p}.k_norm"))?;
    vector(&a.hp1_sigma, d.num_heads, &format!("{p}.hp1_sigma"))?;
    vector(&a.hp1_gamma, d.num_heads, &format!("{p}.hp1_gamma"))
}

fn check_layer<T: Scalar>(d: &ModelDims, l: &LayerWeights<T>, i: usize) -> Result<()> {
    let p = format!("model.layers.{i}");
    let (h, m) = (d.hidden_size, d.intermediate_size);
    check_attn(d, &l.attn, &format!("{p}.self_attn"))?;
    matrix(&l.gate_proj, m, h, &format!("{p}.mlp.gate_proj.weight"))?;
    matrix(&l.up_proj, m, h, &format!("{p}.mlp.up_proj.weight"))?;
    matrix(&l.down_proj, h, m, &format!("{p}.mlp.down_proj.weight"))?;
    for (norm, name) in [
        (&l.input_layernorm, "input_layernorm"),
        (&l.post_attention_layernorm, "post_attention_layernorm"),
        (&l.pre_feedforward_layernorm, "pre_feedforward_layernorm"),
        (&l.post_feedforward_layernorm, "post_feedforward_layernorm"),
    ] {
        validate_uclipnorm(norm, h, &format!("{p}.{name}"))?;
    }
    Ok(())
}

/// Checks every tensor of `w` against `d`; an error names the checkpoint tensor.
pub fn check_weights<T: Scalar>(d: &ModelDims, w: &ModelWeights<T>) -> Result<()> {
    matrix(&w.embed_tokens, d.vocab_size, d.hidden_size, "model.embed_tokens.weight")?;
    if w.layers.len() != d.num_layers {
        return invalid("weights", format!("has {} layers, num_hidden_layers is {}", w.layers.len(), d.num_layers));
    }
    for (i, l) in w.layers.iter().enumerate() {
        check_layer(d, l, i)?;
    }
    validate_uclipnorm(&w.norm, d.hidden_size, "model.norm")?;
    if let Some(head) = &w.lm_head {
        matrix(head, d.vocab_size, d.hidden_size, "lm_head.weight")?;
    }
    Ok(())
}

/// Checks one step against the model and the cache and returns its query rows in token order.
pub fn check_step<T: Scalar>(d: &ModelDims, step: &StepInput<'_>, cache: &KvCache<T>) -> Result<Vec<QueryRow>> {
    let want = [cache.num_blocks(), cache.block_size(), d.num_kv_heads, d.head_dim];
    if cache.key.len() != d.num_layers || cache.value.len() != d.num_layers {
        return invalid(
            "cache",
            format!("has {}/{} key/value layers, the model {}", cache.key.len(), cache.value.len(), d.num_layers),
        );
    }
    if let Some(bad) = cache.key.iter().chain(&cache.value).find(|a| a.shape() != want) {
        return invalid("cache", format!("holds a layer of shape {:?}, expected {want:?}", bad.shape()));
    }
    if cache.block_size() == 0 {
        return invalid("cache", "has block_size 0");
    }
    let n = step.token_ids.len();
    step.meta.validate(cache.num_blocks(), cache.block_size(), n)?;
    if step.slot_mapping.len() != n {
        return invalid("slot_mapping", format!("has {} entries for {n} tokens", step.slot_mapping.len()));
    }
    if let Some((i, id)) = step.token_ids.iter().enumerate().find(|(_, &id)| id as usize >= d.vocab_size) {
        return invalid("token_ids", format!("token {i} is id {id}, vocab_size is {}", d.vocab_size));
    }
    for (s, &len) in step.meta.seq_lens.iter().enumerate() {
        if len as usize > d.max_position_embeddings {
            return invalid(
                "seq_lens",
                format!(
                    "sequence {s} reaches position {}, max_position_embeddings is {}",
                    len - 1,
                    d.max_position_embeddings
                ),
            );
        }
        if step.logits == LogitRows::LastPerSeq && step.meta.query_len(s) == 0 {
            return invalid("logits", format!("LastPerSeq, but sequence {s} has no query tokens"));
        }
    }
    if let LogitRows::Listed(listed) = step.logits {
        let num_tokens = step.token_ids.len();
        if !ascending_below(listed, num_tokens) {
            return invalid("logits", format!("listed rows must ascend below the step's {num_tokens} query rows"));
        }
    }
    let rows = step.meta.rows();
    let bs = cache.block_size();
    for r in &rows {
        let (b, o) = step.meta.slot(r.seq, r.pos, bs);
        let expected = (b * bs + o) as i64;
        if step.slot_mapping[r.token] != expected {
            return invalid(
                "slot_mapping",
                format!(
                    "token {} (sequence {}, position {}) maps to slot {}, its block table puts it at {expected}",
                    r.token, r.seq, r.pos, step.slot_mapping[r.token]
                ),
            );
        }
    }
    Ok(rows)
}
