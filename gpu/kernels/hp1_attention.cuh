#line 2 "hp1_attention.cuh"
// hp1_attention.cuh: HP1 attention over the paged KV cache, one query row at a time (SPEC sections 2
// and 6): the decode kernel and the split-K kernel, with dense or sparse-index PV.
// Prefill rows run through the same kernels ("fake decode"): hp1_rows.cu gives each row its own
// sequence and length once per step, and these kernels read only that row metadata. Needs
// pdl.cuh, loads.cuh, hp1_qk_pv.cuh (the per-thread arithmetic of steps 1 and 4) and
// hp1_split_finish.cuh (split-K's last CTA) before it;
// the entry points are in hp1_decode.cu, and the decode megakernel (decode_mega.cu) runs
// attention(), the body of one CTA, as its tasks.
//
// ALGORITHM. The keys 0 .. row_len-1 of a row are cut into chunks of CHUNK = 126 keys. A chunk's
// partial output is computed by one piece of code, the chunk loop body of attention(), for HP =
// 1 or 2 query heads of one kv head at once (their q in registers side by side):
//   0. Slots: one pass looks up the cache row (block_table[t / block] * block + t % block) of
//      every key QK reads into shared memory, then a barrier; QK and PV only read it back, so no
//      K or V load waits behind a block-table load, and no lane repeats another's lookup. Keys
//      are clamped into [0, row_len), and the pass fills SLOTS = 144 entries (CHUNK + OV rounded
//      up to 16), so QK loads whole steps without bounds checks: the rows of keys before 0 or
//      past the chunk are real rows whose dots are dropped.
//   1. QK: scores s_t = scale * (q . k_t) of the chunk's keys plus the fir_k - 1 keys to its left
//      (the FIR overlap; keys before 0 get score 0, which gates as r = 0), into shared memory.
//      Thread groups of G lanes (8 or 16) share a key; q sits in registers; K arrives as 16-byte
//      vector loads (8 bytes for D = 64). A group step takes U = 64 G / D consecutive keys: their
//      rows in one shared-memory vector read, then every K load (128 bytes per lane), then the dots
//      of every head: each K element is unpacked once and fed to the HP heads' fmas in turn
//      (slice_dots), so a K load serves HP heads. The dot product's order is fixed independently of
//      G: D is cut into 16 slices of D/16 elements, each summed from 0 in element order with fma;
//      lane i of a 16-group owns slice i, lane i of an 8-group owns slices i and i+8 and adds them
//      (c_i + c_{i+8}, exactly the first xor-8 butterfly step of a 16-group), then the butterfly
//      over xor 4, 2, 1 (a 16-group does xor 8 first). The U keys' butterflies run as one
//      reduce-scatter (group_reduce): while a lane holds several keys, a level halves them, the
//      lane keeping the half its mask bit picks and adding its partner's share of exactly those
//      keys; each key still gets the butterfly's sums (a + b and b + a are the same bits), so G = 8
//      and G = 16 give the same scores, with U-fold fewer shuffles. Shuffles use the group's own
//      lane mask: groups of one warp may run different trip counts (SPEC section 8).
//   2. Gate, per key, exactly as oracle::hp1::gate::Gate::apply in f32: r = relu_pre ? max(s, 0)
//      : s; sum = ((0 + r_t) + r_{t-1}) + ... + r_{t-F+1}; z = fma(-sigma_over_f, sum, s) with
//      sigma_over_f = sigma * (1/F) per head; p = gamma * clamp(z, clip_min, clip_max) with NaN
//      passing the clamp. Every operation is an explicitly rounded intrinsic, so no instantiation
//      can contract it differently.
//   3. List, per head: (cache row, weight) of each key to visit, in key order. Sparse: the keys
//      with p != 0 (NaN kept), ranked by warp ballot + popc within a warp and a prefix over the
//      per-warp counts in (round, warp) order: ordered, no atomics. Dense: every key (the same code
//      keeps all).
//      Each thread then asks L2 for the V row of its key if some head keeps it, so that PV's
//      loads, a barrier later, find it on the way.
//   4. PV: a thread owns 8 output dims (one 16-byte V load per entry), D/8 threads cover an
//      entry, so the CTA runs RG = 1024 / D streams; stream s takes list entries s, s + RG,
//      s + 2 RG, ... in that order and accumulates p * v with fma in f32 from 0, issuing the
//      loads of PU = 8 entries (128 bytes per thread) before their first fma; with HP = 2 a
//      thread runs its stream of head 0, then of head 1. The streams' sums are added through
//      shared memory in stream order 0, 1, ..., RG - 1.
// The decode kernel (one CTA per (row, HP heads)) walks the chunks in order and adds each
// chunk's partial into an f32 accumulator that starts at 0; it carries the last FIR scores of a
// chunk to the next in shared memory instead of recomputing them (same code, same bits). The
// split-K kernel (one CTA per (row, HP heads, chunk)) writes its chunk's partials, then publishes
// and counts them on the (row, HP heads)' counter; the CTA that counts the row's last chunk
// reads every chunk's partials back and adds them in chunk order starting from 0, then resets the
// counter to 0. The counter picks only which CTA adds, never the order. Both kernels therefore
// add the same f32 values in the same order: split-K
// and decode give the same bits, G = 8 and G = 16 give the same bits, HP = 1 and HP = 2 give the
// same bits (each head's operations are the same, only interleaved), and since nothing depends
// on other rows, a row's output does not depend on its batch.
// A split-K launch without counters (null) stops after writing its chunk's partials: its reader,
// the o_proj GEMM of one decode row (gemm_skinny.cuh's FOLDED X), adds them itself, with
// split_finish's additions in split_finish's order, so the bits are the same, and the tail of
// fence, count and last CTA's loads leaves the path of a step whose kernels are latency chains.
// EARLY K. Where the launcher says each row's keys but its newest were in the caches before the
// kernel launched before this one started (decode rows; the kernel before writes the newest
// key's row), a split-K CTA of the QR = 2 entries (the small grids') loads its chunk's first
// group step of K into registers, and asks L2 for its chunk's V rows, before the wait; after it,
// the lane that loaded the newest key's row loads it again from L2. At D >= 128 that step is the
// whole chunk, so no K load is left on the path after the wait. The bits are the same: the same
// values reach the same arithmetic.
//
// LAUNCH. Block THREADS = 128 (4 warps). Grid is one-dimensional, head groups fastest so the
// heads that share a kv head run side by side; a CTA computes heads h0 .. h0 + HP - 1:
//   decode:  blockIdx.x = row * (Hq / HP) + h0 / HP                       (rows * Hq / HP CTAs)
//   split:   blockIdx.x = (row * max_chunks + chunk) * (Hq / HP) + h0 / HP
//            (rows * max_chunks * Hq / HP CTAs); a CTA whose chunk starts at or past row_len
//            exits at once (chunk 0 of an empty row writing its zeros first).
// Launch bounds (min_ctas): per instantiation the most CTAs per SM at which ptxas still issues
// every load of a QK step (128 bytes per thread) before the step's first fma, without spills,
// found by compiling every entry at 4 to 8 and reading the SASS. Past that ptxas first splits a
// step's loads into two waves (two memory latencies per step) and then spills. Split-K runs its
// chunk body once, visibly to the compiler, so q's registers are free during PV.
//   split, HP = 1:    7 CTAs (72 registers, 112 KB of K in flight per SM); 6 for D = 64 with
//                     G = 8 (80), 5 for D = 256 with G = 8 (q alone takes 32 registers; 90)
//   split, HP = 2:    6 CTAs (78 to 80 registers, 96 KB per SM, each byte serving two heads)
//   decode, HP = 1:   5 CTAs (90 to 96 registers, 80 KB per SM); 4 for D = 256 with G = 8
//   decode, HP = 2:   4 CTAs (122 to 128 registers; at D = 64, 15 of a step's 16 loads)
//   QR = 2 (HP = 1, G = 8): 4 CTAs (split 96 to 128 registers, decode 128, 256 bytes of K in
//                     flight a thread); 3 for the decode kernel at D = 256 (156), which spills at 4
// HP = 2 is instantiated with G = 16 only: with G = 8 the two heads' q take 32 registers and
// ptxas splits a step's loads at any bound that leaves 4 CTAs or more.
// Static shared memory, no dynamic, the same for every D: per head 4 * (OV + CHUNK) scores
// padded to 16 bytes (544), 8 * CHUNK list entries (1008), 4 * ROUNDS * WARPS counts (16) and
// 4 * 1024 stream sums (4096), plus 4 * SLOTS cache rows (576) shared by the heads: 6256 bytes
// for HP = 1, 11904 for HP = 2, split-K's last-CTA flag and padding included (cuobjdump's
// figures for the entries, 7280 and 12928, are 1 KB more each). CHUNK is about 128 (one key per
// thread and round) rather than 256: twice the split-K CTAs of a short row, which a small decode
// batch needs to fill the SMs (RESULTS run 45: -7% of the asynct-0.5b B1 step, B128 even). It is
// 126, not 128, so that a split-K chunk and its FIR overlap are 128 keys at the SPEC's fir_k = 3:
// two QK rounds of 64 keys (NG groups of U keys), where 130 keys took a third round, one more
// memory latency on every CTA's path for the 2 keys of one group.
//
// TEMPLATE PARAMETERS (one extern "C" entry per combination, named below):
//   D      head dim, 64, 128 or 256
//   G      lanes per key in QK, 8 or 16
//   HP     query heads per CTA, 1 or 2 (2 with G = 16 only; Hq / Hkv even, checked on the host)
//   QR     QK rounds whose K a group step loads before its first dot, 1 or 2 (2 with G = 8 and
//          HP = 1 only). Two rounds cost registers, so fewer CTAs fit an SM, but a chunk of 128
//          keys then waits on one memory latency for its K instead of two: the dispatcher takes
//          it where the grid fits the SMs at that occupancy (small decode batches).
//   SPARSE PV walks the nonzero list (true) or every key (false)
//   SPLIT  split-K (true) or the decode kernel (false)
// Entries: hp1_decode_d{D}_g{G}_h{HP}[_r2]_{dense|sparse} and
// hp1_split_d{D}_g{G}_h{HP}[_r2]_{dense|sparse} for (G, HP, QR) in (8, 1, 1), (8, 1, 2),
// (16, 1, 1), (16, 2, 1), _r2 naming QR = 2. The dispatcher (gpu/src/attention/plan.rs) picks
// (8, 1, 2) on small grids where a chunk takes two rounds or more (D >= 128), (8, 1, 1) past
// them and, on large grids, (16, 2, 1).
//
// BUFFERS (bf16 passed as its 16 bits, row-major):
//   q            [rows, q_row_stride] bf16; head h of row r at r * q_row_stride + h * D
//   key_cache    [num_blocks, block_size, Hkv, D] bf16
//   value_cache  [num_blocks, block_size, Hkv, D] bf16
//   block_table  [num_seqs, max_blocks_per_seq] int32
//   row_seq, row_len [rows] int32 from hp1_rows.cu; row_len <= max_blocks_per_seq * block_size
//   sigma, gamma [Hq] f32
//   out          [rows, Hq, D] bf16
//   partial      [rows, Hq, max_chunks, D] f32 (split-K; only the chunks below
//                ceil(row_len / CHUNK) are written and read)
//   counters     [rows * Hq / HP] int32 (split-K): zero before a launch, and the launch leaves
//                them zero (each last CTA resets its own); null: out is left to the reader of
//                partial (but an empty row's zeros)
// ASSUMPTIONS, checked on the host (gpu/src/attention): Hq a multiple of Hkv; block_size a power
// of two (passed as log2_block); at most 2^31 - 1 token rows in each cache (a cache row is an
// int); 1 <= fir_k <= MAX_FIR; clip_min < clip_max; buffer base pointers 16-byte aligned (device
// allocations are); block-table entries of the keys a row reads are valid blocks (the engine's
// block pool guarantees it; not checked on the device). Rows with row_len = 0 get zeros.

