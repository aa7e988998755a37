//! The AsyncT model around the oracle: its config, checkpoint I/O, the shipped presets, and the
//! engine that serves it.
//!
//! - [`config::ModelConfig`] parses and validates `config.json` (SPEC section 1) and gives the
//!   oracle's [`oracle::model::weights::ModelDims`].
//! - [`checkpoint::load_weights`] reads a safetensors checkpoint (single or sharded; bf16, f16 or
//!   f32) into [`oracle::model::weights::ModelWeights`]; [`checkpoint::save_checkpoint`] writes one.
//! - [`presets`] generates the `asynct-tiny`, `asynct-mini`, `asynct-small` and `asynct-0.5b` checkpoints with
//!   seeded random weights and their tokenizers ([`byte_tokenizer`] for tiny, Qwen3's otherwise).
//! - [`engine::Engine`] serves generation requests over any [`executor::StepExecutor`]: the
//!   [`scheduler`] plans each step over the [`block_pool`] (chunked prefill, blocks allocated as
//!   sequences grow, preemption by recompute, prefix caching through the [`prefix_index`]), the
//!   executor runs the forward and samples, and the engine streams text and applies the stop
//!   rules. [`cpu_backend`] is the oracle's executor and [`gpu_backend`] the GPU's;
//!   [`request_state`] is what the engine keeps of one request, and [`perplexity`] scores a text
//!   through either backend.
//! - [`chat_template::ChatTemplate`] renders chat messages with the checkpoint's template.
//! - [`executor_loader`] builds the executor for `--device`, recording the wall time of each
//!   phase of the load in [`start_times`].
//!
//! ```
//! use model::config::ModelConfig;
//! use model::presets::Preset;
//!
//! let cfg: ModelConfig = Preset::Tiny.config();
//! cfg.validate().unwrap();
//! assert_eq!(cfg.dims().head_dim, 16);
//! let json = cfg.to_json();
//! assert_eq!(ModelConfig::from_json(&json, "config.json".as_ref()).unwrap(), cfg);
//! ```
//!
//! Neighbours: this crate uses `oracle` (weights, dims, the CPU forward pass); `server` and
//! `verify` use this crate; `oracle` must not.

#![deny(missing_docs)]

pub mod block_pool;
pub mod byte_tokenizer;
pub mod chat_template;
pub mod checkpoint;
pub mod config;
pub mod cpu_backend;
pub mod engine;
pub mod error;
pub mod executor;
pub mod executor_loader;
pub mod gpu_backend;
pub mod perplexity;
pub mod prefix_index;
pub mod presets;
pub mod request_state;
pub mod scheduler;
pub mod start_times;

pub use error::{Error, Result};
