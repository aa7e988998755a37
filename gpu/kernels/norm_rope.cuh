#line 2 "norm_rope.cuh"
// norm_rope.cuh: q/k UClipNorm then RoPE of one 8-pair chunk of a head, from the qkv projection
// (SPEC section 1; the oracle's QNormRope / KNormRope round points). Needs ops_common.cuh.
//
// WHO. qk_norm_rope_cache.cu norms q and k of the rows cuBLASLt projects; the prefill attention
// kernels (hp1_prefill_mma.cu, hp1_prefill_wgmma.cu) may instead norm their own query tile
// straight from the qkv buffer, so no normed q goes through memory for those rows. Both call
// norm_rope_chunk, so both give the same bits. (The skinny GEMM's QkNormRopeCache epilogue,
// gemm_skinny.cu, computes decode rows with the same arithmetic written out again on its
// accumulator layout; gpu_gemm holds it to this pass bit for bit.)
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

    __device__ __forceinline__ RopeChunk(const float* __restrict__ rope, int pos, int head_dim, int j0) {
        const float* row = rope + (long long)pos * head_dim;
        const float4* cs = reinterpret_cast<const float4*>(row + j0);
        const float4* sn = reinterpret_cast<const float4*>(row + head_dim / 2 + j0);
        const float4 c0 = cs[0], c1 = cs[1], s0 = sn[0], s1 = sn[1];
        c[0] = c0.x; c[1] = c0.y; c[2] = c0.z; c[3] = c0.w; c[4] = c1.x; c[5] = c1.y; c[6] = c1.z; c[7] = c1.w;
        s[0] = s0.x; s[1] = s0.y; s[2] = s0.z; s[3] = s0.w; s[4] = s1.x; s[5] = s1.y; s[6] = s1.z; s[7] = s1.w;
    }
};

// Pair chunk j0 / 8 of the head whose qkv elements start at x: normed by norm_lo (channels j0 ..)
// and norm_hi (channels D/2 + j0 ..), rotated, rounded, as 8 packed bf16 each: lo the channels
// j0 .. j0 + 7, hi the channels D/2 + j0 .. D/2 + j0 + 7.
__device__ __forceinline__ void norm_rope_chunk(const bf16* __restrict__ x, int j0, const UClip8& norm_lo,
                                                const UClip8& norm_hi, const RopeChunk& r, uint4& lo_out,
                                                uint4& hi_out) {
    float lo[8], hi[8];
    load8(x + 2 * j0, lo);
    load8(x + 2 * j0 + 8, hi);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
        const float a = norm_lo(k, lo[k]);
        const float b = norm_hi(k, hi[k]);
        rope_rotate(a, b, r.c[k], r.s[k], lo[k], hi[k]);
    }
    lo_out = pack8_cvt(lo);
    hi_out = pack8_cvt(hi);
}

// What a prefill attention kernel needs to norm and rotate its own queries: q then points at
// the qkv buffer (q_row_stride its row), and positions at the step's positions of the same rows.
// positions == nullptr: q is already normed and rotated (the qk pass wrote it).
struct QNormRope {
    const int* __restrict__ positions;
    const float* __restrict__ rope;
    int max_pos;
    UClip norm;
};

// A prefill attention kernel's query tile normed and rotated from the qkv buffer: rows 0 .. R-1
// of head h, row r being qkv row token0 + r, by THREADS threads (this one tid), each holding one
// pair chunk p = tid % (D / 16) (its norm parameters read once) over rows tid / (D / 16), ...;
// store(r, c, v) puts natural 16-byte chunk c (channels 8 c .. 8 c + 7) of row r. Rows at or
// past `rows` are stored as zeros, as the cp.async path zero-fills them.
template <int D, int R, int THREADS, class Store>
__device__ __forceinline__ void norm_rope_q_tile(const bf16* __restrict__ qkv, long long row_stride,
                                                 const QNormRope& qn, long long token0, int rows, int h, int tid,
                                                 Store store) {
    constexpr int P = D / 16;
    static_assert(THREADS % P == 0 && R % (THREADS / P) == 0, "one pair chunk a thread, whole row passes");
    const int p = tid % P, j0 = 8 * p;
    const UClip8 norm_lo(qn.norm, j0), norm_hi(qn.norm, D / 2 + j0);
#pragma unroll
    for (int r = tid / P; r < R; r += THREADS / P) {
        uint4 lo = make_uint4(0u, 0u, 0u, 0u), hi = lo;
        if (r < rows) {
            const long long t = token0 + r;
            const RopeChunk chunk(qn.rope, clamp_position(qn.positions[t], qn.max_pos), D, j0);
            norm_rope_chunk(qkv + t * row_stride + (long long)h * D, j0, norm_lo, norm_hi, chunk, lo, hi);
        }
        store(r, p, lo);
        store(r, P + p, hi);
    }
}