namespace hp1 {

constexpr int THREADS = 128;
constexpr int WARPS = THREADS / 32;
constexpr int CHUNK = 126;
constexpr int ROUNDS = (CHUNK + THREADS - 1) / THREADS;
constexpr int MAX_FIR = 8;
constexpr int OV = MAX_FIR - 1;
// CTAs per SM the launch bounds ask for: per instantiation the most at which ptxas still issues
// every load of a QK step before its first fma, without spills (see LAUNCH in the header).
constexpr int min_ctas(bool split, int heads, int d, int g, int qr) {
  if (heads == 2) return split ? 6 : 4;
  if (qr == 2) return split || d < 256 ? 4 : 3;
  if (split) return g == 16 || d == 128 ? 7 : (d == 64 ? 6 : 5);
  return g == 8 && d == 256 ? 4 : 5;
}
constexpr int SLOTS = (OV + CHUNK + 15) / 16 * 16;  // QK reads whole vectors of up to 16 slots

struct Args {
  const unsigned short* __restrict__ q;
  long long q_row_stride;
  const unsigned short* __restrict__ key_cache;
  const unsigned short* __restrict__ value_cache;
  const int* __restrict__ block_table;
  int max_blocks_per_seq;
  const int* __restrict__ row_seq;
  const int* __restrict__ row_len;
  const float* __restrict__ sigma;
  const float* __restrict__ gamma;
  int num_heads;
  int num_kv_heads;
  int log2_block;
  int max_chunks;
  float scale;
  int fir_k;
  int relu_pre;
  float clip_min;
  float clip_max;
};

template <int HP>
struct Shared {
  float score[HP][OV + CHUNK];            // score[hh][OV + j] is key c0 + j of head hh, j in [-OV, CHUNK)
  __align__(16) int slot[SLOTS];          // slot[i]: cache row of key c0 + jstart + i, clamped into [0, len)
  int2 entry[HP][CHUNK];                  // head hh's list: (cache row, weight bits) of each key to visit
  int count[HP][ROUNDS * WARPS];
  __align__(16) float red[HP][8 * THREADS];  // PV stream sums, [streams][D] per head
  bool last;                                 // split-K: this CTA counted its row's last chunk
  int kv_head;                               // g, stored before the wait and never read (the body)
};

// The 128 threads that run one CTA's body: `bid` is its index in the grid of LAUNCH, `tid` the
// thread's index among the 128, sync() their barrier, and inputs() the wait for the kernel
// before (pdl.cuh) that the body calls once it has read the row metadata and the block table and
// before it touches q, the caches or its outputs. A kernel of its own runs one such CTA as a
// whole CTA; the decode megakernel runs two in one CTA of 256 (decode_mega.cu), where every
// input is ready when the op starts.
struct WholeCta {
  long long bid;
  int tid;
  __device__ __forceinline__ void sync() const { __syncthreads(); }
  __device__ __forceinline__ void inputs() const { pdl_begin(); }
  // The step trace's marks (pdl.cuh): 2 every chunk's partial done, 3 the output written (or,
  // in split-K, this CTA's part in it done).
  __device__ __forceinline__ void mark(int k) const {
    if (tid == 0) step_trace_mark(k);
  }
};

// One CTA's work (LAUNCH) for the 128 threads of `cta` (WholeCta or the megakernel's half), with
// `sh` their shared memory; In reads q and the caches (loads.cuh).
// keys_settled: every key of a row but its newest (row_len - 1) was in the caches before the
// kernel launched before this one started (EARLY K in the header); false is always safe.
template <int D, int G, int HP, int QR, bool SPARSE, bool SPLIT, class In, class Cta>
__device__ __forceinline__ void attention(const Args& a, const Cta& cta, Shared<HP>& sh,
                                          unsigned short* __restrict__ out, float* __restrict__ partial,
                                          int* __restrict__ counters, bool keys_settled) {
  static_assert(D == 64 || D == 128 || D == 256, "head_dim must be 64, 128 or 256");
  static_assert(G == 8 || G == 16, "thread group must be 8 or 16 lanes");
  static_assert(HP == 1 || HP == 2, "a CTA computes one query head or two sharing a kv head");
  static_assert(QR == 1 || QR == 2, "a group step loads the K of one QK round or two");
  constexpr int C = D / 16;                         // elements per D-slice
  constexpr int CPL = 16 / G;                       // D-slices per lane in QK
  constexpr int NG = THREADS / G;                   // groups per CTA
  constexpr int U = 64 * G / D;                     // keys per group step: 128 bytes of K per lane
  constexpr int TPR = D / 8;                        // PV threads per list entry, 8 dims each
  constexpr int RG = THREADS / TPR;                 // PV streams
  constexpr int PU = 8;                             // entries per PV batch: 128 bytes of V per thread
  constexpr int DPT = (D + THREADS - 1) / THREADS;  // output dims per thread after the stream sum
  static_assert(RG * D == 8 * THREADS, "the stream sums fill Shared::red");
  const int tid = cta.tid, warp = tid >> 5, lane = tid & 31;
  long long bid = cta.bid;
  const int h0 = (int)(bid % (a.num_heads / HP)) * HP;  // heads h0 .. h0 + HP - 1
  bid /= a.num_heads / HP;
  int chunk = 0;
  if constexpr (SPLIT) {
    chunk = (int)(bid % a.max_chunks);
    bid /= a.max_chunks;
  }
  const long long row = bid;
  const int len = a.row_len[row];
  const int num_chunks = (len + CHUNK - 1) / CHUNK;
  if (SPLIT && chunk >= num_chunks) {  // uniform over the CTA, before any barrier
    // An empty row has no last CTA: its chunk-0 CTA writes the zeros.
    cta.inputs();
    if (chunk == 0)
      for (int e = tid; e < HP * D; e += THREADS) out[(row * a.num_heads + h0) * D + e] = 0;
    return;
  }

  const int g = h0 / (a.num_heads / a.num_kv_heads);
  const int block_mask = (1 << a.log2_block) - 1;
  const int* __restrict__ table = a.block_table + (long long)a.row_seq[row] * a.max_blocks_per_seq;
  const unsigned token_bytes = (unsigned)(a.num_kv_heads * D * 2);
  // sigma / F rounded once per head, as oracle::hp1::gate computes it.
  const float inv_f = __fdiv_rn(1.0f, (float)a.fir_k);
  float sigma_over_f[HP], gamma[HP];
#pragma unroll
  for (int hh = 0; hh < HP; ++hh) {
    sigma_over_f[hh] = __fmul_rn(a.sigma[h0 + hh], inv_f);
    gamma[hh] = a.gamma[h0 + hh];
  }
  const int c_begin = SPLIT ? chunk : 0, c_end = SPLIT ? chunk + 1 : num_chunks;

  // 0. The cache row of every key QK reads in chunk c, clamped into [0, len) so that QK loads
  // whole steps without bounds checks. The previous chunk read slot[] only before its list
  // barrier. The first chunk's slots come before inputs(): the row metadata and the block table
  // are settled before the kernel before this one starts (or inputs() was called already).
  const auto fill_slots = [&](int c) {
    const int jstart = (SPLIT || c == 0) ? -(a.fir_k - 1) : 0;
    for (int i = tid; i < SLOTS; i += THREADS) {
      const int t = max(0, min(c * CHUNK + jstart + i, len - 1));
      sh.slot[i] = (table[t >> a.log2_block] << a.log2_block) | (t & block_mask);
    }
  };
  fill_slots(c_begin);
  // g's two integer divisions (I2F/MUFU sequences) have no use before QK, so ptxas schedules them
  // after the wait, on the path every CTA walks once its inputs are ready, which at one decode row
  // is the step's. This store, which ptxas keeps ahead of griddepcontrol.wait, has them computed
  // before it: the asynct-0.5b B1 step 0.6% faster (RESULTS run 212; three passes each).
  if (tid == 0) sh.kv_head = g;

  // QK: group grp, lane gl; PV: stream tid / TPR, dims (tid % TPR) * 8 .. + 8.
  const int grp = tid / G, gl = tid % G;
  const unsigned group_mask = ((1u << G) - 1u) << (lane / G * G);
  const int my_key = reduce_key<G / 2, U>(gl);
  const bool key_owner = (gl & (G / U - 1)) == 0;  // one lane per key stores its score
  const unsigned short* __restrict__ k_lane = a.key_cache + (long long)g * D + gl * C;
  const int stream = tid / TPR;
  const unsigned short* __restrict__ v_head = a.value_cache + (long long)g * D;
  const unsigned short* __restrict__ v_thread = v_head + (tid % TPR) * 8;
  constexpr int STEP = QR * NG * U;  // slots a group step covers
  using StepK = unsigned[QR][U][CPL][C / 2];

  // A group step's K from slots k0 .. (QR rounds): every load issued before any is used.
  const auto load_step = [&](int k0, int slots, StepK& kw) {
#pragma unroll
    for (int r = 0; r < QR; ++r) {
      if (r > 0 && k0 + r * NG * U >= slots) break;
      int rows[U];
      load_rows<U>(sh.slot + k0 + r * NG * U, rows);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const unsigned short* kp = cache_row(k_lane, rows[u], token_bytes);
#pragma unroll
        for (int s = 0; s < CPL; ++s) load_words<In, C>(kp + s * G * C, kw[r][u][s]);
      }
    }
  };

