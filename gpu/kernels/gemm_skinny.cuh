#line 2 "gemm_skinny.cuh"
// gemm_skinny.cuh: y[M, N] = x[M, K] W[N, K]^T for decode-sized M, bf16 in, f32
// accumulation, bf16 out (SPEC section 4), and the same product with the elementwise op after it
// fused into its epilogue (EPILOGUES below). Needs pdl.cuh, loads.cuh, ops_common.cuh (bf16,
// bf16_bits, round_bf16, UClip, the fault word) and tensor_core.cuh (the mma wrapper) before it;
// gpu::kernels concatenates them. The entry points are in gemm_skinny.cu; the decode megakernel
// (decode_mega.cu) runs gemm_block, the body of one CTA, as its tasks.
//
// WHY THIS SHAPE. At M <= 64 the product is bound by reading W once (N K 2 bytes): x and y are
// tiny. But at M = 8 that is already 8 FMA per weight byte read, 2 x 8 x 4.3e12 = 69 TFLOP/s to
// keep up with HBM, the whole f32 FMA rate of an H200, so the products go to the tensor cores
// (mma.sync m16n8k16, bf16 in, f32 accumulate) at every M: one arithmetic for every M is also
// what keeps a row's bits independent of M (below).
//
// ALGORITHM. A CTA owns ROWS consecutive rows of W and one slab of 8 MT rows of x (all of x when
// M <= 8 MT; a batch wider than 64 rows runs in slabs of 64, the CTAs of one W block adjacent in
// the grid), and walks K in steps of 32. Its WARPS = 8 warps split the steps: warp w takes steps
// s = w, w + 8, w + 16, ... in increasing order. In a step, lane (g = lane >> 2, t = lane & 3)
// loads 16 bytes (8 consecutive k, k = 32 s + 8 t) of W rows 16 r + g and 16 r + g + 8 of each
// 16-row tile r, and 16 bytes of x row 8 j + g of each 8-row tile j of x, straight into
// registers: W is the mma's A operand (rows of W), x its B operand (columns = rows of x). The
// 16-byte loads fit the fragments with no shuffle because k may be permuted inside an mma as
// long as A and B agree: fragment slots (2t, 2t+1, 2t+8, 2t+9) of the first mma hold k offsets
// 8t + (0, 1, 2, 3) and those of the second 8t + (4, 5, 6, 7), the same for A and B. Each warp
// issues the loads of U steps before their mmas, so U steps of W are in flight per lane. W is
// read with ld.global.nc.L1::no_allocate (streamed once: L1 is left to x, which every CTA
// reads, through L1 in a kernel of its own and at L2 in the megakernel: loads.cuh); rows of W
// past N and rows of x past M are not read (their registers are 0), nor is k past K (the last
// step of a K that is not a multiple of 32 is zero-padded).
// Reduction: each warp's f32 accumulators go to shared memory, then each output is the sum of the
// 8 warps' partials in warp order ((p0 + p1) + p2) + ..., and the epilogue takes that sum.
//
// BATCH INVARIANCE AND DETERMINISM. The additions that make y[m][n] are: the warp's steps in
// order (each mma adds its 16 products into the accumulator in the hardware's fixed order), then
// the warps in order. Which steps a warp takes depends on K alone (not on M, ROWS or U), a step
// past the last one runs no mma at all, and an output element of an mma depends only on its own
// row of A and column of B. So y[m] has the same bits at every M, with any neighbours in x (NaN
// included), under every (MT, ROWS) instantiation, and on every run. No atomics.
// gemm_skinny_wg.cu computes the same sums on wgmma (sm_90a), so this order is the contract of
// both files. An epilogue only decides what becomes of each finished sum (and of the sum 8 rows
// of W below it, in the same CTA), so every epilogue keeps all of this.
//
// EPILOGUES (a template parameter; each output's sum s of x row r and W row c, a = round_bf16(s)
// the GEMM's own round point, then exactly the arithmetic of the standalone kernel that would
// read a from memory, so the bits equal the GEMM followed by that kernel):
//   Store            y[r, c] = bf16(s).
//   PeriLn           peri_ln_residual.cu after o_proj and down_proj, with N = hidden:
//                    x_out[r, c] = bf16(x[r, c] + round_bf16(after(c, a))),
//                    h_out[r, c] = bf16(before(c, x_out[r, c])); there is no y.
//   SiluMul          silu_mul.cu after the gate/up GEMM, W in the interleaved gate/up layout of
//                    gpu::gemm::layout (rows 16 i + j are gate rows 8 i + j, rows 16 i + 8 + j up
//                    rows 8 i + j, j < 8): output channel c = 8 i + j takes its gate from row
//                    16 i + j and its up from row 16 i + 8 + j, rows 8 apart in one 16-row mma
//                    tile of the CTA, so ROWS >= 16 (N = 2 I). out[r, c] = bf16(silu(g) * u),
//                    g and u the two rounded sums (silu_product, as silu_mul.cu computes it).
//   QkNormRopeCache  qk_norm_rope_cache.cu after the QKV GEMM, W in the permuted q/k layout of
//                    gpu::gemm::layout (in each q and k head of D rows, 16-row group p holds
//                    channels 8 p + j then D/2 + 8 p + j, j < 8; v heads as stored): the two
//                    channels of a RoPE pair are rows 8 apart of one 16-row tile, so ROWS >= 16.
//                    For token r at pos = positions[r] (clamped into the table), slot =
//                    slot_mapping[r]: q heads norm, rotate and round into q_out[r, h, :], k heads
//                    the same into key_cache[slot, g, :], v rows round into value_cache[slot, g, :];
//                    a negative slot writes no k or v, and the CTA of W block 0 records a bad
//                    position or a slot past the cache for each of its tokens (once per token, as
//                    that kernel does).
// The epilogue works on the sums in shared memory with every thread of the CTA: Store and PeriLn
// one output per thread and pass, SiluMul and QkNormRopeCache one pair of rows 8 apart,
// consecutive threads on consecutive outputs of one x row. Every buffer the epilogue touches
// (the residual, the outputs, positions, slots, the caches) is touched only after pdl_begin().
//
// TEMPLATE PARAMETERS (one extern "C" entry per triple, gemm_skinny_m{8 MT}_r{ROWS}{suffix},
// suffix "" for Store, _periln, _silu_mul or _qk_norm_rope_cache, listed in gemm_skinny.cu):
//   MT    8-row tiles of x: the launch serves 1 <= M <= 8 MT. 1, 2, 4 or 8.
//   ROWS  rows of W per CTA: 8, 16, 32 or 64. ROWS = 8 fills the upper half of the mma's 16-row
//         tile with zeros (half the tensor work wasted, no bytes): it doubles the CTAs of a small
//         N. R = max(1, ROWS / 16) tiles of 16 rows; R * MT <= 8 keeps the accumulators at 32
//         registers. The pairing epilogues (SiluMul, QkNormRopeCache) take ROWS >= 16 only.
//   Epi   the epilogue: Store, PeriLn, SiluMul or QkNormRopeCache (its buffers as its fields).
//   U     steps in flight per warp, derived: 16 / (W vectors + x vectors per step), so about 64
//         registers of loads in flight. Bytes of W in flight per lane, 16 U ROWS / 8:
//                 ROWS 8   16   32   64
//           MT 1     128  160  192  128
//           MT 2      80  128  128  128
//           MT 4      48   64  128    -
//           MT 8      16   32    -    -
//         At MT 8 the x vectors take the registers: those loads hit L2, not HBM.
//
// LAUNCH. Grid (ceil(N / ROWS) * ceil(M / (8 MT)), 1, 1): CTA b takes W block b / slabs and slab
// b % slabs. Block THREADS = 256, static shared memory
// WARPS * 8 MT * (ROWS + 4) * 4 bytes (3 KB to 41 KB; the + 4 keeps the fragment stores free of
// bank conflicts). Launch bounds 2 CTAs per SM (at most 128 registers a thread; ptxas uses 79 to
// 128 on sm_90a, every epilogue, no spills): 512 threads, so 64 to 96 KB of W in flight per SM
// where a lane holds 128 to 192 bytes, beyond the ~30 KB that Little's law asks of an H200
// (4.3 TB/s x ~0.9 us / 132 SMs), and under it where the table says less. The three-CTA entries
// (gemm_skinny_c3_*, gemm_skinny.cu) run the same body at 3 CTAs an SM, so that a grid of 2 to 3
// CTAs an SM runs in one wave instead of two.
//
// SHARED X (gemm_shared_x; entries gemm_skinny_sx_m64_r16{suffix}). At 64 rows of x a plain CTA
// reads its whole slab of x (128 KB at K = 1024) from L2 for 16 rows of W (32 KB), and its U = 1
// leaves each warp one step of loads in flight: gate/up at 64 and 128 rows ran under 1 TB/s, held
// by load latency (ncu, RESULTS run 134). The shared-x form runs one CTA an SM (launch bounds 1,
// ptxas 155 to 158 registers, no spills) that copies its slab of x into dynamic shared memory
// once (cp.async; zeros past K and in rows past M, the zeros gemm_block keeps in registers there,
// so the loads below take no predicate), then computes W blocks blockIdx.x / slabs, + gridDim.x
// / slabs, ... in turn. Each block is gemm_block's: the same steps per warp in the same order,
// the same mma (step_mma) on the same fragment registers, x's fragments now 16-byte shared
// loads, the same partial sums (store_partials, Tile::sum) and epilogue, so the same bits at
// every M. A warp holds CH = 8 / WV steps of W in registers (128 bytes a lane: a whole block at
// K = 1024), and loads the next chunk (of this block or the next) before multiplying the
// current one, so W streams during the mma and the epilogue; the block after next is asked of L2
// as each block starts. A row of x takes shared_x_stride(K) elements: 64 bytes past a multiple
// of 128 (the two rows of one phase of a 16-byte load in different banks) and at least the 16
// bytes a last, partial step reads past K. Dynamic shared memory 64 * stride * 2 + WARPS * 64 *
// 20 * 4 bytes (176 KB at K = 1024; gpu::gemm::shared_x_bytes, up to 227 KB). Grid: slabs
// times the CTAs sharing one slab's W blocks evenly (gpu::gemm::GemmPlan::skinny_shared_x);
// gridDim.x must be a multiple of slabs. gpu::gemm::GemmPlan::decode_rows takes it where each
// CTA gets 3 blocks or more.
//
// STAGED X (one slab of at most 8 rows, x staged in shared memory, and the split-K attention's
// partials as x): gemm_skinny_staged.cuh, which follows this file.
//
// BUFFERS (bf16 as its 16 bits, row-major, 16-byte aligned):
//   x  [M, K]    w  [N, K] (as safetensors stores *_proj.weight, or a layout above)
//   Store            y [M, N] out
//   PeriLn           x_res [M, N] (the residual stream, read), x_out, h_out [M, N] out; after,
//                    before: UClipNorm parameters over N (ops_common.cuh)
//   SiluMul          out [M, N / 2]
//   QkNormRopeCache  positions int32 [M], slot_mapping int64 [M], rope f32 [max_pos, D] (as
//                    qk_norm_rope_cache.cu), q_norm, k_norm over D, q_out [M, Hq, D],
//                    key_cache, value_cache [num_slots, Hkv, D], fault (ops_common.cuh)
// ASSUMPTIONS, checked on the host (gpu::gemm): 1 <= M (past 8 MT in slabs), M N < 2^63; K a
// positive multiple of 8 (a 16-byte load stays inside a row) up to 2^30 (k indices of steps past
// the end stay in an int); 1 <= N < 2^31; the grid under 2^31 CTAs; x and w 16-byte aligned. No
// output overlaps x (other CTAs still read it): distinct buffers, as Rust's borrows make them.
// SiluMul: N a multiple of 16 (whole groups of 8 gate and 8 up rows). QkNormRopeCache: N =
// (Hq + 2 Hkv) D, D a multiple of 16 (a 16-row tile never straddles two heads); the buffers'
// sizes as above.

