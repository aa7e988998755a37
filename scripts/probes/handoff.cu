// Probe (issue 15): what one dependent op's hand-off costs at batch 1, through
// griddepcontrol.wait against a counter the producer's CTAs release and the consumer's CTAs
// acquire. A chain of bf16 GEMVs with asynct-0.5b's decode shapes (a layer: qkv 1024 -> 2048,
// o_proj 1024 -> 1024, gate/up 1024 -> 6144, down 3072 -> 1024; 35 layers, 25.2 MB of W a layer,
// buffers reused from layer to layer as the engine reuses them) captured into one CUDA graph and
// replayed; the attention is left out (o_proj reads the first half of qkv's output, down the first
// half of gate/up's, where the attention and SiLU-mul would stand).
// Modes (every kernel the same body; only its hand-off differs):
//   plain    no programmatic launch: each kernel starts when the one before it has ended
//   wait     programmatic launch, W into registers, griddepcontrol.wait, then the trigger
//            (the engine's order: at most one kernel ahead of the one working)
//   early    the trigger first, W into registers, then griddepcontrol.wait
//   counter  the trigger first, W into registers, then thread 0 spins on the producer's counter
//            (ld.acquire.gpu) until every producer CTA has added its 1 after its stores
//            (__threadfence, then atomicAdd); no griddepcontrol.wait at all
//   counter1 the counter's wait with the trigger after it, as wait has it (one kernel ahead)
//   chunks   the trigger first; a counter for each 256 outputs of an op, which its producer CTAs
//            add to, so a consumer starts on the part of x that has landed while the rest is
//            being made (the megakernels' fine-grained dependencies); a consumer waits for the
//            producer's other chunks before it counts its own, so every later op still follows
//            all of the earlier ones (no buffer is rewritten while a reader is left)
//   free     the trigger first and no wait of any kind: the ops stream their W back to back with
//            no dependency (each reads x whenever it gets there, so its output races and is not
//            compared): what the chain costs without a hand-off, the floor the others stand on
//   persist  one persistent kernel for the whole chain, a CTA an SM, each op's rows split over the
//            CTAs; a CTA copies its rows of the next op's W into shared memory (cp.async, two
//            buffers) while it waits at a grid barrier (a counter each op, red.release then
//            ld.acquire) for the op before, then reads x into shared memory and multiplies: the
//            megakernel's hand-off with the weights streamed ahead, in its plainest form
//   pfree    persist without the barrier: the W stream of a persistent kernel, no dependency
//   ring     persist with W streamed through a ring deeper than an op: a producer warp copies
//            each CTA's rows of op after op into a ring of stages (4 KB, or RING_STAGE_KB;
//            cp.async.bulk on mbarriers, a slice starting on a stage), running up to the ring's
//            192 KB ahead of the consumers whatever the barrier holds them at; the consumers as
//            in persist
//   rfree    ring without the barrier
// Prints each mode's median step and its time an op, and checks that every mode's output but
// free's has the bits of plain's (a consumer that read a stale x would differ).
// Build and run on the device: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/handoff
// scripts/probes/handoff.cu && /tmp/handoff
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "probe.cuh"


enum Mode { PLAIN = 0, WAIT = 1, EARLY = 2, COUNTER = 3, COUNTER1 = 4, CHUNKS = 5, FREE = 6, PERSIST = 7, PFREE = 8, RING = 9, RFREE = 10, MODES = 11 };
constexpr int LAYERS = 35, OPS = 4 * LAYERS, WARPS = 4;
constexpr int CHUNK = 256, MAX_CHUNKS = 6144 / CHUNK;  // outputs a chunk counter covers; the most an op has

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// What a kernel waits for and counts: op's own counter (and chunk counters, op * MAX_CHUNKS on),
// and the producer's rows a CTA and outputs (so producer_n / producer_rows CTAs).
struct Handoff {
  unsigned* counters;
  unsigned* chunks;
  int op;
  int producer_rows, producer_n;
};

__device__ __forceinline__ void wait_count(const unsigned* p, unsigned need) {
  while (ld_acquire(p) < need) __nanosleep(32);
}

// A persistent CTA's count of an op it has finished, after __syncthreads ordered its stores.
__device__ __forceinline__ void release_count(unsigned* p) {
  __threadfence();
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p) : "memory");
}


