//! The pool of physical KV-cache blocks, shared between sequences by prefix caching.
//!
//! The paged cache (SPEC section 2) is `num_blocks` blocks of `block_size` token slots; a
//! sequence owns an ordered list of blocks (its block-table row). This pool hands blocks out,
//! counts the sequences holding each one, and takes them back. A block full of prompt tokens can
//! be cached (named in the pool's [`PrefixIndex`] by the prefix it ends); a cached block is
//! read-only, may be held by several sequences at once, and stays cached after the last of them
//! lets it go, so that a later request with the same prefix can take it again
//! ([`BlockPool::share`]). The scheduler decides which blocks to cache and when they may be
//! shared ([`crate::scheduler::prefix`] states the rule).
//!
//! An unreferenced block is free: either uncached, on the free queue, or cached, on the
//! evictable queue, whose order is least recently released first. [`BlockPool::get_new_blocks`]
//! takes uncached blocks first (FIFO), then evicts cached ones, least recently released first,
//! dropping their index entries. A sequence's blocks are released last block first, so that the
//! head of a prefix, which every longer prefix needs, is evicted last.
//!
//! Invariants, checked by [`BlockPool::check_invariants`] (property tests call it after every
//! operation):
//! - every block id in `0..num_blocks` is exactly one of: referenced (held by at least one
//!   sequence), on the free queue, or on the evictable queue;
//! - the free queue holds no duplicates and no cached block; the evictable queue holds only
//!   cached blocks, each once, under the stamp it was released with;
//! - `num_free() + num_used() == num_blocks`, where the evictable blocks count as free;
//! - the index's own invariants ([`PrefixIndex::check_invariants`]).
//!
//! Only the scheduler mutates the pool. Allocation is all-or-nothing, so a failed request
//! leaves the pool as it was. Every choice depends only on the order of earlier calls, so the
//! same requests give the same block tables.

use std::collections::{BTreeMap, VecDeque};

use crate::error::{Error, Result};
use crate::prefix_index::PrefixIndex;

/// Tokens the KV cache holds: `num_blocks` blocks of `block_size` token slots. The executor
/// reports it ([`crate::executor::StepExecutor::kv_capacity`]) and the scheduler sizes its pool
/// from it; it lives here, beside the pool, so neither of those modules imports the other for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvCapacity {
    /// Blocks in the cache.
    pub num_blocks: usize,
    /// Token slots per block.
    pub block_size: usize,
}

/// Physical KV-cache blocks: reference counts, the free and evictable queues, and the index of
/// cached blocks.
#[derive(Clone, Debug)]
pub struct BlockPool {
    /// Per block: the sequences holding it.
    ref_count: Vec<u32>,
    /// Unreferenced uncached blocks, handed out first, oldest first.
    free: VecDeque<u32>,
    /// Unreferenced cached blocks by release stamp: the first is evicted first.
    evictable: BTreeMap<u64, u32>,
    /// Per block: its key in `evictable` while it is there.
    released_at: Vec<u64>,
    next_stamp: u64,
    index: PrefixIndex,
}

