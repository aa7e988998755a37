#line 2 "hp1_split_finish.cuh"
// hp1_split_finish.cuh: the end of HP1's split-K attention (hp1_attention.cuh, whose header has
// the algorithm): the last CTA of a row's chunks adds their partial outputs in chunk order and
// rounds the sums to the output. Its additions are the decode kernel's, which is what keeps the
// two paths' bits equal; gemm_skinny_staged.cuh's folded o_proj restates them. Needs
// hp1_qk_pv.cuh (f32_to_bf16) before it; gpu::kernels concatenates them.

namespace hp1 {

// V consecutive floats as one vector load.
template <int V>
struct FloatVec;
template <>
struct FloatVec<1> {
  using T = float;
};
template <>
struct FloatVec<2> {
  using T = float2;
};
template <>
struct FloatVec<4> {
  using T = float4;
};

// Split-K's last CTA of a (row, HP heads): adds the row's partials of every chunk in chunk order
// from 0 (exactly the decode kernel's additions) and writes out. The partials of other CTAs are
// read through L2 (__ldcg), after the acquire that pairs with their releases. A thread owns V
// consecutive elements of the HP heads' outputs and issues the vector loads of up to PU chunks
// before its first add, so a row of up to PU chunks costs one L2 round trip here, not one per
// PU / V.
template <int D, int HP, int THREADS>
__device__ __forceinline__ void split_finish(int tid, const float* partial, unsigned short* __restrict__ out,
                                             long long row, int h0, int num_heads, int max_chunks, int num_chunks) {
  constexpr int V = HP * D >= 4 * THREADS ? 4 : (HP * D >= 2 * THREADS ? 2 : 1);  // elements a thread owns
  constexpr int PU = 32 / V;  // chunks whose loads are issued before their first add
  using Vec = typename FloatVec<V>::T;
  for (int e = tid * V; e < HP * D; e += THREADS * V) {
    const Vec* src = reinterpret_cast<const Vec*>(partial + ((row * num_heads + h0 + e / D) * max_chunks) * D + e % D);
    float acc[V];
#pragma unroll
    for (int i = 0; i < V; ++i) acc[i] = 0.0f;
    for (int c0 = 0; c0 < num_chunks; c0 += PU) {
      Vec x[PU];
#pragma unroll
      for (int u = 0; u < PU; ++u)
        if (c0 + u < num_chunks) x[u] = __ldcg(src + (long long)(c0 + u) * (D / V));
#pragma unroll
      for (int u = 0; u < PU; ++u) {
        if (c0 + u < num_chunks) {
          const float* xs = reinterpret_cast<const float*>(&x[u]);
#pragma unroll
          for (int i = 0; i < V; ++i) acc[i] = __fadd_rn(acc[i], xs[i]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < V; ++i) out[(row * num_heads + h0) * D + e + i] = f32_to_bf16(acc[i]);
  }
}

}  // namespace hp1
