#line 2 "hp1_qkv_split.cu"
// hp1_qkv_split.cu: the qkv GEMM of one decode row with its q/k norm + RoPE + cache-write epilogue,
// and the split-K HP1 attention of that row leaving its chunks' partials, in one launch (issue 15).
// Needs pdl.cuh, loads.cuh, ops_common.cuh, norm_rope.cuh, tensor_core.cuh, gemm_epilogue.cuh,
// gemm_skinny.cuh, hp1_qk_pv.cuh, hp1_attention.cuh, cluster.cuh and tma.cuh before it;
// gpu::kernels concatenates them.
// The host side is gpu::attention::qkv_split.
//
// WHY. A decode step of one row is a chain of latency-bound launches, and each hand-off from one
// to the next costs about 1.2 us however it is signalled (RESULTS runs 280, 291-292). The attention
// of a KV head needs only that head's q, k and v, not the whole qkv GEMM that a launch boundary
// waits for: here one cluster of 8 CTAs computes a KV head's qkv rows and then its attention,
// meeting at a cluster barrier instead of a kernel boundary. Its W is constant, so each CTA copies
// its rows into shared memory before the wait, while the kernel before it runs; after the wait
// only x, the product from shared memory and the epilogue remain. The probe of this design
// (`scripts/probes/fuse_qkv_attn.cu`, run 293) took 2.5 us a layer off a B1 step on the H100.
//
// ALGORITHM. Cluster j (CTAs 8 j .. 8 j + 7) serves KV head j. Its rows of the qkv weight (in the
// permuted layout of gpu::gemm::layout, which keeps each head's D rows together) are those of q
// heads j GH .. j GH + GH - 1 (GH = Hq / Hkv), of k head j and of v head j, in that order: (GH +
// 2) D rows, ROWS = (GH + 2) D / 8 a CTA, the CTA of rank r taking local rows r ROWS onwards. At
// GH = 2 or 6, ROWS divides D, so a CTA's rows are one run inside one head.
//   1. Before the wait: the TMA copies the CTA's rows into shared memory (a bulk copy a row,
//      counted on an mbarrier), a row every gemm_skinny::shared_x_stride(K) elements (64 bytes
//      past a multiple of 128, so the 8 lanes of a 16-byte load's phase, rows g and g + 1 at 16
//      t, fall in distinct banks). The TMA keeps the whole copy in flight: cp.async's 16-byte
//      copies from the 256 threads took 4 us and more for 135 KB on one SM (run 297).
//   2. After it: x's one row into shared memory; then the product and the epilogue exactly as
//      gemm_skinny's gemm_block computes a block of ROWS rows at MT = 1: warp w takes K steps w,
//      w + 8, ... in order, lane (g, t) the same 16-byte vectors of W rows 16 i + g and 16 i + g
//      + 8 and of x (zeros for the x rows past the first), the same step_mma, store_partials,
//      Tile::sum and QkNormRopeCache epilogue, so q, k and v have the bits of the skinny GEMM's
//      qkv entries, which depend on neither ROWS nor which CTA runs a block (gemm_skinny.cuh). q
//      goes to q_out, k and v to the caches, in global memory.
//   3. The cluster barrier (release, acquire): every CTA's stores of step 2 are seen by the whole
//      cluster after it.
//   4. Each half of the CTA (hp1::HalfCta, 128 threads) runs hp1::attention's split-K body for
//      tasks v = 2 r + half, + 16, ... of the row's GH x chunks: q head j GH + v % GH, chunk v /
//      GH, as the split-K grid's CTA of that head and chunk would; its loads through L2
//      (CoherentLoads), since this launch wrote q and the newest key's K and V. No counters: the
//      partials stay for o_proj's folded GEMM, as a split-K launch without counters leaves them,
//      so every partial has split-K's bits and the step the bits of the two kernels.
// A row of more than 16 / GH chunks gives some halves two tasks or more, one after the other; the
// host takes this kernel only where a row's capacity keeps that to two
// (gpu::attention::QkvSplitPlan::pays).
//
// LAUNCH. Grid Hkv x 8 CTAs, clusters of 8 (a launch attribute), block 256 threads. Dynamic shared
// memory: ROWS x stride x 2 bytes of W, K x 2 of x, then the GEMM's partials (8 warps x 8 x (ROWS
// + 4) floats); static: two hp1::Shared<1>. Launch bounds below.
//
// ASSUMPTIONS, checked on the host (gpu::attention::qkv_split): M = 1; N = (Hq + 2 Hkv) D; ROWS =
// (GH + 2) D / 8 an instantiated one dividing D; K a positive multiple of 8; the shared memory
// within the device's; the epilogue's buffers as gemm_skinny.cu's qkv entry takes them; the
// attention's arguments as hp1_decode.cu's split entry takes them for a plan of one row,
// counters null (not read).

