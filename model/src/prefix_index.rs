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
//!
//! A prefill step caches every block it completes (1,024 of them in a 16K-token step), so an
//! insert allocates nothing of its own: a block's tokens live in one array of `block_size`
//! tokens a block, and the blocks under one hash form a chain through their entries, the map
//! holding only the first. The map's keys are hashes already, so it uses them as they are.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, DefaultHasher, Hash, Hasher};

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

/// The end of a chain of blocks under one hash.
const NONE: u32 = u32::MAX;

/// Hashes a key that is a block hash already: to its own value.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    id: u64,
    parent: u64,
    hash: u64,
    /// The next cached block under the same hash, or [`NONE`].
    next: u32,
}

/// Cached blocks by the prefix they end.
#[derive(Clone, Debug)]
pub struct PrefixIndex {
    /// Per block: its entry while cached.
    entries: Vec<Option<Entry>>,
    /// Per block, `block_size` tokens: those it holds while cached (up to the highest block
    /// cached so far).
    tokens: Vec<u32>,
    block_size: usize,
    /// The first cached block under each hash.
    by_hash: HashMap<u64, u32, BuildHasherDefault<KeyHasher>>,
    num_cached: usize,
    next_id: u64,
    hash: BlockHash,
}

impl PrefixIndex {
    /// An empty index over `num_blocks` blocks of `block_size` tokens.
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        Self::with_hash(num_blocks, block_size, sip_hash)
    }

    /// An empty index hashing with `hash` (a test gives a weak one to force collisions).
    pub fn with_hash(num_blocks: usize, block_size: usize, hash: BlockHash) -> Self {
        Self {
            entries: vec![None; num_blocks],
            tokens: Vec::new(),
            block_size,
            by_hash: HashMap::default(),
            num_cached: 0,
            next_id: ROOT + 1,
            hash,
        }
    }

    /// Blocks the index covers (the pool's size).
    pub fn num_blocks(&self) -> usize {
        self.entries.len()
    }

    /// Tokens a block holds.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks cached now.
    pub fn num_cached(&self) -> usize {
        self.num_cached
    }

    /// Whether `block` is cached.
    pub fn is_cached(&self, block: u32) -> bool {
        self.entries.get(block as usize).is_some_and(Option::is_some)
    }

    fn tokens_of(&self, block: u32) -> &[u32] {
        &self.tokens[block as usize * self.block_size..][..self.block_size]
    }

    /// The cached blocks under `hash`, newest first, with their entries.
    fn chain(&self, hash: u64) -> impl Iterator<Item = (u32, &Entry)> + '_ {
        let mut b = self.by_hash.get(&hash).copied().unwrap_or(NONE);
        std::iter::from_fn(move || {
            let here = b;
            (here != NONE).then(|| {
                let e = self.entries[here as usize]
                    .as_ref()
                    .unwrap_or_else(|| panic!("block {here} is listed, not cached"));
                b = e.next;
                (here, e)
            })
        })
    }

    /// The cached block holding `tokens` right after the prefix `parent`, and its entry id; none
    /// for tokens that are not a whole block.
    pub fn find(&self, parent: u64, tokens: &[u32]) -> Option<(u32, u64)> {
        self.find_hashed((self.hash)(parent, tokens), parent, tokens)
    }

    fn find_hashed(&self, hash: u64, parent: u64, tokens: &[u32]) -> Option<(u32, u64)> {
        self.chain(hash).find(|&(b, e)| e.parent == parent && self.tokens_of(b) == tokens).map(|(b, e)| (b, e.id))
    }

    /// The entry id of the prefix `parent` then `tokens`: the cached block's if one holds it
    /// already (then `block` stays uncached), else a new one, under which `block` is cached.
    /// `block` must not be cached already, and `tokens` must be a whole block (the pool checks
    /// both).
    pub fn insert(&mut self, block: u32, parent: u64, tokens: &[u32]) -> u64 {
        debug_assert!(!self.is_cached(block), "block {block} is cached already");
        assert_eq!(tokens.len(), self.block_size, "a cached block holds a whole block of tokens");
        let hash = (self.hash)(parent, tokens);
        if let Some((_, id)) = self.find_hashed(hash, parent, tokens) {
            return id;
        }
        let id = self.next_id;
        self.next_id += 1;
        let next = self.by_hash.insert(hash, block).unwrap_or(NONE);
        self.entries[block as usize] = Some(Entry { id, parent, hash, next });
        // The array grows to the highest block cached (the pool hands blocks out in id order at
        // first), not to the pool's size: a small model's pool can hold millions of blocks.
        let at = block as usize * self.block_size;
        if self.tokens.len() < at + self.block_size {
            self.tokens.resize(at + self.block_size, 0);
        }
        self.tokens[at..at + self.block_size].copy_from_slice(tokens);
        self.num_cached += 1;
        id
    }

    /// Drops `block`'s entry (it is about to hold something else); false if it had none.
    pub fn remove(&mut self, block: u32) -> bool {
        let Some(e) = self.entries.get_mut(block as usize).and_then(Option::take) else { return false };
        let head = self.by_hash.get_mut(&e.hash).expect("a cached block is chained under its hash");
        if *head != block {
            let before = self.chain(e.hash).find(|&(_, x)| x.next == block).map(|(b, _)| b);
            let before = before.unwrap_or_else(|| panic!("block {block} is missing from its hash's chain"));
            self.entries[before as usize].as_mut().expect("chained blocks are cached").next = e.next;
        } else if e.next == NONE {
            self.by_hash.remove(&e.hash);
        } else {
            *head = e.next;
        }
        self.num_cached -= 1;
        true
    }

    /// `block`'s tokens, parent entry and own entry id while it is cached.
    pub fn contents(&self, block: u32) -> Option<(&[u32], u64, u64)> {
        let e = self.entries.get(block as usize)?.as_ref()?;
        Some((self.tokens_of(block), e.parent, e.id))
    }

    /// Panics, saying which invariant broke, if the index is inconsistent.
    pub fn check_invariants(&self) {
        let mut listed = vec![false; self.entries.len()];
        for (&hash, &head) in &self.by_hash {
            assert_ne!(head, NONE, "hash {hash:#x} lists no block");
            for (b, e) in self.chain(hash) {
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
            let tokens = self.tokens_of(b as u32);
            assert!(names.insert((e.parent, tokens)), "two cached blocks end the same prefix (block {b})");
        }
        assert_eq!(ids.len(), self.num_cached, "num_cached is {}, {} blocks are cached", self.num_cached, ids.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{HashMap, HashSet};

    #[test]
    fn a_prefix_is_found_by_its_parent_and_tokens_only() {
        let mut idx = PrefixIndex::new(8, 2);
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
        let mut idx = PrefixIndex::new(8, 2);
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
        let mut idx = PrefixIndex::with_hash(16, 2, |_, _| 7);
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
        // From the middle of the chain, its head (the newest) and its tail (the oldest).
        for (gone, b) in [(2u32, 3u32), (5, 4), (0, 1)] {
            assert!(idx.remove(gone));
            idx.check_invariants();
            assert_eq!(idx.find(if gone == 0 { ROOT } else { chain[gone as usize - 1] }, &[gone, gone]), None);
            assert_eq!(idx.find(chain[b as usize - 1], &[b, b]), Some((b, chain[b as usize])));
        }
        assert_eq!(idx.num_cached(), 3);
    }

    /// One step of the model-based test: cache a free block under a known prefix (or the root),
    /// or drop a block's entry.
    #[derive(Clone, Debug)]
    enum Step {
        Insert { block: u32, parent: usize, tokens: [u32; 2] },
        Remove { block: u32 },
    }

    proptest! {
        /// Inserts and removes in any order, under a hash that puts every block in one of three
        /// chains: the index answers every lookup as a plain map of (parent, tokens) to block
        /// does, keeps its invariants, and hands out each entry id once.
        #[test]
        fn chained_blocks_answer_as_a_plain_map_does(
            steps in prop::collection::vec(prop_oneof![
                (0u32..12, 0usize..8, 0u32..3, 0u32..3)
                    .prop_map(|(block, parent, a, b)| Step::Insert { block, parent, tokens: [a, b] }),
                (0u32..12).prop_map(|block| Step::Remove { block }),
            ], 1..80),
        ) {
            let mut idx = PrefixIndex::with_hash(12, 2, |p, t| (p + u64::from(t[0])) % 3);
            // The model: (parent, tokens) -> (block, id) of the cached blocks, and each block's key.
            let mut map: HashMap<(u64, [u32; 2]), (u32, u64)> = HashMap::new();
            let mut key_of: HashMap<u32, (u64, [u32; 2])> = HashMap::new();
            let mut ids = vec![ROOT];
            let mut given = HashSet::new();
            for step in steps {
                match step {
                    Step::Insert { block, parent, tokens } => {
                        if key_of.contains_key(&block) {
                            continue;
                        }
                        let parent = ids[parent % ids.len()];
                        let id = idx.insert(block, parent, &tokens);
                        match map.get(&(parent, tokens)) {
                            Some(&(_, old)) => {
                                prop_assert_eq!(id, old);
                                prop_assert!(!idx.is_cached(block));
                            }
                            None => {
                                prop_assert!(given.insert(id), "entry id {} handed out twice", id);
                                map.insert((parent, tokens), (block, id));
                                key_of.insert(block, (parent, tokens));
                                ids.push(id);
                            }
                        }
                    }
                    Step::Remove { block } => {
                        let had = key_of.remove(&block);
                        prop_assert_eq!(idx.remove(block), had.is_some());
                        if let Some(key) = had {
                            map.remove(&key);
                        }
                    }
                }
                idx.check_invariants();
                prop_assert_eq!(idx.num_cached(), map.len());
                for &parent in &ids {
                    for a in 0..3 {
                        for b in 0..3 {
                            prop_assert_eq!(idx.find(parent, &[a, b]), map.get(&(parent, [a, b])).copied());
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn tokens_of_another_length_than_a_block_are_never_found() {
        let mut idx = PrefixIndex::new(4, 2);
        let a = idx.insert(1, ROOT, &[1, 2]);
        assert_eq!(idx.find(ROOT, &[1, 2]), Some((1, a)));
        assert_eq!(idx.find(ROOT, &[1]), None);
        assert_eq!(idx.find(ROOT, &[1, 2, 3]), None);
        assert_eq!(idx.contents(1), Some((&[1u32, 2][..], ROOT, a)));
    }
}
