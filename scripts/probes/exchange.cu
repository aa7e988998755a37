// Probe (issue 15): what the class forms' exchange of partials costs, and whether L2 carries it
// faster than distributed shared memory. Runs 319-323 put the exchange of o_proj and down_proj at
// 128 decode rows at 2.8-2.9 us a layer (gemm_skinny_classes_wg.cu, marks 1 to 2), growing by 2 us
// from 32 rows to 128: about 10 GB/s a CTA, as if bound by the SM-to-SM network.
// The exchange alone, with the engine's geometry: clusters of 8 CTAs (a class each), 16 clusters
// (o_proj's and down_proj's 1,024 outputs in slabs of 64), each CTA holding its class's partials
// [ROWS][64] f32 staged in shared memory (rows padded to 68 floats, as the kernel stages them) and
// owning the share of x rows 16 c .. 16 c + 15 (ROWS / 8 rows), whose 8 classes it adds in class
// order ((p0 + p1) + p2) + ... + p7 and stores. Dynamic shared memory sets the CTAs an SM (108 KB
// as the kernel's: two; 200 KB: one).
// Modes (the same sums, the same bits; only the way the shares travel differs):
//   none   no exchange: the CTA adds its own share's partials 8 times (the fixed cost: staging,
//          sums, stores, the launch)
//   push   each CTA sends its 7 peers their shares by st.async (16 bytes a store) into their
//          receive buffers, counted on the receiver's mbarrier, and waits on its own; the shares
//          in turn from the next rank on, so that at any moment the CTAs send to different CTAs
//   pushr  push with the shares in rank order, as the engine sent them until session 63: all
//          CTAs of a cluster send to rank 0 first, then to rank 1, ...
//   pull   a cluster barrier (release / acquire), then each CTA reads its share of the 7 peers'
//          staged partials with ld.shared::cluster (16 bytes a load); a second barrier before exit
//          keeps the peers' shared memory alive
//   l2     each CTA stores its partials (all but its own share) to global scratch, a cluster
//          barrier (release / acquire at cluster scope), then it reads its share of the 7 peers'
//          partials from L2 (ld.global.cg)
//   split  push to the peers at odd distance in the cluster (4 of 7) and L2 for the others (3):
//          both networks at once
// Each mode runs 200 launches back to back (no PDL) and prints the time a launch and, from
// %globaltimer, each CTA's span from its partials staged to its stores issued (median and
// slowest CTA), and checks every output's bits against the host's sums in class order.
// Build and run on the device: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/exchange
// scripts/probes/exchange.cu && /tmp/exchange
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "probe.cuh"

enum Mode { NONE = 0, PUSH = 1, PUSHR = 2, PULL = 3, L2 = 4, SPLIT = 5, MODES = 6 };
static const char* MODE_NAMES[MODES] = {"none", "push", "pushr", "pull", "l2", "split"};
constexpr int CLASSES = 8, CLUSTERS = 16, COLS = 64, PAD = 68, THREADS = 256, QUADS = COLS / 4;

// A partial's value: distinct per cluster, class, row and column, with magnitudes that make the
// class order of the sum matter to its bits.
__host__ __device__ inline float partial(int cl, int c, int r, int j) {
  const unsigned h = (unsigned)(cl * 7919 + c * 104729 + r * 613 + j * 37) * 2654435761u;
  return ((float)(h >> 8) / 16777216.0f - 0.5f) * (c == 0 ? 1e4f : 1.0f + c);
}

__device__ __forceinline__ float4 ld_cluster16(unsigned a) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(a)
               : "memory");
  return v;
}
__device__ __forceinline__ void add4(float4& a, float4 b) {
  a.x += b.x;
  a.y += b.y;
  a.z += b.z;
  a.w += b.w;
}
// Whether the share for the peer at distance d in the cluster goes by push (split: odd d).
__device__ __forceinline__ bool pushed(int mode, int d) {
  return mode == PUSH || mode == PUSHR || (mode == SPLIT && (d & 1));
}

