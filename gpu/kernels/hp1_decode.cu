// hp1_decode.cu: HP1 attention over the paged KV cache, one query row at a time (SPEC sections 2
// and 6): the decode kernel, the split-K stage 1 and stage 2, with dense or sparse-index PV.
// Prefill rows run through the same kernels ("fake decode"): hp1_rows.cu gives each row its own
// sequence and length once per step, and these kernels read only that row metadata.
//
// ALGORITHM. The keys 0 .. row_len-1 of a row are cut into chunks of CHUNK = 256 keys. A chunk's
// partial output is computed by one piece of code, chunk_partial():
//   0. Slots: one pass looks up the cache row (block_table[t / block] * block + t % block) of every
//      key QK reads into shared memory, then a barrier; QK and PV only read it back, so no load
//      of K or V waits behind a block-table load, and no lane repeats another's lookup.
//   1. QK: scores s_t = scale * (q . k_t) of the chunk's keys plus the fir_k - 1 keys to its left
//      (the FIR overlap; keys before 0 get score 0, which gates as r = 0), into shared memory.
//      Thread groups of G lanes (8 or 16) take one key each; q sits in registers; K arrives as
//      16-byte vector loads (8 bytes for D = 64), and a group issues the loads of U = 64 G / D
//      consecutive keys (128 bytes per lane) before the first dot. The dot product's order is fixed independently
//      of G: D is cut into 16 slices of D/16 elements, each summed from 0 in element order with
//      fma; lane i of a 16-group owns slice i, lane i of an 8-group owns slices i and i+8 and adds
//      them (c_i + c_{i+8}, exactly the first xor-8 butterfly step of a 16-group), then xor 4, 2, 1
//      (a 16-group does xor 8 first). Every lane of a group ends with the same bits, and G = 8 and
//      G = 16 give the same scores. Shuffles use the group's own lane mask: groups of one warp may
//      run different trip counts (SPEC section 8).
//   2. Gate, per key, exactly as oracle::hp1::gate::Gate::apply in f32: r = relu_pre ? max(s, 0)
//      : s; sum = ((0 + r_t) + r_{t-1}) + ... + r_{t-F+1}; m = sum * (1/F); z = s - sigma * m;
//      p = gamma * clamp(z, clip_min, clip_max) with NaN passing the clamp. Every operation is an
//      explicitly rounded intrinsic, so no instantiation can contract it differently.
//   3. List: the cache rows of the keys to visit, in key order, with their weights. Sparse: the keys with p != 0
//      (NaN kept), ranked by warp ballot + popc within a warp and a prefix over the per-warp counts
//      in (round, warp) order: ordered, no atomics. Dense: every key (the same code keeps all).
//   4. PV: warp w takes list entries w, w+4, w+8, ... in that order; each lane owns D/32 output
//      dims loaded as one vector (bf16x2 / x4 / x8) and accumulates p * v with fma in f32 from 0;
//      a warp issues the loads of PU entries (64 or 128 bytes per lane) before the first fma.
//      The four warps' sums are added through shared memory in warp order 0, 1, 2, 3.
// The decode kernel (one CTA per (row, head)) walks the chunks in order and adds each chunk's
// partial into an f32 accumulator that starts at 0; it carries the last FIR scores of a chunk to
// the next in shared memory instead of recomputing them (same code, same bits). The split-K stage
// 1 (one CTA per (row, head, chunk)) writes its chunk's partial; stage 2 adds a row's partials in
// chunk order starting from 0. Both therefore add the same f32 values in the same order: split-K
// and decode give the same bits, G = 8 and G = 16 give the same bits, and since nothing depends on
// other rows, a row's output does not depend on its batch.
//
// LAUNCH. Block THREADS = 128 (4 warps). Grid is one-dimensional, heads fastest so the heads that
// share a kv head run side by side:
//   decode:  blockIdx.x = row * Hq + h                       (rows * Hq CTAs)
//   stage 1: blockIdx.x = (row * max_chunks + chunk) * Hq + h (rows * max_chunks * Hq CTAs);
//            a CTA whose chunk starts at or past row_len exits at once.
//   stage 2: one warp per (row, head): blockIdx.x * 4 + warp = row * Hq + h (ceil(rows * Hq / 4)).
// __launch_bounds__(128, MIN_CTAS = 5): every instantiation fits in 96 registers with no spills,
// 5 CTAs per SM with 128 bytes of K in flight per thread (80 KB per SM). With 6 CTAs (80
// registers) the same loads spill in some instantiations; 4 CTAs with 256 bytes per thread
// spill at D = 64.
// Static shared memory, no dynamic: 4 * (OV + CHUNK) scores + 4 * (OV + CHUNK) slots + 4 * CHUNK
// weights + 4 * CHUNK list rows + 4 * 2 * WARPS counts, padded to 16 bytes, + 4 * WARPS * D warp
// sums = 4192 + 16 * D bytes (5216 for D = 64, 6240 for D = 128, 8288 for D = 256). Stage 2
// uses none.
//
// TEMPLATE PARAMETERS (one extern "C" entry per combination, named below):
//   D      head dim, 64, 128 or 256
//   G      lanes per key in QK, 8 or 16 (the host picks 16 for batches of 64 rows or more)
//   SPARSE PV walks the nonzero list (true) or every key (false)
//   SPLIT  stage 1 of split-K (true) or the decode kernel (false)
// Entries: hp1_decode_d{D}_g{G}_{dense|sparse}, hp1_split_d{D}_g{G}_{dense|sparse},
// hp1_split_reduce_d{D}.
//
// BUFFERS (bf16 passed as its 16 bits, row-major):
//   q            [rows, q_row_stride] bf16; head h of row r at r * q_row_stride + h * D
//   key_cache    [num_blocks, block_size, Hkv, D] bf16
//   value_cache  [num_blocks, block_size, Hkv, D] bf16
//   block_table  [num_seqs, max_blocks_per_seq] int32
//   row_seq, row_len [rows] int32 from hp1_rows.cu; row_len <= max_blocks_per_seq * block_size
//   sigma, gamma [Hq] f32
//   out          [rows, Hq, D] bf16 (decode and stage 2)
//   partial      [rows, Hq, max_chunks, D] f32 (stage 1 writes, stage 2 reads only the chunks
//                below ceil(row_len / CHUNK), the ones stage 1 wrote)
// ASSUMPTIONS, checked on the host (gpu/src/attention): Hq a multiple of Hkv; block_size a power
// of two (passed as log2_block); at most 2^31 - 1 token rows in each cache (a cache row is an int); 1 <= fir_k <= MAX_FIR; clip_min < clip_max; buffer base pointers
// 16-byte aligned (device allocations are); block-table entries of the keys a row reads are valid
// blocks (the engine's block pool guarantees it; not checked on the device). Rows with
// row_len = 0 get zeros.

