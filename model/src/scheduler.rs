//! Continuous batching over the paged KV cache: which tokens of which sequences run in the
//! next step, which blocks they get, and the metadata the attention needs for them.
//!
//! This is host-side planning only (no model, no tensors), so it is tested on its own.
//!
//! Policy, chosen so that a request's output never depends on its batch neighbours or on the
//! cache's pressure:
//! - Blocks are allocated as sequences grow, as vLLM does: before a sequence's chunk is
//!   scheduled it gets the blocks its cache needs once the chunk is written, so a sequence holds
//!   `ceil(computed tokens / block_size)` blocks and gains one each time a block fills.
//! - Each step serves the running sequences first, in admission order: each asks for its next
//!   chunk, the one sampled token when decoding, or the next `prefill_chunk` tokens still to
//!   compute (fewer at the end). Chunk boundaries are thus multiples of `prefill_chunk` from the
//!   sequence's start whatever else is running, and a chunk that does not fit the step's token
//!   budget waits whole for the next step. A prefilling sequence then takes its following whole
//!   chunks too, while they fit the budget less a row for each running sequence behind it and
//!   their blocks are free with a block left for each of those, never by preempting, and never
//!   a one-token chunk (a decode row on the GPU): a step of a large budget carries many chunks
//!   of few prompts (the GEMMs run at large M, as issue 18 asks), at the same boundaries, so no
//!   bit of a request depends on how its chunks were grouped into steps.
//! - Then waiting requests are admitted, FIFO, while the budget, `max_num_seqs` and the free
//!   blocks allow; admission needs only the blocks of the first chunk, not of the whole life (an
//!   admitted prompt's following chunks join as above).
//!   Nothing is admitted in a step that preempted: the blocks just freed are for the running.
//! - Preemption by recompute: when a running sequence cannot get its blocks, the most recently
//!   admitted running sequence (possibly itself) gives all of its blocks back and goes to the
//!   front of the waiting queue with its tokens (prompt plus those generated so far) and nothing
//!   computed; repeated until the blocks are free. Readmitted, it recomputes its tokens the way
//!   they were first computed: the prompt in chunks at the same fixed boundaries, then each
//!   generated token as a one-row step of its own, and only the step ending at its last token
//!   samples, so no token is drawn twice; the engine keeps its count of generated tokens (the
//!   sampling step) and its stop state, so it goes on exactly where it was. Recomputing the
//!   generated tokens one per step is slower than one chunk, but on the GPU a decode row and a
//!   chunk row are computed by different kernels (each invariant to its batch, not to the
//!   other), so only this gives the cache, and every later logit, the bits they had.
//! - The oldest running sequence is never preempted. [`Scheduler::add`] refuses a request whose
//!   whole life (prompt plus `max_tokens`, capped at the model length) needs more blocks than the
//!   cache has, so the oldest always fits once everything admitted after it is preempted; it also
//!   always fits the token budget, so every step makes progress and nothing starves.
//! - Prefix caching (on unless [`SchedulerConfig::prefix_caching`] is off): blocks of prompt
//!   tokens computed in whole chunks are cached as they fill and stay cached after their
//!   sequence ends, and an admission reuses the longest cached prefix that the rule in
//!   [`prefix`] allows, so a hit resumes exactly where an uncached prefill would start its next
//!   chunk and changes no bit of the request's tokens or logits. When the pool needs blocks,
//!   the unreferenced cached blocks are evicted least recently released first.
//! - Planning ahead ([`ahead`]): a step may be planned while the one before it is still drawing
//!   its tokens; the tokens being drawn are placeholders until they come back, and the step
//!   planned reads them on the device. The chunks, blocks and draws are those of planning after.

use std::collections::VecDeque;

use ndarray::Array2;
use oracle::hp1::AttnMetadata;

use crate::block_pool::{blocks_for, BlockPool, KvCapacity};
use crate::error::{Error, Result};
use crate::prefix_index::ROOT;

pub mod ahead;
pub mod prefix;

pub use ahead::PENDING_TOKEN;

