#line 2 "hp1_prefill_mma.cu"
// hp1_prefill_mma.cu: HP1 attention for prefill tiles on the tensor cores with mma.sync m16n8k16
// bf16 (sm_80 and newer; SPEC sections 2 and 6), with the entry signature and launch the WGMMA
// prefill kernel shares. Needs tensor_core.cuh and hp1_prefill_gate.cuh before it
// (gpu::kernels concatenates them).
//
// ALGORITHM. A CTA computes one query head h for a tile of BM = 64 consecutive query rows of one
// sequence; warp w owns rows 16w .. 16w+15 of the tile. Row i of a sequence (0-based among its
// query rows) is at position pos = prefix_len + i and attends to keys 0 ..= pos of kv head
// g = h / (Hq / Hkv). Keys are walked in tiles of BN = 64 from key 0 up to the tile's last row's
// position; per key tile:
//   1. QK: S (16 x 64 per warp) = Q K^T with mma m16n8k16 (f32 accumulate): Q as A fragments
//      (held in registers for D <= 128, read from shared memory per k-step for D = 256), K rows
//      as B fragments by ldmatrix (non-transposed: a K row is a column of K^T).
//   2. Gate on the accumulator fragments (hp1_prefill_gate.cuh): s = scale * acc, the FIR over
//      the previous F - 1 keys by quad shuffles with the previous tile's last r values carried in
//      registers, keys past the row's position masked to p = 0. Bit-exact f32 as the oracle.
//   3. PV: p rounded to bf16 (SPEC section 4 allows relative L2 1e-2 for it) and packed straight
//      from the C fragments into A fragments (C tile pair 2kk, 2kk+1 is the A operand of key
//      step kk), V by ldmatrix.trans, O += P V in f32 registers. A 16-key step whose p are all 0
//      over the warp (packed bits, so exactly the steps that add nothing) skips its V loads and
//      mmas.
// K and V tiles are gathered from the paged cache by cp.async, 16 bytes at a time (a key row is
// D * 2 contiguous bytes at cache row (block_table[t >> log2_block] << log2_block | t & (bs - 1)),
// element g * D of the row), into double buffers: key tile kt + 1's K is issued after tile kt's QK
// and its V after tile kt's PV, so each load overlaps the other half of the tile's work; two
// barriers per tile. Keys past the CTA's last row's position (which covers every key >= seq_len)
// are zero-filled, never read. Shared tiles are rows of D bf16 with the 16-byte chunk c of row r
// stored at chunk c ^ (r & 7) (XOR swizzle): the 8 row addresses of one ldmatrix matrix then fall
// in 8 different bank groups. A warp whose rows all end before a key tile skips its QK, gate and
// PV (later tiles are masked for it too) but keeps loading and meeting the barriers. At the end
// each row's O is rounded to bf16 once and stored.
// Determinism: every sum has a fixed order (mma's internal order is fixed by the hardware, the key
// tiles add in order), no atomics, and a row's result depends on its own sequence only.
//
// LAUNCH. Grid (tile_slots, Hq, 1), block THREADS = 128 (4 warps), dynamic shared memory
// SMEM_BYTES(D) = 512 * D bytes for D <= 128 (K and V double buffers of 64 rows x D bf16; Q is
// staged in the second V buffer before that buffer's first load) and 640 * D bytes for D = 256
// (a Q tile of its own): 32 KB, 64 KB, 160 KB for D = 64, 128, 256 (the host raises
// MAX_DYNAMIC_SHARED_SIZE_BYTES past 48 KB). tile_slots = ceil(rows / BM) + num_seqs bounds the
// batch's tile count; CTA (x, h) takes the x-th query tile: sequences in order, each sequence's
// ceil(query_len / BM) tiles last tile first (the last tile has the most keys). Every warp finds
// (sequence, tile) itself by scanning query_start_loc 32 sequences per step (warp prefix sum), so
// no barrier is needed for it; a CTA past the batch's tile count exits at once.
//
// BUFFERS (bf16 passed as its 16 bits, row-major):
//   q               [rows, q_row_stride] bf16; head h of row r at r * q_row_stride + h * D
//   key_cache       [num_blocks, block_size, Hkv, D] bf16
//   value_cache     [num_blocks, block_size, Hkv, D] bf16
//   block_table     [num_seqs, max_blocks] int32 (physical block numbers, any order)
//   seq_lens        [num_seqs] int32 (tokens in the cache, the new ones included)
//   query_start_loc [num_seqs + 1] int32, from 0
//   sigma, gamma    [Hq] f32
//   out             [rows, Hq, D] bf16; rows past query_start_loc[num_seqs] are not written
// ASSUMPTIONS, checked on the host: Hq a multiple of Hkv; block_size = 1 << log2_block; q_row_stride
// a multiple of 8 and base pointers 16-byte aligned (16-byte cp.async); query_len <= seq_len; at
// most 2^31 - 1 token rows in each cache; 1 <= fir_k <= 8; clip_min < clip_max; block-table
// entries of the keys a row reads are valid blocks (not checked on the device).

