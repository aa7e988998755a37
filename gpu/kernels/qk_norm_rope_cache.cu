#line 2 "qk_norm_rope_cache.cu"
// Fused q/k UClipNorm + RoPE + paged KV-cache write: one launch between the qkv GEMM and
// attention (SPEC section 1; rounding per oracle::model::precision).
//
// For each token t at position pos = positions[t]:
//   q[t, h]            = bf16(rope(q_norm(qkv q head h), pos))        h < Hq
//   key_cache[slot, g] = bf16(rope(k_norm(qkv k head g), pos))        g < Hkv
//   value_cache[slot, g] = qkv v head g (already bf16, copied bit for bit)
// with slot = slot_mapping[t]. The arithmetic of a chunk is norm_rope.cuh's norm_rope_chunk
// (the oracle's QNormRope / KNormRope round points), which the prefill attention kernels share
// when they norm their own queries; the skinny GEMM's QkNormRopeCache epilogue (gemm_skinny.cu)
// computes the decode rows with the same arithmetic, and all give the same bits.
// q_out may be null: then no q is written (the prefill attention norms the rows' queries from
// qkv itself), and the pass moves only k and v.
//
// Buffers (bf16 unless said):
//   qkv          [tokens, (Hq + 2 Hkv) * D]  the fused projection: Hq q heads, then Hkv k heads,
//                                            then Hkv v heads, each D contiguous elements, in
//                                            the permuted layout of the qkv weight
//                                            (gpu::gemm::layout): in a q or k head, elements
//                                            16 p + j hold channel 8 p + j and 16 p + 8 + j
//                                            channel D/2 + 8 p + j (j < 8); v heads in order
//   positions    int32 [tokens]
//   slot_mapping int64 [tokens]   block * block_size + offset; negative = padding, nothing written
//   rope         f32 [max_pos, D]  row p = cos(p f_0..f_{D/2-1}) then sin(p f_0..f_{D/2-1})
//   q_norm_*, k_norm_*  f32 UClipNorm parameters over D (ops_common.cuh)
//   q_out        [tokens, Hq, D], or null
//   key_cache, value_cache  [num_slots = num_blocks * block_size, Hkv, D] (the vLLM flash layout)
//   fault        ops_common.cuh
//
// Work: one thread per (token, 8-pair chunk p), in a grid-stride loop (a StrideWalk over chunk
// p of token t). The thread reads the chunk's 8 cosines and sines and each norm's parameters of
// its channels once, then norms and rotates chunk p of every q head and every k head (its 8
// first-half channels and their 8 partners, 32 contiguous bytes a head) and copies channels
// 16 p .. 16 p + 15 of every v head: the table and parameters are read once a chunk, not once a
// head (they took most of the loads when a thread did one head's chunk). D must be a multiple
// of 16. Every access is 16 bytes. No shared memory.
//
// Assumes (checked by gpu::ops::qk_norm_rope): D % 16 == 0, 16-byte aligned buffers, sizes as
// above. A position outside [0, max_pos) is clamped into the table and a slot at or past
// num_slots is skipped; the first item of the token records either in the fault word.

// A grid-stride walk over a row-major [rows, per_row] item space: this thread's items i =
// first, first + stride, ... (first its index in the grid, stride the grid's threads) as (row,
// col), advanced by adds instead of a 64-bit division per item, which took a large share of this
// kernel's instructions (the division is a called routine; RESULTS run 162). Assumes a
// grid of fewer than 2^31 threads (gpu::ops launches at most 4096 x 256).
struct StrideWalk {
    long long row;
    int col;
    int drow, dcol, per_row;

    __device__ __forceinline__ explicit StrideWalk(int per_row_) : per_row(per_row_) {
        const unsigned first = blockIdx.x * blockDim.x + threadIdx.x, stride = gridDim.x * blockDim.x;
        row = first / (unsigned)per_row;
        col = (int)(first % (unsigned)per_row);
        drow = (int)(stride / (unsigned)per_row);
        dcol = (int)(stride % (unsigned)per_row);
    }
    __device__ __forceinline__ void advance() {
        row += drow;
        col += dcol;
        if (col >= per_row) {
            col -= per_row;
            ++row;
        }
    }
};

