//! `asynct.SamplingParams`: how one prompt is sampled and when it stops, vLLM's names and
//! defaults (temperature 1, max_tokens 16), checked once when built.
//!
//! Each request samples with SPEC section 5's Gumbel-max draw keyed by (seed, step, token id),
//! so one seed gives one output whatever the batch. `seed=None` draws a fresh seed for each
//! request, as vLLM does. The logits processors (`logit_bias`, `min_tokens`, the penalties),
//! `min_p`, `stop_token_ids` and `include_stop_str_in_output` are the server's, with SPEC
//! section 5's definitions and order.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};

use model::engine::{LogitsProcessors, SamplingParams as EngineSampling, StopConditions};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::args::scalar;
use crate::errors::{oracle_arg_error, type_error, value_error};
use crate::guided::GuidedDecodingParams;

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
    /// Drop tokens less likely than `min_p` times the likeliest (after temperature); 0 keeps all.
    #[pyo3(get)]
    pub min_p: f32,
    /// Token id to a bias in [-100, 100], added to its logit.
    #[pyo3(get)]
    pub logit_bias: BTreeMap<u32, f32>,
    /// Tokens generated before an end-of-sequence or stop token may be.
    #[pyo3(get)]
    pub min_tokens: usize,
    /// `> 0`; 1 is off: divides positive (multiplies negative) logits of tokens seen so far.
    #[pyo3(get)]
    pub repetition_penalty: f32,
    /// In [-2, 2]: subtracted from a token's logit once per time it was generated.
    #[pyo3(get)]
    pub frequency_penalty: f32,
    /// In [-2, 2]: subtracted from a token's logit once it was generated.
    #[pyo3(get)]
    pub presence_penalty: f32,
    /// Tokens that end the output as eos does (even with `ignore_eos`).
    #[pyo3(get)]
    pub stop_token_ids: Vec<u32>,
    /// Keep the stop string (or the stop token's text) that ended the output.
    #[pyo3(get)]
    pub include_stop_str_in_output: bool,
    /// With `n`, each prompt token's log-probability (none for the first) and those of the `n`
    /// likeliest tokens at its position.
    #[pyo3(get)]
    pub prompt_logprobs: Option<usize>,
    /// Completions per prompt, in `1..=MAX_N`.
    #[pyo3(get)]
    pub n: usize,
    /// Keep each prompt's last this many tokens (>= 1), or -1 for `max_model_len` of them.
    #[pyo3(get)]
    pub truncate_prompt_tokens: Option<i64>,
    /// The format the output is held to, if any.
    #[pyo3(get)]
    pub guided_decoding: Option<GuidedDecodingParams>,
}

/// The most completions one prompt may ask for (`SamplingParams.n`).
pub const MAX_N: usize = 1024;

