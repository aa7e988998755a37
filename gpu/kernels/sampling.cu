#line 2 "sampling.cu"
// Choosing each row's next token on the device: greedy argmax, and the Gumbel-max sampler with
// temperature, top-k, top-p and min-p of oracle::decode::sampler, step for step (its module doc is
// the specification; the numbers below refer to its steps). Needs sampling_common.cuh (the launch
// constants, the row types, SamplingRow, Scratch, the order, Philox and the reductions) and
// cluster.cuh (a row's cluster of CTAs) before it.
//
// Buffers: logits [rows, vocab], f32 (argmax_rows, sample_rows) or bf16 (the `_bf16` entries: the
// LM head's output read as it is, each value widened exactly to its f32); params SamplingRow [rows]
// (seed, step, temperature, top_k, top_p, min_p: gpu::ops::sampling::SamplingRow, same layout);
// tokens u32 [rows]; survivors u32 [rows] (how many tokens the filters left, 1 at temperature 0, 0
// for a faulted row); fault as in ops_common.cuh. Launch: C CTAs of THREADS threads per row, rows *
// C CTAs in x, in clusters of C along x (the row's cluster, below; C = 1 launches no clusters),
// static shared memory (Scratch, about 38 KiB); vocab < 2^31.
//
// ROW SCAN. Steps 1 and, for a row whose temperature is its only filter (no top-k below the vocab,
// top-p 1), 5 read the whole row once; they are split over the C CTAs of the row's cluster (sm_90
// and later; the host picks C from the rows, gpu::ops::sampling), CTA c taking the c-th slice of
// the ids. Each CTA keeps its slice's argmax, fault and best score; CTA 0 reads the others' from
// their shared memory and combines them. Every one is the best pair of a total order or an or, so
// the token does not depend on the slicing. CTA 0 alone then runs steps 2 to 5 of a row that has
// top-k or top-p, as one CTA did for every row before.
//
// The order of step 3 (logit descending, ties by lower id; -0 == +0) is the order of the pair
// (order_key(logit) descending, id ascending), order_key being the usual order-preserving map of
// f32 bits to u32. A set "the first m tokens in that order" is a Threshold: the pair of its last
// member; a token survives iff key > th.key or (key == th.key and id <= th.id).
//
// Per row:
//  1. One pass: argmax (ties to the lowest id) and the check for NaN, +inf or no finite logit;
//     a bad row records FAULT_LOGITS, returns its argmax and survivors 0. Temperature 0 (step 2)
//     returns the argmax.
//  2. Top-k (k < vocab): radix select of the k-th pair: 4 passes of 8-bit digits over the keys
//     (256-bin shared histograms; a warp scan finds the digit), then, when only some of the tokens
//     tied at that key are kept, 4 passes over the ids of the tied tokens for the lowest ones.
//  3. Top-p (p < 1), step 4, over the top-k set, in f64 with s0 = max logit / T:
//     - at most SORT_CAP survivors: they are gathered into shared memory, bitonic-sorted into the
//       exact order, their weights exp(s_i - s0) computed in parallel, and one thread forms the
//       running sums left to right, as the oracle does; the first running sum >= p * Z (Z the last
//       one) is the cut. This is the oracle's arithmetic operation for operation.
//     - more: a radix select by mass. 8 passes of 4-bit key digits; each thread sums the weights
//       of its tokens into 16 registers by digit, a fixed-order block reduction gives each digit's
//       mass, and the digit where the mass of everything before it reaches p * Z is kept. The
//       tokens tied at the final key share one weight w, so the cut among them is the smallest r
//       with above + r w >= p Z, then the r lowest ids (as in 2). The sums here are tree sums, not
//       the oracle's left-to-right sum: the cut can differ only when a running sum lies within a
//       few ulps (relative ~1e-13) of p * Z.
//  4. Steps 5 and 6: one pass over the survivors of top-k and top-p. With min_p > 0 a token
//     stays only where exp(logit / T - s0) >= min_p in f64 (s0 the largest logit / T, whose own
//     weight is 1, so it always stays); each that stays gets score = logit / T + gumbel(seed, step,
//     id) in f64 with Philox4x32-10 exactly as oracle::decode::philox; block argmax, ties to the
//     lower id. A row with min_p is never a temperature-only row (ROW SCAN): s0 comes first.
// Every reduction has a fixed order, so a row's token does not depend on timing or on the batch.
//
// Not bit-exact with the oracle: CUDA's double exp and log are within 1 ulp of libm's, so a
// weight or a Gumbel draw may differ in its last bit; this changes a token only on a near-exact
// tie (two scores within ~1e-15 relative, or a running sum within that of p * Z).
//
// Cost per row (vocab V): steps 1 and 5 of a greedy or temperature-only row, one pass over V / C
// ids on each of C SMs (Philox and two f64 logs per id for temperature); a row with top-k or
// top-p then runs on one SM: top-k 4 passes (+4 when a tie group is split); top-p up to SORT_CAP
// survivors: one gather pass and a shared-memory sort; beyond: 8 mass passes (an f64 exp per
// token still in the interval, all V in the first) + 1 count pass (+4); the final pass computes
// Philox and two f64 logs per survivor. At V = 151936 a pass reads 594 KiB of f32 or 297 KiB of
// bf16 (from L2 after the first). Step 1 reads 16-byte vectors, four in flight per thread, where
// the row is 16-byte aligned: a slice's pass runs at the bytes its SM keeps in flight (step 5
// reads the slice again, an element a thread at a time, its f64 work the longer part). A greedy B1
// step's sampler took 17.6 us in one CTA and 8.4 in 8 (RESULTS runs 77, 122), and a B1 step at
// temperature 1.0 took 0.27 ms less with 8 (run 119). What remains at B1 (9.3 us under ncu, run
// 314) is fixed: the launch's first instructions, one load round trip, and the two cluster
// barriers of gather_row with their fences.

