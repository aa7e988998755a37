//! `model::perplexity::score` through the CPU engine against the oracle's forward run on each window
//! directly, with the log-softmax written out here: windows scored in batches of the engine (two
//! at a time, one shorter than the rest) give the sums of the definition.

mod common;

use std::sync::Arc;

use common::Scratch;
use model::checkpoint::load_weights;
use model::config::ModelConfig;
use model::cpu_backend::Precision;
use model::engine::Engine;
use model::executor_loader::{load_executor, ExecutorOptions};
use model::perplexity::{score, windows};
use model::presets::{generate, Preset};
use model::scheduler::SchedulerConfig;
use model::start_times::StartTimes;
use ndarray::Array2;
use oracle::hp1::AttnMetadata;
use oracle::model::forward::Model;
use oracle::model::kv_cache::KvCache;
use oracle::model::precision::Rounding;
use oracle::model::step::{LogitRows, StepInput};

/// Every row's logits of `ids` from position 0, the oracle in f64.
fn oracle_logits(model: &Model<f64>, ids: &[u32]) -> Array2<f64> {
    let block = 16;
    let blocks = ids.len().div_ceil(block);
    let mut cache = KvCache::new(&model.dims, blocks, block);
    let meta = AttnMetadata {
        block_table: Array2::from_shape_fn((1, blocks), |(_, b)| b as i32),
        seq_lens: vec![ids.len() as i32],
        query_start_loc: vec![0, ids.len() as i32],
    };
    let slots: Vec<i64> = (0..ids.len() as i64).collect();
    let step = StepInput { token_ids: ids, meta: &meta, slot_mapping: &slots, logits: LogitRows::All };
    model.forward(&step, &mut cache).unwrap()
}

#[test]
fn engine_scores_are_the_oracle_log_softmax_over_every_window() {
    let scratch = Scratch::new("perplexity");
    let dir = scratch.path().join("tiny");
    generate(Preset::Tiny, &dir, 3).unwrap();
    let cfg = ModelConfig::load(&dir).unwrap();
    let opts = ExecutorOptions {
        device: "cpu",
        precision: Precision::F64,
        max_num_seqs: 2,
        max_model_len: cfg.max_position_embeddings,
        cpu_blocks: 8,
        gpu_memory_utilization: 0.9,
        enforce_eager: false,
        decode_kernel: "auto",
        max_num_batched_tokens: None,
    };
    let executor = load_executor(&dir, &cfg, &opts, &mut |_, _| {}, &mut StartTimes::silent()).unwrap().executor;
    let tokenizer = Arc::new(tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).unwrap());
    let sched = SchedulerConfig {
        max_num_seqs: 2,
        max_batched_tokens: 64,
        prefill_chunk: 32,
        max_model_len: 2048,
        prefix_caching: false,
    };
    let mut engine = Engine::new(executor, tokenizer, sched, false).unwrap();

    let ids: Vec<u32> = (0..57u32).map(|i| (i * 131 + 7) % 509).collect();
    let ws = windows(&ids, 20);
    assert_eq!(ws.iter().map(|w| w.len()).collect::<Vec<_>>(), vec![20, 20, 17]);
    let mut seen = Vec::new();
    let got = score(&mut engine, &cfg, &ws, 2, &mut |n| seen.push(n)).unwrap();
    assert_eq!(seen, vec![38, 16], "progress per batch of two windows");

    let weights = load_weights::<f64>(&dir, &cfg, &mut |_, _| {}).unwrap();
    let model = Model::new(cfg.dims(), weights, Rounding::Exact).unwrap();
    let (mut nll, mut correct, mut predictions) = (0.0f64, 0usize, 0usize);
    for w in &ws {
        let logits = oracle_logits(&model, &w[..w.len() - 1]);
        for (row, &next) in logits.rows().into_iter().zip(&w[1..]) {
            let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let lse = max + row.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
            nll += lse - row[next as usize];
            let argmax = (0..row.len()).find(|&i| row[i] == max).unwrap();
            correct += usize::from(argmax == next as usize);
            predictions += 1;
        }
    }
    assert_eq!(got.predictions, predictions);
    assert_eq!(got.correct, correct);
    // The engine's rows are f32 copies of the f64 forward: the sums agree to f32 rounding.
    assert!((got.nll - nll).abs() <= 1e-5 * nll, "engine {} vs oracle {nll}", got.nll);
    assert!(got.loss() > 0.0 && got.perplexity() > 1.0);
}