#[pymethods]
impl SamplingParams {
    /// Builds and checks the parameters; a bad value raises `ValueError` (or `TypeError` for a
    /// wrong kind) naming the parameter.
    #[new]
    #[pyo3(
        signature = (
            temperature=None, top_p=None, top_k=None, seed=None, max_tokens=None, stop=None, ignore_eos=None,
            logprobs=None, min_p=None, logit_bias=None, min_tokens=None, repetition_penalty=None,
            frequency_penalty=None, presence_penalty=None, stop_token_ids=None, include_stop_str_in_output=None,
            prompt_logprobs=None, n=None, truncate_prompt_tokens=None, guided_decoding=None
        ),
        text_signature = "(temperature=1.0, top_p=1.0, top_k=0, seed=None, max_tokens=16, stop=None, \
                          ignore_eos=False, logprobs=None, min_p=0.0, logit_bias=None, min_tokens=0, \
                          repetition_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0, \
                          stop_token_ids=None, include_stop_str_in_output=False, prompt_logprobs=None, \
                          n=1, truncate_prompt_tokens=None, guided_decoding=None)"
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
        min_p: Option<&Bound<'_, PyAny>>,
        logit_bias: Option<&Bound<'_, PyAny>>,
        min_tokens: Option<&Bound<'_, PyAny>>,
        repetition_penalty: Option<&Bound<'_, PyAny>>,
        frequency_penalty: Option<&Bound<'_, PyAny>>,
        presence_penalty: Option<&Bound<'_, PyAny>>,
        stop_token_ids: Option<&Bound<'_, PyAny>>,
        include_stop_str_in_output: Option<&Bound<'_, PyAny>>,
        prompt_logprobs: Option<&Bound<'_, PyAny>>,
        n: Option<&Bound<'_, PyAny>>,
        truncate_prompt_tokens: Option<&Bound<'_, PyAny>>,
        guided_decoding: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let temperature: f32 = scalar(temperature, 1.0, "temperature", "a float")?;
        let top_p: f32 = scalar(top_p, 1.0, "top_p", "a float")?;
        let top_k: i64 = scalar(top_k, 0, "top_k", "an integer")?;
        let seed: Option<i128> = scalar(seed, None, "seed", "an integer or None")?;
        let max_tokens: i64 = scalar(max_tokens, 16, "max_tokens", "an integer")?;
        let ignore_eos: bool = scalar(ignore_eos, false, "ignore_eos", "a bool")?;
        let logprobs: Option<i64> = scalar(logprobs, None, "logprobs", "an integer or None")?;
        let prompt_logprobs: Option<i64> = scalar(prompt_logprobs, None, "prompt_logprobs", "an integer or None")?;
        let n: i64 = scalar(n, 1, "n", "an integer")?;
        if !(1..=MAX_N as i64).contains(&n) {
            return Err(value_error("n", format!("must be in [1, {MAX_N}], got {n}")));
        }
        let truncate_prompt_tokens: Option<i64> =
            scalar(truncate_prompt_tokens, None, "truncate_prompt_tokens", "an integer or None")?;
        if let Some(k) = truncate_prompt_tokens.filter(|&k| k < 1 && k != -1) {
            return Err(value_error(
                "truncate_prompt_tokens",
                format!("must be >= 1, or -1 for max_model_len, got {k}"),
            ));
        }
        let min_p: f32 = scalar(min_p, 0.0, "min_p", "a float")?;
        let logit_bias: BTreeMap<u32, f32> =
            scalar(logit_bias, BTreeMap::new(), "logit_bias", "a dict from token ids to floats")?;
        let min_tokens: i64 = scalar(min_tokens, 0, "min_tokens", "an integer")?;
        let guided_decoding: Option<GuidedDecodingParams> =
            scalar(guided_decoding, None, "guided_decoding", "a GuidedDecodingParams or None")?;
        if guided_decoding.is_some() && min_tokens > 0 {
            // The engine's rule (a whole output allows only the end ids min_tokens masks).
            return Err(value_error("guided_decoding", "cannot be combined with min_tokens"));
        }
        let processors = LogitsProcessors {
            logit_bias: logit_bias.iter().map(|(&id, &b)| (id, b)).collect(),
            min_tokens: 0,
            repetition_penalty: scalar(repetition_penalty, 1.0, "repetition_penalty", "a float")?,
            frequency_penalty: scalar(frequency_penalty, 0.0, "frequency_penalty", "a float")?,
            presence_penalty: scalar(presence_penalty, 0.0, "presence_penalty", "a float")?,
            guide: None,
        };
        let stop_token_ids: Vec<u32> = scalar(stop_token_ids, Vec::new(), "stop_token_ids", "a list of token ids")?;
        let include_stop_str_in_output: bool =
            scalar(include_stop_str_in_output, false, "include_stop_str_in_output", "a bool")?;
        // The engine's own rules, named as the Python arguments; token ids are checked against
        // the model's vocabulary when generate queues the request.
        EngineSampling { temperature, top_p, min_p, ..EngineSampling::greedy() }
            .validate()
            .map_err(oracle_arg_error)?;
        processors.validate(u32::MAX as usize).map_err(oracle_arg_error)?;
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
        for (name, value) in [("logprobs", logprobs), ("prompt_logprobs", prompt_logprobs)] {
            if let Some(n) = value.filter(|&n| n < 0) {
                return Err(value_error(name, format!("must be >= 0 or None, got {n}")));
            }
        }
        if min_tokens < 0 || min_tokens > max_tokens {
            return Err(value_error(
                "min_tokens",
                format!("must be in [0, max_tokens = {max_tokens}], got {min_tokens}"),
            ));
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
            min_p,
            logit_bias,
            min_tokens: min_tokens as usize,
            repetition_penalty: processors.repetition_penalty,
            frequency_penalty: processors.frequency_penalty,
            presence_penalty: processors.presence_penalty,
            stop_token_ids,
            include_stop_str_in_output,
            prompt_logprobs: prompt_logprobs.map(|n| n as usize),
            n: n as usize,
            truncate_prompt_tokens,
            guided_decoding,
        })
    }

    fn __repr__(&self) -> String {
        let opt = |o: Option<String>| o.unwrap_or_else(|| "None".into());
        format!(
            "SamplingParams(temperature={:?}, top_p={:?}, top_k={}, seed={}, max_tokens={}, stop={:?}, ignore_eos={}, \
             logprobs={}, min_p={:?}, logit_bias={:?}, min_tokens={}, repetition_penalty={:?}, \
             frequency_penalty={:?}, presence_penalty={:?}, stop_token_ids={:?}, include_stop_str_in_output={}, \
             prompt_logprobs={}, n={}, truncate_prompt_tokens={}, guided_decoding={})",
            self.temperature,
            self.top_p,
            self.top_k,
            opt(self.seed.map(|s| s.to_string())),
            self.max_tokens,
            self.stop,
            if self.ignore_eos { "True" } else { "False" },
            opt(self.logprobs.map(|n| n.to_string())),
            self.min_p,
            self.logit_bias,
            self.min_tokens,
            self.repetition_penalty,
            self.frequency_penalty,
            self.presence_penalty,
            self.stop_token_ids,
            if self.include_stop_str_in_output { "True" } else { "False" },
            opt(self.prompt_logprobs.map(|n| n.to_string())),
            self.n,
            opt(self.truncate_prompt_tokens.map(|k| k.to_string())),
            opt(self.guided_decoding.as_ref().map(|g| g.__repr__())),
        )
    }
}