// y[n] = W[n] . x for RW rows a warp; lane l holds 16-byte chunks l, l + 32, ... of each row.
template <int K, int RW>
__global__ void __launch_bounds__(32 * WARPS) gemv(const __nv_bfloat16* __restrict__ w, const __nv_bfloat16* x,
                                                     __nv_bfloat16* y, int mode, Handoff h) {
  constexpr int C = K / 256;  // chunks a lane a row
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * WARPS + warp) * RW;
  if (mode == EARLY || mode == COUNTER || mode == CHUNKS || mode == FREE) grid_trigger();
  uint4 wr[RW][C];
#pragma unroll
  for (int r = 0; r < RW; ++r)
#pragma unroll
    for (int c = 0; c < C; ++c)
      wr[r][c] = __ldg(reinterpret_cast<const uint4*>(w + (size_t)(row0 + r) * K) + c * 32 + lane);
  if (mode == WAIT || mode == EARLY) grid_wait();
  if ((mode == COUNTER || mode == COUNTER1) && h.op > 0) {
    if (threadIdx.x == 0) wait_count(h.counters + h.op - 1, h.producer_n / h.producer_rows);
    __syncthreads();
  }
  const unsigned* ready = h.chunks + (h.op > 0 ? h.op - 1 : 0) * MAX_CHUNKS;  // the producer's chunk counters
  const unsigned per_chunk = CHUNK / max(h.producer_rows, 1);
  if (mode == WAIT || mode == COUNTER1) grid_trigger();
  // Chunk c of a lane's x is outputs 256 c .. 256 c + 255 of the producer: one chunk counter.
  float acc[RW];
#pragma unroll
  for (int r = 0; r < RW; ++r) acc[r] = 0.0f;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    if (mode == CHUNKS && h.op > 0) wait_count(ready + c, per_chunk);
    const uint4 xc = __ldcg(reinterpret_cast<const uint4*>(x) + c * 32 + lane);
#pragma unroll
    for (int r = 0; r < RW; ++r) acc[r] = dot8(wr[r][c], xc, acc[r]);
  }
#pragma unroll
  for (int r = 0; r < RW; ++r) {
    const float total = finish_row(acc[r]);
    if (lane == 0) y[row0 + r] = __float2bfloat16(total);
  }
  if (mode == CHUNKS && h.op > 0)
    for (int c = C; c < h.producer_n / CHUNK; ++c) wait_count(ready + c, per_chunk);
  if (mode == COUNTER || mode == COUNTER1 || mode == CHUNKS) {
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      const int chunk = blockIdx.x * WARPS * RW / CHUNK;  // the one chunk this CTA's rows lie in
      atomicAdd(mode == CHUNKS ? h.chunks + h.op * MAX_CHUNKS + chunk : h.counters + h.op, 1u);
    }
  }
}

struct Op {
  int k, n;
  const __nv_bfloat16* x;
  __nv_bfloat16* y;
  const __nv_bfloat16* w;
};

// The persistent modes: threads a CTA, and the shared memory of one W buffer (the most rows of
// any op a CTA gets, 47 of gate/up's 6,144 on 132 SMs, times K = 1,024, rounded up) and of x.
constexpr int P_THREADS = 256, P_WARPS = P_THREADS / 32;
constexpr int P_W_BYTES = 96 * 1024, P_X_BYTES = 3072 * 2;

// CTA c's first row of an op of n rows over g CTAs, and its row count.
__device__ __forceinline__ void rows_of_cta(int n, int g, int c, int& first, int& count) {
  const int base = n / g, rem = n % g;
  first = c * base + min(c, rem);
  count = base + (c < rem ? 1 : 0);
}

// x of op into shared memory at xs, by `threads` threads.
__device__ __forceinline__ void copy_x(uint4* xs, const Op& op, int threads) {
  for (int c = threadIdx.x; c < op.k / 8; c += threads) xs[c] = __ldcg(reinterpret_cast<const uint4*>(op.x) + c);
}

