// Does wgmma (A from registers, B from shared memory) give the same f32 bits as mma.sync
// m16n8k16 when both see the same 16 products in the same fragment slots, step after step?
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <vector>


constexpr int K = 1024, NW = 64, NX = 64, STEPS = K / 32;

__device__ __forceinline__ void mma16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// y[w][x] for 64 W rows (4 warps x 16) and 64 x rows (8 tiles), all steps in order.
__global__ void with_mma(const uint4* w, const uint4* x, float* y) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float acc[8][4] = {};
  for (int s = 0; s < STEPS; ++s) {
    const uint4 lo = w[((16 * warp + g) * K + 32 * s + 8 * t) / 8];
    const uint4 hi = w[((16 * warp + g + 8) * K + 32 * s + 8 * t) / 8];
    const unsigned a0[4] = {lo.x, hi.x, lo.y, hi.y};
    const unsigned a1[4] = {lo.z, hi.z, lo.w, hi.w};
    for (int j = 0; j < 8; ++j) {
      const uint4 xv = x[((8 * j + g) * K + 32 * s + 8 * t) / 8];
      mma16816(acc[j], a0, xv.x, xv.y);
      mma16816(acc[j], a1, xv.z, xv.w);
    }
  }
  for (int j = 0; j < 8; ++j) {
    const int wr = 16 * warp + g, xr = 8 * j + 2 * t;
    y[wr * NX + xr] = acc[j][0];
    y[wr * NX + xr + 1] = acc[j][1];
    y[(wr + 8) * NX + xr] = acc[j][2];
    y[(wr + 8) * NX + xr + 1] = acc[j][3];
  }
}

