#line 2 "gemm_skinny_wg.cu"
// gemm_skinny_wg.cu: the skinny GEMM's sums (gemm_skinny.cuh) on Hopper's warpgroup MMA, for
// decode batches of 33 to 64 rows on wide weights: y[M, N] = x[M, K] W[N, K]^T, bf16 in, f32
// accumulation, each finished sum through one of the epilogues of gemm_epilogue.cuh. sm_90a only.
// Needs pdl.cuh, loads.cuh, ops_common.cuh, tensor_core.cuh, wgmma.cuh and gemm_epilogue.cuh
// before it.
//
// WHY. At 64 rows of x the mma.sync kernel spends about 1,000 instructions a warp on each 16 x 64
// block (x's fragment loads, addresses, one mma per 16 x 8 x 16; RESULTS run 134). One wgmma
// m64n64k16 does the work of 8 of those mma and reads x from shared memory itself. Measured
// (RESULTS runs 153-154): gate/up of asynct-0.5b at 64 rows 8.9 us against the shared-x form's
// 10.8, the decode step at B33 and B64 2% faster; but with one CTA a 64 x 64 tile, a W of 16 or
// 32 blocks (qkv, o, down) leaves most SMs idle (8 to 20 us), and at 65 rows and more each slab
// reads W again, so gpu::gemm::GemmPlan::decode_rows takes it only at 33 to 64 rows on a W of
// 66 blocks or more.
//
// THE SAME BITS AS gemm_skinny.cuh. A sum there is: K in steps of 32, step s in class s % 8 (the
// warp that runs it); in a class its steps in increasing order, each two m16n8k16 mma, the first
// over k offsets 8t + {0..3} (t < 4: the even 4-element quads of the step), the second over the
// odd quads; then the classes' partials added in class order, ((p0 + p1) + p2) + ... + p7, each
// starting from +0. The H200's tensor cores add an instruction's 16 products into its
// accumulator the same way whatever slots they occupy, and a wgmma the same way as the mma pair
// it replaces (RESULTS runs 150 and 153: no sum differs under random slot permutations that keep
// each instruction's set of k; about 75% differ when the sets change). So each class's partial
// here is a wgmma accumulator fed the same steps in the same order, two wgmma a step over the
// same two sets of k, in slots of this kernel's own: x as the shared B operand with each step's
// 64 bytes rearranged by 8-byte copies, its even quads in the first k16 block (slot j holding k
// 8 (j / 4) + j % 4) and its odd quads in the second (+ 4); W as the register A operand, each
// lane loading from shared memory the 4-byte words its fragment slots name in that order (slots
// 2t, 2t + 1 of rows g and g + 8 at k 8 (t / 2) + 2 (t % 2), slots 2t + 8, 2t + 9 at 16 more).
// gpu_gemm checks every output of this kernel against the skinny kernel's, bit for bit, at every
// M from 1 to 64 beside NaN and infinite rows, and with every epilogue.
//
// ALGORITHM. A CTA computes one 64 x 64 tile (64 rows of W, a slab of 64 rows of x) over all of
// K with two warpgroups (256 threads; warp i of a group holds W rows 16 i .. 16 i + 15 in the
// m16n8k16 A layout). Warpgroup h owns classes 4h .. 4h + 3, which are exactly the 64-k tiles T of
// K with T % 4 in {2h, 2h + 1}; it streams those tiles, W (16-byte cp.async) and x (8-byte
// cp.async into wgmma's K-major layout with the 128-byte swizzle, zeros past K and in rows past
// M) together, through a ring of STAGES tiles of its own, issued STAGES tiles ahead (W's before
// waiting on the kernel that writes x: W is constant), each tile two steps into two of its four
// accumulators. At the end warpgroup 0 adds its four partials in order and stores the sum, and
// warpgroup 1 adds its four onto it in order; then every thread runs the epilogue on the finished
// tile (gemm_epilogue.cuh's interface: consecutive threads on consecutive W rows of one x row).
//
// LAUNCH. Grid ceil(N / 64) x slabs (CTA b: slab b % slabs of W block b / slabs), 256 threads,
// dynamic shared memory gpu::gemm::SKINNY_WG_BYTES: 1,024 (alignment) + 2 STAGES (8,192 +
// 8,192) (W and x tiles; the finished tile, 64 (64 + 4) 4 bytes, reuses warpgroup 0's ring).
// About 210 registers a thread: one CTA an SM. ASSUMPTIONS, checked on the host: as
// gemm_skinny.cuh's (K a positive multiple of 8, N < 2^31, the pairing epilogues' N a multiple
// of 16).

