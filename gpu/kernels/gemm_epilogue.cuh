#line 2 "gemm_epilogue.cuh"
// gemm_epilogue.cuh: what a GEMM of the model does with each finished output sum: store it, or
// run on it the elementwise op that follows that GEMM in the model (the EPILOGUES of
// gemm_skinny.cuh's header state each one's arithmetic and buffers). Shared by the skinny GEMM of
// decode rows (gemm_skinny.cuh), the decode megakernel (decode_mega.cu) and the WGMMA GEMM of
// prefill rows (gemm_wgmma.cu), so one row meets the same rounding points on every path. Needs
// loads.cuh, ops_common.cuh and norm_rope.cuh (rope_rotate, RopeChunk) before it.
//
// An epilogue is a functor with prefetch(t) and operator()(t), called by every thread of the
// tile's T::THREADS (threadIdx.x below that), on a finished tile t of T::XR rows of x and T::WR
// rows of W: t.sum(xr, wr) is the f32 output of x row t.row0 + xr and W row t.n0 + wr, t.has(xr,
// wr) whether that output exists, t.n the GEMM's N. Consecutive threads take consecutive outputs
// of one x row. The pairing epilogues (SiluMul, QkNormRopeCache) pair W rows 8 apart inside each
// 16-row group, so T::WR is a multiple of 16 and t.n0 too.
//
// wide(t) is the same arithmetic on 8 consecutive outputs of one x row per thread (one 16-row
// group per thread for the pairing epilogues), with 16-byte loads and stores, for a tile whose
// t.sum8(xr, wr, v) reads the 8 sums of W rows wr .. wr + 7 at once (the WGMMA GEMM's staged
// tile). It needs what load8/store8 need: N a multiple of 16, t.n0 and T::WR of 16, every buffer
// 16-byte aligned, and for QkNormRopeCache a head_dim that is a multiple of 16. One output a
// thread and store held the WGMMA GEMM's Store to a third of cuBLASLt's speed (RESULTS run 90).

