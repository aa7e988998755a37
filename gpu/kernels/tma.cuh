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

// Spins until the barrier has completed the phase of `parity`. CLUSTER: what the cluster's other
// CTAs counted on it (st.async, cluster.cuh) is seen after it too (acquire at cluster scope;
// the CTA's own scope otherwise).
template <bool CLUSTER = false>
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  unsigned done;
  do {
    if constexpr (CLUSTER) {
      asm volatile(
          "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, "
          "0, p;\n}\n"
          : "=r"(done)
          : "r"(bar), "r"(parity)
          : "memory");
    } else {
      asm volatile(
          "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(bar), "r"(parity)
          : "memory");
    }
  } while (!done);
}

// A warp-specialised CTA's dynamic shared memory: a ring of `stages` stages of `stage_bytes` at
// its first 1024-byte boundary (the 128-byte swizzle's atoms), then the stages' full and empty
// mbarriers; `tile` is the ring's generic address, where the consumers stage their finished tile
// once the ring is read no more.
struct RingSmem {
  unsigned ring, full0, empty0;
  float* tile;
  __device__ __forceinline__ RingSmem(int stages, int stage_bytes) {
    unsigned char* raw = tc::dynamic_smem();
    const unsigned raw_addr = tc::smem_addr(raw);
    ring = (raw_addr + 1023u) & ~1023u;
    tile = reinterpret_cast<float*>(raw + (ring - raw_addr));
    full0 = ring + stages * stage_bytes;
    empty0 = full0 + 8 * stages;
  }
};

// Thread 0 initialises a ring of `stages` stages: its `full` barriers (8 bytes apart from full0;
// one arrival, the producer's, beside the bytes) and `empty` barriers (from empty0; one arrival
// per consumer warp). The CTA meets before any other thread uses them.
__device__ __forceinline__ void init_ring(unsigned full0, unsigned empty0, int stages, unsigned consumer_warps) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(full0 + 8 * s, 1);
      mbar_init(empty0 + 8 * s, consumer_warps);
    }
    mbar_init_fence();
  }
}

// The consumers of a warp-specialised CTA (its first N threads, every warp but the producer's)
// meet on named barrier 1, leaving the producer to run on.
template <int N>
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(N) : "memory");
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

// Asks L2 for the box of `map` at (c0, c1), for a later load_2d to find there; nothing is
// written to shared memory or counted.
__device__ __forceinline__ void prefetch_2d(const TensorMap* map, int c0, int c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];" ::"l"(
                   reinterpret_cast<unsigned long long>(map)),
               "r"(c0), "r"(c1)
               : "memory");
}

}  // namespace tma
