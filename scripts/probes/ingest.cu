// Probe (issue 15): how fast SMs take in bytes that sit in L2, by how many SMs read, how many
// CTAs an SM holds and how they read. At 128 decode rows each decode GEMM reads all its rows of
// x (or of its class of K) in every CTA: run 326's traced pass puts the CTAs' intake at 60-76
// GB/s an SM (gate/up's wide form: 96 CTAs of 256 KB of x and 128 KB of W in the 6.3 us from x
// in to the product done, about 5.8 TB/s over the GPU; qkv's plain form two CTAs an SM of 160
// KB each in about 5 us; down_proj's class form two CTAs an SM of 144 KB in 3.8 us). Whether
// that is each SM's port or the L2's total decides the next form: spread over more SMs, or read
// x fewer times (multicast, classes).
// Each CTA reads the same buffer whole (as every CTA of a form reads x), the buffer left in L2
// by the launches before. Modes:
//   ld    the CTA's 256 threads read it in 16-byte ld.global.cg, four vectors a thread in flight
//   ldca  the same through L1 (ld.global.ca), as the plain form reads x: two CTAs an SM reading
//         the same bytes may meet in L1
//   bulk  one producer thread streams it through a ring of STAGES stages of CHUNK bytes by 1-D
//         TMA (cp.async.bulk), the 256 consumer threads reading each stage from shared memory
//         and releasing it: the TMA-fed forms' intake without their arithmetic
//   rot   bulk with each CTA starting at its own chunk (blockIdx.x modulo the chunks): whether
//         every CTA asking L2 for the same lines at once costs (run 230's reading)
//   mc2   bulk in clusters of 2 CTAs, each CTA loading half of every chunk and multicasting it to
//         both (a stage is refilled once every consumer of the cluster released it)
//   mc4   the same in clusters of 4
// Every consumer folds what it read into an XOR, and every CTA's must equal the host's XOR of
// the buffer (so the multicast modes deliver every byte). Dynamic shared memory sets the CTAs an
// SM (100 KB: two; 200 KB: one). Prints, per size, grid and mode: the launch's time replayed in a
// graph, and from %globaltimer each CTA's span (median, slowest) and the launch's span (first
// CTA's start to last CTA's end), with the aggregate rate (CTAs x bytes over the launch's span)
// and a CTA's (bytes over its median span).
// Build and run on the device: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/ingest
// scripts/probes/ingest.cu && /tmp/ingest
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "probe.cuh"

constexpr int CONSUMERS = 256, THREADS = CONSUMERS + 32, CHUNK = 16384, STAGES = 6;
enum Mode { LD, LDCA, BULK, ROT, MC2, MC4 };
const char* const MODE_NAMES[] = {"ld", "ldca", "bulk", "rot", "mc2", "mc4"};


__device__ __forceinline__ unsigned fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

__device__ __forceinline__ uint4 ld_shared16(unsigned a) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
  return v;
}

// `bytes` from src to shared address dst here (or, with mask, at dst in each CTA of the cluster
// the mask names), counted on the mbarrier at bar's offset in each destination CTA.
__device__ __forceinline__ void bulk_load(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void bulk_multicast(unsigned dst, const void* src, unsigned bytes, unsigned bar,
                                               unsigned short mask) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1], %2, [%3], %4;" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "h"(mask)
      : "memory");
}
__device__ __forceinline__ void arrive_remote(unsigned bar_cluster) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(bar_cluster) : "memory");
}