__device__ __forceinline__ unsigned long long desc(unsigned addr) {
  return (unsigned long long)((addr & 0x3FFFFu) >> 4) | ((unsigned long long)(16 >> 4) << 16) |
         ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_rs(float (&d)[32], const unsigned (&a)[4], unsigned long long db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

// Same sums by wgmma: x in shared memory, K-major, 128-byte swizzle, one 64-column tile per
// two steps, column 16 q + j of tile holding the k that mma slot j of mma q sees.
__global__ void with_wgmma(const uint4* w, const unsigned short* x, float* y, int swap) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = (unsigned char*)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // tile T (64 k) = 64 rows x 128 bytes = 8 KB.
  for (int e = threadIdx.x; e < NX * K; e += blockDim.x) {
    const int r = e / K, c = e % K;  // logical column c within K
    const int tile = c / 64, cc = c % 64, q = cc / 16, j = cc % 16;
    const int i = q & 1, step = 2 * tile + (q >> 1);
    const int jj = j & 7, tt = jj >> 1, ee = jj & 1;
    const int kk = 32 * step + 8 * tt + ee + ((j >= 8) != (swap != 0) ? 2 : 0) + 4 * i;
    const int chunk = (cc / 8) ^ (r % 8);
    unsigned short* dst = (unsigned short*)(smem + tile * 8192 + r * 128 + chunk * 16) + (cc % 8);
    *dst = x[r * K + kk];
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  float d[32];
  for (int i = 0; i < 32; ++i) d[i] = 0.0f;
  const unsigned base = (unsigned)__cvta_generic_to_shared(smem);
  for (int s = 0; s < STEPS; ++s) {
    const uint4 lo = w[((16 * warp + g) * K + 32 * s + 8 * t) / 8];
    const uint4 hi = w[((16 * warp + g + 8) * K + 32 * s + 8 * t) / 8];
    unsigned a0[4] = {lo.x, hi.x, lo.y, hi.y};
    unsigned a1[4] = {lo.z, hi.z, lo.w, hi.w};
    if (swap) {
      a0[0] = lo.y; a0[1] = hi.y; a0[2] = lo.x; a0[3] = hi.x;
      a1[0] = lo.w; a1[1] = hi.w; a1[2] = lo.z; a1[3] = hi.z;
    }
    const unsigned tile = base + (s / 2) * 8192 + (s % 2) * 64;
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    wgmma_rs(d, a0, desc(tile));
    wgmma_rs(d, a1, desc(tile + 32));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  }
  for (int j = 0; j < 8; ++j) {
    const int wr = 16 * warp + g, xr = 8 * j + 2 * t;
    y[wr * NX + xr] = d[4 * j];
    y[wr * NX + xr + 1] = d[4 * j + 1];
    y[(wr + 8) * NX + xr] = d[4 * j + 2];
    y[(wr + 8) * NX + xr + 1] = d[4 * j + 3];
  }
}

static unsigned short rnd_bf16(int mode) {
  float f;
  if (mode == 0) {
    f = (rand() / (float)RAND_MAX - 0.5f) * 2.0f;
  } else {
    const int e = rand() % 40 - 20;
    f = ldexpf(1.0f + rand() / (float)RAND_MAX, e) * (rand() & 1 ? -1.0f : 1.0f);
  }
  unsigned u;
  memcpy(&u, &f, 4);
  return (unsigned short)(u >> 16);
}

int main() {
  cudaFuncSetAttribute(with_wgmma, cudaFuncAttributeMaxDynamicSharedMemorySize, 140 * 1024);
  for (int mode = 0; mode < 2; ++mode)
    for (int trial = 0; trial < 12; ++trial) {
      std::vector<unsigned short> w(NW * K), x(NX * K);
      for (auto& v : w) v = rnd_bf16(mode);
      for (auto& v : x) v = rnd_bf16(mode);
      unsigned short *dw, *dx;
      float *ya, *yb;
      cudaMalloc(&dw, w.size() * 2);
      cudaMalloc(&dx, x.size() * 2);
      cudaMalloc(&ya, NW * NX * 4);
      cudaMalloc(&yb, NW * NX * 4);
      cudaMemcpy(dw, w.data(), w.size() * 2, cudaMemcpyHostToDevice);
      cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice);
      cudaMemset(ya, 0xff, NW * NX * 4);
      cudaMemset(yb, 0xff, NW * NX * 4);
      with_mma<<<1, 128>>>((const uint4*)dw, (const uint4*)dx, ya);
      // sigma: a random permutation of k inside each 32-k step that keeps the set of each mma
      // (k % 8 < 4: the first; else the second) and scrambles the slots.
      int sigma[32];
      {
        int a[16], b[16], na = 0, nb = 0;
        for (int i = 0; i < 32; ++i) (i % 8 < 4 ? a[na++] : b[nb++]) = i;
        for (int i = 15; i > 0; --i) { int j = rand() % (i + 1); int t = a[i]; a[i] = a[j]; a[j] = t; }
        for (int i = 15; i > 0; --i) { int j = rand() % (i + 1); int t = b[i]; b[i] = b[j]; b[j] = t; }
        na = nb = 0;
        for (int i = 0; i < 32; ++i) sigma[i] = i % 8 < 4 ? a[na++] : b[nb++];
      }
      int mix[32];
      for (int i = 0; i < 32; ++i) mix[i] = i;
      for (int i = 31; i > 0; --i) { int j = rand() % (i + 1); int t = mix[i]; mix[i] = mix[j]; mix[j] = t; }
      std::vector<unsigned short> wp(w.size()), xp(x.size()), wm(w.size()), xm(x.size());
      for (int r = 0; r < NW; ++r) for (int c = 0; c < K; ++c) wm[r * K + c] = w[r * K + (c / 32) * 32 + mix[c % 32]];
      for (int r = 0; r < NX; ++r) for (int c = 0; c < K; ++c) xm[r * K + c] = x[r * K + (c / 32) * 32 + mix[c % 32]];
      for (int r = 0; r < NW; ++r) for (int c = 0; c < K; ++c) wp[r * K + c] = w[r * K + (c / 32) * 32 + sigma[c % 32]];
      for (int r = 0; r < NX; ++r) for (int c = 0; c < K; ++c) xp[r * K + c] = x[r * K + (c / 32) * 32 + sigma[c % 32]];
      for (int swap = 0; swap < 4; ++swap) {
      if (swap == 3) {
        cudaMemcpy(dw, wm.data(), w.size() * 2, cudaMemcpyHostToDevice);
        cudaMemcpy(dx, xm.data(), x.size() * 2, cudaMemcpyHostToDevice);
      }
      if (swap == 2) {
        cudaMemcpy(dw, wp.data(), w.size() * 2, cudaMemcpyHostToDevice);
        cudaMemcpy(dx, xp.data(), x.size() * 2, cudaMemcpyHostToDevice);
      }
      with_wgmma<<<1, 128, 140 * 1024>>>((const uint4*)dw, dx, yb, swap == 1);
      cudaError_t err = cudaDeviceSynchronize();
      std::vector<unsigned> a(NW * NX), b(NW * NX);
      cudaMemcpy(a.data(), ya, a.size() * 4, cudaMemcpyDeviceToHost);
      cudaMemcpy(b.data(), yb, b.size() * 4, cudaMemcpyDeviceToHost);
      int diff = 0;
      for (size_t i = 0; i < a.size(); ++i) diff += a[i] != b[i];
      float fa, fb;
      memcpy(&fa, &a[5], 4);
      memcpy(&fb, &b[5], 4);
      printf("swap %d mode %d trial %d: %s, %d of %zu differ (e.g. %.9g vs %.9g)\n", swap, mode, trial, cudaGetErrorString(err), diff,
             a.size(), fa, fb);
      }
      cudaFree(dw);
      cudaFree(dx);
      cudaFree(ya);
      cudaFree(yb);
    }
  return 0;
}