namespace gemm_skinny {

constexpr int WARPS = 8;
constexpr int THREADS = WARPS * 32;
constexpr int STEP_K = 32;

__device__ __forceinline__ uint4 zero4() { return make_uint4(0u, 0u, 0u, 0u); }

template <int MT, int ROWS>
struct Config {
  static constexpr int R = ROWS >= 16 ? ROWS / 16 : 1;  // 16-row mma tiles per CTA
  static constexpr bool HI = ROWS >= 16;                // rows g + 8 of each tile are real
  static constexpr int WV = ROWS / 8;                   // W vectors per lane per step
  static constexpr int U = 16 / (WV + MT) > 0 ? 16 / (WV + MT) : 1;
  static constexpr int PAD = ROWS + 4;                  // floats per partial row in shared memory
  static_assert(R * MT <= 8, "accumulators past 32 registers");
};

// The CTA's finished tile: the 8 warps' partials in shared memory, and where the tile sits.
template <int MT, int ROWS>
struct Tile {
  static constexpr int XR = 8 * MT;      // rows of x (gemm_epilogue.cuh's tile interface)
  static constexpr int WR = ROWS;        // rows of W
  static constexpr int THREADS = gemm_skinny::THREADS;
  const float* part;  // [WARPS][8 MT][PAD]
  int m;              // rows of x in this slab, at most 8 MT
  long long row0;     // the slab's first row of x
  int n0;             // the CTA's first row of W
  int n;

