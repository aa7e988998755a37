#line 2 "gemm_skinny_classes.cu"
// gemm_skinny_classes.cu: the skinny GEMM's class form (sm_90): the skinny order's eight classes of
// K steps on the eight CTAs of a thread-block cluster, for decode batches of up to 64 rows. Needs
// tma.cuh (the mbarrier), cluster.cuh, class_fold.cuh (the classes' addition), gemm_skinny.cuh
// (Config, step_mma, zero4) and the epilogues of gemm_epilogue.cuh before it; gpu::kernels
// concatenates them.
//
// WHY. In the plain form a CTA owns ROWS rows of W over all of K, and reads all of its slab of x
// (M K 2 bytes) from L2: at 32 rows and K = 3,072 (down_proj of asynct-0.5b) 192 KB of x for 48
// KB of W, four times the W bytes, and x's vectors take the registers that would keep W in
// flight (Config::U). Each class of the skinny order (the K steps s = c, c + 8, c + 16, ... that
// warp c of a plain CTA adds) needs only its eighth of x. Here CTA c of a cluster computes class c
// of 64 rows of W, reading an eighth of x; the cluster adds the eight classes' partials in class
// order through distributed shared memory.
//
// ALGORITHM. A cluster of CLASSES = 8 CTAs owns W rows n0 .. n0 + 63 (n0 = 64 * cluster) and the
// whole of x (M <= 8 MT rows, one slab); its CTA of rank c owns class c, the S = K / 256 steps s =
// c + 8 i, i < S. Warp w of the CTA owns W rows n0 + 8 w .. n0 + 8 w + 7, as the mma's A rows g
// (the upper 8 rows of the 16-row tile zero, as in the plain form at ROWS = 8). Before the wait on
// the kernel that writes x (pdl.cuh), each lane loads its W row's 16 bytes of every step it will
// multiply, up to CHUNK steps (W is constant). After it the CTA copies its class's x (steps i, all
// 8 MT rows, zeros past M) into shared memory by cp.async as xs[i][row][32], so that the 8 lanes
// of a 16-byte phase read 128 consecutive bytes. Then each warp runs step_mma over i = 0 .. S - 1
// in order: exactly the mma calls, on the same fragments, that warp c of a plain CTA makes for
// these rows, so its accumulators hold the plain CTA's class-c partial sums bit for bit (an mma
// output depends only on its own row of A and column of B). The partials go to shared memory
// part[x row][W row]. Each CTA then sends each share of them, x rows o MT .. o MT + MT - 1,
// to the CTA of rank o that owns it, into its recv[c] (st.async, 16 bytes a store, counted on
// that CTA's mbarrier), and waits on its own mbarrier for the eight classes of its share. Its
// epilogue (the pairing epilogues' rows 8 apart stay in one share) then adds an output's eight
// partials in class order, ((p0 + p1) + p2) + ... + p7, which is Tile::sum's addition of the
// plain form's warps. A cluster barrier, arrived at at the start and waited on after the
// product, orders every mbarrier's initialisation before any store to it; a CTA leaves once its
// own share has arrived (what it sent is counted where it went, whose CTA waits for it).
//
// BITS. Each class partial and the order of their addition are the plain form's, so every output
// has the bits of every skinny form (gemm_skinny.cuh's BATCH INVARIANCE), at every M.
//
// LAUNCH. gemm_skinny_classes_m{8 MT}{suffix}: grid ceil(N / 64) * 8 CTAs in clusters of 8 along
// x (the launch's cluster attribute), block THREADS = 256, launch bounds 2 CTAs an SM; dynamic
// shared memory S * 8 MT * 64 bytes of x, the mbarrier (16 bytes), 8 MT * PAD * 4 bytes of
// partials received and as many sent, and a word a thread for the store that keeps W's loads
// ahead of the wait (gpu::gemm::classes_bytes).
//
// ASSUMPTIONS, checked on the host (gpu::gemm): 1 <= M <= 8 MT; K a positive multiple of 256 (every
// class has S whole steps); N < 2^31 (rows past N are read as zeros and not written); x and w
// 16-byte aligned; the epilogue's buffers as gemm_skinny.cu's entry checks them.