namespace hp1 {

constexpr int THREADS = 128;
constexpr int WARPS = THREADS / 32;
constexpr int CHUNK = 256;
constexpr int ROUNDS = CHUNK / THREADS;
constexpr int MAX_FIR = 8;
constexpr int OV = MAX_FIR - 1;
constexpr int MIN_CTAS = 5;

__device__ __forceinline__ float bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }

// Round to nearest even, NaN stays a (quiet) NaN: what half::bf16::from_f32 does.
__device__ __forceinline__ unsigned short f32_to_bf16(float x) {
  unsigned u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}

// N bf16 values from p (aligned to 2N bytes) as N/2 packed words, in as few vector loads as fit.
template <int N>
__device__ __forceinline__ void load_words(const unsigned short* __restrict__ p, unsigned (&w)[N / 2]) {
  if constexpr (N % 8 == 0) {
    const uint4* v = reinterpret_cast<const uint4*>(p);
#pragma unroll
    for (int i = 0; i < N / 8; ++i) {
      const uint4 x = __ldg(v + i);
      w[4 * i] = x.x;
      w[4 * i + 1] = x.y;
      w[4 * i + 2] = x.z;
      w[4 * i + 3] = x.w;
    }
  } else if constexpr (N == 4) {
    const uint2 x = __ldg(reinterpret_cast<const uint2*>(p));
    w[0] = x.x;
    w[1] = x.y;
  } else {
    static_assert(N == 2, "load_words takes 2, 4 or a multiple of 8 values");
    w[0] = __ldg(reinterpret_cast<const unsigned*>(p));
  }
}

