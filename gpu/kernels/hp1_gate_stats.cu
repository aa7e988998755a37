// hp1_gate_stats.cu: how many HP1 gate weights p_t of one layer's decode-step attention are
// exactly zero (SPEC sections 2 and 7), counted on the device from the very inputs the decode
// attention (hp1_decode.cu) reads. The benchmark's sparse memory floor skips the V rows of zero
// gates at the zero fraction measured on the step, and the engine's cache never leaves the device,
// so the count is taken there. A statistic, off the hot path: the kernel is plain, not fast.
//
// ALGORITHM. One CTA per (row, query head). The keys 0 .. row_len-1 of the row are gated in tiles
// of TILE = 128 keys, one thread per key:
//   1. Scores of the tile's keys and of the fir_k - 1 keys to its left (the FIR overlap, recomputed
//      per tile rather than carried: same inputs, same bits), into shared memory; a key before 0
//      scores 0, which gates as r = 0. Each thread computes whole dots of its keys alone.
//   2. Gate, per key, then count p == 0 (+0 and -0; a NaN is not a zero) in a register.
// After the last tile the CTA sums its threads' counts (warp shuffles, then the warps' sums in
// warp order) and thread 0 adds the zeros and row_len to the two counters with atomicAdd. Integer
// addition is exact and associative, so the totals do not depend on the order the CTAs land in.
//
// SAME BITS AS THE DECODE KERNEL. The score and the gate repeat hp1_decode.cu's arithmetic
// operation for operation, so a key counted zero here is exactly a key the sparse-index PV skips:
//   dot: D is cut into 16 slices of C = D/16 elements; slice i is summed from 0 in element order
//        with fma (c_i); then c_i + c_{i+8}, then + the partner at distance 4, 2, 1: the
//        butterfly of the decode kernel's thread group, whose pairing (not the lanes) fixes the
//        bits, since a + b and b + a round alike. s = scale * dot.
//   gate: r = relu_pre ? max(s, 0) : s; sum = ((0 + r_t) + r_{t-1}) + ... + r_{t-F+1};
//        z = fma(-sigma_over_f, sum, s), sigma_over_f = sigma * (1/F) per head;
//        p = gamma * clamp(z, clip_min, clip_max), NaN passing the clamp. Every operation is an
//        explicitly rounded intrinsic, so nothing is contracted.
//
// LAUNCH. Block THREADS = 128 (4 warps), grid rows * Hq, blockIdx.x = row * Hq + h. Static shared
// memory: 4 * 256 (q as f32) + 4 * (7 + 128) (scores) + 4 * 4 (warp counts) = 1580 bytes. Rows with
// row_len = 0 (a bucket's padding rows) count nothing. The caller zeroes the counters once per
// step and launches once per layer, so they sum over the layers.
//
// BUFFERS (bf16 passed as its 16 bits, row-major), as hp1_decode.cu's:
//   q            [rows, q_row_stride] bf16; head h of row r at r * q_row_stride + h * D
//   key_cache    [num_blocks, block_size, Hkv, D] bf16
//   block_table  [num_seqs, max_blocks_per_seq] int32
//   row_seq, row_len [rows] int32 from hp1_rows.cu; row_len <= max_blocks_per_seq * block_size
//   sigma, gamma [Hq] f32
//   counters     [2] uint64: counters[0] += zero weights, counters[1] += weights computed
// ASSUMPTIONS, checked on the host (gpu/src/attention/gate_stats.rs): D one of 64, 128, 256 (so C
// is a multiple of 4 and a slice loads as 8-byte vectors); Hq a multiple of Hkv; block_size a power
// of two (passed as log2_block); at most 2^31 - 1 token rows in the cache; 1 <= fir_k <= MAX_FIR;
// key_cache 8-byte aligned; rows * Hq <= 2^31 - 1 CTAs. Block-table entries of the keys a row
// reads are valid blocks (as for the attention; not checked on the device).

namespace gate_stats {

constexpr int THREADS = 128;
constexpr int WARPS = THREADS / 32;
constexpr int TILE = THREADS;
constexpr int MAX_FIR = 8;
constexpr int OV = MAX_FIR - 1;
constexpr int MAX_D = 256;

__device__ __forceinline__ float bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }

