#line 2 "ops_common.cuh"
// What the small per-token kernels share (prepended to each of their .cu files by gpu::kernels):
// bf16x8 vector loads and stores, the bf16 rounding of one value, the NaN-keeping UClipNorm, and
// the device fault word.
//
// bf16 vectors: 8 elements = 16 bytes per access, so every pointer handed to load8/store8 must be
// 16-byte aligned (the host wrappers check base pointers; row and head strides are multiples of 8
// elements by the shape checks).
//
// UClipNorm (SPEC section 3): y = weight[c] * clamp(alpha[c] * x, -1, 1) + bias[c] in f32. Each
// parameter is an f32 array read with a stride of 0 (shape [1], one value for every channel) or
// 1 (shape [C]); an absent bias is a [1] array holding 0, which adds exactly what the oracle's
// zero bias adds (so -0 becomes +0 the same way). The clamp keeps NaN, as oracle::norm does.
//
// Faults: a kernel that meets input it cannot use (a token id past the vocabulary, a position
// past the RoPE table, a slot past the cache, a logit row with NaN or +inf or nothing finite)
// masks it and records it here instead of reading or writing out of bounds. The word is
// unsigned[2 * FAULT_KINDS]: [2k] counts faults of kind k, [2k + 1] holds one offending value.
// gpu::ops::fault reads it back after a step; the kind numbers are its FaultKind discriminants.

// bf16 values travel as their 16 bits (no cuda_bf16.h: NVRTC does not ship it everywhere).
typedef unsigned short bf16;

#define FAULT_TOKEN_ID 0
#define FAULT_POSITION 1
#define FAULT_SLOT 2
#define FAULT_LOGITS 3
#define FAULT_KINDS 4

__device__ __forceinline__ void record_fault(unsigned* fault, int kind, unsigned value) {
    atomicAdd(&fault[2 * kind], 1u);
    atomicExch(&fault[2 * kind + 1], value);
}

