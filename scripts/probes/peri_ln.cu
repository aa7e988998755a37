// Probe (issue 18): how near the Peri-LN residual pass (gpu/kernels/peri_ln_residual.cu, twice a
// layer over a prefill step's rows) runs to the bandwidth its traffic can reach, and whether its
// grid is what holds it. engine is the engine's kernel itself (this file includes it), and full
// and two run its body (peri_ln_residual8) in other launch shapes, so every variant has its
// bits, which the probe checks; on [rows, 1024] bf16 with per-channel f32 parameters, buffers
// larger than L2:
//   engine   the engine's launch: min(ceil(vecs / 256), 4096) CTAs of 256, a grid-stride loop
//   full     one 16-byte vector a thread, ceil(vecs / 256) CTAs, no loop
//   two      two vectors a thread (v and v + vecs / 2), both loads of both issued first
//   copy     the same traffic with no arithmetic (a -> x_out, x -> h_out): the floor of the pass
// Prints each variant's median us over 200 launches, its TB/s of the 8 bytes an element moves,
// and whether its outputs have the engine's bits. RESULTS run 295: the engine's launch is within
// 4% of the copy and no other form beats it (run 289's 10% for the pair form was measured
// against an earlier copy of the kernel's body, whose pointers lacked __restrict__).
// Build and run on the device: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/peri_ln
// scripts/probes/peri_ln.cu && /tmp/peri_ln
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../../gpu/kernels/ops_common.cuh"
#include "../../gpu/kernels/pdl.cuh"
#include "../../gpu/kernels/peri_ln_residual.cu"
#include "probe.cuh"

constexpr int HIDDEN = 1024;

struct Params {
  const bf16 *a, *x;
  UClip after, before;
  bf16 *x_out, *h_out;
  long long vecs;
};

__device__ __forceinline__ uint4 vec(const bf16* base, long long v) { return reinterpret_cast<const uint4*>(base)[v]; }

// The engine's body for vector v (peri_ln_residual.cu).
__device__ __forceinline__ void residual(const Params& p, long long v, uint4 a_raw, uint4 x_raw) {
  peri_ln_residual8(p.after, p.before, a_raw, x_raw, p.x_out, p.h_out, v, HIDDEN);
}

__global__ void full(Params p) {
  const long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (v < p.vecs) residual(p, v, vec(p.a, v), vec(p.x, v));
}

// Two vectors half the tensor apart, every load of both before any arithmetic.
__global__ void two(Params p) {
  const long long half = p.vecs / 2;
  const long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (v >= half) return;
  const uint4 a0 = vec(p.a, v), x0 = vec(p.x, v), a1 = vec(p.a, v + half), x1 = vec(p.x, v + half);
  residual(p, v, a0, x0);
  residual(p, v + half, a1, x1);
}

__global__ void copy(Params p) {
  const long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (v >= p.vecs) return;
  reinterpret_cast<uint4*>(p.x_out)[v] = reinterpret_cast<const uint4*>(p.a)[v];
  reinterpret_cast<uint4*>(p.h_out)[v] = reinterpret_cast<const uint4*>(p.x)[v];
}

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  // The norms' parameters: alpha, weight, bias of after, then of before, [HIDDEN] each.
  std::vector<float> host_params(6 * HIDDEN);
  for (int i = 0; i < 6 * HIDDEN; ++i) host_params[i] = 0.5f + 0.001f * (float)((i * 37) % 1000);
  float* params;
  CK(cudaMalloc(&params, host_params.size() * 4));
  CK(cudaMemcpy(params, host_params.data(), host_params.size() * 4, cudaMemcpyHostToDevice));
  const UClip after = {params, params + HIDDEN, params + 2 * HIDDEN, 1, 1, 1};
  const UClip before = {params + 3 * HIDDEN, params + 4 * HIDDEN, params + 5 * HIDDEN, 1, 1, 1};
  const char* names[4] = {"engine", "full", "two", "copy"};
  for (long long rows : {8192LL, 16400LL}) {
    const size_t n = (size_t)rows * HIDDEN;
    // Four copies of every buffer in turn, so that no launch finds its inputs in L2.
    constexpr int COPIES = 4;
    std::vector<bf16*> bufs(4 * COPIES);
    for (auto& b : bufs) CK(cudaMalloc(&b, n * 2));
    const auto ha = random_bf16(n, 1, 2.0f), hx = random_bf16(n, 2, 2.0f);
    for (int c = 0; c < COPIES; ++c) {
      CK(cudaMemcpy(bufs[4 * c], ha.data(), n * 2, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(bufs[4 * c + 1], hx.data(), n * 2, cudaMemcpyHostToDevice));
    }
    auto params_of = [&](int c) {
      return Params{bufs[4 * c], bufs[4 * c + 1], after, before, bufs[4 * c + 2], bufs[4 * c + 3], (long long)(n / 8)};
    };
    std::vector<unsigned short> ref_x, ref_h;
    for (int variant = 0; variant < 4; ++variant) {
      auto launch = [&](int c) {
        const Params p = params_of(c);
        const long long vecs = p.vecs;
        switch (variant) {
          case 0:
            peri_ln_residual<<<(unsigned)std::min((vecs + 255) / 256, 4096LL), 256>>>(
                p.a, p.x, p.after.alpha, 1, p.after.weight, 1, p.after.bias, 1, p.before.alpha, 1, p.before.weight, 1,
                p.before.bias, 1, p.x_out, p.h_out, vecs, HIDDEN);
            break;
          case 1: full<<<(unsigned)((vecs + 255) / 256), 256>>>(p); break;
          case 2: two<<<(unsigned)((vecs / 2 + 255) / 256), 256>>>(p); break;
          default: copy<<<(unsigned)((vecs + 255) / 256), 256>>>(p); break;
        }
      };
      CK(cudaMemset(bufs[2], 0xff, n * 2));
      CK(cudaMemset(bufs[3], 0xff, n * 2));
      launch(0);
      CK(cudaDeviceSynchronize());
      std::vector<unsigned short> out_x(n), out_h(n);
      CK(cudaMemcpy(out_x.data(), bufs[2], n * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(out_h.data(), bufs[3], n * 2, cudaMemcpyDeviceToHost));
      if (variant == 0) ref_x = out_x, ref_h = out_h;
      const char* bits = variant == 3 ? "(no arithmetic)" : (out_x == ref_x && out_h == ref_h) ? "the engine's bits" : "DIFFERENT bits";
      const Timing t = time_on_stream(0, 20, 200, [&](int i) { launch(i % COPIES); });
      printf("rows %6lld %-7s median %7.2f us (min %7.2f), %5.2f TB/s; %s\n", rows, names[variant], t.median_us, t.min_us,
             n * 8.0 / t.median_us / 1e6, bits);
    }
    for (auto b : bufs) CK(cudaFree(b));
  }
  return 0;
}
