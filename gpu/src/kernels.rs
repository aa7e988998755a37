//! The `.cu` sources of this crate, embedded in the binary and compiled at run time by NVRTC.
//!
//! Each file under `gpu/kernels/` is one path or one fused operation, with a header comment giving
//! its algorithm, launch shape, shared memory and assumptions. [`ALL`] lists every file, so one
//! test compiles them all (with only NVRTC, no GPU needed).

use crate::runtime::Kernel;

/// HP1 attention, decode and split-K (dense or sparse-index PV); see the file's header.
pub const HP1_DECODE: Kernel = Kernel { name: "hp1_decode.cu", source: include_str!("../kernels/hp1_decode.cu") };

/// Per-row metadata of a batch step (fake decode), shared by every layer's attention.
pub const HP1_ROWS: Kernel = Kernel { name: "hp1_rows.cu", source: include_str!("../kernels/hp1_rows.cu") };

/// Every kernel file of the crate.
pub const ALL: &[Kernel] = &[HP1_DECODE, HP1_ROWS];
