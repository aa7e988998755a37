#line 2 "pdl.cuh"
// Programmatic dependent launch (gpu::runtime::launch), prepended to every kernel file.
//
// The host launches every kernel of the crate with the programmatic-serialisation attribute, so a
// kernel may start while its predecessor on the stream is still running. Each entry point
// therefore calls pdl_wait() before it reads or writes any buffer another kernel touches (only
// constant weights may be read before it: a GEMM prefetches them into L2 there; and the HP1
// attention reads its row metadata, and a decode row's older keys, there when the launcher says
// that the kernel before it did not write them: hp1_decode.cu's settled), then
// pdl_launch_dependents() to let its own successor be scheduled. The trigger comes after the wait,
// so at most one kernel runs ahead of the one doing the work, and what the kernel before that
// one wrote is complete when a kernel starts. Both are no-ops on a launch without
// the attribute, and compiled out before sm_90, which lacks griddepcontrol.

#ifdef ASYNCT_STEP_TRACE
// The step trace (gpu::runtime::step_trace), compiled in only when the host asks for it with
// this macro. Thread 0 of every CTA stamps the global timer as it reaches the wait and as it
// leaves it, and stores both into its own record of its launch's slot: plain stores to lines no
// other CTA writes, which nothing waits on (reductions on one slot, the first design, queued
// behind each other and held the kernels' ends: 11-26% on the step, RESULTS run 220). A launch's slot is its
// %gridid (the same at every replay of a graph node) modulo STEP_TRACE_SLOTS; CTA 0 writes the
// slot's header, and each record carries the low bits of its launch's id, so the host can tell
// a slot that two launches wrote. CTAs past STEP_TRACE_CTAS are not recorded. After the records,
// each slot holds the marks (step_trace_mark) of its first STEP_TRACE_MARK_CTAS CTAs. The host
// sets the module's pointer and number after loading it; a null pointer records nothing.
struct StepTraceHeader {
  unsigned long long grid_plus_one;
  unsigned int module, threads, ctas, pad[11];
};
// waited_sm: the ns spent in the wait in the low STEP_TRACE_WAIT_BITS (saturated), the CTA's SM
// (%smid) above them, so that the host can tell how many of a launch's CTAs shared an SM.
constexpr unsigned STEP_TRACE_WAIT_BITS = 24;
struct StepTraceCta {
  unsigned long long arrive;  // ns at the wait
  unsigned int waited_sm;     // ns in it and the SM, as above
  unsigned int grid_low;      // low 32 bits of %gridid
};
// A CTA's marks (step_trace_mark): the low 32 bits of the global timer at each point a kernel
// marks, 0 where it marked none.
constexpr int STEP_TRACE_MARKS = 4;
struct StepTraceMarks {
  unsigned int at[STEP_TRACE_MARKS];
};
static_assert(sizeof(StepTraceHeader) == 64 && sizeof(StepTraceCta) == 16 && sizeof(StepTraceMarks) == 16,
              "the host's layout");
constexpr unsigned long long STEP_TRACE_SLOTS = 1024;
constexpr unsigned long long STEP_TRACE_CTAS = 8192;
constexpr unsigned long long STEP_TRACE_MARK_CTAS = 1024;
// Where a slot's marks begin: after its header and its CTAs' records.
constexpr unsigned long long STEP_TRACE_MARKS_AT = sizeof(StepTraceHeader) + sizeof(StepTraceCta) * STEP_TRACE_CTAS;
constexpr unsigned long long STEP_TRACE_SLOT_BYTES = STEP_TRACE_MARKS_AT + sizeof(StepTraceMarks) * STEP_TRACE_MARK_CTAS;
struct StepTraceTarget {
  unsigned char* base;  // STEP_TRACE_SLOTS slots of STEP_TRACE_SLOT_BYTES
  unsigned int module;
};
__device__ StepTraceTarget asynct_step_trace;

