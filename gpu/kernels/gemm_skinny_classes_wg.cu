#line 2 "gemm_skinny_classes_wg.cu"
// gemm_skinny_classes_wg.cu: the skinny GEMM's class form on warpgroup MMAs (sm_90a), for decode
// batches of 65 to 128 rows: each of the skinny order's eight classes of K steps on its own CTA of
// a cluster, all 128 rows of x at once, the classes' partials added in class order through
// distributed shared memory. Needs pdl.cuh, loads.cuh, ops_common.cuh, tensor_core.cuh,
// gemm_epilogue.cuh, wgmma.cuh, tma.cuh, cluster.cuh and class_fold.cuh before it; gpu::kernels
// concatenates them.
//
// WHY. Past 64 rows o_proj and down_proj of asynct-0.5b (16 blocks of 64 W rows) ran the plain
// form in two slabs of 64 rows, each CTA reading its slab of x whole from L2 (384 KB at K = 3,072
// for 48 KB of W): down_proj took 15.7 us of a B128 step's layer against a floor of about 1.9
// (RESULTS run 248). The class form of gemm_skinny_classes.cu in one slab of 128 rows lost (run
// 249): on mma.sync each warp re-read all of its class's x from shared memory, its 16-row A tiles
// half zeros. The wide form (gemm_skinny_wide.cu) reads W once, but 16 of its CTAs leave most SMs
// idle, and its split over clusters of four class pairs (run 229) kept 64 CTAs of 288 KB each.
// Here a CTA reads one class: 48 KB of W and 96 KB of x at K = 3,072, 128 CTAs, two an SM.
//
// THE SAME BITS AS gemm_skinny.cuh. A sum there is: in each class its steps in increasing order,
// each two m16n8k16 mma (the first over the step's even 4-element quads, the second over its odd
// ones), from +0; then the classes' partials added in class order, ((p0 + p1) + p2) + ... + p7. A
// wgmma adds its 16 products the way the mma pair it replaces does (gemm_skinny_wide.cu's header,
// RESULTS runs 150, 153, 228). x is the register A operand, loaded as the skinny kernel loads it
// (a lane's 16 bytes at k 8t of its rows g and g + 8), and W the shared B operand from its
// class-step copy (gpu::gemm::layout), whose step columns put in B's slot j the k that A's slot j
// holds: the wide form's arithmetic with one class a CTA.
//
// ALGORITHM. A cluster of CLASSES = 8 CTAs owns W rows n0 .. n0 + 63 (n0 = 64 * cluster) and all
// rows of x (M <= 128); its CTA of rank c owns class c, the S = K / 256 steps s = c + 8 i, i < S.
//   - The producer warp (warp 8, one lane) streams step by step W [64 x 32] and x [128 x 32]
//     (12 KB) through a ring of STAGES stages by the TMA, 64-byte swizzled, armed on each stage's
//     `full` mbarrier, refilling a stage once the 8 consumer warps arrived on `empty`. The first
//     stages' W is asked for before the wait on the kernel that writes x (W is constant), and
//     L2 for the rest of the class's W, so that a stage's refill finds it there.
//   - Two consumer warpgroups, warpgroup h on x rows 64h .. 64h + 63 (the wgmma's M), one
//     accumulator of 64 x 64: rounds of ROUND steps, each round's x fragments (one 16-byte shared
//     load per row a step) in registers before its first wgmma (ptxas serialises a kernel's wgmma
//     where a register-A operand is written while earlier ones are in flight), then two wgmma
//     m64n64k16 a step, one commit and its wait.
// Then the partials go to shared memory (the ring, no longer read), [128][PAD] floats; each CTA
// sends share o of them (x rows 16 o .. 16 o + 15) to the CTA of rank o, into its recv[c]
// (st.async, 16 bytes a store, counted on that CTA's mbarrier), waits on its own mbarrier for the
// eight classes of its share, and runs the epilogue there (class_fold.cuh; ClassShareTile adds
// an output's partials in class order). A cluster barrier, arrived at at the start and waited on
// after the product, orders every mbarrier's initialisation before any store to it.
//
// LAUNCH. gemm_skinny_classes_wg{suffix}: grid ceil(N / 64) * 8 CTAs in clusters of 8 along x,
// THREADS = 288, launch bounds 2 CTAs an SM, dynamic shared memory SMEM_BYTES
// (gpu::gemm::SKINNY_CLASSES_WG_BYTES). ASSUMPTIONS, checked on the host: 1 <= M <= 128; K a
// positive multiple of 1,024 (every class has S steps, a multiple of ROUND); N a multiple of 16;
// the tensor maps encoded over exactly [M, K] (box 32 x 128) and the class-step copy [N, K] (box
// 32 x 64), 64-byte swizzle; the buffers of the epilogues as gemm_skinny.cuh's BUFFERS.

