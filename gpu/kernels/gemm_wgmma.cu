#line 2 "gemm_wgmma.cu"
// gemm_wgmma.cu: y[M, N] = x[M, K] W[N, K]^T for prefill-sized M on Hopper's warpgroup MMAs
// (sm_90a), bf16 in, f32 accumulation, with the model's elementwise op after the GEMM fused into
// the epilogue (gemm_epilogue.cuh: Store, PeriLn, SiluMul, QkNormRopeCache, the skinny GEMM's
// functors, so a row meets the same rounding points on both paths). Needs pdl.cuh, loads.cuh,
// ops_common.cuh, tensor_core.cuh, wgmma.cuh, tma.cuh and gemm_epilogue.cuh before it;
// gpu::kernels concatenates them.
//
// WHY. cuBLASLt runs the prefill GEMMs near the tensor cores' rate, but its epilogues cannot
// express UClipNorm, so after it every norm, residual and SiLU of a prefill row was a pass of its
// own over HBM (issue 18). Here the op runs on the product while it is still on chip.
//
// ALGORITHM. A CTA owns a BM x BN = 128 x 128 tile of y: x rows row0 .. row0 + 127 (blockIdx.y)
// and W rows n0 .. n0 + 127 (blockIdx.x), and walks K in blocks of BK = 64. Warp specialised:
//   - the producer warp (warp 8; one lane) fills STAGES ring stages, each the x tile's and the W
//     tile's K block (128 rows x 128 bytes each, 16 KB) copied by the TMA with the 128-byte swizzle
//     that wgmma's K-major descriptors read (wgmma.cuh), and armed with the stage's bytes on its
//     `full` mbarrier (tma.cuh); it refills a stage once all 8 consumer warps arrived on `empty`.
//   - the two consumer warpgroups (warps 0-3, 4-7) each own 64 rows of the tile: per K block,
//     four wgmma m64n128k16 (k16 slices in increasing k), one commit; after waiting until at
//     most that group is in flight, the previous stage is released.
// Epilogue: the 64 f32 accumulators of each consumer thread go to shared memory (the ring, no
// longer read), [128][BN + 4] floats, then the 256 consumer threads run the epilogue functor's
// wide walk on that tile (gemm_epilogue.cuh: the skinny GEMM's arithmetic, 8 outputs of an x row
// a thread with 16-byte loads and stores). Two CTAs fit an SM, so one's epilogue overlaps the
// other's mainloop.
//
// BATCH INVARIANCE AND DETERMINISM. y[r][c] is the wgmma k16 slices over K in increasing order,
// each added by the tensor core in its fixed order into an accumulator that depends only on row r
// of x and row c of W: not on M, on r's place in its tile, or on the other rows. No split K, no
// atomics. So a row of x has the same bits at every M and any offset, with any neighbours; the
// bits differ from cuBLASLt's and from the skinny kernel's (other summation orders).
//
// LAUNCH. Grid (ceil(N / BN), ceil(M / BM), 1), block THREADS = 288 (8 consumer warps and the
// producer warp), dynamic shared memory SMEM_BYTES (STAGES x 32 KB of ring, 1024-byte aligned
// inside, then the 2 x STAGES mbarriers), launch bounds 2 CTAs per SM.
// ASSUMPTIONS, checked on the host (gpu::gemm): K a positive multiple of BK (the TMA box), N a
// multiple of 16 (the pairing epilogues' groups; the TMA reads W rows past N as zeros and their
// outputs are not written), M <= 65535 BM (the grid's y); x and W row-major with 16-byte aligned
// bases, the tensor maps encoded over exactly [M, K] and [N, K] with box 64 x 128 and the
// 128-byte swizzle. The epilogues' buffers as gemm_skinny.cuh's BUFFERS.