__device__ __forceinline__ unsigned long long step_trace_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// This launch's id (%gridid), its slot under `base`, and this CTA's number in the launch.
__device__ __forceinline__ unsigned long long step_trace_grid() {
  unsigned long long grid;
  asm volatile("mov.u64 %0, %%gridid;" : "=l"(grid));
  return grid;
}
__device__ __forceinline__ unsigned char* step_trace_slot(unsigned char* base, unsigned long long grid) {
  return base + grid % STEP_TRACE_SLOTS * STEP_TRACE_SLOT_BYTES;
}
__device__ __forceinline__ unsigned step_trace_cta() {
  return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}

// `target` is read before the wait, so that its load is not on the path of a CTA released at
// once.
__device__ __forceinline__ void step_trace_record(const StepTraceTarget& target, unsigned long long arrive) {
  const unsigned long long release = step_trace_now();
  const unsigned long long grid = step_trace_grid();
  if (target.base == nullptr) return;
  unsigned char* slot = step_trace_slot(target.base, grid);
  const unsigned cta = step_trace_cta();
  if (cta == 0) {
    StepTraceHeader* h = reinterpret_cast<StepTraceHeader*>(slot);
    h->grid_plus_one = grid + 1;
    h->module = target.module;
    h->threads = blockDim.x * blockDim.y * blockDim.z;
    h->ctas = gridDim.x * gridDim.y * gridDim.z;
  }
  if (cta < STEP_TRACE_CTAS) {
    StepTraceCta* r = reinterpret_cast<StepTraceCta*>(slot + sizeof(StepTraceHeader)) + cta;
    constexpr unsigned long long wait_max = (1ull << STEP_TRACE_WAIT_BITS) - 1;
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    const unsigned waited = (unsigned)min(release - arrive, wait_max);
    *r = StepTraceCta{arrive, waited | min(sm, 255u) << STEP_TRACE_WAIT_BITS, (unsigned)grid};
  }
}
#endif

// Marks point k (below STEP_TRACE_MARKS) of this CTA's path through its kernel in the step trace, from the
// calling thread (the caller picks one); the timeline reports each mark after the CTA's release.
// Compiled out without ASYNCT_STEP_TRACE.
__device__ __forceinline__ void step_trace_mark(int k) {
#ifdef ASYNCT_STEP_TRACE
  const unsigned long long now = step_trace_now();
  const StepTraceTarget target = asynct_step_trace;
  const unsigned cta = step_trace_cta();
  if (target.base == nullptr || cta >= STEP_TRACE_MARK_CTAS) return;
  unsigned char* marks = step_trace_slot(target.base, step_trace_grid()) + STEP_TRACE_MARKS_AT;
  reinterpret_cast<StepTraceMarks*>(marks)[cta].at[k] = (unsigned)now;
#else
  (void)k;
#endif
}

__device__ __forceinline__ void pdl_wait() {
#ifdef ASYNCT_STEP_TRACE
  const bool tracer = threadIdx.x + threadIdx.y + threadIdx.z == 0;
  StepTraceTarget target{nullptr, 0};
  unsigned long long arrive = 0;
  if (tracer) {
    target = asynct_step_trace;
    arrive = step_trace_now();
  }
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
#ifdef ASYNCT_STEP_TRACE
  if (tracer) step_trace_record(target, arrive);
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Waits for the predecessor, then lets the successor be scheduled: the opening of every entry
// point that reads nothing before the wait.
__device__ __forceinline__ void pdl_begin() {
  pdl_wait();
  pdl_launch_dependents();
}

// Asks the copy engine of the SM (TMA) to bring `bytes` (a multiple of 16) from `p` (16-byte
// aligned) into L2, without waiting: a kernel's constant weights, fetched before pdl_wait() while
// its predecessor finishes. A hint only; compiled out before sm_90.
__device__ __forceinline__ void prefetch_l2(const void* p, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}
