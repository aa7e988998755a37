#line 2 "copy_list.cu"
// copy_list.cu: a step's inputs, uploaded as one block, copied to the buffers they belong to
// (gpu::runtime::copy_list). A copy on the stream costs about 3 us on the device however few its
// bytes (RESULTS run 224: nine small copies, 28 us of a 0.89 ms B1 step); one copy of the block
// and this launch replace them.
//
// Buffers: list, the device copy of the block: a header (u32 entry count, u32 pad), MAX_ENTRIES
// entries of CopyEntry, then the payload the entries' sources point into. An entry copies
// `words` 4-byte words from `src` to `dst` (device addresses; a source may lie outside the
// block: the pending tokens a step copies from the draws of the step before). Entries of phase 0
// run first, then, after a CTA barrier, those of phase 1, so a phase-1 entry may overwrite what
// a phase-0 entry wrote (a pending token over its placeholder id). Within a phase no two entries
// overlap (the host builds them so).
//
// Launch: one CTA of THREADS threads (the block is at most a few tens of KB, and one CTA gives
// the two phases their order with one barrier); each entry's words go to consecutive threads.
// Assumes: every address 4-byte aligned, count <= MAX_ENTRIES (checked on the host).

struct CopyEntry {
  unsigned long long dst;
  unsigned long long src;
  unsigned int words;
  unsigned int phase;
};
static_assert(sizeof(CopyEntry) == 24, "gpu::runtime::copy_list's layout");

constexpr int COPY_LIST_HEADER = 8;

__device__ __forceinline__ void copy_phase(const CopyEntry* entries, unsigned count, unsigned phase) {
  for (unsigned e = 0; e < count; ++e) {
    const CopyEntry c = entries[e];
    if (c.phase != phase) continue;
    const unsigned* src = reinterpret_cast<const unsigned*>(c.src);
    unsigned* dst = reinterpret_cast<unsigned*>(c.dst);
    for (unsigned i = threadIdx.x; i < c.words; i += blockDim.x) dst[i] = src[i];
  }
}

extern "C" __global__ void copy_list(const unsigned char* __restrict__ list) {
  pdl_begin();
  const unsigned count = *reinterpret_cast<const unsigned*>(list);
  const CopyEntry* entries = reinterpret_cast<const CopyEntry*>(list + COPY_LIST_HEADER);
  copy_phase(entries, count, 0);
  __syncthreads();
  copy_phase(entries, count, 1);
}
