//! Decoding (SPEC section 5): logits processors, sampling, logprobs, stop conditions, incremental
//! detokenisation.
//!
//! The model hands each request's raw row of logits to [`draw`]: the request's
//! [`processors`] (logit bias, min tokens, penalties) on a copy of the row, then [`sample`], which draws the next token with
//! Gumbel noise from [`philox`] keyed by (seed, step, token), so the GPU sampler can draw the same
//! token from the same logits. The token then goes to the request's [`RequestDecoder`], which
//! records it, streams its text through the [`IncrementalDetokenizer`] and the [`StopMatcher`], and
//! says when and why the request finishes. [`logprobs`] reports the raw row's log-softmax.
//!
//! ```
//! use oracle::decode::{sample, SamplingParams};
//!
//! let logits = [0.5f32, 2.0, -1.0];
//! assert_eq!(sample(&logits, &SamplingParams::greedy(), 0).unwrap(), 1);
//! let params = SamplingParams { temperature: 0.8, top_k: 2, ..SamplingParams::with_temperature(0.8, 42) };
//! let token = sample(&logits, &params, 0).unwrap();
//! assert!(token == 0 || token == 1); // top-k 2 keeps tokens 1 and 0
//! assert_eq!(sample(&logits, &params, 0).unwrap(), token); // same seed and step, same token
//! ```

pub mod byte_table;
pub mod detok;
pub mod guide;
pub mod json_bytes;
pub mod logprobs;
pub mod philox;
pub mod processors;
pub mod request;
pub mod sampler;
pub mod stop;
#[cfg(test)]
mod test_rows;
#[cfg(test)]
mod test_tokenizers;

pub use detok::IncrementalDetokenizer;
pub use logprobs::{token_logprobs, TokenLogprobs};
pub use processors::{draw, LogitsProcessors, ProcessorEdit, ProcessorState, TokenHistory};
pub use request::{Emitted, RequestDecoder};
pub use sampler::{sample, survivors, SamplingParams};
pub use stop::{FinishReason, Matched, StopConditions, StopMatcher};
