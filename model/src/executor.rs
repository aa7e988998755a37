//! The boundary between the engine (scheduling, text, stop rules) and the hardware that runs the
//! model: an executor takes a planned step, runs the forward, samples, and returns the tokens.
//!
//! Sampling sits below the seam so that a GPU backend never copies `[rows, vocab]` logits to the
//! host: it hands back one id per sampling sequence. Logits come back only when the engine asks:
//! every row when it records them (`--dump-logits`), the prompt rows of the requests that want
//! their prompt's logprobs, and the rows of the requests that want their tokens' logprobs
//! ([`SamplingRow::scored`]), never a neighbour's: one such request in a batch of 128 costs one
//! row's copy, not 128. Every backend samples with SPEC section 5's Gumbel-max draw keyed by
//! (seed, step, token id): the CPU backend calls the oracle's [`oracle::decode::draw`], the GPU
//! backend a kernel that draws the same token from the same logits, and the oracle's `draw` on
//! the host for a row whose request sets a parameter the kernel lacks
//! ([`SamplingRow::on_device`]). Which path a row takes depends on its
//! own request only, never on its neighbours, so a request's tokens do not depend on its batch.
//!
//! The executor also owns the KV cache, so it is the one source of its size: the engine sizes
//! the scheduler's block pool from [`StepExecutor::kv_capacity`], and the two cannot disagree.
//!
//! The CPU backend is [`CpuExecutor`](crate::cpu_backend::CpuExecutor), the GPU backend
//! [`GpuExecutor`](crate::gpu_backend::executor::GpuExecutor). Everything above this trait is
//! shared, so both backends schedule, preempt and stop identically.

pub use gpu::{LaunchTrace, MarkTimes, SmLoad, SmNeighbours, TraceWindow};
use ndarray::Array2;
use oracle::decode::processors::{draw, ProcessorState};
use oracle::decode::sampler::SamplingParams;
use oracle::model::step::ascending_below;

use crate::block_pool::KvCapacity;
use crate::error::{Error, Result};
use crate::scheduler::StepPlan;

/// Whether a step hands its logits back to the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogitsWanted {
    /// None: only the sampled tokens come back.
    Discard,
    /// The raw row each scored token was drawn from ([`SamplingRow::scored`], for its
    /// logprobs), `[scored sampling rows, vocab]` in sampling order.
    ScoredRows,
    /// The query rows listed (plan rows, ascending): every row of a sequence whose prompt's
    /// logprobs are recorded (and each scored sequence's last row), or every row of the step for
    /// `--dump-logits`; `[rows, vocab]` in that order. Only these rows reach the host, so a prompt
    /// that asks for its logprobs costs its own rows, not every row of its step.
    QueryRows(Vec<usize>),
}

impl LogitsWanted {
    /// The rows a [`LogitsWanted::QueryRows`] lists (none for the others), after checking that
    /// they ascend within the `num_tokens` rows of the step.
    pub fn query_rows(&self, num_tokens: usize) -> Result<&[usize]> {
        let Self::QueryRows(rows) = self else { return Ok(&[]) };
        if !ascending_below(rows, num_tokens) {
            return Err(Error::Executor(format!(
                "logits rows must ascend below the step's {num_tokens} query rows, got {} rows from {:?} to {:?}",
                rows.len(),
                rows.first(),
                rows.last()
            )));
        }
        Ok(rows)
    }