/// Limits of one engine's steps. The cache's size is not here: [`Scheduler::new`] takes it as a
/// [`KvCapacity`] (the engine passes the size of the cache that runs the steps).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Sequences in one step, at most.
    pub max_num_seqs: usize,
    /// Query tokens in one step, at most (at least `prefill_chunk`, for progress; a chunk beside
    /// a decode row of every sequence lets prefills overlap decodes).
    pub max_batched_tokens: usize,
    /// Tokens a sequence computes per step, at most, while it prefills or recomputes.
    pub prefill_chunk: usize,
    /// Longest sequence (prompt plus output) the model accepts.
    pub max_model_len: usize,
    /// Whether full prompt blocks are cached and reused by later requests with the same prefix
    /// (`--no-prefix-caching` turns it off).
    pub prefix_caching: bool,
}

/// A sequence the scheduler tracks.
#[derive(Clone, Debug)]
struct SeqState {
    id: u64,
    /// Prompt then generated tokens.
    tokens: Vec<u32>,
    /// Tokens of the prompt (computed in chunks; the rest one per step).
    prompt_len: usize,
    /// Leading tokens whose K/V is in the cache.
    num_computed: usize,
    /// Tokens this sequence may reach, prompt included.
    max_len: usize,
    blocks: Vec<u32>,
    /// Whether its admission may reuse cached blocks ([`Scheduler::add_uncached`] says no).
    prefix_lookup: bool,
    /// Whether it was admitted before (a preempted sequence's lookup is not counted again).
    admitted_before: bool,
    /// Leading blocks whose prefix is in the pool's index: reused, or cached as computed (by
    /// this sequence, or by another first, when this one holds a copy).
    num_cached_blocks: usize,
    /// The index entry of the prefix those blocks end ([`ROOT`] when none).
    last_entry: u64,
}

impl SeqState {
    /// Tokens the next step computes for this sequence: the prompt's next chunk, else one.
    fn next_chunk(&self, prefill_chunk: usize) -> usize {
        self.chunk_after(self.num_computed, prefill_chunk)
    }

    /// Tokens a step computes for this sequence once `computed` of them are in the cache.
    fn chunk_after(&self, computed: usize, prefill_chunk: usize) -> usize {
        match self.prompt_len.checked_sub(computed) {
            Some(left) if left > 0 => left.min(prefill_chunk),
            _ => 1,
        }
    }

    /// Blocks to add so that `len` more tokens fit.
    fn blocks_short(&self, len: usize, block_size: usize) -> usize {
        blocks_for(self.num_computed + len, block_size).saturating_sub(self.blocks.len())
    }

    fn scheduled(&self, len: usize) -> ScheduledSeq {
        let samples = self.num_computed + len == self.tokens.len();
        ScheduledSeq { id: self.id, start: self.num_computed, len, samples }
    }
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

impl StepPlan {
    /// Sequence `i`'s query rows.
    pub fn rows(&self, i: usize) -> std::ops::Range<usize> {
        self.meta.query_start_loc[i] as usize..self.meta.query_start_loc[i + 1] as usize
    }

    /// Sequence `i`'s last query row: the one its token is drawn from.
    pub fn last_row(&self, i: usize) -> usize {
        self.meta.query_start_loc[i + 1] as usize - 1
    }
}

/// FIFO admission, chunked prefill, growing allocation and preemption over a [`BlockPool`].
#[derive(Debug)]
pub struct Scheduler {
    cfg: SchedulerConfig,
    /// The pool, which knows the block size.
    pool: BlockPool,
    waiting: VecDeque<SeqState>,
    /// In admission order: the last is the first to be preempted.
    running: Vec<SeqState>,
    num_preemptions: u64,
    /// Prompt tokens looked up in the prefix cache at first admissions, and those found.
    prefix_queries: u64,
    prefix_hits: u64,
}

impl Scheduler {
    /// An empty scheduler over a fresh pool mirroring a cache of `kv` blocks.
    pub fn new(cfg: SchedulerConfig, kv: KvCapacity) -> Result<Self> {
        Self::over_pool(cfg, BlockPool::new(kv.num_blocks, kv.block_size))
    }

