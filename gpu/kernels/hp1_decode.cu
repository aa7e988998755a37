#line 2 "hp1_decode.cu"
// hp1_decode.cu: the entry points of the decode and split-K HP1 attention, one per instantiation;
// the algorithm, the launch shape and the assumptions are in hp1_attention.cuh's header, which
// gpu::kernels prepends (after pdl.cuh, loads.cuh and hp1_qk_pv.cuh). The decode megakernel
// (decode_mega.cu) runs the same body as its tasks.

// One extern "C" entry per instantiation, so the host finds each by name without C++ mangling.
#define HP1_ATTENTION_PARAMS                                                                          \
  const unsigned short *q, long long q_row_stride, const unsigned short *key_cache,                 \
      const unsigned short *value_cache, const int *block_table, int max_blocks_per_seq,            \
      const int *row_seq, const int *row_len, const float *sigma, const float *gamma, int num_heads, \
      int num_kv_heads, int log2_block, int max_chunks, float scale, int fir_k, int relu_pre,        \
      float clip_min, float clip_max

#define HP1_ATTENTION_ARGS                                                                            \
  hp1::Args {                                                                                         \
    q, q_row_stride, key_cache, value_cache, block_table, max_blocks_per_seq, row_seq, row_len,      \
        sigma, gamma, num_heads, num_kv_heads, log2_block, max_chunks, scale, fir_k, relu_pre,       \
        clip_min, clip_max                                                                            \
  }

// settled (gpu::attention::Settled): 0, the body waits for the kernel launched before this one
// before it reads anything; 1, that kernel did not write row_seq, row_len or the block table, so
// the body reads them (and fills its first chunk's slots) before it waits (hp1::WholeCta::inputs);
// 2, as 1, and each row's keys but its newest were in the caches before that kernel started, so
// split-K loads its chunk's first K before the wait too (hp1_attention.cuh's EARLY K). R is the
// instantiation's QK rounds in flight (hp1::attention's QR); its name carries _r2 where it is 2.
#define HP1_ENTRIES(D, G, HP, R, NAME_R, PV, SPARSE)                                                  \
  extern "C" __global__ void __launch_bounds__(hp1::THREADS, hp1::min_ctas(false, HP, D, G, R))           \
      hp1_decode_d##D##_g##G##_h##HP##NAME_R##_##PV(HP1_ATTENTION_PARAMS, unsigned short* out, int settled) { \
    __shared__ hp1::Shared<HP> sh;                                                                  \
    if (settled == 0) pdl_begin();                                                                  \
    hp1::attention<D, G, HP, R, SPARSE, false, ReadOnlyLoads>(HP1_ATTENTION_ARGS, hp1::WholeCta{blockIdx.x, (int)threadIdx.x}, \
                                                              sh, out, nullptr, nullptr, false);    \
  }                                                                                                 \
  extern "C" __global__ void __launch_bounds__(hp1::THREADS, hp1::min_ctas(true, HP, D, G, R))            \
      hp1_split_d##D##_g##G##_h##HP##NAME_R##_##PV(HP1_ATTENTION_PARAMS, float* partial, int* counters, \
                                                   unsigned short* out, int settled) {         \
    __shared__ hp1::Shared<HP> sh;                                                                  \
    if (settled == 0) pdl_begin();                                                                  \
    hp1::attention<D, G, HP, R, SPARSE, true, ReadOnlyLoads>(HP1_ATTENTION_ARGS, hp1::WholeCta{blockIdx.x, (int)threadIdx.x}, \
                                                             sh, out, partial, counters, settled == 2); \
  }

#define HP1_HEAD_DIM(D)                                                                               \
  HP1_ENTRIES(D, 8, 1, 1, , dense, false)                                                             \
  HP1_ENTRIES(D, 8, 1, 1, , sparse, true)                                                             \
  HP1_ENTRIES(D, 8, 1, 2, _r2, dense, false)                                                          \
  HP1_ENTRIES(D, 8, 1, 2, _r2, sparse, true)                                                          \
  HP1_ENTRIES(D, 16, 1, 1, , dense, false)                                                            \
  HP1_ENTRIES(D, 16, 1, 1, , sparse, true)                                                            \
  HP1_ENTRIES(D, 16, 2, 1, , dense, false)                                                            \
  HP1_ENTRIES(D, 16, 2, 1, , sparse, true)

HP1_HEAD_DIM(64)
HP1_HEAD_DIM(128)
HP1_HEAD_DIM(256)
