#line 1 "hp1_prefill_wgmma.cu"
// hp1_prefill_wgmma.cu: HP1 prefill on Hopper's warpgroup MMAs (wgmma.mma_async, sm_90a), over
// the paged KV cache (SPEC sections 2 and 6). The ABI (entry signature, buffers, grid and the
// query-tile order) is the MMA path's, stated in hp1_prefill_mma.cu, plus a last parameter,
// late_clamp (below, 3); this file differs only in how a tile is computed.
//
// ALGORITHM. One CTA = two warpgroups (256 threads) sharing every K and V tile. With HPC = 2
// heads per CTA (Hq / Hkv even) warpgroup w computes head 2 blockIdx.x + w on the CTA's 64 query
// rows (both heads read kv head h / (Hq / Hkv)); with HPC = 1 it computes rows 64 w .. 64 w + 63
// of the CTA's 128 rows of head blockIdx.x. Warp w of a warpgroup owns its rows 16w .. 16w + 15,
// which is how a wgmma m64 accumulator is spread over the warpgroup. The CTA's keys 0 .. last_pos
// are walked in tiles of BN = 64:
//   1. Loads: each warpgroup's Q (once; or normed and rotated from the qkv rows by the warpgroup,
//      norm_rope_q_tile, while the first key tile loads, when the host passes a RoPE table) and
//      each key tile's K and V rows are gathered from the
//      paged cache by cp.async in 16-byte chunks into 128-byte-swizzled shared tiles (layout in
//      wgmma.cuh): row r of a 64-row tile, 16-byte chunk c of head dims 8c .. 8c + 7, at
//      (c / 8) * 8192 + r * 128 + ((c % 8) ^ (r % 8)) * 16. A tile's rows hold its keys in the
//      gate's order (hp1_prefill_gate.cuh LAYOUT: row n is key key_of_column(n)), for both K and
//      V, so S's columns and P V's k-steps agree; a thread's cache rows serve its K and V chunks
//      and, with blocks of 16 keys or more, come from one block-table lookup, asked for a key
//      tile ahead (group_block, load_kv; each thread's part fixed for the CTA, KvShare, each
//      copy's address one wide multiply-add). Keys past the CTA's last position (so past
//      seq_len) are zero-filled (cp.async with source size 0: nothing is read). K and V have two
//      stages: tile j + 1 loads while tile j computes.
//   2. QK: S[64 x 64] = Q K^T as D / 16 wgmma m64n64k16 (both operands K-major in shared
//      memory), all issued before one commit and one wait. Scale is applied in the gate.
//   3. Gate on the accumulator fragments (hp1_prefill_gate.cuh, shared with the MMA path): a
//      warp's 16 x 64 slice is exactly the m16n8 fragment layout there, with the FIR tail of
//      each row carried in registers from key tile to key tile; keys past a row's position get
//      p = 0, tested only on the tiles that reach past a row of the warp. On the other tiles, with
//      late_clamp set and gamma not 0, the gate leaves gamma * z unclamped and the clamp runs on
//      the bf16 pairs of step 4 (clamp_bf16x2: the same bits; one max and one min a pair where
//      the f32 clamp took two instructions a score, and the kernel's time follows the
//      instructions it issues, RESULTS run 168). late_clamp 0 (Hp1Prefill::with_exact_gate) gates
//      every tile in f32, for the GPU check that the two give the same bits. The specialised
//      entries gate in the unit form (hp1_prefill_gate.cuh, UNIT FORM: no scale or gamma a
//      score, the output multiplied by gamma * scale once before it is rounded).
//   4. PV: O[64 x D] += P V as 4 wgmma m64nDk16 with P from registers (the accumulator
//      fragments rounded to bf16x2 are exactly the register-A layout, all packed before the
//      wgmma fence) and V from shared memory (MN-major: V rows are keys with the head dims
//      contiguous, read transposed).
//   A warpgroup whose rows all end before a key tile skips 2 to 4 (uniform over it, as wgmma
//   needs) but keeps loading and meeting the barriers. O stays in f32 registers and is rounded
//   to bf16 once at the end, then stored through the warpgroup's Q tile in 16-byte pieces.
// Ordering: cp.async -> wait -> fence.proxy.async -> __syncthreads before wgmma reads a stage;
// a stage is refilled only after the wgmmas that read it were waited for (the barrier at the
// top of the next tile orders every warp's wait before the refill).
// Determinism: fixed summation orders (wgmma's internal order, key tiles in order), no atomics,
// and a row's result depends on its own sequence and head only.
//
// LAUNCH. grid (Hq / HPC, tile_slots), block 256, tile_slots = ceil(rows / BM) + num_seqs with
// BM = 128 / HPC (hp1_prefill_tiles.cuh maps a CTA to its tile), dynamic shared memory
// (2 * 64 + 2 * 2 * 64) * D * 2 bytes plus 1024 for aligning the tiles to 1024 bytes: 50176 for
// D = 64 and 99328 for D = 128 (PrefillKernel::shared_bytes). Entries
// hp1_prefill_wgmma_d{64,128}_h{1,2} (the general gate: fir_k and relu_pre at run time) and
// the same with _f3_relu (3 taps and relu_pre compiled in, gating in the unit form; the host
// picks it for exactly that gate where its scale allows the unit form, GateParams::has_unit_form).
// At D = 256 the f32 accumulator of m64n256 alone takes 128 registers per thread, so the
// dispatcher sends D = 256 to the MMA path. Registers (ptxas of NVRTC 13, sm_90a): the _f3_relu
// entries fit two CTAs per SM in 128 registers, except d128_h1 (180 registers, one CTA); the
// general entries take 160 to 220 registers, one CTA per SM, without spills.
//
// ASSUMPTIONS: those of hp1_prefill_mma.cu (checked on the host), Hq / Hkv even for HPC = 2,
// and an sm_90a device.

