#line 2 "decode_mega.cu"
// decode_mega.cu: every decoder layer of a small decode step in one persistent launch (issue 15).
// Needs pdl.cuh, loads.cuh, ops_common.cuh, tensor_core.cuh, gemm_epilogue.cuh, gemm_skinny.cuh,
// hp1_qk_pv.cuh and hp1_attention.cuh before it; gpu::kernels concatenates them.
//
// WHY. A decode step of a few rows is a chain of ~175 small dependent launches (5 a layer), each
// paying a launch gap, a ramp and a tail that its 2-12 MB of weights do not hide. Here one grid
// stays resident for all layers: an op ends at a grid barrier (an atomic count in global memory),
// not a kernel boundary, and every CTA asks L2 for the weights of the next GEMMs it will run
// before it reaches the barrier, so those bytes stream in while the op before finishes.
// MEASURED (verify/RESULTS.md, runs 60-63): slower than the graph path, 1.38 against 1.02 ms at
// B1 on asynct-0.5b. Each task takes as long as its standalone kernel, a barrier adds ~1.2 us,
// and the overlap PDL gives between a kernel and its successor is lost: a faster version needs
// dependencies finer than a grid barrier, so that an op's independent work starts before it.
//
// ALGORITHM. The host (gpu::mega) writes the step's ops as a table of descriptors: op i at
// ops[i * SLOTS], slot 0 its kind, slot 1 its task count, then the arguments of the standalone
// entry whose body the op runs, one 8-byte slot each in that entry's parameter order (a pointer's
// address; an int or float in the low 4 bytes; a long long whole):
//   GEMM_STORE, GEMM_PERILN       (x, w, m, n, k, then STORE_PARAMS or PERILN_PARAMS of
//   GEMM_SILU_MUL, GEMM_QK         gemm_skinny.cu); task b is W block b of the skinny GEMM's grid,
//                                  ROWS = 8 for Store and PeriLn, 16 for the pairing epilogues,
//                                  run by gemm_skinny::gemm_block with the whole CTA.
//   ATTN_DECODE, ATTN_SPLIT       (HP1_ATTENTION_PARAMS of hp1_decode.cu, then out, or partial,
//                                  counters, out); task v is CTA v of the decode or split-K grid
//                                  with G = 8 and HP = 1, sparse PV, run by hp1::attention with
//                                  one half of the CTA (128 threads, named barrier 1 + half).
// CTA c takes tasks c, c + grid, c + 2 grid, ... of a GEMM op, and its halves tasks 2c + half,
// 2c + half + 2 grid, ... of an attention op; after each op every CTA meets at the grid barrier.
// Before an op starts, thread 0 asks L2 (cp.async.bulk.prefetch.L2) for the W blocks of its own
// tasks in the GEMM ops up to two ops ahead (the first op's before griddepcontrol.wait).
//
// BITS. Each task is the standalone kernel's CTA body, called with that CTA's index, so every
// output has the bits of the graph path: the skinny GEMM's rows depend on neither M nor ROWS nor
// which CTA runs a block, and the attention's on neither G nor HP nor the split (the headers of
// gemm_skinny.cuh and hp1_attention.cuh). What differs is only where activations are read from
// (loads.cuh: at L2, since earlier ops of this launch rewrite them).
//
// BARRIER. barrier[0] counts arrivals over the whole launch: the k-th barrier (k from 1) waits until
// it reaches k * grid. After __syncthreads (the CTA's writes ordered before thread 0's next
// operation), thread 0 adds 1 with release semantics at GPU scope and spins on an acquire load
// until the count is reached; a second __syncthreads holds the other threads until then, so every
// write before the barrier, in any CTA, happens before every read after it. When a CTA has
// passed the last barrier it adds 1 to barrier[1]; the CTA that brings it to grid resets both
// words to 0 (every CTA has read barrier[0] for the last time), so the next launch starts clean.
// The barrier needs every CTA resident at once: the host launches grid = SMs x the occupancy the
// driver reports (at most 2 CTAs an SM, the launch bounds).
//
// LAUNCH. decode_mega_m{8 MT}_d{D}(ops, num_ops, barrier, report): grid as above, block
// THREADS = 256, static shared memory: the GEMM partials for ROWS = 16 (5 KB at MT = 1), two
// attention halves' hp1::Shared<1> (6.3 KB each) and the attention op's hp1::Args. Launch bounds
// 2 CTAs an SM: 128 registers a thread, at which ptxas spills a few of the attention body's values
// (2.4M local-memory requests in one B1 launch, run 61's ncu); the stack frame (232-368 bytes)
// is mostly REPORT's counters and printf's arguments, touched only when it is on.
//
// REPORT (report != 0, ASYNCT_MEGA_REPORT=1 on the host): CTA 0 prints, per op kind, the time its
// own tasks took and the time it then waited at the barrier, summed over the launch.
//
// ASSUMPTIONS, checked on the host (gpu::mega): every GEMM op has m <= 8 MT (one slab) and
// its epilogue's buffers as gemm_skinny.cu's entry would check them; every attention op's
// arguments as hp1_decode.cu's split or decode entry would take them, head_dim = D; the table
// holds num_ops descriptors; barrier is two zeroed words that only this launch uses.