// One D-slice of q . k: C elements summed from 0 in element order.
template <int C>
__device__ __forceinline__ float slice_dot(const float (&q)[C], const unsigned (&k)[C / 2]) {
  float a = 0.0f;
#pragma unroll
  for (int e = 0; e < C / 2; ++e) {
    a = __fmaf_rn(q[2 * e], bf16_lo(k[e]), a);
    a = __fmaf_rn(q[2 * e + 1], bf16_hi(k[e]), a);
  }
  return a;
}

// q . k over a whole group: every lane of the group returns the same bits, for G = 8 and G = 16.
template <int G, int C>
__device__ __forceinline__ float group_dot(const float (&q)[16 / G][C], const unsigned (&k)[16 / G][C / 2],
                                           unsigned group_mask) {
  float v = slice_dot<C>(q[0], k[0]);
  if constexpr (G == 8) {
    v = __fadd_rn(v, slice_dot<C>(q[1], k[1]));
  } else {
    v = __fadd_rn(v, __shfl_xor_sync(group_mask, v, 8));
  }
  v = __fadd_rn(v, __shfl_xor_sync(group_mask, v, 4));
  v = __fadd_rn(v, __shfl_xor_sync(group_mask, v, 2));
  v = __fadd_rn(v, __shfl_xor_sync(group_mask, v, 1));
  return v;
}

struct Args {
  const unsigned short* __restrict__ q;
  long long q_row_stride;
  const unsigned short* __restrict__ key_cache;
  const unsigned short* __restrict__ value_cache;
  const int* __restrict__ block_table;
  int max_blocks_per_seq;
  const int* __restrict__ row_seq;
  const int* __restrict__ row_len;
  const float* __restrict__ sigma;
  const float* __restrict__ gamma;
  int num_heads;
  int num_kv_heads;
  int log2_block;
  int max_chunks;
  float scale;
  int fir_k;
  int relu_pre;
  float clip_min;
  float clip_max;
};

template <int D>
struct Shared {
  float score[OV + CHUNK];  // score[OV + j] is key c0 + j, j in [-OV, CHUNK)
  int slot[OV + CHUNK];     // slot[i]: cache row of key c0 + jstart + i (keys before 0 have none)
  float p[CHUNK];           // list weights
  int key[CHUNK];           // list entries: the cache row of each listed key
  int count[ROUNDS * WARPS];
  __align__(16) float red[WARPS * D];
};

