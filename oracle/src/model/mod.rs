//! The AsyncT model on the CPU: weights, the paged KV cache tensors and the forward pass.
//!
//! [`forward::Model`] runs one batch step ([`step::StepInput`]) over a [`kv_cache::KvCache`];
//! [`precision`] lists every point where the GPU model rounds to bf16; [`init::random_weights`]
//! makes the generated presets.

pub mod forward;
pub mod gate_stats;
pub mod init;
pub mod kv_cache;
pub mod linear;
pub mod precision;
pub mod step;
mod validate;
pub mod weights;