// The bits of the bf16 nearest to x (ties to even; NaN stays a quiet NaN; overflow goes to inf),
// as half::bf16::from_f32 rounds: the definition of every bf16 rounding in the kernels.
__device__ __forceinline__ unsigned bf16_bits(float x) {
    const unsigned u = __float_as_uint(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (u >> 16) | 0x0040u;
    return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

// Rounds to the nearest bf16 and widens back: a bf16 store without the store.
__device__ __forceinline__ float round_bf16(float x) {
    return __uint_as_float(bf16_bits(x) << 16);
}

// Whether any of 8 values is NaN: four two-operand compares (setp.nan is true when either is NaN).
__device__ __forceinline__ bool any_nan8(const float v[8]) {
    unsigned r;
    asm("{\n\t.reg .pred p;\n\t"
        "setp.nan.f32 p, %1, %2;\n\t"
        "setp.nan.or.f32 p, %3, %4, p;\n\t"
        "setp.nan.or.f32 p, %5, %6, p;\n\t"
        "setp.nan.or.f32 p, %7, %8, p;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(r)
        : "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]), "f"(v[4]), "f"(v[5]), "f"(v[6]), "f"(v[7]));
    return r != 0;
}

// bf16_bits of 8 values, packed in pairs as they sit in memory (element 2k in the low half of
// word k), by the hardware: one cvt.rn.bf16x2 a pair, which rounds every number as bf16_bits
// does (ties to even, overflow to inf, subnormals kept: no .ftz); when any of the 8 is NaN,
// whose payload the conversion need not keep, all 8 take bf16_bits instead (a branch).
// gpu_ops holds this to bf16_bits on every one of the 2^32 f32 bit patterns (bf16_rounding.cu).
//
// WHICH FORM. The _cvt forms take a fraction of bf16_bits' instructions. The elementwise passes
// over [tokens, hidden] (peri_ln_residual, silu_mul, qk_norm_rope_cache, and the norm of
// embedding_norm) were bound by those (peri_ln_residual: ALU 75% busy, DRAM 27%, RESULTS run 129)
// and use them. The GEMM
// epilogues keep bf16_bits: rounding is a small share of a GEMM, and a first form that also
// rounded their outputs by the hardware (scalars with an out-of-line NaN call, vectors through
// pack8_cvt, and a max.NaN clamp) made the decode step 2% slower at B1 (run 130). Which of the
// three cost it was not measured apart; store8 in the epilogues alone is untried.
__device__ __forceinline__ uint4 pack8_cvt(const float v[8]) {
    unsigned w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w[k]) : "f"(v[2 * k + 1]), "f"(v[2 * k]));
    if (any_nan8(v)) {
#pragma unroll
        for (int k = 0; k < 4; ++k) w[k] = bf16_bits(v[2 * k]) | (bf16_bits(v[2 * k + 1]) << 16);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// Widens 8 bf16 values, loaded as one 16-byte vector (by whatever load policy), to f32.
__device__ __forceinline__ void load8_raw(const uint4 raw, float out[8]) {
    const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        out[2 * k] = __uint_as_float(w[k] << 16);
        out[2 * k + 1] = __uint_as_float(w[k] & 0xFFFF0000u);
    }
}

// Loads 8 consecutive bf16 values (16-byte aligned) as f32.
__device__ __forceinline__ void load8(const bf16* p, float out[8]) {
    load8_raw(*reinterpret_cast<const uint4*>(p), out);
}

// Rounds 8 f32 values to bf16 and stores them (16-byte aligned).
__device__ __forceinline__ void store8(bf16* p, const float in[8]) {
    unsigned w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) w[k] = bf16_bits(in[2 * k]) | (bf16_bits(in[2 * k + 1]) << 16);
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

// store8 through pack8_cvt (the same bits).
__device__ __forceinline__ void store8_cvt(bf16* p, const float in[8]) {
    *reinterpret_cast<uint4*>(p) = pack8_cvt(in);
}

// v[k] = round_bf16(v[k]) for 8 values at once, through pack8_cvt (the same bits).
__device__ __forceinline__ void round8_cvt(float v[8]) {
    load8_raw(pack8_cvt(v), v);
}

// One UClipNorm's parameters as the kernels receive them (strides 0 or 1, see above).
struct UClip {
    const float* alpha;
    const float* weight;
    const float* bias;
    int alpha_stride;
    int weight_stride;
    int bias_stride;
};

// A norm's kernel parameters, named p_alpha, p_alpha_stride, ... (the order gpu::ops's
// UClipNormParams::push passes them in), and the UClip built from them.
#define UCLIP_PARAMS(p)                                                                          \
  const float *p##_alpha, int p##_alpha_stride, const float *p##_weight, int p##_weight_stride, \
      const float *p##_bias, int p##_bias_stride
#define UCLIP_OF(p) UClip{p##_alpha, p##_weight, p##_bias, p##_alpha_stride, p##_weight_stride, p##_bias_stride}

// clamp(v, -1, 1), NaN kept: max.NaN and min.NaN return NaN when either input is, in two
// instructions where the compare-and-select form took three (RESULTS run 178). Their NaN is the
// canonical one where the select form kept v's payload; every use multiplies the result, which
// makes any NaN canonical, so uclip's bits are the same either way.
__device__ __forceinline__ float clip_unit(float v) {
    float r;
    asm("max.NaN.f32 %0, %1, 0fBF800000;" : "=f"(r) : "f"(v));
    asm("min.NaN.f32 %0, %1, 0f3F800000;" : "=f"(r) : "f"(r));
    return r;
}

// The norm's parameters of channel c, read once (into registers) for several values.
struct UClip1 {
    float a, w, b;

    UClip1() = default;
    __device__ __forceinline__ UClip1(const UClip& n, int c)
        : a(n.alpha[c * n.alpha_stride]), w(n.weight[c * n.weight_stride]), b(n.bias[c * n.bias_stride]) {}

    __device__ __forceinline__ float operator()(float x) const { return w * clip_unit(a * x) + b; }
};

// UClipNorm of channel c of value x, in f32.
__device__ __forceinline__ float uclip(const UClip& n, int c, float x) { return UClip1(n, c)(x); }

// A UClipNorm parameter of the 8 channels c0 .. c0 + 7 (c0 a multiple of 8): one value for all
// where the stride is 0, else two 16-byte loads (each parameter array is its own allocation, so
// 16-byte aligned). An elementwise pass over [tokens, hidden] that read them a float at a time
// spent its time on those loads: 48 scalar loads per 16 bytes of activations (RESULTS run 87).
__device__ __forceinline__ void load_param8(const float* p, int stride, int c0, float out[8]) {
    if (stride == 0) {
        const float v = p[0];
#pragma unroll
        for (int k = 0; k < 8; ++k) out[k] = v;
        return;
    }
    const float4 lo = *reinterpret_cast<const float4*>(p + c0);
    const float4 hi = *reinterpret_cast<const float4*>(p + c0 + 4);
    out[0] = lo.x; out[1] = lo.y; out[2] = lo.z; out[3] = lo.w;
    out[4] = hi.x; out[5] = hi.y; out[6] = hi.z; out[7] = hi.w;
}

// The norm's parameters of channels c0 .. c0 + 7 (c0 a multiple of 8), read once for uclip8.
struct UClip8 {
    float a[8], w[8], b[8];

    __device__ __forceinline__ UClip8(const UClip& n, int c0) {
        load_param8(n.alpha, n.alpha_stride, c0, a);
        load_param8(n.weight, n.weight_stride, c0, w);
        load_param8(n.bias, n.bias_stride, c0, b);
    }

    // uclip of channel c0 + k: the same expression, so the same bits.
    __device__ __forceinline__ float operator()(int k, float x) const {
        return w[k] * clip_unit(a[k] * x) + b[k];
    }
};

