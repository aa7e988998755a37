//! The GPU backend: the model run by the `gpu` crate's kernels. [`weights`] puts the checkpoint
//! on the device in the layouts the kernels read, [`step_buffers`] holds one step's activations
//! and metadata, [`step_program`] lists a step's launches, [`linear`] picks each GEMM's kernel,
//! [`forward`] runs a step through every layer, [`decode_graphs`] replays decode-only steps as
//! whole-step CUDA graphs (or [`decode_kernel`]'s megakernel), and [`executor`] is the
//! [`StepExecutor`](crate::executor::StepExecutor) over it, sampling on the device, with
//! [`in_flight`] keeping the book of queued steps and [`pending_feed`] placing the tokens of a
//! step planned ahead. Steps with prefill chunks run eagerly.

pub mod decode_graphs;
pub mod decode_kernel;
mod decode_order;
pub mod executor;
pub mod forward;
pub mod in_flight;
mod landing;
pub mod linear;
pub mod pending_feed;
pub mod step_buffers;
mod step_marks;
pub mod step_program;
pub mod weights;
