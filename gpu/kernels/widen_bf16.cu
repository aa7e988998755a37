#line 2 "widen_bf16.cu"
// bf16 to f32, exactly: the logits the head GEMM stores as bf16 (the oracle's Logits round
// point) widened for the sampler, which reads f32 rows as the oracle's sampler does.
//
// Buffers: in bf16 [n], out f32 [n], n % 8 == 0. One thread per 8 consecutive elements (a
// 16-byte load, two 16-byte stores), grid-stride. No shared memory.
// Assumes (checked by gpu::ops::widen): shapes as above, 16-byte aligned buffers.

extern "C" __global__ void widen_bf16(
    const bf16* __restrict__ in,
    float* __restrict__ out,
    long long num_vecs)
{
    pdl_begin();
    for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < num_vecs;
         v += (long long)gridDim.x * blockDim.x) {
        float x[8];
        load8(in + v * 8, x);
        float4* o = reinterpret_cast<float4*>(out + v * 8);
        o[0] = make_float4(x[0], x[1], x[2], x[3]);
        o[1] = make_float4(x[4], x[5], x[6], x[7]);
    }
}