  __device__ __forceinline__ bool has(int xr, int wr) const { return xr < m && n0 + wr < n; }

  // The output of x row row0 + xr and W row n0 + wr: the warps' partials added in warp order.
  __device__ __forceinline__ float sum(int xr, int wr) const {
    constexpr int PAD = Config<MT, ROWS>::PAD;
    float s = part[xr * PAD + wr];
#pragma unroll
    for (int q = 1; q < WARPS; ++q) s += part[(q * MT * 8 + xr) * PAD + wr];
    return s;
  }
};

// One K step of a warp: the two mma of each (16-row W tile r, 8-row x tile j), W's vectors wv
// (vector 2 r + h is row 16 r + g + 8 h; r alone at ROWS = 8) as A and x's as B, in the order every
// form of the kernel keeps (the fragment layout is in the header's ALGORITHM).
template <int MT, int ROWS>
__device__ __forceinline__ void step_mma(float (&acc)[Config<MT, ROWS>::R][MT][4],
                                         const uint4 (&wv)[Config<MT, ROWS>::WV], const uint4 (&xv)[MT]) {
  using C = Config<MT, ROWS>;
#pragma unroll
  for (int r = 0; r < C::R; ++r) {
    const uint4 lo = wv[C::HI ? 2 * r : r];
    const uint4 hi = C::HI ? wv[2 * r + 1] : zero4();
    const unsigned a0[4] = {lo.x, hi.x, lo.y, hi.y};
    const unsigned a1[4] = {lo.z, hi.z, lo.w, hi.w};
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      tc::mma_bf16_16816(acc[r][j], a0, xv[j].x, xv[j].y);
      tc::mma_bf16_16816(acc[r][j], a1, xv[j].z, xv[j].w);
    }
  }
}

