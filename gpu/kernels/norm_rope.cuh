#line 2 "norm_rope.cuh"
// norm_rope.cuh: q/k UClipNorm then RoPE of one 8-pair chunk of a head, from the qkv projection
// (SPEC section 1; the oracle's QNormRope / KNormRope round points). Needs ops_common.cuh.
//
// WHO. qk_norm_rope_cache.cu norms q and k of the rows cuBLASLt projects; the prefill attention
// kernels (hp1_prefill_mma.cu, hp1_prefill_wgmma.cu) may instead norm their own query tile
// straight from the qkv buffer, so no normed q goes through memory for those rows. Both call
// norm_rope_chunk, so both give the same bits. (The GEMMs' QkNormRopeCache epilogue,
// gemm_epilogue.cuh, computes decode rows with the same arithmetic written out again on its
// f32 sums; gpu_gemm holds it to this pass bit for bit.)
//
// LAYOUT. In a q or k head of the qkv projection (the permuted layout of gpu::gemm::layout),
// elements 16 p + j hold channel 8 p + j and elements 16 p + 8 + j channel D/2 + 8 p + j (j < 8):
// pair chunk p (rotation pairs 8 p .. 8 p + 7) is 32 contiguous bytes.
//
// ARITHMETIC. The norm (UClip8) and the rotation run in f32 and round once, to bf16 at the end:
// for j < D/2, y[j] = x[j] cos - x[j + D/2] sin, y[j + D/2] = x[j + D/2] cos + x[j] sin, with
// cos/sin from the host's table (f64, rounded to f32 once) and each product and fused add
// written as an _rn intrinsic, which the compiler never contracts.

// The rotate-half RoPE of the pair (a, b) = (x[j], x[j + D/2]) by the angle of cosine c and sine s.
__device__ __forceinline__ void rope_rotate(float a, float b, float c, float s, float& lo, float& hi) {
    lo = __fmaf_rn(a, c, -__fmul_rn(b, s));
    hi = __fmaf_rn(a, s, __fmul_rn(b, c));
}

// pos clamped into a RoPE table of max_pos rows (the callers record or have recorded the fault).
__device__ __forceinline__ int clamp_position(int pos, int max_pos) {
    return pos < 0 ? 0 : (pos >= max_pos ? max_pos - 1 : pos);
}

// The cosines and sines of rotation pairs j0 .. j0 + 7 (j0 a multiple of 8) at table row pos:
// row p of rope [max_pos, D] holds cos(p f_0 .. p f_{D/2-1}), then the sines.
struct RopeChunk {
    float c[8], s[8];

    __device__ __forceinline__ void load(const float* __restrict__ rope, int pos, int head_dim, int j0) {
        const float* row = rope + (long long)pos * head_dim;
        const float4* cs = reinterpret_cast<const float4*>(row + j0);
        const float4* sn = reinterpret_cast<const float4*>(row + head_dim / 2 + j0);
        const float4 c0 = cs[0], c1 = cs[1], s0 = sn[0], s1 = sn[1];
        c[0] = c0.x; c[1] = c0.y; c[2] = c0.z; c[3] = c0.w; c[4] = c1.x; c[5] = c1.y; c[6] = c1.z; c[7] = c1.w;
        s[0] = s0.x; s[1] = s0.y; s[2] = s0.z; s[3] = s0.w; s[4] = s1.x; s[5] = s1.y; s[6] = s1.z; s[7] = s1.w;
    }
};

// Pair chunk j0 / 8 of a head from its two raw 16-byte vectors (qkv elements 2 j0 .. 2 j0 + 15 of
// the head): normed by norm_lo (channels j0 ..) and norm_hi (channels D/2 + j0 ..), rotated,
// rounded, as 8 packed bf16 each: lo the channels j0 .. j0 + 7, hi the channels D/2 + j0 ..
// D/2 + j0 + 7. The loads are the caller's, so it can have several chunks' in flight at once.
__device__ __forceinline__ void norm_rope_chunk(uint4 raw_lo, uint4 raw_hi, const UClip8& norm_lo,
                                                const UClip8& norm_hi, const RopeChunk& r, uint4& lo_out,
                                                uint4& hi_out) {
    float lo[8], hi[8];
    load8_raw(raw_lo, lo);
    load8_raw(raw_hi, hi);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
        const float a = norm_lo(k, lo[k]);
        const float b = norm_hi(k, hi[k]);
        rope_rotate(a, b, r.c[k], r.s[k], lo[k], hi[k]);
    }
    lo_out = pack8_cvt(lo);
    hi_out = pack8_cvt(hi);
}

