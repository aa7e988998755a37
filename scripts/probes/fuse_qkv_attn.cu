// Probe (issue 15): what QKV and the attention of batch 1 in one kernel would save (RESULTS,
// session 55's local entry). A B1 layer of asynct-0.5b's shapes (hidden 1,024; 8 q heads and 4
// KV heads of 128; gate/up 6,144; down 3,072 -> 1,024; 1,008 keys, the last one the new token's),
// 35 layers in one CUDA graph with programmatic launch (each kernel waits, then triggers: the
// engine's order), in two forms that compute the same sums in the same order:
//   apart    QKV (its k and v rows into the cache), the attention (a CTA for each KV head and
//            126-key chunk, its partials out), o_proj (which adds the chunks' partials first,
//            as the engine's fold), gate/up, down: five kernels a layer
//   fused    one kernel for QKV and the attention: a cluster of 8 CTAs for each KV head, a CTA
//            for each chunk; before the wait each CTA copies into shared memory its 64 of the
//            head's 512 QKV rows of W and its chunk's K and V (constant), after it computes its
//            rows, hands them to the cluster's CTAs through distributed shared memory, meets
//            them at a cluster barrier and runs its chunk: four kernels a layer
// The attention is simplified (a ReLU gate of the scaled products, no FIR and no clamp), the
// same in both. Prints each form's median step, its time a layer, and whether the two forms'
// outputs have the same bits.
// Build and run on the device: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/fuse
// scripts/probes/fuse_qkv_attn.cu && /tmp/fuse
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "probe.cuh"


constexpr int LAYERS = 35, H = 1024, D = 128, QH = 8, KVH = 4, QKV = 2048, GU = 6144, DOWN_K = 3072;
constexpr int KEYS = 1008, CHUNK = 126, CHUNKS = KEYS / CHUNK, NEW = KEYS - 1;
constexpr int HEAD_ROWS = 512;                        // a KV head's QKV rows: its 2 q heads, k, v
constexpr int CTA_ROWS = HEAD_ROWS / CHUNKS;          // 64 rows a fused CTA
constexpr int F_THREADS = 256;
constexpr int F_W_BYTES = CTA_ROWS * H * 2;            // 128 KB
constexpr int F_KV_BYTES = 2 * CHUNK * D * 2;          // 63 KB
constexpr int F_SMEM = F_W_BYTES + F_KV_BYTES + H * 2 + HEAD_ROWS * 2 + 2 * CHUNK * 4 + 2 * D * 4;
constexpr int A_SMEM = F_KV_BYTES + 2 * CHUNK * 4 + 2 * D * 4;
static_assert(CHUNKS == 8, "a cluster of 8");

// A 16-bit store into the shared memory of the cluster's CTA of rank `rank`.
__device__ __forceinline__ void st_cluster_b16(const void* local, unsigned rank, unsigned short v) {
  asm volatile("st.shared::cluster.b16 [%0], %1;" ::"r"(cluster::remote(smem_addr(local), rank)), "h"(v) : "memory");
}


// A row's sum: lane l takes 16-byte chunks l, l + 32, ... of the row (w and x in any memory),
// then the butterfly. Every form sums a row this way.
template <int K>
__device__ __forceinline__ float row_sum(const uint4* w, const uint4* x, int lane) {
  float acc = 0.0f;
#pragma unroll
  for (int c = 0; c < K / 256; ++c) acc = dot8(w[c * 32 + lane], x[c * 32 + lane], acc);
  return finish_row(acc);
}

// A warp's RW rows of W in registers, loaded before the wait as the engine's kernels do (W is
// constant), then summed as row_sum sums them.
template <int K, int RW>
struct WarpRows {
  uint4 w[RW][K / 256];
  __device__ __forceinline__ WarpRows(const __nv_bfloat16* rows, int lane) {
#pragma unroll
    for (int r = 0; r < RW; ++r)
#pragma unroll
      for (int c = 0; c < K / 256; ++c) w[r][c] = __ldg(reinterpret_cast<const uint4*>(rows + (size_t)r * K) + c * 32 + lane);
  }
  __device__ __forceinline__ float sum(int r, const uint4* x, int lane) const {
    float acc = 0.0f;
#pragma unroll
    for (int c = 0; c < K / 256; ++c) acc = dot8(w[r][c], x[c * 32 + lane], acc);
    return finish_row(acc);
  }
};

