#line 2 "hp1_prefill_gate.cuh"
// hp1_prefill_gate.cuh: the HP1 gate (SPEC section 2) applied in registers to one warp's scores of
// a 16-row x 64-key tile, for the tensor-core prefill kernels. Independent of how the scores were
// made: the layout below is the C fragment of eight mma m16n8 tiles side by side, and also one
// warp's share of a Hopper wgmma m64n64 accumulator (warp w of the warpgroup holds rows 16w ..
// 16w+15), so the MMA and WGMMA kernels share this file.
//
// LAYOUT. Lane = 4 g + t. s[j][0], s[j][1] are row g, s[j][2], s[j][3] row g + 8, of accumulator
// columns 8j + 2t and + 1. The kernels store each 64-key tile of K and V with key key_of_column(n)
// in row n (so column n of Q K^T is that key, and P's column n meets V's row n), which puts keys
// key0 + 16t + 2j + e in s[j][2h + e]: a row's 64 keys live in one quad, 16 consecutive keys per
// lane. Every wgmma (mma) k-step of P V still covers 16 whole keys of the tile (columns 16kk ..
// 16kk + 15 are keys 16t + 4kk .. + 3 of every lane t), a set other than the plain order's: the
// order of a row's additions changes from the unpermuted tile, not their determinism.
//
// GATE, exactly as oracle::hp1::gate::Gate::apply in f32, every operation an explicitly rounded
// intrinsic so no instantiation can contract it differently:
//   s = scale * acc; r = relu_pre ? max(s, 0) : s (r = 0 for keys before 0);
//   sum = ((0 + r_t) + r_{t-1}) + ... + r_{t-F+1};
//   z = fma(-sigma_over_f, sum, s) (sigma_over_f = sigma * (1/F), rounded per head);
//   p = gamma * clamp(z, clip_min, clip_max), NaN passing the clamp.
// Keys past the row's position get p = 0 (causal mask; a row with position -1 is all masked).
// The UNIT FORM (unit_gate_params) runs this text with scale and gamma 1 on other bounds and
// leaves gamma * scale to the caller: the same value in exact arithmetic, rounded otherwise.
// Two departures from that text change at most the sign of a zero p, and so no output bit: the
// sum starts at r_t (0 + r_t differs from r_t only when r_t is -0), and the clamp is max.NaN then
// min.NaN (a NaN z stays NaN, as with the selects; the two differ only in which zero a zero z
// against a zero bound gives). A zero p of either sign adds a zero to an accumulator that starts
// at +0 (or holds a nonzero sum), and gamma times a NaN is NaN either way, so P V has the same
// bits. The clamp's two instructions in place of two compares and two selects took the model's
// prefill attention from 118.8 to 108.5 us a layer (RESULTS run 101); the kernel is bound by
// issuing the gate's instructions (run 99).
//
// FIR WINDOW. Key 16t + m (m < 16) needs r of keys 16t + m - 1 .. 16t + m - F + 1: this lane's
// own for m - f >= 0, else the last F - 1 keys of lane t - 1, which lane 0 takes from lane 3's
// previous tile. One __shfl_sync per key back (F - 1 of them per row, 2 for 3 taps) and a select
// at the source (lane 3 sends its tail) serve the whole row: the interleaved layout this replaced
// took a shuffle and a select per score (RESULTS run 163). The full-warp mask is right here: a
// warp calls the gate as a whole (every lane the same trip counts, no shuffle under a run-time
// condition), never from divergent code.
//
// FIR TAIL. FirTail holds this lane's r of the previous key tile's last F - 1 keys (16t + 15,
// 16t + 14, ...) for each row half: what lane 0 of the next tile reads from lane 3. fir_tail_init
// sets it to 0 (the r of keys before 0) before a row's first key tile, which must have key0 =
// 0; gate_tile then reads it and leaves this tile's keys there, so key tiles must be gated in
// order key0 = 0, 64, 128, ... A warp may stop calling gate_tile once every key of a tile is
// past both of its rows' positions (later tiles are then all masked).