namespace classes_wg {

constexpr int CLASSES = 8;                    // CTAs a cluster: the skinny order's classes
constexpr int XN = 128;                       // rows of x: the two warpgroups' wgmma M
constexpr int W_ROWS = 64;                    // rows of W a cluster: the wgmma's N
constexpr int STEP_K = 32;                    // a step of the skinny order: one 64-byte row
constexpr int STAGES = 6;
constexpr int ROUND = 2;                      // steps a consumer round
constexpr int W_TILE = W_ROWS * STEP_K * 2;
constexpr int X_TILE = XN * STEP_K * 2;
constexpr int STAGE_BYTES = W_TILE + X_TILE;
constexpr int CONSUMERS = 256;
constexpr int THREADS = CONSUMERS + 32;
constexpr int SHARE = XN / CLASSES;           // x rows whose epilogue a CTA runs
constexpr int PAD = W_ROWS + 4;               // a partial row's stride in floats (16-byte rows)
constexpr int RECV_BYTES = CLASSES * SHARE * PAD * 4;
// Alignment slack, the ring, its mbarriers and the share's (16 bytes), the partials received.
constexpr int SMEM_BYTES = 1024 + STAGES * STAGE_BYTES + 2 * STAGES * 8 + 16 + RECV_BYTES;
static_assert(XN * PAD * 4 <= STAGES * STAGE_BYTES, "the staged partials fit the ring");
static_assert(STAGE_BYTES % 512 == 0 && W_TILE % 512 == 0, "every tile on a 64-byte swizzle atom");
static_assert(2 * (SMEM_BYTES + 1024) <= 228 * 1024, "two CTAs an SM");

using Tile = gemm_epilogue::StagedTile<XN, W_ROWS, CONSUMERS, PAD>;

template <class Epi>
__device__ __forceinline__ void gemm(const tma::TensorMap* mx, const tma::TensorMap* mw, int m, int n, int k,
                                     const Epi& epi) {
  const tma::RingSmem smem(STAGES, STAGE_BYTES);
  const unsigned ring = smem.ring, full0 = smem.full0, empty0 = smem.empty0;
  const unsigned bar = empty0 + 8 * STAGES;
  float* part = smem.tile;
  float* recv = smem.tile + (bar + 16 - ring) / 4;
  const int c = (int)cluster::rank();
  const int n0 = (int)(blockIdx.x / CLASSES) * W_ROWS;
  const int steps = k / (STEP_K * CLASSES);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  auto step_k = [&](int i) { return STEP_K * (c + CLASSES * i); };

  if (threadIdx.x == 0) tma::mbar_init(bar, 1);
  tma::init_ring(full0, empty0, STAGES, CONSUMERS / 32);
  __syncthreads();
  // Every CTA's mbarrier is initialised before any CTA of the cluster sends to it: the cluster
  // barrier's arrival here, its wait after the product.
  cluster::arrive_relaxed();
  const bool producer = threadIdx.x == CONSUMERS;
  if (producer) {
    for (int i = 0; i < min(STAGES, steps); ++i) {
      tma::mbar_arrive_expect_tx(full0 + 8 * i, STAGE_BYTES);
      tma::load_2d(ring + i * STAGE_BYTES, mw, step_k(i), n0, full0 + 8 * i);
    }
    for (int i = STAGES; i < steps; ++i) tma::prefetch_2d(mw, step_k(i), n0);
  }
  // x and every buffer of the epilogue come from earlier kernels.
  pdl_begin();

  if (warp == CONSUMERS / 32) {
    if (producer) {
      for (int i = 0; i < steps; ++i) {
        const int s = i % STAGES;
        const unsigned full = full0 + 8 * s, dst = ring + s * STAGE_BYTES;
        if (i >= STAGES) {
          tma::mbar_wait(empty0 + 8 * s, ((i / STAGES) - 1) & 1);
          tma::mbar_arrive_expect_tx(full, STAGE_BYTES);
          tma::load_2d(dst, mw, step_k(i), n0, full);
        }
        tma::load_2d(dst + W_TILE, mx, step_k(i), 0, full);
      }
    }
    __syncwarp();
    cluster::wait();
    return;
  }

  const int wg = warp >> 2, g = lane >> 2, t = lane & 3;
  // This lane's rows r and r + 8 of x, 64 bytes each: the swizzle's chunk t ^ ((r / 2) % 4) is
  // the same for both rows.
  const int r = wg * 64 + (warp & 3) * 16 + g;
  const unsigned x_lo = W_TILE + r * 64 + ((t ^ ((g >> 1) & 3)) << 4), x_hi = x_lo + 8 * 64;
  float acc[32];
#pragma unroll
  for (int e = 0; e < 32; ++e) acc[e] = 0.0f;
  for (int i0 = 0; i0 < steps; i0 += ROUND) {
    unsigned f[ROUND][2][4];
#pragma unroll
    for (int j = 0; j < ROUND; ++j) {
      const int i = i0 + j, s = i % STAGES;
      tma::mbar_wait(full0 + 8 * s, (i / STAGES) & 1);
      // The step trace's marks (pdl.cuh): 0 the first step's x and W in the ring, 1 the product
      // done.
      if (i == 0 && threadIdx.x == 0) step_trace_mark(0);
      const unsigned x = ring + s * STAGE_BYTES;
      const uint4 lo = tc::ld_shared_16(x + x_lo), hi = tc::ld_shared_16(x + x_hi);
      f[j][0][0] = lo.x; f[j][0][1] = hi.x; f[j][0][2] = lo.y; f[j][0][3] = hi.y;
      f[j][1][0] = lo.z; f[j][1][1] = hi.z; f[j][1][2] = lo.w; f[j][1][3] = hi.w;
    }
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < ROUND; ++j) {
      const WgmmaDesc w(ring + ((i0 + j) % STAGES) * STAGE_BYTES, 16, 512, 2);
      wgmma_rs_m64n64k16<0>(acc, f[j][0], w.at(0));
      wgmma_rs_m64n64k16<0>(acc, f[j][1], w.at(32));
    }
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int j = 0; j < ROUND; ++j) {
      if (lane == 0) tma::mbar_arrive(empty0 + 8 * ((i0 + j) % STAGES));
    }
  }
  if (threadIdx.x == 0) step_trace_mark(1);
  fence_proxy_async();
  tma::consumers_sync<CONSUMERS>();

  // The accumulator's rows are x rows, its columns W rows.
  Tile::stage(part, wg * 64, acc);
  tma::consumers_sync<CONSUMERS>();
  cluster::wait();

  class_fold::send_and_finish<SHARE, W_ROWS, PAD, CLASSES, CONSUMERS>(part, recv, bar, c, m, n0, n, epi);
}

}  // namespace classes_wg

#define GEMM_SKINNY_CLASSES_WG_ENTRY(EPI, SUFFIX)                                                           \
  extern "C" __global__ void __launch_bounds__(classes_wg::THREADS, 2) gemm_skinny_classes_wg##SUFFIX(      \
      const __grid_constant__ tma::TensorMap mx, const __grid_constant__ tma::TensorMap mw, int m, int n,  \
      int k, EPI##_PARAMS) {                                                                                \
    classes_wg::gemm(&mx, &mw, m, n, k, EPI##_EPILOGUE);                                                   \
  }

GEMM_SKINNY_CLASSES_WG_ENTRY(STORE, )
GEMM_SKINNY_CLASSES_WG_ENTRY(PERILN, _periln)
GEMM_SKINNY_CLASSES_WG_ENTRY(SILU_MUL, _silu_mul)
GEMM_SKINNY_CLASSES_WG_ENTRY(QK, _qk_norm_rope_cache)