// The warp's accumulators to shared memory: part[warp][x row][W row]. Fragment c0, c1 are W row
// 16 r + g and x rows 8 j + 2 t, 8 j + 2 t + 1; c2, c3 the same x rows of W row 16 r + g + 8.
template <int MT, int ROWS>
__device__ __forceinline__ void store_partials(float* part, const float (&acc)[Config<MT, ROWS>::R][MT][4]) {
  using C = Config<MT, ROWS>;
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  float* mine = part + warp * MT * 8 * C::PAD;
#pragma unroll
  for (int r = 0; r < C::R; ++r) {
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      const int xr = 8 * j + 2 * t, wr = 16 * r + g;
      mine[xr * C::PAD + wr] = acc[r][j][0];
      mine[(xr + 1) * C::PAD + wr] = acc[r][j][1];
      if (C::HI) {
        mine[xr * C::PAD + wr + 8] = acc[r][j][2];
        mine[(xr + 1) * C::PAD + wr + 8] = acc[r][j][3];
      }
    }
  }
}

// Where CTA `block` of a launch (or task `block` of a megakernel op) works: its W block's first
// row, and its slab of x. Slabs of 8 MT rows of x; the slabs of one W block are adjacent CTAs, so
// W is read from HBM about once and from L2 by the other slabs.
template <int MT>
struct BlockPlace {
  int n0, slab;
  __device__ __forceinline__ BlockPlace(unsigned block, int m, int rows) {
    const int slabs = (m + 8 * MT - 1) / (8 * MT);
    n0 = (block / slabs) * rows;
    slab = block % slabs;
  }
};