  // EARLY K (the header): the chunk's first group step of K is loaded, and its V rows asked of
  // L2, before the wait. Only the QR = 2 entries take it: in the others the K held across the
  // wait costs registers past their launch bounds (a spill for HP = 2).
  const bool early = SPLIT && QR == 2 && keys_settled;
  const int first_jstart = -(a.fir_k - 1);
  const int first_slots = min(CHUNK, len - c_begin * CHUNK) - first_jstart;
  StepK kw_first;
  if (early) {
    cta.sync();
    if (grp * U < first_slots) load_step(grp * U, first_slots, kw_first);
    for (int j = tid; j < first_slots + first_jstart; j += THREADS) {
      const unsigned short* v_row = cache_row(v_head, sh.slot[j - first_jstart], token_bytes);
#pragma unroll
      for (int l = 0; l < D / 64; ++l) prefetch_l2(v_row + l * 64);
    }
  }
  cta.inputs();
  float qf[CPL][HP][C];
#pragma unroll
  for (int hh = 0; hh < HP; ++hh) {
    const unsigned short* q_row = a.q + row * a.q_row_stride + (long long)(h0 + hh) * D;
#pragma unroll
    for (int c = 0; c < CPL; ++c) {
      unsigned w[C / 2];
      load_words<In, C>(q_row + (gl + c * G) * C, w);
#pragma unroll
      for (int e = 0; e < C / 2; ++e) {
        qf[c][hh][2 * e] = bf16_lo(w[e]);
        qf[c][hh][2 * e + 1] = bf16_hi(w[e]);
      }
    }
  }

