//! The CPU backend: the oracle's forward pass and sampler as a [`StepExecutor`].
//!
//! The same code is the reference and the backend: `f32` for speed, `f64` for the exact
//! reference, and `bf16` for the bf16-faithful mode (f64 arithmetic rounded to bf16 at the
//! points the GPU model rounds, SPEC section 4). Tokens are drawn with the oracle's [`sample`]
//! from the f32 logits, the same f32 values the GPU sampler reads.

use std::str::FromStr;

use oracle::decode::sampler::sample;
use oracle::model::forward::{LogitRows, Model, StepInput};
use oracle::model::kv_cache::KvCache;
use oracle::model::precision::Rounding;
use oracle::Scalar;

use crate::error::{Error, Result};
use crate::executor::{sampling_seqs, KvCapacity, LogitsWanted, SamplingRow, StepExecutor, StepOutput};
use crate::scheduler::StepPlan;

/// The oracle mode a CPU backend computes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// f32 arithmetic throughout.
    F32,
    /// f64 arithmetic throughout: the reference.
    F64,
    /// f64 arithmetic rounded to bf16 where the GPU model rounds.
    Bf16,
}

impl FromStr for Precision {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f32" => Ok(Self::F32),
            "f64" => Ok(Self::F64),
            "bf16" => Ok(Self::Bf16),
            other => Err(Error::Request(format!("precision must be f32, f64 or bf16, got `{other}`"))),
        }
    }
}

/// An oracle model and its paged KV cache.
pub struct CpuExecutor<T> {
    model: Model<T>,
    cache: KvCache<T>,
    label: String,
}

impl<T: Scalar> CpuExecutor<T> {
    /// An executor with a cache of `num_blocks` blocks of `block_size` tokens.
    pub fn new(model: Model<T>, num_blocks: usize, block_size: usize, label: impl Into<String>) -> Self {
        let cache = KvCache::new(&model.dims, num_blocks, block_size);
        Self { model, cache, label: label.into() }
    }
}

impl<T: Scalar> StepExecutor for CpuExecutor<T> {
    fn execute(&mut self, plan: &StepPlan, sampling: &[SamplingRow], wanted: LogitsWanted) -> Result<StepOutput> {
        let seqs = sampling_seqs(plan, sampling)?;
        let rows = match wanted {
            LogitsWanted::AllRows => LogitRows::All,
            LogitsWanted::Discard => LogitRows::LastPerSeq,
        };
        let step =
            StepInput { token_ids: &plan.token_ids, meta: &plan.meta, slot_mapping: &plan.slot_mapping, logits: rows };
        let logits = self.model.forward(&step, &mut self.cache)?.mapv(|x| x.f64() as f32);
        let sampled = seqs
            .iter()
            .zip(sampling)
            .map(|(&i, row)| {
                let last = match wanted {
                    LogitsWanted::AllRows => plan.meta.query_start_loc[i + 1] as usize - 1,
                    LogitsWanted::Discard => i,
                };
                let r = logits.row(last);
                Ok(sample(r.as_slice().expect("logits rows are contiguous"), &row.params, row.step)?)
            })
            .collect::<Result<Vec<u32>>>()?;
        Ok(StepOutput { sampled, logits: (wanted == LogitsWanted::AllRows).then_some(logits) })
    }

    fn kv_capacity(&self) -> KvCapacity {
        KvCapacity { num_blocks: self.cache.num_blocks(), block_size: self.cache.block_size() }
    }

    fn vocab_size(&self) -> usize {
        self.model.dims.vocab_size
    }

    fn describe(&self) -> String {
        self.label.clone()
    }
}

/// The rounding a precision implies.
pub fn rounding_of(p: Precision) -> Rounding {
    match p {
        Precision::Bf16 => Rounding::Bf16,
        Precision::F32 | Precision::F64 => Rounding::Exact,
    }
}

/// Loads the checkpoint in `dir` into a CPU executor computing in `precision`, with a cache of
/// `num_blocks` blocks of `block_size` tokens. `progress(done, total)` follows the tensors.
pub fn load_cpu_executor(
    dir: &std::path::Path,
    cfg: &crate::config::ModelConfig,
    precision: Precision,
    num_blocks: usize,
    block_size: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Box<dyn StepExecutor>> {
    let label = format!("cpu {precision:?}").to_lowercase();
    let rounding = rounding_of(precision);
    Ok(match precision {
        Precision::F32 => {
            let w = crate::checkpoint::load_weights::<f32>(dir, cfg, progress)?;
            Box::new(CpuExecutor::new(Model::new(cfg.dims(), w, rounding)?, num_blocks, block_size, label))
        }
        Precision::F64 | Precision::Bf16 => {
            let w = crate::checkpoint::load_weights::<f64>(dir, cfg, progress)?;
            Box::new(CpuExecutor::new(Model::new(cfg.dims(), w, rounding)?, num_blocks, block_size, label))
        }
    })
}