    fn over_pool(cfg: SchedulerConfig, pool: BlockPool) -> Result<Self> {
        let kv = KvCapacity { num_blocks: pool.num_blocks(), block_size: pool.block_size() };
        if kv.block_size == 0 || cfg.max_num_seqs == 0 || cfg.prefill_chunk == 0 {
            return Err(Error::Scheduler(format!(
                "block_size, max_num_seqs and prefill_chunk must be positive: {cfg:?}, {kv:?}"
            )));
        }
        if cfg.max_batched_tokens < cfg.prefill_chunk {
            return Err(Error::Scheduler(format!(
                "max_batched_tokens {} is below prefill_chunk {}",
                cfg.max_batched_tokens, cfg.prefill_chunk
            )));
        }
        Ok(Self {
            pool,
            cfg,
            waiting: VecDeque::new(),
            running: Vec::new(),
            num_preemptions: 0,
            prefix_queries: 0,
            prefix_hits: 0,
        })
    }

    /// The limits in force.
    pub fn config(&self) -> &SchedulerConfig {
        &self.cfg
    }

    /// Queues a request; its admission reuses cached prefix blocks where [`prefix`] allows.
    /// Refuses one that could never run: empty, too long for the model, or needing more blocks
    /// than the whole cache has once it reaches its longest.
    pub fn add(&mut self, id: u64, prompt: Vec<u32>, max_tokens: usize) -> Result<()> {
        self.enqueue(id, prompt, max_tokens, true)
    }

    /// As [`Scheduler::add`], but its admissions never reuse cached blocks, so every prompt
    /// position is computed (a request that wants every prompt position's logits, as `echo`
    /// with `logprobs` does). Its own whole chunks are still cached for later requests.
    pub fn add_uncached(&mut self, id: u64, prompt: Vec<u32>, max_tokens: usize) -> Result<()> {
        self.enqueue(id, prompt, max_tokens, false)
    }

    fn enqueue(&mut self, id: u64, prompt: Vec<u32>, max_tokens: usize, prefix_lookup: bool) -> Result<()> {
        if prompt.is_empty() {
            return Err(Error::Invalid { param: "prompt", reason: "it has no tokens".into() });
        }
        if prompt.len() >= self.cfg.max_model_len {
            return Err(Error::Invalid {
                param: "prompt",
                reason: format!(
                    "it has {} tokens, the model accepts at most {} in all",
                    prompt.len(),
                    self.cfg.max_model_len
                ),
            });
        }
        if self.waiting.iter().chain(&self.running).any(|s| s.id == id) {
            return Err(Error::Request(format!("request id {id} is already scheduled")));
        }
        let max_len = (prompt.len() + max_tokens).min(self.cfg.max_model_len);
        let need = blocks_for(max_len, self.pool.block_size());
        let total = self.pool.num_blocks();
        if need > total {
            // The request's own field is at fault: the prompt when it alone passes the cache.
            let (param, what) = if blocks_for(prompt.len(), self.pool.block_size()) > total {
                ("prompt", format!("its {} tokens", prompt.len()))
            } else {
                ("max_tokens", format!("the prompt's {} tokens and up to {max_tokens} more", prompt.len()))
            };
            return Err(Error::Invalid {
                param,
                reason: format!(
                    "{what} need {need} KV-cache blocks of {} tokens and the whole cache holds {total}",
                    self.pool.block_size()
                ),
            });
        }
        let prompt_len = prompt.len();
        self.waiting.push_back(SeqState {
            id,
            tokens: prompt,
            prompt_len,
            num_computed: 0,
            max_len,
            blocks: Vec::new(),
            prefix_lookup,
            admitted_before: false,
            num_cached_blocks: 0,
            last_entry: ROOT,
        });
        Ok(())
    }

    /// Whether anything is left to run.
    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    /// Sequences admitted and not finished (they may hold blocks).
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Sequences queued for admission, preempted ones included (they hold no blocks).
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Preemptions since the scheduler was made: each one is a sequence sent back to wait.
    pub fn num_preemptions(&self) -> u64 {
        self.num_preemptions
    }

    /// Prompt tokens of the requests admitted with a prefix-cache lookup, each counted at its
    /// first admission only (vLLM's `prefix_cache_queries`).
    pub fn prefix_cache_queries(&self) -> u64 {
        self.prefix_queries
    }

