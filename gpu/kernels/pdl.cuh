#line 2 "pdl.cuh"
// Programmatic dependent launch (gpu::runtime::launch), prepended to every kernel file.
//
// The host launches every kernel of the crate with the programmatic-serialisation attribute, so a
// kernel may start while its predecessor on the stream is still running. Each entry point
// therefore calls pdl_wait() before it reads or writes any buffer another kernel touches (only
// constant weights may be read before it: a GEMM prefetches them into L2 there; and the HP1
// attention reads its row metadata there when the launcher says that the kernel before it did
// not write them: hp1_decode.cu's rows_settled), then
// pdl_launch_dependents() to let its own successor be scheduled. The trigger comes after the wait,
// so at most one kernel runs ahead of the one doing the work. Both are no-ops on a launch without
// the attribute, and compiled out before sm_90, which lacks griddepcontrol.

#ifdef ASYNCT_STEP_TRACE
// The step trace (gpu::runtime::step_trace), compiled in only when the host asks for it with
// this macro: thread 0 of every CTA stamps the global timer as it reaches the wait and as it
// leaves it, and folds both into its launch's slot of this module's region by non-returning
// reductions, so nothing waits on them. A launch's slot is its %gridid (the context's launch
// number) modulo STEP_TRACE_SLOTS; the host finds a launch by the ids its slot holds (two
// launches in one slot show as a range and are dropped). Minima are kept as maxima of the
// complement, so a region of zeros is an empty one. The host sets the pointer after loading the
// module; null records nothing.
struct StepTraceSlot {
  unsigned long long grid_hi, grid_lo_inv;        // max of %gridid + 1, max of ~%gridid
  unsigned long long arrive_hi, arrive_lo_inv;    // ns at the wait
  unsigned long long release_hi, release_lo_inv;  // ns past it
  unsigned int waits, threads, ctas;              // waits counted; block and grid sizes
};
static_assert(sizeof(StepTraceSlot) == 64, "the host reads slots 64 bytes apart");
constexpr unsigned long long STEP_TRACE_SLOTS = 65536;
__device__ StepTraceSlot* asynct_step_trace;

__device__ __forceinline__ unsigned long long step_trace_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// A global reduction that returns nothing (RED): no thread waits for it.
__device__ __forceinline__ void step_trace_max(void* p, unsigned long long v) {
  asm volatile("red.relaxed.gpu.global.max.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void step_trace_record(unsigned long long arrive) {
  unsigned long long release = step_trace_now(), grid;
  asm volatile("mov.u64 %0, %%gridid;" : "=l"(grid));
  StepTraceSlot* slot = asynct_step_trace + grid % STEP_TRACE_SLOTS;
  step_trace_max(&slot->grid_hi, grid + 1);
  step_trace_max(&slot->grid_lo_inv, ~grid);
  step_trace_max(&slot->arrive_hi, arrive);
  step_trace_max(&slot->arrive_lo_inv, ~arrive);
  step_trace_max(&slot->release_hi, release);
  step_trace_max(&slot->release_lo_inv, ~release);
  const unsigned sizes[2] = {blockDim.x * blockDim.y * blockDim.z, gridDim.x * gridDim.y * gridDim.z};
  asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(&slot->waits) : "memory");
  asm volatile("red.relaxed.gpu.global.max.u32 [%0], %1;" ::"l"(&slot->threads), "r"(sizes[0]) : "memory");
  asm volatile("red.relaxed.gpu.global.max.u32 [%0], %1;" ::"l"(&slot->ctas), "r"(sizes[1]) : "memory");
}
#endif

__device__ __forceinline__ void pdl_wait() {
#ifdef ASYNCT_STEP_TRACE
  const bool tracer = asynct_step_trace != nullptr && threadIdx.x + threadIdx.y + threadIdx.z == 0;
  const unsigned long long arrive = tracer ? step_trace_now() : 0;
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
#ifdef ASYNCT_STEP_TRACE
  if (tracer) step_trace_record(arrive);
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