namespace hp1_prefill {

constexpr int THREADS = 128;
constexpr int WARPS = THREADS / 32;
constexpr int BM = 64;  // query rows per CTA, 16 per warp
constexpr int BN = 64;  // keys per tile
static_assert(BM == 16 * WARPS, "a warp owns 16 query rows");

// Shared memory layout per head dim: four tiles of 64 rows x D bf16 (K0, K1, V0, V1), then for
// D = 256 the Q tile; for D <= 128 Q is staged in V1.
template <int D>
struct Smem {
  static constexpr int TILE = BN * D * 2;
  static constexpr bool Q_IN_REGS = D <= 128;
  static constexpr int K0 = 0, V0 = 2 * TILE;
  static constexpr int Q = Q_IN_REGS ? 3 * TILE : 4 * TILE;
  static constexpr int BYTES = Q_IN_REGS ? 4 * TILE : 5 * TILE;
};

// Byte offset of the 16-byte chunk `chunk` of row `row` in a swizzled tile of D columns.
template <int D>
__device__ __forceinline__ unsigned swizzle(int row, int chunk) {
  return (unsigned)(row * (D * 2) + ((chunk ^ (row & 7)) << 4));
}

struct Args {
  const unsigned short* __restrict__ q;
  long long q_row_stride;
  const unsigned short* __restrict__ key_cache;
  const unsigned short* __restrict__ value_cache;
  const int* __restrict__ block_table;
  int max_blocks;
  const int* __restrict__ seq_lens;
  const int* __restrict__ query_start_loc;
  int num_seqs;
  const float* __restrict__ sigma;
  const float* __restrict__ gamma;
  int heads;
  int kv_heads;
  int log2_block;
  float scale;
  int fir_k;
  int relu_pre;
  float clip_min;
  float clip_max;
};

// The query tile of CTA x: its sequence and tile index (BM rows each), or seq = -1 past the
// batch. Run by a whole warp (full-mask shuffles, uniform trip count).
struct TileRef {
  int seq, tile;
};
__device__ __forceinline__ TileRef find_tile(const int* __restrict__ qsl, int num_seqs, int x) {
  const unsigned FULL = 0xffffffffu;
  const int lane = threadIdx.x & 31;
  int base = 0;  // tiles of the sequences before s0
  for (int s0 = 0; s0 < num_seqs; s0 += 32) {
    const int s = s0 + lane;
    const int n = s < num_seqs ? (qsl[s + 1] - qsl[s] + BM - 1) / BM : 0;
    int incl = n;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(FULL, incl, o);
      if (lane >= o) incl += v;
    }
    const int start = base + incl - n;
    const unsigned hit = __ballot_sync(FULL, x >= start && x < start + n);
    if (hit != 0) {
      const int l = __ffs(hit) - 1;
      const int from_start = x - __shfl_sync(FULL, start, l);
      const int count = __shfl_sync(FULL, n, l);
      return TileRef{s0 + l, count - 1 - from_start};  // last tile first
    }
    base += __shfl_sync(FULL, incl, 31);
  }
  return TileRef{-1, 0};
}