// Over sh.hist scanned from digit 255 down (descending) or from 0 up: the digit holding the
// rank-th element (1-based) and how many elements come before that digit, into sh.digit and
// sh.before. Warp 0 scans, 8 bins per lane; the caller guarantees rank <= the histogram's total.
__device__ void find_digit(unsigned rank, bool descending, Scratch& sh) {
    if (threadIdx.x < 32) {
        const unsigned lane = threadIdx.x;
        if (lane == 0) {
            sh.digit = 0;
            sh.before = 0;
        }
        __syncwarp();
        unsigned c[8];
        unsigned sum = 0;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const unsigned s = lane * 8 + k;
            c[k] = sh.hist[descending ? 255 - s : s];
            sum += c[k];
        }
        unsigned incl = sum;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const unsigned up = __shfl_up_sync(0xFFFFFFFFu, incl, off);
            if (lane >= (unsigned)off) incl += up;
        }
        const unsigned excl = incl - sum;
        if (excl < rank && rank <= incl) {
            unsigned before = excl;
            int found = -1;
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                if (found < 0) {
                    if (rank <= before + c[k]) found = k;
                    else before += c[k];
                }
            }
            const unsigned s = lane * 8 + found;
            sh.digit = descending ? 255 - s : s;
            sh.before = before;
        }
    }
    __syncthreads();
}

// The rank-th smallest id (1-based) among the tokens whose key is `key`.
template <class L>
__device__ unsigned select_id(L l, unsigned n, unsigned key, unsigned rank, Scratch& sh) {
    unsigned prefix = 0, mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (unsigned i = threadIdx.x; i < 256; i += THREADS) sh.hist[i] = 0;
        __syncthreads();
        for (unsigned v = threadIdx.x; v < n; v += THREADS) {
            if (order_key(l[v]) == key && (v & mask) == prefix) atomicAdd(&sh.hist[(v >> shift) & 255u], 1u);
        }
        __syncthreads();
        find_digit(rank, false, sh);
        rank -= sh.before;
        prefix |= sh.digit << shift;
        mask |= 255u << shift;
        __syncthreads();
    }
    return prefix;
}

// The rank-th pair (1-based) of the order over the whole row: top-k's threshold.
template <class L>
__device__ Threshold select_by_count(L l, unsigned n, unsigned rank, Scratch& sh) {
    unsigned prefix = 0, mask = 0, tied = n;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (unsigned i = threadIdx.x; i < 256; i += THREADS) sh.hist[i] = 0;
        __syncthreads();
        for (unsigned v = threadIdx.x; v < n; v += THREADS) {
            const unsigned k = order_key(l[v]);
            if ((k & mask) == prefix) atomicAdd(&sh.hist[(k >> shift) & 255u], 1u);
        }
        __syncthreads();
        find_digit(rank, true, sh);
        rank -= sh.before;
        tied = sh.hist[sh.digit];
        prefix |= sh.digit << shift;
        mask |= 255u << shift;
        __syncthreads();
    }
    Threshold th = {prefix, ALL_IDS};
    if (rank < tied) th.id = select_id(l, n, prefix, rank, sh);
    return th;
}

