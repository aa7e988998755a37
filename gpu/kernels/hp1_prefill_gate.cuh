#line 2 "hp1_prefill_gate.cuh"
// hp1_prefill_gate.cuh: the HP1 gate (SPEC section 2) applied in registers to one warp's scores of
// a 16-row x 64-key tile, for the tensor-core prefill kernels. Independent of how the scores were
// made: the layout below is the C fragment of eight mma m16n8 tiles side by side, and also one
// warp's share of a Hopper wgmma m64n64 accumulator (warp w of the warpgroup holds rows 16w ..
// 16w+15), so the MMA and WGMMA kernels share this file.
//
// LAYOUT. Lane = 4 g + t. s[j][0], s[j][1] are row g, keys key0 + 8j + 2t and + 1; s[j][2], s[j][3]
// are row g + 8, the same keys. A row's 64 keys thus live in one quad (4 lanes), 16 per lane.
//
// GATE, exactly as oracle::hp1::gate::Gate::apply in f32, every operation an explicitly rounded
// intrinsic so no instantiation can contract it differently:
//   s = scale * acc; r = relu_pre ? max(s, 0) : s (r = 0 for keys before 0);
//   sum = ((0 + r_t) + r_{t-1}) + ... + r_{t-F+1}; m = sum * inv_f (inv_f = 1/F rounded);
//   z = s - sigma * m; p = gamma * clamp(z, clip_min, clip_max), NaN passing the clamp.
// Keys past the row's position get p = 0 (causal mask; a row with position -1 is all masked).
// Two departures from that text change at most the sign of a zero p, and so no output bit: the
// sum starts at r_t (0 + r_t differs from r_t only when r_t is -0), and the clamp is max.NaN then
// min.NaN (a NaN z stays NaN, as with the selects; the two differ only in which zero a zero z
// against a zero bound gives). A zero p of either sign adds a zero to an accumulator that starts
// at +0 (or holds a nonzero sum), and gamma times a NaN is NaN either way, so P V has the same
// bits. The clamp's two instructions in place of two compares and two selects took the model's
// prefill attention from 118.8 to 108.5 us a layer (RESULTS run 101); the kernel is bound by
// issuing the gate's instructions (run 99).
//
// FIR WINDOW. Key c = key0 + 8j + 2t + e needs r of keys c-1 .. c-F+1 (F <= 8), all in the row's
// quad: the pair of lane t-k (k = 1, 2, 3) of n-tile j when t >= k, else of n-tile j-1, plus (for
// F = 8) this lane's own pair of n-tile j-1. Which n-tile the reader wants depends only on the
// source lane's t (t + k <= 3 means the reader's t is >= k), so the source picks before one
// __shfl_sync per (k, element): up to 6 per n-tile and row, only as many as the compile-time
// taps need (2 for 3 taps). The full-warp mask is right here: a warp calls the gate as a whole
// (every lane the same trip counts, no shuffle under a run-time condition), never from divergent
// code. N-tile -1 of key tile 0 is the FIR tail.
//
// FIR TAIL. FirTail holds this lane's r of the previous key tile's n-tile 7 (keys key0 - 8 + 2t
// and key0 - 7 + 2t) for row g (r[0][0..1]) and row g + 8 (r[1][0..1]): exactly the values n-tile
// -1 stands for. fir_tail_init sets it to 0 (the r of keys before 0) before a row's first key
// tile, which must have key0 = 0; gate_tile then reads it and leaves this tile's n-tile 7 there,
// so key tiles must be gated in order key0 = 0, 64, 128, ... A warp may stop calling gate_tile
// once every key of a tile is past both of its rows' positions (later tiles are then all masked).

