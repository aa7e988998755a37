//! Continuous batching over the paged KV cache: which tokens of which sequences run in the
//! next step, and the metadata the attention needs for them.
//!
//! This is host-side planning only (no model, no tensors), so it is tested on its own.
//!
//! Policy, chosen so that a request's output never depends on its batch neighbours:
//! - A request is admitted (FIFO) only when blocks for its whole life, prompt plus
//!   `max_tokens` capped at the model length, are free; they are reserved at once, so a running
//!   sequence never runs out of cache and nothing is ever preempted.
//! - Each step, every running sequence asks for its next chunk: the one sampled token when
//!   decoding, or the next `prefill_chunk` prompt tokens (fewer at the end of the prompt). Chunk
//!   boundaries are thus multiples of `prefill_chunk` from the sequence's start whatever else is
//!   running, and a chunk that does not fit the step's token budget waits whole for the next step.
//! - Sequences are served oldest first, and the oldest always runs, so none starves.

use std::collections::VecDeque;

use ndarray::Array2;
use oracle::hp1::AttnMetadata;

use crate::block_pool::{blocks_for, BlockPool};
use crate::error::{Error, Result};

/// Limits of one engine's steps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Tokens per cache block.
    pub block_size: usize,
    /// Blocks in the cache.
    pub num_blocks: usize,
    /// Sequences in one step, at most.
    pub max_num_seqs: usize,
    /// Query tokens in one step, at most (at least `prefill_chunk`).
    pub max_batched_tokens: usize,
    /// Prompt tokens a sequence computes per step, at most.
    pub prefill_chunk: usize,
    /// Longest sequence (prompt plus output) the model accepts.
    pub max_model_len: usize,
}

/// A sequence the scheduler tracks.
#[derive(Clone, Debug)]
struct SeqState {
    id: u64,
    /// Prompt then generated tokens.
    tokens: Vec<u32>,
    /// Leading tokens whose K/V is in the cache.
    num_computed: usize,
    /// Tokens this sequence may reach, prompt included.
    max_len: usize,
    blocks: Vec<u32>,
}

/// One sequence's share of a step: tokens `start..start + len` of it are computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScheduledSeq {
    /// The request.
    pub id: u64,
    /// First token position computed.
    pub start: usize,
    /// Tokens computed.
    pub len: usize,
    /// Whether this chunk ends at the sequence's last known token, so its logits are sampled.
    pub samples: bool,
}

/// Everything a model forward needs for one step.
#[derive(Clone, Debug, PartialEq)]
pub struct StepPlan {
    /// Sequences in the step, in query order.
    pub seqs: Vec<ScheduledSeq>,
    /// `[num_tokens]` token ids to embed.
    pub token_ids: Vec<u32>,
    /// Block table, lengths and query offsets.
    pub meta: AttnMetadata,
    /// `[num_tokens]` cache slot of each new token.
    pub slot_mapping: Vec<i64>,
}

/// FIFO admission plus chunked prefill over a [`BlockPool`].
#[derive(Debug)]
pub struct Scheduler {
    cfg: SchedulerConfig,
    pool: BlockPool,
    waiting: VecDeque<SeqState>,
    running: Vec<SeqState>,
}

impl Scheduler {
    /// An empty scheduler over a fresh pool of `cfg.num_blocks` blocks.
    pub fn new(cfg: SchedulerConfig) -> Result<Self> {
        if cfg.block_size == 0 || cfg.max_num_seqs == 0 || cfg.prefill_chunk == 0 {
            return Err(Error::Scheduler(format!("block_size, max_num_seqs and prefill_chunk must be positive: {cfg:?}")));
        }
        if cfg.max_batched_tokens < cfg.prefill_chunk {
            return Err(Error::Scheduler(format!(
                "max_batched_tokens {} is below prefill_chunk {}",
                cfg.max_batched_tokens, cfg.prefill_chunk
            )));
        }
        Ok(Self { pool: BlockPool::new(cfg.num_blocks), cfg, waiting: VecDeque::new(), running: Vec::new() })
    }

    /// The limits in force.
    pub fn config(&self) -> &SchedulerConfig {
        &self.cfg
    }

