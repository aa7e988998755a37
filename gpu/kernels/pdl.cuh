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

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
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
