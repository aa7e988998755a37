#line 2 "peri_ln_residual.cu"
// The Peri-LN norms around each sublayer (SPEC section 1): the fused residual step, elementwise
// over [tokens, hidden] (UClipNorm has no reduction). The first layer's input_layernorm, the one
// norm without a residual before it, is embedding.cu's embedding_norm.
//
// peri_ln_residual, out of place (a and x are only read):
//   x_out = bf16(x + bf16(norm_after(a)))        the residual stream after the sublayer
//   h_out = bf16(norm_before(x_out))             the next sublayer's input
// After attention: a = o_proj output, norm_after = post_attention_layernorm, norm_before =
// pre_feedforward_layernorm. After the MLP: a = down_proj output, norm_after =
// post_feedforward_layernorm, norm_before = the next layer's input_layernorm (or the final norm
// after the last layer). The three roundings are the oracle's PostAttnNorm / AttnResidual /
// PreFfnNorm (PostFfnNorm / FfnResidual / InputNorm) round points, in that order; the sum is
// formed in f32 from the two bf16 values.
//
// Buffers: a, x, x_out, h_out: bf16 [tokens, hidden]; norm parameters f32 over hidden
// (ops_common.cuh), read 8 channels at a time (UClip8). One thread per 8 consecutive elements
// (16-byte accesses) of the flattened tensor, grid-stride; hidden % 8 == 0 keeps each vector
// inside one row. No shared memory.
// Assumes (checked by gpu::ops::norm): shapes as above, 16-byte aligned buffers.

// The residual step of vector v (elements 8 v .. 8 v + 7), given a's and x's 16 bytes there.
// Its own function so that scripts/probes/peri_ln.cu times this arithmetic in other launch shapes.
__device__ __forceinline__ void peri_ln_residual8(const UClip& after, const UClip& before, uint4 a_raw, uint4 x_raw,
                                                  bf16* __restrict__ x_out, bf16* __restrict__ h_out, long long v,
                                                  int hidden) {
    const long long e = v * 8;
    const int c0 = (int)(e % hidden);
    float av[8], xv[8], hv[8];
    load8_raw(a_raw, av);
    load8_raw(x_raw, xv);
    const UClip8 after8(after, c0), before8(before, c0);
#pragma unroll
    for (int k = 0; k < 8; ++k) av[k] = after8(k, av[k]);
    round8_cvt(av);
#pragma unroll
    for (int k = 0; k < 8; ++k) xv[k] += av[k];
    // x_out's bits, stored as they are and widened for the next norm (rounded once).
    const uint4 x_bits = pack8_cvt(xv);
    load8_raw(x_bits, xv);
#pragma unroll
    for (int k = 0; k < 8; ++k) hv[k] = before8(k, xv[k]);
    *reinterpret_cast<uint4*>(x_out + e) = x_bits;
    store8_cvt(h_out + e, hv);
}

extern "C" __global__ void peri_ln_residual(
    const bf16* __restrict__ a,
    const bf16* __restrict__ x,
    UCLIP_PARAMS(after),
    UCLIP_PARAMS(before),
    bf16* __restrict__ x_out,
    bf16* __restrict__ h_out,
    long long num_vecs,
    int hidden)
{
    pdl_begin();
    const UClip after = UCLIP_OF(after), before = UCLIP_OF(before);
    for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < num_vecs;
         v += (long long)gridDim.x * blockDim.x) {
        const uint4 a_raw = reinterpret_cast<const uint4*>(a)[v], x_raw = reinterpret_cast<const uint4*>(x)[v];
        peri_ln_residual8(after, before, a_raw, x_raw, x_out, h_out, v, hidden);
    }
}