    /// The plan rows whose logits this asks for, in the order they come back (`None` for
    /// [`LogitsWanted::Discard`]): what to pick from every row's logits.
    pub fn plan_rows(&self, plan: &StepPlan, sampling: &[SamplingRow<'_>]) -> Result<Option<Vec<usize>>> {
        Ok(match self {
            Self::Discard => None,
            Self::ScoredRows => {
                let seqs = sampling_seqs(plan, sampling)?;
                Some(scored_rows(sampling).into_iter().map(|j| plan.last_row(seqs[j])).collect())
            }
            Self::QueryRows(_) => Some(self.query_rows(plan.token_ids.len())?.to_vec()),
        })
    }
}

/// How one sampling sequence draws its next token.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplingRow<'a> {
    /// The request's parameters (temperature, top-k, top-p, min-p, seed).
    pub params: SamplingParams,
    /// The request's count of generated tokens: the Philox counter of this draw (SPEC section 5),
    /// so a request draws the same tokens alone, batched, or recomputed after a preemption.
    pub step: u64,
    /// The request's logits processors and the history they read; `None` when it sets none.
    pub processing: Option<&'a ProcessorState>,
    /// Whether the raw row the token is drawn from comes back ([`LogitsWanted::ScoredRows`]): the
    /// request wants its tokens' logprobs.
    pub scored: bool,
}

impl<'a> SamplingRow<'a> {
    /// A row with no logits processors whose logits stay on the device.
    pub fn plain(params: SamplingParams, step: u64) -> Self {
        Self { params, step, processing: None, scored: false }
    }

    /// Whether the device sampler draws this row's token as the oracle does: no processors (the
    /// kernel has temperature, top-k, top-p, min-p and the seed).
    pub fn on_device(&self) -> bool {
        self.processing.is_none()
    }

    /// The token of this row from its raw logits `row`, by the oracle's whole SPEC 5 order.
    pub fn draw(&self, row: &[f32]) -> Result<u32> {
        Ok(draw(row, &self.params, self.step, self.processing)?)
    }
}

/// What one step returns.
#[derive(Clone, Debug, PartialEq)]
pub struct StepOutput {
    /// One token per sampling sequence (`plan.seqs[i].samples`), in plan order.
    pub sampled: Vec<u32>,
    /// `[rows, vocab]` f32 logits of the rows a [`LogitsWanted::QueryRows`] lists,
    /// `[scored sampling rows, vocab]` for [`LogitsWanted::ScoredRows`], else `None`.
    pub logits: Option<Array2<f32>>,
}

/// What [`StepExecutor::submit`] did with a step.
#[derive(Debug)]
pub enum Submitted {
    /// It ran to the end: its output.
    Done(StepOutput),
    /// It is queued behind the steps submitted before it; [`StepExecutor::collect`] returns the
    /// outputs in the order the steps were submitted.
    InFlight,
}

