//! The GPU backend: the model run by the `gpu` crate's kernels. So far its weights on the device
//! ([`weights`]); the step executor over them comes with the GPU forward.

pub mod weights;