// Top-p over the (at most SORT_CAP) survivors of `th`, with the oracle's left-to-right sums.
template <class L>
__device__ Threshold nucleus_sorted(L l, unsigned n, Threshold th, double t, double s0, double p, Scratch& sh) {
    if (threadIdx.x == 0) sh.count = 0;
    __syncthreads();
    for (unsigned v = threadIdx.x; v < n; v += THREADS) {
        const unsigned k = order_key(l[v]);
        if (survives(k, v, th)) {
            const unsigned at = atomicAdd(&sh.count, 1u);
            if (at < SORT_CAP) {
                sh.sort_key[at] = k;
                sh.sort_id[at] = v;
            }
        }
    }
    __syncthreads();
    const unsigned m = min(sh.count, (unsigned)SORT_CAP);
    unsigned size = 1;
    while (size < m) size <<= 1;
    // Padding sorts last: no real key is 0 (-inf's key is 0x007FFFFF).
    for (unsigned i = m + threadIdx.x; i < size; i += THREADS) {
        sh.sort_key[i] = 0;
        sh.sort_id[i] = ALL_IDS;
    }
    __syncthreads();
    for (unsigned k = 2; k <= size; k <<= 1) {
        for (unsigned j = k >> 1; j > 0; j >>= 1) {
            for (unsigned i = threadIdx.x; i < size / 2; i += THREADS) {
                const unsigned lo = (i / j) * 2 * j + i % j, hi = lo + j;
                const unsigned klo = sh.sort_key[lo], khi = sh.sort_key[hi];
                const unsigned ilo = sh.sort_id[lo], ihi = sh.sort_id[hi];
                const bool hi_first = khi > klo || (khi == klo && ihi < ilo);
                if (hi_first == ((lo & k) == 0)) {
                    sh.sort_key[lo] = khi;
                    sh.sort_key[hi] = klo;
                    sh.sort_id[lo] = ihi;
                    sh.sort_id[hi] = ilo;
                }
            }
            __syncthreads();
        }
    }
    for (unsigned i = threadIdx.x; i < m; i += THREADS) {
        sh.running[i] = exp((double)l[sh.sort_id[i]] / t - s0);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double run = 0.0;
        for (unsigned i = 0; i < m; ++i) {
            run += sh.running[i];
            sh.running[i] = run;
        }
        sh.cut = (int)m - 1;
    }
    __syncthreads();
    const double target = p * sh.running[m - 1];
    for (unsigned i = threadIdx.x; i < m; i += THREADS) {
        if (sh.running[i] >= target) atomicMin(&sh.cut, (int)i);
    }
    __syncthreads();
    const Threshold cut = {sh.sort_key[sh.cut], sh.sort_id[sh.cut]};
    __syncthreads();
    return cut;
}