// scale * (q . k) in the decode kernel's order (see SAME BITS in the header); q in shared memory
// as f32, k a key row of the cache (8-byte aligned).
__device__ __forceinline__ float score(const float* qs, const unsigned short* __restrict__ k, int d, float scale) {
  const int c = d / 16;
  float part[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const uint2* kv = reinterpret_cast<const uint2*>(k + i * c);
    const float* qi = qs + i * c;
    float a = 0.0f;
    for (int e = 0; e < c / 4; ++e) {
      const uint2 w = __ldg(kv + e);
      a = __fmaf_rn(qi[4 * e], bf16_lo(w.x), a);
      a = __fmaf_rn(qi[4 * e + 1], bf16_hi(w.x), a);
      a = __fmaf_rn(qi[4 * e + 2], bf16_lo(w.y), a);
      a = __fmaf_rn(qi[4 * e + 3], bf16_hi(w.y), a);
    }
    part[i] = a;
  }
  // One loop per level, each with a constant trip count, so part[] stays in registers.
#pragma unroll
  for (int i = 0; i < 8; ++i) part[i] = __fadd_rn(part[i], part[i + 8]);
#pragma unroll
  for (int i = 0; i < 4; ++i) part[i] = __fadd_rn(part[i], part[i + 4]);
  part[0] = __fadd_rn(part[0], part[2]);
  part[1] = __fadd_rn(part[1], part[3]);
  part[0] = __fadd_rn(part[0], part[1]);
  return __fmul_rn(scale, part[0]);
}

}  // namespace gate_stats

extern "C" __global__ void __launch_bounds__(gate_stats::THREADS)
    hp1_gate_stats(const unsigned short* __restrict__ q, long long q_row_stride,
                   const unsigned short* __restrict__ key_cache, const int* __restrict__ block_table,
                   int max_blocks_per_seq, const int* __restrict__ row_seq, const int* __restrict__ row_len,
                   const float* __restrict__ sigma, const float* __restrict__ gamma, int num_heads,
                   int num_kv_heads, int head_dim, int log2_block, float scale, int fir_k, int relu_pre,
                   float clip_min, float clip_max, unsigned long long* __restrict__ counters) {
  using namespace gate_stats;
  pdl_begin();
  __shared__ float qs[MAX_D];
  __shared__ float sc[OV + TILE];  // sc[OV + j]: score of key c0 + j, j in [-(fir_k - 1), TILE)
  __shared__ unsigned warp_zeros[WARPS];

  const int tid = threadIdx.x;
  const int h = (int)(blockIdx.x % (unsigned)num_heads);
  const long long row = blockIdx.x / (unsigned)num_heads;
  const int len = row_len[row];
  if (len <= 0) return;  // uniform over the CTA, before any barrier

  const int d = head_dim;
  const int g = h / (num_heads / num_kv_heads);
  const int block_mask = (1 << log2_block) - 1;
  const int* __restrict__ table = block_table + (long long)row_seq[row] * max_blocks_per_seq;
  const long long token_elems = (long long)num_kv_heads * d;
  const unsigned short* __restrict__ k_head = key_cache + (long long)g * d;
  const unsigned short* __restrict__ q_head = q + row * q_row_stride + (long long)h * d;
  for (int i = tid; i < d; i += THREADS) qs[i] = __uint_as_float((unsigned)q_head[i] << 16);
  // sigma / F rounded once per head, as oracle::hp1::gate computes it.
  const float sigma_over_f = __fmul_rn(sigma[h], __fdiv_rn(1.0f, (float)fir_k)), gam = gamma[h];
  __syncthreads();

  unsigned zeros = 0;
  for (int c0 = 0; c0 < len; c0 += TILE) {
    const int n = min(TILE, len - c0);
    // 1. Scores of keys c0 - (fir_k - 1) .. c0 + n - 1.
    for (int i = tid; i < n + fir_k - 1; i += THREADS) {
      const int j = i - (fir_k - 1);
      const int t = c0 + j;
      float s = 0.0f;
      if (t >= 0) {
        const int slot = (table[t >> log2_block] << log2_block) | (t & block_mask);
        s = score(qs, k_head + slot * token_elems, d, scale);
      }
      sc[OV + j] = s;
    }
    __syncthreads();
    // 2. Gate and count.
    if (tid < n) {
      float sum = 0.0f;
      for (int f = 0; f < fir_k; ++f) {
        const float s = sc[OV + tid - f];
        sum = __fadd_rn(sum, relu_pre ? fmaxf(s, 0.0f) : s);
      }
      const float z = __fmaf_rn(-sigma_over_f, sum, sc[OV + tid]);
      const float clamped = z < clip_min ? clip_min : (z > clip_max ? clip_max : z);
      zeros += __fmul_rn(gam, clamped) == 0.0f ? 1u : 0u;
    }
    __syncthreads();  // the next tile overwrites sc
  }

  // CTA sum of the counts: exact integer additions.
#pragma unroll
  for (int m = 16; m >= 1; m >>= 1) zeros += __shfl_xor_sync(0xffffffffu, zeros, m);
  if ((tid & 31) == 0) warp_zeros[tid >> 5] = zeros;
  __syncthreads();
  if (tid == 0) {
    unsigned long long total = 0;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) total += warp_zeros[w];
    atomicAdd(counters, total);
    atomicAdd(counters + 1, (unsigned long long)len);
  }
}