namespace gemm_skinny_wg {

constexpr int GROUPS = 2;
constexpr int THREADS = 128 * GROUPS;
constexpr int XN = 64;      // rows of x a slab: the wgmma's N
constexpr int W_ROWS = 64;  // rows of W a block: the wgmma's M
constexpr int STEP_K = 32;
constexpr int TILE_K = 64;  // two steps: one tile of the swizzled layout
constexpr int STAGES = 6;   // tiles in flight a warpgroup: 193 KB of shared memory in all
constexpr int W_TILE = W_ROWS * TILE_K * 2;
constexpr int X_TILE = XN * TILE_K * 2;
constexpr int PAD = 4;      // the finished tile's row stride, W_ROWS + PAD floats
static_assert(XN * (W_ROWS + PAD) * 4 <= STAGES * (X_TILE + W_TILE), "the finished tile fits a ring");

// The finished tile: sums[xr][wr], as gemm_epilogue.cuh reads a tile.
struct Tile {
  static constexpr int XR = XN;
  static constexpr int WR = W_ROWS;
  static constexpr int THREADS = gemm_skinny_wg::THREADS;
  const float* sums;
  int m;
  long long row0;
  int n0;
  int n;

  __device__ __forceinline__ bool has(int xr, int wr) const { return xr < m && n0 + wr < n; }
  __device__ __forceinline__ float sum(int xr, int wr) const { return sums[xr * (W_ROWS + PAD) + wr]; }
};

// The byte of W row r's 16-byte chunk c in a tile: rows of 128 bytes, chunks XOR-swizzled by the
// row, so the fragment loads of 8 rows at one k spread over the banks.
__device__ __forceinline__ unsigned w_at(int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); }

// 4 bytes from shared memory at the shared-window address addr.
__device__ __forceinline__ unsigned ld_shared_4(unsigned addr) {
  unsigned v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}

// The byte of x row r's quad u (k 4u .. 4u + 3 of the tile) in a tile: step u / 8, its even quads
// in the first 16 columns of the step's pair of k16 blocks and its odd ones in the second, in the
// 128-byte swizzle.
__device__ __forceinline__ unsigned x_at(int r, int u) {
  const int q = u & 7, col = 32 * (u >> 3) + 16 * (q & 1) + 4 * (q >> 1);
  return r * 128 + ((((col >> 3) ^ (r & 7)) << 4) | ((col & 7) * 2));
}

// 8 bytes global -> shared, asynchronous (through L1: .cg takes 16 bytes only); with valid false
// no global byte is read and the 8 shared bytes become zero.
__device__ __forceinline__ void cp_async_8(unsigned dst, const void* src, bool valid) {
  const int src_size = valid ? 8 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(src_size) : "memory");
}

