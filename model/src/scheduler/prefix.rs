//! Prefix caching's rule: which blocks a sequence caches, and which cached blocks an admission
//! may reuse, so that a request's tokens and logits are the same bits with and without a hit.
//!
//! A prompt is computed in chunks cut at multiples of `prefill_chunk` from its start. A row of a
//! chunk has the same bits whatever other sequences share its step, but a chunk that starts
//! elsewhere or has another length is a different computation (on the GPU a one-row chunk even
//! runs on the decode kernels), and every later layer's K/V depends on it. The premise, the one
//! batch invariance rests on: a row's bits depend on its token, the K/V before it, and its
//! chunk's start and length, not on the values of the chunk's other rows. So a cached block is
//! reused only where the uncached run computes the very same thing:
//! - **What is cached.** Once computed, a block is cached if it lies wholly inside the prompt's
//!   full chunks, `[0, prompt_len / prefill_chunk * prefill_chunk)` ([`cacheable_len`]). Each of
//!   its rows was computed in a chunk of exactly `prefill_chunk` rows starting on a chunk
//!   boundary, from the tokens up to it and cached K/V that are, by induction, those same bits:
//!   what any sequence with the same tokens up to that row computes there in a full chunk. The
//!   prompt's last short chunk and the generated tokens are never cached. A block whose prefix
//!   is cached already (by another sequence that computed it first) stays a private copy.
//! - **What a hit reuses.** At admission, the sequence's leading blocks are looked up in order
//!   (each by its tokens and the prefix before it, compared exactly) and the run found is cut to
//!   [`reusable_len`]: a multiple of lcm(`prefill_chunk`, `block_size`), within the sequence's own
//!   full prompt chunks (so the uncached run computes every reused row in a full chunk too), and
//!   short of the sequence's last known token (so the step that samples still runs; for a new
//!   request that is the prompt's last token, whose logits give the first generated one). The
//!   hit thus ends on a chunk boundary, where the uncached prefill starts a chunk: the chunks
//!   after it are cut where they would have been, over the same K/V bits, so they compute the
//!   same bits; and it ends on a block boundary, so no shared block is ever written.
//! - **Who skips it.** A request added with [`Scheduler::add_uncached`] looks nothing up (it
//!   wants every prompt position's logits); a preempted sequence looks up again when readmitted,
//!   and only its first admission counts in [`Scheduler::prefix_cache_queries`] and
//!   [`Scheduler::prefix_cache_hits`] (tokens, as vLLM counts them).
//!
//! With `prefill_chunk` 512 and 16-token blocks, hits come in whole 512-token chunks: a prompt
//! reuses nothing until it shares more than 512 tokens with a cached one.

use super::{Scheduler, SeqState};
use crate::block_pool::BlockPool;
use crate::error::Result;

/// Leading prompt tokens computed in full chunks of `chunk`: the ones that may be cached.
pub fn cacheable_len(prompt_len: usize, chunk: usize) -> usize {
    prompt_len / chunk * chunk
}

/// The most tokens a hit may cover for a sequence of `num_tokens` known tokens whose prompt has
/// `prompt_len`: whole [`reuse_unit`]s within its full prompt chunks, and fewer than
/// `num_tokens`. Zero when the unit overflows.
pub fn reusable_len(prompt_len: usize, num_tokens: usize, chunk: usize, block: usize) -> usize {
    let Some(unit) = reuse_unit(chunk, block) else { return 0 };
    let limit = cacheable_len(prompt_len, chunk).min(num_tokens.saturating_sub(1));
    limit / unit * unit
}

