#line 2 "silu_mul.cu"
// The MLP's gated product (SPEC section 1): out = bf16(silu(gate) * up), the oracle's MlpProduct
// round point, with silu(g) = g / (1 + exp(-g)) in f32 exactly as oracle::model::forward writes
// it (expf, the accurate one: the crate never compiles with fast-math).
//
// Buffers: gate_up bf16 [tokens, 2 I], each row the gate_proj output (I channels) then the
// up_proj output (I channels), as one GEMM against the concatenated [W_gate; W_up] produces;
// out bf16 [tokens, I]. One thread per 8 consecutive output channels (16-byte accesses),
// grid-stride; I % 8 == 0 keeps a vector inside one row. No shared memory.
// Assumes (checked by gpu::ops::silu_mul): shapes as above, 16-byte aligned buffers.

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
        const bf16* g_row = gate_up + t * 2 * inter;
        float g[8], u[8];
        load8(g_row + c0, g);
        load8(g_row + inter + c0, u);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            g[k] = g[k] / (1.0f + expf(-g[k])) * u[k];
        }
        store8(out + e, g);
    }
}