// cp.async of key tile [key0, key0 + BN) of one cache into the swizzled tile at dst; keys at or
// past key_end are zero-filled without reading the cache or the block table.
template <int D>
__device__ __forceinline__ void load_kv_tile(unsigned dst, const unsigned short* __restrict__ cache,
                                             const int* __restrict__ table, int log2_block, unsigned token_bytes,
                                             int key0, int key_end) {
  constexpr int CPR = D / 8;  // 16-byte chunks per row
  static_assert(BN * CPR % THREADS == 0, "whole chunks per thread");
  const int mask = (1 << log2_block) - 1;
#pragma unroll
  for (int i = 0; i < BN * CPR / THREADS; ++i) {
    const int idx = (int)threadIdx.x + i * THREADS;
    const int row = idx / CPR, chunk = idx % CPR;
    const int key = key0 + row;
    const bool valid = key < key_end;
    const unsigned short* src = cache;
    if (valid) {
      const int cache_row = (table[key >> log2_block] << log2_block) | (key & mask);
      src = reinterpret_cast<const unsigned short*>(reinterpret_cast<const char*>(cache) +
                                                    (unsigned long long)(unsigned)cache_row * token_bytes) +
            chunk * 8;
    }
    tc::cp_async_16(dst + swizzle<D>(row, chunk), src, valid);
  }
}

// cp.async of the CTA's BM query rows (head h) into the swizzled tile at dst; rows past the
// sequence's query rows are zero-filled.
template <int D>
__device__ __forceinline__ void load_q_tile(unsigned dst, const unsigned short* __restrict__ q_head,
                                            long long q_row_stride, int rows_here) {
  constexpr int CPR = D / 8;
#pragma unroll
  for (int i = 0; i < BM * CPR / THREADS; ++i) {
    const int idx = (int)threadIdx.x + i * THREADS;
    const int row = idx / CPR, chunk = idx % CPR;
    const bool valid = row < rows_here;
    const unsigned short* src = valid ? q_head + row * q_row_stride + chunk * 8 : q_head;
    tc::cp_async_16(dst + swizzle<D>(row, chunk), src, valid);
  }
}

