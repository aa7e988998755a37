//! `verify::greedy_agreement` on the shipped trained model, on the CPU: what gpu_trained asks of
//! the GPU, asked of the CPU's f32 mode (another correct implementation, rounding elsewhere),
//! passes; the same asked of a backend with a plausible bug (it loses the first KV block of every
//! sequence, as a wrong block table would) fails. Both against the CPU's bf16 mode with the f64
//! mode as the exact rows, over a few held-out openings to stay quick.

mod trained_model;

use std::path::Path;

use model::cpu_backend::Precision;
use model::perplexity::prediction_rows;
use ndarray::s;
use trained_model::{continuation_rows, continuations, cpu_engine, inputs, judge, openings, scored, strict, OPENING};

const OPENINGS: usize = 8;
/// Tokens a KV block holds: what the buggy backend loses from the start of each sequence.
const LOST: usize = 16;

#[test]
fn the_f32_mode_agrees_up_to_near_ties_and_a_backend_losing_a_kv_block_does_not() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let (dir, cfg, tok, ids) = inputs(&root).unwrap();
    let openings = openings(&ids, OPENINGS);
    let mut bf16 = cpu_engine(Precision::Bf16, &dir, &cfg, &tok, OPENINGS).unwrap();
    let mut f32 = cpu_engine(Precision::F32, &dir, &cfg, &tok, OPENINGS).unwrap();
    let mut exact = cpu_engine(Precision::F64, &dir, &cfg, &tok, OPENINGS).unwrap();
    let on_bf16 = continuations(&mut bf16, &cfg, &openings).unwrap();
    let on_f32 = continuations(&mut f32, &cfg, &openings).unwrap();
    let sequences = scored(&openings, &on_bf16);
    let bf16_rows = continuation_rows(&mut bf16, &cfg, &sequences).unwrap();
    let exact_rows = continuation_rows(&mut exact, &cfg, &sequences).unwrap();

    let f32_rows = continuation_rows(&mut f32, &cfg, &sequences).unwrap();
    let judged = judge(&on_bf16, &on_f32, &bf16_rows, &exact_rows, &f32_rows).unwrap();
    println!("strictly, f32 against bf16: {:?}", strict(&on_bf16, &on_f32));
    judged.print("the f32 mode");
    judged.tally.check(95).unwrap();
    assert!(judged.tally.not_ties.is_empty(), "{:?}", judged.tally.not_ties);

    // The buggy backend: the f32 mode fed every sequence without its first block.
    let truncated: Vec<Vec<u32>> = openings.iter().map(|o| o[LOST..].to_vec()).collect();
    let on_buggy = continuations(&mut f32, &cfg, &truncated).unwrap();
    let lost: Vec<&[u32]> = sequences.iter().map(|q| &q[LOST..]).collect();
    let buggy_rows: Vec<_> = prediction_rows(&mut f32, &cfg, &lost)
        .unwrap()
        .into_iter()
        .map(|m| m.slice_move(s![OPENING - LOST - 1.., ..]))
        .collect();
    let judged = judge(&on_bf16, &on_buggy, &bf16_rows, &exact_rows, &buggy_rows).unwrap();
    judged.print("the backend losing a block");
    let failure = judged.tally.check(95).unwrap_err();
    assert!(!judged.tally.not_ties.is_empty(), "{failure}");
}
