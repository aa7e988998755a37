//! The kernel benchmark behind `asynct-bench`: HP1 decode and prefill on the GPU on the grids of
//! SPEC section 7, beside the attention anchor (SDPA cuDNN and flash, FlashInfer's paged decode)
//! measured in the same device call by `scripts/attention_anchor.py`.
//!
//! Method ([`timing`]), the anchor's too: one CUDA graph of N launches (40 for decode, 20 for
//! prefill), its inputs cycled through enough copies that they exceed twice the L2, replayed 7
//! times between CUDA events; the median replay over N is the figure reported, and the ratios to
//! the anchor use it. Back-to-back launches from the host are timed too and reported beside it:
//! at small sizes the gap between the two is launch overhead, which an engine replaying graphs
//! does not pay.
//!
//! Decode ([`decode`]): each grid point is a decode step of `batch` sequences of `context` tokens,
//! Hq/Hkv 8/4, D 128, bf16, block size 16, with a shuffled block table. Every path is timed on
//! the same buffers. Only the attention of one layer is timed (the row metadata is built once
//! per step, outside the graph), which is what the anchor's call does too.
//!
//! Prefill ([`prefill`]): full causal prefills of (batch, length) {(32, 256), (16, 1K), (4, 4K),
//! (1, 16K)} through fake decode, the MMA and WGMMA kernels and the step dispatcher, timed the
//! same way and reported in causal TFLOP/s with the anchor's flop count; and the crossover of
//! fake decode and the tensor-core kernels on chunks after a long prefix.
//!
//! [`report`] prints the tables against the anchor JSON.
//!
//! GEMMs ([`gemm`], `asynct-bench --gemm`): asynct-0.5b's weight shapes at M of 1 to 128 through
//! every skinny instantiation and cuBLASLt, timed the same way with the weight cycled past twice
//! the L2, in effective TB/s against issue 9's goal; it prints its own table.

pub mod data;
pub mod decode;
pub mod gemm;
pub mod prefill;
pub mod report;
pub mod timing;
