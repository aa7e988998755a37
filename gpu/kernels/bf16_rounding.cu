#line 2 "bf16_rounding.cu"
// bf16_rounding.cu: holds ops_common.cuh's hardware bf16 rounding (pack8_cvt and round8_cvt:
// cvt.rn.bf16x2 with bf16_bits for NaN) to bf16_bits, the integer definition the oracle's
// half::bf16::from_f32 shares, on every one of the 2^32 f32 bit patterns. A check, not a model
// op: gpu::rounding_check launches it and verify's gpu_ops test reads the result.
//
// ALGORITHM. Pattern u is tested three ways: in pack8_cvt and round8_cvt beside its 7 neighbours
// u & ~7 .. u | 7 (contiguous); and in pack8_cvt beside the 7 patterns u + j 2^29 (spread over
// the whole range, so that the numbers a NaN shares a contiguous group with, which pack8_cvt then
// rounds through bf16_bits, meet the hardware conversion here). Every result must equal
// bf16_bits(u) (round8_cvt's widened back).
//
// LAUNCH. Any 1-D grid of 1-D CTAs; thread i takes groups i, i + threads, ... of the 2^29 groups
// of 8. count: u64, the patterns that differed in any of the three (zeroed by the host);
// first: u32, the lowest such pattern (0xFFFFFFFF from the host, kept when none differs);
// planted: a pattern (0 .. 2^32 - 1) whose results are taken as off by one, so that a caller can
// see the check catch a difference; -1 plants none.

__device__ __forceinline__ void check_pattern(unsigned u, unsigned got_bits, unsigned long long* count,
                                              unsigned* first, long long planted) {
    if ((long long)u == planted) got_bits ^= 1u;
    if (got_bits != bf16_bits(__uint_as_float(u))) {
        atomicAdd(count, 1ull);
        atomicMin(first, u);
    }
}

__device__ __forceinline__ void check_pack8(const unsigned u[8], unsigned long long* count, unsigned* first,
                                            long long planted) {
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = __uint_as_float(u[k]);
    const uint4 p = pack8_cvt(v);
    const unsigned w[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
    for (int k = 0; k < 8; ++k) check_pattern(u[k], (w[k / 2] >> (16 * (k & 1))) & 0xFFFFu, count, first, planted);
}

extern "C" __global__ void bf16_rounding_check(unsigned long long* count, unsigned* first, long long planted) {
    const unsigned groups = 1u << 29;
    for (unsigned g = blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += gridDim.x * blockDim.x) {
        unsigned contiguous[8], spread[8];
        float r[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            contiguous[k] = 8 * g + k;
            spread[k] = g + (unsigned)k * groups;
            r[k] = __uint_as_float(contiguous[k]);
        }
        check_pack8(contiguous, count, first, planted);
        check_pack8(spread, count, first, planted);
        round8_cvt(r);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const unsigned bits = __float_as_uint(r[k]);
            // round8_cvt widens: the low 16 bits must be 0, the high 16 the rounded value.
            check_pattern(contiguous[k], (bits & 0xFFFFu) ? 0x10000u : bits >> 16, count, first, planted);
        }
    }
}
