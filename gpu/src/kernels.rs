//! The `.cu` sources of this crate, embedded in the binary and compiled at run time by NVRTC.
//!
//! Each file under `gpu/kernels/` is one path or one fused operation, with a header comment giving
//! its algorithm, launch shape, shared memory and assumptions. [`ALL`] lists every file, so one
//! test compiles them all (with only NVRTC, no GPU needed).

use crate::runtime::Kernel;

/// Every kernel file of the crate.
pub const ALL: &[Kernel] = &[];
