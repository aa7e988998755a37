#line 2 "gemm_skinny_wide.cu"
// gemm_skinny_wide.cu: the skinny GEMM's sums (gemm_skinny.cuh) for decode batches of 65 to 128
// rows on Hopper's warpgroup MMA, W read once for all 128 rows: y[M, N] = x[M, K] W[N, K]^T,
// bf16 in, f32 accumulation, each finished sum through one of the epilogues of
// gemm_epilogue.cuh. sm_90a only. Needs pdl.cuh, loads.cuh, ops_common.cuh, tensor_core.cuh,
// wgmma.cuh, tma.cuh and gemm_epilogue.cuh before it.
//
// WHY. Past 64 rows the skinny kernel's forms run in slabs of 64 rows of x, each re-reading W,
// and at 128 rows asynct-0.5b's gate/up took 18 us where cuBLASLt takes 5.7 (RESULTS run 190).
// The two ways tried to read W once (the classes on a cluster's CTAs, run 190; two warpgroups
// on the two halves of x behind one cp.async ring, run 209) lost to latency. Here the TMA feeds
// a deep ring from a producer warp, and W is the wgmma's shared-memory B operand, so a tile costs
// the consumers four instructions and four 16-byte shared loads. Measured (RESULTS run 228):
// gate/up at 128 rows 9.0 us against the shared-x form's 18.3; its CTA is still held by latency
// (run 230), which a deeper ring, 48-row blocks, clusters sharing x or a split of K over a
// cluster did not lift (runs 229-235).
//
// THE SAME BITS AS gemm_skinny.cuh. A sum there is: K in steps of 32, step s in class s % 8; in a
// class its steps in increasing order, each two m16n8k16 mma, the first over the step's even
// 4-element quads (k 8t + {0..3}, t < 4), the second over its odd quads; then the classes'
// partials added in class order, ((p0 + p1) + p2) + ... + p7, each starting from +0. The tensor
// cores add an instruction's 16 products the same way whatever slots they occupy, and a wgmma
// the same way as the mma pair it replaces (gemm_skinny_wg.cu, RESULTS runs 150 and 153). Here x
// is the register A operand, loaded exactly as the skinny kernel loads x and W (a lane's 16 bytes
// at k 8t of its rows g and g + 8: slots 2t, 2t + 1, 2t + 8, 2t + 9 of the even-quad instruction
// hold k 8t + 0, 1, 2, 3, the odd-quad one's 8t + 4 .. 7), and W the B operand, which the TMA
// copies as it is stored: so W is stored in the class-step layout of gpu::gemm::layout
// (class_step_source), each step's 32 columns reordered so that B's slot j of the even-quad
// instruction holds the k that A's slot j holds, and likewise for the odd quads. x is read as
// the model writes it.
//
// ALGORITHM. A CTA computes a tile of 64 rows of W (n0 ..) by a slab of 128 rows of x (row0 ..),
// over all of K. Warp specialised:
//   - the producer warp (warp 8, one lane) streams 64-k tiles (two steps: W 64 x 64 and x 128 x
//     64, 24 KB) through a ring of STAGES stages by the TMA, 128-byte swizzled, armed on each
//     stage's `full` mbarrier, refilling a stage once the 8 consumer warps arrived on `empty`.
//     The tiles come in class-pair order: pair q = 0..3 takes tiles T = q, q + 4, q + 8, ..., whose
//     two steps 2T and 2T + 1 are of classes 2q and 2q + 1. The first stages' W tiles are asked
//     for before waiting on the kernel that writes x (W is constant).
//   - two consumer warpgroups, warpgroup h on x rows 64h .. 64h + 63 of the slab (the wgmma's
//     M), each holding two class partials of 64 x 64 (the even class's and the odd class's) and
//     the running sum: per round of two tiles, 4 shared loads of x's fragments a tile, then four
//     wgmma m64n64k16 a tile (step 2T's even and odd quads into the even partial, step 2T + 1's
//     into the odd one), one commit and its wait (the two warpgroups' rounds interleave on the
//     tensor cores). At the end of a pair, sum = (sum + even) + odd (the first pair starts sum at
//     even + odd), which is the class order's fold.
// Epilogue: the sums go to shared memory (the ring, no longer read), [128][64 + 4] floats, then
// the 256 consumer threads run the epilogue functor's wide walk on the tile.
//
// LAUNCH. Grid ceil(N / 64) * slabs (CTA b: slab b % slabs of W block b / slabs, slabs =
// ceil(M / 128)), 288 threads, dynamic shared memory SMEM_BYTES (gpu::gemm::SKINNY_WIDE_BYTES),
// one CTA an SM. ASSUMPTIONS, checked on the host: K a positive multiple of 512 (every class has
// K / 256 steps, every tile is whole and every class pair has an even number of tiles), N a
// multiple of 16 (the wide walk; the TMA reads W rows past N as zeros, and x rows past M, whose
// outputs are not written), the tensor maps encoded over exactly [M, K] (box 64 x 128) and
// [N, K] (box 64 x 64), 128-byte swizzle; the buffers of the epilogues as gemm_skinny.cuh's
// BUFFERS.