/// Runs the model over one planned step, writing the step's K/V into its cache, and samples.
///
/// A step may be submitted while the one before it is in flight, planned ahead of its draws
/// ([`crate::scheduler::ahead`]): then a row whose token is
/// [`PENDING_TOKEN`](crate::scheduler::PENDING_TOKEN) embeds the token that step draws for the
/// same sequence, which the executor reads where it was drawn. The engine submits such a step only
/// when every row draws on the device ([`SamplingRow::on_device`]) and it asks for no logits but
/// its scored rows' ([`LogitsWanted::ScoredRows`], which come back with its tokens), and an
/// executor that ever answers [`Submitted::InFlight`] answers it for such a step, except while it
/// counts the gate ([`StepExecutor::measure_gates`]: both backends then run every
/// step at once, so counting starts once the engine has nothing in flight,
/// [`Engine::settle`](crate::engine::Engine::settle)).
pub trait StepExecutor: Send {
    /// Runs `plan`, then draws a token for each sequence with `samples` set, from the logits of
    /// its last query row, with `sampling[j]` for the `j`-th such sequence. Refuses (changing
    /// nothing) a `sampling` whose length is not the number of sampling sequences.
    fn execute(&mut self, plan: &StepPlan, sampling: &[SamplingRow<'_>], logits: &LogitsWanted) -> Result<StepOutput>;
    /// As [`StepExecutor::execute`], but an executor that queues work on a device may return
    /// before the step has run ([`Submitted::InFlight`]), so the host plans the next step
    /// meanwhile. By default the step runs at once.
    fn submit(&mut self, plan: &StepPlan, sampling: &[SamplingRow<'_>], logits: &LogitsWanted) -> Result<Submitted> {
        Ok(Submitted::Done(self.execute(plan, sampling, logits)?))
    }
    /// Waits for the oldest step in flight and returns its output; refuses when none is.
    fn collect(&mut self) -> Result<StepOutput> {
        Err(Error::Executor("no step is in flight".into()))
    }
    /// The KV cache's size, which the scheduler's block pool mirrors.
    fn kv_capacity(&self) -> KvCapacity;
    /// Vocabulary size of the logits rows.
    fn vocab_size(&self) -> usize;
    /// A short description for logs ("cpu f32").
    fn describe(&self) -> String;
    /// Starts (from zero) or stops counting the HP1 gate's exact zeros over the decode rows of
    /// the steps run meanwhile, which then run eagerly; `false` where the backend cannot count.
    /// A measurement for benchmarks (SPEC 7's sparse floor), not for serving.
    fn measure_gates(&mut self, _on: bool) -> Result<bool> {
        Ok(false)
    }
    /// `(zeros, total)` gate weights counted since [`StepExecutor::measure_gates`] began.
    fn gate_counts(&mut self) -> Result<Option<(u64, u64)>> {
        Ok(None)
    }
    /// Starts a window of the step trace (`gpu::runtime::step_trace`) over the steps queued from
    /// here on; `false` where the backend does not trace. A measurement for benchmarks.
    fn start_step_trace(&mut self) -> Result<bool> {
        Ok(false)
    }
    /// The launches stamped since [`StepExecutor::start_step_trace`]; call it once every step of
    /// the window has been collected.
    fn step_trace(&mut self) -> Result<Option<TraceWindow>> {
        Ok(None)
    }
    /// Starts (forgetting earlier ones) or stops timing each step queued from here on in phases
    /// on the device ([`StepPhases`]); `false` where the backend cannot. A measurement for
    /// benchmarks: it adds events to the stream.
    fn mark_steps(&mut self, _on: bool) -> Result<bool> {
        Ok(false)
    }
    /// The phases of the steps marked and collected since [`StepExecutor::mark_steps`] began,
    /// in order; taken, so a second call returns only later ones.
    fn step_marks(&mut self) -> Result<Vec<StepPhases>> {
        Ok(Vec::new())
    }
    /// How many steps so far replayed a decode graph whose attention is the paired decode kernel
    /// for rows of even lengths (the GPU backend's `gpu::attention::even_rows`); `None` where the
    /// backend has no such graphs. Tells a check or a benchmark which kernel its steps ran.
    fn even_replays(&self) -> Option<u64> {
        None
    }
}

/// A queued step's device time by phase, from events in its stream order (microseconds).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct StepPhases {
    /// Its inputs' copies (ids, positions, slots, metadata, pending tokens, sampling parameters);
    /// `None` where the step ran eagerly, whose copies `forward_us` then includes.
    pub inputs_us: Option<f64>,
    /// Its forward and draw: the graph's replay, from its launch to its last kernel's end.
    pub forward_us: f64,
    /// Its tokens and fault word copied back.
    pub results_us: f64,
    /// From its first event to its last: the step's time on the device, without the gap
    /// before the next step's first copy.
    pub total_us: f64,
}

/// The sampling rows (indices into `sampling`) whose logits come back under
/// [`LogitsWanted::ScoredRows`], in sampling order.
pub fn scored_rows(sampling: &[SamplingRow<'_>]) -> Vec<usize> {
    sampling.iter().enumerate().filter(|(_, r)| r.scored).map(|(j, _)| j).collect()
}

/// The index in `plan.seqs` of each sampling sequence, after checking that `sampling` has one row
/// for each: what every backend does before it runs a step.
pub fn sampling_seqs(plan: &StepPlan, sampling: &[SamplingRow<'_>]) -> Result<Vec<usize>> {
    let seqs: Vec<usize> = plan.seqs.iter().enumerate().filter(|(_, p)| p.samples).map(|(i, _)| i).collect();
    if seqs.len() != sampling.len() {
        return Err(Error::Executor(format!(
            "the plan has {} sampling sequences, got {} sampling rows",
            seqs.len(),
            sampling.len()
        )));
    }
    Ok(seqs)
}
