//! Row metadata, the whole of fake decode: once per batch step `hp1_rows` gives every query
//! row its sequence (`row_seq`) and the number of keys it sees (`row_len = prefix_len +
//! local_pos + 1`), and every layer's attention reads only those two arrays and the block table.
//!
//! A decode batch is the special case `row_seq[r] = r`, `row_len[r] = seq_lens[r]`. Sequences
//! with no query rows (a bucket's padding) are skipped, rows past the last query get length 0
//! (and zeros out of the attention), and lengths are clamped to the block table's capacity.
//! [`row_metadata`] is the same computation on the host, by the same binary search, for tests.

use cudarc::driver::{CudaView, CudaViewMut, LaunchConfig};

use super::launch::{check_len, Hp1Attention};
use crate::error::Result;
use crate::runtime::{launch_error, Launch};

/// The device buffers of one `hp1_rows` launch.
pub struct RowOperands<'a> {
    /// `[num_seqs + 1]` cumulative query counts from 0, non-decreasing.
    pub query_start_loc: CudaView<'a, i32>,
    /// `[num_seqs]` tokens cached after this step.
    pub seq_lens: CudaView<'a, i32>,
    /// Sequences in the batch (under a graph: the captured count, padding sequences included).
    pub num_seqs: usize,
    /// `[rows]` out: each row's sequence.
    pub row_seq: CudaViewMut<'a, i32>,
    /// `[rows]` out: each row's key count.
    pub row_len: CudaViewMut<'a, i32>,
}

impl Hp1Attention {
    /// Builds the row metadata of a batch step on the device (launch only; call once per step,
    /// before the first layer's [`Hp1Attention::run`]).
    pub fn build_rows(&self, ops: RowOperands<'_>) -> Result<()> {
        let RowOperands { query_start_loc, seq_lens, num_seqs, mut row_seq, mut row_len } = ops;
        let plan = self.plan();
        let rows = plan.geometry.rows;
        const ENTRY: &str = "hp1_rows";
        check_len(ENTRY, "query_start_loc", query_start_loc.len(), num_seqs + 1)?;
        check_len(ENTRY, "seq_lens", seq_lens.len(), num_seqs)?;
        check_len(ENTRY, "row_seq", row_seq.len(), rows)?;
        check_len(ENTRY, "row_len", row_len.len(), rows)?;
        let (num_seqs, rows_i, capacity) = (num_seqs as i32, rows as i32, plan.geometry.capacity() as i32);
        let cfg =
            LaunchConfig { grid_dim: (plan.rows.grid, 1, 1), block_dim: (plan.rows.block, 1, 1), shared_mem_bytes: 0 };
        let mut launch = Launch::new(self.stream(), self.rows_function());
        launch
            .arg(&query_start_loc)
            .arg(&seq_lens)
            .arg(&num_seqs)
            .arg(&rows_i)
            .arg(&capacity)
            .arg(&mut row_seq)
            .arg(&mut row_len);
        // SAFETY: the argument list matches `hp1_rows`'s signature, and every buffer was checked
        // above to hold what the grid reads or writes.
        unsafe { launch.launch(cfg) }.map_err(launch_error(ENTRY, &cfg))?;
        Ok(())
    }
}

/// What `hp1_rows` writes, computed on the host: `(row_seq, row_len)` for `rows` rows.
/// `query_start_loc` must start at 0 and not decrease (as on the device, which is not checked).
pub fn row_metadata(query_start_loc: &[i32], seq_lens: &[i32], rows: usize, capacity: usize) -> (Vec<i32>, Vec<i32>) {
    let num_seqs = seq_lens.len().min(query_start_loc.len().saturating_sub(1));
    let mut row_seq = vec![0; rows];
    let mut row_len = vec![0; rows];
    for r in 0..rows {
        let (mut lo, mut hi) = (0usize, num_seqs);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if i64::from(query_start_loc[mid]) <= r as i64 {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        if lo < num_seqs {
            let len = i64::from(seq_lens[lo]) - i64::from(query_start_loc[lo + 1]) + r as i64 + 1;
            row_seq[r] = lo as i32;
            row_len[r] = len.clamp(0, capacity as i64) as i32;
        }
    }
    (row_seq, row_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decode_batch_maps_each_row_to_its_own_sequence() {
        let (seq, len) = row_metadata(&[0, 1, 2, 3], &[5, 1, 300], 3, 1024);
        assert_eq!(seq, vec![0, 1, 2]);
        assert_eq!(len, vec![5, 1, 300]);
    }

    #[test]
    fn prefill_rows_see_their_prefix_and_the_rows_before_them() {
        // A decode at 5, a chunked prefill of 3 rows after 2 cached tokens, a prefill of 2.
        let (seq, len) = row_metadata(&[0, 1, 4, 6], &[5, 5, 2], 6, 64);
        assert_eq!(seq, vec![0, 1, 1, 1, 2, 2]);
        assert_eq!(len, vec![5, 3, 4, 5, 1, 2]);
    }

    #[test]
    fn empty_sequences_are_skipped_and_padding_rows_are_empty() {
        // Sequence 1 has no query this step; rows 3..8 are the bucket's padding.
        let (seq, len) = row_metadata(&[0, 2, 2, 3], &[7, 9, 4], 8, 64);
        assert_eq!(seq, vec![0, 0, 2, 0, 0, 0, 0, 0]);
        assert_eq!(len, vec![6, 7, 4, 0, 0, 0, 0, 0]);
        // Leading and trailing empty sequences, as a padded graph batch has them.
        let (seq, len) = row_metadata(&[0, 0, 1, 1], &[0, 3, 0], 2, 64);
        assert_eq!((seq, len), (vec![1, 0], vec![3, 0]));
    }

    #[test]
    fn lengths_are_clamped_to_the_capacity() {
        let (_, len) = row_metadata(&[0, 1, 2], &[100, -5], 2, 32);
        assert_eq!(len, vec![32, 0]);
    }
}