template <int D, int G, bool SPARSE, bool SPLIT>
__device__ __forceinline__ void attention(const Args& a, unsigned short* __restrict__ out,
                                          float* __restrict__ partial) {
  static_assert(D == 64 || D == 128 || D == 256, "head_dim must be 64, 128 or 256");
  static_assert(G == 8 || G == 16, "thread group must be 8 or 16 lanes");
  constexpr int C = D / 16;                          // elements per D-slice
  constexpr int CPL = 16 / G;                        // D-slices per lane in QK
  constexpr int NG = THREADS / G;                    // groups per CTA
  constexpr int U = 64 * G / D;                      // keys per group per step: 128 bytes of K per lane
  constexpr int VD = D / 32;                         // output dims per lane in PV
  constexpr int PU = VD < 8 ? 16 : 4;                // list entries in flight per warp (64 or 128 bytes of V per lane)
  constexpr int DPT = (D + THREADS - 1) / THREADS;   // output dims per thread after the warp reduction
  __shared__ Shared<D> sh;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  long long bid = blockIdx.x;
  const int h = (int)(bid % a.num_heads);
  bid /= a.num_heads;
  int chunk = 0;
  if constexpr (SPLIT) {
    chunk = (int)(bid % a.max_chunks);
    bid /= a.max_chunks;
  }
  const long long row = bid;
  const int len = a.row_len[row];
  const int num_chunks = (len + CHUNK - 1) / CHUNK;
  if (SPLIT && chunk >= num_chunks) return;  // uniform over the CTA, before any barrier

  const int g = h / (a.num_heads / a.num_kv_heads);
  const int block_mask = (1 << a.log2_block) - 1;
  const int* __restrict__ table = a.block_table + (long long)a.row_seq[row] * a.max_blocks_per_seq;
  // Cache rows are below 2^31 (checked on the host), so a row times the token stride is one
  // 32 x 32 -> 64-bit multiply-add.
  const unsigned token_stride = (unsigned)(a.num_kv_heads * D);
  const unsigned short* __restrict__ k_head = a.key_cache + (long long)g * D;
  const unsigned short* __restrict__ v_lane = a.value_cache + (long long)g * D + lane * VD;
  const float sigma = a.sigma[h], gamma = a.gamma[h];
  const float inv_f = __fdiv_rn(1.0f, (float)a.fir_k);

  const int grp = tid / G, gl = tid % G;
  const unsigned group_mask = ((1u << G) - 1u) << (lane / G * G);
  float qf[CPL][C];
  {
    const unsigned short* q_row = a.q + row * a.q_row_stride + (long long)h * D;
#pragma unroll
    for (int c = 0; c < CPL; ++c) {
      unsigned w[C / 2];
      load_words<C>(q_row + (gl + c * G) * C, w);
#pragma unroll
      for (int e = 0; e < C / 2; ++e) {
        qf[c][2 * e] = bf16_lo(w[e]);
        qf[c][2 * e + 1] = bf16_hi(w[e]);
      }
    }
  }

  float o[DPT];
#pragma unroll
  for (int i = 0; i < DPT; ++i) o[i] = 0.0f;

  const int c_begin = SPLIT ? chunk : 0, c_end = SPLIT ? chunk + 1 : num_chunks;
  for (int c = c_begin; c < c_end; ++c) {
    const int c0 = c * CHUNK;
    const int n = min(CHUNK, len - c0);
    // The decode kernel's later chunks find their overlap carried in score[OV - fir_k + 1 .. OV).
    const int jstart = (SPLIT || c == 0) ? -(a.fir_k - 1) : 0;
    const int slots = n - jstart;

    // 0. The cache row of every key QK reads, looked up once in the block table. The previous
    // chunk read slot[] only before its last barrier (placing the list).
    for (int i = tid; i < slots; i += THREADS) {
      const int t = c0 + jstart + i;
      if (t >= 0) sh.slot[i] = (table[t >> a.log2_block] << a.log2_block) | (t & block_mask);
    }
    __syncthreads();

    // 1. QK into score[OV + jstart .. OV + n).
    for (int k0 = grp * U; k0 < slots; k0 += NG * U) {
      unsigned kw[U][CPL][C / 2];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int t = c0 + jstart + k0 + u;
        if (k0 + u < slots && t >= 0) {
          const unsigned short* kp = k_head + (unsigned long long)(unsigned)sh.slot[k0 + u] * token_stride;
#pragma unroll
          for (int s = 0; s < CPL; ++s) load_words<C>(kp + (gl + s * G) * C, kw[u][s]);
        } else {
#pragma unroll
          for (int s = 0; s < CPL; ++s)
#pragma unroll
            for (int e = 0; e < C / 2; ++e) kw[u][s][e] = 0u;
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float dot = group_dot<G, C>(qf, kw[u], group_mask);
        const int t = c0 + jstart + k0 + u;
        if (gl == 0 && k0 + u < slots) sh.score[OV + jstart + k0 + u] = t >= 0 ? __fmul_rn(a.scale, dot) : 0.0f;
      }
    }
    __syncthreads();

    // The last OV scores of a full chunk are the next chunk's overlap; read them before any
    // thread can start overwriting them with the next chunk's scores.
    float carry = 0.0f;
    if (!SPLIT && tid < OV) carry = sh.score[CHUNK + tid];

    // 2. Gate, and 3. the list: rank within the warp now, place after the counts are known.
    float p_r[ROUNDS];
    int rank_r[ROUNDS];
    bool keep_r[ROUNDS];
#pragma unroll
    for (int r = 0; r < ROUNDS; ++r) {
      const int j = r * THREADS + tid;
      const bool valid = j < n;
      float p = 0.0f;
      if (valid) {
        float sum = 0.0f;
        for (int f = 0; f < a.fir_k; ++f) {
          const float s = sh.score[OV + j - f];
          sum = __fadd_rn(sum, a.relu_pre ? fmaxf(s, 0.0f) : s);
        }
        const float z = __fsub_rn(sh.score[OV + j], __fmul_rn(sigma, __fmul_rn(sum, inv_f)));
        const float clamped = z < a.clip_min ? a.clip_min : (z > a.clip_max ? a.clip_max : z);
        p = __fmul_rn(gamma, clamped);
      }
      const bool keep = SPARSE ? (valid && p != 0.0f) : valid;
      const unsigned ballot = __ballot_sync(0xffffffffu, keep);
      if (lane == 0) sh.count[r * WARPS + warp] = __popc(ballot);
      p_r[r] = p;
      keep_r[r] = keep;
      rank_r[r] = __popc(ballot & ((1u << lane) - 1u));
    }
    __syncthreads();
    int count = 0, base[ROUNDS];
#pragma unroll
    for (int i = 0; i < ROUNDS * WARPS; ++i) {
#pragma unroll
      for (int r = 0; r < ROUNDS; ++r)
        if (i == r * WARPS + warp) base[r] = count;
      count += sh.count[i];
    }
#pragma unroll
    for (int r = 0; r < ROUNDS; ++r) {
      if (keep_r[r]) {
        const int e = base[r] + rank_r[r];
        sh.key[e] = sh.slot[r * THREADS + tid - jstart];
        sh.p[e] = p_r[r];
      }
    }
    __syncthreads();

    // 4. PV over the list: warp w, entries w, w + WARPS, ... in order.
    float acc[VD];
#pragma unroll
    for (int i = 0; i < VD; ++i) acc[i] = 0.0f;
    for (int e0 = warp; e0 < count; e0 += WARPS * PU) {
      unsigned vw[PU][VD / 2];
      float pu[PU];
#pragma unroll
      for (int u = 0; u < PU; ++u) {
        const int e = e0 + u * WARPS;
        if (e < count) {
          pu[u] = sh.p[e];
          load_words<VD>(v_lane + (unsigned long long)(unsigned)sh.key[e] * token_stride, vw[u]);
        } else {
          pu[u] = 0.0f;
#pragma unroll
          for (int i = 0; i < VD / 2; ++i) vw[u][i] = 0u;
        }
      }
#pragma unroll
      for (int u = 0; u < PU; ++u) {
        if (e0 + u * WARPS < count) {
#pragma unroll
          for (int i = 0; i < VD / 2; ++i) {
            acc[2 * i] = __fmaf_rn(pu[u], bf16_lo(vw[u][i]), acc[2 * i]);
            acc[2 * i + 1] = __fmaf_rn(pu[u], bf16_hi(vw[u][i]), acc[2 * i + 1]);
          }
        }
      }
    }
    float* red = sh.red + warp * D + lane * VD;
    if constexpr (VD == 2) {
      *reinterpret_cast<float2*>(red) = make_float2(acc[0], acc[1]);
    } else {
#pragma unroll
      for (int i = 0; i < VD / 4; ++i)
        reinterpret_cast<float4*>(red)[i] = make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]);
    }
    __syncthreads();

    // The chunk's partial: the warps' sums in warp order.
