#line 2 "gemm_skinny.cu"
// gemm_skinny.cu: the skinny GEMM's entry points, one per (MT, ROWS, epilogue); the algorithm,
// the launch shape and the assumptions are in gemm_skinny.cuh's header (the staged forms' in
// gemm_skinny_staged.cuh's), the epilogues and their parameters in gemm_epilogue.cuh, which
// gpu::kernels prepends (after pdl.cuh, loads.cuh, ops_common.cuh and tensor_core.cuh). The
// decode megakernel (decode_mega.cu) runs the same body, one W block at a time.

// The entry NAME of the plain body at CTAS CTAs an SM (its launch bounds), a warp's loads in
// batches of U steps; MT here counts rows of x (8 to 64), the template's tiles of 8.
#define GEMM_SKINNY_ENTRY_AT(NAME, CTAS, U, MT, ROWS, EPI)                                                \
  extern "C" __global__ void __launch_bounds__(gemm_skinny::THREADS, CTAS)                                \
      NAME(const bf16* __restrict__ x, const bf16* __restrict__ w, int m, int n, int k, EPI##_PARAMS) {   \
    gemm_skinny::gemm<MT / 8, ROWS, decltype(EPI##_EPILOGUE), U>(x, w, m, n, k, EPI##_EPILOGUE);          \
  }

// gemm_skinny_m{MT}_r{ROWS}{SUFFIX}: two CTAs an SM, Config's batches.
#define GEMM_SKINNY_ENTRY(MT, ROWS, EPI, SUFFIX) \
  GEMM_SKINNY_ENTRY_AT(gemm_skinny_m##MT##_r##ROWS##SUFFIX, 2, (gemm_skinny::Config<MT / 8, ROWS>::U), MT, ROWS, EPI)

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

// gemm_skinny_c3_m{MT}_r{ROWS}{SUFFIX}: the same body at three CTAs an SM (launch bounds 3: 80
// registers, no spills), a warp's loads in batches of 4 steps instead of Config's 5, which at
// 80 registers ptxas would issue in two batches (a step, then the rest: two L2 round trips). For
// grids of two to three CTAs an SM, which at two take a second wave (gate/up of asynct-0.5b at one
// slab: 384 CTAs of 16 rows; gpu::gemm::plan's SKINNY_THREE_CTAS).
#define GEMM_SKINNY_C3_ENTRY(MT, ROWS, EPI, SUFFIX) \
  GEMM_SKINNY_ENTRY_AT(gemm_skinny_c3_m##MT##_r##ROWS##SUFFIX, 3, 4, MT, ROWS, EPI)

GEMM_SKINNY_C3_ENTRY(8, 16, SILU_MUL, _silu_mul)

// gemm_skinny_sx_m64_r16{SUFFIX}: the shared-x form (gemm_skinny.cuh's SHARED X), one CTA an SM;
// the one tile it is measured faster at (RESULTS runs 133-136).
#define GEMM_SKINNY_SX_ENTRY(MT, ROWS, EPI, SUFFIX)                                                              \
  extern "C" __global__ void __launch_bounds__(gemm_skinny::THREADS, 1) gemm_skinny_sx_m##MT##_r##ROWS##SUFFIX( \
      const bf16* __restrict__ x, const bf16* __restrict__ w, int m, int n, int k, EPI##_PARAMS) {              \
    gemm_skinny::gemm_shared_x<MT / 8, ROWS>(x, w, m, n, k, EPI##_EPILOGUE);                                    \
  }

GEMM_SKINNY_SX_ENTRY(64, 16, STORE, )
GEMM_SKINNY_SX_ENTRY(64, 16, PERILN, _periln)
GEMM_SKINNY_SX_ENTRY(64, 16, SILU_MUL, _silu_mul)
GEMM_SKINNY_SX_ENTRY(64, 16, QK, _qk_norm_rope_cache)

// gemm_skinny_staged_m8_r{ROWS}{SUFFIX} and gemm_skinny_fold_m8_r{ROWS}{SUFFIX}: the staged form
// (gemm_skinny_staged.cuh) with x as it is, and with x the split-K attention's partials; at
// most 8 rows, one slab.
#define GEMM_SKINNY_STAGED_ENTRY(ROWS, EPI, SUFFIX)                                                               \
  extern "C" __global__ void __launch_bounds__(gemm_skinny::THREADS, 2) gemm_skinny_staged_m8_r##ROWS##SUFFIX(   \
      const bf16* __restrict__ x, const bf16* __restrict__ w, int m, int n, int k, EPI##_PARAMS) {              \
    gemm_skinny::gemm_staged<ROWS>(gemm_skinny::RowsX{x}, w, m, n, k, EPI##_EPILOGUE);                          \
  }
#define GEMM_SKINNY_FOLD_ENTRY(ROWS, EPI, SUFFIX)                                                                 \
  extern "C" __global__ void __launch_bounds__(gemm_skinny::THREADS, 2) gemm_skinny_fold_m8_r##ROWS##SUFFIX(     \
      const float* __restrict__ partial, const int* __restrict__ row_len, int log2_d, int max_chunks, int chunk,  \
      const bf16* __restrict__ w, int m, int n, int k, EPI##_PARAMS) {                                           \
    gemm_skinny::gemm_staged<ROWS>(gemm_skinny::FoldedX{partial, row_len, log2_d, max_chunks, chunk}, w, m, n, \
                                   k, EPI##_EPILOGUE);                                                           \
  }

GEMM_SKINNY_STAGED_ENTRY(8, STORE, )
GEMM_SKINNY_STAGED_ENTRY(16, STORE, )
GEMM_SKINNY_STAGED_ENTRY(32, STORE, )
GEMM_SKINNY_STAGED_ENTRY(64, STORE, )
GEMM_SKINNY_STAGED_ENTRY(8, PERILN, _periln)
GEMM_SKINNY_STAGED_ENTRY(16, PERILN, _periln)
GEMM_SKINNY_STAGED_ENTRY(32, PERILN, _periln)
GEMM_SKINNY_STAGED_ENTRY(64, PERILN, _periln)
GEMM_SKINNY_STAGED_ENTRY(16, SILU_MUL, _silu_mul)
GEMM_SKINNY_STAGED_ENTRY(32, SILU_MUL, _silu_mul)
GEMM_SKINNY_STAGED_ENTRY(64, SILU_MUL, _silu_mul)
GEMM_SKINNY_STAGED_ENTRY(16, QK, _qk_norm_rope_cache)
GEMM_SKINNY_STAGED_ENTRY(32, QK, _qk_norm_rope_cache)
GEMM_SKINNY_STAGED_ENTRY(64, QK, _qk_norm_rope_cache)

GEMM_SKINNY_FOLD_ENTRY(8, STORE, )
GEMM_SKINNY_FOLD_ENTRY(16, STORE, )
GEMM_SKINNY_FOLD_ENTRY(32, STORE, )
GEMM_SKINNY_FOLD_ENTRY(64, STORE, )
GEMM_SKINNY_FOLD_ENTRY(8, PERILN, _periln)
GEMM_SKINNY_FOLD_ENTRY(16, PERILN, _periln)
GEMM_SKINNY_FOLD_ENTRY(32, PERILN, _periln)
GEMM_SKINNY_FOLD_ENTRY(64, PERILN, _periln)