// Copies this CTA's rows of op's W into shared memory at dst (one commit group).
__device__ __forceinline__ void stream_w(const Op& op, unsigned dst) {
  int first, count;
  rows_of_cta(op.n, gridDim.x, blockIdx.x, first, count);
  const char* src = reinterpret_cast<const char*>(op.w + (size_t)first * op.k);
  const int chunks = count * op.k / 8;
  for (int i = threadIdx.x; i < chunks; i += P_THREADS) cp_async16(dst + 16 * i, src + 16 * i);
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// The whole chain in one kernel (modes persist and pfree). A row's sum is gemv's: lane l takes
// 16-byte chunks l, l + 32, ... of the row in order, then the same butterfly, so persist gives
// plain's bits.
__global__ void __launch_bounds__(P_THREADS, 1) chain(const Op* ops, int n_ops, unsigned* counters, int barrier) {
  extern __shared__ __align__(16) unsigned char smem[];
  const unsigned base = smem_addr(smem);
  const unsigned wbuf[2] = {base, base + P_W_BYTES};
  uint4* xs = reinterpret_cast<uint4*>(smem + 2 * P_W_BYTES);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  stream_w(ops[0], wbuf[0]);
  for (int i = 0; i < n_ops; ++i) {
    const Op op = ops[i];
    if (i + 1 < n_ops) {
      stream_w(ops[i + 1], wbuf[(i + 1) & 1]);
    } else {
      asm volatile("cp.async.commit_group;" ::: "memory");
    }
    if (barrier && i > 0) {
      if (threadIdx.x == 0) wait_count(counters + i - 1, gridDim.x);
      __syncthreads();
    }
    copy_x(xs, op, P_THREADS);
    asm volatile("cp.async.wait_group 1;" ::: "memory");
    __syncthreads();
    int first, count;
    rows_of_cta(op.n, gridDim.x, blockIdx.x, first, count);
    const uint4* w = reinterpret_cast<const uint4*>(smem + (wbuf[i & 1] - base));
    for (int r = warp; r < count; r += P_WARPS) {
      float acc = 0.0f;
      for (int c = 0; c < op.k / 256; ++c) acc = dot8(w[r * (op.k / 8) + c * 32 + lane], xs[c * 32 + lane], acc);
      const float total = finish_row(acc);
      if (lane == 0) op.y[first + r] = __float2bfloat16(total);
    }
    __syncthreads();
    if (barrier && threadIdx.x == 0) release_count(counters + i);
  }
}

// The ring modes: stages of R_STAGE bytes (RING_STAGE_KB at compile time, 4 by default) filling
// 192 KB, then x; 8 consumer warps and a producer warp.
#ifndef RING_STAGE_KB
#define RING_STAGE_KB 4
#endif
constexpr int R_STAGE = RING_STAGE_KB * 1024, R_STAGES = 192 / RING_STAGE_KB, R_RING = R_STAGE * R_STAGES;
constexpr int R_CONSUMERS = 256, R_THREADS = R_CONSUMERS + 32;

__device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// The whole chain in one kernel with W through a ring (modes ring and rfree). Stage g of the
// stream (g counted over the whole chain) sits in ring stage g % R_STAGES, its n-th use waiting
// for parity n & 1 on `full` and its refill for the consumers' arrival on `empty`. A row's sum
// is gemv's, so ring gives plain's bits.
__global__ void __launch_bounds__(R_THREADS, 1) ring_chain(const Op* ops, int n_ops, unsigned* counters, int barrier) {
  extern __shared__ __align__(16) unsigned char smem[];
  const unsigned base = smem_addr(smem);
  const unsigned full0 = base + R_RING + P_X_BYTES, empty0 = full0 + 8 * R_STAGES;
  uint4* xs = reinterpret_cast<uint4*>(smem + R_RING);
  if (threadIdx.x == 0) {
    for (int st = 0; st < R_STAGES; ++st) {
      tma::mbar_init(full0 + 8 * st, 1);
      tma::mbar_init(empty0 + 8 * st, 1);
    }
    tma::mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x >= R_CONSUMERS) {
    if (threadIdx.x == R_CONSUMERS) {
      long long g = 0;
      for (int i = 0; i < n_ops; ++i) {
        const Op op = ops[i];
        int first, count;
        rows_of_cta(op.n, gridDim.x, blockIdx.x, first, count);
        const char* src = reinterpret_cast<const char*>(op.w + (size_t)first * op.k);
        const int bytes = count * op.k * 2;
        for (int off = 0; off < bytes; off += R_STAGE, ++g) {
          const int st = (int)(g % R_STAGES);
          if (g >= R_STAGES) tma::mbar_wait(empty0 + 8 * st, (unsigned)((g / R_STAGES - 1) & 1));
          const unsigned len = (unsigned)min(R_STAGE, bytes - off);
          tma::mbar_arrive_expect_tx(full0 + 8 * st, len);
          bulk_copy(base + st * R_STAGE, src + off, len, full0 + 8 * st);
        }
      }
    }
    return;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  long long g = 0;
  for (int i = 0; i < n_ops; ++i) {
    const Op op = ops[i];
    int first, count;
    rows_of_cta(op.n, gridDim.x, blockIdx.x, first, count);
    const int bytes = count * op.k * 2, stages = (bytes + R_STAGE - 1) / R_STAGE;
    if (barrier && i > 0) {
      if (threadIdx.x == 0) wait_count(counters + i - 1, gridDim.x);
      asm volatile("bar.sync 1, %0;" ::"n"(R_CONSUMERS) : "memory");
    }
    copy_x(xs, op, R_CONSUMERS);
    for (int j = 0; j < stages; ++j) {
      tma::mbar_wait(full0 + 8 * ((g + j) % R_STAGES), (unsigned)(((g + j) / R_STAGES) & 1));
    }
    asm volatile("bar.sync 1, %0;" ::"n"(R_CONSUMERS) : "memory");
    const unsigned start = (unsigned)((g % R_STAGES) * R_STAGE);
    for (int r = warp; r < count; r += P_WARPS) {
      float acc = 0.0f;
      for (int c = 0; c < op.k / 256; ++c) {
        // A slice is at most the ring, so one subtraction wraps it (a modulo costs ~20 instructions).
        unsigned at = start + (unsigned)(r * op.k * 2 + (c * 32 + lane) * 16);
        at = at >= (unsigned)R_RING ? at - R_RING : at;
        acc = dot8(*reinterpret_cast<const uint4*>(smem + at), xs[c * 32 + lane], acc);
      }
      const float total = finish_row(acc);
      if (lane == 0) op.y[first + r] = __float2bfloat16(total);
    }
    asm volatile("bar.sync 1, %0;" ::"n"(R_CONSUMERS) : "memory");
    if (threadIdx.x == 0) {
      for (int j = 0; j < stages; ++j) tma::mbar_arrive(empty0 + 8 * ((g + j) % R_STAGES));
      if (barrier) release_count(counters + i);
    }
    g += stages;
  }
}

static int rows_of(const Op& o) { return WARPS * (o.k == 1024 ? 4 : 1); }
static unsigned ctas_of(const Op& o) { return o.n / rows_of(o); }

static void launch(const Op& o, int mode, Handoff h, cudaStream_t s) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(ctas_of(o));
  cfg.blockDim = dim3(32 * WARPS);
  cfg.stream = s;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = mode == PLAIN ? 0 : 1;
  if (o.k == 1024)
    CK(cudaLaunchKernelEx(&cfg, gemv<1024, 4>, o.w, o.x, o.y, mode, h));
  else
    CK(cudaLaunchKernelEx(&cfg, gemv<3072, 1>, o.w, o.x, o.y, mode, h));
}

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  const int shapes[4][2] = {{1024, 2048}, {1024, 1024}, {1024, 6144}, {3072, 1024}};
  size_t layer_elems = 0;
  for (auto& s : shapes) layer_elems += (size_t)s[0] * s[1];
  __nv_bfloat16 *w, *h_in, *qkv, *a, *gu, *h0, *h1;
  CK(cudaMalloc(&w, layer_elems * LAYERS * 2));
  const std::vector<unsigned short> host = random_bf16(layer_elems * LAYERS, 12345);
  CK(cudaMemcpy(w, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&h_in, 1024 * 2));
  CK(cudaMemcpy(h_in, host.data(), 1024 * 2, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&qkv, 2048 * 2));
  CK(cudaMalloc(&a, 1024 * 2));
  CK(cudaMalloc(&gu, 6144 * 2));
  CK(cudaMalloc(&h0, 1024 * 2));
  CK(cudaMalloc(&h1, 1024 * 2));
  unsigned *counters, *chunks;
  CK(cudaMalloc(&counters, OPS * sizeof(unsigned)));
  CK(cudaMalloc(&chunks, OPS * MAX_CHUNKS * sizeof(unsigned)));

  std::vector<Op> ops;
  const __nv_bfloat16* wp = w;
  for (int l = 0; l < LAYERS; ++l) {
    const __nv_bfloat16* in = l == 0 ? h_in : (l % 2 ? h0 : h1);
    __nv_bfloat16* out = l % 2 ? h1 : h0;
    const __nv_bfloat16* xs[4] = {in, qkv, a, gu};
    __nv_bfloat16* ys[4] = {qkv, a, gu, out};
    for (int i = 0; i < 4; ++i) {
      ops.push_back(Op{shapes[i][0], shapes[i][1], xs[i], ys[i], wp});
      wp += (size_t)shapes[i][0] * shapes[i][1];
    }
  }
  __nv_bfloat16* final_out = ops.back().y;

  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const char* names[MODES] = {"plain", "wait",    "early", "counter", "counter1", "chunks",
                              "free",  "persist", "pfree", "ring",    "rfree"};
  Op* dev_ops;
  CK(cudaMalloc(&dev_ops, ops.size() * sizeof(Op)));
  CK(cudaMemcpy(dev_ops, ops.data(), ops.size() * sizeof(Op), cudaMemcpyHostToDevice));
  const int p_smem = 2 * P_W_BYTES + P_X_BYTES;
  for (const Op& o : ops) {
    const int most_rows = (o.n + prop.multiProcessorCount - 1) / prop.multiProcessorCount;
    if ((size_t)most_rows * o.k * 2 > (size_t)P_W_BYTES || o.k * 2 > P_X_BYTES) {
      printf("an op of %d x %d takes more than a W buffer on %d SMs: the persistent modes need more SMs\n", o.n, o.k,
             prop.multiProcessorCount);
      return 1;
    }
  }
  CK(cudaFuncSetAttribute(chain, cudaFuncAttributeMaxDynamicSharedMemorySize, p_smem));
  const int r_smem = R_RING + P_X_BYTES + 16 * R_STAGES;
  CK(cudaFuncSetAttribute(ring_chain, cudaFuncAttributeMaxDynamicSharedMemorySize, r_smem));
  std::vector<unsigned short> reference(1024), result(1024);
  for (int mode = 0; mode < MODES; ++mode) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CK(cudaMemsetAsync(counters, 0, OPS * sizeof(unsigned), s));
    CK(cudaMemsetAsync(chunks, 0, OPS * MAX_CHUNKS * sizeof(unsigned), s));
    if (mode == PERSIST || mode == PFREE) {
      // A CTA an SM, every one resident (nothing else runs), so the grid barrier cannot wait on
      // a CTA that has not started.
      chain<<<prop.multiProcessorCount, P_THREADS, p_smem, s>>>(dev_ops, OPS, counters, mode == PERSIST);
      CK(cudaGetLastError());
    } else if (mode == RING || mode == RFREE) {
      ring_chain<<<prop.multiProcessorCount, R_THREADS, r_smem, s>>>(dev_ops, OPS, counters, mode == RING);
      CK(cudaGetLastError());
    } else {
      for (int i = 0; i < OPS; ++i) {
        const Handoff h = {counters, chunks, i, i > 0 ? rows_of(ops[i - 1]) : 0, i > 0 ? ops[i - 1].n : 0};
        launch(ops[i], mode, h, s);
      }
    }
    CK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t ge;
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaMemsetAsync(qkv, 0, 2048 * 2, s));
    CK(cudaMemsetAsync(a, 0, 1024 * 2, s));
    CK(cudaMemsetAsync(gu, 0, 6144 * 2, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(result.data(), final_out, 2048, cudaMemcpyDeviceToHost));
    if (mode == PLAIN) reference = result;
    const bool same = result == reference;
    const Timing t = time_graph(ge, s);
    const double med = t.median_us;
    printf("%-8s median %8.1f us a step (min %8.1f), %5.2f us an op, %6.2f TB/s of W; output %s\n",
           names[mode], med, t.min_us, med / OPS, layer_elems * LAYERS * 2 / med / 1e6,
           mode == FREE || mode == PFREE || mode == RFREE ? "not compared (no dependency)" : same ? "the bits of plain's" : "DIFFERS from plain's");
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
  }
  return 0;
}