  float o[HP][DPT];
#pragma unroll
  for (int hh = 0; hh < HP; ++hh)
#pragma unroll
    for (int i = 0; i < DPT; ++i) o[hh][i] = 0.0f;

  for (int c = c_begin; SPLIT ? c == c_begin : c < c_end; ++c) {  // a split CTA: once, visibly to the compiler
    const int c0 = c * CHUNK;
    const int n = min(CHUNK, len - c0);
    // The decode kernel's later chunks find their overlap carried in score[hh][OV - fir_k + 1 .. OV).
    const int jstart = (SPLIT || c == 0) ? -(a.fir_k - 1) : 0;
    const int slots = n - jstart;
    if (c != c_begin) fill_slots(c);
    if (c != c_begin || !early) cta.sync();

    // 1. QK into score[hh][OV + jstart .. OV + n): a group step takes slots k0 .. k0 + U - 1
    // of QR rounds (k0 + r NG U for round r), every load before the first dot, each K vector used
    // by all HP heads; steps past slots or before key 0 load a clamped row and drop it.
    const auto qk_step = [&](int k0, const StepK& kw) {
#pragma unroll
      for (int r = 0; r < QR; ++r) {
        const int kr = k0 + r * NG * U;
        if (r > 0 && kr >= slots) break;
        float v[HP][U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          float vu[HP];
          lane_dots<G, HP, C>(qf, kw[r][u], vu);
#pragma unroll
          for (int hh = 0; hh < HP; ++hh) v[hh][u] = vu[hh];
        }
        const int i = kr + my_key;
#pragma unroll
        for (int hh = 0; hh < HP; ++hh) {
          const float dot = group_reduce<G / 2, U>(v[hh], group_mask, gl);
          if (key_owner && i < slots) {
            sh.score[hh][OV + jstart + i] = c0 + jstart + i >= 0 ? __fmul_rn(a.scale, dot) : 0.0f;
          }
        }
      }
    };
    int k0 = grp * U;
    if (early && k0 < slots) {  // a split CTA's only chunk
      // The newest key's slot (past the step or the chunk where it is not this chunk's). Other
      // slots clamped onto its row lie past `slots` and are dropped. Its pre-wait load may have
      // left the stale line in L1, so the reload goes to L2; no other load of this kernel reads
      // that line after the wait, since a chunk whose first step holds a slot clamped onto it
      // has no second step.
      const int newest = len - 1 - c0 - jstart;
#pragma unroll
      for (int r = 0; r < QR; ++r) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (k0 + r * NG * U + u == newest) {
            const unsigned short* kp = cache_row(k_lane, sh.slot[newest], token_bytes);
#pragma unroll
            for (int s = 0; s < CPL; ++s) load_words<CoherentLoads, C>(kp + s * G * C, kw_first[r][u][s]);
          }
        }
      }
      qk_step(k0, kw_first);
      k0 += STEP;
    }