    /// Queues a request. Refuses one that could never run: empty, too long for the model, or
    /// needing more blocks than the whole cache has.
    pub fn add(&mut self, id: u64, prompt: Vec<u32>, max_tokens: usize) -> Result<()> {
        if prompt.is_empty() {
            return Err(Error::Request("the prompt has no tokens".into()));
        }
        if prompt.len() >= self.cfg.max_model_len {
            return Err(Error::Request(format!(
                "the prompt has {} tokens, the model accepts at most {} in all",
                prompt.len(),
                self.cfg.max_model_len
            )));
        }
        if self.waiting.iter().chain(&self.running).any(|s| s.id == id) {
            return Err(Error::Request(format!("request id {id} is already scheduled")));
        }
        let max_len = (prompt.len() + max_tokens).min(self.cfg.max_model_len);
        let need = blocks_for(max_len, self.cfg.block_size);
        if need > self.pool.num_blocks() {
            return Err(Error::OutOfBlocks { requested: need, free: self.pool.num_free(), total: self.pool.num_blocks() });
        }
        self.waiting.push_back(SeqState { id, tokens: prompt, num_computed: 0, max_len, blocks: Vec::new() });
        Ok(())
    }

    /// Whether anything is left to run.
    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    /// Sequences running and waiting.
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Admits what fits and plans the next step; `None` when nothing is left.
    pub fn schedule(&mut self) -> Result<Option<StepPlan>> {
        self.admit()?;
        let mut budget = self.cfg.max_batched_tokens;
        let mut seqs = Vec::new();
        for s in &self.running {
            let remaining = s.tokens.len() - s.num_computed;
            let len = remaining.min(self.cfg.prefill_chunk);
            if len > budget {
                continue;
            }
            budget -= len;
            seqs.push(ScheduledSeq { id: s.id, start: s.num_computed, len, samples: len == remaining });
        }
        if seqs.is_empty() {
            return Ok(None);
        }
        Ok(Some(self.build_plan(seqs)))
    }

    fn admit(&mut self) -> Result<()> {
        while self.running.len() < self.cfg.max_num_seqs {
            let Some(front) = self.waiting.front() else { break };
            let need = blocks_for(front.max_len, self.cfg.block_size);
            if need > self.pool.num_free() {
                break;
            }
            let mut seq = self.waiting.pop_front().expect("front exists");
            seq.blocks = self.pool.get_new_blocks(need)?;
            self.running.push(seq);
        }
        Ok(())
    }

    fn build_plan(&self, seqs: Vec<ScheduledSeq>) -> StepPlan {
        let bs = self.cfg.block_size;
        let states: Vec<&SeqState> =
            seqs.iter().map(|p| self.running.iter().find(|s| s.id == p.id).expect("scheduled seq runs")).collect();
        let width = states.iter().map(|s| s.blocks.len()).max().unwrap_or(0);
        let mut block_table = Array2::<i32>::zeros((seqs.len(), width));
        let mut token_ids = Vec::new();
        let mut slot_mapping = Vec::new();
        let mut seq_lens = Vec::new();
        let mut query_start_loc = vec![0i32];
        for (i, (p, s)) in seqs.iter().zip(&states).enumerate() {
            for (j, &b) in s.blocks.iter().enumerate() {
                block_table[[i, j]] = b as i32;
            }
            for t in p.start..p.start + p.len {
                token_ids.push(s.tokens[t]);
                slot_mapping.push((s.blocks[t / bs] as usize * bs + t % bs) as i64);
            }
            seq_lens.push((p.start + p.len) as i32);
            query_start_loc.push(query_start_loc[i] + p.len as i32);
        }
        StepPlan { seqs, token_ids, meta: AttnMetadata { block_table, seq_lens, query_start_loc }, slot_mapping }
    }

    /// Records that `plan` ran: its tokens are now cached, and each sampling sequence gets the
    /// token sampled for it (`sampled[i]` for `plan.seqs[i]`, `None` where it did not sample).
    pub fn commit(&mut self, plan: &StepPlan, sampled: &[Option<u32>]) -> Result<()> {
        for (p, tok) in plan.seqs.iter().zip(sampled) {
            let s = self
                .running
                .iter_mut()
                .find(|s| s.id == p.id)
                .ok_or_else(|| Error::Scheduler(format!("request {} is not running", p.id)))?;
            s.num_computed = p.start + p.len;
            if let Some(t) = tok {
                if s.tokens.len() >= s.max_len {
                    return Err(Error::Scheduler(format!("request {} is past its reserved length {}", p.id, s.max_len)));
                }
                s.tokens.push(*t);
            }
        }
        Ok(())
    }