namespace gemm_epilogue {

// silu(g) * u as silu_mul.cu computes it. Each operation is rounded on its own (the _rn
// intrinsics are never contracted), so the two files give the same bits whatever the compiler
// would fuse around them.
__device__ __forceinline__ float silu_product(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

// The wide walk: f(xr, wr) for x row xr and W rows wr .. wr + 7 (wr a multiple of 8) of the
// tile; consecutive threads take consecutive octets of one x row. N is a multiple of 16 and t.n0
// of 8, so an octet that starts inside N ends inside it.
template <class T, class F>
__device__ __forceinline__ void for_each_octet(const T& t, F f) {
  for (int e = threadIdx.x; e < T::XR * (T::WR / 8); e += T::THREADS) {
    const int xr = e / (T::WR / 8), wr = 8 * (e % (T::WR / 8));
    if (t.has(xr, wr)) f(xr, wr);
  }
}

// The wide walk of the pairing epilogues: f(xr, wr) for x row xr and the 16-row group of W rows
// wr .. wr + 15 (wr a multiple of 16), whose rows wr + j and wr + 8 + j pair.
template <class T, class F>
__device__ __forceinline__ void for_each_group(const T& t, F f) {
  for (int e = threadIdx.x; e < T::XR * (T::WR / 16); e += T::THREADS) {
    const int xr = e / (T::WR / 16), wr = 16 * (e % (T::WR / 16));
    if (t.has(xr, wr)) f(xr, wr);
  }
}

// A finished tile staged in shared memory as f32 rows of PAD floats ([XR][PAD], 16-byte aligned,
// PAD a multiple of 4): the tile of the TMA-fed GEMMs (gemm_wgmma.cu, gemm_skinny_wide.cu), whose
// consumers store their accumulators there before the epilogue, with the wide walk's sum8.
template <int ROWS_X, int ROWS_W, int CONSUMERS, int PAD>
struct StagedTile {
  static constexpr int XR = ROWS_X;
  static constexpr int WR = ROWS_W;
  static constexpr int THREADS = CONSUMERS;
  static_assert(PAD % 4 == 0, "16-byte rows");
  const float* part;  // [XR][PAD]
  int m;              // rows of x in this tile
  long long row0;
  int n0;
  int n;

  // Stores this thread's share of a warpgroup's m64 x WR wgmma accumulator d, whose rows are the
  // tile's rows row0 .. row0 + 63, into `part`. Fragment of m64nNk16 (PTX ISA, wgmma D): warp q
  // of the warpgroup holds its rows 16 q + lane / 4 (+ 8), columns 8 j + 2 (lane % 4) (+ 1) in
  // d[4 j + 2 h + (0, 1)].
  static __device__ __forceinline__ void stage(float* part, int row0, const float (&d)[WR / 2]) {
    const int lane = threadIdx.x & 31;
    const int row = row0 + ((threadIdx.x >> 5) & 3) * 16 + (lane >> 2), col = 2 * (lane & 3);
#pragma unroll
    for (int j = 0; j < WR / 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        *reinterpret_cast<float2*>(part + (row + 8 * h) * PAD + 8 * j + col) =
            make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
      }
    }
  }

  __device__ __forceinline__ bool has(int xr, int wr) const { return xr < m && n0 + wr < n; }
  __device__ __forceinline__ float sum(int xr, int wr) const { return part[xr * PAD + wr]; }
  // wr a multiple of 4, so two 16-byte loads.
  __device__ __forceinline__ void sum8(int xr, int wr, float v[8]) const {
    const float4 lo = *reinterpret_cast<const float4*>(part + xr * PAD + wr);
    const float4 hi = *reinterpret_cast<const float4*>(part + xr * PAD + wr + 4);
    v[0] = lo.x; v[1] = lo.y; v[2] = lo.z; v[3] = lo.w;
    v[4] = hi.x; v[5] = hi.y; v[6] = hi.z; v[7] = hi.w;
  }
};

// One CTA's share of a cluster's finished tile in the class forms (gemm_skinny_classes.cu,
// gemm_skinny_classes_wg.cu): x rows row0 .. row0 + ROWS_X - 1 by the cluster's ROWS_W rows of W,
// each of the CLASSES classes' partials received into recv[class][row][PAD], added in class
// order, ((p0 + p1) + p2) + ... (gemm_skinny.cuh's warp order).
template <int ROWS_X, int ROWS_W, int CTA_THREADS, int PAD, int CLASSES>
struct ClassShareTile {
  static constexpr int XR = ROWS_X;
  static constexpr int WR = ROWS_W;
  static constexpr int THREADS = CTA_THREADS;
  const float* recv;
  int m;           // rows of x in this share
  long long row0;  // the share's first row of x
  int n0;
  int n;

  __device__ __forceinline__ bool has(int xr, int wr) const { return xr < m && n0 + wr < n; }

  __device__ __forceinline__ float sum(int xr, int wr) const {
    float s = recv[xr * PAD + wr];
#pragma unroll
    for (int q = 1; q < CLASSES; ++q) s += recv[(q * XR + xr) * PAD + wr];
    return s;
  }
};

struct Store {
  bf16* y;

  template <class T>
  __device__ __forceinline__ void prefetch(const T&) const {}

  template <class T>
  __device__ __forceinline__ void operator()(const T& t) const {
    for (int e = threadIdx.x; e < T::XR * T::WR; e += T::THREADS) {
      const int xr = e / T::WR, wr = e % T::WR;
      if (t.has(xr, wr)) y[(t.row0 + xr) * t.n + t.n0 + wr] = (bf16)bf16_bits(t.sum(xr, wr));
    }
  }

  template <class T>
  __device__ __forceinline__ void wide(const T& t) const {
    for_each_octet(t, [&](int xr, int wr) {
      float v[8];
      t.sum8(xr, wr, v);
      store8(y + (t.row0 + xr) * t.n + t.n0 + wr, v);
    });
  }
};

// In: how the residual is read (loads.cuh).
template <class In>
struct PeriLn {
  const bf16* x_res;
  UClip after, before;
  bf16* x_out;
  bf16* h_out;

  // The residual and both norms' parameters of this thread's outputs, asked for while the
  // product runs: the epilogue's loads then find them near instead of waiting a memory latency.
  template <class T>
  __device__ __forceinline__ void prefetch(const T& t) const {
    for (int e = threadIdx.x; e < T::XR * T::WR; e += T::THREADS) {
      const int xr = e / T::WR, wr = e % T::WR;
      if (!t.has(xr, wr)) continue;
      const int c = t.n0 + wr;
      In::prefetch(x_res + (t.row0 + xr) * t.n + c);
      const auto params = [c](const UClip& u) {
        prefetch_constant(u.alpha + c * u.alpha_stride);
        prefetch_constant(u.weight + c * u.weight_stride);
        prefetch_constant(u.bias + c * u.bias_stride);
      };
      params(after);
      params(before);
    }
  }