#pragma unroll 1
    for (; k0 < slots; k0 += STEP) {
      StepK kw;
      load_step(k0, slots, kw);
      qk_step(k0, kw);
    }
    cta.sync();

    // The last OV scores of a full chunk are the next chunk's overlap; read them before any
    // thread can start overwriting them with the next chunk's scores (thread hh * OV + k
    // carries head hh's score k).
    float carry = 0.0f;
    if (!SPLIT && tid < HP * OV) carry = sh.score[tid / OV][CHUNK + tid % OV];

    // 2. Gate, and 3. the lists: rank within the warp now, place after the counts are known.
    float p_r[HP][ROUNDS];
    int rank_r[HP][ROUNDS];
    bool keep_r[HP][ROUNDS];
#pragma unroll
    for (int hh = 0; hh < HP; ++hh) {
#pragma unroll
      for (int r = 0; r < ROUNDS; ++r) {
        const int j = r * THREADS + tid;
        const bool valid = j < n;
        float p = 0.0f;
        if (valid) {
          float sum = 0.0f;
          for (int f = 0; f < a.fir_k; ++f) {
            const float s = sh.score[hh][OV + j - f];
            sum = __fadd_rn(sum, a.relu_pre ? fmaxf(s, 0.0f) : s);
          }
          const float z = __fmaf_rn(-sigma_over_f[hh], sum, sh.score[hh][OV + j]);
          const float clamped = z < a.clip_min ? a.clip_min : (z > a.clip_max ? a.clip_max : z);
          p = __fmul_rn(gamma[hh], clamped);
        }
        const bool keep = SPARSE ? (valid && p != 0.0f) : valid;
        const unsigned ballot = __ballot_sync(0xffffffffu, keep);
        if (lane == 0) sh.count[hh][r * WARPS + warp] = __popc(ballot);
        p_r[hh][r] = p;
        keep_r[hh][r] = keep;
        rank_r[hh][r] = __popc(ballot & ((1u << lane) - 1u));
      }
    }
    // The V rows PV will read (keys some head keeps) are asked of L2 now, so their memory latency
    // runs beside the ranks, the list barrier and the first head's PV instead of after them (RESULTS
    // run 159: 1-2% of the decode step at B32-B128; the same for K's second QK round was slower).
