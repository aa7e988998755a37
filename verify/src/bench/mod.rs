//! The kernel benchmark behind `asynct-bench`: HP1 decode and prefill on the GPU on the grids of
//! SPEC section 7, beside the PyTorch SDPA anchor measured in the same device call.
//!
//! Decode: each grid point is a decode step of `batch` sequences of `context` tokens, Hq/Hkv 8/4,
//! D 128, bf16, block size 16, with a shuffled block table. Every path is timed on the same
//! buffers: CUDA events around `reps` back-to-back launches, the median of several trials,
//! cycling through enough copies of the inputs that their total exceeds twice the L2 (as the
//! anchor does), so small points are not served from L2. Only the attention of one layer is
//! timed (the row metadata is built once per step, outside the loop), which is what SDPA's call
//! does too.
//!
//! Prefill ([`prefill`]): full causal prefills of (batch, length) {(32, 256), (16, 1K), (4, 4K),
//! (1, 16K)} through fake decode, the MMA and WGMMA kernels and the step dispatcher, timed the
//! same way and reported in causal TFLOP/s with the anchor's flop count; and the crossover of
//! fake decode and the tensor-core kernels on chunks after a long prefix.

pub mod data;
pub mod decode;
pub mod prefill;
pub mod report;
pub mod timing;