__global__ void __launch_bounds__(THREADS) ingest(int mode, const uint4* __restrict__ x, int bytes, unsigned* xors,
                                                   unsigned long long* t0s, unsigned long long* t1s) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ unsigned cta_xor;
  const unsigned ring = smem_addr(smem), full0 = ring + STAGES * CHUNK, empty0 = full0 + 8 * STAGES;
  const int csize = mode == MC2 ? 2 : mode == MC4 ? 4 : 1;
  const unsigned rank = csize > 1 ? cluster::rank() : 0;
  if (threadIdx.x == 0) {
    cta_xor = 0;
    for (int s = 0; s < STAGES; ++s) {
      tma::mbar_init(full0 + 8 * s, 1);
      tma::mbar_init(empty0 + 8 * s, CONSUMERS / 32 * csize);
    }
    tma::mbar_init_fence();
  }
  __syncthreads();
  if (csize > 1) cluster::sync();
  const unsigned long long t0 = global_ns();
  unsigned acc = 0;
  const int chunks = bytes / CHUNK;
  if (mode == LD || mode == LDCA) {
    if (threadIdx.x < CONSUMERS) {
      const int n = bytes / 16;
      for (int i = threadIdx.x; i < n; i += 4 * CONSUMERS) {
        uint4 v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int e = i + j * CONSUMERS;
          v[j] = e >= n ? make_uint4(0, 0, 0, 0) : mode == LD ? __ldcg(x + e) : __ldca(x + e);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) acc ^= fold(v[j]);
      }
    }
  } else if (threadIdx.x == CONSUMERS) {
    const unsigned part = CHUNK / csize;
    for (int i = 0; i < chunks; ++i) {
      const int s = i % STAGES;
      if (i >= STAGES) tma::mbar_wait<true>(empty0 + 8 * s, ((i / STAGES) - 1) & 1);
      tma::mbar_arrive_expect_tx(full0 + 8 * s, CHUNK);
      const int from = mode == ROT ? (i + (int)blockIdx.x) % chunks : i;
      const unsigned char* src = reinterpret_cast<const unsigned char*>(x) + (size_t)from * CHUNK;
      if (csize == 1) {
        bulk_load(ring + s * CHUNK, src, CHUNK, full0 + 8 * s);
      } else {
        bulk_multicast(ring + s * CHUNK + rank * part, src + rank * part, part, full0 + 8 * s,
                       (unsigned short)((1u << csize) - 1));
      }
    }
  } else if (threadIdx.x < CONSUMERS) {
    const int lane = threadIdx.x & 31;
    for (int i = 0; i < chunks; ++i) {
      const int s = i % STAGES;
      tma::mbar_wait<true>(full0 + 8 * s, (i / STAGES) & 1);
#pragma unroll
      for (int j = 0; j < CHUNK / (16 * CONSUMERS); ++j)
        acc ^= fold(ld_shared16(ring + s * CHUNK + 16 * (threadIdx.x + j * CONSUMERS)));
      __syncwarp();
      if (lane == 0) {
        for (int r = 0; r < csize; ++r) arrive_remote(cluster::remote(empty0 + 8 * s, r));
      }
    }
  }
  atomicXor(&cta_xor, acc);
  __syncthreads();
  const unsigned long long t1 = global_ns();
  if (threadIdx.x == 0) {
    xors[blockIdx.x] = cta_xor;
    t0s[blockIdx.x] = t0;
    t1s[blockIdx.x] = t1;
  }
  // No CTA leaves while a peer may still write into its stages or arrive on its barriers.
  if (csize > 1) cluster::sync();
}

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("%s, %d SMs\n", prop.name, prop.multiProcessorCount);
  CK(cudaFuncSetAttribute(ingest, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  constexpr int MAX_BYTES = 768 * 1024, MAX_CTAS = 264;
  std::vector<unsigned> host(MAX_BYTES / 4);
  unsigned lcg = 12345;
  for (auto& w : host) w = (lcg = lcg * 1664525u + 1013904223u);
  uint4* x;
  unsigned *xors;
  unsigned long long *t0s, *t1s;
  CK(cudaMalloc(&x, MAX_BYTES));
  CK(cudaMalloc(&xors, MAX_CTAS * 4));
  CK(cudaMalloc(&t0s, MAX_CTAS * 8));
  CK(cudaMalloc(&t1s, MAX_CTAS * 8));
  CK(cudaMemcpy(x, host.data(), MAX_BYTES, cudaMemcpyHostToDevice));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  printf("%-5s %6s %5s %7s %10s %12s %11s %12s %9s %11s %5s\n", "mode", "KB", "CTAs", "CTAs/SM", "us/launch",
         "CTA span us", "slowest us", "launch span", "TB/s all", "GB/s a CTA", "xor");
  const int sizes_kb[] = {128, 256, 768};
  const int grids[][2] = {{32, 1}, {64, 1}, {96, 1}, {128, 1}, {132, 1}, {128, 2}, {256, 2}, {264, 2}};
  for (int kb : sizes_kb) {
    unsigned want = 0;
    for (int i = 0; i < kb * 256; ++i) want ^= host[i];
    for (const auto& g : grids) {
      const int ctas = g[0], per_sm = g[1], smem = per_sm == 2 ? 100 * 1024 : 200 * 1024;
      for (int mode = LD; mode <= MC4; ++mode) {
        const int csize = mode == MC2 ? 2 : mode == MC4 ? 4 : 1;
        auto launch = [&] {
          launch_ex(ingest, ctas, THREADS, smem, csize, false, s, mode, x, kb * 1024, xors, t0s, t1s);
        };
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < 20; ++i) launch();
        CK(cudaStreamEndCapture(s, &graph));
        CK(cudaGraphInstantiate(&exec, graph, 0));
        const Timing t = time_graph(exec, s);
        CK(cudaMemsetAsync(xors, 0, MAX_CTAS * 4, s));
        launch();
        CK(cudaStreamSynchronize(s));
        std::vector<unsigned> got(ctas);
        std::vector<unsigned long long> a(ctas), b(ctas);
        CK(cudaMemcpy(got.data(), xors, ctas * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(a.data(), t0s, ctas * 8, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(b.data(), t1s, ctas * 8, cudaMemcpyDeviceToHost));
        std::vector<double> span(ctas);
        for (int i = 0; i < ctas; ++i) span[i] = (b[i] - a[i]) * 1e-3;
        std::sort(span.begin(), span.end());
        const unsigned long long first = *std::min_element(a.begin(), a.end());
        const double launch_us = (*std::max_element(b.begin(), b.end()) - first) * 1e-3;
        const bool same = std::all_of(got.begin(), got.end(), [&](unsigned v) { return v == want; });
        const double med = span[ctas / 2];
        printf("%-5s %6d %5d %7d %10.2f %12.2f %11.2f %12.2f %9.2f %11.1f %5s\n", MODE_NAMES[mode], kb, ctas, per_sm,
               t.median_us / 20, med, span.back(), launch_us, (double)ctas * kb * 1024 / (launch_us * 1e-6) / 1e12,
               kb * 1024 / (med * 1e-6) / 1e9, same ? "same" : "WRONG");
        CK(cudaGraphExecDestroy(exec));
        CK(cudaGraphDestroy(graph));
      }
    }
  }
  return 0;
}
