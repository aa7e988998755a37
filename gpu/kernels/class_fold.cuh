#line 2 "class_fold.cuh"
// class_fold.cuh: how the class forms of the skinny GEMM (gemm_skinny_classes.cu,
// gemm_skinny_classes_wg.cu) add their classes: each CTA of a cluster holds one class's partials
// of the cluster's tile, sends each share of them to the CTA that owns it, and finishes its own
// share once every class has arrived. Needs tma.cuh (the mbarrier), cluster.cuh and
// gemm_epilogue.cuh (ClassShareTile) before it.

namespace class_fold {

// The epilogue on the share once wait() has brought every class: for most, the wait, then the
// epilogue; PeriLn loads what it reads of memory first (gemm_epilogue::PeriLn::after_wait).
template <class Epi, class T, class Wait>
__device__ __forceinline__ void finish(const Epi& epi, const T& t, Wait wait) {
  wait();
  epi(t);
}
template <class In, class T, class Wait>
__device__ __forceinline__ void finish(const gemm_epilogue::PeriLn<In>& epi, const T& t, Wait wait) {
  epi.after_wait(t, wait);
}

// This CTA (rank c of CLASSES) holds its class's partials in part[x row][PAD] for the tile's
// CLASSES * SHARE rows of x by ROWS rows of W. Its THREADS threads send share o (x rows o SHARE ..
// o SHARE + SHARE - 1) to the CTA of rank o, into its recv[c][row][PAD] (st.async, 16 bytes a
// store, counted on that CTA's mbarrier `bar`, one arrival: this CTA's own, armed here), then
// wait on `bar` for the CLASSES classes of this CTA's share and run `epi` on it, the partials
// added in class order (gemm_epilogue::ClassShareTile). Every CTA's `bar` is initialised before
// any CTA calls this (the callers' cluster barrier), and a CTA may leave once its own share has
// arrived: what it sent is counted where it went.
template <int SHARE, int ROWS, int PAD, int CLASSES, int THREADS, class Epi>
__device__ __forceinline__ void send_and_finish(const float* part, float* recv, unsigned bar, int c, int m, int n0,
                                                int n, const Epi& epi) {
  if (threadIdx.x == 0) tma::mbar_arrive_expect_tx(bar, CLASSES * SHARE * ROWS * 4);
  const int xr0 = c * SHARE;
  const gemm_epilogue::ClassShareTile<SHARE, ROWS, THREADS, PAD, CLASSES> tile{recv, max(0, min(SHARE, m - xr0)), xr0,
                                                                             n0, n};
  for (int e = threadIdx.x; e < CLASSES * SHARE * (ROWS / 4); e += THREADS) {
    const int o = e / (SHARE * (ROWS / 4)), r = (e / (ROWS / 4)) % SHARE, q = e % (ROWS / 4);
    const uint4 v = *reinterpret_cast<const uint4*>(part + (o * SHARE + r) * PAD + 4 * q);
    cluster::st_async_16(tc::smem_addr(recv + (c * SHARE + r) * PAD + 4 * q), o, bar, v);
  }
  // An epilogue that reads memory issues those loads after the sends, before the wait (finish).
  // Issued before the sends, they lengthened the exchange by what they took off the epilogue,
  // as if the sends, and so every peer's wait, waited for them (RESULTS runs 319-320).
  finish(epi, tile, [&] {
    tma::mbar_wait<true>(bar, 0);
    // The step trace's marks (pdl.cuh): 2 every class arrived, 3 the epilogue's stores issued.
    if (threadIdx.x == 0) step_trace_mark(2);
  });
  if (threadIdx.x == 0) step_trace_mark(3);
}

}  // namespace class_fold