  // Output i (channel c) of sum s, its residual's bits res, the norms' parameters of c.
  __device__ __forceinline__ void finish(long long i, float s, unsigned short res, const UClip1& after_c,
                                         const UClip1& before_c) const {
    const float normed = round_bf16(after_c(round_bf16(s)));
    const float x = round_bf16(__uint_as_float((unsigned)res << 16) + normed);
    x_out[i] = (bf16)bf16_bits(x);
    h_out[i] = (bf16)bf16_bits(before_c(x));
  }

  template <class T>
  __device__ __forceinline__ void operator()(const T& t) const {
    for (int e = threadIdx.x; e < T::XR * T::WR; e += T::THREADS) {
      const int xr = e / T::WR, wr = e % T::WR;
      if (!t.has(xr, wr)) continue;
      const int c = t.n0 + wr;
      const long long i = (t.row0 + xr) * t.n + c;
      finish(i, t.sum(xr, wr), In::load(x_res + i), UClip1(after, c), UClip1(before, c));
    }
  }

  // operator()(t) where the sums are ready only once wait() returns (the class forms' exchange
  // of partials, class_fold::finish): this thread's residuals and the parameters of its one
  // channel are loaded into registers first. The exchange ends in an acquire at cluster scope,
  // which drops L1 (CCTL.IVALL), so a prefetch there comes to nothing (RESULTS run 317);
  // registers keep the loads under way while the classes arrive.
  template <class T, class Wait>
  __device__ __forceinline__ void after_wait(const T& t, Wait wait) const {
    static_assert(T::THREADS % T::WR == 0, "a thread's outputs share one channel");
    constexpr int PER = (T::XR * T::WR + T::THREADS - 1) / T::THREADS;
    const int wr = threadIdx.x % T::WR, c = t.n0 + wr;
    UClip1 after_c{}, before_c{};
    unsigned short res[PER];
    if (c < t.n) {
      after_c = UClip1(after, c);
      before_c = UClip1(before, c);
    }
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      const int e = threadIdx.x + j * T::THREADS, xr = e / T::WR;
      res[j] = e < T::XR * T::WR && t.has(xr, wr) ? In::load(x_res + (t.row0 + xr) * t.n + c) : 0;
    }
    wait();
#pragma unroll
    for (int j = 0; j < PER; ++j) {
      const int e = threadIdx.x + j * T::THREADS, xr = e / T::WR;
      if (e < T::XR * T::WR && t.has(xr, wr)) finish((t.row0 + xr) * t.n + c, t.sum(xr, wr), res[j], after_c, before_c);
    }
  }

  template <class T>
  __device__ __forceinline__ void wide(const T& t) const {
    for_each_octet(t, [&](int xr, int wr) {
      const int c = t.n0 + wr;
      const long long i = (t.row0 + xr) * t.n + c;
      float v[8], res[8], h[8];
      t.sum8(xr, wr, v);
      load8_raw(In::load(reinterpret_cast<const uint4*>(x_res + i)), res);
      const UClip8 after8(after, c), before8(before, c);
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const float normed = round_bf16(after8(k, round_bf16(v[k])));
        v[k] = round_bf16(res[k] + normed);
        h[k] = before8(k, v[k]);
      }
      store8(x_out + i, v);
      store8(h_out + i, h);
    });
  }
};

// The pairing epilogues' walk: f(xr, o, wr) for x row xr and the rows wr and wr + 8 of one
// 16-row tile, o the pair's index within the x row; consecutive threads take consecutive o.
template <class T, class F>
__device__ __forceinline__ void for_each_pair(const T& t, F f) {
  for (int e = threadIdx.x; e < T::XR * T::WR / 2; e += T::THREADS) {
    const int xr = e / (T::WR / 2), o = e % (T::WR / 2), wr = 16 * (o / 8) + o % 8;
    if (t.has(xr, wr)) f(xr, o, wr);
  }
}

struct SiluMul {
  bf16* out;

  template <class T>
  __device__ __forceinline__ void prefetch(const T&) const {}