    /// Of [`Scheduler::prefix_cache_queries`], the tokens found cached and not computed.
    pub fn prefix_cache_hits(&self) -> u64 {
        self.prefix_hits
    }

    /// Plans the next step: grows (preempting where it must) and serves the running sequences,
    /// then admits what fits; `None` when nothing is left.
    pub fn schedule(&mut self) -> Result<Option<StepPlan>> {
        let preemptions_before = self.num_preemptions;
        let mut budget = self.cfg.max_batched_tokens;
        let mut seqs = Vec::new();
        let mut i = 0;
        while i < self.running.len() {
            let s = &self.running[i];
            let len = s.next_chunk(self.cfg.prefill_chunk);
            // Its last token is still being drawn ([`ahead`]) and ends it: no further draw.
            let at_longest = s.num_computed + len == s.tokens.len() && s.tokens.len() >= s.max_len;
            if len > budget || at_longest {
                i += 1;
                continue;
            }
            if !self.grow(i, len)? {
                break;
            }
            let behind = self.running.len() - i - 1;
            let len = self.more_chunks(i, len, budget.saturating_sub(behind), behind)?;
            budget -= len;
            seqs.push(self.running[i].scheduled(len));
            i += 1;
        }
        if self.num_preemptions == preemptions_before {
            self.admit(&mut budget, &mut seqs)?;
        }
        if seqs.is_empty() {
            return Ok(None);
        }
        Ok(Some(self.build_plan(seqs)))
    }

    /// Gives `running[i]` the blocks for `len` more tokens, preempting from the newest end until
    /// they are free; false when `running[i]` was itself the newest and was preempted.
    fn grow(&mut self, i: usize, len: usize) -> Result<bool> {
        let need = self.running[i].blocks_short(len, self.pool.block_size());
        while need > self.pool.num_free() {
            let newest = self.running.len() - 1;
            if newest == 0 {
                // Unreachable while `add` refuses what the whole cache cannot hold.
                return Err(Error::OutOfBlocks {
                    requested: need,
                    free: self.pool.num_free(),
                    total: self.pool.num_blocks(),
                });
            }
            self.preempt(newest)?;
            if newest == i {
                return Ok(false);
            }
        }
        let new = self.pool.get_new_blocks(need)?;
        self.running[i].blocks.extend(new);
        Ok(true)
    }

    /// `len`, the tokens `running[i]` already has blocks for this step, grown by the whole prompt
    /// chunks that follow while the total stays within `room` and their blocks are free with
    /// `keep_free` left over, a block for each running sequence behind it (never by preempting:
    /// only a sequence's first chunk of a step may do that, and a later chunk must not make the
    /// sequences behind it preempt). A chunk of one token stays in a step of its own: alone it is
    /// a decode row, which the GPU computes with other kernels than a chunk's rows, so joining it
    /// to the chunk before would change its bits.
    fn more_chunks(&mut self, i: usize, mut len: usize, room: usize, keep_free: usize) -> Result<usize> {
        loop {
            let s = &self.running[i];
            let at = s.num_computed + len;
            if at >= s.prompt_len {
                return Ok(len);
            }
            let next = s.chunk_after(at, self.cfg.prefill_chunk);
            let need = s.blocks_short(len + next, self.pool.block_size());
            if next == 1 || len + next > room || need + keep_free > self.pool.num_free() {
                return Ok(len);
            }
            let new = self.pool.get_new_blocks(need)?;
            self.running[i].blocks.extend(new);
            len += next;
        }
    }

    fn preempt(&mut self, i: usize) -> Result<()> {
        let mut s = self.running.remove(i);
        self.pool.free_blocks(&s.blocks)?;
        s.blocks.clear();
        s.num_computed = 0;
        s.num_cached_blocks = 0;
        s.last_entry = ROOT;
        self.waiting.push_front(s);
        self.num_preemptions += 1;
        Ok(())
    }