namespace hp1_prefill {

// Per-head gate parameters (inv_f = __fdiv_rn(1, fir_k), as the oracle computes 1/F).
struct GateParams {
  float scale, sigma, gamma, inv_f, clip_min, clip_max;
  int fir_k;     // 1 .. 8
  int relu_pre;  // 0 or 1
};

// This lane's r of the previous key tile's last n-tile, per row half (g, g + 8) and element.
struct FirTail {
  float r[2][2];
};

__device__ __forceinline__ void fir_tail_init(FirTail& tail) {
  tail.r[0][0] = tail.r[0][1] = tail.r[1][0] = tail.r[1][1] = 0.0f;
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
template <int FIR, int RELU, bool MASK>
__device__ __forceinline__ void gate_tile(float (&s)[8][4], FirTail& tail, int key0, int pos_lo, int pos_hi,
                                          const GateParams& gp) {
  const unsigned FULL = 0xffffffffu;
  constexpr int TAPS = FIR > 0 ? FIR : 8;  // the most taps this variant may sum
  const int fir_k = FIR > 0 ? FIR : gp.fir_k;
  const int lane = threadIdx.x & 31, t = lane & 3, quad = lane & ~3;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) s[j][c] = __fmul_rn(gp.scale, s[j][c]);
  // The next tile's tail, taken before n-tile 7 becomes p.
  FirTail next;
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int e = 0; e < 2; ++e) next.r[h][e] = gate_rectify<RELU>(s[7][2 * h + e], gp.relu_pre);
  // Descending j, so that n-tile j - 1 still holds scores while n-tile j is gated.
#pragma unroll
  for (int j = 7; j >= 0; --j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float cur0 = gate_rectify<RELU>(s[j][2 * h], gp.relu_pre);
      const float cur1 = gate_rectify<RELU>(s[j][2 * h + 1], gp.relu_pre);
      const float prev0 = j == 0 ? tail.r[h][0] : gate_rectify<RELU>(s[j > 0 ? j - 1 : 0][2 * h], gp.relu_pre);
      const float prev1 = j == 0 ? tail.r[h][1] : gate_rectify<RELU>(s[j > 0 ? j - 1 : 0][2 * h + 1], gp.relu_pre);
      // w[i] = r of key (key0 + 8j + 2t + 1) - i; key c + 1 - i needs w[0 .. TAPS].
      float w[9];
      w[0] = cur1;
      w[1] = cur0;
#pragma unroll
      for (int k = 1; k <= 3; ++k) {
        const bool same_tile = t + k <= 3;  // as the reader (lane t + k mod 4) needs it
        const int src = quad | ((t - k) & 3);
        if (2 * k <= TAPS) w[2 * k] = __shfl_sync(FULL, same_tile ? cur1 : prev1, src);
        if (2 * k + 1 <= TAPS) w[2 * k + 1] = __shfl_sync(FULL, same_tile ? cur0 : prev0, src);
      }
      w[8] = prev1;
      float sum1 = w[0], sum0 = w[1];
#pragma unroll
      for (int f = 1; f < TAPS; ++f) {
        if (FIR > 0 || f < fir_k) {
          sum1 = __fadd_rn(sum1, w[f]);
          sum0 = __fadd_rn(sum0, w[f + 1]);
        }
      }
      const int pos = h == 0 ? pos_lo : pos_hi;
      const int key = key0 + 8 * j + 2 * t;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float sc = s[j][2 * h + e];
        const float z = __fsub_rn(sc, __fmul_rn(gp.sigma, __fmul_rn(e == 0 ? sum0 : sum1, gp.inv_f)));
        const float p = __fmul_rn(gp.gamma, clamp_nan(z, gp.clip_min, gp.clip_max));
        s[j][2 * h + e] = !MASK || key + e <= pos ? p : 0.0f;
      }
    }
  }
  tail = next;
}

// Whether the tile of keys key0 .. key0 + 63 needs the causal test for a warp whose rows end at
// positions pos_lo, pos_hi (lane values): false when every key is at or before every row's
// position, the same answer on every lane.
__device__ __forceinline__ bool gate_tile_needs_mask(int key0, int pos_lo, int pos_hi) {
  const int lowest = __reduce_min_sync(0xffffffffu, min(pos_lo, pos_hi));
  return key0 + 63 > lowest;
}

}  // namespace hp1_prefill