namespace qkv_split {

constexpr int CLUSTER = 8;

// The first qkv row of KV head j's rows from its local row i (ALGORITHM): a CTA's rows lie in one
// head, so they are one run from the row of their first.
__device__ __forceinline__ int head_row(int i, int j, int gh, int d, int num_heads, int num_kv_heads) {
  const int head = i / d;
  const int h = head < gh ? j * gh + head : (head == gh ? num_heads + j : num_heads + num_kv_heads + j);
  return h * d + i % d;
}

// gemm_block's product and epilogue at MT = 1 (one row of x) for the ROWS rows of W from row n0,
// W at `w_tile` and x at `x_tile` in shared memory, W's rows `stride` elements apart.
template <int ROWS, class Epi>
__device__ __forceinline__ void tile_from_shared(unsigned w_tile, unsigned x_tile, int stride, float* part, int n0,
                                                 int n, int k, const Epi& epi) {
  using namespace gemm_skinny;
  using C = Config<1, ROWS>;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int steps = (k + STEP_K - 1) / STEP_K;
  const Tile<1, ROWS> tile{part, 1, 0, n0, n};
  epi.prefetch(tile);
  // Vector v of a step is row 16 (v / 2) + 8 (v % 2) + g, as gemm_block's.
  const unsigned w_lane = w_tile + (g * stride + 8 * t) * 2;
  const unsigned x_lane = x_tile + 8 * t * 2;
  float acc[C::R][1][4];
  zero_acc<1, ROWS>(acc);
#pragma unroll 2
  for (int s = warp; s < steps; s += WARPS) {
    const int kk = s * STEP_K;
    const bool k_ok = kk + 8 * t < k;  // the last step of a K that is not a multiple of 32
    uint4 wv[C::WV], xv[1];
#pragma unroll
    for (int v = 0; v < C::WV; ++v) {
      const int row = 16 * (v >> 1) + 8 * (v & 1);
      wv[v] = k_ok ? tc::ld_shared_16(w_lane + (row * stride + kk) * 2) : zero4();
    }
    xv[0] = k_ok && g == 0 ? tc::ld_shared_16(x_lane + kk * 2) : zero4();
    step_mma<1, ROWS>(acc, wv, xv);
  }
  store_partials<1, ROWS>(part, acc);
  __syncthreads();
  epi(tile);
}

template <int D, int ROWS, int QR, bool SPARSE, class Epi>
__device__ __forceinline__ void run(const bf16* __restrict__ x, const bf16* __restrict__ w, int n, int k,
                                    const Epi& epi, const hp1::Args& a, float* __restrict__ partial,
                                    unsigned short* __restrict__ out) {
  __shared__ hp1::Shared<1> sh[2];
  const int j = blockIdx.x / CLUSTER, rank = blockIdx.x % CLUSTER;
  const int gh = a.num_heads / a.num_kv_heads;
  const int stride = gemm_skinny::shared_x_stride(k);
  unsigned char* smem = tc::dynamic_smem();
  const unsigned w_base = tc::smem_addr(smem);
  const int w_bytes = ROWS * stride * 2;
  const unsigned x_base = w_base + w_bytes;
  float* part = reinterpret_cast<float*>(smem + w_bytes + k * 2);
  const int n0 = head_row(rank * ROWS, j, gh, D, a.num_heads, a.num_kv_heads);

  // 1. The CTA's rows of W, constant, before the wait: a bulk copy a row by warp 0, counted on
  // w_bar.
  __shared__ __align__(8) unsigned long long w_bar;
  const unsigned bar = tc::smem_addr(&w_bar);
  if (threadIdx.x < 32) {
    if (threadIdx.x == 0) {
      tma::mbar_init(bar, 1);
      tma::mbar_init_fence();
      tma::mbar_arrive_expect_tx(bar, ROWS * k * 2);
    }
    __syncwarp();
    for (int row = threadIdx.x; row < ROWS; row += 32)
      tma::bulk_load(w_base + row * stride * 2, w + (long long)(n0 + row) * k, k * 2, bar);
  }
  pdl_begin();

  // 2. x, then the product and its epilogue.
  for (int v = threadIdx.x; v < k / 8; v += gemm_skinny::THREADS) tc::cp_async_16(x_base + 16 * v, x + 8 * v, true);
  tc::cp_async_commit();
  tc::cp_async_wait<0>();
  __syncthreads();  // x, and the barrier's initialisation, seen by every thread
  tma::mbar_wait(bar, 0);
  tile_from_shared<ROWS>(w_base, x_base, stride, part, n0, n, k, epi);

  // 3. Every q, k and v of the KV head stored, and seen.
  cluster::sync();

  // 4. The attention's tasks, a half of the CTA each.
  const int half = threadIdx.x / hp1::THREADS, tid = threadIdx.x % hp1::THREADS;
  const int chunks = max(1, (a.row_len[0] + hp1::CHUNK - 1) / hp1::CHUNK);
  for (int v = 2 * rank + half; v < gh * chunks; v += 2 * CLUSTER) {
    const long long bid = (long long)(v / gh) * a.num_heads + j * gh + v % gh;
    hp1::attention<D, 8, 1, QR, SPARSE, true, CoherentLoads>(a, hp1::HalfCta{bid, tid, 1 + half}, sh[half], out,
                                                             partial, nullptr);
  }
}

}  // namespace qkv_split

