#line 2 "embedding.cu"
// The embedding gather (SPEC section 1): out[t] = table[ids[t]], bit for bit (the rows are bf16
// weights already, so this is not a rounding point).
//
// Buffers: ids uint32 [tokens]; table bf16 [vocab, hidden]; out bf16 [tokens, hidden]. One thread
// per 8 consecutive channels of one token (16-byte accesses), grid-stride; hidden % 8 == 0.
// An id >= vocab is never read: its row is filled with NaN (so nothing downstream mistakes it
// for a token) and the fault word records it (FAULT_TOKEN_ID). The host also refuses such ids
// before they reach the device (gpu::ops::embedding::check_token_ids); this is the backstop.
//
// embedding_norm also writes h = bf16(norm(out)), the first layer's input_layernorm (the
// oracle's InputNorm round point of layer 0), from the 16 bytes it just copied, with the uclip
// arithmetic of every norm (ops_common.cuh's UClip8), NaN rows included: the norm needs no
// launch of its own and does not read the rows back. Norm parameters f32 over hidden as UClip
// takes them. `embedding` alone gathers rows of any table (the LM head's picked rows too).
// Assumes (checked by gpu::ops::embedding): shapes as above, 16-byte aligned buffers.

// Token t's channels c0 .. c0 + 7: copied into out, and where NORM, normed into h.
template <bool NORM>
__device__ __forceinline__ void embed8(const unsigned* __restrict__ ids, const bf16* __restrict__ table,
                                       bf16* __restrict__ out, bf16* __restrict__ h, const UClip& norm, long long t,
                                       int c0, int hidden, unsigned vocab, unsigned* fault) {
    const unsigned id = ids[t];
    uint4 row;
    if (id >= vocab) {
        if (c0 == 0) record_fault(fault, FAULT_TOKEN_ID, id);
        // 0x7FC0 is the canonical bf16 quiet NaN.
        row = make_uint4(0x7FC07FC0u, 0x7FC07FC0u, 0x7FC07FC0u, 0x7FC07FC0u);
    } else {
        row = *reinterpret_cast<const uint4*>(table + (long long)id * hidden + c0);
    }
    *reinterpret_cast<uint4*>(out + t * hidden + c0) = row;
    if constexpr (NORM) {
        float xv[8];
        load8_raw(row, xv);
        const UClip8 norm8(norm, c0);
#pragma unroll
        for (int k = 0; k < 8; ++k) xv[k] = norm8(k, xv[k]);
        store8_cvt(h + t * hidden + c0, xv);
    }
}

template <bool NORM>
__device__ __forceinline__ void embed(const unsigned* __restrict__ ids, const bf16* __restrict__ table,
                                      bf16* __restrict__ out, bf16* __restrict__ h, const UClip& norm, int tokens,
                                      int hidden, unsigned vocab, unsigned* fault) {
    pdl_begin();
    const int chunks = hidden / 8;
    const long long total = (long long)tokens * chunks;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        embed8<NORM>(ids, table, out, h, norm, i / chunks, (int)(i % chunks) * 8, hidden, vocab, fault);
    }
}

extern "C" __global__ void embedding(
    const unsigned* __restrict__ ids,
    const bf16* __restrict__ table,
    bf16* __restrict__ out,
    int tokens,
    int hidden,
    unsigned vocab,
    unsigned* fault)
{
    embed<false>(ids, table, out, nullptr, UClip{}, tokens, hidden, vocab, fault);
}

extern "C" __global__ void embedding_norm(
    const unsigned* __restrict__ ids,
    const bf16* __restrict__ table,
    UCLIP_PARAMS(norm),
    bf16* __restrict__ out,
    bf16* __restrict__ h,
    int tokens,
    int hidden,
    unsigned vocab,
    unsigned* fault)
{
    embed<true>(ids, table, out, h, UCLIP_OF(norm), tokens, hidden, vocab, fault);
}
