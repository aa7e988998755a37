// hp1_rows.cu: per-row metadata of one batch step, shared by every layer's HP1 attention.
//
// Algorithm (SPEC section 2, "fake decode"): query row r of sequence s sits at local position
// j = r - query_start_loc[s] and sees the keys 0 .. prefix_len + j of its sequence, with
// prefix_len = seq_lens[s] - query_len(s). So every row, decode or prefill, is a decode of its own:
//     row_seq[r] = s                                   (which block-table row to read)
//     row_len[r] = seq_lens[s] - query_start_loc[s+1] + r + 1   (= prefix_len + j + 1)
// A decode batch (query_start_loc = 0, 1, ..., n) is the special case row_seq[r] = r,
// row_len[r] = seq_lens[r]. The attention kernels (hp1_decode.cu) read only these two arrays and
// the block table, so this kernel runs once per step, not once per layer.
//
// Each thread finds its sequence by binary search: the largest s in [0, num_seqs] with
// query_start_loc[s] <= r. Sequences with no query rows this step (query_len 0, the padding a
// CUDA graph's batch bucket adds) are skipped by that rule. Rows at or past
// query_start_loc[num_seqs] are padding rows of the bucket: row_seq = 0, row_len = 0, and the
// attention kernels write zeros there. row_len is clamped to [0, capacity] (capacity =
// max_blocks_per_seq * block_size), so a broken length can never send a kernel past its
// block-table row.
//
// Launch: grid ceil(num_rows / 128), block 128, no shared memory.
// Buffers (int32):
//   query_start_loc [num_seqs + 1]  non-decreasing, query_start_loc[0] = 0
//   seq_lens        [num_seqs]      tokens cached after this step, >= that sequence's query count
//   row_seq         [num_rows]      out
//   row_len         [num_rows]      out
// num_rows is the row count of q and of the attention output (the batch bucket under a graph).

extern "C" __global__ void __launch_bounds__(128) hp1_rows(const int* __restrict__ query_start_loc,
                                                           const int* __restrict__ seq_lens, int num_seqs,
                                                           int num_rows, int capacity, int* __restrict__ row_seq,
                                                           int* __restrict__ row_len) {
  pdl_begin();
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= num_rows) return;
  // Invariant: query_start_loc[lo] <= r (true for lo = 0), and the answer lies in [lo, hi].
  int lo = 0, hi = num_seqs;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (query_start_loc[mid] <= r) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  if (lo >= num_seqs) {
    row_seq[r] = 0;
    row_len[r] = 0;
    return;
  }
  long long len = (long long)seq_lens[lo] - (long long)query_start_loc[lo + 1] + r + 1;
  len = len < 0 ? 0 : (len > capacity ? capacity : len);
  row_seq[r] = lo;
  row_len[r] = (int)len;
}