__global__ void __launch_bounds__(THREADS) exchange(int mode, int rows, float* scratch, float* out,
                                                    unsigned long long* spans) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int share = rows / CLASSES;
  float* part = reinterpret_cast<float*>(smem);
  float* recv = part + rows * PAD;  // [CLASSES][share][PAD]
  unsigned long long* bar = reinterpret_cast<unsigned long long*>(recv + CLASSES * share * PAD);
  const unsigned bar_a = smem_addr(bar);
  const int c = (int)cluster::rank(), cl = blockIdx.x / CLASSES;
  if (threadIdx.x == 0) {
    tma::mbar_init(bar_a, 1);
    tma::mbar_init_fence();
  }
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  for (int i = threadIdx.x; i < rows * COLS; i += THREADS) {
    const int r = i / COLS, j = i % COLS;
    part[r * PAD + j] = partial(cl, c, r, j);
  }
  __syncthreads();
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
  const unsigned long long t0 = global_ns();

  const int quads = share * QUADS;  // float4s of one share
  int pushes = 0;
  for (int d = 1; d < CLASSES; ++d) pushes += pushed(mode, d);
  if (mode == PUSH || mode == PUSHR || mode == SPLIT) {
    if (threadIdx.x == 0) {
      tma::mbar_arrive_expect_tx(bar_a, pushes * quads * 16);
    }
    for (int i = threadIdx.x; i < (CLASSES - 1) * quads; i += THREADS) {
      // Share slot 1 .. 7: push takes the ranks from the next one on, pushr in rank order, own skipped.
      const int slot = 1 + i / quads, ranked = slot - 1 < c ? slot - 1 : slot;
      const int o = mode == PUSHR ? ranked : (c + slot) % CLASSES, d = (o - c + CLASSES) % CLASSES;
      const int r = (i % quads) / QUADS, q = i % QUADS;
      if (!pushed(mode, d)) continue;
      const uint4 v = *reinterpret_cast<const uint4*>(part + (o * share + r) * PAD + 4 * q);
      cluster::st_async_16(smem_addr(recv + (c * share + r) * PAD + 4 * q), o, bar_a, v);
    }
  }
  if (mode == L2 || mode == SPLIT) {
    float* mine = scratch + (size_t)(cl * CLASSES + c) * rows * COLS;
    for (int i = threadIdx.x; i < rows * QUADS; i += THREADS) {
      const int r = i / QUADS, q = i % QUADS, o = r / share, d = (o - c + CLASSES) % CLASSES;
      if (d == 0 || pushed(mode, d)) continue;
      *reinterpret_cast<float4*>(mine + r * COLS + 4 * q) = *reinterpret_cast<const float4*>(part + r * PAD + 4 * q);
    }
  }
  if (mode == PULL || mode == L2 || mode == SPLIT) cluster::sync();
  if (mode == PUSH || mode == PUSHR || mode == SPLIT) tma::mbar_wait<true>(bar_a, 0);

  for (int i = threadIdx.x; i < quads; i += THREADS) {
    const int r = i / QUADS, q = i % QUADS, row = c * share + r;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int k = 0; k < CLASSES; ++k) {
      const int d = (k - c + CLASSES) % CLASSES;
      float4 v;
      if (mode == NONE || d == 0) {
        v = *reinterpret_cast<const float4*>(part + row * PAD + 4 * q);
      } else if (pushed(mode, d)) {
        v = *reinterpret_cast<const float4*>(recv + (k * share + r) * PAD + 4 * q);
      } else if (mode == PULL) {
        v = ld_cluster16(cluster::remote(smem_addr(part + row * PAD + 4 * q), k));
      } else {
        v = __ldcg(reinterpret_cast<const float4*>(scratch + ((size_t)(cl * CLASSES + k) * rows + row) * COLS + 4 * q));
      }
      if (k == 0) {
        acc = v;
      } else {
        add4(acc, v);
      }
    }
    *reinterpret_cast<float4*>(out + ((size_t)cl * rows + row) * COLS + 4 * q) = acc;
  }
  __syncthreads();
  if (threadIdx.x == 0) spans[blockIdx.x] = global_ns() - t0;
  // No CTA leaves while a peer may still read its shared memory or signal its mbarrier.
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.aligned;" ::: "memory");
}

int main() {
  const int n_ctas = CLUSTERS * CLASSES;
  float *scratch, *out;
  unsigned long long* spans;
  CK(cudaMalloc(&scratch, (size_t)n_ctas * 128 * COLS * 4));
  CK(cudaMalloc(&out, (size_t)CLUSTERS * 128 * COLS * 4));
  CK(cudaMalloc(&spans, n_ctas * sizeof(unsigned long long)));
  CK(cudaFuncSetAttribute(exchange, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  printf("%-6s %5s %8s %10s %11s %12s %5s\n", "mode", "rows", "CTAs/SM", "us/launch", "span med us", "span max us",
         "bits");
  for (int per_sm : {2, 1}) {
    const int smem = per_sm == 2 ? 108 * 1024 : 200 * 1024;
    for (int rows : {32, 128}) {
      std::vector<float> want((size_t)CLUSTERS * rows * COLS);
      for (int cl = 0; cl < CLUSTERS; ++cl)
        for (int r = 0; r < rows; ++r)
          for (int j = 0; j < COLS; ++j) {
            float acc = partial(cl, 0, r, j);
            for (int k = 1; k < CLASSES; ++k) acc += partial(cl, k, r, j);
            want[((size_t)cl * rows + r) * COLS + j] = acc;
          }
      for (int mode = 0; mode < MODES; ++mode) {
        CK(cudaMemset(out, 0xff, (size_t)CLUSTERS * rows * COLS * 4));
        const Timing t = time_on_stream(s, 1, 5, [&](int) {
          for (int i = 0; i < 200; ++i)
            launch_ex(exchange, n_ctas, THREADS, smem, CLASSES, false, s, mode, rows, scratch, out, spans);
        });
        CK(cudaStreamSynchronize(s));
        std::vector<float> got(want.size());
        CK(cudaMemcpy(got.data(), out, got.size() * 4, cudaMemcpyDeviceToHost));
        std::vector<unsigned long long> sp(n_ctas);
        CK(cudaMemcpy(sp.data(), spans, n_ctas * 8, cudaMemcpyDeviceToHost));
        std::sort(sp.begin(), sp.end());
        const bool same = mode == NONE || memcmp(got.data(), want.data(), want.size() * 4) == 0;
        printf("%-6s %5d %8d %10.2f %11.2f %12.2f %5s\n", MODE_NAMES[mode], rows, per_sm, t.median_us / 200,
               sp[n_ctas / 2] / 1e3, sp[n_ctas - 1] / 1e3, mode == NONE ? "-" : same ? "same" : "DIFF");
      }
    }
  }
  return 0;
}