struct Layer {
  const __nv_bfloat16 *w_qkv, *w_o, *w_gu, *w_down;
  __nv_bfloat16 *k_cache, *v_cache;  // [KVH][KEYS][D]
};
struct Bufs {
  const __nv_bfloat16* h_in;
  __nv_bfloat16 *h, *q, *a, *gu;
  float* part;  // [KVH][CHUNKS][2][D]
};

// Where QKV row r lands: q rows to q, k and v rows to the cache at the new key.
__device__ __forceinline__ void put_qkv(const Layer& l, const Bufs& b, int r, __nv_bfloat16 v) {
  if (r < QH * D) b.q[r] = v;
  else if (r < QH * D + KVH * D) l.k_cache[((size_t)((r - QH * D) / D) * KEYS + NEW) * D + r % D] = v;
  else l.v_cache[((size_t)((r - QH * D - KVH * D) / D) * KEYS + NEW) * D + r % D] = v;
}

// The chunk's attention for KV head j: q of heads 2j, 2j + 1, the chunk's K and V rows (kp, vp:
// [CHUNK][D], any memory). Scores: warp w takes keys w, w + warps, ...; lane l dims 4l .. 4l + 3.
// PV: output (head, d) sums its keys in order. Partials to b.part.
__device__ __forceinline__ void chunk_attention(const __nv_bfloat16* q, const __nv_bfloat16* kp, const __nv_bfloat16* vp,
                                                float* gate, float* out, int threads) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = threads / 32;
  for (int t = warp; t < CHUNK; t += warps) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float s = 0.0f;
#pragma unroll
      for (int e = 0; e < 4; ++e)
        s = fmaf(__bfloat162float(q[hh * D + 4 * lane + e]), __bfloat162float(kp[t * D + 4 * lane + e]), s);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (lane == 0) gate[hh * CHUNK + t] = fmaxf(s * 0.08838834764f, 0.0f);
    }
  }
  __syncthreads();
  for (int p = threadIdx.x; p < 2 * D; p += threads) {
    const int hh = p / D, d = p % D;
    float acc = 0.0f;
    for (int t = 0; t < CHUNK; ++t) acc = fmaf(gate[hh * CHUNK + t], __bfloat162float(vp[t * D + d]), acc);
    out[p] = acc;
  }
}

// y = W x for a GEMV of K -> N rows, RW rows a warp, 4 warps a CTA, W loaded before the wait.
template <int K, int RW>
__global__ void __launch_bounds__(128) gemv(const __nv_bfloat16* w, const __nv_bfloat16* x, __nv_bfloat16* y) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * 4 + warp) * RW;
  const WarpRows<K, RW> rows(w + (size_t)row0 * K, lane);
  grid_wait();
  grid_trigger();
#pragma unroll
  for (int r = 0; r < RW; ++r) {
    const float v = rows.sum(r, reinterpret_cast<const uint4*>(x), lane);
    if (lane == 0) y[row0 + r] = __float2bfloat16(v);
  }
}

__global__ void __launch_bounds__(128) qkv_apart(Layer l, Bufs b, const __nv_bfloat16* x) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * 4 + warp) * 4;
  const WarpRows<H, 4> rows(l.w_qkv + (size_t)row0 * H, lane);
  grid_wait();
  grid_trigger();
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const float v = rows.sum(r, reinterpret_cast<const uint4*>(x), lane);
    if (lane == 0) put_qkv(l, b, row0 + r, __float2bfloat16(v));
  }
}

// Grid KVH * CHUNKS, 128 threads. Its chunk's K and V are copied into shared memory before the
// wait, all but the new key's row (which QKV writes), so that the two forms differ only in the
// hand-off between QKV and the attention.
__global__ void __launch_bounds__(128) attention_apart(Layer l, Bufs b) {
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16* ks = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* vs = ks + CHUNK * D;
  float* gate = reinterpret_cast<float*>(smem + F_KV_BYTES);
  float* out = gate + 2 * CHUNK;
  const int j = blockIdx.x / CHUNKS, c = blockIdx.x % CHUNKS;
  const size_t kv0 = ((size_t)j * KEYS + c * CHUNK) * D;
  for (int i = threadIdx.x; i < CHUNK * D / 8; i += 128) {
    cp_async16(smem_addr(reinterpret_cast<uint4*>(ks) + i), reinterpret_cast<const uint4*>(l.k_cache + kv0) + i);
    cp_async16(smem_addr(reinterpret_cast<uint4*>(vs) + i), reinterpret_cast<const uint4*>(l.v_cache + kv0) + i);
  }
  grid_wait();
  grid_trigger();
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  if (c == CHUNKS - 1)
    for (int d = threadIdx.x; d < D; d += 128) {
      ks[(CHUNK - 1) * D + d] = l.k_cache[((size_t)j * KEYS + NEW) * D + d];
      vs[(CHUNK - 1) * D + d] = l.v_cache[((size_t)j * KEYS + NEW) * D + d];
    }
  __syncthreads();
  chunk_attention(b.q + 2 * j * D, ks, vs, gate, out, 128);
  for (int p = threadIdx.x; p < 2 * D; p += 128) b.part[((size_t)(j * CHUNKS + c) * 2) * D + p] = out[p];
}