#pragma unroll
    for (int r = 0; r < ROUNDS && !early; ++r) {
      bool any = false;
#pragma unroll
      for (int hh = 0; hh < HP; ++hh) any = any || keep_r[hh][r];
      if (any) {
        const unsigned short* v_row = cache_row(v_head, sh.slot[r * THREADS + tid - jstart], token_bytes);
#pragma unroll
        for (int l = 0; l < D / 64; ++l) prefetch_l2(v_row + l * 64);
      }
    }
    cta.sync();
    int count[HP];
#pragma unroll
    for (int hh = 0; hh < HP; ++hh) {
      int base[ROUNDS];
      count[hh] = 0;
#pragma unroll
      for (int i = 0; i < ROUNDS * WARPS; ++i) {
#pragma unroll
        for (int r = 0; r < ROUNDS; ++r)
          if (i == r * WARPS + warp) base[r] = count[hh];
        count[hh] += sh.count[hh][i];
      }
#pragma unroll
      for (int r = 0; r < ROUNDS; ++r) {
        if (keep_r[hh][r]) {
          const int j = r * THREADS + tid;
          sh.entry[hh][base[r] + rank_r[hh][r]] = make_int2(sh.slot[j - jstart], __float_as_int(p_r[hh][r]));
        }
      }
    }
    cta.sync();

    // 4. PV, head by head: stream s adds entries s, s + RG, s + 2 RG, ... in order, PU loads at
    // a time.