namespace wgmma_gemm {

constexpr int BM = 128;
constexpr int BN = 128;
constexpr int BK = 64;
constexpr int STAGES = 3;
constexpr int CONSUMERS = 256;
constexpr int THREADS = CONSUMERS + 32;
constexpr int TILE_BYTES = BM * BK * 2;  // one operand's K block: 128 rows of 128 bytes
constexpr int STAGE_BYTES = 2 * TILE_BYTES;
constexpr int PAD = BN + 4;
constexpr int SMEM_BYTES = 1024 + STAGES * STAGE_BYTES + 2 * STAGES * 8;
static_assert(BM * PAD * 4 <= STAGES * STAGE_BYTES, "the staged tile fits in the ring");
static_assert(2 * (SMEM_BYTES + 1024) <= 228 * 1024, "two CTAs an SM (1 KB of each reserved by the system)");

// The finished tile as gemm_epilogue.cuh's functors read it.
using Staged = gemm_epilogue::StagedTile<BM, BN, CONSUMERS, PAD>;

template <class Epi>
__device__ __forceinline__ void gemm(const tma::TensorMap* mx, const tma::TensorMap* mw, int m, int n, int k,
                                     const Epi& epi) {
  const tma::RingSmem smem(STAGES, STAGE_BYTES);
  const unsigned ring = smem.ring, full0 = smem.full0, empty0 = smem.empty0;
  float* part = smem.tile;
  const int n0 = blockIdx.x * BN;
  const long long row0 = (long long)blockIdx.y * BM;
  const int blocks = k / BK;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  tma::init_ring(full0, empty0, STAGES, CONSUMERS / 32);
  __syncthreads();
  // x and every buffer of the epilogue come from earlier kernels.
  pdl_begin();

  if (warp == CONSUMERS / 32) {
    if (lane == 0) {
      for (int i = 0; i < blocks; ++i) {
        const int s = i % STAGES;
        if (i >= STAGES) tma::mbar_wait(empty0 + 8 * s, ((i / STAGES) - 1) & 1);
        const unsigned full = full0 + 8 * s, dst = ring + s * STAGE_BYTES;
        tma::mbar_arrive_expect_tx(full, STAGE_BYTES);
        tma::load_2d(dst, mx, i * BK, (int)row0, full);
        tma::load_2d(dst + TILE_BYTES, mw, i * BK, n0, full);
      }
    }
    return;
  }

  const int wg = warp >> 2;
  float acc[64];
#pragma unroll
  for (int j = 0; j < 64; ++j) acc[j] = 0.0f;
  for (int i = 0; i < blocks; ++i) {
    const int s = i % STAGES;
    tma::mbar_wait(full0 + 8 * s, (i / STAGES) & 1);
    const unsigned a = ring + s * STAGE_BYTES + wg * (BM / 2) * 128;
    const unsigned b = ring + s * STAGE_BYTES + TILE_BYTES;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      wgmma_ss_m64n128k16(acc, wgmma_desc(a + 32 * kk, 16, 1024), wgmma_desc(b + 32 * kk, 16, 1024), i > 0 || kk > 0);
    }
    wgmma_commit();
    wgmma_wait<1>();
    if (i > 0 && lane == 0) tma::mbar_arrive(empty0 + 8 * ((i - 1) % STAGES));
  }
  wgmma_wait<0>();
  fence_proxy_async();
  tma::consumers_sync<CONSUMERS>();

  Staged::stage(part, wg * 64, acc);
  tma::consumers_sync<CONSUMERS>();
  const Staged tile{part, (int)min((long long)BM, (long long)m - row0), row0, n0, n};
  epi.wide(tile);
}

}  // namespace wgmma_gemm

#define GEMM_WGMMA_ENTRY(EPI, SUFFIX)                                                                         \
  extern "C" __global__ void __launch_bounds__(wgmma_gemm::THREADS, 2)                                        \
      gemm_wgmma##SUFFIX(const __grid_constant__ tma::TensorMap mx, const __grid_constant__ tma::TensorMap mw, \
                         int m, int n, int k, EPI##_PARAMS) {                                                 \
    wgmma_gemm::gemm(&mx, &mw, m, n, k, EPI##_EPILOGUE);                                                      \
  }

GEMM_WGMMA_ENTRY(STORE, )
GEMM_WGMMA_ENTRY(PERILN, _periln)
GEMM_WGMMA_ENTRY(SILU_MUL, _silu_mul)
GEMM_WGMMA_ENTRY(QK, _qk_norm_rope_cache)
