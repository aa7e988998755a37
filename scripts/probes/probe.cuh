// probe.cuh: what the standalone probes of scripts/probes share: the CUDA error check, the timing
// of a replayed CUDA graph or of a launch (median and least of the trials, in us), a launch with
// clusters or programmatic serialisation, the global timer (and the engine's mbarriers and
// clusters, from gpu/kernels/tma.cuh and cluster.cuh), random bf16 data, programmatic launch's wait and trigger, a 16-byte
// cp.async, and the GEMV probes' row arithmetic (dot8, finish_row), whose one definition is what
// lets two forms of a probe give the same bits. Each probe stays one file that nvcc builds alone
// (its header says how); this is its only include from this repository.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

// The engine's mbarriers (tma::mbar_init, mbar_arrive_expect_tx, mbar_arrive, mbar_wait,
// mbar_init_fence), which need tensor_core.cuh before them, and its clusters (cluster::rank,
// sync, remote, st_async_16).
#include "../../gpu/kernels/tensor_core.cuh"
#include "../../gpu/kernels/tma.cuh"
#include "../../gpu/kernels/cluster.cuh"

#define CK(x)                                                                   \
  do {                                                                          \
    cudaError_t e = (x);                                                        \
    if (e != cudaSuccess) {                                                     \
      printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)

// The median and the least of `trials` timings, each of one call of `run(trial)` on stream s
// between two events, after `warm` untimed calls.
struct Timing {
  double median_us, min_us;
};

template <class Run>
Timing time_on_stream(cudaStream_t s, int warm, int trials, Run run) {
  for (int i = 0; i < warm; ++i) run(i);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int i = 0; i < trials; ++i) {
    CK(cudaEventRecord(e0, s));
    run(warm + i);
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float t;
    CK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  return Timing{ms[ms.size() / 2] * 1e3, ms[0] * 1e3};
}

// A launch by cudaLaunchKernelEx on stream s: clusters of `cluster` CTAs along x (1: none) and,
// with pdl, programmatic stream serialisation.
template <class... P, class... A>
inline void launch_ex(void (*k)(P...), unsigned grid, unsigned threads, unsigned smem, int cluster, bool pdl,
                      cudaStream_t s, A... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster;
    attr[n].val.clusterDim.y = 1;
    attr[n++].val.clusterDim.z = 1;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  CK(cudaLaunchKernelEx(&cfg, k, args...));
}

// A graph's replay: 5 untimed, then the median of 30.
inline Timing time_graph(cudaGraphExec_t ge, cudaStream_t s) {
  return time_on_stream(s, 5, 30, [&](int) { CK(cudaGraphLaunch(ge, s)); });
}

// acc + a . b over 8 bf16 pairs (16 bytes each), in element order with fmaf: every GEMV of the
// probes sums a row through it, so two forms that order their chunks alike give the same bits.
__device__ __forceinline__ float dot8(uint4 a, uint4 b, float acc) {
  const __nv_bfloat162* pa = reinterpret_cast<const __nv_bfloat162*>(&a);
  const __nv_bfloat162* pb = reinterpret_cast<const __nv_bfloat162*>(&b);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = __bfloat1622float2(pa[i]), fb = __bfloat1622float2(pb[i]);
    acc = fmaf(fa.x, fb.x, acc);
    acc = fmaf(fa.y, fb.y, acc);
  }
  return acc;
}

// The end of a GEMV row's sum held across a warp's lanes: the butterfly, then the scale that
// keeps 35 layers of random weights finite. Every lane gets the total.
__device__ __forceinline__ float finish_row(float acc) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  return acc * 0.03125f;
}

__device__ __forceinline__ void grid_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void grid_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// The global timer, ns (one clock for every SM): spans of CTAs on different SMs compare.
__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

// 16 bytes from global memory to shared address dst, through L2 only.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}

// n bf16 bits uniform in [-range, range), from an LCG started at seed, each rounded to bf16.
inline std::vector<unsigned short> random_bf16(size_t n, unsigned seed, float range = 1.0f) {
  std::vector<unsigned short> v(n);
  for (auto& b : v) {
    seed = seed * 1664525u + 1013904223u;
    const __nv_bfloat16 h = __float2bfloat16(range * (((int)(seed >> 9) - (1 << 22)) / (float)(1 << 22)));
    memcpy(&b, &h, 2);
  }
  return v;
}
