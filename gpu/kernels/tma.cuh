#line 2 "tma.cuh"
// tma.cuh: Hopper's tensor memory accelerator (TMA) and the shared-memory mbarriers that count
// its bytes, as inline PTX (sm_90a only): what a warp-specialised kernel's producer and consumers
// hand stages over with.
//
// A stage's handover: the producer arms the stage's `full` barrier with the bytes to come
// (arrive_expect_tx, one arrival) and issues the TMA copies, which complete those bytes on it; a
// consumer waits on `full` for the stage's phase, reads the stage, and arrives on its `empty`
// barrier once the reads are done; the producer waits on `empty` before refilling. A barrier's
// phase flips each time its arrivals (and bytes) complete, so the n-th use of a stage waits for
// parity n & 1.
//
// TensorMap: a CUtensorMap (cuda.h; 128 opaque bytes, 128-byte aligned since CUDA 13) that the host encodes with
// cuTensorMapEncodeTiled (gpu::gemm::wgmma) and passes by value as a __grid_constant__ kernel
// parameter; a copy names it by its generic address.

namespace tma {

struct __align__(128) TensorMap {
  unsigned long long opaque[16];
};

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}

// Makes the initialised barriers visible to the async proxy (the TMA unit), before a CTA barrier.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// Spins until the barrier has completed the phase of `parity`.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// Copies the box of `map` at coordinates (c0 along the inner dimension, c1 along the outer) into
// shared memory at `dst` (aligned as the map's swizzle needs), completing its bytes on `bar`.
// Coordinates past the tensor read as zeros, and still count as bytes.
__device__ __forceinline__ void load_2d(unsigned dst, const TensorMap* map, int c0, int c1, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// The same copy delivered to every CTA of the cluster in `mask` (bit r: rank r), at the same
// shared-memory offset `dst` in each, completing its bytes on the barrier at offset `bar` in each.
__device__ __forceinline__ void load_2d_multicast(unsigned dst, const TensorMap* map, int c0, int c1, unsigned bar,
                                                  unsigned short mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, "
      "%3}], [%4], %5;" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
      : "memory");
}

// This CTA's rank in its cluster.
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// One arrival on the barrier at offset `bar` of cluster CTA `rank` (this one included), released
// at cluster scope: what this CTA read before it is done before that CTA's waiter proceeds.
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar, unsigned rank) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}" ::"r"(bar),
      "r"(rank)
      : "memory");
}

// Every thread of every CTA of the cluster meets here (release, then acquire).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

}  // namespace tma