// Top-p over the survivors of `th` by a radix select on mass (any number of survivors).
template <class L>
__device__ Threshold nucleus_by_mass(L l, unsigned n, Threshold th, double t, double s0, double p, Scratch& sh) {
    unsigned prefix = 0, mask = 0;
    double above = 0.0, target = 0.0;
    for (int shift = 32 - MASS_BITS; shift >= 0; shift -= MASS_BITS) {
        double acc[MASS_BINS];
#pragma unroll
        for (int b = 0; b < MASS_BINS; ++b) acc[b] = 0.0;
        for (unsigned v = threadIdx.x; v < n; v += THREADS) {
            const unsigned k = order_key(l[v]);
            if ((k & mask) == prefix && survives(k, v, th)) {
                const double w = exp((double)l[v] / t - s0);
                const unsigned d = (k >> shift) & (MASS_BINS - 1);
#pragma unroll
                for (int b = 0; b < MASS_BINS; ++b) acc[b] += d == (unsigned)b ? w : 0.0;
            }
        }
        block_sum_bins(acc, sh);
        if (shift == 32 - MASS_BITS) {
            double z = 0.0;
            for (int b = MASS_BINS - 1; b >= 0; --b) z += sh.bins[b];
            target = p * z;
        }
        // Every thread makes the same choice from the same shared sums. The guard takes the last
        // digit with mass when tree-sum rounding leaves the digits' total just under target.
        int chosen = -1, last = 0;
        double cum = above, chosen_above = above, last_above = above;
        for (int b = MASS_BINS - 1; b >= 0; --b) {
            const double m = sh.bins[b];
            if (m > 0.0) {
                if (cum + m >= target) {
                    chosen = b;
                    chosen_above = cum;
                    break;
                }
                last = b;
                last_above = cum;
            }
            cum += m;
        }
        if (chosen < 0) {
            chosen = last;
            chosen_above = last_above;
        }
        above = chosen_above;
        prefix |= (unsigned)chosen << shift;
        mask |= (unsigned)(MASS_BINS - 1) << shift;
        __syncthreads();
    }
    unsigned mine = 0;
    for (unsigned v = threadIdx.x; v < n; v += THREADS) {
        const unsigned k = order_key(l[v]);
        mine += (k == prefix && survives(k, v, th)) ? 1u : 0u;
    }
    const unsigned tied = block_count(mine, sh);
    const double w = exp((double)key_value(prefix) / t - s0);
    const double need = (target - above) / w;
    const unsigned r = need <= 1.0 ? 1u : (need >= (double)tied ? tied : (unsigned)ceil(need));
    Threshold cut = {prefix, ALL_IDS};
    if (r < tied) {
        cut.id = select_id(l, n, prefix, r, sh);
    } else if (prefix == th.key) {
        cut.id = th.id;
    }
    return cut;
}

// What one CTA of a row's cluster found in its slice (the header's ROW SCAN).
struct RowPart {
    double best;        // the largest logit (NEG_INF if none)
    double score;       // the best step-5 score, for a row whose temperature is its only filter
    unsigned best_id;   // ALL_IDS if none
    unsigned score_id;
    int bad;            // a NaN or +inf seen
};

// Steps 1 and, where `simple`, 5 over CTA `slice` of `slices`'s ids: ceil(n / slices) rounded up to
// 8 ids (16 bytes of bf16), so every slice of an aligned row starts aligned. Thread 0 writes `part`.
template <class L>
__device__ void scan_slice(L l, unsigned n, unsigned slice, unsigned slices, bool simple, const SamplingRow& p,
                           RowPart& part, Scratch& sh) {
    const unsigned per = ((n + slices - 1) / slices + 7u) & ~7u;
    const unsigned lo = min(n, slice * per), hi = min(n, lo + per);
    // The pass compares in f32, the logits' own precision: the pair order of `better` on the
    // widened values, exactly, at a fraction of the f64 compares' cost.
    float best_f = __int_as_float(0xFF800000);
    unsigned best_id = ALL_IDS;
    int bad = 0;
    const auto take = [&](float x, unsigned v) {
        if (x != x || x == POS_INF_F) bad = 1;
        if (x > best_f || (x == best_f && v < best_id)) {
            best_f = x;
            best_id = v;
        }
    };
    // (value, id) is a total order and the fault an or, so the order in which a thread meets its
    // tokens changes nothing. An aligned row's slice starts aligned (`per` is a multiple of 8) and
    // is read in whole vectors of VEC ids, thread t taking vectors t, t + THREADS, ..., UNROLL of
    // them in flight a round, the last round's loads predicated on the vector existing: the
    // slice's bytes in flight bound the pass. Only the row's last partial vector is read an id at
    // a time. A slice's whole remainder read so, a memory round trip per THREADS ids, had cost
    // the sampler 1.0, 3.1 and 2.0 us of its 9.2, 19.5 and 23.8 at B1, B32 and B128 (RESULTS run
    // 313).
    constexpr unsigned VEC = L::VEC, UNROLL = 4;
    unsigned tail = lo;
    if (l.aligned()) {
        const unsigned vectors = (hi - lo) / VEC;
        for (unsigned i0 = threadIdx.x; i0 < vectors; i0 += UNROLL * THREADS) {
            float x[UNROLL][VEC];
#pragma unroll
            for (unsigned u = 0; u < UNROLL; ++u)
                if (i0 + u * THREADS < vectors) l.vec(lo + (i0 + u * THREADS) * VEC, x[u]);
#pragma unroll
            for (unsigned u = 0; u < UNROLL; ++u)
                if (i0 + u * THREADS < vectors)
#pragma unroll
                    for (unsigned k = 0; k < VEC; ++k) take(x[u][k], lo + (i0 + u * THREADS) * VEC + k);
        }
        tail = lo + vectors * VEC;
    }
    for (unsigned v = tail + threadIdx.x; v < hi; v += THREADS) take(l[v], v);
    double best = best_f;
    bad = __syncthreads_or(bad);
    block_best(best, best_id, sh);
    // Step 5 with every token surviving: the same score, token for token, as the final pass of
    // sample_row. Drawn before the row's fault is known; a faulted row discards it.
    double score = NEG_INF;
    unsigned score_id = ALL_IDS;
    if (simple) {
        const double t = (double)p.temperature;
        for (unsigned v = lo + threadIdx.x; v < hi; v += THREADS) {
            const double s = (double)l[v] / t + gumbel(p.seed, p.step, v);
            if (better(s, v, score, score_id)) {
                score = s;
                score_id = v;
            }
        }
        block_best(score, score_id, sh);
    }
    if (threadIdx.x == 0) part = RowPart{best, score, best_id, score_id, bad};
}

