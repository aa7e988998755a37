#line 2 "gemm_skinny_staged.cuh"
// gemm_skinny_staged.cuh: the skinny GEMM's staged forms, which take one slab of at most 8 rows
// of x and stage it in shared memory before the product. Needs gemm_skinny.cuh before it
// (gemm_block's pieces, which it reuses) and, for the folded form, the finish order of
// hp1_split_finish.cuh's split_finish, restated below; gpu::kernels concatenates them. The entry
// points are in gemm_skinny.cu; the batch invariance and the epilogues are gemm_skinny.cuh's.
//
// ALGORITHM (gemm_staged). A CTA loads its first U steps of W into registers before the wait (W
// is constant), stages its rows of x in dynamic shared memory (M K 2 bytes) from a source after
// it, then runs gemm_block's product and epilogue at MT = 1 on them (the same steps per warp, mma
// and sums; x's loads from shared memory), so the outputs are the plain kernel's bits on the
// same x. Grid and block as gemm_skinny.cuh's LAUNCH, 1 <= M <= 8, M K < 2^31. The sources:
//   Rows (RowsX; entries gemm_skinny_staged_m8_r{ROWS}{suffix}, every epilogue): x as it is,
//     copied by cp.async. With x out of the registers in flight, a lane holds U = 12 / (W
//     vectors a step) steps of W (RowsX::W_VECTORS), so a warp's steps may take fewer batches of
//     loads than the plain form's U = 16 / (W vectors + 1): down_proj at K = 3,072 in one batch
//     instead of two, each a round trip from L2 after the wait (gpu::gemm::GemmPlan::decode_rows
//     takes it where it saves a batch).
//   Folded (FoldedX; entries gemm_skinny_fold_m8_r{ROWS}{suffix}, Store and PeriLn): x the
//     split-K attention's partials, added as the attention's finish adds them. At one decode row
//     the split-K attention before o_proj ended in a tail of L2 round trips (its partials' stores
//     and fence, the count, the last CTA's loads of every chunk's partials, its store of the bf16
//     output) before o_proj loaded that output again; launched without counters it writes the
//     partials alone, and every thread of the folded form adds 4 consecutive elements of x, the
//     loads of up to FOLD_CHUNKS chunks in flight, with split_finish's additions in its order and
//     its rounding: the bits of split_finish then the plain kernel. It pays only while a row's
//     partials are few (gpu::gemm::FoldLayout::pays: one row of at most FOLD_CHUNKS chunks at K =
//     1,024, 36 KB from L2 a CTA where the plain form reads 2 KB). K = heads << log2_d with D =
//     1 << log2_d a multiple of 4; row_len is read before the wait, so the kernel launched just
//     before this one must not write it (the attention does not; the model's row metadata comes
//     from a kernel at the start of the step).
// MEASURED (verify/RESULTS.md, run 218, H100): the staged down_proj 4.9% and the fold 3.9% of a
// B1 step alone, 6.6% together.

namespace gemm_skinny {

// The staged forms' lanes: gemm_block's rows of W and x for one lane, and its loads of a K step s
// (zeros past K, N and M), apart so that the staged forms can issue W's before x exists. gemm_block
// keeps its own copy: written through this struct, ptxas allocates the registers of most plain
// entries differently (read from NVRTC's cubins), and their schedules are the measured ones.
template <int MT, int ROWS>
struct LaneRows {
  using C = Config<MT, ROWS>;
  const bf16* w_row[C::WV];
  bool w_ok[C::WV];
  const bf16* x_row[MT];
  bool x_ok[MT];
  int t, k;

  // x: the slab's first row.
  __device__ __forceinline__ LaneRows(int n0, const bf16* w, const bf16* x, int m, int n, int k_) : k(k_) {
    const int g = (threadIdx.x & 31) >> 2;
    t = threadIdx.x & 3;
#pragma unroll
    for (int v = 0; v < C::WV; ++v) {
      const int row = n0 + (C::HI ? 16 * (v >> 1) + 8 * (v & 1) : 0) + g;
      w_ok[v] = row < n;
      w_row[v] = w + (long long)row * k + 8 * t;
    }
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      x_ok[j] = 8 * j + g < m;
      x_row[j] = x + (long long)(8 * j + g) * k + 8 * t;
    }
  }

