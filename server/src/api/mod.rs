//! The OpenAI-compatible request and response shapes of `asynct serve`, kept free of HTTP and of
//! the engine so that every rule can be unit-tested on bytes.
//!
//! - [`validate`] alone turns a request body into a [`types::CompletionRequest`] or
//!   [`types::ChatRequest`]; whatever it returns is in range, so handlers never re-check fields.
//!   [`output_format`] reads its guided-decoding fields, [`tokenize`] the tokenizer routes' bodies.
//! - [`types`] holds those validated requests and the response bodies and stream chunks;
//!   [`logprobs`] the logprobs objects of both routes, built from the engine's.
//! - [`error::ApiError`] is the one error of the HTTP layer and the one place a failure becomes a
//!   status code and an OpenAI error body; every engine refusal reaches it through one mapping.

pub mod error;
pub mod logprobs;
pub mod output_format;
pub mod tokenize;
pub mod types;
pub mod validate;
