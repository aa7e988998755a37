//! Bad inputs are refused with an error that names the offending thing, never a panic and never
//! a silently wrong forward.

mod model_common;

use model_common::{step, tiny, Part};
use ndarray::{array, Array1, Array2};
use oracle::hp1::AttnMetadata;
use oracle::model::forward::Model;
use oracle::model::init::random_weights;
use oracle::model::kv_cache::KvCache;
use oracle::model::precision::Rounding;
use oracle::model::step::{LogitRows, StepInput};
use oracle::model::weights::ModelWeights;

fn weights() -> ModelWeights<f64> {
    random_weights(&tiny(), 31).cast()
}

fn model() -> Model<f64> {
    Model::new(tiny(), weights(), Rounding::Exact).unwrap()
}

/// The error `Model::new` gives after `edit` breaks the weights.
fn weight_error(edit: impl FnOnce(&mut ModelWeights<f64>)) -> String {
    let mut w = weights();
    edit(&mut w);
    match Model::new(tiny(), w, Rounding::Exact) {
        Ok(_) => "accepted".into(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_wrong_weight_shape_is_named_by_its_checkpoint_name() {
    // (how to break the weights, the tensor the error must name, the shape it must expect)
    type Case = (Box<dyn FnOnce(&mut ModelWeights<f64>)>, &'static str, &'static str);
    let cases: Vec<Case> = vec![
        (
            Box::new(|w| w.layers[1].attn.q_norm.alpha = Array1::zeros(5)),
            "model.layers.1.self_attn.q_norm.alpha",
            "[1] or [16]",
        ),
        (
            Box::new(|w| w.layers[0].attn.o_proj = Array2::zeros((64, 32))),
            "model.layers.0.self_attn.o_proj.weight",
            "[64, 64]",
        ),
        (
            Box::new(|w| w.layers[0].attn.k_proj = Array2::zeros((64, 64))),
            "model.layers.0.self_attn.k_proj.weight",
            "[32, 64]",
        ),
        (
            Box::new(|w| w.layers[1].down_proj = Array2::zeros((192, 64))),
            "model.layers.1.mlp.down_proj.weight",
            "[64, 192]",
        ),
        (Box::new(|w| w.layers[1].attn.hp1_gamma = Array1::zeros(2)), "model.layers.1.self_attn.hp1_gamma", "[4]"),
        (
            Box::new(|w| w.layers[0].post_feedforward_layernorm.bias = Some(Array1::zeros(1))),
            "model.layers.0.post_feedforward_layernorm.bias",
            "[64]",
        ),
        (Box::new(|w| w.norm.weight = Array1::zeros(63)), "model.norm.weight", "[1] or [64]"),
        (Box::new(|w| w.embed_tokens = Array2::zeros((511, 64))), "model.embed_tokens.weight", "[512, 64]"),
        (Box::new(|w| w.lm_head = Some(Array2::zeros((512, 32)))), "lm_head.weight", "[512, 64]"),
        (Box::new(|w| drop(w.layers.pop())), "1 layers", "num_hidden_layers is 2"),
    ];
    for (edit, name, expected) in cases {
        let e = weight_error(edit);
        assert!(e.contains(name) && e.contains(expected), "{name}: {e}");
    }
}

#[test]
fn bad_dims_are_refused_naming_the_field() {
    let mut d = tiny();
    d.num_kv_heads = 3;
    let e = Model::new(d, weights(), Rounding::Exact).unwrap_err().to_string();
    assert!(e.contains("num_key_value_heads"), "{e}");
    let mut d = tiny();
    d.head_dim = 15;
    let e = Model::new(d, weights(), Rounding::Exact).unwrap_err().to_string();
    assert!(e.contains("head_dim") && e.contains("15"), "{e}");
    let mut d = tiny();
    d.hp1.clip_max = -1.0;
    assert!(Model::new(d, weights(), Rounding::Exact).unwrap_err().to_string().contains("clip_min"));
}

/// A one-sequence step of `ids` at positions `0..ids.len()` in blocks `0..`, with `edit` applied to
/// its parts before the forward.
fn step_error(ids: &[u32], edit: impl FnOnce(&mut AttnMetadata, &mut Vec<i64>, &mut LogitRows)) -> String {
    let m = model();
    let mut cache = KvCache::new(&m.dims, 4, 16);
    let n = ids.len();
    let mut meta = AttnMetadata {
        block_table: array![[0, 1, 2, 3]],
        seq_lens: vec![n as i32],
        query_start_loc: vec![0, n as i32],
    };
    let mut slots: Vec<i64> = (0..n as i64).collect();
    let mut logits = LogitRows::All;
    edit(&mut meta, &mut slots, &mut logits);
    let step = StepInput { token_ids: ids, meta: &meta, slot_mapping: &slots, logits };
    m.forward(&step, &mut cache).unwrap_err().to_string()
}

#[test]
fn bad_step_inputs_are_refused_naming_the_input() {
    let e = step_error(&[1, 512, 3], |_, _, _| {});
    assert!(e.contains("token_ids") && e.contains("token 1 is id 512") && e.contains("512"), "{e}");
    let e = step_error(&[1, 2, 3], |_, s, _| s[2] = 40);
    assert!(e.contains("slot_mapping") && e.contains("slot 40") && e.contains("at 2"), "{e}");
    let e = step_error(&[1, 2, 3], |_, s, _| {
        s.pop();
    });
    assert!(e.contains("slot_mapping") && e.contains("2 entries for 3 tokens"), "{e}");
    let e = step_error(&[1, 2, 3], |m, _, _| m.block_table[[0, 0]] = 9);
    assert!(e.contains("block_table") && e.contains("block 9"), "{e}");
    let e = step_error(&[1, 2, 3], |m, _, _| m.query_start_loc = vec![0, 2]);
    assert!(e.contains("query_start_loc"), "{e}");
    let e = step_error(&[], |m, _, l| {
        m.seq_lens = vec![0];
        m.query_start_loc = vec![0, 0];
        *l = LogitRows::LastPerSeq;
    });
    assert!(e.contains("LastPerSeq") && e.contains("sequence 0"), "{e}");
    for listed in [&[2, 1][..], &[0, 3], &[1, 1]] {
        let e = step_error(&[1, 2, 3], |_, _, l| *l = LogitRows::Listed(listed));
        assert!(e.contains("logits") && e.contains("ascend below the step's 3 query rows"), "{listed:?}: {e}");
    }
}

#[test]
fn positions_past_max_position_embeddings_are_refused() {
    let m = model();
    let mut cache = KvCache::new(&m.dims, 130, 16);
    let blocks: Vec<i32> = (0..130).collect();
    let ok = Part { blocks: &blocks, cached: 2047, tokens: &[7] };
    assert!(step(&m, &mut cache, &[ok], LogitRows::All).is_ok());
    let past = Part { blocks: &blocks, cached: 2048, tokens: &[7] };
    let e = step(&m, &mut cache, &[past], LogitRows::All).unwrap_err().to_string();
    assert!(
        e.contains("seq_lens") && e.contains("position 2048") && e.contains("max_position_embeddings is 2048"),
        "{e}"
    );
}

#[test]
fn a_cache_of_another_model_is_refused() {
    let m = model();
    let mut other = tiny();
    other.num_layers = 1;
    let mut cache = KvCache::new(&other, 4, 16);
    let e = step(&m, &mut cache, &[Part { blocks: &[0], cached: 0, tokens: &[1] }], LogitRows::All)
        .unwrap_err()
        .to_string();
    assert!(e.contains("cache") && e.contains("1/1") && e.contains("model 2"), "{e}");
    let mut other = tiny();
    other.head_dim = 8;
    let mut cache = KvCache::new(&other, 4, 16);
    let e = step(&m, &mut cache, &[Part { blocks: &[0], cached: 0, tokens: &[1] }], LogitRows::All)
        .unwrap_err()
        .to_string();
    assert!(e.contains("cache") && e.contains("[4, 16, 2, 16]"), "{e}");
}

#[test]
fn degenerate_steps_do_not_panic() {
    let m = model();
    let mut cache = KvCache::new(&m.dims, 4, 0);
    let e = step(&m, &mut cache, &[Part { blocks: &[0], cached: 0, tokens: &[] }], LogitRows::All);
    assert!(e.unwrap_err().to_string().contains("block_size 0"));
    // A step with no sequences at all is empty, not an error.
    let mut cache = KvCache::new(&m.dims, 4, 16);
    let meta = AttnMetadata { block_table: Array2::zeros((0, 1)), seq_lens: vec![], query_start_loc: vec![0] };
    let step = StepInput { token_ids: &[], meta: &meta, slot_mapping: &[], logits: LogitRows::LastPerSeq };
    assert_eq!(m.forward(&step, &mut cache).unwrap().dim(), (0, 512));
}