impl BlockPool {
    /// A pool with every one of `num_blocks` blocks of `block_size` tokens free, handed out in id
    /// order at first.
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        Self::with_index(PrefixIndex::new(num_blocks, block_size))
    }

    /// A pool over an empty `index` of its size (a test passes one with a weak hash).
    pub fn with_index(index: PrefixIndex) -> Self {
        let num_blocks = index.num_blocks();
        Self {
            ref_count: vec![0; num_blocks],
            free: (0..num_blocks as u32).collect(),
            evictable: BTreeMap::new(),
            released_at: vec![0; num_blocks],
            next_stamp: 0,
            index,
        }
    }

    /// Blocks in the pool.
    pub fn num_blocks(&self) -> usize {
        self.ref_count.len()
    }

    /// Tokens a block holds.
    pub fn block_size(&self) -> usize {
        self.index.block_size()
    }

    /// Blocks free now: uncached, or cached and held by no sequence (evicted when needed).
    pub fn num_free(&self) -> usize {
        self.free.len() + self.evictable.len()
    }

    /// Blocks held by some sequence now.
    pub fn num_used(&self) -> usize {
        self.num_blocks() - self.num_free()
    }

    /// Blocks cached now, held or not.
    pub fn num_cached(&self) -> usize {
        self.index.num_cached()
    }

    /// Sequences holding `block`.
    pub fn ref_count(&self, block: u32) -> u32 {
        self.ref_count.get(block as usize).copied().unwrap_or(0)
    }

    /// The index of cached blocks.
    pub fn index(&self) -> &PrefixIndex {
        &self.index
    }

    /// Takes `n` free blocks, or none at all and an error when fewer are free: uncached ones
    /// first, then cached ones evicted least recently released first.
    pub fn get_new_blocks(&mut self, n: usize) -> Result<Vec<u32>> {
        if n > self.num_free() {
            return Err(Error::OutOfBlocks { requested: n, free: self.num_free(), total: self.num_blocks() });
        }
        let uncached = n.min(self.free.len());
        let mut blocks: Vec<u32> = self.free.drain(..uncached).collect();
        while blocks.len() < n {
            let (_, b) = self.evictable.pop_first().expect("counted above");
            self.index.remove(b);
            blocks.push(b);
        }
        for &b in &blocks {
            self.ref_count[b as usize] = 1;
        }
        Ok(blocks)
    }

    /// One more sequence holds each of `blocks`, which must be cached (only cached blocks are
    /// shared); an unreferenced one leaves the evictable queue. Refuses, changing nothing, an id
    /// out of range, uncached, or repeated.
    pub fn share(&mut self, blocks: &[u32]) -> Result<()> {
        let mut seen = vec![false; self.num_blocks()];
        for &b in blocks {
            let i = b as usize;
            if i >= self.num_blocks() || !self.index.is_cached(b) || seen[i] {
                return Err(Error::Scheduler(format!(
                    "block {b} cannot be shared: only cached blocks can, each once (pool of {})",
                    self.num_blocks()
                )));
            }
            seen[i] = true;
        }
        for &b in blocks {
            if self.ref_count[b as usize] == 0 {
                self.evictable.remove(&self.released_at[b as usize]);
            }
            self.ref_count[b as usize] += 1;
        }
        Ok(())
    }

    /// Caches `block`, which holds `tokens` right after the cached prefix `parent` and is held
    /// by the caller; returns the entry id of that prefix (another block's when one already
    /// holds it, and then `block` stays uncached). Refuses a block that is not held, and tokens
    /// that are not a whole block.
    pub fn cache(&mut self, block: u32, parent: u64, tokens: &[u32]) -> Result<u64> {
        if self.ref_count(block) == 0 {
            return Err(Error::Scheduler(format!("block {block} is cached by a sequence that does not hold it")));
        }
        if self.index.is_cached(block) {
            return Err(Error::Scheduler(format!("block {block} is cached already")));
        }
        if tokens.len() != self.index.block_size() {
            let (got, want) = (tokens.len(), self.index.block_size());
            return Err(Error::Scheduler(format!("block {block} is cached with {got} tokens, not a block of {want}")));
        }
        Ok(self.index.insert(block, parent, tokens))
    }

    /// The cached blocks that hold `blocks` (consecutive token blocks of one sequence from its
    /// start), as far as they are all cached in order: each block's id and entry id.
    pub fn cached_prefix<'a>(&self, blocks: impl Iterator<Item = &'a [u32]>) -> Vec<(u32, u64)> {
        let mut parent = crate::prefix_index::ROOT;
        let mut found = Vec::new();
        for tokens in blocks {
            let Some((b, id)) = self.index.find(parent, tokens) else { break };
            found.push((b, id));
            parent = id;
        }
        found
    }

    /// One sequence lets go of each of `blocks` (its blocks, in order); a block no one holds
    /// any more becomes free, on the evictable queue if cached, released last block first.
    /// Refuses, changing nothing, if any id is out of range, held by no one, or repeated.
    pub fn free_blocks(&mut self, blocks: &[u32]) -> Result<()> {
        let mut seen = vec![false; self.num_blocks()];
        for &b in blocks {
            let i = b as usize;
            if i >= self.num_blocks() || self.ref_count[i] == 0 || seen[i] {
                return Err(Error::BadBlockFree { block: b, total: self.num_blocks() });
            }
            seen[i] = true;
        }
        for &b in blocks.iter().rev() {
            let i = b as usize;
            self.ref_count[i] -= 1;
            if self.ref_count[i] > 0 {
                continue;
            }
            if self.index.is_cached(b) {
                self.released_at[i] = self.next_stamp;
                self.evictable.insert(self.next_stamp, b);
                self.next_stamp += 1;
            } else {
                self.free.push_back(b);
            }
        }
        Ok(())
    }

    /// Panics, saying which invariant broke, if the pool's state is inconsistent.
    pub fn check_invariants(&self) {
        let n = self.num_blocks();
        let mut place = vec![None; n];
        for &b in &self.free {
            let i = b as usize;
            assert!(i < n, "free queue holds block {b}, pool has {n}");
            assert!(place[i].is_none(), "block {b} is on the free queue twice");
            assert!(!self.index.is_cached(b), "block {b} is on the free queue but cached");
            place[i] = Some("free");
        }
        for (&stamp, &b) in &self.evictable {
            let i = b as usize;
            assert!(i < n, "evictable queue holds block {b}, pool has {n}");
            assert!(place[i].is_none(), "block {b} is on the evictable queue and the {}", place[i].unwrap());
            assert!(self.index.is_cached(b), "block {b} is evictable but not cached");
            assert_eq!(self.released_at[i], stamp, "block {b} is evictable under another stamp than its own");
            assert!(stamp < self.next_stamp, "block {b}'s stamp {stamp} is not yet handed out");
            place[i] = Some("evictable");
        }
        for (i, &refs) in self.ref_count.iter().enumerate() {
            match (refs, place[i]) {
                (0, None) => panic!("block {i} is held by no one and on no queue: lost"),
                (1.., Some(q)) => panic!("block {i} is held by {refs} sequences and on the {q} queue"),
                _ => {}
            }
        }
        let used = self.ref_count.iter().filter(|&&r| r > 0).count();
        assert_eq!(used + self.num_free(), n, "blocks lost: {used} used + {} free", self.num_free());
        self.index.check_invariants();
    }
}

