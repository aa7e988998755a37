//! `asynct eval`: perplexity and next-token accuracy of a checkpoint over a text file, every
//! position's logits computed by the engine on `--device`, so the same figure can be had from the
//! CPU backend, the GPU backend and PyTorch (`python -m asynct.eval`). The file is encoded whole
//! with the checkpoint's tokenizer (no special tokens added); windows and scoring are
//! [`model::perplexity`]'s. Requests run `--batch` at a time, fewer when their logits rows would
//! pass [`LOGITS_BUDGET`].

use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};
use model::block_pool::blocks_for;
use model::config::ModelConfig;
use model::cpu_backend::Precision;
use model::engine::Engine;
use model::executor_loader::BLOCK_SIZE;
use model::perplexity::{score, windows};

use crate::cli::EvalArgs;
use crate::load;

/// Bytes of f32 logits rows one batch of requests may record at once.
const LOGITS_BUDGET: usize = 1 << 30;

/// Runs the command; the error is the message to print.
pub fn run(args: &EvalArgs) -> Result<(), String> {
    if args.batch == 0 {
        return Err("--batch must be at least 1".into());
    }
    let precision: Precision = args.precision.parse().map_err(|e: model::Error| e.to_string())?;
    let cfg = ModelConfig::load(&args.model).map_err(|e| e.to_string())?;
    let max_len = args.max_len.unwrap_or(cfg.max_position_embeddings);
    if !(2..=cfg.max_position_embeddings).contains(&max_len) {
        return Err(format!("--max-len must be in 2..={}, got {max_len}", cfg.max_position_embeddings));
    }
    let tokenizer = load::tokenizer(&args.model)?;
    let text = std::fs::read_to_string(&args.text).map_err(|e| format!("{}: {e}", args.text.display()))?;
    let encoding =
        tokenizer.encode(text.as_str(), false).map_err(|e| format!("tokenizing {}: {e}", args.text.display()))?;
    let ids = encoding.get_ids();
    let windows = windows(ids, max_len);
    if windows.is_empty() {
        return Err(format!("{} encodes to {} tokens: nothing to score", args.text.display(), ids.len()));
    }
    let row_bytes = max_len * cfg.vocab_size * std::mem::size_of::<f32>();
    let batch = args.batch.min((LOGITS_BUDGET / row_bytes).max(1));
    let cpu_blocks = blocks_for(max_len, BLOCK_SIZE).saturating_mul(batch);
    let opts = args.engine.executor_options(precision, batch, cfg.max_position_embeddings, cpu_blocks);
    let loaded = load::executor_with_progress(&args.model, &cfg, &opts)?;
    eprintln!("running on {}", loaded.executor.describe());
    // Every prompt row is scored: a recording engine looks no prefix up, so nothing is cached either.
    let sched = load::scheduler_config(batch, &loaded, cfg.max_position_embeddings, false);
    let mut engine = Engine::new(loaded.executor, Arc::new(tokenizer), sched, true).map_err(|e| e.to_string())?;

    let total: usize = windows.iter().map(|w| w.len() - 1).sum();
    let bar = ProgressBar::new(total as u64).with_message(format!("scoring {}", args.text.display()));
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} tokens ({per_sec}, {eta})").expect("valid template"),
    );
    let s = score(&mut engine, &cfg, &windows, batch, &mut |n| bar.inc(n as u64)).map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    println!(
        "perplexity {:.4}  loss {:.6} nats/token  accuracy {:.4}  ({} predictions in {} windows of at most {max_len} tokens, {})",
        s.perplexity(),
        s.loss(),
        s.accuracy(),
        s.predictions,
        windows.len(),
        engine.describe()
    );
    Ok(())
}
