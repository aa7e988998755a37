#line 2 "embedding.cu"
// The embedding gather (SPEC section 1): out[t] = table[ids[t]], bit for bit (the rows are bf16
// weights already, so this is not a rounding point).
//
// Buffers: ids uint32 [tokens]; table bf16 [vocab, hidden]; out bf16 [tokens, hidden]. One thread
// per 8 consecutive channels of one token (16-byte accesses), grid-stride; hidden % 8 == 0.
// An id >= vocab is never read: its row is filled with NaN (so nothing downstream mistakes it
// for a token) and the fault word records it (FAULT_TOKEN_ID). The host also refuses such ids
// before they reach the device (gpu::ops::embedding::check_token_ids); this is the backstop.
// Assumes (checked by gpu::ops::embedding): shapes as above, 16-byte aligned buffers.

extern "C" __global__ void embedding(
    const unsigned* __restrict__ ids,
    const bf16* __restrict__ table,
    bf16* __restrict__ out,
    int tokens,
    int hidden,
    unsigned vocab,
    unsigned* fault)
{
    pdl_begin();
    const int chunks = hidden / 8;
    const long long total = (long long)tokens * chunks;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long t = i / chunks;
        const int c0 = (int)(i % chunks) * 8;
        const unsigned id = ids[t];
        uint4* dst = reinterpret_cast<uint4*>(out + t * hidden + c0);
        if (id >= vocab) {
            if (c0 == 0) record_fault(fault, FAULT_TOKEN_ID, id);
            // 0x7FC0 is the canonical bf16 quiet NaN.
            *dst = make_uint4(0x7FC07FC0u, 0x7FC07FC0u, 0x7FC07FC0u, 0x7FC07FC0u);
        } else {
            *dst = *reinterpret_cast<const uint4*>(table + (long long)id * hidden + c0);
        }
    }
}
