//! Decoding (SPEC section 5): sampling, stop conditions, incremental detokenisation.
//!
//! The model hands each request's row of logits to [`sample`], which draws the next token with
//! Gumbel noise from [`philox`] keyed by (seed, step, token), so the GPU sampler can draw the same
//! token from the same logits. The token then goes to the request's [`RequestDecoder`], which
//! records it, streams its text through the [`IncrementalDetokenizer`] and the [`StopMatcher`], and
//! says when and why the request finishes.
//!
//! ```
//! use oracle::decode::{sample, SamplingParams};
//!
//! let logits = [0.5f32, 2.0, -1.0];
//! assert_eq!(sample(&logits, &SamplingParams::greedy(), 0).unwrap(), 1);
//! let params = SamplingParams { temperature: 0.8, top_k: 2, top_p: 1.0, seed: 42 };
//! let token = sample(&logits, &params, 0).unwrap();
//! assert!(token == 0 || token == 1); // top-k 2 keeps tokens 1 and 0
//! assert_eq!(sample(&logits, &params, 0).unwrap(), token); // same seed and step, same token
//! ```

pub mod detok;
pub mod philox;
pub mod request;
pub mod sampler;
pub mod stop;

pub use detok::IncrementalDetokenizer;
pub use request::{Emitted, RequestDecoder};
pub use sampler::{sample, survivors, SamplingParams};
pub use stop::{FinishReason, Matched, StopConditions, StopMatcher};
