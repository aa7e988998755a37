#line 2 "gemm_skinny.cu"
// gemm_skinny.cu: the skinny GEMM's entry points, one per (MT, ROWS, epilogue); the algorithm,
// the epilogues, the launch shape and the assumptions are in gemm_skinny.cuh's header, which
// gpu::kernels prepends (after pdl.cuh, loads.cuh, ops_common.cuh and tensor_core.cuh). The
// decode megakernel (decode_mega.cu) runs the same body, one W block at a time.

// The epilogues' kernel parameters after (x, w, m, n, k), and the epilogue built from them.
#define GEMM_SKINNY_UCLIP_PARAMS(p)                                                                  \
  const float *p##_alpha, int p##_alpha_stride, const float *p##_weight, int p##_weight_stride, \
      const float *p##_bias, int p##_bias_stride
#define GEMM_SKINNY_UCLIP(p) UClip{p##_alpha, p##_weight, p##_bias, p##_alpha_stride, p##_weight_stride, p##_bias_stride}

#define STORE_PARAMS bf16* __restrict__ y
#define STORE_EPILOGUE gemm_skinny::Store{y}
#define PERILN_PARAMS                                                                                 \
  const bf16* __restrict__ x_res, GEMM_SKINNY_UCLIP_PARAMS(after), GEMM_SKINNY_UCLIP_PARAMS(before), \
      bf16* __restrict__ x_out, bf16* __restrict__ h_out
#define PERILN_EPILOGUE \
  gemm_skinny::PeriLn<ReadOnlyLoads>{x_res, GEMM_SKINNY_UCLIP(after), GEMM_SKINNY_UCLIP(before), x_out, h_out}
#define SILU_MUL_PARAMS bf16* __restrict__ out
#define SILU_MUL_EPILOGUE gemm_skinny::SiluMul{out}
#define QK_PARAMS                                                                                      \
  const int *__restrict__ positions, const long long *__restrict__ slot_mapping,                      \
      const float *__restrict__ rope, int max_pos, GEMM_SKINNY_UCLIP_PARAMS(q_norm),                   \
      GEMM_SKINNY_UCLIP_PARAMS(k_norm), bf16 *__restrict__ q_out, bf16 *__restrict__ key_cache,      \
      bf16 *__restrict__ value_cache, long long num_slots, int num_heads, int num_kv_heads, int head_dim, \
      unsigned *fault
#define QK_EPILOGUE                                                                                  \
  gemm_skinny::QkNormRopeCache{positions, slot_mapping, rope, max_pos, GEMM_SKINNY_UCLIP(q_norm),     \
                               GEMM_SKINNY_UCLIP(k_norm), q_out, key_cache, value_cache, num_slots,  \
                               num_heads, num_kv_heads, head_dim, fault}

// gemm_skinny_m{MT}_r{ROWS}{SUFFIX}: MT here counts rows of x (8 to 64), the template's tiles of 8.
#define GEMM_SKINNY_ENTRY(MT, ROWS, EPI, SUFFIX)                                                             \
  extern "C" __global__ void __launch_bounds__(gemm_skinny::THREADS, 2) gemm_skinny_m##MT##_r##ROWS##SUFFIX( \
      const bf16* __restrict__ x, const bf16* __restrict__ w, int m, int n, int k, EPI##_PARAMS) {           \
    gemm_skinny::gemm<MT / 8, ROWS>(x, w, m, n, k, EPI##_EPILOGUE);                                          \
  }

// Every (MT, ROWS) with R * MT <= 8 for Store and PeriLn; those with ROWS >= 16 for the pairing
// epilogues (gpu::gemm::plan lists the same).
GEMM_SKINNY_ENTRY(8, 8, STORE, )
GEMM_SKINNY_ENTRY(8, 16, STORE, )
GEMM_SKINNY_ENTRY(8, 32, STORE, )
GEMM_SKINNY_ENTRY(8, 64, STORE, )
GEMM_SKINNY_ENTRY(16, 8, STORE, )
GEMM_SKINNY_ENTRY(16, 16, STORE, )
GEMM_SKINNY_ENTRY(16, 32, STORE, )
GEMM_SKINNY_ENTRY(16, 64, STORE, )
GEMM_SKINNY_ENTRY(32, 8, STORE, )
GEMM_SKINNY_ENTRY(32, 16, STORE, )
GEMM_SKINNY_ENTRY(32, 32, STORE, )
GEMM_SKINNY_ENTRY(64, 8, STORE, )
GEMM_SKINNY_ENTRY(64, 16, STORE, )

GEMM_SKINNY_ENTRY(8, 8, PERILN, _periln)
GEMM_SKINNY_ENTRY(8, 16, PERILN, _periln)
GEMM_SKINNY_ENTRY(8, 32, PERILN, _periln)
GEMM_SKINNY_ENTRY(8, 64, PERILN, _periln)
GEMM_SKINNY_ENTRY(16, 8, PERILN, _periln)
GEMM_SKINNY_ENTRY(16, 16, PERILN, _periln)
GEMM_SKINNY_ENTRY(16, 32, PERILN, _periln)
GEMM_SKINNY_ENTRY(16, 64, PERILN, _periln)
GEMM_SKINNY_ENTRY(32, 8, PERILN, _periln)
GEMM_SKINNY_ENTRY(32, 16, PERILN, _periln)
GEMM_SKINNY_ENTRY(32, 32, PERILN, _periln)
GEMM_SKINNY_ENTRY(64, 8, PERILN, _periln)
GEMM_SKINNY_ENTRY(64, 16, PERILN, _periln)

GEMM_SKINNY_ENTRY(8, 16, SILU_MUL, _silu_mul)
GEMM_SKINNY_ENTRY(8, 32, SILU_MUL, _silu_mul)
GEMM_SKINNY_ENTRY(8, 64, SILU_MUL, _silu_mul)
GEMM_SKINNY_ENTRY(16, 16, SILU_MUL, _silu_mul)
GEMM_SKINNY_ENTRY(16, 32, SILU_MUL, _silu_mul)
GEMM_SKINNY_ENTRY(16, 64, SILU_MUL, _silu_mul)
GEMM_SKINNY_ENTRY(32, 16, SILU_MUL, _silu_mul)
GEMM_SKINNY_ENTRY(32, 32, SILU_MUL, _silu_mul)
GEMM_SKINNY_ENTRY(64, 16, SILU_MUL, _silu_mul)

GEMM_SKINNY_ENTRY(8, 16, QK, _qk_norm_rope_cache)
GEMM_SKINNY_ENTRY(8, 32, QK, _qk_norm_rope_cache)
GEMM_SKINNY_ENTRY(8, 64, QK, _qk_norm_rope_cache)
GEMM_SKINNY_ENTRY(16, 16, QK, _qk_norm_rope_cache)
GEMM_SKINNY_ENTRY(16, 32, QK, _qk_norm_rope_cache)
GEMM_SKINNY_ENTRY(16, 64, QK, _qk_norm_rope_cache)
GEMM_SKINNY_ENTRY(32, 16, QK, _qk_norm_rope_cache)
GEMM_SKINNY_ENTRY(32, 32, QK, _qk_norm_rope_cache)
GEMM_SKINNY_ENTRY(64, 16, QK, _qk_norm_rope_cache)