  __device__ __forceinline__ void load_w(uint4 (&wv)[C::WV], int s) const {
    const int kk = s * STEP_K;         // + 8 t is in the row pointers
    const bool k_ok = kk + 8 * t < k;  // false for every step past the last
#pragma unroll
    for (int v = 0; v < C::WV; ++v) wv[v] = k_ok && w_ok[v] ? tc::ld_stream_16(w_row[v] + kk) : zero4();
  }

  template <class In>
  __device__ __forceinline__ void load_x(uint4 (&xv)[MT], int s) const {
    const int kk = s * STEP_K;
    const bool k_ok = kk + 8 * t < k;
#pragma unroll
    for (int j = 0; j < MT; ++j)
      xv[j] = k_ok && x_ok[j] ? In::load(reinterpret_cast<const uint4*>(x_row[j] + kk)) : zero4();
  }
};

// The staged form's x sources (ALGORITHM in the header). A source's settle(scratch, m) runs
// before the wait (it may read only what the kernel before the one before this wrote), its
// stage(scratch, xs, m, k) after it: rows 0 .. m - 1 of x, k bf16 each, into xs in shared memory
// by every thread of the CTA. W_VECTORS: the 16-byte W loads a lane holds in flight beside it.

// x as it is: its rows copied into shared memory (cp.async, 16 bytes a piece).
struct RowsX {
  const bf16* __restrict__ x;  // [m, k]
  static constexpr int W_VECTORS = 12;

  __device__ __forceinline__ void settle(int*, int) const {}

  __device__ __forceinline__ void stage(const int*, bf16* xs, int m, int k) const {
    const unsigned base = tc::smem_addr(xs);
    for (int e = 8 * threadIdx.x; e < m * k; e += 8 * THREADS) tc::cp_async_16(base + 2 * e, x + e, true);
    tc::cp_async_commit();
    tc::cp_async_wait<0>();
  }
};

// The split-K attention's partials as x: x[r, h D + d] is bf16(((0 + p_0) + p_1) + ... +
// p_{c-1}), p_i = partial[r, h, i, d], c = ceil(row_len[r] / chunk).
struct FoldedX {
  const float* __restrict__ partial;  // [m, heads, max_chunks, D]
  const int* __restrict__ row_len;    // [m]
  int log2_d;                         // D = 1 << log2_d
  int max_chunks;
  int chunk;  // keys a chunk (hp1::CHUNK)
  // Beside the partials' 9 float4 a thread, W's loads keep the registers of the plain form.
  static constexpr int W_VECTORS = 8;

  // Each row's chunk count into scratch: row_len is written two kernels or more before this one
  // (the assumption in the header), which have finished once this kernel runs (pdl.cuh).
  __device__ __forceinline__ void settle(int* scratch, int m) const {
    if (threadIdx.x < m) scratch[threadIdx.x] = (row_len[threadIdx.x] + chunk - 1) / chunk;
  }

  __device__ __forceinline__ void stage(const int* scratch, bf16* xs, int m, int k) const;
};

// Chunks whose partials a thread asks for before its first add: the 1K-token width bucket's 9, so
// that one row of x there costs one L2 round trip.
constexpr int FOLD_CHUNKS = 9;

