#line 1 "wgmma.cuh"
// wgmma.cuh: the Hopper warpgroup-MMA instructions the WGMMA prefill and GEMM use, as inline PTX (sm_90a
// only), with the shared-memory matrix descriptor and the fences wgmma needs.
//
// Descriptor (PTX ISA, "Matrix Descriptor Format"): bits 0-13 start address >> 4, 16-29 leading
// byte offset >> 4, 32-45 stride byte offset >> 4, 62-63 swizzle (1 = 128-byte). Every operand
// tile here uses the 128-byte swizzle: rows of 64 bf16 (128 bytes), 8-row atoms of 1024 bytes,
// the 16-byte chunk c of row r stored at chunk c ^ (r % 8), atoms 1024-byte aligned.
//   K-major (Q as A, K as B of QK): rows are M/N, the 64 columns of a row are K; the stride
//   byte offset is 1024 (atom to atom along M/N), the leading byte offset is unused (a k16 step
//   stays inside a row: its start advances 32 bytes per step, the swizzle applying on address
//   bits).
//   MN-major (V as B of PV, transposed): rows are K (keys), the 64 columns are N (head dims);
//   the stride byte offset is 1024 (8 keys to the next 8), the leading byte offset the distance
//   between 64-column blocks of N.
// Fences: shared memory written by ordinary stores or cp.async is made visible to wgmma's async
// proxy by fence.proxy.async.shared::cta (then a barrier); registers written by ordinary code
// (accumulators, the register A operand) need wgmma.fence before the first wgmma reading them.

// SWIZZLE: the layout field, 1 for the 128-byte swizzle above, 2 for the 64-byte one (rows of 32
// bf16, 8-row atoms of 512 bytes, chunk c of row r at c ^ ((r / 2) % 4): gemm_skinny_classes_wg.cu).
__device__ __forceinline__ unsigned long long wgmma_desc(unsigned smem_addr, unsigned lbo, unsigned sbo,
                                                         unsigned swizzle = 1) {
  return (unsigned long long)((smem_addr & 0x3FFFFu) >> 4) | ((unsigned long long)((lbo & 0x3FFFFu) >> 4) << 16) |
         ((unsigned long long)((sbo & 0x3FFFFu) >> 4) << 32) | ((unsigned long long)swizzle << 62);
}

// A descriptor split so that a loop can advance its address with one add: the fields other than
// the address are constants of the call site (the high word, and the leading byte offset in the
// low one), and at(bytes) adds bytes >> 4 to the address field, which cannot carry out of its 14
// bits while the operand stays under the 256 KB that the field spans (every shared memory of
// sm_90). wgmma_desc(addr + bytes, lbo, sbo) == WgmmaDesc(addr, lbo, sbo).at(bytes) for 16-byte
// multiples; the compiler otherwise recomputes every field at every wgmma. at() adds to the whole
// 64-bit word, which ptxas emits as one 64-bit uniform add into the wgmma's operand registers;
// adding to the low word alone cost two more moves a descriptor (the high word moved in again at
// every wgmma). The words stay apart so that advanced() is one 32-bit add: kept as one 64-bit word,
// ptxas made it an add with carry in the prefill's key loop and moved its registers (SASS of NVRTC
// 13, session 51).
struct WgmmaDesc {
  unsigned lo, hi;
  __device__ __forceinline__ WgmmaDesc(unsigned smem_addr, unsigned lbo, unsigned sbo, unsigned swizzle = 1) {
    const unsigned long long d = wgmma_desc(smem_addr, lbo, sbo, swizzle);
    lo = (unsigned)d;
    hi = (unsigned)(d >> 32);
  }
  __device__ __forceinline__ unsigned long long at(unsigned bytes) const {
    return (((unsigned long long)hi << 32) | lo) + (bytes >> 4);
  }
  __device__ __forceinline__ WgmmaDesc advanced(unsigned bytes) const { return WgmmaDesc(lo + (bytes >> 4), hi); }

 private:
  __device__ __forceinline__ WgmmaDesc(unsigned lo_, unsigned hi_) : lo(lo_), hi(hi_) {}
};

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Barrier of warpgroup wg's 128 threads alone: named barrier 1 + wg (0 is __syncthreads').
__device__ __forceinline__ void warpgroup_sync(int wg) { asm volatile("bar.sync %0, 128;" ::"r"(1 + wg) : "memory"); }

// d (+)= A(smem, K-major) * B(smem, K-major), m64nNk16, bf16 in, f32 accumulate; accumulate = 0
// overwrites d.
__device__ __forceinline__ void wgmma_ss_m64n64k16(float (&d)[32], unsigned long long desc_a, unsigned long long desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// d (+)= A(smem, K-major) * B(smem, K-major), m64n128k16, bf16 in, f32 accumulate; accumulate = 0
// overwrites d (the WGMMA GEMM's mainloop).
__device__ __forceinline__ void wgmma_ss_m64n128k16(float (&d)[64], unsigned long long desc_a, unsigned long long desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// d += A(registers: 4 bf16x2 words per thread, the m16n8k16 A layout per warp) * B(smem), m64nNk16;
// B MN-major (transposed) with TRANS_B = 1 (V of the prefill's PV), K-major with 0 (x of the
// skinny GEMM's warpgroup form).
template <int TRANS_B>
__device__ __forceinline__ void wgmma_rs_m64n64k16(float (&d)[32], const unsigned (&a)[4], unsigned long long desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1), "n"(TRANS_B));
}

template <int TRANS_B>
__device__ __forceinline__ void wgmma_rs_m64n128k16(float (&d)[64], const unsigned (&a)[4], unsigned long long desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1), "n"(TRANS_B));
}
