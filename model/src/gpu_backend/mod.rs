//! The GPU backend: the model run by the `gpu` crate's kernels. [`weights`] puts the checkpoint
//! on the device in the layouts the kernels read, [`step_buffers`] holds one step's activations
//! and metadata, [`forward`] runs a step through every layer, and [`executor`] is the
//! [`StepExecutor`](crate::executor::StepExecutor) over it, sampling on the device. Steps run
//! eagerly; whole-step CUDA graphs are next.

pub mod decode_graphs;
pub mod decode_kernel;
pub mod executor;
pub mod forward;
pub mod linear;
pub mod step_buffers;
pub mod step_program;
pub mod weights;
