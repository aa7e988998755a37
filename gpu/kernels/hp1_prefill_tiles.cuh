#line 2 "hp1_prefill_tiles.cuh"
// hp1_prefill_tiles.cuh: which query tile a prefill CTA computes, shared by the MMA and WGMMA
// prefill kernels. The grid is (head CTAs, tile_slots): blockIdx.x picks the head (or head pair)
// and varies fastest, blockIdx.y = x picks the tile, so all heads of a tile are launched side by
// side and the launch order follows the tile order below.
//
// ORDER. Sequence s has ceil(query_len_s / bm) tiles; a tile's rank is its distance from the
// sequence's last tile (the last tile has rank 0 and the most keys). Tiles are numbered rank by
// rank, and within a rank in sequence order: every sequence's last tile first, then the
// second-to-last tile of every sequence that has two, and so on. The tiles with the most keys of
// every sequence thus start first, and a batch of equal sequences runs longest-first overall,
// so no long tile is left to start in the last wave. CTA x computes tile x; an x past the
// batch's tile count gets seq = -1 and exits.
//
// LOOKUP. Ranks k .. m - 1 hold the same sequences (those with more than k tiles, m the fewest
// tiles among them), `count` tiles per rank, so a pass over the sequences skips all of those
// ranks at once: the outer loop runs once per distinct tile count at or below x's rank. A
// second pass finds the x-th sequence (in order) with more than k tiles. Every warp of the CTA
// does the lookup by itself, 32 sequences per step (ballots and a warp min), so no shared memory
// or barrier is needed; the warps agree because they read the same values. The shuffles use the
// full warp mask: every lane runs the same trip counts.

struct PrefillTile {
  int seq;     // the sequence, or -1 for a CTA past the batch's tiles
  int token0;  // its first query row (query_start_loc[seq])
  int prefix;  // keys cached before its queries (seq_len - query_len)
  int row0;    // the tile's first query row within the sequence
  int rows;    // query rows in the tile (bm, or fewer in a sequence's last tile)
};

// Tiles of sequence s (0 past the batch).
__device__ __forceinline__ int prefill_tiles_of(const int* __restrict__ query_start_loc, int num_seqs, int s, int bm) {
  return s < num_seqs ? (query_start_loc[s + 1] - query_start_loc[s] + bm - 1) / bm : 0;
}

__device__ __forceinline__ PrefillTile find_prefill_tile(const int* __restrict__ query_start_loc,
                                                         const int* __restrict__ seq_lens, int num_seqs, int x, int bm) {
  const unsigned FULL = 0xffffffffu;
  const int lane = threadIdx.x & 31;
  const PrefillTile none{-1, 0, 0, 0, 0};
  int k = 0;  // the rank x is counted from
  for (;;) {
    int count = 0, fewest = 0x7fffffff;
    for (int base = 0; base < num_seqs; base += 32) {
      const int n = prefill_tiles_of(query_start_loc, num_seqs, base + lane, bm);
      count += __popc(__ballot_sync(FULL, n > k));
      if (n > k) fewest = min(fewest, n);
    }
    if (count == 0) return none;
    fewest = __reduce_min_sync(FULL, fewest);
    const long long span = (long long)count * (fewest - k);
    if (x < span) {
      k += x / count;
      x %= count;
      break;
    }
    x -= (int)span;
    k = fewest;
  }
  int before = 0;  // sequences with more than k tiles in earlier steps
  for (int base = 0; base < num_seqs; base += 32) {
    const int n = prefill_tiles_of(query_start_loc, num_seqs, base + lane, bm);
    const unsigned has = __ballot_sync(FULL, n > k);
    const int c = __popc(has);
    if (x < before + c) {
      const int rank_in_step = __popc(has & ((1u << lane) - 1u));
      const int l = __ffs(__ballot_sync(FULL, n > k && rank_in_step == x - before)) - 1;
      const int seq = base + l;
      const int tile = __shfl_sync(FULL, n, l) - 1 - k;
      const int token0 = query_start_loc[seq], query_len = query_start_loc[seq + 1] - token0;
      return PrefillTile{seq, token0, seq_lens[seq] - query_len, tile * bm, min(bm, query_len - tile * bm)};
    }
    before += c;
  }
  return none;
}