namespace skinny_wide {

constexpr int XN = 128;     // rows of x a slab: the two warpgroups' wgmma M
constexpr int W_ROWS = 64;  // rows of W a CTA: the wgmma's N
constexpr int TILE_K = 64;  // two steps: one row of the swizzled layout
constexpr int STAGES = 6;
constexpr int W_TILE = W_ROWS * TILE_K * 2;
constexpr int X_TILE = XN * TILE_K * 2;
constexpr int STAGE_BYTES = W_TILE + X_TILE;
constexpr int CONSUMERS = 256;
constexpr int THREADS = CONSUMERS + 32;
constexpr int PAD = W_ROWS + 4;  // the finished tile's row stride in floats (16-byte rows)
constexpr int SMEM_BYTES = 1024 + STAGES * STAGE_BYTES + 2 * STAGES * 8;
static_assert(XN * PAD * 4 <= STAGES * STAGE_BYTES, "the finished tile fits the ring");
static_assert(STAGE_BYTES % 1024 == 0 && W_TILE % 1024 == 0, "every tile on a swizzle atom");
static_assert(SMEM_BYTES + 1024 <= 227 * 1024, "within what a CTA may opt into");

// The finished tile as gemm_epilogue.cuh's functors read it.
using Tile = gemm_epilogue::StagedTile<XN, W_ROWS, CONSUMERS, PAD>;

// The K coordinate of the i-th tile in the producer's (and consumers') order: pair i / per_pair,
// then its tiles in increasing k.
__device__ __forceinline__ int tile_k(int i, int per_pair) {
  return (i / per_pair + 4 * (i % per_pair)) * TILE_K;
}

// A consumer's x fragments of one tile: [step][instruction (even, odd quads)][4 words].
typedef unsigned Frags[2][2][4];

template <class Epi>
__device__ __forceinline__ void gemm(const tma::TensorMap* mx, const tma::TensorMap* mw, int m, int n, int k,
                                     const Epi& epi) {
  const tma::RingSmem smem(STAGES, STAGE_BYTES);
  const unsigned ring = smem.ring, full0 = smem.full0, empty0 = smem.empty0;
  float* part = smem.tile;
  const int slabs = (m + XN - 1) / XN;
  const int n0 = (int)(blockIdx.x / slabs) * W_ROWS;
  const long long row0 = (long long)(blockIdx.x % slabs) * XN;
  const int per_pair = k / (4 * TILE_K);
  const int tiles = 4 * per_pair;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  tma::init_ring(full0, empty0, STAGES, CONSUMERS / 32);
  __syncthreads();
  const bool producer = threadIdx.x == CONSUMERS;
  if (producer) {
    for (int i = 0; i < min(STAGES, tiles); ++i) {
      tma::mbar_arrive_expect_tx(full0 + 8 * i, STAGE_BYTES);
      tma::load_2d(ring + i * STAGE_BYTES, mw, tile_k(i, per_pair), n0, full0 + 8 * i);
    }
  }
  // x and every buffer of the epilogue come from earlier kernels.
  pdl_begin();

  if (warp == CONSUMERS / 32) {
    if (producer) {
      for (int i = 0; i < tiles; ++i) {
        const int s = i % STAGES;
        const unsigned full = full0 + 8 * s, dst = ring + s * STAGE_BYTES;
        if (i >= STAGES) {
          tma::mbar_wait(empty0 + 8 * s, ((i / STAGES) - 1) & 1);
          tma::mbar_arrive_expect_tx(full, STAGE_BYTES);
          tma::load_2d(dst, mw, tile_k(i, per_pair), n0, full);
        }
        tma::load_2d(dst + W_TILE, mx, tile_k(i, per_pair), (int)row0, full);
      }
    }
    return;
  }

  const int wg = warp >> 2, g = lane >> 2, t = lane & 3;
  // This lane's rows g and g + 8 of its warp's 16 rows of x; both are row g of a swizzle atom.
  const unsigned x_row = W_TILE + (wg * 64 + (warp & 3) * 16 + g) * 128;
  const unsigned chunk0 = (unsigned)(t ^ g) << 4, chunk1 = (unsigned)((t + 4) ^ g) << 4;
  float sum[32], even[32], odd[32];

  // Waits for tile i and loads this lane's fragments of it into f.
  auto load = [&](Frags& f, int i) {
    const int s = i % STAGES;
    tma::mbar_wait(full0 + 8 * s, (i / STAGES) & 1);
    const unsigned x = ring + s * STAGE_BYTES + x_row;
    const uint4 lo[2] = {tc::ld_shared_16(x + chunk0), tc::ld_shared_16(x + chunk1)};
    const uint4 hi[2] = {tc::ld_shared_16(x + 1024 + chunk0), tc::ld_shared_16(x + 1024 + chunk1)};
#pragma unroll
    for (int st = 0; st < 2; ++st) {
      f[st][0][0] = lo[st].x; f[st][0][1] = hi[st].x; f[st][0][2] = lo[st].y; f[st][0][3] = hi[st].y;
      f[st][1][0] = lo[st].z; f[st][1][1] = hi[st].z; f[st][1][2] = lo[st].w; f[st][1][3] = hi[st].w;
    }
  };
  // Tile i's four wgmma: step 2T's even and odd quads into the even class, step 2T + 1's into
  // the odd one.
  auto mma = [&](const Frags& f, int i) {
    const WgmmaDesc w(ring + (i % STAGES) * STAGE_BYTES, 16, 1024);
    wgmma_rs_m64n64k16<0>(even, f[0][0], w.at(0));
    wgmma_rs_m64n64k16<0>(even, f[0][1], w.at(32));
    wgmma_rs_m64n64k16<0>(odd, f[1][0], w.at(64));
    wgmma_rs_m64n64k16<0>(odd, f[1][1], w.at(96));
  };
  auto release = [&](int i) {
    if (lane == 0) tma::mbar_arrive(empty0 + 8 * (i % STAGES));
  };

  // Two tiles a round: both tiles' fragments are in registers before the round's first wgmma,
  // since ptxas serialises every wgmma of a kernel where an instruction other than a wgmma
  // writes a register-A operand while earlier wgmma are in flight.
  Frags f0, f1;
  for (int q = 0; q < 4; ++q) {
#pragma unroll
    for (int e = 0; e < 32; ++e) even[e] = odd[e] = 0.0f;
    const int last = (q + 1) * per_pair;
    for (int i = q * per_pair; i < last; i += 2) {
      load(f0, i);
      // The step trace's marks (pdl.cuh): 0 the first tile in the ring, 1 the product done, 3
      // the epilogue's stores issued.
      if (i == 0 && threadIdx.x == 0) step_trace_mark(0);
      load(f1, i + 1);
      wgmma_fence();
      mma(f0, i);
      mma(f1, i + 1);
      wgmma_commit();
      wgmma_wait<0>();
      release(i);
      release(i + 1);
    }
#pragma unroll
    for (int e = 0; e < 32; ++e) sum[e] = q == 0 ? __fadd_rn(even[e], odd[e]) : __fadd_rn(__fadd_rn(sum[e], even[e]), odd[e]);
  }
  if (threadIdx.x == 0) step_trace_mark(1);
  fence_proxy_async();
  tma::consumers_sync<CONSUMERS>();

  // The accumulator's rows are x rows, its columns W rows.
  Tile::stage(part, wg * 64, sum);
  tma::consumers_sync<CONSUMERS>();
  epi.wide(Tile{part, (int)min((long long)XN, (long long)m - row0), row0, n0, n});
  if (threadIdx.x == 0) step_trace_mark(3);
}

}  // namespace skinny_wide

#define GEMM_SKINNY_WIDE_ENTRY(EPI, SUFFIX)                                                       \
  extern "C" __global__ void __launch_bounds__(skinny_wide::THREADS, 1) gemm_skinny_wide##SUFFIX( \
      const __grid_constant__ tma::TensorMap mx, const __grid_constant__ tma::TensorMap mw, int m, int n, \
      int k, EPI##_PARAMS) {                                                                        \
    skinny_wide::gemm(&mx, &mw, m, n, k, EPI##_EPILOGUE);                                      \
  }

GEMM_SKINNY_WIDE_ENTRY(STORE, )
GEMM_SKINNY_WIDE_ENTRY(PERILN, _periln)
GEMM_SKINNY_WIDE_ENTRY(SILU_MUL, _silu_mul)
GEMM_SKINNY_WIDE_ENTRY(QK, _qk_norm_rope_cache)
