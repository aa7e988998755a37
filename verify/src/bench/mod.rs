//! The kernel benchmark behind `asynct-bench`: HP1 decode on the GPU on the grid of SPEC
//! section 7, beside the PyTorch SDPA anchor measured in the same device call.
//!
//! Each grid point is a decode step of `batch` sequences of `context` tokens, Hq/Hkv 8/4, D 128,
//! bf16, block size 16, with a shuffled block table. Every path is timed on the same buffers:
//! CUDA events around `reps` back-to-back launches, the median of several trials, cycling through
//! enough copies of the cache that their total exceeds twice the L2 (as the anchor does), so
//! small points are not served from L2. Only the attention of one layer is timed (the row
//! metadata is built once per step, outside the loop), which is what SDPA's call does too.

pub mod data;
pub mod decode;
pub mod report;
