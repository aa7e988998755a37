#line 2 "hp1_prefill_tiles.cuh"
// hp1_prefill_tiles.cuh: which query tile a prefill CTA computes, shared by the MMA and WGMMA
// prefill kernels (the grid and order are stated in hp1_prefill_mma.cu's header).
//
// The batch's tiles are numbered sequence by sequence, ceil(query_len / bm) tiles per sequence,
// and within a sequence LAST TILE FIRST: the last tile has the most keys, so the longest work of
// a sequence is handed out first. CTA x computes tile x; an x past the batch's tile count gets
// seq = -1 and exits. Every warp of the CTA scans query_start_loc by itself (32 sequences per
// step: a warp prefix sum of the tile counts and a ballot for the first sequence whose tiles
// reach past x), so no shared memory or barrier is needed; the warps agree because they read the
// same values. The shuffles use the full warp mask: every lane runs the same trip count.

struct PrefillTile {
  int seq;     // the sequence, or -1 for a CTA past the batch's tiles
  int token0;  // its first query row (query_start_loc[seq])
  int prefix;  // keys cached before its queries (seq_len - query_len)
  int row0;    // the tile's first query row within the sequence
  int rows;    // query rows in the tile (bm, or fewer in a sequence's last tile)
};

__device__ __forceinline__ PrefillTile find_prefill_tile(const int* __restrict__ query_start_loc,
                                                         const int* __restrict__ seq_lens, int num_seqs, int x, int bm) {
  const unsigned FULL = 0xffffffffu;
  const int lane = threadIdx.x & 31;
  int before = 0;  // tiles of the sequences of earlier steps
  for (int base = 0; base < num_seqs; base += 32) {
    const int s = base + lane;
    const int n = s < num_seqs ? (query_start_loc[s + 1] - query_start_loc[s] + bm - 1) / bm : 0;
    int incl = n;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(FULL, incl, o);
      if (lane >= o) incl += v;
    }
    const unsigned hit = __ballot_sync(FULL, x < before + incl);
    if (hit != 0u) {
      const int l = __ffs(hit) - 1;
      const int seq = base + l;
      const int k = x - before - __shfl_sync(FULL, incl - n, l);
      const int tile = __shfl_sync(FULL, n, l) - 1 - k;
      const int token0 = query_start_loc[seq], query_len = query_start_loc[seq + 1] - token0;
      return PrefillTile{seq, token0, seq_lens[seq] - query_len, tile * bm, min(bm, query_len - tile * bm)};
    }
    before += __shfl_sync(FULL, incl, 31);
  }
  return PrefillTile{-1, 0, 0, 0, 0};
}
