//! Batch metadata over the paged KV cache (SPEC section 2, "Paged KV cache").
//!
//! A batch is a list of sequences. Sequence `s` owns the query rows
//! `query_start_loc[s]..query_start_loc[s + 1]` of `q`, has `seq_lens[s]` tokens in the cache
//! after this step (its new tokens included), and finds its token `t` in physical block
//! `block_table[s][t / block_size]` at offset `t % block_size`. Its last `query_len` cached
//! tokens are the queries, so query row `j` sits at absolute position `prefix_len + j` with
//! `prefix_len = seq_len - query_len`. Decode is the case `query_len == 1`.

use ndarray::Array2;
use serde::{Deserialize, Serialize};

use crate::error::{invalid, Result};

/// Per-batch metadata, exactly the integer inputs a GPU attention kernel takes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttnMetadata {
    /// `[num_seqs, max_blocks_per_seq]` physical block numbers, in any order; entries past a
    /// sequence's last block are ignored.
    pub block_table: Array2<i32>,
    /// `[num_seqs]` cached tokens per sequence after this step.
    pub seq_lens: Vec<i32>,
    /// `[num_seqs + 1]` cumulative query counts, starting at 0.
    pub query_start_loc: Vec<i32>,
}

/// One query row of the batch: which `q` row, which sequence, which absolute position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryRow {
    /// Row index into `q` and the output.
    pub token: usize,
    /// Sequence index into the metadata.
    pub seq: usize,
    /// Absolute position of the query; it attends to keys `0..=pos`.
    pub pos: usize,
}

impl AttnMetadata {
    /// Metadata for a decode step: one query per sequence.
    pub fn decode(block_table: Array2<i32>, seq_lens: Vec<i32>) -> Self {
        let query_start_loc = (0..=seq_lens.len() as i32).collect();
        Self { block_table, seq_lens, query_start_loc }
    }

    /// Number of sequences in the batch.
    pub fn num_seqs(&self) -> usize {
        self.seq_lens.len()
    }

    /// Total query rows in the batch.
    pub fn num_tokens(&self) -> usize {
        self.query_start_loc.last().copied().unwrap_or(0).max(0) as usize
    }

    /// Query rows of sequence `seq`.
    pub fn query_len(&self, seq: usize) -> usize {
        (self.query_start_loc[seq + 1] - self.query_start_loc[seq]) as usize
    }

    /// Tokens cached before this step's queries.
    pub fn prefix_len(&self, seq: usize) -> usize {
        self.seq_lens[seq] as usize - self.query_len(seq)
    }

    /// Every query row of the batch, in `q` order.
    pub fn rows(&self) -> Vec<QueryRow> {
        let mut rows = Vec::with_capacity(self.num_tokens());
        for seq in 0..self.num_seqs() {
            let start = self.query_start_loc[seq] as usize;
            let prefix = self.prefix_len(seq);
            for j in 0..self.query_len(seq) {
                rows.push(QueryRow { token: start + j, seq, pos: prefix + j });
            }
        }
        rows
    }

    /// The physical `(block, offset)` of token `t` of sequence `seq`.
    pub fn slot(&self, seq: usize, t: usize, block_size: usize) -> (usize, usize) {
        (self.block_table[[seq, t / block_size]] as usize, t % block_size)
    }

    /// Checks that the three parts agree on the number of sequences: a block-table row and a
    /// length per sequence, and `query_start_loc` one entry more, from 0. Constant time, for the
    /// paths that index the parts by sequence without [`AttnMetadata::validate`]'s walk.
    pub fn check_shape(&self) -> Result<()> {
        let n = self.seq_lens.len();
        if self.block_table.nrows() != n {
            return invalid("block_table", format!("has {} rows for {} sequences", self.block_table.nrows(), n));
        }
        if self.query_start_loc.len() != n + 1 || self.query_start_loc[0] != 0 {
            return invalid(
                "query_start_loc",
                format!("must have {} entries starting at 0, got {:?}", n + 1, self.query_start_loc),
            );
        }
        Ok(())
    }

    /// Checks every rule a kernel relies on, against a cache of `num_blocks` blocks of
    /// `block_size` tokens and a `q` of `num_tokens` rows.
    pub fn validate(&self, num_blocks: usize, block_size: usize, num_tokens: usize) -> Result<()> {
        self.check_shape()?;
        let n = self.seq_lens.len();
        if self.num_tokens() != num_tokens {
            return invalid("query_start_loc", format!("ends at {} but q has {} rows", self.num_tokens(), num_tokens));
        }
        for s in 0..n {
            let ql = self.query_start_loc[s + 1] - self.query_start_loc[s];
            let len = self.seq_lens[s];
            if ql < 0 || len < ql {
                return invalid("seq_lens", format!("sequence {s}: seq_len {len} is below its query_len {ql}"));
            }
            let need = (len as usize).div_ceil(block_size);
            if need > self.block_table.ncols() {
                return invalid(
                    "block_table",
                    format!(
                        "sequence {s} needs {need} blocks for {len} tokens, the table holds {}",
                        self.block_table.ncols()
                    ),
                );
            }
            for b in 0..need {
                let id = self.block_table[[s, b]];
                if id < 0 || id as usize >= num_blocks {
                    return invalid(
                        "block_table",
                        format!("sequence {s} entry {b} is block {id}, the cache has {num_blocks}"),
                    );
                }
            }
        }
        Ok(())
    }
}