#pragma unroll
    for (int i = 0; i < DPT; ++i) {
      const int d = i * THREADS + tid;
      if (d < D) {
        float part = sh.red[d];
#pragma unroll
        for (int w = 1; w < WARPS; ++w) part = __fadd_rn(part, sh.red[w * D + d]);
        if constexpr (SPLIT) {
          partial[((row * a.num_heads + h) * a.max_chunks + chunk) * D + d] = part;
        } else {
          o[i] = __fadd_rn(o[i], part);
        }
      }
    }
    // Every thread is past the gate, so the overlap slots are free to take the carry.
    if (!SPLIT && tid < OV) sh.score[tid] = carry;
  }

  if constexpr (!SPLIT) {
#pragma unroll
    for (int i = 0; i < DPT; ++i) {
      const int d = i * THREADS + tid;
      if (d < D) out[(row * a.num_heads + h) * D + d] = f32_to_bf16(o[i]);
    }
  }
}

// Stage 2: one warp per (row, head) adds the row's valid chunk partials in chunk order from 0.
template <int D>
__device__ __forceinline__ void split_reduce(const float* __restrict__ partial, const int* __restrict__ row_len,
                                             unsigned short* __restrict__ out, int num_rows, int num_heads,
                                             int max_chunks) {
  constexpr int VD = D / 32;
  constexpr int PU = 4;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long pair = (long long)blockIdx.x * WARPS + warp;
  if (pair >= (long long)num_rows * num_heads) return;
  const int len = row_len[pair / num_heads];
  const int num_chunks = (len + CHUNK - 1) / CHUNK;
  const float* src = partial + pair * max_chunks * D + lane * VD;
  float acc[VD];
#pragma unroll
  for (int i = 0; i < VD; ++i) acc[i] = 0.0f;
  for (int c0 = 0; c0 < num_chunks; c0 += PU) {
    float x[PU][VD];
#pragma unroll
    for (int u = 0; u < PU; ++u) {
      if (c0 + u < num_chunks) {
        const float* p = src + (long long)(c0 + u) * D;
        if constexpr (VD == 2) {
          const float2 v = *reinterpret_cast<const float2*>(p);
          x[u][0] = v.x;
          x[u][1] = v.y;
        } else {
#pragma unroll
          for (int i = 0; i < VD / 4; ++i) {
            const float4 v = reinterpret_cast<const float4*>(p)[i];
            x[u][4 * i] = v.x;
            x[u][4 * i + 1] = v.y;
            x[u][4 * i + 2] = v.z;
            x[u][4 * i + 3] = v.w;
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < PU; ++u) {
      if (c0 + u < num_chunks) {
#pragma unroll
        for (int i = 0; i < VD; ++i) acc[i] = __fadd_rn(acc[i], x[u][i]);
      }
    }
  }
  unsigned short* dst = out + pair * D + lane * VD;
#pragma unroll
  for (int i = 0; i < VD; ++i) dst[i] = f32_to_bf16(acc[i]);
}

}  // namespace hp1

// One extern "C" entry per instantiation, so the host finds each by name without C++ mangling.
#define HP1_ATTENTION_PARAMS                                                                          \
  const unsigned short *q, long long q_row_stride, const unsigned short *key_cache,                 \
      const unsigned short *value_cache, const int *block_table, int max_blocks_per_seq,            \
      const int *row_seq, const int *row_len, const float *sigma, const float *gamma, int num_heads, \
      int num_kv_heads, int log2_block, int max_chunks, float scale, int fir_k, int relu_pre,        \
      float clip_min, float clip_max

#define HP1_ATTENTION_ARGS                                                                            \
  hp1::Args {                                                                                         \
    q, q_row_stride, key_cache, value_cache, block_table, max_blocks_per_seq, row_seq, row_len,      \
        sigma, gamma, num_heads, num_kv_heads, log2_block, max_chunks, scale, fir_k, relu_pre,       \
        clip_min, clip_max                                                                            \
  }

#define HP1_ENTRIES(D, G, PV, SPARSE)                                                                 \
  extern "C" __global__ void __launch_bounds__(hp1::THREADS, hp1::MIN_CTAS)                         \
      hp1_decode_d##D##_g##G##_##PV(HP1_ATTENTION_PARAMS, unsigned short* out) {                    \
    hp1::attention<D, G, SPARSE, false>(HP1_ATTENTION_ARGS, out, nullptr);                           \
  }                                                                                                 \
  extern "C" __global__ void __launch_bounds__(hp1::THREADS, hp1::MIN_CTAS)                         \
      hp1_split_d##D##_g##G##_##PV(HP1_ATTENTION_PARAMS, float* partial) {                          \
    hp1::attention<D, G, SPARSE, true>(HP1_ATTENTION_ARGS, nullptr, partial);                        \
  }

#define HP1_HEAD_DIM(D)                                                                               \
  HP1_ENTRIES(D, 8, dense, false)                                                                     \
  HP1_ENTRIES(D, 8, sparse, true)                                                                     \
  HP1_ENTRIES(D, 16, dense, false)                                                                    \
  HP1_ENTRIES(D, 16, sparse, true)                                                                    \
  extern "C" __global__ void __launch_bounds__(hp1::THREADS, hp1::MIN_CTAS)                         \
      hp1_split_reduce_d##D(const float* partial, const int* row_len, unsigned short* out,          \
                            int num_rows, int num_heads, int max_chunks) {                          \
    hp1::split_reduce<D>(partial, row_len, out, num_rows, num_heads, max_chunks);                    \
  }

HP1_HEAD_DIM(64)
HP1_HEAD_DIM(128)
HP1_HEAD_DIM(256)
