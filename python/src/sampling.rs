//! `asynct.SamplingParams`: how one prompt is sampled and when it stops, vLLM's names and
//! defaults (temperature 1, max_tokens 16), checked once when built.
//!
//! Each request samples with SPEC section 5's Gumbel-max draw keyed by (seed, step, token id),
//! so one seed gives one output whatever the batch. `seed=None` draws a fresh seed for each
//! request, as vLLM does.

use std::hash::{BuildHasher, Hasher};

use model::engine::{SamplingParams as EngineSampling, StopConditions};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::args::scalar;
use crate::errors::{oracle_arg_error, type_error, value_error};

/// Sampling and stopping parameters for `LLM.generate`.
#[pyclass(module = "asynct", frozen, from_py_object)]
#[derive(Clone, Debug)]
pub struct SamplingParams {
    /// Softmax temperature; 0 is greedy.
    #[pyo3(get)]
    pub temperature: f32,
    /// Keep the smallest most-probable set of tokens whose probability reaches `top_p`.
    #[pyo3(get)]
    pub top_p: f32,
    /// Keep the `top_k` most likely tokens; 0 or -1 keeps all.
    #[pyo3(get)]
    pub top_k: i64,
    /// The sampling seed; `None` draws one per request.
    #[pyo3(get)]
    pub seed: Option<u64>,
    /// Tokens to generate at most.
    #[pyo3(get)]
    pub max_tokens: usize,
    /// Strings that end the output, which stops just before the first one found.
    #[pyo3(get)]
    pub stop: Vec<String>,
    /// Keep generating through end-of-sequence tokens.
    #[pyo3(get)]
    pub ignore_eos: bool,
    /// With `n`, each generated token's log-probability and those of the `n` likeliest tokens.
    #[pyo3(get)]
    pub logprobs: Option<usize>,
}

#[pymethods]
impl SamplingParams {
    /// Builds and checks the parameters; a bad value raises `ValueError` (or `TypeError` for a
    /// wrong kind) naming the parameter.
    #[new]
    #[pyo3(
        signature = (
            temperature=None, top_p=None, top_k=None, seed=None, max_tokens=None, stop=None, ignore_eos=None,
            logprobs=None
        ),
        text_signature = "(temperature=1.0, top_p=1.0, top_k=0, seed=None, max_tokens=16, stop=None, \
                          ignore_eos=False, logprobs=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn new(
        temperature: Option<&Bound<'_, PyAny>>,
        top_p: Option<&Bound<'_, PyAny>>,
        top_k: Option<&Bound<'_, PyAny>>,
        seed: Option<&Bound<'_, PyAny>>,
        max_tokens: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        ignore_eos: Option<&Bound<'_, PyAny>>,
        logprobs: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let temperature: f32 = scalar(temperature, 1.0, "temperature", "a float")?;
        let top_p: f32 = scalar(top_p, 1.0, "top_p", "a float")?;
        let top_k: i64 = scalar(top_k, 0, "top_k", "an integer")?;
        let seed: Option<i128> = scalar(seed, None, "seed", "an integer or None")?;
        let max_tokens: i64 = scalar(max_tokens, 16, "max_tokens", "an integer")?;
        let ignore_eos: bool = scalar(ignore_eos, false, "ignore_eos", "a bool")?;
        let logprobs: Option<i64> = scalar(logprobs, None, "logprobs", "an integer or None")?;
        // The engine's own rules for temperature and top_p, named as the Python arguments.
        EngineSampling { temperature, top_p, ..EngineSampling::greedy() }.validate().map_err(oracle_arg_error)?;
        if top_k < -1 {
            return Err(value_error("top_k", format!("must be >= 0, or -1 for no limit, got {top_k}")));
        }
        if max_tokens < 1 {
            return Err(value_error("max_tokens", format!("must be >= 1, got {max_tokens}")));
        }
        let stop = stop_strings(stop)?;
        if let Some(i) = stop.iter().position(String::is_empty) {
            return Err(value_error("stop", format!("stop strings must be non-empty, got \"\" at index {i}")));
        }
        if let Some(s) = seed.filter(|&s| s < 0 || s > u64::MAX as i128) {
            return Err(value_error("seed", format!("must be in [0, 2^64), got {s}")));
        }
        if let Some(n) = logprobs.filter(|&n| n < 0) {
            return Err(value_error("logprobs", format!("must be >= 0 or None, got {n}")));
        }
        Ok(Self {
            temperature,
            top_p,
            top_k: top_k.max(0),
            seed: seed.map(|s| s as u64),
            max_tokens: max_tokens as usize,
            stop,
            ignore_eos,
            logprobs: logprobs.map(|n| n as usize),
        })
    }

    fn __repr__(&self) -> String {
        let opt = |o: Option<String>| o.unwrap_or_else(|| "None".into());
        format!(
            "SamplingParams(temperature={:?}, top_p={:?}, top_k={}, seed={}, max_tokens={}, stop={:?}, ignore_eos={}, \
             logprobs={})",
            self.temperature,
            self.top_p,
            self.top_k,
            opt(self.seed.map(|s| s.to_string())),
            self.max_tokens,
            self.stop,
            if self.ignore_eos { "True" } else { "False" },
            opt(self.logprobs.map(|n| n.to_string())),
        )
    }
}

impl SamplingParams {
    /// `SamplingParams()`: what `generate` uses when given none.
    pub fn defaults() -> Self {
        Self::new(None, None, None, None, None, None, None, None).expect("the defaults are valid")
    }

    /// The engine's sampling parameters, with `seed` drawn now when the caller gave none.
    pub fn engine_sampling(&self) -> EngineSampling {
        EngineSampling {
            temperature: self.temperature,
            top_k: self.top_k as usize,
            top_p: self.top_p,
            seed: self.seed.unwrap_or_else(fresh_seed),
            min_p: 0.0,
        }
    }

    /// The engine's stop rules for a model with these eos ids and context length.
    pub fn stop_conditions(&self, eos_token_ids: &[u32], max_model_len: usize) -> StopConditions {
        StopConditions {
            eos_token_ids: eos_token_ids.to_vec(),
            stop: self.stop.clone(),
            max_tokens: self.max_tokens,
            max_model_len,
            ignore_eos: self.ignore_eos,
            ..Default::default()
        }
    }
}

/// `stop` as a list: `None`, one string, or a sequence of strings.
fn stop_strings(stop: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    let Some(stop) = stop else { return Ok(Vec::new()) };
    if let Ok(s) = stop.cast::<PyString>() {
        return Ok(vec![s.to_cow()?.into_owned()]);
    }
    stop.extract::<Vec<String>>().map_err(|_| type_error("stop", "expected a string or a list of strings"))
}

/// A seed for a request that gave none: a counter hashed under the standard library's random
/// per-process keys, so two requests share one only by a 2^-64 chance.
fn fresh_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish()
}