    /// Removes a request, running or waiting, and frees its blocks.
    pub fn finish(&mut self, id: u64) -> Result<()> {
        if let Some(i) = self.running.iter().position(|s| s.id == id) {
            let s = self.running.remove(i);
            return self.pool.free_blocks(&s.blocks);
        }
        if let Some(i) = self.waiting.iter().position(|s| s.id == id) {
            self.waiting.remove(i);
            return Ok(());
        }
        Err(Error::Scheduler(format!("request {id} is unknown")))
    }

    /// The pool, for invariant checks.
    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> SchedulerConfig {
        SchedulerConfig {
            block_size: 4,
            num_blocks: 16,
            max_num_seqs: 4,
            max_batched_tokens: 8,
            prefill_chunk: 5,
            max_model_len: 32,
        }
    }

    #[test]
    fn prefill_is_chunked_at_fixed_boundaries_then_decodes() {
        let mut s = Scheduler::new(cfg()).unwrap();
        s.add(7, (0..12).collect(), 3).unwrap();
        let mut chunks = Vec::new();
        while let Some(plan) = s.schedule().unwrap() {
            let p = plan.seqs[0];
            chunks.push((p.start, p.len, p.samples));
            let sampled = vec![p.samples.then_some(100)];
            s.commit(&plan, &sampled).unwrap();
            if chunks.len() == 5 {
                break;
            }
        }
        assert_eq!(chunks, vec![(0, 5, false), (5, 5, false), (10, 2, true), (12, 1, true), (13, 1, true)]);
    }

    #[test]
    fn plan_metadata_matches_the_blocks_reserved() {
        let mut s = Scheduler::new(cfg()).unwrap();
        s.add(1, vec![1, 2, 3], 2).unwrap();
        s.add(2, vec![4, 5], 9).unwrap();
        let plan = s.schedule().unwrap().unwrap();
        assert_eq!(plan.token_ids, vec![1, 2, 3, 4, 5]);
        assert_eq!(plan.meta.query_start_loc, vec![0, 3, 5]);
        assert_eq!(plan.meta.seq_lens, vec![3, 2]);
        // Request 1 reserves blocks 0-1 (5 tokens), request 2 blocks 2-4 (11 tokens).
        assert_eq!(plan.slot_mapping, vec![0, 1, 2, 8, 9]);
        plan.meta.validate(16, 4, 5).unwrap();
    }

    #[test]
    fn a_chunk_that_does_not_fit_waits_whole() {
        let mut s = Scheduler::new(cfg()).unwrap();
        s.add(1, (0..5).collect(), 1).unwrap();
        s.add(2, (0..5).collect(), 1).unwrap();
        let plan = s.schedule().unwrap().unwrap();
        assert_eq!(plan.seqs.len(), 1, "two 5-token chunks exceed the 8-token budget");
        assert_eq!(plan.seqs[0].id, 1);
    }

    #[test]
    fn admission_waits_for_blocks_and_finish_frees_them() {
        let mut s = Scheduler::new(SchedulerConfig { num_blocks: 4, ..cfg() }).unwrap();
        s.add(1, (0..8).collect(), 8).unwrap();
        s.add(2, (0..3).collect(), 1).unwrap();
        let plan = s.schedule().unwrap().unwrap();
        assert_eq!(plan.seqs.iter().map(|p| p.id).collect::<Vec<_>>(), vec![1]);
        s.finish(1).unwrap();
        s.pool().check_invariants();
        let plan = s.schedule().unwrap().unwrap();
        assert_eq!(plan.seqs[0].id, 2);
    }

    #[test]
    fn impossible_requests_are_refused_with_reasons() {
        let mut s = Scheduler::new(cfg()).unwrap();
        assert!(s.add(1, vec![], 4).unwrap_err().to_string().contains("no tokens"));
        assert!(s.add(1, (0..40).collect(), 4).unwrap_err().to_string().contains("at most 32"));
        let mut small = Scheduler::new(SchedulerConfig { num_blocks: 2, ..cfg() }).unwrap();
        assert!(matches!(small.add(1, (0..10).collect(), 5), Err(Error::OutOfBlocks { .. })));
        s.add(3, vec![1], 1).unwrap();
        assert!(s.add(3, vec![1], 1).is_err());
    }
}