    fn admit(&mut self, budget: &mut usize, seqs: &mut Vec<ScheduledSeq>) -> Result<()> {
        while self.running.len() < self.cfg.max_num_seqs {
            let Some(front) = self.waiting.front() else { break };
            if front.tokens.last() == Some(&PENDING_TOKEN) {
                // Preempted while its last draw ran: it recomputes once that token is known.
                break;
            }
            let hit = self.reusable_prefix(front);
            let hit_len = hit.len() * self.pool.block_size();
            let len = front.chunk_after(hit_len, self.cfg.prefill_chunk);
            let need = blocks_for(hit_len + len, self.pool.block_size()) - hit.len();
            // Reused blocks that no one holds are counted free: taking them leaves fewer.
            let revived = hit.iter().filter(|&&(b, _)| self.pool.ref_count(b) == 0).count();
            if len > *budget || need + revived > self.pool.num_free() {
                break;
            }
            let mut seq = self.waiting.pop_front().expect("front exists");
            self.take_prefix(&mut seq, &hit)?;
            seq.blocks.extend(self.pool.get_new_blocks(need)?);
            self.running.push(seq);
            let i = self.running.len() - 1;
            let len = self.more_chunks(i, len, *budget, 0)?;
            *budget -= len;
            seqs.push(self.running[i].scheduled(len));
        }
        Ok(())
    }

    /// The index in `running` of each of `seqs`. A step's sequences are a subsequence of
    /// `running`, in its order (the running ones as `schedule` walked them, then the admitted ones,
    /// pushed at its end), so one forward walk finds them all, where a search per id was
    /// quadratic in the batch (8,000 comparisons a step at 128 sequences, twice: here and in
    /// `commit`). An id found out of that order is searched for from the start, so the order is
    /// a speed-up, never an assumption.
    fn running_indices(&self, seqs: &[ScheduledSeq]) -> Vec<Option<usize>> {
        let mut next = 0;
        seqs.iter()
            .map(|p| {
                let found = (next..self.running.len())
                    .find(|&j| self.running[j].id == p.id)
                    .or_else(|| self.running.iter().position(|s| s.id == p.id));
                next = found.map_or(next, |j| j + 1);
                found
            })
            .collect()
    }

    fn build_plan(&self, seqs: Vec<ScheduledSeq>) -> StepPlan {
        let bs = self.pool.block_size();
        let states: Vec<&SeqState> =
            self.running_indices(&seqs).into_iter().map(|j| &self.running[j.expect("scheduled seq runs")]).collect();
        let width = states.iter().map(|s| s.blocks.len()).max().unwrap_or(0);
        let mut block_table = Array2::<i32>::zeros((seqs.len(), width));
        let rows: usize = seqs.iter().map(|p| p.len).sum();
        let mut token_ids = Vec::with_capacity(rows);
        let mut slot_mapping = Vec::with_capacity(rows);
        let mut seq_lens = Vec::with_capacity(seqs.len());
        let mut query_start_loc = Vec::with_capacity(seqs.len() + 1);
        query_start_loc.push(0i32);
        for (i, (p, s)) in seqs.iter().zip(&states).enumerate() {
            for (j, &b) in s.blocks.iter().enumerate() {
                block_table[[i, j]] = b as i32;
            }
            let end = p.start + p.len;
            token_ids.extend_from_slice(&s.tokens[p.start..end]);
            // A prefill step carries thousands of rows: a block's slots a run at a time.
            let mut t = p.start;
            while t < end {
                let (block, offset) = (t / bs, t % bs);
                let run = (bs - offset).min(end - t);
                let first = s.blocks[block] as usize * bs + offset;
                slot_mapping.extend((first..first + run).map(|slot| slot as i64));
                t += run;
            }
            seq_lens.push(end as i32);
            query_start_loc.push(query_start_loc[i] + p.len as i32);
        }
        StepPlan { seqs, token_ids, meta: AttnMetadata { block_table, seq_lens, query_start_loc }, slot_mapping }
    }

