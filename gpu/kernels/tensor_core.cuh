#line 2 "tensor_core.cuh"
// tensor_core.cuh: thin inline-PTX wrappers for the tensor-core kernels (the prefills and the
// skinny GEMM; sm_80 and newer): the bf16 mma.sync m16n8k16, ldmatrix, cp.async with its
// commit/wait groups, a streaming 16-byte load, 16-byte shared loads and stores, the bf16x2 pack,
// and the dynamic shared memory base. Every inline asm of those kernels lives here and nowhere
// else, so a CPU emulator can replace this one file with C++ versions and run the kernels as
// written.
//
// Shared memory is addressed by 32-bit shared-window addresses (smem_addr), as ldmatrix and
// cp.async take them; a kernel computes them once from dynamic_smem() and adds offsets.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"), for
// lane = 4 * g + t (g = lane >> 2, t = lane & 3):
//   A (16 x 16, row major), four .b32 of two bf16 each (low half = lower column):
//     a[0] = (row g, cols 2t, 2t+1), a[1] = (row g+8, cols 2t, 2t+1),
//     a[2] = (row g, cols 2t+8, 2t+9), a[3] = (row g+8, cols 2t+8, 2t+9)
//   B (16 x 8, "col": B[k][n] read as n-major), two .b32:
//     b[0] = (rows k 2t, 2t+1; col g), b[1] = (rows k 2t+8, 2t+9; col g)
//   C, D (16 x 8 f32): c[0], c[1] = row g, cols 2t, 2t+1; c[2], c[3] = row g+8, same cols.
// ldmatrix .x4: lanes 8m .. 8m+7 give the row addresses (16 bytes each) of 8 x 8 matrix m; result
// register m of lane l holds row l >> 2, elements 2(l & 3), 2(l & 3)+1; with .trans it holds
// elements (2(l & 3), l >> 2) and (2(l & 3)+1, l >> 2) of that matrix instead.

namespace tc {

// The kernel's dynamic shared memory (extern __shared__), aligned for 16-byte vectors and swizzles.
__device__ __forceinline__ unsigned char* dynamic_smem() {
  extern __shared__ __align__(128) unsigned char tc_dynamic_smem[];
  return tc_dynamic_smem;
}

// The shared-window address of a generic pointer into shared memory.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}

// D = A * B + C, bf16 inputs, f32 accumulate, in place on c.
__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8 x 8 bf16 matrices; this lane gives the row address addr (16-byte aligned).
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// The same, each matrix transposed.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// 16 bytes global -> shared, asynchronous (L2 only, .cg); with valid false no global byte is
// read and the 16 shared bytes become zero (src-size 0).
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, bool valid) {
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_size) : "memory");
}

// 16 bytes from global memory that this kernel reads once: through the non-coherent path (the
// data must not change while the kernel runs) and not kept in L1 (L1::no_allocate).
__device__ __forceinline__ uint4 ld_stream_16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// 16 bytes from shared memory at the shared-window address addr (16-byte aligned).
__device__ __forceinline__ uint4 ld_shared_16(unsigned addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr));
  return v;
}

// 16 bytes to shared memory at the shared-window address addr (16-byte aligned).
__device__ __forceinline__ void st_shared_16(unsigned addr, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

// 4 bytes to shared memory at the shared-window address addr (4-byte aligned).
__device__ __forceinline__ void st_shared_4(unsigned addr, unsigned v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

// Closes the group of this thread's cp.async issued since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most N of this thread's committed groups are still in flight (the newest N).
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Two f32 rounded to nearest even bf16, packed: lo in bits 0..15, hi in bits 16..31.
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

}  // namespace tc