// Asks L2 for the ROWS rows of W from row n0 (fewer at the end of W).
template <int ROWS>
__device__ __forceinline__ void prefetch_w_rows(const bf16* w, int n0, int n, int k) {
  const long long bytes = (long long)min(ROWS, n - n0) * k * 2;
  prefetch_l2(w + (long long)n0 * k, (unsigned)min(bytes, 1LL << 30));
}

// Asks L2 for the W block at `at` (its first slab's CTA only, so each byte is asked for once).
template <int MT, int ROWS>
__device__ __forceinline__ void prefetch_w_block(const BlockPlace<MT>& at, const bf16* w, int n, int k) {
  if (at.slab == 0) prefetch_w_rows<ROWS>(w, at.n0, n, k);
}

// Zeroes a warp's accumulators.
template <int MT, int ROWS>
__device__ __forceinline__ void zero_acc(float (&acc)[Config<MT, ROWS>::R][MT][4]) {
#pragma unroll
  for (int r = 0; r < Config<MT, ROWS>::R; ++r)
#pragma unroll
    for (int j = 0; j < MT; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[r][j][c] = 0.0f;
}

// The product of W block `block / slabs` and slab `block % slabs` of x (CTA `block` of the grid
// in LAUNCH), then its epilogue. `part` is the CTA's WARPS * 8 MT * PAD floats of shared memory;
// every thread of the CTA calls it; In reads x (loads.cuh). Nothing here depends on which CTA runs
// the block. OWN_LAUNCH: the CTA is the launch's own, which asks L2 for its W block (constant)
// before waiting on the kernel that writes x (pdl.cuh), so under PDL the block streams in during
// that kernel's tail; the megakernel prefetches and waits itself.
// U: a warp's steps per batch of loads (Config's by default; any U adds the same steps in the
// same order, so the bits do not depend on it).
template <int MT, int ROWS, class In, bool OWN_LAUNCH, class Epi, int U = Config<MT, ROWS>::U>
__device__ __forceinline__ void gemm_block(unsigned block, float* part, const bf16* __restrict__ x,
                                           const bf16* __restrict__ w, int m, int n, int k, const Epi& epi) {
  using C = Config<MT, ROWS>;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const BlockPlace<MT> at(block, m, ROWS);
  const int n0 = at.n0;
  const long long row0 = (long long)at.slab * 8 * MT;
  x += row0 * k;
  m = min(m - (int)row0, 8 * MT);
  const int steps = (k + STEP_K - 1) / STEP_K;

  if constexpr (OWN_LAUNCH) {
    if (threadIdx.x == 0) prefetch_w_block<MT, ROWS>(at, w, n, k);
    pdl_begin();
  }
  // One slab of at most 8 rows is latency-bound, and its epilogue's loads wait on the product;
  // a wider one is issue-bound, where the prefetches cost more than they save (RESULTS run 65:
  // -3% at B1 and B8, +4% at B32 and +10% at B128 with them at every MT).
  if constexpr (MT == 1) epi.prefetch(Tile<MT, ROWS>{part, m, row0, n0, n});

  // This lane's W rows (vector v = 2 r + h is row 16 r + g + 8 h) and x rows (tile j: row 8 j + g).
  const bf16* w_row[C::WV];
  bool w_ok[C::WV];
#pragma unroll
  for (int v = 0; v < C::WV; ++v) {
    const int row = n0 + (C::HI ? 16 * (v >> 1) + 8 * (v & 1) : 0) + g;
    w_ok[v] = row < n;
    w_row[v] = w + (long long)row * k + 8 * t;
  }
  const bf16* x_row[MT];
  bool x_ok[MT];
#pragma unroll
  for (int j = 0; j < MT; ++j) {
    x_ok[j] = 8 * j + g < m;
    x_row[j] = x + (long long)(8 * j + g) * k + 8 * t;
  }

  float acc[C::R][MT][4];
  zero_acc<MT, ROWS>(acc);

  for (int s0 = warp; s0 < steps; s0 += WARPS * U) {
    uint4 wv[U][C::WV];
    uint4 xv[U][MT];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int kk = (s0 + u * WARPS) * STEP_K;  // + 8 t is in the row pointers
      const bool k_ok = kk + 8 * t < k;          // false for every step past the last
#pragma unroll
      for (int v = 0; v < C::WV; ++v) wv[u][v] = k_ok && w_ok[v] ? tc::ld_stream_16(w_row[v] + kk) : zero4();
#pragma unroll
      for (int j = 0; j < MT; ++j)
        xv[u][j] = k_ok && x_ok[j] ? In::load(reinterpret_cast<const uint4*>(x_row[j] + kk)) : zero4();
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      // Warp-uniform: a step past the last adds nothing, not even zeros, so the additions into an
      // accumulator are the same for every U.
      if (s0 + u * WARPS < steps) step_mma<MT, ROWS>(acc, wv[u], xv[u]);
    }
  }
  // The step trace's marks (pdl.cuh): 1 the product done, 3 the epilogue's stores issued.
  if (OWN_LAUNCH && threadIdx.x == 0) step_trace_mark(1);

  store_partials<MT, ROWS>(part, acc);
  __syncthreads();

  epi(Tile<MT, ROWS>{part, m, row0, n0, n});
  if (OWN_LAUNCH && threadIdx.x == 0) step_trace_mark(3);
}