#pragma unroll
    for (int hh = 0; hh < HP; ++hh) {
      float acc[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = 0.0f;
      int e0 = stream;
#pragma unroll 1
      for (; e0 + (PU - 1) * RG < count[hh]; e0 += PU * RG) {
        pv_batch<In, RG, PU, false>(sh.entry[hh], e0, count[hh], v_thread, token_bytes, acc);
      }
      if (e0 < count[hh]) pv_batch<In, RG, PU, true>(sh.entry[hh], e0, count[hh], v_thread, token_bytes, acc);
      float4* red = reinterpret_cast<float4*>(sh.red[hh] + stream * D + (tid % TPR) * 8);
      red[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
      red[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
    }
    cta.sync();

    // The chunk's partials: each head's stream sums in stream order.
#pragma unroll
    for (int hh = 0; hh < HP; ++hh) {
#pragma unroll
      for (int i = 0; i < DPT; ++i) {
        const int d = i * THREADS + tid;
        if (d < D) {
          float part = sh.red[hh][d];
#pragma unroll
          for (int s = 1; s < RG; ++s) part = __fadd_rn(part, sh.red[hh][s * D + d]);
          if constexpr (SPLIT) {
            partial[((row * a.num_heads + h0 + hh) * a.max_chunks + chunk) * D + d] = part;
          } else {
            o[hh][i] = __fadd_rn(o[hh][i], part);
          }
        }
      }
    }
    // Every thread is past the gate, so the overlap slots are free to take the carry.
    if (!SPLIT && tid < HP * OV) sh.score[tid / OV][tid % OV] = carry;
  }
  cta.mark(2);

  if constexpr (SPLIT) {
    if (counters == nullptr) {  // uniform: the partials' reader adds them (ALGORITHM)
      cta.mark(3);
      return;
    }
    // Publish the partials, then count this chunk; the CTA that counts the row's last chunk adds
    // them all. The count picks only which CTA adds, never the order, and goes back to 0 so the
    // next launch (or graph replay) starts from a clean counter.
    // One release-acquire add by thread 0 between two barriers: the first barrier orders every
    // thread's partial writes before the release (which is cumulative), the second the acquire
    // before every thread's reads of the other CTAs' partials; no fence per thread.
    int* counter = counters + row * (a.num_heads / HP) + h0 / HP;
    cta.sync();
    // The row's chunk count from row_len again: cheaper than keeping it live through the body.
    const int total = (__ldg(a.row_len + row) + CHUNK - 1) / CHUNK;
    if (tid == 0) {
      int before;
      asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(before) : "l"(counter) : "memory");
      sh.last = before == total - 1;
    }
    cta.sync();
    if (sh.last) {
      split_finish<D, HP, THREADS>(tid, partial, out, row, h0, a.num_heads, a.max_chunks, total);
      if (tid == 0) *counter = 0;
    }
  } else {
#pragma unroll
    for (int hh = 0; hh < HP; ++hh) {
#pragma unroll
      for (int i = 0; i < DPT; ++i) {
        const int d = i * THREADS + tid;
        if (d < D) out[(row * a.num_heads + h0 + hh) * D + d] = f32_to_bf16(o[hh][i]);
      }
    }
  }
  cta.mark(3);
}

}  // namespace hp1