// o_proj with the fold: each CTA adds the chunks' partials of every head in chunk order, rounds
// them to bf16, then its rows. 64 CTAs of 4 warps, 4 rows a warp.
__global__ void __launch_bounds__(128) o_fold(Layer l, Bufs b) {
  __shared__ __align__(16) __nv_bfloat16 x[H];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * 4 + warp) * 4;
  const WarpRows<H, 4> rows(l.w_o + (size_t)row0 * H, lane);
  grid_wait();
  grid_trigger();
  for (int i = threadIdx.x; i < H; i += 128) {
    const int head = i / D, d = i % D, j = head / 2, hh = head % 2;
    float s = 0.0f;
    for (int c = 0; c < CHUNKS; ++c) s += b.part[((size_t)(j * CHUNKS + c) * 2 + hh) * D + d];
    x[i] = __float2bfloat16(s);
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const float v = rows.sum(r, reinterpret_cast<const uint4*>(x), lane);
    if (lane == 0) b.a[row0 + r] = __float2bfloat16(v);
  }
}

// QKV and the attention: a cluster of CHUNKS CTAs for each KV head (grid KVH * CHUNKS).
__global__ void __launch_bounds__(F_THREADS, 1) qkv_attention_fused(Layer l, Bufs b, const __nv_bfloat16* x_in) {
  extern __shared__ __align__(16) unsigned char smem[];
  uint4* ws = reinterpret_cast<uint4*>(smem);
  __nv_bfloat16* ks = reinterpret_cast<__nv_bfloat16*>(smem + F_W_BYTES);
  __nv_bfloat16* vs = ks + CHUNK * D;
  uint4* xs = reinterpret_cast<uint4*>(smem + F_W_BYTES + F_KV_BYTES);
  __nv_bfloat16* head = reinterpret_cast<__nv_bfloat16*>(smem + F_W_BYTES + F_KV_BYTES + H * 2);  // [512]
  float* gate = reinterpret_cast<float*>(head + HEAD_ROWS);
  float* out = gate + 2 * CHUNK;
  const int j = blockIdx.x / CHUNKS, c = (int)cluster::rank();
  // The head's rows in QKV order: q head 2j (128), q head 2j + 1, k head j, v head j.
  auto qkv_row = [&](int i) {
    return i < 2 * D ? 2 * j * D + i : i < 3 * D ? QH * D + j * D + (i - 2 * D) : QH * D + KVH * D + j * D + (i - 3 * D);
  };
  // Constant data before the wait, by cp.async (no register waits on it): this CTA's 64 rows of
  // W and its chunk's K and V.
  for (int i = threadIdx.x; i < F_W_BYTES / 16; i += F_THREADS) {
    const int r = i / (H / 8), e = i % (H / 8);
    cp_async16(smem_addr(ws + i), reinterpret_cast<const uint4*>(l.w_qkv + (size_t)qkv_row(c * CTA_ROWS + r) * H) + e);
  }
  const size_t kv0 = ((size_t)j * KEYS + c * CHUNK) * D;
  for (int i = threadIdx.x; i < CHUNK * D / 8; i += F_THREADS) {
    cp_async16(smem_addr(reinterpret_cast<uint4*>(ks) + i), reinterpret_cast<const uint4*>(l.k_cache + kv0) + i);
    cp_async16(smem_addr(reinterpret_cast<uint4*>(vs) + i), reinterpret_cast<const uint4*>(l.v_cache + kv0) + i);
  }
  // Every CTA of the cluster has started before any writes into another's shared memory.
  cluster::sync();
  grid_wait();
  grid_trigger();
  for (int i = threadIdx.x; i < H / 8; i += F_THREADS) xs[i] = __ldcg(reinterpret_cast<const uint4*>(x_in) + i);
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < CTA_ROWS; r += F_THREADS / 32) {
    const __nv_bfloat16 v = __float2bfloat16(row_sum<H>(ws + r * (H / 8), xs, lane));
    const int i = c * CTA_ROWS + r;
    if (lane < CHUNKS) st_cluster_b16(head + i, lane, __bfloat16_as_ushort(v));
    if (lane == CHUNKS) put_qkv(l, b, qkv_row(i), v);
  }
  cluster::sync();
  // The new key's k and v (the last chunk's last row) are this step's, not the cache's.
  if (c == CHUNKS - 1)
    for (int d = threadIdx.x; d < D; d += F_THREADS) {
      ks[(CHUNK - 1) * D + d] = head[2 * D + d];
      vs[(CHUNK - 1) * D + d] = head[3 * D + d];
    }
  __syncthreads();
  chunk_attention(head, ks, vs, gate, out, F_THREADS);
  for (int p = threadIdx.x; p < 2 * D; p += F_THREADS) b.part[((size_t)(j * CHUNKS + c) * 2) * D + p] = out[p];
}

