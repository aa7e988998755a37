#line 2 "cluster.cuh"
// cluster.cuh: thread-block clusters (sm_90), as inline PTX: a CTA's place in its cluster, the
// cluster barrier, and the shared memory of the cluster's other CTAs. Used by the sampler's
// row clusters (sampling.cu) and the skinny GEMM's class form (gemm_skinny_classes.cu).
//
// A grid launched without a cluster attribute, or compiled before sm_90, has clusters of one CTA:
// rank() is 0 and size() 1 there; the rest exists from sm_90 on only (and in nvcc's host pass,
// which parses the kernels of the probes in scripts/probes that include this file).

namespace cluster {

// This CTA's place in its cluster (`rank`), else the cluster's size.
__device__ __forceinline__ unsigned special_register(bool rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned v;
  if (rank) {
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(v));
  } else {
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(v));
  }
  return v;
#else
  return rank ? 0u : 1u;
#endif
}
__device__ __forceinline__ unsigned size() { return special_register(false); }
__device__ __forceinline__ unsigned rank() { return special_register(true); }

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// Every thread of every CTA of the cluster meets here; what each wrote before is visible after.
__device__ __forceinline__ void sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The two halves of the cluster barrier apart, so that work runs between them: an arrival that
// orders nothing by itself (what must be seen before it is fenced on its own, e.g.
// tma::mbar_init_fence), and the wait, after which what the others fenced before arriving is seen.
__device__ __forceinline__ void arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

// The address in cluster CTA `rank` of what sits at the shared-memory address `local` here.
__device__ __forceinline__ unsigned remote(unsigned local, unsigned rank) {
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(local), "r"(rank));
  return r;
}
__device__ __forceinline__ unsigned remote(const void* p, unsigned rank) {
  return remote((unsigned)__cvta_generic_to_shared(p), rank);
}

// 16 bytes into cluster CTA `rank`'s shared memory at the address `local` has here, counted (its
// bytes) on that CTA's mbarrier at the address `bar` has here.
__device__ __forceinline__ void st_async_16(unsigned local, unsigned rank, unsigned bar, uint4 v) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(
                   remote(local, rank)),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(remote(bar, rank))
               : "memory");
}
#endif

}  // namespace cluster