namespace gemm_classes {

using gemm_skinny::Config;
using gemm_skinny::STEP_K;
using gemm_skinny::THREADS;
using gemm_skinny::WARPS;

constexpr int CLASSES = 8;            // CTAs a cluster: the skinny order's classes (its WARPS)
constexpr int ROWS = 64;              // W rows a cluster (gpu::gemm::SKINNY_CLASSES_ROWS)
constexpr int PAD = ROWS + 4;         // floats a partial row, against bank conflicts
constexpr int CHUNK = 12;             // steps of W a lane holds (all of them at K <= 3,072)
static_assert(CLASSES == WARPS && ROWS == 8 * WARPS, "one class a CTA, 8 rows of W a warp");

// The kernel of LAUNCH (ALGORITHM above).
template <int MT, class Epi>
__device__ __forceinline__ void gemm_classes(const bf16* __restrict__ x, const bf16* __restrict__ w, int m, int n,
                                             int k, const Epi& epi) {
  using C = Config<MT, 8>;
  constexpr int XR = 8 * MT;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int c = (int)cluster::rank();
  const int n0 = (int)(blockIdx.x / CLASSES) * ROWS;
  const int steps = k / (STEP_K * CLASSES);
  // Shared memory: x's class, the mbarrier, the received partials, this CTA's partials, a word a
  // thread (gpu::gemm::classes_bytes).
  unsigned char* smem = tc::dynamic_smem();
  const unsigned xs = tc::smem_addr(smem);
  const int x_bytes = steps * XR * STEP_K * 2;
  const unsigned bar = xs + x_bytes;
  float* recv = reinterpret_cast<float*>(smem + x_bytes + 16);
  float* part = recv + XR * PAD;
  const unsigned sink = tc::smem_addr(part + XR * PAD);

  // Every CTA's mbarrier is initialised before any CTA of the cluster sends to it: the cluster
  // barrier's arrival here, its wait after the product.
  if (threadIdx.x == 0) {
    tma::mbar_init(bar, 1);
    tma::mbar_init_fence();
  }
  cluster::arrive_relaxed();

  // This lane's W row (zeros past N) at step i of the class: k = 32 (c + 8 i) + 8 t.
  const int row = n0 + 8 * warp + g;
  const bf16* w_at = w + (long long)min(row, n - 1) * k + STEP_K * c + 8 * t;
  const bool w_ok = row < n;
  auto load_w = [&](uint4(&wv)[CHUNK][C::WV], int i0) {
#pragma unroll
    for (int i = 0; i < CHUNK; ++i)
      wv[i][0] = w_ok && i0 + i < steps ? tc::ld_stream_16(w_at + (long long)(i0 + i) * STEP_K * CLASSES)
                                        : gemm_skinny::zero4();
  };
  uint4 wv[CHUNK][C::WV];
  load_w(wv, 0);
  // ptxas issues loads whose values nothing needs yet after the wait, even across a CTA barrier
  // (read from the SASS). A store of their XOR into an unread word needs them all first, so they
  // arrive while the kernel before this one finishes.
  unsigned bits = 0;
#pragma unroll
  for (int i = 0; i < CHUNK; ++i) bits ^= wv[i][0].x ^ wv[i][0].y ^ wv[i][0].z ^ wv[i][0].w;
  tc::st_shared_4(sink + threadIdx.x * 4, bits);
  pdl_begin();

  for (int e = threadIdx.x; e < steps * XR * 4; e += THREADS) {
    const int i = e / (XR * 4), r = (e >> 2) % XR, q = e & 3;
    const unsigned dst = xs + ((i * XR + r) * STEP_K + 8 * q) * 2;
    if (r < m) {
      tc::cp_async_16(dst, x + (long long)r * k + STEP_K * (c + CLASSES * i) + 8 * q, true);
    } else {
      tc::st_shared_16(dst, gemm_skinny::zero4());
    }
  }
  tc::cp_async_commit();
  tc::cp_async_wait<0>();
  __syncthreads();
  // The step trace's marks (pdl.cuh): 0 the class's x in shared memory, 1 the product done.
  if (threadIdx.x == 0) step_trace_mark(0);

  float acc[C::R][MT][4];
  gemm_skinny::zero_acc<MT, 8>(acc);
  for (int i0 = 0; i0 < steps; i0 += CHUNK) {
    if (i0 > 0) load_w(wv, i0);
#pragma unroll
    for (int i = 0; i < CHUNK; ++i) {
      if (i0 + i < steps) {  // block-uniform
        uint4 xv[MT];
#pragma unroll
        for (int j = 0; j < MT; ++j) xv[j] = tc::ld_shared_16(xs + (((i0 + i) * XR + 8 * j + g) * STEP_K + 8 * t) * 2);
        gemm_skinny::step_mma<MT, 8>(acc, wv[i], xv);
      }
    }
  }

  if (threadIdx.x == 0) step_trace_mark(1);
  // Fragment c0, c1: W row 8 warp + g, x rows 8 j + 2 t and + 1 (c2, c3 are the zero rows g + 8).
#pragma unroll
  for (int j = 0; j < MT; ++j) {
    const int xr = 8 * j + 2 * t, wr = 8 * warp + g;
    part[xr * PAD + wr] = acc[0][j][0];
    part[(xr + 1) * PAD + wr] = acc[0][j][1];
  }
  __syncthreads();
  cluster::wait();

  class_fold::send_and_finish<MT, ROWS, PAD, CLASSES, THREADS>(part, recv, bar, c, m, n0, n, epi);
}

}  // namespace gemm_classes

#define GEMM_SKINNY_CLASSES_ENTRY(MT, EPI, SUFFIX)                                                              \
  extern "C" __global__ void __launch_bounds__(gemm_skinny::THREADS, 2) gemm_skinny_classes_m##MT##SUFFIX(      \
      const bf16* __restrict__ x, const bf16* __restrict__ w, int m, int n, int k, EPI##_PARAMS) {             \
    gemm_classes::gemm_classes<MT / 8>(x, w, m, n, k, EPI##_EPILOGUE);                                         \
  }

// Every x tile of one epilogue: gemm_skinny_classes_m{8,16,32,64}{SUFFIX}.
#define GEMM_SKINNY_CLASSES_TILES(EPI, SUFFIX) \
  GEMM_SKINNY_CLASSES_ENTRY(8, EPI, SUFFIX)    \
  GEMM_SKINNY_CLASSES_ENTRY(16, EPI, SUFFIX)   \
  GEMM_SKINNY_CLASSES_ENTRY(32, EPI, SUFFIX)   \
  GEMM_SKINNY_CLASSES_ENTRY(64, EPI, SUFFIX)

GEMM_SKINNY_CLASSES_TILES(STORE, )
GEMM_SKINNY_CLASSES_TILES(PERILN, _periln)
GEMM_SKINNY_CLASSES_TILES(SILU_MUL, _silu_mul)
GEMM_SKINNY_CLASSES_TILES(QK, _qk_norm_rope_cache)