// Every launch of the probe is programmatic (PDL), as the engine's are.
template <class... P, class... A>
static void launch(void (*k)(P...), unsigned grid, unsigned threads, unsigned smem, int cluster, cudaStream_t s, A... args) {
  launch_ex(k, grid, threads, smem, cluster, true, s, args...);
}

static __nv_bfloat16* upload(const std::vector<unsigned short>& v) {
  __nv_bfloat16* p;
  CK(cudaMalloc(&p, v.size() * 2));
  CK(cudaMemcpy(p, v.data(), v.size() * 2, cudaMemcpyHostToDevice));
  return p;
}

int main() {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::vector<Layer> layers(LAYERS);
  for (int i = 0; i < LAYERS; ++i) {
    layers[i] = Layer{upload(random_bf16((size_t)QKV * H, 10 * i + 1)), upload(random_bf16((size_t)H * H, 10 * i + 2)),
                      upload(random_bf16((size_t)GU * H, 10 * i + 3)), upload(random_bf16((size_t)H * DOWN_K, 10 * i + 4)),
                      upload(random_bf16((size_t)KVH * KEYS * D, 10 * i + 5)),
                      upload(random_bf16((size_t)KVH * KEYS * D, 10 * i + 6))};
  }
  Bufs b;
  b.h_in = upload(random_bf16(H, 7));
  CK(cudaMalloc(&b.h, H * 2));
  CK(cudaMalloc(&b.q, QH * D * 2));
  CK(cudaMalloc(&b.a, H * 2));
  CK(cudaMalloc(&b.gu, GU * 2));
  CK(cudaMalloc(&b.part, KVH * CHUNKS * 2 * D * 4));
  CK(cudaFuncSetAttribute(qkv_attention_fused, cudaFuncAttributeMaxDynamicSharedMemorySize, F_SMEM));
  CK(cudaFuncSetAttribute(attention_apart, cudaFuncAttributeMaxDynamicSharedMemorySize, A_SMEM));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const char* names[2] = {"apart", "fused"};
  std::vector<unsigned short> result[2];
  double step_us[2];
  for (int form = 0; form < 2; ++form) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < LAYERS; ++i) {
      const Layer& l = layers[i];
      const __nv_bfloat16* x = i == 0 ? b.h_in : b.h;
      if (form == 0) {
        launch(qkv_apart, QKV / 16, 128, 0, 1, s, l, b, x);
        launch(attention_apart, KVH * CHUNKS, 128, A_SMEM, 1, s, l, b);
      } else {
        launch(qkv_attention_fused, KVH * CHUNKS, F_THREADS, F_SMEM, CHUNKS, s, l, b, x);
      }
      launch(o_fold, H / 16, 128, 0, 1, s, l, b);
      launch(gemv<H, 4>, GU / 16, 128, 0, 1, s, l.w_gu, (const __nv_bfloat16*)b.a, b.gu);
      launch(gemv<DOWN_K, 1>, H / 4, 128, 0, 1, s, l.w_down, (const __nv_bfloat16*)b.gu, b.h);
    }
    CK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t ge;
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    result[form].resize(H);
    CK(cudaMemcpy(result[form].data(), b.h, H * 2, cudaMemcpyDeviceToHost));
    const Timing t = time_graph(ge, s);
    step_us[form] = t.median_us;
    printf("%-6s median %8.1f us a step (min %8.1f), %6.2f us a layer\n", names[form], step_us[form], t.min_us,
           step_us[form] / LAYERS);
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
  }
  printf("fused / apart %.3f; outputs %s\n", step_us[1] / step_us[0],
         result[0] == result[1] ? "the same bits" : "DIFFER");
  return 0;
}