impl SamplingParams {
    /// `SamplingParams()`: what `generate` uses when given none.
    pub fn defaults() -> Self {
        Self::new(
            None, None, None, None, None, None, None, None, None, None, None, None, None, None, None, None, None, None,
            None, None,
        )
        .expect("the defaults are valid")
    }

    /// The engine's sampling parameters of completion `choice`: seeded `seed + choice` (as the
    /// server seeds its `n` choices), or with the next seed of `seeds` when the caller gave none.
    pub fn engine_sampling(&self, choice: usize, seeds: &mut SeedSource) -> EngineSampling {
        EngineSampling {
            temperature: self.temperature,
            top_k: self.top_k as usize,
            top_p: self.top_p,
            seed: self.seed.map_or_else(|| seeds.next(), |s| s.wrapping_add(choice as u64)),
            min_p: self.min_p,
        }
    }

    /// How many of a prompt's last tokens to keep for a model of `max_model_len`, if not all.
    pub fn prompt_tokens_kept(&self, max_model_len: usize) -> Option<usize> {
        self.truncate_prompt_tokens.map(|k| usize::try_from(k).unwrap_or(max_model_len))
    }

    /// The engine's logits processors.
    pub fn processors(&self) -> LogitsProcessors {
        LogitsProcessors {
            logit_bias: self.logit_bias.iter().map(|(&id, &b)| (id, b)).collect(),
            min_tokens: self.min_tokens,
            repetition_penalty: self.repetition_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            guide: self.guided_decoding.as_ref().map(GuidedDecodingParams::format),
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
            stop_token_ids: self.stop_token_ids.clone(),
            include_stop_str_in_output: self.include_stop_str_in_output,
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

/// Where a request that gave no seed gets one: fresh each time, or, under `LLM(seed=s)` (vLLM's
/// global seed), the next of a sequence fixed by `s`, so that a script run again draws the same.
#[derive(Clone, Copy, Debug)]
pub enum SeedSource {
    /// A counter hashed under the standard library's random per-process keys: two requests share
    /// a seed only by a 2^-64 chance.
    Fresh,
    /// SplitMix64 from `seed`, `drawn` seeds given so far.
    Fixed { seed: u64, drawn: u64 },
}

impl SeedSource {
    /// `LLM(seed=...)`'s source.
    pub fn new(seed: Option<u64>) -> Self {
        seed.map_or(SeedSource::Fresh, |seed| SeedSource::Fixed { seed, drawn: 0 })
    }

    /// The next seed.
    pub fn next(&mut self) -> u64 {
        match self {
            SeedSource::Fresh => {
                use std::sync::atomic::{AtomicU64, Ordering};
                static COUNTER: AtomicU64 = AtomicU64::new(0);
                let mut h = std::collections::hash_map::RandomState::new().build_hasher();
                h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
                h.finish()
            }
            SeedSource::Fixed { seed, drawn } => {
                *drawn += 1;
                let mut z = seed.wrapping_add(drawn.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^ (z >> 31)
            }
        }
    }
}
