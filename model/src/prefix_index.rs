//! The index of cached KV-cache blocks for prefix caching: which block holds the K/V of which
//! token prefix, so that a later request starting with the same tokens can reuse the block
//! instead of computing it again.
//!
//! A cached block is named by the prefix it ends: its own `block_size` tokens and the entry id
//! of the cached block before it in the sequence, its parent ([`ROOT`] for a sequence's first
//! block). Entry ids are handed out once and never again, so by induction from the root a pair
//! (parent, tokens) names one whole prefix exactly: equal tokens after different prefixes never
//! match, and a block whose parent entry was evicted can no longer be reached through it. A hash
//! of the pair only finds the candidates; a match compares the parent and every token, so a hash
//! collision costs one comparison, never a wrong block.
//!
//! Invariants, checked by [`PrefixIndex::check_invariants`]:
//! - each cached block is listed once, under its own hash, and every listed block is cached;
//! - no two cached blocks have the same (parent, tokens), so a lookup has at most one answer;
//! - entry ids are unique and below the next one to be handed out.
//!
//! The index knows nothing of references or free blocks: the [`crate::block_pool::BlockPool`]
//! owns it, and drops a block's entry when it evicts the block for new contents.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

/// The parent of a sequence's first block.
pub const ROOT: u64 = 0;

/// How a (parent, tokens) pair is hashed to find candidates.
pub type BlockHash = fn(parent: u64, tokens: &[u32]) -> u64;

/// SipHash with fixed keys: the same hashes in every process, so runs are reproducible.
fn sip_hash(parent: u64, tokens: &[u32]) -> u64 {
    let mut h = DefaultHasher::new();
    parent.hash(&mut h);
    tokens.hash(&mut h);
    h.finish()
}

#[derive(Clone, Debug)]
struct Entry {
    id: u64,
    parent: u64,
    hash: u64,
    tokens: Box<[u32]>,
}

/// Cached blocks by the prefix they end.
#[derive(Clone, Debug)]
pub struct PrefixIndex {
    /// Per block: its entry while cached.
    entries: Vec<Option<Entry>>,
    /// The cached blocks under each hash.
    by_hash: HashMap<u64, Vec<u32>>,
    num_cached: usize,
    next_id: u64,
    hash: BlockHash,
}

impl PrefixIndex {
    /// An empty index over `num_blocks` blocks.
    pub fn new(num_blocks: usize) -> Self {
        Self::with_hash(num_blocks, sip_hash)
    }

    /// An empty index hashing with `hash` (a test gives a weak one to force collisions).
    pub fn with_hash(num_blocks: usize, hash: BlockHash) -> Self {
        Self { entries: vec![None; num_blocks], by_hash: HashMap::new(), num_cached: 0, next_id: ROOT + 1, hash }
    }

    /// Blocks the index covers (the pool's size).
    pub fn num_blocks(&self) -> usize {
        self.entries.len()
    }

    /// Blocks cached now.
    pub fn num_cached(&self) -> usize {
        self.num_cached
    }

    /// Whether `block` is cached.
    pub fn is_cached(&self, block: u32) -> bool {
        self.entries.get(block as usize).is_some_and(Option::is_some)
    }

    /// The cached block holding `tokens` right after the prefix `parent`, and its entry id.
    pub fn find(&self, parent: u64, tokens: &[u32]) -> Option<(u32, u64)> {
        let candidates = self.by_hash.get(&(self.hash)(parent, tokens))?;
        candidates.iter().find_map(|&b| {
            let e = self.entries[b as usize].as_ref().expect("listed blocks are cached");
            (e.parent == parent && *e.tokens == *tokens).then_some((b, e.id))
        })
    }

    /// The entry id of the prefix `parent` then `tokens`: the cached block's if one holds it
    /// already (then `block` stays uncached), else a new one, under which `block` is cached.
    /// `block` must not be cached already.
    pub fn insert(&mut self, block: u32, parent: u64, tokens: &[u32]) -> u64 {
        debug_assert!(!self.is_cached(block), "block {block} is cached already");
        if let Some((_, id)) = self.find(parent, tokens) {
            return id;
        }
        let id = self.next_id;
        self.next_id += 1;
        let hash = (self.hash)(parent, tokens);
        self.entries[block as usize] = Some(Entry { id, parent, hash, tokens: tokens.into() });
        self.by_hash.entry(hash).or_default().push(block);
        self.num_cached += 1;
        id
    }

