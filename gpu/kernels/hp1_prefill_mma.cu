#line 2 "hp1_prefill_mma.cu"
// hp1_prefill_mma.cu: HP1 attention for prefill tiles on the tensor cores with mma.sync m16n8k16
// bf16 (sm_80 and newer; SPEC sections 2 and 6), with the entry signature and launch the WGMMA
// prefill kernel shares. Needs tensor_core.cuh, hp1_prefill_gate.cuh and hp1_prefill_tiles.cuh
// before it (gpu::kernels concatenates them).
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
// element g * D of the row; each row is looked up once per tile, for K and V, and handed to the
// warp's lanes by shuffles), into double buffers: key tile kt + 1 is issued when tile kt begins,
// so its loads overlap all of tile kt's work; two barriers per tile (tile kt landed; tile kt's
// buffers free for tile kt + 2). Keys past the CTA's last row's position (which covers every key
// >= seq_len) are zero-filled, never read. Shared tiles are rows of D bf16 with the 16-byte chunk c
// of row r stored at chunk c ^ (r & 7) (XOR swizzle): the 8 row addresses of one ldmatrix matrix
// then fall in 8 different bank groups, and every ldmatrix address is a per-lane base plus
// compile-time terms and one xor (pair_offset). A warp whose rows all end before a key tile skips
// its QK, gate and PV (later tiles are masked for it too) but keeps loading and meeting the
// barriers. At the end each row's O is rounded to bf16 once and stored as whole 16-byte chunks of
// the row, staged through the warp's own rows of a K buffer.
// Determinism: every sum has a fixed order (mma's internal order is fixed by the hardware, the key
// tiles add in order), no atomics, and a row's result depends on its own sequence only.
//
// LAUNCH. Grid (Hq, tile_slots, 1), block THREADS = 128 (4 warps), dynamic shared memory
// SMEM_BYTES(D) = 512 * D bytes for D <= 128 (K and V double buffers of 64 rows x D bf16; Q is
// staged in the second V buffer before that buffer's first load) and 640 * D bytes for D = 256
// (a Q tile of its own): 32 KB, 64 KB, 160 KB for D = 64, 128, 256 (the host raises
// MAX_DYNAMIC_SHARED_SIZE_BYTES past 48 KB). tile_slots = ceil(rows / BM) + num_seqs bounds the
// batch's tile count; CTA (h, x) takes head h of the x-th query tile in the order of
// hp1_prefill_tiles.cuh (every sequence's last tile first, then the second-to-last, ...: the
// tiles with the most keys start first). Every warp finds (sequence, tile) itself
// (find_prefill_tile), so no barrier is needed for it; a CTA past the batch's tile count exits
// at once. Launch bounds: min_ctas(D) CTAs per SM, 3 / 2 / 1 for D = 64 / 128 / 256.
//
// BUFFERS (bf16 passed as its 16 bits, row-major):
//   q               [rows, q_row_stride] bf16; head h of row r at r * q_row_stride + h * D: the
//                   normed, rotated queries, or, with a RoPE table, the qkv projection's rows
//                   (q_row_stride its width), whose q heads the kernel norms (q_norm_*, over D)
//                   and rotates (rope [max_pos, D] at the row's place in its sequence) into its
//                   Q tile itself, with qk_norm_rope_cache.cu's arithmetic and bits
//                   (norm_rope.cuh)
//   rope            [max_pos, D] f32, or null (q already normed and rotated; q_norm_* unread)
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

// CTAs per SM the launch bounds ask for: per head dim the most at which ptxas compiles every
// entry without spills on sm_80, sm_86, sm_89 and sm_90 with room to spare (4 CTAs at D = 64, i.e.
// 128 registers, spilled on sm_86 and sm_89; 3 at D = 128 spilled on sm_90), and no more than the
// shared memory of an sm_80 SM (164 KB) holds.
constexpr int min_ctas(int d) { return d == 64 ? 3 : d == 128 ? 2 : 1; }

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

// The swizzled offset of chunk pair m (chunks 2m, 2m + 1) for a row r with (r >> 1 & 3) << 5 ==
// y_shift: (m ^ (r >> 1 & 3)) * 32, the xor confined to bits 5 and 6.
__device__ __forceinline__ unsigned pair_offset(int m, unsigned y_shift) { return ((unsigned)m << 5) ^ y_shift; }