template <int D>
__device__ __forceinline__ void prefill(const Args& a, unsigned short* __restrict__ out) {
  static_assert(D == 64 || D == 128 || D == 256, "head_dim must be 64, 128 or 256");
  using L = Smem<D>;
  constexpr int KSTEPS = D / 16;  // QK k-steps
  constexpr int DT = D / 8;       // PV n-tiles (output columns / 8)
  const unsigned FULL = 0xffffffffu;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int h = blockIdx.y;

  const TileRef ref = find_tile(a.query_start_loc, a.num_seqs, blockIdx.x);
  if (ref.seq < 0) return;  // the same in every warp
  const int q_start = a.query_start_loc[ref.seq];
  const int qlen = a.query_start_loc[ref.seq + 1] - q_start;
  const int prefix = a.seq_lens[ref.seq] - qlen;
  const int i0 = ref.tile * BM;
  const int rows_here = min(BM, qlen - i0);
  const int key_end = prefix + i0 + rows_here;  // keys past the tile's last row are never needed
  const int num_kt = (key_end + BN - 1) / BN;
  // This lane's rows (g and g + 8 of the warp) and the warp's last row, as positions (-1: none).
  const int wrow = 16 * warp;
  const int pos_lo = wrow + g < rows_here ? prefix + i0 + wrow + g : -1;
  const int pos_hi = wrow + g + 8 < rows_here ? prefix + i0 + wrow + g + 8 : -1;
  const int warp_last = wrow < rows_here ? prefix + i0 + min(wrow + 15, rows_here - 1) : -1;

  const int kvh = h / (a.heads / a.kv_heads);
  const unsigned token_bytes = (unsigned)(a.kv_heads * D * 2);
  const unsigned short* __restrict__ kc = a.key_cache + (long long)kvh * D;
  const unsigned short* __restrict__ vc = a.value_cache + (long long)kvh * D;
  const int* __restrict__ table = a.block_table + (long long)ref.seq * a.max_blocks;
  GateParams gp;
  gp.scale = a.scale;
  gp.sigma = a.sigma[h];
  gp.gamma = a.gamma[h];
  gp.inv_f = __fdiv_rn(1.0f, (float)a.fir_k);
  gp.clip_min = a.clip_min;
  gp.clip_max = a.clip_max;
  gp.fir_k = a.fir_k;
  gp.relu_pre = a.relu_pre;

  const unsigned sm = tc::smem_addr(tc::dynamic_smem());
  // Groups: {Q, K_0}, {V_0}; then per tile kt: {K_kt+1}, {V_kt+1} (empty past the last tile).
  load_q_tile<D>(sm + L::Q, a.q + (long long)(q_start + i0) * a.q_row_stride + (long long)h * D, a.q_row_stride,
                 rows_here);
  load_kv_tile<D>(sm + L::K0, kc, table, a.log2_block, token_bytes, 0, key_end);
  tc::cp_async_commit();
  load_kv_tile<D>(sm + L::V0, vc, table, a.log2_block, token_bytes, 0, key_end);
  tc::cp_async_commit();
  tc::cp_async_wait<1>();
  __syncthreads();

  // A-fragment address of this lane for k-step kk (rows lane & 15, column half lane >> 4), and the
  // B-fragment addresses: K (non-trans, n-tile pair p) and V (trans, key step kk).
  const int a_row = lane & 15, a_half = lane >> 4;
  const int k_row = (lane & 7) + ((lane >> 4) << 3), k_half = (lane >> 3) & 1;
  unsigned qf[L::Q_IN_REGS ? KSTEPS : 1][4];
  if constexpr (L::Q_IN_REGS) {
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) tc::ldmatrix_x4(qf[kk], sm + L::Q + swizzle<D>(wrow + a_row, 2 * kk + a_half));
  }

  FirTail tail;
  fir_tail_init(tail);
  float o[DT][4];
#pragma unroll
  for (int n = 0; n < DT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

#pragma unroll 1
  for (int kt = 0; kt < num_kt; ++kt) {
    const int key0 = kt * BN;
    const unsigned kbuf = sm + L::K0 + (kt & 1) * L::TILE, vbuf = sm + L::V0 + (kt & 1) * L::TILE;
    const bool active = key0 <= warp_last;  // uniform over the warp
    // The other K buffer was last read by tile kt - 1's QK, before the barrier ahead of its PV.
    if (kt + 1 < num_kt)
      load_kv_tile<D>(sm + L::K0 + ((kt + 1) & 1) * L::TILE, kc, table, a.log2_block, token_bytes, key0 + BN, key_end);
    tc::cp_async_commit();
    float s[8][4];
    if (active) {
#pragma unroll
      for (int j = 0; j < 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < KSTEPS; ++kk) {
        unsigned qa[4];
        if constexpr (L::Q_IN_REGS) {
          qa[0] = qf[kk][0];
          qa[1] = qf[kk][1];
          qa[2] = qf[kk][2];
          qa[3] = qf[kk][3];
        } else {
          tc::ldmatrix_x4(qa, sm + L::Q + swizzle<D>(wrow + a_row, 2 * kk + a_half));
        }
#pragma unroll
        for (int p = 0; p < 4; ++p) {
          unsigned kb[4];
          tc::ldmatrix_x4(kb, kbuf + swizzle<D>(16 * p + k_row, 2 * kk + k_half));
          tc::mma_bf16_16816(s[2 * p], qa, kb[0], kb[1]);
          tc::mma_bf16_16816(s[2 * p + 1], qa, kb[2], kb[3]);
        }
      }
    }
    if (active) gate_tile<0, -1, true>(s, tail, key0, pos_lo, pos_hi, gp);
    tc::cp_async_wait<1>();  // V_kt landed (K_kt+1 may still fly)
    __syncthreads();
    // The other V buffer (Q's staging for D <= 128) was last read by tile kt - 1's PV, before
    // the barrier that ended tile kt - 1 (for kt = 0: Q was read before tile 0 began).
    if (kt + 1 < num_kt)
      load_kv_tile<D>(sm + L::V0 + ((kt + 1) & 1) * L::TILE, vc, table, a.log2_block, token_bytes, key0 + BN, key_end);
    tc::cp_async_commit();
    if (active) {
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        unsigned pa[4];
        pa[0] = tc::pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
        pa[1] = tc::pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
        pa[2] = tc::pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[3] = tc::pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        if (__any_sync(FULL, (pa[0] | pa[1] | pa[2] | pa[3]) != 0u)) {
#pragma unroll
          for (int dp = 0; dp < DT / 2; ++dp) {
            unsigned vb[4];
            tc::ldmatrix_x4_trans(vb, vbuf + swizzle<D>(16 * kk + a_row, 2 * dp + a_half));
            tc::mma_bf16_16816(o[2 * dp], pa, vb[0], vb[1]);
            tc::mma_bf16_16816(o[2 * dp + 1], pa, vb[2], vb[3]);
          }
        }
      }
    }
    tc::cp_async_wait<1>();  // K_kt+1 landed
    __syncthreads();
  }

  // Each row's O rounded to bf16 once, staged through the warp's own 16 rows of the K0 tile (free
  // after the last barrier) so that the stores to out are whole 16-byte chunks of a row: lane
  // (g, t) holds columns 8n + 2t, + 1 of rows g and g + 8.
  unsigned char* stage = tc::dynamic_smem() + L::K0;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh)
