//! The GPU backend: the model run by the `gpu` crate's kernels. [`weights`] puts the checkpoint
//! on the device in the layouts the kernels read, [`step_buffers`] holds one step's activations
//! and metadata, and [`forward`] runs a step through every layer. The step executor over it (with
//! the GPU sampler and whole-step CUDA graphs) comes next.

pub mod forward;
pub mod step_buffers;
pub mod weights;
