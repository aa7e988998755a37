//! The CUDA side of asynct: device discovery, the HP1 attention kernels and the model's small ops
//! (CUDA C++ compiled at run time by NVRTC), the linear layers' GEMMs ([`gemm`]: a skinny
//! tensor-core kernel for decode batches, cuBLASLt for prefill), the persistent decode megakernel
//! ([`mega`]: every layer of a small decode step in one launch), and CUDA graphs ([`Gpu::capture`]);
//! [`rounding_check`] holds the kernels' hardware bf16 rounding to its integer definition.
//!
//! cudarc is built with dynamic loading, so this crate compiles and its users run on machines
//! without CUDA: [`probe`] says whether a driver and a device are there, and every GPU test
//! asks it first and prints that it skipped when the answer is no.
//!
//! ```
//! match gpu::probe() {
//!     Ok(dev) => println!("GPU: {}", dev.name),
//!     Err(why) => println!("no GPU: {why}"),
//! }
//! ```
//!
//! Neighbours: `model` drives this crate through its GPU backend; `verify` holds each kernel
//! against the oracle. This crate depends on no other workspace crate.

#![deny(missing_docs)]

pub mod attention;
pub mod device;
pub mod error;
pub mod gemm;
pub mod kernels;
pub mod mega;
pub mod ops;
pub mod rounding_check;
pub mod runtime;

pub use device::{probe, DeviceInfo};
pub use error::{Error, Result};
pub use runtime::{Gpu, Graph, Kernel, LaunchTrace, MarkTimes, SmLoad, SmNeighbours, TraceWindow};
