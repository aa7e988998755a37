#line 2 "step_results.cu"
// step_results.cu: a step's results written straight into page-locked host memory mapped into
// the device's address space (gpu::runtime::step_results): its drawn tokens, and its fault word,
// which it clears behind its read so the steps queued after it record into a clean word. One
// launch where the stream ran three operations (two copies to the host and the word's clearing:
// 15 us of device time a step, RESULTS run 224).
//
// Buffers: tokens u32 [rows] and fault u32 [words] on the device; tokens_host u32 [rows] and
// fault_host u32 [words], device addresses of mapped host memory. The host reads them once an
// event recorded after this launch has completed (the launch's writes are then visible to it).
// Launch: one CTA of 256 threads, each element to one thread in turn. Assumes the sizes above.

extern "C" __global__ void step_results(const unsigned* __restrict__ tokens, unsigned rows, unsigned* fault,
                                        unsigned words, unsigned* tokens_host, unsigned* fault_host) {
  pdl_begin();
  for (unsigned i = threadIdx.x; i < rows; i += blockDim.x) tokens_host[i] = tokens[i];
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) {
    fault_host[i] = fault[i];
    fault[i] = 0;
  }
}
