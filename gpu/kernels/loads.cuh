#line 2 "loads.cuh"
// How a kernel body reads the activations another kernel wrote (x of a GEMM, q and the KV cache
// of the attention, the residual of the Peri-LN epilogue): a template parameter of the bodies
// that both a standalone kernel and the decode megakernel (decode_mega.cu) run.
//
// A standalone kernel reads them through the read-only path (ld.global.nc, L1 allowed): they do
// not change while it runs. Inside the megakernel the same buffers are rewritten by earlier
// ops of the same launch (h of layer 0 and h of layer 1 share an address), and ld.global.nc is
// only defined for data that is constant for the kernel's lifetime, while L1 is not kept
// coherent between SMs: a CTA could read layer 0's h from its own L1 in layer 1. So there they
// are read at L2 (ld.global.cg), where the writes of the op before, fenced and counted at the
// grid barrier, are visible. Both policies load the same bits; only the path differs.
// Constant data (weights, norms, the block table, the row metadata) keeps the read-only path.

// Asks L2 for p's line under either policy: for data read soon, but not by this thread alone.
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// prefetch(p) asks for p's line where load(p) will look for it (a hint: no register waits).
struct ReadOnlyLoads {
  template <class T>
  __device__ __forceinline__ static T load(const T* p) {
    return __ldg(p);
  }
  __device__ __forceinline__ static void prefetch(const void* p) {
    asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
  }
};

struct CoherentLoads {
  template <class T>
  __device__ __forceinline__ static T load(const T* p) {
    return __ldcg(p);
  }
  __device__ __forceinline__ static void prefetch(const void* p) { prefetch_l2(p); }
};

// Constant data is read through L1 under either policy.
__device__ __forceinline__ void prefetch_constant(const void* p) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
}
