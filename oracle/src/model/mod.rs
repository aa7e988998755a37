//! The AsyncT model on the CPU: weights, the paged KV cache tensors and the forward pass.

pub mod weights;