namespace hp1_prefill {

// Per-head gate parameters (gate_params).
struct GateParams {
  float scale, sigma_over_f, gamma, clip_min, clip_max;
  int fir_k;     // 1 .. 8
  int relu_pre;  // 0 or 1
};

// A head's gate parameters from its sigma and gamma: sigma_over_f = sigma * (1 / fir_k), each
// rounded, as the oracle computes it (oracle::hp1::gate).
__device__ __forceinline__ GateParams gate_params(float scale, float sigma, float gamma, float clip_min, float clip_max,
                                                  int fir_k, int relu_pre) {
  return GateParams{scale, __fmul_rn(sigma, __fdiv_rn(1.0f, (float)fir_k)), gamma, clip_min, clip_max, fir_k, relu_pre};
}

// The same gate on the unscaled products a = q . k, for scale > 0 (UNIT FORM): scale and gamma 1,
// the bounds divided by scale (each rounded), and scale * gamma (gain_of) left for the caller to
// multiply into the output. In exact arithmetic gamma * clamp(z, lo, hi) with s = scale * a is
// (gamma * scale) * clamp(z / scale, lo / scale, hi / scale), and z / scale is a's own
// z = a - sigma / F * sum(max(a, 0)) since max(scale a, 0) = scale max(a, 0) for scale > 0. It
// rounds differently from the oracle's f32 order (the products are summed before any scaling,
// the bounds and the gain are rounded once a head, and P meets V before the gain), as every
// tensor-core path already differs from it by rounding P to bf16, and leaves out the score's
// two multiplications: a quarter of a key tile's instructions in a kernel bound by issuing them.
// At 3 taps it also sums an odd key t's window as (r_{t-1} + r_{t-2}) + r_t, so that the first
// sum is the even key t - 1's (keys are paired from key 0, as every tile starts at a multiple of
// 64): three additions a pair of keys where four were.
// With clip_min = 0 the lower bound is 0 and a weight is exactly 0 wherever z <= 0, as before.
// The host picks it only where scale is a positive normal number and both bounds divided by it
// are finite (GateParams::has_unit_form).
__device__ __forceinline__ GateParams unit_gate_params(float scale, float sigma, float clip_min, float clip_max,
                                                       int fir_k, int relu_pre) {
  return gate_params(1.0f, sigma, 1.0f, __fdiv_rn(clip_min, scale), __fdiv_rn(clip_max, scale), fir_k, relu_pre);
}

// What a head's output sum of P V is multiplied by in the unit form: gamma * scale, rounded.
__device__ __forceinline__ float gain_of(float gamma, float scale) { return __fmul_rn(gamma, scale); }

// The key (0 .. 63) that row n of a 64-key tile of K and V holds (LAYOUT).
__device__ __forceinline__ int key_of_column(int n) { return ((n >> 1) & 3) * 16 + (n >> 3) * 2 + (n & 1); }

// The taps a gate_tile<FIR> variant may sum (FIR 0: the run-time fir_k, up to 8).
template <int FIR>
constexpr int fir_taps() {
  return FIR > 0 ? FIR : 8;
}

// This lane's r of the previous key tile's last keys, per row half: r[h][i] is key 16t + 15 - i.
template <int FIR>
struct FirTail {
  float r[2][fir_taps<FIR>() > 1 ? fir_taps<FIR>() - 1 : 1];
};

template <int FIR>
__device__ __forceinline__ void fir_tail_init(FirTail<FIR>& tail) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < fir_taps<FIR>() - 1; ++i) tail.r[h][i] = 0.0f;
}

// min(max(z, lo), hi) with a NaN z giving NaN (lo < hi), in two instructions (see GATE above).
__device__ __forceinline__ float clamp_nan(float z, float lo, float hi) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;\n\tmin.NaN.f32 %0, %0, %3;" : "=f"(r) : "f"(z), "f"(lo), "f"(hi));
  return r;
}

template <int RELU>
__device__ __forceinline__ float gate_rectify(float s, int relu_pre) {
  const bool on = RELU < 0 ? relu_pre != 0 : RELU != 0;
  return on ? fmaxf(s, 0.0f) : s;
}

