#line 2 "sampling_common.cuh"
// sampling_common.cuh: what sampling.cu's steps share: its launch constants (THREADS, SORT_CAP,
// the mass bins), the two row types (f32, and the LM head's bf16 widened exactly), SamplingRow
// (gpu::ops::sampling::SamplingRow's layout), the Threshold of a top-k/top-p cut, the shared
// Scratch, the order on logits (order_key, better), Philox4x32-10 and the Gumbel draw, and the
// fixed-order block reductions. sampling.cu's header has the
// algorithm; gpu::kernels prepends this file to it (after pdl.cuh and ops_common.cuh).

#define THREADS 512
#define WARPS (THREADS / 32)
#define SORT_CAP 2048
#define MASS_BITS 4
#define MASS_BINS 16
#define ALL_IDS 0xFFFFFFFFu
// No math_constants.h under NVRTC: the infinities by their bits.
#define POS_INF_F __int_as_float(0x7F800000)
#define NEG_INF __longlong_as_double((long long)0xFFF0000000000000ULL)

// A row of logits as the sampler reads it: f32 (the oracle's Logits, and the tests' rows) or the
// LM head's bf16 output read directly, each element widened exactly to the f32 the oracle's row
// holds, so both give the same token for the same values. vec(i, x) reads the VEC values from i
// (a multiple of VEC) in one 16-byte load, for a row that starts 16-byte aligned (aligned()).
struct F32Row {
    static constexpr unsigned VEC = 4;
    const float* p;
    __device__ __forceinline__ float operator[](unsigned i) const { return __ldg(p + i); }
    __device__ __forceinline__ bool aligned() const { return (reinterpret_cast<unsigned long long>(p) & 15u) == 0; }
    __device__ __forceinline__ void vec(unsigned i, float (&x)[VEC]) const {
        const float4 w = __ldg(reinterpret_cast<const float4*>(p + i));
        x[0] = w.x;
        x[1] = w.y;
        x[2] = w.z;
        x[3] = w.w;
    }
};
struct Bf16Row {
    static constexpr unsigned VEC = 8;
    const unsigned short* p;
    __device__ __forceinline__ float operator[](unsigned i) const {
        return __uint_as_float((unsigned)__ldg(p + i) << 16);
    }
    __device__ __forceinline__ bool aligned() const { return (reinterpret_cast<unsigned long long>(p) & 15u) == 0; }
    __device__ __forceinline__ void vec(unsigned i, float (&x)[VEC]) const {
        const uint4 w = __ldg(reinterpret_cast<const uint4*>(p + i));
        const unsigned words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            x[2 * k] = __uint_as_float(words[k] << 16);
            x[2 * k + 1] = __uint_as_float(words[k] & 0xffff0000u);
        }
    }
};

struct SamplingRow {
    unsigned long long seed;
    unsigned long long step;
    float temperature;
    unsigned top_k;
    float top_p;
    float min_p;
};

// The last member of "the first m tokens in the order" (see the header).
struct Threshold {
    unsigned key;
    unsigned id;
};

struct Scratch {
    unsigned hist[256];
    double warp_bins[WARPS][MASS_BINS];
    double bins[MASS_BINS];
    double warp_best[WARPS];
    unsigned warp_id[WARPS];
    unsigned digit;
    unsigned before;
    unsigned count;
    int cut;
    unsigned sort_key[SORT_CAP];
    unsigned sort_id[SORT_CAP];
    double running[SORT_CAP];
};

__device__ __forceinline__ unsigned order_key(float f) {
    unsigned b = __float_as_uint(f);
    if (f != f) b = 0xFF800000u;  // NaN orders as -inf (its row is faulted anyway)
    if (f == 0.0f) b = 0u;        // -0 == +0, as the oracle's f32 comparison
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// The logit a key came from (+0 for a zero).
__device__ __forceinline__ float key_value(unsigned k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

__device__ __forceinline__ bool survives(unsigned k, unsigned v, Threshold th) {
    return k > th.key || (k == th.key && v <= th.id);
}

// Larger value first, ties to the lower id; NaN never wins, so it never enters a reduction.
__device__ __forceinline__ bool better(double v, unsigned id, double best, unsigned best_id) {
    return v > best || (v == best && id < best_id);
}

// Philox4x32-10 (oracle::decode::philox), word 0 of the output.
__device__ __forceinline__ unsigned philox_word0(unsigned c0, unsigned c1, unsigned c2, unsigned c3,
                                                 unsigned k0, unsigned k1) {
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const unsigned hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        const unsigned hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    return c0;
}

// -ln(-ln u), u = (x + 0.5) 2^-32 with x Philox word 0 at counter (v, step), key seed.
__device__ __forceinline__ double gumbel(unsigned long long seed, unsigned long long step, unsigned v) {
    const unsigned x = philox_word0(v, (unsigned)step, (unsigned)(step >> 32), 0u,
                                    (unsigned)seed, (unsigned)(seed >> 32));
    const double u = ((double)x + 0.5) * 0x1p-32;
    return -log(-log(u));
}

// The warp's best (value, id) pair, in every lane.
__device__ __forceinline__ void warp_best(double& v, unsigned& id) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const double ov = __shfl_xor_sync(0xFFFFFFFFu, v, off);
        const unsigned oid = __shfl_xor_sync(0xFFFFFFFFu, id, off);
        if (better(ov, oid, v, id)) {
            v = ov;
            id = oid;
        }
    }
}

// The block's best (value, id) pair, returned to every thread.
__device__ void block_best(double& v, unsigned& id, Scratch& sh) {
    warp_best(v, id);
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        sh.warp_best[warp] = v;
        sh.warp_id[warp] = id;
    }
    __syncthreads();
    if (warp == 0) {
        v = lane < WARPS ? sh.warp_best[lane] : NEG_INF;
        id = lane < WARPS ? sh.warp_id[lane] : ALL_IDS;
        warp_best(v, id);
        if (lane == 0) {
            sh.warp_best[0] = v;
            sh.warp_id[0] = id;
        }
    }
    __syncthreads();
    v = sh.warp_best[0];
    id = sh.warp_id[0];
    __syncthreads();
}

// The block's sum of one count per thread, returned to every thread.
__device__ unsigned block_count(unsigned c, Scratch& sh) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) c += __shfl_xor_sync(0xFFFFFFFFu, c, off);
    if (threadIdx.x % 32 == 0) sh.warp_id[threadIdx.x / 32] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned total = 0;
        for (int w = 0; w < WARPS; ++w) total += sh.warp_id[w];
        sh.count = total;
    }
    __syncthreads();
    const unsigned total = sh.count;
    __syncthreads();
    return total;
}

// Sums each thread's MASS_BINS partial masses into sh.bins, in a fixed order.
__device__ void block_sum_bins(const double acc[MASS_BINS], Scratch& sh) {
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int b = 0; b < MASS_BINS; ++b) {
        double s = acc[b];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xFFFFFFFFu, s, off);
        if (lane == 0) sh.warp_bins[warp][b] = s;
    }
    __syncthreads();
    if (threadIdx.x < MASS_BINS) {
        double s = 0.0;
        for (int w = 0; w < WARPS; ++w) s += sh.warp_bins[w][threadIdx.x];
        sh.bins[threadIdx.x] = s;
    }
    __syncthreads();
}