    /// Records that `plan` ran: its tokens are now cached, and each sampling sequence gets the
    /// token sampled for it (`sampled[i]` for `plan.seqs[i]`, `None` where it did not sample).
    pub fn commit(&mut self, plan: &StepPlan, sampled: &[Option<u32>]) -> Result<()> {
        let at = self.running_indices(&plan.seqs).into_iter().zip(&plan.seqs);
        let at = at.map(|(j, p)| j.ok_or_else(|| Error::Scheduler(format!("request {} is not running", p.id))));
        let at = at.collect::<Result<Vec<usize>>>()?;
        let bs = self.pool.block_size();
        for ((p, tok), j) in plan.seqs.iter().zip(sampled).zip(at) {
            let s = &mut self.running[j];
            s.num_computed = p.start + p.len;
            if self.cfg.prefix_caching {
                Self::cache_computed_blocks(&mut self.pool, s, self.cfg.prefill_chunk, bs)?;
            }
            if let Some(t) = tok {
                if s.tokens.len() >= s.max_len {
                    return Err(Error::Scheduler(format!("request {} is past its longest length {}", p.id, s.max_len)));
                }
                s.tokens.push(*t);
            }
        }
        Ok(())
    }

    /// Removes a request, running or waiting, and frees its blocks at once.
    pub fn finish(&mut self, id: u64) -> Result<()> {
        if let Some(i) = self.running.iter().position(|s| s.id == id) {
            let s = self.running.remove(i);
            return self.pool.free_blocks(&s.blocks);
        }
        if let Some(i) = self.waiting.iter().position(|s| s.id == id) {
            self.waiting.remove(i);
            return Ok(());
        }
        Err(Error::UnknownRequest { id })
    }

    /// The pool, for its counts and invariant checks.
    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// Panics, saying which invariant broke, if the scheduler's state is inconsistent: the
    /// pool's invariants; each running sequence holds the blocks its computed tokens need, each
    /// once, and every block's reference count is the number of running sequences holding it;
    /// waiting sequences hold nothing; and the cache's: a sequence's cached leading blocks are
    /// whole chunks' worth of its prompt ([`prefix`]), and every cached block a sequence holds
    /// holds that sequence's own tokens, the first of them after [`ROOT`] and no other.
    pub fn check_invariants(&self) {
        self.pool.check_invariants();
        let bs = self.pool.block_size();
        let mut refs = vec![0u32; self.pool.num_blocks()];
        for s in &self.running {
            assert_eq!(s.blocks.len(), blocks_for(s.num_computed, bs), "request {}: blocks for its tokens", s.id);
            for (j, &b) in s.blocks.iter().enumerate() {
                refs[b as usize] += 1;
                if let Some((tokens, parent, _)) = self.pool.index().contents(b) {
                    let own = &s.tokens[j * bs..(j + 1) * bs];
                    assert_eq!(tokens, own, "request {} holds cached block {b} of other tokens at {j}", s.id);
                    assert_eq!(parent == ROOT, j == 0, "request {}: cached block {b} at {j}, parent {parent}", s.id);
                    if let Some((_, _, before)) = j.checked_sub(1).and_then(|i| self.pool.index().contents(s.blocks[i]))
                    {
                        assert_eq!(parent, before, "request {}: cached block {b} follows another prefix", s.id);
                    }
                }
            }
            let pending = s.tokens.iter().position(|&t| t == PENDING_TOKEN);
            let last_two = s.tokens.len().saturating_sub(2).max(s.prompt_len);
            assert!(pending.is_none_or(|k| k >= last_two), "request {}: a pending token mid-sequence", s.id);
            let cacheable = prefix::cacheable_len(s.prompt_len, self.cfg.prefill_chunk);
            assert!(s.num_cached_blocks * bs <= cacheable.min(s.num_computed), "request {}: cached too far", s.id);
            assert_eq!(s.num_cached_blocks == 0, s.last_entry == ROOT, "request {}: entry of its prefix", s.id);
            if !self.cfg.prefix_caching {
                assert_eq!(s.num_cached_blocks, 0, "request {}: cached with prefix caching off", s.id);
            }
        }
        for (b, &n) in refs.iter().enumerate() {
            assert_eq!(self.pool.ref_count(b as u32), n, "block {b}: reference count against its holders");
        }
        for s in &self.waiting {
            assert!(s.blocks.is_empty() && s.num_computed == 0, "waiting request {} holds blocks", s.id);
            assert_eq!((s.num_cached_blocks, s.last_entry), (0, ROOT), "waiting request {}", s.id);
        }
        if !self.cfg.prefix_caching {
            assert_eq!(self.pool.num_cached(), 0, "blocks cached with prefix caching off");
        }
    }
}

#[cfg(test)]
mod tests;