namespace mega {

constexpr int THREADS = gemm_skinny::THREADS;
static_assert(THREADS == 2 * hp1::THREADS, "two attention CTAs per megakernel CTA");
constexpr int SLOTS = 40;  // gpu::mega::SLOTS
constexpr int HEADER = 2;  // kind, tasks
constexpr int GEMM_STORE = 0, GEMM_PERILN = 1, GEMM_SILU_MUL = 2, GEMM_QK = 3, ATTN_DECODE = 4, ATTN_SPLIT = 5;
constexpr int ROWS_PLAIN = 8, ROWS_PAIRED = 16;

// One op's descriptor: its kind, task count and the standalone entry's arguments.
struct Op {
  const unsigned long long* s;
  __device__ __forceinline__ int kind() const { return (int)s[0]; }
  __device__ __forceinline__ unsigned tasks() const { return (unsigned)s[1]; }
  template <class T>
  __device__ __forceinline__ T* ptr(int i) const {
    return reinterpret_cast<T*>(s[HEADER + i]);
  }
  __device__ __forceinline__ int i32(int i) const { return (int)(unsigned)s[HEADER + i]; }
  __device__ __forceinline__ long long i64(int i) const { return (long long)s[HEADER + i]; }
  __device__ __forceinline__ float f32(int i) const { return __uint_as_float((unsigned)s[HEADER + i]); }
  // UCLIP_PARAMS at slot i: alpha, its stride, weight, its stride, bias, its stride.
  __device__ __forceinline__ UClip uclip(int i) const {
    return UClip{ptr<const float>(i), ptr<const float>(i + 2), ptr<const float>(i + 4), i32(i + 1), i32(i + 3),
                 i32(i + 5)};
  }
  __device__ __forceinline__ bool is_gemm() const { return kind() <= GEMM_QK; }
  __device__ __forceinline__ int rows() const {
    return kind() == GEMM_STORE || kind() == GEMM_PERILN ? ROWS_PLAIN : ROWS_PAIRED;
  }
};

// 128 threads of the CTA as one attention CTA (hp1_attention.cuh's WholeCta, on a named barrier).
struct HalfCta {
  long long bid;
  int tid;
  int barrier;
  __device__ __forceinline__ void sync() const {
    asm volatile("bar.sync %0, %1;" ::"r"(barrier), "r"(hp1::THREADS) : "memory");
  }
  // The grid barrier before the op made every input visible.
  __device__ __forceinline__ void inputs() const {}
  // A task is not a launch: the step trace's marks are the launches' own.
  __device__ __forceinline__ void mark(int) const {}
};

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void add_release(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// The grid barrier (BARRIER above); `passed` counts this CTA's barriers.
struct GridBarrier {
  unsigned* count;
  unsigned passed;
  __device__ __forceinline__ void sync() {
    __syncthreads();
    ++passed;
    if (threadIdx.x == 0) {
      add_release(count, 1u);
      const unsigned target = passed * gridDim.x;
      while (load_acquire(count) < target) {
      }
    }
    __syncthreads();
  }
  // After the last barrier: the last CTA out resets both words.
  __device__ __forceinline__ void retire() {
    if (threadIdx.x == 0 && atomicAdd(count + 1, 1u) == gridDim.x - 1) {
      count[0] = 0;
      count[1] = 0;
      __threadfence();
    }
  }
};

// Thread 0: asks L2 for this CTA's W blocks of GEMM op `op`.
template <int MT>
__device__ __forceinline__ void prefetch_op(const Op& op) {
  if (!op.is_gemm()) return;
  const bf16* w = op.ptr<const bf16>(1);
  const int m = op.i32(2), n = op.i32(3), k = op.i32(4);
  for (unsigned b = blockIdx.x; b < op.tasks(); b += gridDim.x) {
    const gemm_skinny::BlockPlace<MT> at(b, m, op.rows());
    if (op.rows() == ROWS_PLAIN) {
      gemm_skinny::prefetch_w_block<MT, ROWS_PLAIN>(at, w, n, k);
    } else {
      gemm_skinny::prefetch_w_block<MT, ROWS_PAIRED>(at, w, n, k);
    }
  }
}

template <int MT, int ROWS, class Epi>
__device__ __forceinline__ void run_gemm(const Op& op, float* part, const Epi& epi) {
  const bf16* x = op.ptr<const bf16>(0);
  const bf16* w = op.ptr<const bf16>(1);
  const int m = op.i32(2), n = op.i32(3), k = op.i32(4);
  for (unsigned b = blockIdx.x; b < op.tasks(); b += gridDim.x) {
    gemm_skinny::gemm_block<MT, ROWS, CoherentLoads, false>(b, part, x, w, m, n, k, epi);
    __syncthreads();  // the epilogue has read `part` before the next block writes it
  }
}

// The arguments sit in shared memory, where the body reads them as a standalone kernel reads its
// parameters from the constant bank: held in registers across the task loop, they spill.
template <int D, bool SPLIT>
__device__ __forceinline__ void run_attention(const Op& op, hp1::Shared<1>* sh, hp1::Args& a) {
  // The grid barrier before this op has every thread done with the last attention's arguments.
  if (threadIdx.x == 0) {
    a = hp1::Args{op.ptr<const unsigned short>(0), op.i64(1), op.ptr<const unsigned short>(2),
                  op.ptr<const unsigned short>(3), op.ptr<const int>(4), op.i32(5), op.ptr<const int>(6),
                  op.ptr<const int>(7), op.ptr<const float>(8), op.ptr<const float>(9), op.i32(10), op.i32(11),
                  op.i32(12), op.i32(13), op.f32(14), op.i32(15), op.i32(16), op.f32(17), op.f32(18)};
  }
  __syncthreads();
  float* partial = SPLIT ? op.ptr<float>(19) : nullptr;
  int* counters = SPLIT ? op.ptr<int>(20) : nullptr;
  unsigned short* out = op.ptr<unsigned short>(SPLIT ? 21 : 19);
  const int half = threadIdx.x / hp1::THREADS;
  const int tid = threadIdx.x % hp1::THREADS;
  for (unsigned v = 2 * blockIdx.x + half; v < op.tasks(); v += 2 * gridDim.x) {
    hp1::attention<D, 8, 1, 1, true, SPLIT, CoherentLoads>(a, HalfCta{v, tid, 1 + half}, sh[half], out, partial,
                                                           counters, false);
  }
}

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// REPORT: CTA 0's thread 0 sums, per op kind, the nanoseconds from an op's start to its arrival at
// the barrier (its own tasks) and from there to the release (the wait for the slowest CTA), and
// prints them once the launch is done.
struct Report {
  bool on;
  unsigned long long work[6], wait[6], t;
  __device__ __forceinline__ void start() {
    if (!on) return;
    for (int i = 0; i < 6; ++i) work[i] = wait[i] = 0;
    t = global_ns();
  }
  __device__ __forceinline__ void lap(unsigned long long* into) {
    if (!on) return;
    const unsigned long long now = global_ns();
    *into += now - t;
    t = now;
  }
  __device__ __forceinline__ void print(int num_ops) const {
    if (!on) return;
    printf("decode_mega %d ops, ns work/wait by kind: store %llu/%llu periln %llu/%llu silu %llu/%llu qk %llu/%llu "
           "attn-decode %llu/%llu attn-split %llu/%llu\n",
           num_ops, work[0], wait[0], work[1], wait[1], work[2], wait[2], work[3], wait[3], work[4], wait[4],
           work[5], wait[5]);
  }
};

template <int MT, int D>
__device__ __forceinline__ void megakernel(const unsigned long long* __restrict__ ops, int num_ops,
                                           unsigned* barrier, int report) {
  __shared__ float part[gemm_skinny::WARPS * MT * 8 * gemm_skinny::Config<MT, ROWS_PAIRED>::PAD];
  __shared__ hp1::Shared<1> sh[2];
  __shared__ hp1::Args args;
  int fetched = 0;  // ops whose weights thread 0 has asked for
  if (threadIdx.x == 0 && num_ops > 0) prefetch_op<MT>(Op{ops});
  pdl_begin();
  GridBarrier grid{barrier, 0};
  Report rep{report != 0 && blockIdx.x == 0 && threadIdx.x == 0};
  rep.start();
  for (int i = 0; i < num_ops; ++i) {
    if (threadIdx.x == 0) {
      for (; fetched < min(i + 2, num_ops - 1); ++fetched) prefetch_op<MT>(Op{ops + (fetched + 1) * SLOTS});
    }
    const Op op{ops + i * SLOTS};
    switch (op.kind()) {
      case GEMM_STORE:
        run_gemm<MT, ROWS_PLAIN>(op, part, gemm_epilogue::Store{op.ptr<bf16>(5)});
        break;
      case GEMM_PERILN:
        run_gemm<MT, ROWS_PLAIN>(op, part,
                                 gemm_epilogue::PeriLn<CoherentLoads>{op.ptr<const bf16>(5), op.uclip(6), op.uclip(12),
                                                                    op.ptr<bf16>(18), op.ptr<bf16>(19)});
        break;
      case GEMM_SILU_MUL:
        run_gemm<MT, ROWS_PAIRED>(op, part, gemm_epilogue::SiluMul{op.ptr<bf16>(5)});
        break;
      case GEMM_QK:
        run_gemm<MT, ROWS_PAIRED>(
            op, part,
            gemm_epilogue::QkNormRopeCache{op.ptr<const int>(5), op.ptr<const long long>(6), op.ptr<const float>(7),
                                         op.i32(8), op.uclip(9), op.uclip(15), op.ptr<bf16>(21), op.ptr<bf16>(22),
                                         op.ptr<bf16>(23), op.i64(24), op.i32(25), op.i32(26), op.i32(27),
                                         op.ptr<unsigned>(28)});
        break;
      case ATTN_DECODE:
        run_attention<D, false>(op, sh, args);
        break;
      case ATTN_SPLIT:
        run_attention<D, true>(op, sh, args);
        break;
    }
    const int kind = op.kind();
    if (report) __syncthreads();  // every task of CTA 0 done
    rep.lap(&rep.work[kind]);
    if (i + 1 < num_ops) grid.sync();
    rep.lap(&rep.wait[kind]);
  }
  grid.retire();
  rep.print(num_ops);
}

}  // namespace mega

#define DECODE_MEGA_ENTRY(M, D)                                                                      \
  extern "C" __global__ void __launch_bounds__(mega::THREADS, 2)                                     \
      decode_mega_m##M##_d##D(const unsigned long long* __restrict__ ops, int num_ops, unsigned* barrier,  \
                              int report) {                                                          \
    mega::megakernel<M / 8, D>(ops, num_ops, barrier, report);                                       \
  }

DECODE_MEGA_ENTRY(8, 64)
DECODE_MEGA_ENTRY(8, 128)
DECODE_MEGA_ENTRY(8, 256)
DECODE_MEGA_ENTRY(32, 64)
DECODE_MEGA_ENTRY(32, 128)
DECODE_MEGA_ENTRY(32, 256)