  template <class T>
  __device__ __forceinline__ void operator()(const T& t) const {
    static_assert(T::WR >= 16 && T::WR % 16 == 0, "gate and up rows pair inside a 16-row tile");
    // Output channel n0 / 2 + o: W rows 16 i + j and 16 i + 8 + j hold channel 8 i + j's gate and up.
    for_each_pair(t, [&](int xr, int o, int wr) {
      const float g = round_bf16(t.sum(xr, wr)), u = round_bf16(t.sum(xr, wr + 8));
      out[(t.row0 + xr) * (t.n / 2) + t.n0 / 2 + o] = (bf16)bf16_bits(silu_product(g, u));
    });
  }

  template <class T>
  __device__ __forceinline__ void wide(const T& t) const {
    // The group's 8 gate rows and 8 up rows give output channels (n0 + wr) / 2 .. + 7.
    for_each_group(t, [&](int xr, int wr) {
      float g[8], u[8];
      t.sum8(xr, wr, g);
      t.sum8(xr, wr + 8, u);
#pragma unroll
      for (int j = 0; j < 8; ++j) g[j] = silu_product(round_bf16(g[j]), round_bf16(u[j]));
      store8(out + (t.row0 + xr) * (t.n / 2) + (t.n0 + wr) / 2, g);
    });
  }
};

struct QkNormRopeCache {
  const int* positions;
  const long long* slot_mapping;
  const float* rope;
  int max_pos;
  UClip q_norm, k_norm;
  bf16* q_out;
  bf16* key_cache;
  bf16* value_cache;
  long long num_slots;
  int num_heads, num_kv_heads, head_dim;
  unsigned* fault;

  // A token's slot, its position clamped into the RoPE table, and whether its k and v are
  // written (a negative slot is padding, one past the cache a fault). The walk over W row 0
  // records the token's faults, once a token.
  struct Token {
    long long slot;
    int pos;
    bool write_kv;
  };

  __device__ __forceinline__ Token token(long long tok, int row) const {
    const int pos = positions[tok];
    const long long slot = slot_mapping[tok];
    if (row == 0) {
      if (pos < 0 || pos >= max_pos) record_fault(fault, FAULT_POSITION, (unsigned)pos);
      if (slot >= num_slots) record_fault(fault, FAULT_SLOT, (unsigned)slot);
    }
    return Token{slot, pos < 0 ? 0 : (pos >= max_pos ? max_pos - 1 : pos), slot >= 0 && slot < num_slots};
  }

  // Each pair's position and slot, asked for while the product runs (the rope row and the cache
  // row the epilogue reaches depend on them).
  template <class T>
  __device__ __forceinline__ void prefetch(const T& t) const {
    for_each_pair(t, [&](int xr, int, int) {
      prefetch_constant(positions + t.row0 + xr);
      prefetch_constant(slot_mapping + t.row0 + xr);
    });
  }

  template <class T>
  __device__ __forceinline__ void operator()(const T& t) const {
    static_assert(T::WR >= 16 && T::WR % 16 == 0, "a RoPE pair's rows pair inside a 16-row tile");
    const int half = head_dim / 2;
    for_each_pair(t, [&](int xr, int, int wr) {
      const long long tok = t.row0 + xr;
      const int row = t.n0 + wr;  // the pair's first W row: 16 p + j of its head, j < 8
      const int head = row / head_dim, at = row % head_dim;
      const Token at_tok = token(tok, row);
      const float lo_in = round_bf16(t.sum(xr, wr)), hi_in = round_bf16(t.sum(xr, wr + 8));
      if (head >= num_heads + num_kv_heads) {
        if (!at_tok.write_kv) return;
        bf16* dst = value_cache + (at_tok.slot * num_kv_heads + (head - num_heads - num_kv_heads)) * head_dim + at;
        dst[0] = (bf16)bf16_bits(lo_in);
        dst[8] = (bf16)bf16_bits(hi_in);
        return;
      }
      const bool is_q = head < num_heads;
      if (!is_q && !at_tok.write_kv) return;
      const UClip& norm = is_q ? q_norm : k_norm;
      const int j = 8 * (at / 16) + at % 16;  // channels j and half + j
      const float a = uclip(norm, j, lo_in);
      const float b = uclip(norm, half + j, hi_in);
      const float* angles = rope + (long long)at_tok.pos * head_dim;
      float lo, hi;
      rope_rotate(a, b, angles[j], angles[half + j], lo, hi);
      bf16* dst = is_q ? q_out + (tok * num_heads + head) * head_dim
                       : key_cache + (at_tok.slot * num_kv_heads + (head - num_heads)) * head_dim;
      dst[j] = (bf16)bf16_bits(lo);
      dst[half + j] = (bf16)bf16_bits(hi);
    });
  }

