//! What the engine reports about its steps and its load, for benchmarks and a server's metrics.

use std::time::Duration;

/// The rows of one step: how many sequences it carried and how many of them were decode rows.
/// A decode row is a sequence's one query token, sampled; a prefill (or recompute) chunk of a
/// single token is one too, since the forward runs it on the decode kernels alike.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepRows {
    /// Sequences in the step.
    pub num_seqs: usize,
    /// Query tokens in the step.
    pub num_tokens: usize,
    /// Sequences that brought exactly one query token.
    pub num_decodes: usize,
}

impl StepRows {
    /// Whether every row of the step was a decode row (the step a whole-step CUDA graph serves).
    pub fn is_decode_only(&self) -> bool {
        self.num_seqs > 0 && self.num_decodes == self.num_seqs
    }
}

/// Where the wall time of the last [`Engine::step`](super::Engine::step) went, on the host's clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepTimes {
    /// The scheduler choosing the step's sequences and tokens.
    pub schedule: Duration,
    /// [`StepExecutor::submit`] and [`StepExecutor::collect`]: the forward and the draw (on the
    /// GPU, until the tokens are on the host; planning ahead, the wait for the step before).
    ///
    /// [`StepExecutor::submit`]: crate::executor::StepExecutor::submit
    /// [`StepExecutor::collect`]: crate::executor::StepExecutor::collect
    pub execute: Duration,
    /// Of `execute`, the time in [`StepExecutor::submit`]: over an executor that queues steps,
    /// the host's work to queue one (the rest is the wait for the device).
    ///
    /// [`StepExecutor::submit`]: crate::executor::StepExecutor::submit
    pub submit: Duration,
    /// The drawn tokens handed to their requests (logprobs, detokenising, stop rules), the
    /// scheduler's commit and the finished requests' completions: with `schedule`, the host work
    /// the executor does not see.
    pub hand_out: Duration,
}

/// What a server reports about the engine's load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineStats {
    /// Requests admitted and unfinished.
    pub num_running: usize,
    /// Requests queued, preempted ones included.
    pub num_waiting: usize,
    /// KV-cache blocks held by running requests.
    pub num_blocks_used: usize,
    /// KV-cache blocks in all.
    pub num_blocks: usize,
    /// Requests sent back to wait for blocks since the engine started.
    pub num_preemptions: u64,
    /// Prompt tokens looked up in the prefix cache since the engine started (each request
    /// once, at its first admission; requests that skip the cache are not counted).
    pub prefix_cache_queries: u64,
    /// Of those, the tokens found cached, whose computation was skipped.
    pub prefix_cache_hits: u64,
}
