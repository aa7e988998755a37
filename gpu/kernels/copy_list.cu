#line 2 "copy_list.cu"
// copy_list.cu: a step's inputs, uploaded as one block, copied to the buffers they belong to
// (gpu::runtime::copy_list). A copy on the stream costs about 3 us on the device however few its
// bytes (RESULTS run 224: nine small copies, 26-42 us of a step); one copy of the block and this
// launch replace them.
//
// Buffers: list, the device copy of the block: a header (u32 entry count, padding to 16 bytes),
// MAX_ENTRIES entries of CopyEntry, then the payload the entries' sources point into. An entry
// copies `words` 4-byte words from `src` to `dst` (device addresses; a source may lie outside
// the block: the pending tokens a step copies from the draws of the step before). Entries of
// phase 0 run first, then, after a CTA barrier, those of phase 1, so a phase-1 entry may
// overwrite what a phase-0 entry wrote (a pending token over its placeholder id). Within a
// phase no two entries overlap (the host builds them so).
//
// ALGORITHM. Each phase's entries are cut into chunks of CHUNK_WORDS words (a warp's 16 loads a
// lane, lane-strided so that each load of the warp is 128 contiguous bytes); the warps take the
// phase's chunks c = warp, warp + WARPS, ... across every entry at once, each issuing all 16 loads
// of a chunk before its stores. So a step's few entries do not copy one after another (a round
// trip each, RESULTS run 225: 15-37 us), and a wide block table takes a round or two.
//
// Launch: one CTA of THREADS threads (one CTA gives the phases their order with one barrier).
// Assumes: every address 4-byte aligned, count <= MAX_ENTRIES (checked on the host).

struct CopyEntry {
  unsigned long long dst;
  unsigned long long src;
  unsigned int words;
  unsigned int phase;
};
static_assert(sizeof(CopyEntry) == 24, "gpu::runtime::copy_list's layout");

constexpr int COPY_LIST_HEADER = 16;
constexpr int COPY_LIST_MAX_ENTRIES = 64;
constexpr int COPY_LIST_THREADS = 512;
constexpr int COPY_LIST_WARPS = COPY_LIST_THREADS / 32;
constexpr unsigned CHUNK_LOADS = 16;
constexpr unsigned CHUNK_WORDS = 32 * CHUNK_LOADS;

// Copies the chunks of `phase`'s entries; `first` is shared memory for COPY_LIST_MAX_ENTRIES + 1
// chunk offsets, `words` and `phases` the entries' fields staged there.
__device__ __forceinline__ void copy_phase(const CopyEntry* entries, unsigned count, unsigned phase, unsigned* first,
                                           const unsigned* words) {
  const unsigned* phases = words + COPY_LIST_MAX_ENTRIES;
  if (threadIdx.x == 0) {
    unsigned c = 0;
    for (unsigned e = 0; e < count; ++e) {
      first[e] = c;
      if (phases[e] == phase) c += (words[e] + CHUNK_WORDS - 1) / CHUNK_WORDS;
    }
    first[count] = c;
  }
  __syncthreads();
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (unsigned c = warp; c < first[count]; c += COPY_LIST_WARPS) {
    // The entry whose chunks hold c (an entry of the other phase holds none).
    unsigned e = 0;
    while (first[e + 1] <= c) ++e;
    const unsigned* src = reinterpret_cast<const unsigned*>(entries[e].src);
    unsigned* dst = reinterpret_cast<unsigned*>(entries[e].dst);
    const unsigned base = (c - first[e]) * CHUNK_WORDS, n = words[e];
    unsigned v[CHUNK_LOADS];
#pragma unroll
    for (unsigned u = 0; u < CHUNK_LOADS; ++u) {
      const unsigned i = base + u * 32 + lane;
      if (i < n) v[u] = src[i];
    }
#pragma unroll
    for (unsigned u = 0; u < CHUNK_LOADS; ++u) {
      const unsigned i = base + u * 32 + lane;
      if (i < n) dst[i] = v[u];
    }
  }
}

extern "C" __global__ void __launch_bounds__(COPY_LIST_THREADS, 1) copy_list(const unsigned char* __restrict__ list) {
  __shared__ unsigned first[COPY_LIST_MAX_ENTRIES + 1];
  __shared__ unsigned fields[2 * COPY_LIST_MAX_ENTRIES];  // each entry's words, then its phase
  pdl_begin();
  const unsigned count = min(*reinterpret_cast<const unsigned*>(list), (unsigned)COPY_LIST_MAX_ENTRIES);
  const CopyEntry* entries = reinterpret_cast<const CopyEntry*>(list + COPY_LIST_HEADER);
  if (threadIdx.x < count) {
    fields[threadIdx.x] = entries[threadIdx.x].words;
    fields[COPY_LIST_MAX_ENTRIES + threadIdx.x] = entries[threadIdx.x].phase;
  }
  __syncthreads();
  copy_phase(entries, count, 0, first, fields);
  // The phase-0 stores before the phase-1 ones, and `first` free to be rewritten.
  __syncthreads();
  copy_phase(entries, count, 1, first, fields);
}