/// lcm(`chunk`, `block`): a hit's length is a multiple of it, so it ends on a chunk boundary and
/// a block boundary at once. `None` past `usize::MAX`.
pub fn reuse_unit(chunk: usize, block: usize) -> Option<usize> {
    (chunk / gcd(chunk, block)).checked_mul(block)
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl Scheduler {
    /// The cached blocks `seq` would reuse if admitted now (with their entry ids): none when
    /// prefix caching is off or `seq` looks nothing up.
    pub(super) fn reusable_prefix(&self, seq: &SeqState) -> Vec<(u32, u64)> {
        if !self.cfg.prefix_caching || !seq.prefix_lookup {
            return Vec::new();
        }
        let bs = self.pool.block_size();
        let limit = reusable_len(seq.prompt_len, seq.tokens.len(), self.cfg.prefill_chunk, bs);
        let mut hit = self.pool.cached_prefix(seq.tokens[..limit].chunks_exact(bs));
        // A limit above zero means the unit did not overflow.
        let unit_blocks = reuse_unit(self.cfg.prefill_chunk, bs).map_or(1, |u| u / bs);
        hit.truncate(hit.len() / unit_blocks * unit_blocks);
        hit
    }

    /// Gives `seq`, being admitted with nothing computed, the blocks `hit` (from
    /// [`Scheduler::reusable_prefix`]) as its computed prefix, and counts its lookup.
    pub(super) fn take_prefix(&mut self, seq: &mut SeqState, hit: &[(u32, u64)]) -> Result<()> {
        let blocks: Vec<u32> = hit.iter().map(|&(b, _)| b).collect();
        self.pool.share(&blocks)?;
        if self.cfg.prefix_caching && seq.prefix_lookup && !seq.admitted_before {
            self.prefix_queries += seq.prompt_len as u64;
            self.prefix_hits += (hit.len() * self.pool.block_size()) as u64;
        }
        seq.admitted_before = true;
        seq.num_computed = hit.len() * self.pool.block_size();
        seq.num_cached_blocks = hit.len();
        seq.last_entry = hit.last().map_or(super::ROOT, |&(_, id)| id);
        seq.blocks = blocks;
        Ok(())
    }

    /// Caches the blocks of `seq` that its computed tokens filled within its full prompt chunks.
    pub(super) fn cache_computed_blocks(
        pool: &mut BlockPool,
        seq: &mut SeqState,
        chunk: usize,
        bs: usize,
    ) -> Result<()> {
        let upto = cacheable_len(seq.prompt_len, chunk).min(seq.num_computed) / bs;
        while seq.num_cached_blocks < upto {
            let j = seq.num_cached_blocks;
            seq.last_entry = pool.cache(seq.blocks[j], seq.last_entry, &seq.tokens[j * bs..(j + 1) * bs])?;
            seq.num_cached_blocks += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use proptest::prelude::*;

    use super::*;
    use crate::block_pool::blocks_for;
    use crate::prefix_index::PrefixIndex;
    use crate::scheduler::{SchedulerConfig, StepPlan};

    const BS: usize = 4;

    /// One chunk a step: the tests below see each chunk in a step of its own.
    fn config(prefill_chunk: usize, prefix_caching: bool) -> SchedulerConfig {
        SchedulerConfig {
            max_num_seqs: 4,
            max_batched_tokens: prefill_chunk,
            prefill_chunk,
            max_model_len: 48,
            prefix_caching,
        }
    }

    fn scheduler(prefill_chunk: usize, num_blocks: usize) -> Scheduler {
        Scheduler::over_pool(config(prefill_chunk, true), BlockPool::new(num_blocks, BS)).unwrap()
    }

    /// Runs request `id` (one token to generate) to its end; returns its chunks `(start, len)`.
    fn serve(s: &mut Scheduler, id: u64, prompt: Vec<u32>, cached: bool) -> Vec<(usize, usize)> {
        if cached {
            s.add(id, prompt, 1).unwrap();
        } else {
            s.add_uncached(id, prompt, 1).unwrap();
        }
        let mut chunks = Vec::new();
        loop {
            let plan = s.schedule().unwrap().expect("the request is unfinished");
            let sampled: Vec<_> = plan.seqs.iter().map(|p| p.samples.then_some(7)).collect();
            s.commit(&plan, &sampled).unwrap();
            s.check_invariants();
            let p = plan.seqs.iter().find(|p| p.id == id).expect("it runs alone");
            chunks.push((p.start, p.len));
            if p.samples {
                s.finish(id).unwrap();
                s.check_invariants();
                return chunks;
            }
        }
    }

    #[test]
    fn a_hit_is_whole_units_of_chunk_and_block_within_the_full_chunks_and_short_of_the_last_token() {
        // Chunks of 8 and blocks of 4: units of 8.
        assert_eq!(reusable_len(24, 24, 8, 4), 16, "the prompt's last token is always computed");
        assert_eq!(reusable_len(24, 30, 8, 4), 24, "a preempted sequence may reuse its whole prompt");
        assert_eq!(reusable_len(23, 23, 8, 4), 16);
        assert_eq!(reusable_len(7, 7, 8, 4), 0, "no full chunk");
        // Chunks of 6 and blocks of 4: units of 12.
        assert_eq!(reusable_len(30, 30, 6, 4), 24);
        assert_eq!(reusable_len(20, 20, 6, 4), 12);
        assert_eq!(reusable_len(100, 100, usize::MAX, 3), 0, "an overflowing unit reuses nothing");
        assert_eq!(cacheable_len(23, 8), 16);
    }

    #[test]
    fn shared_prefixes_of_every_length_hit_whole_chunks_only() {
        let mut s = scheduler(8, 32);
        let base: Vec<u32> = (0..24).collect();
        assert_eq!(serve(&mut s, 0, base.clone(), true), vec![(0, 8), (8, 8), (16, 8)]);
        assert_eq!(s.pool().num_cached(), 6, "three full chunks of two blocks each");
        // Shorter than a block, one block, one chunk, more, and the whole prompt.
        let mut starts = Vec::new();
        for (id, shared) in [(1u64, 3usize), (2, 4), (3, 8), (4, 17), (5, 24)] {
            let mut p = base[..shared].to_vec();
            p.extend((shared..24).map(|t| 1000 + 100 * id as u32 + t as u32));
            starts.push(serve(&mut s, id, p, true)[0]);
        }
        assert_eq!(starts, vec![(0, 8), (0, 8), (8, 8), (16, 8), (16, 8)]);
        assert_eq!(s.prefix_cache_queries(), 6 * 24);
        assert_eq!(s.prefix_cache_hits(), 8 + 16 + 16);
    }

    #[test]
    fn the_last_short_chunk_is_never_cached_and_an_uncached_add_looks_nothing_up() {
        let mut s = scheduler(8, 32);
        serve(&mut s, 0, (0..13).collect(), false);
        assert_eq!(s.pool().num_cached(), 2, "blocks 0 and 1 only: 8..13 was a short chunk");
        assert_eq!((s.prefix_cache_queries(), s.prefix_cache_hits()), (0, 0), "an uncached add is no query");
        assert_eq!(serve(&mut s, 1, (0..13).collect(), false)[0], (0, 8));
        assert_eq!(serve(&mut s, 2, (0..13).collect(), true)[0], (8, 5));
        assert_eq!((s.prefix_cache_queries(), s.prefix_cache_hits()), (13, 8));

        let mut off = Scheduler::over_pool(config(8, false), BlockPool::new(32, BS)).unwrap();
        serve(&mut off, 0, (0..20).collect(), true);
        assert_eq!(serve(&mut off, 1, (0..20).collect(), true)[0], (0, 8));
        assert_eq!((off.pool().num_cached(), off.prefix_cache_queries()), (0, 0));
    }

    #[test]
    fn a_full_pool_evicts_cached_blocks_least_recently_released_first() {
        let mut s = scheduler(4, 6);
        let a: Vec<u32> = (0..8).collect();
        let b: Vec<u32> = (100..108).collect();
        serve(&mut s, 0, a.clone(), true);
        serve(&mut s, 1, b.clone(), true);
        assert_eq!((s.pool().num_free(), s.pool().num_cached()), (6, 4));
        // 16 tokens: the two uncached blocks, then a's two, evicted last block first.
        serve(&mut s, 2, (200..216).collect(), true);
        assert_eq!(s.pool().num_cached(), 2 + 4, "b's two and the newest request's four");
        assert_eq!(serve(&mut s, 3, b, true)[0], (4, 4), "b's blocks were not evicted");
        assert_eq!(serve(&mut s, 4, a, true)[0], (0, 4), "a's were");
    }

    #[test]
    fn equal_blocks_after_different_prefixes_are_never_reused_even_when_every_hash_collides() {
        let pool = BlockPool::with_index(PrefixIndex::with_hash(32, BS, |_, _| 0));
        let mut s = Scheduler::over_pool(config(4, true), pool).unwrap();
        let (x, y, w) = ([1u32; 4], [2u32; 4], [3u32; 4]);
        let cat = |parts: &[[u32; 4]]| parts.concat();
        serve(&mut s, 0, cat(&[x, y, y, y]), true);
        // Its second block is `w`: a `y` block is cached under every parent but this one.
        assert_eq!(serve(&mut s, 1, cat(&[x, w, y, y]), true)[0], (4, 4));
        assert_eq!(serve(&mut s, 2, cat(&[y, y, y, y]), true)[0], (0, 4));
        assert_eq!(serve(&mut s, 3, cat(&[x, w, y, x]), true)[0], (12, 4));
        assert_eq!(serve(&mut s, 4, cat(&[x, y, y, w]), true)[0], (12, 4));
    }

    /// What wrote a cache slot: the sequence's tokens up to and including its position, and the
    /// chunk `(start, len)` of the step that computed it. Equal records mean equal K/V bits.
    #[derive(Clone, Debug, PartialEq)]
    struct Written {
        prefix: Vec<u32>,
        chunk: (usize, usize),
    }

    /// The chunk in which a run with no cache hit computes position `t`.
    fn uncached_chunk(t: usize, prompt_len: usize, chunk: usize) -> (usize, usize) {
        if t < prompt_len {
            let start = t / chunk * chunk;
            (start, chunk.min(prompt_len - start))
        } else {
            (t, 1)
        }
    }

    /// Checks `plan` against a model of the cache's contents, then records what it writes: each
    /// sequence's share of the step is whole chunks of a run without hits (no one-token chunk,
    /// a decode row, joined to another), every position before it reads a slot written by
    /// exactly the computation a run without hits makes there, and no write lands in a cached
    /// or shared block.
    fn check_plan(
        s: &Scheduler,
        plan: &StepPlan,
        own: &dyn Fn(u64) -> (Vec<u32>, usize),
        slots: &mut HashMap<i64, Written>,
    ) -> std::result::Result<(), TestCaseError> {
        let chunk = s.config().prefill_chunk;
        let mut writes = Vec::new();
        for (i, p) in plan.seqs.iter().enumerate() {
            let (tokens, prompt_len) = own(p.id);
            let q = plan.rows(i);
            prop_assert_eq!(&plan.token_ids[q.clone()], &tokens[p.start..p.start + p.len]);
            let mut at = p.start;
            while at < p.start + p.len {
                let piece = uncached_chunk(at, prompt_len, chunk);
                prop_assert_eq!(piece.0, at, "request {}: a chunk cut at {}", p.id, at);
                prop_assert!(piece.1 > 1 || p.len == 1, "request {}: a one-token chunk joined at {}", p.id, at);
                at += piece.1;
            }
            prop_assert_eq!(at, p.start + p.len, "request {}: a chunk cut at its end", p.id);
            for t in 0..p.start {
                let slot = i64::from(plan.meta.block_table[[i, t / BS]]) * BS as i64 + (t % BS) as i64;
                let want = Written { prefix: tokens[..=t].to_vec(), chunk: uncached_chunk(t, prompt_len, chunk) };
                prop_assert_eq!(slots.get(&slot), Some(&want), "request {} position {}", p.id, t);
            }
            for (k, &slot) in plan.slot_mapping[q].iter().enumerate() {
                let block = (slot / BS as i64) as u32;
                prop_assert!(s.pool().ref_count(block) == 1 && !s.pool().index().is_cached(block));
                let t = p.start + k;
                writes.push((
                    slot,
                    Written { prefix: tokens[..=t].to_vec(), chunk: uncached_chunk(t, prompt_len, chunk) },
                ));
            }
        }
        slots.extend(writes);
        Ok(())
    }

    proptest! {
        /// Requests sharing prefixes of any length over a two-token alphabet (so equal blocks
        /// follow different prefixes), arriving over time on a cache that may preempt and evict,
        /// with a strong or a colliding hash, at budgets of one chunk to many: every chunk is
        /// the one a run without hits computes, over the K/V a run without hits computed, and
        /// every request draws its own tokens.
        #[test]
        fn a_hit_reads_exactly_what_an_uncached_run_computes(
            stems in prop::collection::vec(prop::collection::vec(0u32..2, 24), 2),
            reqs in prop::collection::vec((0usize..2, 0usize..25, 0usize..10, 1usize..8, 0usize..40), 1..10),
            prefill_chunk in prop::sample::select(vec![2usize, 4, 6, 8]),
            budget_chunks in prop::sample::select(vec![1usize, 2, 3, 64]),
            spare_blocks in 0usize..8,
            colliding: bool,
        ) {
            let prompts: Vec<Vec<u32>> = reqs
                .iter()
                .enumerate()
                .map(|(id, &(stem, shared, tail, _, _))| {
                    let mut p = stems[stem][..shared].to_vec();
                    p.extend((0..tail).map(|t| ((id * 7 + t * 3) % 5 % 2) as u32));
                    if p.is_empty() {
                        p.push(1);
                    }
                    p
                })
                .collect();
            let longest = prompts.iter().zip(&reqs).map(|(p, r)| blocks_for((p.len() + r.3).min(48), BS)).max().unwrap();
            let hash: crate::prefix_index::BlockHash = if colliding { |_, t| u64::from(t[0]) } else { |p, t| {
                let mut h = std::hash::DefaultHasher::new();
                std::hash::Hash::hash(&(p, t), &mut h);
                std::hash::Hasher::finish(&h)
            } };
            let pool = BlockPool::with_index(PrefixIndex::with_hash(longest + spare_blocks, BS, hash));
            let budget = budget_chunks * prefill_chunk + 4;
            let cfg = SchedulerConfig { max_batched_tokens: budget, ..config(prefill_chunk, true) };
            let mut s = Scheduler::over_pool(cfg, pool).unwrap();
            let draw = |id: u64, n: usize| ((id as usize + n) % 2) as u32;
            let mut generated: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
            let mut slots = HashMap::new();
            let mut step = 0;
            while generated.len() < reqs.len() || s.has_work() {
                prop_assert!(step < 3000, "no progress");
                for (id, r) in reqs.iter().enumerate().filter(|(_, r)| r.4 == step) {
                    s.add(id as u64, prompts[id].clone(), r.3).unwrap();
                    generated.insert(id as u64, Vec::new());
                }
                step += 1;
                let Some(plan) = s.schedule().unwrap() else { continue };
                let own = |id: u64| {
                    let mut t = prompts[id as usize].clone();
                    t.extend(&generated[&id]);
                    (t, prompts[id as usize].len())
                };
                check_plan(&s, &plan, &own, &mut slots)?;
                let mut sampled = Vec::new();
                let mut done = Vec::new();
                for p in &plan.seqs {
                    let gen = generated.get_mut(&p.id).unwrap();
                    sampled.push(p.samples.then(|| draw(p.id, gen.len())));
                    if let Some(t) = sampled.last().copied().flatten() {
                        gen.push(t);
                        if gen.len() == reqs[p.id as usize].3 || prompts[p.id as usize].len() + gen.len() == 48 {
                            done.push(p.id);
                        }
                    }
                }
                s.commit(&plan, &sampled).unwrap();
                for id in done {
                    s.finish(id).unwrap();
                }
                s.check_invariants();
            }
            for (id, r) in reqs.iter().enumerate() {
                let want: Vec<u32> = (0..r.3.min(48 - prompts[id].len())).map(|n| draw(id as u64, n)).collect();
                prop_assert_eq!(&generated[&(id as u64)], &want);
            }
            prop_assert_eq!(s.pool().num_used(), 0);
        }
    }
}