template <class Epi>
__device__ __forceinline__ void gemm(const bf16* __restrict__ x, const bf16* __restrict__ w, int m, int n, int k,
                                     const Epi& epi) {
  constexpr int ACC = XN / 2;
  const int group = threadIdx.x >> 7, tid = threadIdx.x & 127;
  const int warp = tid >> 5, g = (tid & 31) >> 2, t = tid & 3;
  const int slabs = (m + XN - 1) / XN;
  const int n0 = (blockIdx.x / slabs) * W_ROWS;
  const long long row0 = (long long)(blockIdx.x % slabs) * XN;
  const int rows = min(m - (int)row0, XN);
  const int tiles = (k + TILE_K - 1) / TILE_K, steps = (k + STEP_K - 1) / STEP_K;
  // This group's tiles: T = 4 (i / 2) + 2 group + i % 2.
  const int walk = max(0, (tiles - 2 * group) / 4 * 2 + min(2, max(0, (tiles - 2 * group) % 4)));
  x += row0 * k;

  const unsigned raw = tc::smem_addr(tc::dynamic_smem());
  const unsigned base = (raw + 1023u) & ~1023u;  // the swizzle's atoms are 1024-byte aligned
  const unsigned ring = base + group * STAGES * (X_TILE + W_TILE);
  // The finished tile reuses warpgroup 0's ring, whose copies are drained when it is written.
  float* sums = reinterpret_cast<float*>(tc::dynamic_smem() + (base - raw));
  auto tile_of = [&](int i) { return 4 * (i >> 1) + 2 * group + (i & 1); };
  // Tile i of the walk: x at the stage's start, W after it.
  auto stage_at = [&](int i) { return ring + (i % STAGES) * (X_TILE + W_TILE); };

  auto load_w = [&](int i) {
    if (i >= walk) return;
    const unsigned stage = stage_at(i) + X_TILE;
    const int k0 = TILE_K * tile_of(i);
#pragma unroll
    for (int e = 0; e < W_TILE / 16 / 128; ++e) {
      const int q = tid + 128 * e, r = q >> 3, c = q & 7, kk = k0 + 8 * c;
      tc::cp_async_16(stage + w_at(r, c), w + (long long)(n0 + r) * k + kk, n0 + r < n && kk < k);
    }
  };
  auto load_x = [&](int i) {
    if (i < walk) {
      const unsigned stage = stage_at(i);
      const int k0 = TILE_K * tile_of(i);
#pragma unroll
      for (int e = 0; e < X_TILE / 8 / 128; ++e) {
        const int q = tid + 128 * e, r = q >> 4, u = q & 15, kk = k0 + 4 * u;
        cp_async_8(stage + x_at(r, u), x + (long long)r * k + kk, r < rows && kk < k);
      }
    }
    tc::cp_async_commit();
  };

  for (int i = 0; i < STAGES; ++i) load_w(i);
  pdl_begin();
  for (int i = 0; i < STAGES; ++i) load_x(i);

  float acc[4][ACC];
#pragma unroll
  for (int c = 0; c < 4; ++c)
#pragma unroll
    for (int j = 0; j < ACC; ++j) acc[c][j] = 0.0f;
  const int r = 16 * warp + g;  // and r + 8
  for (int i = 0; i < walk; ++i) {
    tc::cp_async_wait<STAGES - 1>();
    fence_proxy_async();
    warpgroup_sync(group);
    // Fragment slots of wgmma e of step h: word k0 (+ 16 for slots 2t + 8, 2t + 9) of rows r and
    // r + 8, k0 = 32 h + 4 e + 8 (t / 2) + 2 (t % 2).
    unsigned a[2][2][4];
    const unsigned wt = stage_at(i) + X_TILE;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 2; ++e)
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          const int row = r + 8 * (v & 1), kk = 32 * h + 4 * e + 8 * (t >> 1) + 2 * (t & 1) + 16 * (v >> 1);
          a[h][e][v] = ld_shared_4(wt + w_at(row, kk >> 3) + (kk & 7) * 2);
        }
    const int s0 = 2 * tile_of(i);
    wgmma_fence();
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if ((i & 1) == e) {  // accumulators 2e, 2e + 1: compile-time indices
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (s0 + h < steps) {  // warpgroup-uniform: a step past the last adds nothing, as in gemm_skinny
            const unsigned tile = stage_at(i) + 64 * h;
            wgmma_rs_m64n64k16<0>(acc[2 * e + h], a[h][0], wgmma_desc(tile, 16, 1024));
            wgmma_rs_m64n64k16<0>(acc[2 * e + h], a[h][1], wgmma_desc(tile + 32, 16, 1024));
          }
        }
      }
    }
    wgmma_commit();
    wgmma_wait<0>();
    warpgroup_sync(group);
    load_w(i + STAGES);
    load_x(i + STAGES);
  }

  tc::cp_async_wait<0>();

  // The partials, class by class: warpgroup 0's four, then warpgroup 1's onto them. Fragment j
  // of a warp: W row r (+ 8 for the upper two), x row 8 (j / 4) + 2 t (+ 1).
  auto at = [&](int j) { return (8 * (j >> 2) + 2 * t + (j & 1)) * (W_ROWS + PAD) + r + 8 * ((j >> 1) & 1); };
  if (group == 0) {
#pragma unroll
    for (int j = 0; j < ACC; ++j) {
      float v = acc[0][j];
#pragma unroll
      for (int c = 1; c < 4; ++c) v += acc[c][j];
      sums[at(j)] = v;
    }
  }
  __syncthreads();
  if (group == 1) {
#pragma unroll
    for (int j = 0; j < ACC; ++j) {
      float v = sums[at(j)];
#pragma unroll
      for (int c = 0; c < 4; ++c) v += acc[c][j];
      sums[at(j)] = v;
    }
  }
  __syncthreads();
  epi(Tile{sums, rows, row0, n0, n});
}

}  // namespace gemm_skinny_wg

// gemm_skinny_wg_m64{SUFFIX}: slabs of 64 rows of x; the arguments of gemm_skinny.cu's entries.
#define GEMM_SKINNY_WG_ENTRY(EPI, SUFFIX)                                                               \
  extern "C" __global__ void __launch_bounds__(gemm_skinny_wg::THREADS) gemm_skinny_wg_m64##SUFFIX(      \
      const bf16* __restrict__ x, const bf16* __restrict__ w, int m, int n, int k, EPI##_PARAMS) {     \
    gemm_skinny_wg::gemm(x, w, m, n, k, EPI##_EPILOGUE);                                               \
  }

GEMM_SKINNY_WG_ENTRY(STORE, )
GEMM_SKINNY_WG_ENTRY(PERILN, _periln)
GEMM_SKINNY_WG_ENTRY(SILU_MUL, _silu_mul)
GEMM_SKINNY_WG_ENTRY(QK, _qk_norm_rope_cache)
