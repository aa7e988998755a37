//! The boundary between the engine (scheduling, sampling, text) and the hardware that runs the
//! model: an executor takes a planned step and returns its logits.
//!
//! The CPU backend implements it with the oracle's forward pass; the GPU backend will implement
//! it with kernels and CUDA graphs. Everything above this trait is shared, so both backends
//! schedule, sample and stop identically.

use ndarray::Array2;

use crate::error::Result;
use crate::scheduler::StepPlan;

/// Which logits rows a step returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogitsWanted {
    /// Every query row of the step (for `--dump-logits`).
    AllRows,
    /// Each sequence's last row only.
    LastPerSeq,
}

/// Runs the model over one planned step, writing the step's K/V into its cache.
pub trait StepExecutor: Send {
    /// `[rows, vocab]` f32 logits, rows as `wanted` says, in the plan's query order.
    fn execute(&mut self, plan: &StepPlan, wanted: LogitsWanted) -> Result<Array2<f32>>;
    /// Vocabulary size of the logits rows.
    fn vocab_size(&self) -> usize;
    /// A short description for logs ("cpu f32").
    fn describe(&self) -> String;
}