// A word of another CTA of the row's cluster (its address from cluster::remote).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ double ld_remote_f64(unsigned a) {
    double v;
    asm volatile("ld.shared::cluster.f64 %0, [%1];" : "=d"(v) : "r"(a) : "memory");
    return v;
}
__device__ __forceinline__ unsigned ld_remote_u32(unsigned a) {
    unsigned v;
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(a) : "memory");
    return v;
}
#endif

// The row's findings, from every CTA of its cluster of `ctas`, in `all` of CTA 0 (every thread
// of it); false in the other CTAs, which then have nothing left to do. Each finding is a best
// pair of a total order or an or, so the row's result does not depend on how its ids were sliced.
__device__ bool gather_row(RowPart& mine, RowPart& all, unsigned ctas) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (ctas > 1) {
        cluster::sync();
        const unsigned rank = cluster::rank();
        if (rank == 0 && threadIdx.x == 0) {
            RowPart a = mine;
            for (unsigned c = 1; c < ctas; ++c) {
                RowPart o;
                o.best = ld_remote_f64(cluster::remote(&mine.best, c));
                o.score = ld_remote_f64(cluster::remote(&mine.score, c));
                o.best_id = ld_remote_u32(cluster::remote(&mine.best_id, c));
                o.score_id = ld_remote_u32(cluster::remote(&mine.score_id, c));
                o.bad = (int)ld_remote_u32(cluster::remote(&mine.bad, c));
                if (better(o.best, o.best_id, a.best, a.best_id)) {
                    a.best = o.best;
                    a.best_id = o.best_id;
                }
                if (better(o.score, o.score_id, a.score, a.score_id)) {
                    a.score = o.score;
                    a.score_id = o.score_id;
                }
                a.bad |= o.bad;
            }
            all = a;
        }
        // Also keeps every CTA's `mine` alive until CTA 0 has read it.
        cluster::sync();
        return rank == 0;
    }
#endif
    __syncthreads();
    if (threadIdx.x == 0) all = mine;
    __syncthreads();
    return true;
}

// The row this CTA serves and its slice: the CTAs of one cluster (consecutive along x) a row.
struct RowCta {
    unsigned ctas = cluster::size();
    unsigned row = blockIdx.x / ctas;
    unsigned slice = cluster::rank();
};

template <class L>
__device__ void argmax_row(L l, unsigned* __restrict__ tokens, unsigned vocab, RowCta at, unsigned* fault) {
    __shared__ Scratch sh;
    __shared__ RowPart mine, all;
    const SamplingRow greedy = {};
    scan_slice(l, vocab, at.slice, at.ctas, false, greedy, mine, sh);
    if (!gather_row(mine, all, at.ctas)) return;
    if (threadIdx.x == 0) {
        if (all.bad || all.best == NEG_INF) record_fault(fault, FAULT_LOGITS, at.row);
        tokens[at.row] = all.best_id == ALL_IDS ? 0u : all.best_id;
    }
}