/// Blocks needed to hold `tokens` tokens.
pub fn blocks_for(tokens: usize, block_size: usize) -> usize {
    tokens.div_ceil(block_size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prefix_index::ROOT;
    use proptest::prelude::*;

    #[test]
    fn allocation_is_all_or_nothing() {
        let mut pool = BlockPool::new(4, 2);
        let a = pool.get_new_blocks(3).unwrap();
        assert_eq!(a, vec![0, 1, 2]);
        let err = pool.get_new_blocks(2).unwrap_err();
        assert!(err.to_string().contains("requested 2"), "{err}");
        assert_eq!(pool.num_free(), 1);
        pool.check_invariants();
    }

    #[test]
    fn bad_frees_change_nothing() {
        let mut pool = BlockPool::new(4, 2);
        let a = pool.get_new_blocks(2).unwrap();
        assert!(pool.free_blocks(&[a[0], a[0]]).is_err());
        assert!(pool.free_blocks(&[a[0], 3]).is_err());
        assert!(pool.free_blocks(&[9]).is_err());
        assert_eq!(pool.num_used(), 2);
        pool.free_blocks(&a).unwrap();
        assert_eq!(pool.num_free(), 4);
        pool.check_invariants();
    }

    #[test]
    fn a_shared_block_is_free_once_its_last_holder_lets_go() {
        let mut pool = BlockPool::new(4, 2);
        let a = pool.get_new_blocks(2).unwrap();
        assert!(pool.share(&[a[0]]).is_err(), "an uncached block is never shared");
        let e = pool.cache(a[0], ROOT, &[1, 2]).unwrap();
        assert!(pool.cache(a[0], ROOT, &[1, 2]).is_err());
        assert!(pool.cache(3, ROOT, &[5, 6]).is_err(), "block 3 is held by no one");
        let err = pool.cache(a[1], ROOT, &[5, 6, 7]).unwrap_err().to_string();
        assert!(err.contains("3 tokens, not a block of 2"), "{err}");
        pool.share(&[a[0]]).unwrap();
        assert_eq!(pool.ref_count(a[0]), 2);
        pool.free_blocks(&a).unwrap();
        assert_eq!((pool.num_used(), pool.ref_count(a[0])), (1, 1));
        pool.free_blocks(&[a[0]]).unwrap();
        assert_eq!((pool.num_free(), pool.num_cached()), (4, 1), "free, and still cached");
        assert_eq!(pool.cached_prefix([&[1u32, 2][..], &[3, 4]].into_iter()), vec![(a[0], e)]);
        pool.share(&[a[0]]).unwrap();
        assert_eq!(pool.num_used(), 1, "taken back off the evictable queue");
        pool.check_invariants();
    }

    #[test]
    fn uncached_blocks_go_first_then_cached_ones_least_recently_released_first() {
        let mut pool = BlockPool::new(6, 1);
        let a = pool.get_new_blocks(3).unwrap();
        let b = pool.get_new_blocks(2).unwrap();
        let mut parent = ROOT;
        for (i, &blk) in a.iter().enumerate() {
            parent = pool.cache(blk, parent, &[i as u32]).unwrap();
        }
        pool.cache(b[0], ROOT, &[9]).unwrap();
        pool.free_blocks(&a).unwrap();
        pool.free_blocks(&b).unwrap();
        // Free now: block 5 (never used), b[1] (uncached), then a's blocks last first, then b[0].
        assert_eq!(pool.get_new_blocks(2).unwrap(), vec![5, b[1]]);
        assert_eq!(pool.get_new_blocks(1).unwrap(), vec![a[2]]);
        assert_eq!(pool.num_cached(), 3, "one evicted");
        assert_eq!(pool.cached_prefix([&[0u32][..], &[1], &[2]].into_iter()).len(), 2);
        assert_eq!(pool.get_new_blocks(3).unwrap(), vec![a[1], a[0], b[0]]);
        assert_eq!(pool.num_cached(), 0);
        pool.check_invariants();
    }

    #[derive(Clone, Debug)]
    enum Op {
        Get(usize),
        Free(usize),
        Cache(usize),
        Share(usize),
    }

    proptest! {
        /// Getting, freeing, caching and sharing in any order keep the invariants, and every
        /// block's reference count is the number of holders the test counts.
        #[test]
        fn random_operations_keep_the_invariants(
            num_blocks in 1usize..48,
            ops in prop::collection::vec(prop_oneof![
                (0usize..12).prop_map(Op::Get),
                (0usize..8).prop_map(Op::Free),
                (0usize..8).prop_map(Op::Cache),
                (0usize..8).prop_map(Op::Share),
            ], 1..120),
        ) {
            let mut pool = BlockPool::with_index(PrefixIndex::with_hash(num_blocks, 1, |_, t| u64::from(t[0] % 3)));
            let mut owned: Vec<Vec<u32>> = Vec::new();
            let mut next_token = 0u32;
            for op in ops {
                match op {
                    Op::Get(n) => {
                        let before = pool.num_free();
                        match pool.get_new_blocks(n) {
                            Ok(b) => { prop_assert_eq!(b.len(), n); owned.push(b); }
                            Err(_) => prop_assert!(n > before && pool.num_free() == before),
                        }
                    }
                    Op::Free(i) if !owned.is_empty() => {
                        let b = owned.remove(i % owned.len());
                        pool.free_blocks(&b).unwrap();
                    }
                    Op::Cache(i) if !owned.is_empty() => {
                        let held = &owned[i % owned.len()];
                        if let Some(&b) = held.iter().find(|&&b| !pool.index().is_cached(b)) {
                            next_token += 1;
                            pool.cache(b, ROOT, &[next_token]).unwrap();
                        }
                    }
                    Op::Share(i) => {
                        let cached: Vec<u32> =
                            (0..num_blocks as u32).filter(|&b| pool.index().is_cached(b)).collect();
                        if !cached.is_empty() {
                            let b = cached[i % cached.len()];
                            pool.share(&[b]).unwrap();
                            owned.push(vec![b]);
                        }
                    }
                    Op::Free(_) | Op::Cache(_) => {}
                }
                pool.check_invariants();
                for b in 0..num_blocks as u32 {
                    let holders = owned.iter().filter(|o| o.contains(&b)).count();
                    prop_assert_eq!(pool.ref_count(b) as usize, holders, "block {}", b);
                }
            }
        }
    }
}