  // A group holds 16 rows of one head (head_dim is a multiple of 16): channels j0 .. j0 + 7 and
  // half + j0 .. half + j0 + 7 of a q or k head, or 16 consecutive channels of a v head.
  template <class T>
  __device__ __forceinline__ void wide(const T& t) const {
    static_assert(T::WR >= 16 && T::WR % 16 == 0, "a RoPE pair's rows pair inside a 16-row tile");
    const int half = head_dim / 2;
    for_each_group(t, [&](int xr, int wr) {
      const long long tok = t.row0 + xr;
      const int row = t.n0 + wr;
      const int head = row / head_dim, at = row % head_dim;
      const Token at_tok = token(tok, row);
      float lo[8], hi[8];
      t.sum8(xr, wr, lo);
      t.sum8(xr, wr + 8, hi);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        lo[j] = round_bf16(lo[j]);
        hi[j] = round_bf16(hi[j]);
      }
      if (head >= num_heads + num_kv_heads) {
        if (!at_tok.write_kv) return;
        bf16* dst = value_cache + (at_tok.slot * num_kv_heads + (head - num_heads - num_kv_heads)) * head_dim + at;
        store8(dst, lo);
        store8(dst + 8, hi);
        return;
      }
      const bool is_q = head < num_heads;
      if (!is_q && !at_tok.write_kv) return;
      const int j0 = at / 2;
      // Chosen by value, field by field: a reference chosen at run time would put the functor
      // in local memory.
      const UClip norm = is_q ? q_norm : k_norm;
      const UClip8 norm_lo(norm, j0), norm_hi(norm, half + j0);
      RopeChunk angles;
      angles.load(rope, at_tok.pos, head_dim, j0);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float a = norm_lo(j, lo[j]), b = norm_hi(j, hi[j]);
        rope_rotate(a, b, angles.c[j], angles.s[j], lo[j], hi[j]);
      }
      bf16* dst = is_q ? q_out + (tok * num_heads + head) * head_dim
                       : key_cache + (at_tok.slot * num_kv_heads + (head - num_heads)) * head_dim;
      store8(dst + j0, lo);
      store8(dst + half + j0, hi);
    });
  }
};

// The epilogues' kernel parameters after the operands and (m, n, k), and the epilogue built from
// them (a norm's as ops_common.cuh's UCLIP_PARAMS).

#define STORE_PARAMS bf16* __restrict__ y
#define STORE_EPILOGUE gemm_epilogue::Store{y}
#define PERILN_PARAMS                                                                                 \
  const bf16* __restrict__ x_res, UCLIP_PARAMS(after), UCLIP_PARAMS(before), \
      bf16* __restrict__ x_out, bf16* __restrict__ h_out
#define PERILN_EPILOGUE \
  gemm_epilogue::PeriLn<ReadOnlyLoads>{x_res, UCLIP_OF(after), UCLIP_OF(before), x_out, h_out}
#define SILU_MUL_PARAMS bf16* __restrict__ out
#define SILU_MUL_EPILOGUE gemm_epilogue::SiluMul{out}
#define QK_PARAMS                                                                                      \
  const int *__restrict__ positions, const long long *__restrict__ slot_mapping,                      \
      const float *__restrict__ rope, int max_pos, UCLIP_PARAMS(q_norm),                   \
      UCLIP_PARAMS(k_norm), bf16 *__restrict__ q_out, bf16 *__restrict__ key_cache,      \
      bf16 *__restrict__ value_cache, long long num_slots, int num_heads, int num_kv_heads, int head_dim, \
      unsigned *fault
#define QK_EPILOGUE                                                                                  \
  gemm_epilogue::QkNormRopeCache{positions, slot_mapping, rope, max_pos, UCLIP_OF(q_norm),     \
                               UCLIP_OF(k_norm), q_out, key_cache, value_cache, num_slots,  \
                               num_heads, num_kv_heads, head_dim, fault}

}  // namespace gemm_epilogue