template <class L>
__device__ void sample_row(L l, unsigned n, const SamplingRow* __restrict__ params, unsigned* __restrict__ tokens,
                           unsigned* __restrict__ survivors, RowCta at, unsigned* fault) {
    __shared__ Scratch sh;
    __shared__ RowPart mine, all;
    const unsigned row = at.row;
    const SamplingRow p = params[row];
    const bool sampled = p.temperature > 0.0f;
    const bool simple = sampled && (p.top_k == 0 || p.top_k >= n) && !(p.top_p < 1.0f) && !(p.min_p > 0.0f);
    scan_slice(l, n, at.slice, at.ctas, simple, p, mine, sh);
    if (!gather_row(mine, all, at.ctas)) return;
    const double best = all.best;
    const unsigned best_id = all.best_id;
    if (all.bad || best == NEG_INF) {
        if (threadIdx.x == 0) {
            record_fault(fault, FAULT_LOGITS, row);
            tokens[row] = best_id == ALL_IDS ? 0u : best_id;
            survivors[row] = 0;
        }
        return;
    }
    if (!sampled || simple) {
        if (threadIdx.x == 0) {
            tokens[row] = sampled ? all.score_id : best_id;
            survivors[row] = sampled ? n : 1u;
        }
        return;
    }
    const double t = (double)p.temperature;
    const double s0 = best / t;
    const double min_p = (double)p.min_p;
    const unsigned kept = (p.top_k == 0 || p.top_k >= n) ? n : p.top_k;
    Threshold th = {0u, ALL_IDS};
    if (kept < n) th = select_by_count(l, n, kept, sh);
    if (p.top_p < 1.0f) {
        th = kept <= SORT_CAP ? nucleus_sorted(l, n, th, t, s0, (double)p.top_p, sh)
                              : nucleus_by_mass(l, n, th, t, s0, (double)p.top_p, sh);
    }
    double score = NEG_INF;
    unsigned id = ALL_IDS, count = 0;
    for (unsigned v = threadIdx.x; v < n; v += THREADS) {
        const unsigned k = order_key(l[v]);
        if (!survives(k, v, th)) continue;
        const double s = (double)l[v] / t;
        if (min_p > 0.0 && !(exp(s - s0) >= min_p)) continue;
        ++count;
        const double scored = s + gumbel(p.seed, p.step, v);
        if (better(scored, v, score, id)) {
            score = scored;
            id = v;
        }
    }
    block_best(score, id, sh);
    count = block_count(count, sh);
    if (threadIdx.x == 0) {
        tokens[row] = id;
        survivors[row] = count;
    }
}

// The entries, a cluster of CTAs a row (RowCta): f32 rows, and the LM head's bf16 rows (`_bf16`, the
// engine's).
extern "C" __global__ void __launch_bounds__(THREADS) argmax_rows(
    const float* __restrict__ logits, unsigned vocab, unsigned* __restrict__ tokens, unsigned* fault)
{
    pdl_begin();
    const RowCta at;
    argmax_row(F32Row{logits + (long long)at.row * vocab}, tokens, vocab, at, fault);
}

extern "C" __global__ void __launch_bounds__(THREADS) argmax_rows_bf16(
    const unsigned short* __restrict__ logits, unsigned vocab, unsigned* __restrict__ tokens, unsigned* fault)
{
    pdl_begin();
    const RowCta at;
    argmax_row(Bf16Row{logits + (long long)at.row * vocab}, tokens, vocab, at, fault);
}

extern "C" __global__ void __launch_bounds__(THREADS) sample_rows(
    const float* __restrict__ logits, unsigned vocab, const SamplingRow* __restrict__ params,
    unsigned* __restrict__ tokens, unsigned* __restrict__ survivors, unsigned* fault)
{
    pdl_begin();
    const RowCta at;
    sample_row(F32Row{logits + (long long)at.row * vocab}, vocab, params, tokens, survivors, at, fault);
}

extern "C" __global__ void __launch_bounds__(THREADS) sample_rows_bf16(
    const unsigned short* __restrict__ logits, unsigned vocab, const SamplingRow* __restrict__ params,
    unsigned* __restrict__ tokens, unsigned* __restrict__ survivors, unsigned* fault)
{
    pdl_begin();
    const RowCta at;
    sample_row(Bf16Row{logits + (long long)at.row * vocab}, vocab, params, tokens, survivors, at, fault);
}