// Gates the warp's 16 x 64 tile in place: s holds q . k accumulators (unscaled) on entry and p on
// exit. key0: the tile's first key; pos_lo, pos_hi: the positions of rows g and g + 8. Call from
// the whole warp (full-mask shuffles), every lane with the same template arguments.
// Compile-time variants (the caller picks one per launch from the gate parameters, so the
// common configuration pays for no run-time test):
//   FIR   the taps, 1 .. 8, or 0 for gp.fir_k read at run time (then every shuffle is issued and
//         the window's unused terms are left out of the sum by selects, never by branches).
//   RELU  1 or 0 for relu_pre known, -1 for gp.relu_pre read at run time.
//   MASK  whether any key of the tile may lie past a row's position (the diagonal tiles); the
//         tiles wholly below both rows of every lane skip the per-key test.
//   CLAMP false: s holds gamma * z on exit, unclamped, for a caller that rounds to bf16 first and
//         then clamps the pairs (clamp_bf16x2: the same bits, see there). Only where MASK is
//         false (a masked key's 0 must not meet the clamp) and gamma is not 0 (0 * inf is NaN
//         where gamma * clamp(inf) is 0).
//   UNIT  gp from unit_gate_params: its scale and gamma are 1, so their multiplications (exact
//         for every value but a NaN's payload) are left out; at FIR 3 an odd key's window is
//         summed in the unit form's order.
template <int FIR, int RELU, bool MASK, bool CLAMP = true, bool UNIT = false>
__device__ __forceinline__ void gate_tile(float (&s)[8][4], FirTail<FIR>& tail, int key0, int pos_lo, int pos_hi,
                                          const GateParams& gp) {
  static_assert(CLAMP || !MASK, "masked keys are zeroed after the clamp");
  const unsigned FULL = 0xffffffffu;
  constexpr int TAPS = fir_taps<FIR>();  // the most taps this variant may sum
  constexpr int BACK = TAPS - 1;         // keys before a lane's first that a window may reach
  const int fir_k = FIR > 0 ? FIR : gp.fir_k;
  const int lane = threadIdx.x & 31, t = lane & 3, quad = lane & ~3;
  const int from = quad | ((t + 3) & 3);  // lane t - 1 of the quad (lane 3 for lane 0)
  if (!UNIT) {
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[j][c] = __fmul_rn(gp.scale, s[j][c]);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // r of keys 16t - BACK .. 16t + 15: w[BACK + m] is key 16t + m, the BACK before it come from
    // lane t - 1 (lane 3's previous tile for lane 0).
    float w[BACK + 16];
    float* const r = w + BACK;
#pragma unroll
    for (int m = 0; m < 16; ++m) r[m] = gate_rectify<RELU>(s[m >> 1][2 * h + (m & 1)], gp.relu_pre);
#pragma unroll
    for (int i = 0; i < BACK; ++i) {
      w[BACK - 1 - i] = __shfl_sync(FULL, t == 3 ? tail.r[h][i] : r[15 - i], from);
      tail.r[h][i] = r[15 - i];
    }
    const int pos = h == 0 ? pos_lo : pos_hi;
    const int key = key0 + 16 * t;
#pragma unroll
    for (int m = 0; m < 16; ++m) {
      float sum = r[m];
      if (UNIT && FIR == 3) {
        // Keys 2i and 2i + 1 (m even and odd) share the sum of r of keys 2i and 2i - 1.
        const int e = m & ~1;
        sum = __fadd_rn(__fadd_rn(r[e], r[e - 1]), m & 1 ? r[m] : r[m - 2]);
      } else {
#pragma unroll
        for (int f = 1; f < TAPS; ++f) {
          if (FIR > 0 || f < fir_k) sum = __fadd_rn(sum, r[m - f]);
        }
      }
      const float sc = s[m >> 1][2 * h + (m & 1)];
      const float z = __fmaf_rn(-gp.sigma_over_f, sum, sc);
      const float c = CLAMP ? clamp_nan(z, gp.clip_min, gp.clip_max) : z;
      const float p = UNIT ? c : __fmul_rn(gp.gamma, c);
      s[m >> 1][2 * h + (m & 1)] = !MASK || key + m <= pos ? p : 0.0f;
    }
  }
}

// The clamp gate_tile<..., CLAMP = false> leaves out, on bf16 pairs: for gamma != 0,
// bf16(gamma * clamp(z, lo, hi)) = clamp(bf16(gamma * z), bf16(gamma lo), bf16(gamma hi)) with the
// bounds swapped for gamma < 0, since rounding (to f32, then to bf16) is monotonic: a z below lo
// rounds to at most gamma lo's rounding, which the clamp returns, and likewise above hi, while a
// z between them is untouched by either clamp. A NaN stays NaN (max.NaN, min.NaN). Only the sign
// of a zero p may differ (a p of -0 where the clamp gives +0), which adds the same zero to P V.
// One max and one min a pair where the f32 clamp took two instructions a score.
struct PackedClamp {
  unsigned lo, hi;  // the bounds in both halves
};

__device__ __forceinline__ PackedClamp packed_clamp(const GateParams& gp) {
  float a = __fmul_rn(gp.gamma, gp.clip_min), b = __fmul_rn(gp.gamma, gp.clip_max);
  if (gp.gamma < 0.0f) {
    const float t = a;
    a = b;
    b = t;
  }
  return PackedClamp{tc::pack_bf16x2(a, a), tc::pack_bf16x2(b, b)};
}

__device__ __forceinline__ unsigned clamp_bf16x2(unsigned v, const PackedClamp& c) {
  unsigned r;
  asm("max.NaN.bf16x2 %0, %1, %2;\n\tmin.NaN.bf16x2 %0, %0, %3;" : "=r"(r) : "r"(v), "r"(c.lo), "r"(c.hi));
  return r;
}

// Whether the tile of keys key0 .. key0 + 63 needs the causal test for a warp whose rows end at
// positions pos_lo, pos_hi (lane values): false when every key is at or before every row's
// position, the same answer on every lane.
__device__ __forceinline__ bool gate_tile_needs_mask(int key0, int pos_lo, int pos_hi) {
  const int lowest = __reduce_min_sync(0xffffffffu, min(pos_lo, pos_hi));
  return key0 + 63 > lowest;
}

}  // namespace hp1_prefill