// hp1_qkv_split_d{D}_r{ROWS}_{dense|sparse}: the qkv GEMM's parameters (gemm_skinny.cu's qkv
// entry), the attention's (hp1_decode.cu's split entry; counters and rows_settled are not read).
// QR as the dispatcher's one-head form has it at one row (two QK rounds in flight from D = 128).
// Launch bounds 2 CTAs an SM (at most 128 registers a thread), so that a CTA fits beside one of
// the kernel before it and copies its W while that one runs (one SM's registers hold two).
#define HP1_QKV_SPLIT_ENTRY(D, ROWS, QR, PV, SPARSE)                                                                \
  extern "C" __global__ void __launch_bounds__(gemm_skinny::THREADS, 2) hp1_qkv_split_d##D##_r##ROWS##_##PV(        \
      const bf16* __restrict__ x, const bf16* __restrict__ w, int m, int n, int k, QK_PARAMS,                     \
      HP1_ATTENTION_PARAMS_AS(attn_), float* __restrict__ partial, int* counters, unsigned short* __restrict__ out, \
      int rows_settled) {                                                                                          \
    qkv_split::run<D, ROWS, QR, SPARSE>(x, w, n, k, QK_EPILOGUE, HP1_ATTENTION_ARGS_AS(attn_), partial, out);     \
  }
#define HP1_QKV_SPLIT_PVS(D, ROWS, QR)           \
  HP1_QKV_SPLIT_ENTRY(D, ROWS, QR, dense, false) \
  HP1_QKV_SPLIT_ENTRY(D, ROWS, QR, sparse, true)

// A CTA's rows, 16 x (Hq / Hkv + 2) D / 128, at 2 and 6 query heads a KV head (gpu::attention::qkv_split).
HP1_QKV_SPLIT_PVS(64, 32, 1)
HP1_QKV_SPLIT_PVS(64, 64, 1)
HP1_QKV_SPLIT_PVS(128, 64, 2)
HP1_QKV_SPLIT_PVS(128, 128, 2)
HP1_QKV_SPLIT_PVS(256, 128, 2)