// Every thread 4 consecutive elements of x: split_finish's additions (hp1_split_finish.cuh) over the
// row's scratch[r] chunks, in its order, and its rounding.
__device__ __forceinline__ void FoldedX::stage(const int* scratch, bf16* xs, int m, int k) const {
  const int heads = k >> log2_d, d_mask = (1 << log2_d) - 1;
  for (int e = 4 * threadIdx.x; e < m * k; e += 4 * THREADS) {
    const int r = e / k, kk = e - r * k;
    const int chunks = scratch[r];
    const float4* src = reinterpret_cast<const float4*>(
        partial + ((((long long)r * heads + (kk >> log2_d)) * max_chunks) << log2_d) + (kk & d_mask));
    const int stride = 1 << (log2_d - 2);  // one chunk's partial, in float4s
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int c0 = 0; c0 < chunks; c0 += FOLD_CHUNKS) {
      float4 p[FOLD_CHUNKS];
#pragma unroll
      for (int u = 0; u < FOLD_CHUNKS; ++u)
        if (c0 + u < chunks) p[u] = __ldg(src + (long long)(c0 + u) * stride);
#pragma unroll
      for (int u = 0; u < FOLD_CHUNKS; ++u) {
        if (c0 + u < chunks) {
          acc[0] = __fadd_rn(acc[0], p[u].x);
          acc[1] = __fadd_rn(acc[1], p[u].y);
          acc[2] = __fadd_rn(acc[2], p[u].z);
          acc[3] = __fadd_rn(acc[3], p[u].w);
        }
      }
    }
    *reinterpret_cast<uint2*>(xs + e) =
        make_uint2(bf16_bits(acc[0]) | bf16_bits(acc[1]) << 16, bf16_bits(acc[2]) | bf16_bits(acc[3]) << 16);
  }
}

// x staged in shared memory by the CTA itself, read through a generic pointer to it.
struct StagedLoads {
  template <class T>
  __device__ __forceinline__ static T load(const T* p) {
    return *p;
  }
};

// The staged form (ALGORITHM in the header): gemm_block's product and epilogue at MT = 1, its x
// staged in shared memory by `src` first. The first U steps of W are loaded before the wait (W
// is constant), so that their latency runs beside the staging; U steps a batch, U = the source's
// W_VECTORS over the lane's W vectors a step (x no longer takes registers in flight).
template <int ROWS, class Source, class Epi>
__device__ __forceinline__ void gemm_staged(const Source& src, const bf16* __restrict__ w, int m, int n, int k,
                                            const Epi& epi) {
  using C = Config<1, ROWS>;
  constexpr int U = Source::W_VECTORS / C::WV > 0 ? Source::W_VECTORS / C::WV : 1;
  __shared__ float part[WARPS * 8 * C::PAD];
  __shared__ int scratch[8];
  bf16* xs = reinterpret_cast<bf16*>(tc::dynamic_smem());
  const int warp = threadIdx.x >> 5;
  const BlockPlace<1> at(blockIdx.x, m, ROWS);
  const int steps = (k + STEP_K - 1) / STEP_K;
  const LaneRows<1, ROWS> lanes(at.n0, w, xs, m, n, k);

  src.settle(scratch, m);
  uint4 wv[U][C::WV];
  if (threadIdx.x == 0) prefetch_w_block<1, ROWS>(at, w, n, k);
#pragma unroll
  for (int u = 0; u < U; ++u) lanes.load_w(wv[u], warp + u * WARPS);
  __syncthreads();
  pdl_begin();
  epi.prefetch(Tile<1, ROWS>{part, m, 0, at.n0, n});
  src.stage(scratch, xs, m, k);
  __syncthreads();

  float acc[C::R][1][4];
  zero_acc<1, ROWS>(acc);
  for (int s0 = warp; s0 < steps; s0 += WARPS * U) {
    uint4 xv[U][1];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (s0 != warp) lanes.load_w(wv[u], s0 + u * WARPS);
      lanes.template load_x<StagedLoads>(xv[u], s0 + u * WARPS);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (s0 + u * WARPS < steps) step_mma<1, ROWS>(acc, wv[u], xv[u]);  // as in gemm_block
    }
  }

  store_partials<1, ROWS>(part, acc);
  __syncthreads();
  epi(Tile<1, ROWS>{part, m, 0, at.n0, n});
}

}  // namespace gemm_skinny