extern "C" __global__ void qk_norm_rope_cache(
    const bf16* __restrict__ qkv,
    const int* __restrict__ positions,
    const long long* __restrict__ slot_mapping,
    const float* __restrict__ rope,
    int max_pos,
    UCLIP_PARAMS(q_norm),
    UCLIP_PARAMS(k_norm),
    bf16* __restrict__ q_out,
    bf16* __restrict__ key_cache,
    bf16* __restrict__ value_cache,
    long long num_slots,
    int tokens,
    int num_heads,
    int num_kv_heads,
    int head_dim,
    unsigned* fault)
{
    pdl_begin();
    const UClip q_norm = UCLIP_OF(q_norm), k_norm = UCLIP_OF(k_norm);
    const int half = head_dim / 2;
    const int pair_chunks = half / 8;
    const long long row = (long long)(num_heads + 2 * num_kv_heads) * head_dim;

    for (StrideWalk walk(pair_chunks); walk.row < tokens; walk.advance()) {
        const int t = (int)walk.row;
        const int j0 = walk.col * 8;
        int pos = positions[t];
        const long long slot = slot_mapping[t];
        const bool pos_ok = pos >= 0 && pos < max_pos;
        const bool write_kv = slot >= 0 && slot < num_slots;
        if (j0 == 0) {
            if (!pos_ok) record_fault(fault, FAULT_POSITION, (unsigned)pos);
            if (slot >= num_slots) record_fault(fault, FAULT_SLOT, (unsigned)slot);
        }
        pos = clamp_position(pos, max_pos);
        const bf16* src = qkv + t * row;
        RopeChunk rope_chunk;
        rope_chunk.load(rope, pos, head_dim, j0);
        // Pair chunk j0 of head `head` (q heads 0 .. Hq, then k heads) into dst.
        const auto norm_rope = [&](const UClip8& norm_lo, const UClip8& norm_hi, int head, bf16* dst) {
            uint4 raw_lo, raw_hi, lo, hi;
            load_pair_chunk(src + (long long)head * head_dim, j0, raw_lo, raw_hi);
            norm_rope_chunk(raw_lo, raw_hi, norm_lo, norm_hi, rope_chunk, lo, hi);
            *reinterpret_cast<uint4*>(dst + j0) = lo;
            *reinterpret_cast<uint4*>(dst + half + j0) = hi;
        };
        if (q_out) {
            const UClip8 norm_lo(q_norm, j0), norm_hi(q_norm, half + j0);
            bf16* q_row = q_out + (long long)t * num_heads * head_dim;
#pragma unroll 2
            for (int h = 0; h < num_heads; ++h) norm_rope(norm_lo, norm_hi, h, q_row + (long long)h * head_dim);
        }
        if (!write_kv) continue;
        {
            const UClip8 norm_lo(k_norm, j0), norm_hi(k_norm, half + j0);
            bf16* k_row = key_cache + slot * num_kv_heads * head_dim;
#pragma unroll 2
            for (int g = 0; g < num_kv_heads; ++g)
                norm_rope(norm_lo, norm_hi, num_heads + g, k_row + (long long)g * head_dim);
        }
        // v chunks 2 j0 .. 2 j0 + 15 of every v head, copied bit for bit.
        const bf16* v_row = src + (long long)(num_heads + num_kv_heads) * head_dim + 2 * j0;
        bf16* v_dst = value_cache + slot * num_kv_heads * head_dim + 2 * j0;
        for (int g = 0; g < num_kv_heads; ++g) {
            const uint4* from = reinterpret_cast<const uint4*>(v_row + (long long)g * head_dim);
            uint4* to = reinterpret_cast<uint4*>(v_dst + (long long)g * head_dim);
            const uint4 v0 = from[0], v1 = from[1];
            to[0] = v0;
            to[1] = v1;
        }
    }
}