// The two raw 16-byte vectors of pair chunk j0 / 8 of the head whose qkv elements start at x.
__device__ __forceinline__ void load_pair_chunk(const bf16* __restrict__ x, int j0, uint4& raw_lo, uint4& raw_hi) {
    raw_lo = *reinterpret_cast<const uint4*>(x + 2 * j0);
    raw_hi = *reinterpret_cast<const uint4*>(x + 2 * j0 + 8);
}

// What a prefill attention kernel needs to norm and rotate its own queries: q then points at
// the qkv buffer (q_row_stride its row). rope == nullptr: q is already normed and rotated (the
// qk pass wrote it).
struct QNormRope {
    const float* __restrict__ rope;
    int max_pos;
    UClip norm;
};

// A prefill attention kernel's query tile normed and rotated from the qkv buffer: rows 0 .. R-1
// of head h, row r being qkv row token0 + r at position first_pos + r (a query's place in its
// sequence: what the causal mask takes it for, and what the engine's positions buffer holds for
// it, gpu_backend::step_buffers::positions), by THREADS threads (this one tid), each holding one
// pair chunk p = tid % (D / 16) (its norm parameters read once) over rows tid / (D / 16), ...;
// store(r, c, v) puts natural 16-byte chunk c (channels 8 c .. 8 c + 7) of row r. Rows at or
// past `rows` are stored as zeros, as the cp.async path zero-fills them.
// COST (RESULTS runs 176-178): about 630 instructions a thread at D = 128 (64 elements at 8 to 9
// rounded operations each, plus addressing), more than one key tile of the WGMMA kernel, whose
// time follows its instruction count; the attention takes 14 us more a layer at 16K rows, the
// pass 20 us less. The loads are arranged so that rows do not also wait on each other: no load
// waits on a loaded position (positions come from the tile), the rows are branch-free (a row
// past `rows` reads the last one and is dropped), every row's qkv vectors are loaded first, and
// the RoPE rows two rows at a time (the rounding's NaN branch ends a block that later loads are
// not hoisted past, and all four rows' RoPE values at once would not fit 128 registers). Every
// row is computed before any is stored: a shared store, with its memory clobber, would hold the
// loads after it.
template <int D, int R, int THREADS, class Store>
__device__ __forceinline__ void norm_rope_q_tile(const bf16* __restrict__ qkv, long long row_stride,
                                                 const QNormRope& qn, long long token0, int first_pos, int rows,
                                                 int h, int tid, Store store) {
    constexpr int P = D / 16, PASS = THREADS / P, ROWS = R / PASS;
    static_assert(THREADS % P == 0 && R % PASS == 0, "one pair chunk a thread, whole row passes");
    static_assert(ROWS % 2 == 0, "rows in pairs");
    const int p = tid % P, j0 = 8 * p, r0 = tid / P;
    const UClip8 norm_lo(qn.norm, j0), norm_hi(qn.norm, D / 2 + j0);
    uint4 lo[ROWS], hi[ROWS];
    if (rows > 0) {
        int row[ROWS];
        uint4 raw[ROWS][2];
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
            row[i] = min(r0 + i * PASS, rows - 1);
            load_pair_chunk(qkv + (token0 + row[i]) * row_stride + (long long)h * D, j0, raw[i][0], raw[i][1]);
        }
#pragma unroll
        for (int i0 = 0; i0 < ROWS; i0 += 2) {
            RopeChunk chunk[2];
#pragma unroll
            for (int b = 0; b < 2; ++b)
                chunk[b].load(qn.rope, clamp_position(first_pos + row[i0 + b], qn.max_pos), D, j0);
#pragma unroll
            for (int b = 0; b < 2; ++b)
                norm_rope_chunk(raw[i0 + b][0], raw[i0 + b][1], norm_lo, norm_hi, chunk[b], lo[i0 + b], hi[i0 + b]);
        }
    }
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
        if (r0 + i * PASS >= rows) lo[i] = hi[i] = make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
        store(r0 + i * PASS, p, lo[i]);
        store(r0 + i * PASS, P + p, hi[i]);
    }
}
