//! The pool of physical KV-cache blocks.
//!
//! The paged cache (SPEC section 2) is `num_blocks` blocks of `block_size` token slots; a
//! sequence owns an ordered list of blocks (its block-table row). This pool hands blocks out
//! and takes them back. There is no prefix sharing yet, so a block has at most one owner.
//!
//! Invariants, checked by [`BlockPool::check_invariants`] (property tests call it after every
//! operation):
//! - every block id in `0..num_blocks` is either on the free queue or marked in use, never both;
//! - the free queue holds no duplicates;
//! - `num_free() + num_used() == num_blocks`.
//!
//! Only the scheduler mutates the pool. Allocation is all-or-nothing, so a failed request
//! leaves the pool as it was. The free queue is FIFO, so the blocks a run gets depend only on
//! the order of earlier calls: the same requests give the same block tables.

use std::collections::VecDeque;

use crate::error::{Error, Result};

/// Physical KV-cache blocks: a FIFO free queue plus an in-use mark per block.
#[derive(Clone, Debug)]
pub struct BlockPool {
    free: VecDeque<u32>,
    in_use: Vec<bool>,
}

impl BlockPool {
    /// A pool with every one of `num_blocks` blocks free, handed out in id order at first.
    pub fn new(num_blocks: usize) -> Self {
        Self { free: (0..num_blocks as u32).collect(), in_use: vec![false; num_blocks] }
    }

    /// Blocks in the pool.
    pub fn num_blocks(&self) -> usize {
        self.in_use.len()
    }

    /// Blocks free now.
    pub fn num_free(&self) -> usize {
        self.free.len()
    }

    /// Blocks owned by some sequence now.
    pub fn num_used(&self) -> usize {
        self.num_blocks() - self.num_free()
    }

    /// Takes `n` blocks off the free queue, or none at all and an error when fewer are free.
    pub fn get_new_blocks(&mut self, n: usize) -> Result<Vec<u32>> {
        if n > self.free.len() {
            return Err(Error::OutOfBlocks { requested: n, free: self.free.len(), total: self.num_blocks() });
        }
        let blocks: Vec<u32> = self.free.drain(..n).collect();
        for &b in &blocks {
            self.in_use[b as usize] = true;
        }
        Ok(blocks)
    }

    /// Returns `blocks` to the free queue, in order. Refuses, changing nothing, if any id is out
    /// of range, already free, or repeated.
    pub fn free_blocks(&mut self, blocks: &[u32]) -> Result<()> {
        let mut seen = vec![false; self.num_blocks()];
        for &b in blocks {
            let i = b as usize;
            if i >= self.num_blocks() || !self.in_use[i] || seen[i] {
                return Err(Error::BadBlockFree { block: b, total: self.num_blocks() });
            }
            seen[i] = true;
        }
        for &b in blocks {
            self.in_use[b as usize] = false;
            self.free.push_back(b);
        }
        Ok(())
    }

    /// Panics, saying which invariant broke, if the pool's state is inconsistent.
    pub fn check_invariants(&self) {
        let mut on_queue = vec![false; self.num_blocks()];
        for &b in &self.free {
            let i = b as usize;
            assert!(i < self.num_blocks(), "free queue holds block {b}, pool has {}", self.num_blocks());
            assert!(!on_queue[i], "block {b} is on the free queue twice");
            assert!(!self.in_use[i], "block {b} is both free and in use");
            on_queue[i] = true;
        }
        let used = self.in_use.iter().filter(|&&u| u).count();
        assert_eq!(used + self.free.len(), self.num_blocks(), "blocks lost: {used} used + {} free", self.free.len());
    }
}

/// Blocks needed to hold `tokens` tokens.
pub fn blocks_for(tokens: usize, block_size: usize) -> usize {
    tokens.div_ceil(block_size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn allocation_is_all_or_nothing() {
        let mut pool = BlockPool::new(4);
        let a = pool.get_new_blocks(3).unwrap();
        assert_eq!(a, vec![0, 1, 2]);
        let err = pool.get_new_blocks(2).unwrap_err();
        assert!(err.to_string().contains("requested 2"), "{err}");
        assert_eq!(pool.num_free(), 1);
        pool.check_invariants();
    }

    #[test]
    fn bad_frees_change_nothing() {
        let mut pool = BlockPool::new(4);
        let a = pool.get_new_blocks(2).unwrap();
        assert!(pool.free_blocks(&[a[0], a[0]]).is_err());
        assert!(pool.free_blocks(&[a[0], 3]).is_err());
        assert!(pool.free_blocks(&[9]).is_err());
        assert_eq!(pool.num_used(), 2);
        pool.free_blocks(&a).unwrap();
        assert_eq!(pool.num_free(), 4);
        pool.check_invariants();
    }

    #[derive(Clone, Debug)]
    enum Op {
        Get(usize),
        Free(usize),
    }

    proptest! {
        #[test]
        fn random_get_and_free_keep_the_invariants(
            num_blocks in 1usize..64,
            ops in prop::collection::vec(prop_oneof![(0usize..20).prop_map(Op::Get), (0usize..8).prop_map(Op::Free)], 1..100),
        ) {
            let mut pool = BlockPool::new(num_blocks);
            let mut owned: Vec<Vec<u32>> = Vec::new();
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
                    Op::Free(_) => {}
                }
                pool.check_invariants();
                let held: usize = owned.iter().map(Vec::len).sum();
                prop_assert_eq!(held, pool.num_used());
            }
        }
    }
}
