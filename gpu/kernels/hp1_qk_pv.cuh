#line 2 "hp1_qk_pv.cuh"
// hp1_qk_pv.cuh: the per-thread arithmetic of an HP1 attention chunk whose order fixes the
// output's bits (hp1_attention.cuh's ALGORITHM, steps 1 and 4): bf16 unpacking and rounding,
// K and q loads, each lane's D-slice dot products, the group reduce-scatter that turns them into
// scores, and PV's batched V loads and fmas. Needs loads.cuh before it; hp1_attention.cuh, which
// follows it, runs these from its CTA body, and so does the decode megakernel (decode_mega.cu).

namespace hp1 {

__device__ __forceinline__ float bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }

// Round to nearest even, NaN stays a (quiet) NaN: what half::bf16::from_f32 does.
__device__ __forceinline__ unsigned short f32_to_bf16(float x) {
  unsigned u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}

// N bf16 values from p (aligned to 2N bytes) as N/2 packed words, in as few vector loads as fit,
// read as In says (loads.cuh).
template <class In, int N>
__device__ __forceinline__ void load_words(const unsigned short* __restrict__ p, unsigned (&w)[N / 2]) {
  if constexpr (N % 8 == 0) {
    const uint4* v = reinterpret_cast<const uint4*>(p);
#pragma unroll
    for (int i = 0; i < N / 8; ++i) {
      const uint4 x = In::load(v + i);
      w[4 * i] = x.x;
      w[4 * i + 1] = x.y;
      w[4 * i + 2] = x.z;
      w[4 * i + 3] = x.w;
    }
  } else if constexpr (N == 4) {
    const uint2 x = In::load(reinterpret_cast<const uint2*>(p));
    w[0] = x.x;
    w[1] = x.y;
  } else {
    static_assert(N == 2, "load_words takes 2, 4 or a multiple of 8 values");
    w[0] = In::load(reinterpret_cast<const unsigned*>(p));
  }
}

// One D-slice of q . k for each of HP heads: C elements summed from 0 in element order. Each
// K element is unpacked once and used by every head at once, so no unpacked slice waits in
// registers for the next head.
template <int HP, int C>
__device__ __forceinline__ void slice_dots(const float (&q)[HP][C], const unsigned (&k)[C / 2], float (&a)[HP]) {
#pragma unroll
  for (int hh = 0; hh < HP; ++hh) a[hh] = 0.0f;
#pragma unroll
  for (int e = 0; e < C / 2; ++e) {
    const float lo = bf16_lo(k[e]), hi = bf16_hi(k[e]);
#pragma unroll
    for (int hh = 0; hh < HP; ++hh) {
      a[hh] = __fmaf_rn(q[hh][2 * e], lo, a[hh]);
      a[hh] = __fmaf_rn(q[hh][2 * e + 1], hi, a[hh]);
    }
  }
}

// The lane's share of q . k per head: its D-slice, or for G = 8 its two slices added
// (c_i + c_{i+8}).
template <int G, int HP, int C>
__device__ __forceinline__ void lane_dots(const float (&q)[16 / G][HP][C], const unsigned (&k)[16 / G][C / 2],
                                          float (&v)[HP]) {
  slice_dots<HP, C>(q[0], k[0], v);
  if constexpr (G == 8) {
    float w[HP];
    slice_dots<HP, C>(q[1], k[1], w);
#pragma unroll
    for (int hh = 0; hh < HP; ++hh) v[hh] = __fadd_rn(v[hh], w[hh]);
  }
}

// Reduce-scatter of N keys' shares over a group by xor masks M, M/2, ..., 1 (M = G/2). While a
// lane holds more than one key, a level halves them: the lane keeps the half its mask bit picks
// and adds its partner's share of exactly those keys; with one key left, a level is a butterfly
// step. Each key gets exactly the butterfly's sums (a + b and b + a are the same bits), so the
// result does not depend on N. Returns the dot of key reduce_key<M, N>(gl) of the N.
template <int M, int N>
__device__ __forceinline__ float group_reduce(const float (&v)[N], unsigned group_mask, int gl) {
  if constexpr (M == 0) {
    static_assert(N == 1, "a group step holds at most G keys");
    return v[0];
  } else if constexpr (N == 1) {
    const float w[1] = {__fadd_rn(v[0], __shfl_xor_sync(group_mask, v[0], M))};
    return group_reduce<M / 2, 1>(w, group_mask, gl);
  } else {
    const bool upper = (gl & M) != 0;
    float w[N / 2];
#pragma unroll
    for (int k = 0; k < N / 2; ++k) {
      const float keep = upper ? v[k + N / 2] : v[k];
      const float send = upper ? v[k] : v[k + N / 2];
      w[k] = __fadd_rn(keep, __shfl_xor_sync(group_mask, send, M));
    }
    return group_reduce<M / 2, N / 2>(w, group_mask, gl);
  }
}

// Which of the N keys group_reduce<M, N> leaves on lane gl.
template <int M, int N>
__device__ __forceinline__ int reduce_key(int gl) {
  if constexpr (M == 0 || N == 1) {
    return 0;
  } else {
    return ((gl & M) ? N / 2 : 0) + reduce_key<M / 2, N / 2>(gl);
  }
}

// N consecutive cache rows from shared memory (s aligned to 4N bytes, up to 16).
template <int N>
__device__ __forceinline__ void load_rows(const int* s, int (&r)[N]) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const int4 x = reinterpret_cast<const int4*>(s)[i];
      r[4 * i] = x.x;
      r[4 * i + 1] = x.y;
      r[4 * i + 2] = x.z;
      r[4 * i + 3] = x.w;
    }
  } else {
    static_assert(N == 2, "load_rows takes 2 or a multiple of 4 rows");
    const int2 x = *reinterpret_cast<const int2*>(s);
    r[0] = x.x;
    r[1] = x.y;
  }
}

// base + row * stride_bytes: rows are below 2^31 (checked on the host) and a token's stride in
// bytes fits 32 bits, so this is one 32 x 32 -> 64-bit multiply-add.
__device__ __forceinline__ const unsigned short* cache_row(const unsigned short* base, int row, unsigned stride_bytes) {
  const unsigned long long offset = (unsigned long long)(unsigned)row * stride_bytes;
  return reinterpret_cast<const unsigned short*>(reinterpret_cast<const char*>(base) + offset);
}

// PV over PU list entries e0, e0 + RG, ...: every load issued before the first fma; TAIL checks
// each entry against count. 8 dims (one 16-byte vector) per thread.
template <class In, int RG, int PU, bool TAIL>
__device__ __forceinline__ void pv_batch(const int2* entry, int e0, int count, const unsigned short* v,
                                         unsigned stride_bytes, float (&acc)[8]) {
  uint4 w[PU];
#pragma unroll
  for (int u = 0; u < PU; ++u) {
    if (!TAIL || e0 + u * RG < count) {
      w[u] = In::load(reinterpret_cast<const uint4*>(cache_row(v, entry[e0 + u * RG].x, stride_bytes)));
    }
  }
#pragma unroll
  for (int u = 0; u < PU; ++u) {
    if (!TAIL || e0 + u * RG < count) {
      const float p = __int_as_float(entry[e0 + u * RG].y);
      const unsigned x[4] = {w[u].x, w[u].y, w[u].z, w[u].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        acc[2 * i] = __fmaf_rn(p, bf16_lo(x[i]), acc[2 * i]);
        acc[2 * i + 1] = __fmaf_rn(p, bf16_hi(x[i]), acc[2 * i + 1]);
      }
    }
  }
}

}  // namespace hp1