#pragma unroll
    for (int n = 0; n < DT; ++n)
      *reinterpret_cast<unsigned*>(stage + swizzle<D>(wrow + g + 8 * hh, n) + 4 * t) =
          tc::pack_bf16x2(o[n][2 * hh], o[n][2 * hh + 1]);
  __syncwarp();
  unsigned short* out_rows = out + ((long long)(q_start + i0 + wrow) * a.heads + h) * D;
  const long long out_stride = (long long)a.heads * D;
#pragma unroll
  for (int i = 0; i < 16 * DT / 32; ++i) {
    const int idx = lane + 32 * i;
    const int r = idx / DT, chunk = idx % DT;
    if (wrow + r < rows_here)
      *reinterpret_cast<uint4*>(out_rows + r * out_stride + chunk * 8) =
          *reinterpret_cast<const uint4*>(stage + swizzle<D>(wrow + r, chunk));
  }
}

}  // namespace hp1_prefill

#define HP1_PREFILL_PARAMS                                                                              \
  const unsigned short *q, long long q_row_stride, const unsigned short *key_cache,                   \
      const unsigned short *value_cache, const int *block_table, int max_blocks, const int *seq_lens, \
      const int *query_start_loc, int num_seqs, const float *sigma, const float *gamma, int heads,    \
      int kv_heads, int log2_block, float scale, int fir_k, int relu_pre, float clip_min,             \
      float clip_max, unsigned short *out

#define HP1_PREFILL_ENTRY(D)                                                                            \
  extern "C" __global__ void __launch_bounds__(hp1_prefill::THREADS) hp1_prefill_mma_d##D(HP1_PREFILL_PARAMS) { \
    hp1_prefill::prefill<D>(hp1_prefill::Args{q, q_row_stride, key_cache, value_cache, block_table, max_blocks, \
                                              seq_lens, query_start_loc, num_seqs, sigma, gamma, heads,        \
                                              kv_heads, log2_block, scale, fir_k, relu_pre, clip_min,          \
                                              clip_max},                                                       \
                            out);                                                                              \
  }

HP1_PREFILL_ENTRY(64)
HP1_PREFILL_ENTRY(128)
HP1_PREFILL_ENTRY(256)
