#line 2 "silu_mul.cu"
// The MLP's gated product (SPEC section 1): out = bf16(silu(gate) * up), the oracle's MlpProduct
// round point, with silu(g) = g / (1 + exp(-g)) in f32 exactly as oracle::model::forward writes
// it (expf, the accurate one: the crate never compiles with fast-math).
//
// Buffers: gate_up bf16 [tokens, 2 I], each row the output of one GEMM against the gate/up weight
// in its interleaved layout (gpu::gemm::layout): elements 16 i + j are gate channel 8 i + j and
// elements 16 i + 8 + j up channel 8 i + j, j < 8; out bf16 [tokens, I]. One thread per 8
// consecutive output channels (16-byte accesses: its 8 gates, then its 8 ups), grid-stride;
// I % 8 == 0 keeps a vector inside one row. No shared memory.
// The skinny GEMM's SiluMul epilogue (gemm_skinny.cu) computes the same product with the same
// silu_product, so the fused decode rows and these prefill rows give the same bits.
// Assumes (checked by gpu::ops::silu_mul): shapes as above, 16-byte aligned buffers.

// silu(g) * u with every operation rounded on its own (the _rn intrinsics are never contracted),
// as gemm_skinny.cu's copy computes it: the same bits whatever the compiler would fuse around it.
__device__ __forceinline__ float silu_product(float g, float u) {
    return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

extern "C" __global__ void silu_mul(
    const bf16* __restrict__ gate_up,
    bf16* __restrict__ out,
    long long num_vecs,
    int inter)
{
    pdl_begin();
    for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < num_vecs;
         v += (long long)gridDim.x * blockDim.x) {
        const long long e = v * 8;
        const long long t = e / inter;
        const long long c0 = e % inter;
        const bf16* pair = gate_up + t * 2 * inter + 2 * c0;
        float g[8], u[8];
        load8(pair, g);
        load8(pair + 8, u);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            g[k] = silu_product(g[k], u[k]);
        }
        store8(out + e, g);
    }
}