namespace hp1_wgmma {

constexpr int WGS = 2;  // warpgroups per CTA
constexpr int THREADS = 128 * WGS;
constexpr int BN = 64;

// Byte offset of 16-byte chunk c of row r in a 64-row swizzled tile.
__device__ __forceinline__ unsigned swizzled(int r, int c) {
  return (unsigned)((c >> 3) * 8192 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// A warpgroup thread's share of a 64-row tile moved in 16-byte chunks (its queries in, its
// output out): chunk column c of rows r0 + k STEP, k < COUNT. STEP is a multiple of 8, which
// keeps the swizzle's row bits, so row k's chunk is STEP * 128 bytes past row k - 1's and a
// copy's addresses step by additions, not by a row's product with the stride.
template <int D>
struct TileShare {
  static constexpr int CHUNKS = D / 8, STEP = 128 / CHUNKS, COUNT = 64 / STEP;
  int c, r0;
  __device__ __forceinline__ explicit TileShare(int wtid) : c(wtid % CHUNKS), r0(wtid / CHUNKS) {}
  __device__ __forceinline__ int row(int k) const { return r0 + k * STEP; }
  __device__ __forceinline__ unsigned at(int k) const { return swizzled(r0, c) + k * STEP * 128; }
};

// A thread's share of every K and V tile load_kv copies, fixed for the CTA: the thread owns one
// 16-byte chunk column c and the rows r0, r0 + P, r0 + 2P, r0 + 3P (P = THREADS / (D / 8)), which
// hold keys kc, kc + P/4, kc + 2P/4, kc + 3P/4 of a tile (kc = key_of_column(r0)): all in one
// 16-key group. `at` is row r0's chunk c in a swizzled tile (row r0 + m P is m P 128 bytes
// further), k_col and v_col the thread's chunk of kv head g in cache row 0 of each cache (row
// r's is r * row_bytes further; the two caches are separate allocations).
// `at` and kc live in shared memory, packed (at | kc << 16), one word a thread, written once: with
// 128 registers a thread ptxas recomputed them from the thread index at every key tile (about 18
// instructions), where one shared load and two to unpack do.
template <int D>
struct KvShare {
  static constexpr int CHUNKS = D / 8;
  static constexpr int PASS = THREADS / CHUNKS;
  static constexpr int KEY_STEP = PASS / 4;  // keys between a thread's rows r and r + PASS
  static_assert(PASS % 8 == 0 && KEY_STEP * (BN / PASS) <= 16, "a thread's keys in one 16-key group");
  const unsigned* packed;  // this thread's word
  unsigned long long k_col, v_col;
  unsigned row_bytes;
  __device__ __forceinline__ KvShare(unsigned* words, const bf16* key_cache, const bf16* value_cache, int g,
                                     int kv_heads) {
    const int c = threadIdx.x % CHUNKS, r0 = threadIdx.x / CHUNKS;
    packed = words + threadIdx.x;
    words[threadIdx.x] = swizzled(r0, c) | (unsigned)hp1_prefill::key_of_column(r0) << 16;
    k_col = reinterpret_cast<unsigned long long>(key_cache + g * D + 8 * c);
    v_col = reinterpret_cast<unsigned long long>(value_cache + g * D + 8 * c);
    row_bytes = (unsigned)(kv_heads * D * 2);
  }
};

// The block-table entry of this thread's 16-key group in the key tile from k0, with blocks of 16
// keys or more (key 0's block for a group past `end`, whose copies read nothing). The key loop
// asks for the next tile's entry a tile ahead, so that its round trip is not waited for before
// that tile's copies issue (at the top of every tile, before its product: RESULTS run 278's
// long-scoreboard stall, once a tile a warp).
template <int D>
__device__ __forceinline__ int group_block(const KvShare<D>& sh, const int* __restrict__ table, int log2_block, int k0,
                                           int end) {
  const int t0 = k0 + (int)(*sh.packed >> 16);
  return __ldg(&table[(t0 < end ? t0 : 0) >> log2_block]);
}

// The K and V rows of keys k0 .. k0 + 63 into two swizzled tiles, by all THREADS threads (each its
// KvShare), key k0 + key_of_column(r) in row r (the gate's layout); keys at or past `end` are
// zero-filled without a read. With blocks of 16 keys or more a thread's 16-key group is in one
// block, `block` (group_block's), and it steps its cache rows by KEY_STEP; smaller blocks look
// each key up. Each copy's address is one wide multiply-add of its cache row onto the chunk's
// column. Branch-free per key: a key past `end` copies 0 bytes from a row inside a looked-up block.
template <int D>
__device__ __forceinline__ void load_kv(unsigned k_dst, unsigned v_dst, const KvShare<D>& sh,
                                        const int* __restrict__ table, int log2_block, int k0, int end, int block) {
  using S = KvShare<D>;
  const int mask = (1 << log2_block) - 1;
  const unsigned word = *sh.packed, at = word & 0xffffu;
  const int t0 = k0 + (int)(word >> 16);
  // Key t's cache row (key 0's for a key past `end`, whose copy reads nothing).
  const auto row_of = [&](int t) {
    const int key = t < end ? t : 0;
    return ((unsigned)__ldg(&table[key >> log2_block]) << log2_block) | (unsigned)(key & mask);
  };
  // Row r0 + m PASS of both tiles from cache row `row`, key t0 + m KEY_STEP.
  const auto copy = [&](int m, unsigned row) {
    const bool valid = t0 + m * S::KEY_STEP < end;
    const unsigned dst = at + m * S::PASS * 128;
    tc::cp_async_16(k_dst + dst, reinterpret_cast<const void*>(sh.k_col + (unsigned long long)row * sh.row_bytes), valid);
    tc::cp_async_16(v_dst + dst, reinterpret_cast<const void*>(sh.v_col + (unsigned long long)row * sh.row_bytes), valid);
  };
  // Two loops, not one with a select per key: merged, ptxas predicates the per-key lookups into
  // the one-block path, whose issue slots they then take.
  if (log2_block >= 4) {
    const unsigned first = ((unsigned)block << log2_block) | (unsigned)((t0 < end ? t0 : 0) & mask);
#pragma unroll
    for (int m = 0; m < BN / S::PASS; ++m) copy(m, first + m * S::KEY_STEP);
  } else {
#pragma unroll
    for (int m = 0; m < BN / S::PASS; ++m) copy(m, row_of(t0 + m * S::KEY_STEP));
  }
}

template <int D>
struct Acc;
template <>
struct Acc<64> {
  static __device__ __forceinline__ void pv(float (&o)[32], const unsigned (&a)[4], unsigned long long d) { wgmma_rs_m64n64k16<1>(o, a, d); }
};
template <>
struct Acc<128> {
  static __device__ __forceinline__ void pv(float (&o)[64], const unsigned (&a)[4], unsigned long long d) { wgmma_rs_m64n128k16<1>(o, a, d); }
};

template <int D, int FIR, int RELU, int HPC, bool UNIT>
__device__ __forceinline__ void prefill(const bf16* __restrict__ q, long long q_row_stride, const QNormRope& qn,
                                        const bf16* __restrict__ key_cache,
                                        const bf16* __restrict__ value_cache, const int* __restrict__ block_table, int max_blocks,
                                        const int* __restrict__ seq_lens, const int* __restrict__ query_start_loc, int num_seqs,
                                        const float* __restrict__ sigma, const float* __restrict__ gamma, int heads, int kv_heads,
                                        int log2_block, float scale, int fir_k, int relu_pre, float clip_min, float clip_max,
                                        bf16* __restrict__ out, bool late_clamp) {
  constexpr int TILE = BN * D * 2;        // bytes of one 64-row tile
  constexpr int BM = 64 * WGS / HPC;      // query rows per CTA
  const int wg = threadIdx.x >> 7, wtid = threadIdx.x & 127;
  // Warpgroup wg: head h0 + wg on the CTA's rows (HPC = 2), or rows 64 wg .. of head h0.
  const int h = blockIdx.x * HPC + (HPC == 2 ? wg : 0), g = h / (heads / kv_heads);
  // The head's gate parameters are asked for before the tile's lookup, whose chain of dependent
  // loads then covers their latency (asked for after it, their wait showed in ncu's samples,
  // RESULTS run 277).
  const float sigma_h = __ldg(&sigma[h]), gamma_h = __ldg(&gamma[h]);
  const PrefillTile tile = find_prefill_tile(query_start_loc, seq_lens, num_seqs, blockIdx.y, BM);
  if (tile.seq < 0) return;
  const int rb = HPC == 2 ? 0 : 64 * wg;
  const int wg_rows = max(0, min(64, tile.rows - rb));

  // 1024-byte aligned tiles: Q of each warpgroup, then K stages 0 and 1, then V stages 0 and 1.
  const unsigned base = (tc::smem_addr(tc::dynamic_smem()) + 1023u) & ~1023u;
  const unsigned q_tile = base + wg * TILE, k_tile = base + WGS * TILE, v_tile = k_tile + 2 * TILE;
  const int* table = block_table + (long long)tile.seq * max_blocks;
  const int first_pos = tile.prefix + tile.row0;
  const int key_end = first_pos + tile.rows;  // keys of the CTA's last row; seq_len >= key_end
  const int wg_last = first_pos + rb + wg_rows - 1;

  const long long q_row0 = tile.token0 + tile.row0 + rb;
  const TileShare<D> tile_share(wtid);
  if (!qn.rope) {
    const bf16* src = q + (q_row0 + tile_share.r0) * q_row_stride + (long long)h * D + 8 * tile_share.c;
#pragma unroll
    for (int k = 0; k < TileShare<D>::COUNT; ++k) {
      const bool valid = tile_share.row(k) < wg_rows;
      tc::cp_async_16(q_tile + tile_share.at(k), valid ? src : q, valid);
      src += TileShare<D>::STEP * q_row_stride;
    }
  }
  __shared__ unsigned share_words[THREADS];
  const KvShare<D> share(share_words, key_cache, value_cache, g, kv_heads);
  const bool group_blocks = log2_block >= 4;  // one block-table entry a thread and key tile
  load_kv<D>(k_tile, v_tile, share, table, log2_block, 0, key_end,
             group_blocks ? group_block(share, table, log2_block, 0, key_end) : 0);
  tc::cp_async_commit();
  int next_block = group_blocks ? group_block(share, table, log2_block, BN, key_end) : 0;
  // Queries from qkv: normed and rotated here while the first key tile flies; the fence at the
  // top of the key loop orders these generic stores before the wgmmas read them.
  if (qn.rope)
    norm_rope_q_tile<D, 64, 128>(q, q_row_stride, qn, q_row0, first_pos + rb, wg_rows, h, wtid,
                                 [&](int r, int c, uint4 v) { tc::st_shared_16(q_tile + swizzled(r, c), v); });

  const int warp = wtid >> 5, lane = threadIdx.x & 31;
  const int row_a = 16 * warp + (lane >> 2);
  const int pos_a = first_pos + rb + row_a, pos_b = pos_a + 8;
  const hp1_prefill::GateParams gate =
      UNIT ? hp1_prefill::unit_gate_params(scale, sigma_h, clip_min, clip_max, fir_k, relu_pre)
           : hp1_prefill::gate_params(scale, sigma_h, gamma_h, clip_min, clip_max, fir_k, relu_pre);
  const bool pairs_ok = late_clamp && gate.gamma != 0.0f;  // this head may clamp on pairs
  const hp1_prefill::PackedClamp bounds = hp1_prefill::packed_clamp(gate);
  hp1_prefill::FirTail<FIR> tail;
  hp1_prefill::fir_tail_init(tail);

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;

  // q_tile differs between warpgroups, so ptxas cannot prove it warp-uniform and keeps its
  // descriptor in vector registers, moved to uniform ones (R2UR) at every wgmma; taken from lane
  // 0 it is provably uniform and stays in uniform registers.
  const WgmmaDesc q_desc(__shfl_sync(0xffffffffu, q_tile, 0), 16, 1024), k_desc(k_tile, 16, 1024),
      v_desc(v_tile, 8192, 1024);
  const int tiles = (key_end + BN - 1) / BN;
  for (int j = 0; j < tiles; ++j) {
    const int stage = j & 1;
    tc::cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
    if (j + 1 < tiles) {
      const unsigned next = (stage ^ 1) * TILE;
      load_kv<D>(k_tile + next, v_tile + next, share, table, log2_block, (j + 1) * BN, key_end, next_block);
      tc::cp_async_commit();
      if (group_blocks) next_block = group_block(share, table, log2_block, (j + 2) * BN, key_end);
    }
    // A warpgroup whose rows all end before this key tile has nothing left to add (uniform over
    // the warpgroup, as wgmma needs); it still loads and meets the barriers.
    if (wg_rows == 0 || j * BN > wg_last) continue;
    const WgmmaDesc kd = k_desc.advanced(stage * TILE), vd = v_desc.advanced(stage * TILE);

    float s[32];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const unsigned off = (kk >> 2) * 8192 + (kk & 3) * 32;
      wgmma_ss_m64n64k16(s, q_desc.at(off), kd.at(off), kk);
    }
    wgmma_commit();
    wgmma_wait<0>();

    float (&frag)[8][4] = *reinterpret_cast<float (*)[8][4]>(s);
    // Tiles wholly below the diagonal clamp after rounding (two instructions a pair, not two a
    // score); the diagonal's tiles, and every tile of a head whose gate has gamma 0 (never in
    // the unit form, whose gate has gamma 1), take the exact form.
    const bool clamp_pairs = pairs_ok && !hp1_prefill::gate_tile_needs_mask(j * BN, pos_a, pos_b);
    if (clamp_pairs)
      hp1_prefill::gate_tile<FIR, RELU, false, false, UNIT>(frag, tail, j * BN, pos_a, pos_b, gate);
    else
      hp1_prefill::gate_tile<FIR, RELU, true, true, UNIT>(frag, tail, j * BN, pos_a, pos_b, gate);

    // Every A fragment is packed before the fence, so no register a wgmma reads changes
    // between the fence and the commit.
    unsigned a[BN / 16][4];
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      a[kk][0] = tc::pack_bf16x2(frag[2 * kk][0], frag[2 * kk][1]);
      a[kk][1] = tc::pack_bf16x2(frag[2 * kk][2], frag[2 * kk][3]);
      a[kk][2] = tc::pack_bf16x2(frag[2 * kk + 1][0], frag[2 * kk + 1][1]);
      a[kk][3] = tc::pack_bf16x2(frag[2 * kk + 1][2], frag[2 * kk + 1][3]);
    }
    if (clamp_pairs) {
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) a[kk][i] = hp1_prefill::clamp_bf16x2(a[kk][i], bounds);
    }
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) Acc<D>::pv(o, a[kk], vd.at(kk * 2048));
    wgmma_commit();
    wgmma_wait<0>();
  }

  // The output goes through this warpgroup's Q tile, whose last reader (the QK wgmmas of the
  // last key tile) was waited for: each thread puts its bf16 pairs there, swizzled as Q (row r's
  // lanes write distinct banks), and the warpgroup then stores whole rows in 16-byte pieces.
  // Stored straight from the fragments, 4 bytes a store, a warp's stores queued in the LSU
  // (ncu's lg stall) and held its CTA at exit until they drained: a third of the CTA's warp
  // time at B16_T1024 went to its first and last steps (RESULTS run 277; through the Q tile the
  // points of short sequences ran 11-20% faster, run 278).
  // o[4n + e]: n-block n, e = 0, 1 row a, e = 2, 3 row b, columns 8n + 2 (lane % 4) + (e & 1).
  if (wg_rows == 0) return;
  if (UNIT) {
    const float gain = hp1_prefill::gain_of(gamma_h, scale);
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = __fmul_rn(gain, o[i]);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row_a + 8 * half;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      tc::st_shared_4(q_tile + swizzled(r, n) + 4 * (lane & 3),
                      tc::pack_bf16x2(o[4 * n + 2 * half], o[4 * n + 2 * half + 1]));
  }
  warpgroup_sync(wg);
  // Each thread stores the chunks it loaded the queries into.
  const long long row_elems = (long long)heads * D;
  uint4* dst = reinterpret_cast<uint4*>(out + (q_row0 + tile_share.r0) * row_elems + (long long)h * D + 8 * tile_share.c);