    /// Drops `block`'s entry (it is about to hold something else); false if it had none.
    pub fn remove(&mut self, block: u32) -> bool {
        let Some(e) = self.entries.get_mut(block as usize).and_then(Option::take) else { return false };
        let list = self.by_hash.get_mut(&e.hash).expect("a cached block is listed under its hash");
        list.retain(|&b| b != block);
        if list.is_empty() {
            self.by_hash.remove(&e.hash);
        }
        self.num_cached -= 1;
        true
    }

    /// `block`'s tokens, parent entry and own entry id while it is cached.
    pub fn contents(&self, block: u32) -> Option<(&[u32], u64, u64)> {
        self.entries.get(block as usize)?.as_ref().map(|e| (&*e.tokens, e.parent, e.id))
    }

    /// Panics, saying which invariant broke, if the index is inconsistent.
    pub fn check_invariants(&self) {
        let mut listed = vec![false; self.entries.len()];
        for (&hash, blocks) in &self.by_hash {
            assert!(!blocks.is_empty(), "hash {hash:#x} lists no block");
            for &b in blocks {
                let e = self.entries[b as usize].as_ref().unwrap_or_else(|| panic!("block {b} is listed, not cached"));
                assert_eq!(e.hash, hash, "block {b} is listed under another hash than its own");
                assert!(!listed[b as usize], "block {b} is listed twice");
                listed[b as usize] = true;
            }
        }
        let mut ids = std::collections::HashSet::new();
        let mut names = std::collections::HashSet::new();
        for (b, e) in self.entries.iter().enumerate() {
            let Some(e) = e else { continue };
            assert!(listed[b], "cached block {b} is not listed under its hash");
            assert!(e.id > ROOT && e.id < self.next_id, "block {b} has entry id {} of {}", e.id, self.next_id);
            assert!(e.parent < e.id, "block {b}'s parent entry {} is not older than its own {}", e.parent, e.id);
            assert!(ids.insert(e.id), "entry id {} is given twice", e.id);
            assert!(names.insert((e.parent, &e.tokens)), "two cached blocks end the same prefix (block {b})");
        }
        assert_eq!(ids.len(), self.num_cached, "num_cached is {}, {} blocks are cached", self.num_cached, ids.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_is_found_by_its_parent_and_tokens_only() {
        let mut idx = PrefixIndex::new(8);
        let a = idx.insert(3, ROOT, &[1, 2]);
        let b = idx.insert(5, a, &[3, 4]);
        assert_eq!(idx.find(ROOT, &[1, 2]), Some((3, a)));
        assert_eq!(idx.find(a, &[3, 4]), Some((5, b)));
        assert_eq!(idx.find(ROOT, &[3, 4]), None, "the same tokens after another prefix");
        assert_eq!(idx.find(b, &[3, 4]), None);
        assert_eq!(idx.insert(6, ROOT, &[1, 2]), a, "a second copy is not cached");
        assert!(!idx.is_cached(6));
        idx.check_invariants();
    }

    #[test]
    fn a_removed_parent_makes_its_children_unreachable_and_its_id_is_never_reused() {
        let mut idx = PrefixIndex::new(8);
        let a = idx.insert(0, ROOT, &[1, 2]);
        idx.insert(1, a, &[3, 4]);
        assert!(idx.remove(0));
        assert!(!idx.remove(0));
        let again = idx.insert(2, ROOT, &[1, 2]);
        assert_ne!(again, a);
        assert_eq!(idx.find(again, &[3, 4]), None, "block 1 hangs off the old entry");
        assert_eq!(idx.num_cached(), 2);
        idx.check_invariants();
    }

    #[test]
    fn colliding_hashes_never_give_a_wrong_block() {
        let mut idx = PrefixIndex::with_hash(16, |_, _| 7);
        let mut parent = ROOT;
        let mut chain = Vec::new();
        for b in 0..6u32 {
            parent = idx.insert(b, parent, &[b, b]);
            chain.push(parent);
        }
        // Every block shares one hash; only the exact (parent, tokens) is found.
        let mut parent = ROOT;
        for b in 0..6u32 {
            assert_eq!(idx.find(parent, &[b, b]), Some((b, chain[b as usize])));
            assert_eq!(idx.find(parent, &[b, b + 1]), None);
            assert_eq!(idx.find(parent + 100, &[b, b]), None);
            parent = chain[b as usize];
        }
        idx.remove(2);
        assert_eq!(idx.find(chain[1], &[2, 2]), None);
        assert_eq!(idx.find(chain[2], &[3, 3]), Some((3, chain[3])));
        idx.check_invariants();
    }
}