// The kernel of LAUNCH: CTA blockIdx.x's block.
template <int MT, int ROWS, class Epi, int U = Config<MT, ROWS>::U>
__device__ __forceinline__ void gemm(const bf16* __restrict__ x, const bf16* __restrict__ w, int m, int n, int k,
                                     const Epi& epi) {
  __shared__ float part[WARPS * MT * 8 * Config<MT, ROWS>::PAD];
  gemm_block<MT, ROWS, ReadOnlyLoads, true, Epi, U>(blockIdx.x, part, x, w, m, n, k, epi);
}

// Elements a row of x takes in the shared-x form's shared memory: K padded so that a row's bytes
// are 64 more than a multiple of 128. The 8 lanes of one phase of a 16-byte shared load read
// rows g and g + 1 at 16 t: with that stride the two rows' 64 bytes fall in different banks.
__device__ __forceinline__ int shared_x_stride(int k) { return k + ((64 - 2 * k) % 128 + 128) % 128 / 2; }

// The shared-x form (SHARED X in the header): CTA blockIdx.x keeps slab blockIdx.x % slabs of x in
// dynamic shared memory and computes W blocks blockIdx.x / slabs, + gridDim.x / slabs, ... in
// turn, each exactly as gemm_block does (the same steps per warp, the same mma on the same
// fragment registers, the same partial sums and epilogue), with the next block's W in flight
// during each block's mma and epilogue.
template <int MT, int ROWS, class Epi>
__device__ __forceinline__ void gemm_shared_x(const bf16* __restrict__ x, const bf16* __restrict__ w, int m, int n,
                                              int k, const Epi& epi) {
  using C = Config<MT, ROWS>;
  // Steps of a warp's W vectors in registers per lane (128 bytes: WV <= 8 at ROWS <= 64), twice
  // (the chunk being multiplied and the next).
  constexpr int CH = 8 / C::WV;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int xs = shared_x_stride(k);
  unsigned char* smem = tc::dynamic_smem();
  const unsigned x_base = tc::smem_addr(smem);
  float* part = reinterpret_cast<float*>(smem + (long long)8 * MT * xs * 2);

  const int slabs = (m + 8 * MT - 1) / (8 * MT);
  const int slab = blockIdx.x % slabs, stride = gridDim.x / slabs;
  const int blocks = (n + ROWS - 1) / ROWS;
  const long long row0 = (long long)slab * 8 * MT;
  const int rows = min(m - (int)row0, 8 * MT);
  const int steps = (k + STEP_K - 1) / STEP_K;
  const int chunks = ((steps + WARPS - 1) / WARPS + CH - 1) / CH;  // W loads a warp issues a block

  // This lane's W vectors of chunk c of W block b: steps warp + WARPS (c CH + u), u < CH.
  auto load_w = [&](uint4(&wv)[CH][C::WV], int b, int c) {
#pragma unroll
    for (int u = 0; u < CH; ++u) {
      const int kk = (warp + WARPS * (c * CH + u)) * STEP_K;
      const bool k_ok = kk + 8 * t < k;  // false for every step past the last
#pragma unroll
      for (int v = 0; v < C::WV; ++v) {
        const int row = b * ROWS + (C::HI ? 16 * (v >> 1) + 8 * (v & 1) : 0) + g;
        wv[u][v] = k_ok && row < n ? tc::ld_stream_16(w + (long long)row * k + 8 * t + kk) : zero4();
      }
    }
  };
  auto prefetch = [&](int b) {
    if (threadIdx.x == 0 && b < blocks) prefetch_w_rows<ROWS>(w, b * ROWS, n, k);
  };

  // W is constant: its first chunk is asked for before waiting on the kernel that writes x.
  int b = blockIdx.x / slabs;
  uint4 next[CH][C::WV];
  if (b < blocks) load_w(next, b, 0);
  prefetch(b + stride);
  pdl_begin();
  // The slab's rows, zeros past K (the padding) and in the rows past the slab's last: the zeros
  // gemm_block puts in its registers there, so no load below needs a predicate.
  for (int r = warp; r < 8 * MT; r += WARPS)
    for (int v = lane; v < xs / 8; v += 32) {
      const unsigned dst = x_base + (r * xs + 8 * v) * 2;
      if (r < rows && 8 * v < k) {
        tc::cp_async_16(dst, x + (row0 + r) * k + 8 * v, true);
      } else {
        tc::st_shared_16(dst, zero4());
      }
    }
  tc::cp_async_commit();
  tc::cp_async_wait<0>();
  __syncthreads();

  unsigned x_row[MT];
#pragma unroll
  for (int j = 0; j < MT; ++j) x_row[j] = x_base + ((8 * j + g) * xs + 8 * t) * 2;

  for (; b < blocks; b += stride) {
    prefetch(b + 2 * stride);
    float acc[C::R][MT][4];
    zero_acc<MT, ROWS>(acc);
    for (int c = 0; c < chunks; ++c) {
      uint4 wv[CH][C::WV];
#pragma unroll
      for (int u = 0; u < CH; ++u)
#pragma unroll
        for (int v = 0; v < C::WV; ++v) wv[u][v] = next[u][v];
      if (c + 1 < chunks) {
        load_w(next, b, c + 1);
      } else if (b + stride < blocks) {
        load_w(next, b + stride, 0);
      }
#pragma unroll
      for (int u = 0; u < CH; ++u) {
        const int s = warp + WARPS * (c * CH + u);
        if (s < steps) {  // warp-uniform, as in gemm_block
          const unsigned at = s * STEP_K * 2;
          uint4 xv[MT];
#pragma unroll
          for (int j = 0; j < MT; ++j) xv[j] = tc::ld_shared_16(x_row[j] + at);
          step_mma<MT, ROWS>(acc, wv[u], xv);
        }
      }
    }
    store_partials<MT, ROWS>(part, acc);
    __syncthreads();
    epi(Tile<MT, ROWS>{part, rows, row0, b * ROWS, n});
    __syncthreads();
  }
}

}  // namespace gemm_skinny