struct Args {
  const unsigned short* __restrict__ q;
  long long q_row_stride;
  QNormRope qn;
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

// cp.async of key tile [key0, key0 + BN) of both caches into the swizzled tiles k_dst and v_dst,
// key key0 + key_of_column(r) in row r (hp1_prefill_gate.cuh's layout); keys at or past key_end
// are zero-filled without reading the caches or the block table. Chunk idx = tid + THREADS * i
// is row idx / CPR, chunk idx % CPR, so a warp's i-th cp.async covers
// R = 32 / CPR whole rows, and the warp's 16 rows of the tile are looked up once: lane l < 16
// (and its copy l + 16) reads the cache row of the warp's row for (i, r) = (l / R, l % R), which
// serves K and V, and each cp.async takes its row by a shuffle (the whole warp calls this).
template <int D>
__device__ __forceinline__ void load_kv_tiles(unsigned k_dst, unsigned v_dst, const unsigned short* __restrict__ kc,
                                              const unsigned short* __restrict__ vc, const int* __restrict__ table,
                                              int log2_block, unsigned token_bytes, int key0, int key_end) {
  constexpr int CPR = D / 8;  // 16-byte chunks per row
  constexpr int R = 32 / CPR;
  static_assert(BN * CPR % THREADS == 0 && BN * CPR / THREADS * R == 16, "16 rows per warp, whole rows per cp.async");
  const unsigned FULL = 0xffffffffu;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, l = lane & 15;
  const int my_key = key0 + key_of_column(warp * R + l % R + 4 * R * (l / R));
  const int my_row = my_key < key_end ? (table[my_key >> log2_block] << log2_block) | (my_key & ((1 << log2_block) - 1)) : 0;
#pragma unroll
  for (int i = 0; i < 16 / R; ++i) {
    const int row = warp * R + lane / CPR + 4 * R * i, chunk = lane % CPR;
    const int cache_row = __shfl_sync(FULL, my_row, i * R + lane / CPR);
    const bool valid = key0 + key_of_column(row) < key_end;
    // Bytes from the head's first element; 0 (an address never read) when masked.
    const unsigned long long offset = valid ? (unsigned long long)(unsigned)cache_row * token_bytes + chunk * 16 : 0;
    const unsigned dst = swizzle<D>(row, chunk);
    tc::cp_async_16(k_dst + dst, reinterpret_cast<const char*>(kc) + offset, valid);
    tc::cp_async_16(v_dst + dst, reinterpret_cast<const char*>(vc) + offset, valid);
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
  const int h = blockIdx.x;

  const PrefillTile tile = find_prefill_tile(a.query_start_loc, a.seq_lens, a.num_seqs, blockIdx.y, BM);
  if (tile.seq < 0) return;  // the same in every warp
  const int q_start = tile.token0, prefix = tile.prefix, i0 = tile.row0, rows_here = tile.rows;
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
  const int* __restrict__ table = a.block_table + (long long)tile.seq * a.max_blocks;
  const GateParams gp = gate_params(a.scale, a.sigma[h], a.gamma[h], a.clip_min, a.clip_max, a.fir_k, a.relu_pre);

  const unsigned sm = tc::smem_addr(tc::dynamic_smem());
  // cp.async groups: {Q, key tile 0}, then one per key tile kt: {key tile kt + 1} (empty past the
  // last tile).
  if (!a.qn.rope)
    load_q_tile<D>(sm + L::Q, a.q + (long long)(q_start + i0) * a.q_row_stride + (long long)h * D, a.q_row_stride,
                   rows_here);
  load_kv_tiles<D>(sm + L::K0, sm + L::V0, kc, vc, table, a.log2_block, token_bytes, 0, key_end);
  tc::cp_async_commit();
  // Queries from qkv: normed and rotated here while the first key tile flies; the barrier
  // before Q's first read orders these stores.
  if (a.qn.rope)
    norm_rope_q_tile<D, BM, THREADS>(a.q, a.q_row_stride, a.qn, (long long)q_start + i0, prefix + i0, rows_here, h,
                                     (int)threadIdx.x, [&](int r, int c, uint4 v) {
                                       tc::st_shared_16(sm + L::Q + swizzle<D>(r, c), v);
                                     });

  // ldmatrix row addresses of this lane: Q (A fragments of k-step kk: row lane & 15, chunk
  // 2 kk + (lane >> 4)), K (B fragments of n-tiles 2p, 2p + 1 and k-step kk: key 16p + (lane & 7)
  // + 8 (lane >> 4), chunk 2 kk + (lane >> 3 & 1)) and V (transposed B fragments of output tiles
  // 2 dp, 2 dp + 1 and key step kk: key 16 kk + (lane & 15), chunk 2 dp + (lane >> 4)). Every such
  // row r has r & 7 == lane & 7, so the swizzled chunk 2m + b (b the lane's half) is
  // 2 (m ^ y) + (b ^ (lane & 1)) with y = lane >> 1 & 3: a per-lane base, the compile-time row
  // and chunk-pair terms, and one xor (pair_offset), so no address needs a register of its own.
  const unsigned y_shift = (unsigned)((lane >> 1) & 3) << 5;
  const unsigned q_base = sm + L::Q + (wrow + (lane & 15)) * (2 * D) + (((lane >> 4) ^ (lane & 1)) << 4);
  const unsigned k_base = ((lane & 7) + ((lane >> 4) << 3)) * (2 * D) + ((((lane >> 3) & 1) ^ (lane & 1)) << 4);
  const unsigned v_base = (lane & 15) * (2 * D) + (((lane >> 4) ^ (lane & 1)) << 4);
  unsigned qf[L::Q_IN_REGS ? KSTEPS : 1][4];
  if constexpr (L::Q_IN_REGS) {
    tc::cp_async_wait<0>();
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) tc::ldmatrix_x4(qf[kk], q_base + pair_offset(kk, y_shift));
    __syncthreads();  // every warp holds its Q before key tile 1's V lands on the staging buffer
  }

  FirTail<0> tail;
  fir_tail_init(tail);
  float o[DT][4];
#pragma unroll
  for (int n = 0; n < DT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

#pragma unroll 1
  for (int kt = 0; kt < num_kt; ++kt) {
    const int key0 = kt * BN;
    const unsigned kbuf = sm + L::K0 + (kt & 1) * L::TILE, vbuf = sm + L::V0 + (kt & 1) * L::TILE;
    // The other buffers were last read by key tile kt - 1, before the barrier that ended it.
    if (kt + 1 < num_kt)
      load_kv_tiles<D>(sm + L::K0 + ((kt + 1) & 1) * L::TILE, sm + L::V0 + ((kt + 1) & 1) * L::TILE, kc, vc, table,
                       a.log2_block, token_bytes, key0 + BN, key_end);
    tc::cp_async_commit();
    tc::cp_async_wait<1>();  // key tile kt landed (kt + 1 may still fly)
    __syncthreads();
    if (key0 <= warp_last) {  // uniform over the warp
      float s[8][4];
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
          tc::ldmatrix_x4(qa, q_base + pair_offset(kk, y_shift));
        }
#pragma unroll
        for (int p = 0; p < 4; ++p) {
          unsigned kb[4];
          tc::ldmatrix_x4(kb, kbuf + k_base + 16 * p * (2 * D) + pair_offset(kk, y_shift));
          tc::mma_bf16_16816(s[2 * p], qa, kb[0], kb[1]);
          tc::mma_bf16_16816(s[2 * p + 1], qa, kb[2], kb[3]);
        }
      }
      // One gate variant (taps and relu_pre at run time, the causal test on every tile): a
      // second, unmasked copy for the tiles below the diagonal made ptxas spill.
      gate_tile<0, -1, true>(s, tail, key0, pos_lo, pos_hi, gp);
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
            tc::ldmatrix_x4_trans(vb, vbuf + v_base + 16 * kk * (2 * D) + pair_offset(dp, y_shift));
            tc::mma_bf16_16816(o[2 * dp], pa, vb[0], vb[1]);
            tc::mma_bf16_16816(o[2 * dp + 1], pa, vb[2], vb[3]);
          }
        }
      }
    }
    __syncthreads();  // key tile kt's buffers are free for key tile kt + 2
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
  const unsigned short *q, long long q_row_stride, const float *rope,                                 \
      int max_pos, UCLIP_PARAMS(q_norm),                                                              \
      const unsigned short *key_cache,                                                                \
      const unsigned short *value_cache, const int *block_table, int max_blocks, const int *seq_lens, \
      const int *query_start_loc, int num_seqs, const float *sigma, const float *gamma, int heads,    \
      int kv_heads, int log2_block, float scale, int fir_k, int relu_pre, float clip_min,             \
      float clip_max, unsigned short *out

#define HP1_PREFILL_ENTRY(D)                                                                          \
  extern "C" __global__ void __launch_bounds__(hp1_prefill::THREADS, hp1_prefill::min_ctas(D))           \
      hp1_prefill_mma_d##D(HP1_PREFILL_PARAMS) {                                                        \
    pdl_begin();                                                                                      \
    const QNormRope qn = {rope, max_pos, UCLIP_OF(q_norm)};                                          \
    hp1_prefill::prefill<D>(hp1_prefill::Args{q, q_row_stride, qn, key_cache, value_cache, block_table,     \
                                              max_blocks, seq_lens, query_start_loc, num_seqs, sigma,  \
                                              gamma, heads, kv_heads, log2_block, scale, fir_k,        \
                                              relu_pre, clip_min, clip_max},                           \
                            out);                                                                        \
  }

HP1_PREFILL_ENTRY(64)
HP1_PREFILL_ENTRY(128)
HP1_PREFILL_ENTRY(256)