#pragma unroll
  for (int k = 0; k < TileShare<D>::COUNT; ++k) {
    if (tile_share.row(k) >= wg_rows) break;
    *dst = tc::ld_shared_16(q_tile + tile_share.at(k));
    dst += TileShare<D>::STEP * row_elems / 8;
  }
}

}  // namespace hp1_wgmma

// One entry per head dim, heads per CTA and gate variant: the general gate (fir_k and relu_pre
// read at run time, one CTA per SM) and the model's configuration specialised at compile time
// (3 taps, relu_pre, the unit form; two CTAs per SM), which the host picks whenever the layer's
// gate parameters are exactly that.
#define HP1_PREFILL_WGMMA_ENTRY(D, HPC, NAME, FIR, RELU, UNIT, MIN_CTAS)                                                     \
  extern "C" __global__ void __launch_bounds__(hp1_wgmma::THREADS, MIN_CTAS) NAME(                                     \
      const bf16* __restrict__ q, long long q_row_stride, const float* __restrict__ rope, int max_pos,                \
      UCLIP_PARAMS(q_norm),                                                                                           \
      const bf16* __restrict__ key_cache, const bf16* __restrict__ value_cache, const int* __restrict__ block_table,  \
      int max_blocks,                                                                                                 \
      const int* __restrict__ seq_lens, const int* __restrict__ query_start_loc, int num_seqs,                        \
      const float* __restrict__ sigma, const float* __restrict__ gamma, int heads, int kv_heads, int log2_block,     \
      float scale, int fir_k, int relu_pre, float clip_min, float clip_max, bf16* __restrict__ out, int late_clamp) { \
    pdl_begin();                                                                                                      \
    const QNormRope qn = {rope, max_pos, UCLIP_OF(q_norm)};                                                          \
    hp1_wgmma::prefill<D, FIR, RELU, HPC, UNIT>(q, q_row_stride, qn, key_cache, value_cache, block_table, max_blocks, seq_lens, \
                                          query_start_loc, num_seqs, sigma, gamma, heads, kv_heads, log2_block,       \
                                          scale, fir_k, relu_pre, clip_min, clip_max, out, late_clamp != 0);          \
  }

#define HP1_PREFILL_WGMMA_ENTRIES(D, HPC, MIN_CTAS)                                                                     \
  HP1_PREFILL_WGMMA_ENTRY(D, HPC, hp1_prefill_wgmma_d##D##_h##HPC, 0, -1, false, 1)                                   \
  HP1_PREFILL_WGMMA_ENTRY(D, HPC, hp1_prefill_wgmma_d##D##_h##HPC##_f3_relu, 3, 1, true, MIN_CTAS)

HP1_PREFILL_WGMMA_ENTRIES(64, 1, 2)
HP1_PREFILL_WGMMA_ENTRIES(64, 2, 2)
HP1_PREFILL_WGMMA_ENTRIES(128, 1, 1)
HP1_PREFILL_WGMMA_ENTRIES(128, 2, 2)
