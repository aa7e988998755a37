//! What `LLM.generate` returns, in vLLM's shape: a `RequestOutput` per prompt holding one
//! `CompletionOutput`, with the first completion's fields also on the `RequestOutput` itself.
//!
//! Logprobs come from the logits row each token was sampled from (the engine records every row
//! when a request asks for them): the log-softmax of the raw row in f64, before temperature,
//! top-k or top-p, as vLLM reports by default. The GPU and CPU executors both hand back f32 rows.

use std::collections::BTreeMap;

use model::engine::FinishReason;
use ndarray::{Array2, ArrayView1};
use pyo3::prelude::*;
use pyo3::types::PyList;
use pyo3::IntoPyObjectExt;

/// Why a request stopped beyond `finish_reason`: the stop string found, or the eos id generated.
#[derive(Clone, Debug)]
enum StopReason {
    None,
    Text(String),
    Token(u32),
}

/// One generated sequence.
#[pyclass(module = "asynct", frozen)]
pub struct CompletionOutput {
    /// Its index among the prompt's completions (always 0: one completion per prompt).
    #[pyo3(get)]
    index: usize,
    /// The generated text, stop string excluded.
    #[pyo3(get)]
    text: String,
    /// The generated token ids, eos included.
    #[pyo3(get)]
    token_ids: Vec<u32>,
    /// "stop" (eos or a stop string), "length" (max_tokens or the model's length) or "abort"
    /// (`LLM.abort()` stopped it first).
    #[pyo3(get)]
    finish_reason: &'static str,
    stop_reason: StopReason,
    /// With `SamplingParams(logprobs=n)`: per generated token, a dict from token id to
    /// log-probability holding that token and the `n` likeliest ones; else `None`.
    #[pyo3(get)]
    logprobs: Option<Vec<BTreeMap<u32, f64>>>,
    /// The sum of the generated tokens' log-probabilities, when logprobs were asked for.
    #[pyo3(get)]
    cumulative_logprob: Option<f64>,
}

#[pymethods]
impl CompletionOutput {
    /// The stop string that ended the output, the eos token id that did, or `None`.
    #[getter]
    fn stop_reason<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match &self.stop_reason {
            StopReason::None => Ok(py.None().into_bound(py)),
            StopReason::Text(s) => s.into_bound_py_any(py),
            StopReason::Token(t) => t.into_bound_py_any(py),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "CompletionOutput(index={}, text={:?}, token_ids={:?}, finish_reason={:?})",
            self.index, self.text, self.token_ids, self.finish_reason
        )
    }
}

/// The result for one prompt.
#[pyclass(module = "asynct", frozen)]
pub struct RequestOutput {
    /// The prompt's request id in this LLM (a string, as vLLM's).
    #[pyo3(get)]
    request_id: String,
    /// The prompt text, or `None` for a token-id prompt.
    #[pyo3(get)]
    prompt: Option<String>,
    /// The prompt's token ids.
    #[pyo3(get)]
    prompt_token_ids: Vec<u32>,
    /// Whether the request ended by itself (false when aborted).
    #[pyo3(get)]
    finished: bool,
    output: Py<CompletionOutput>,
}

#[pymethods]
impl RequestOutput {
    /// The completions, a list of one.
    #[getter]
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, [self.output.clone_ref(py)])
    }

    /// The first completion's text.
    #[getter]
    fn text(&self) -> String {
        self.output.get().text.clone()
    }

    /// The first completion's token ids.
    #[getter]
    fn token_ids(&self) -> Vec<u32> {
        self.output.get().token_ids.clone()
    }

    /// The first completion's finish reason.
    #[getter]
    fn finish_reason(&self) -> &'static str {
        self.output.get().finish_reason
    }

    /// The first completion's logprobs.
    #[getter]
    fn logprobs(&self) -> Option<Vec<BTreeMap<u32, f64>>> {
        self.output.get().logprobs.clone()
    }

    fn __repr__(&self) -> String {
        let o = self.output.get();
        format!(
            "RequestOutput(request_id={:?}, prompt={:?}, text={:?}, finish_reason={:?})",
            self.request_id, self.prompt, o.text, o.finish_reason
        )
    }
}

/// Everything known about one prompt's request once generate is done with it.
pub struct Done {
    /// The engine's id.
    pub id: u64,
    /// The prompt text, when it was given as text.
    pub prompt: Option<String>,
    /// The prompt's ids.
    pub prompt_token_ids: Vec<u32>,
    /// Generated ids.
    pub token_ids: Vec<u32>,
    /// Generated text.
    pub text: String,
    /// Why it ended; `None` when aborted.
    pub finish: Option<FinishReason>,
    /// The recorded `[prompt + generated - 1, vocab]` logits, when logprobs were asked for and
    /// the request finished.
    pub logits: Option<Array2<f32>>,
    /// `SamplingParams.logprobs`.
    pub logprobs: Option<usize>,
}

impl Done {
    /// The Python object.
    pub fn into_py(self, py: Python<'_>) -> PyResult<Py<RequestOutput>> {
        let (finish_reason, stop_reason) = match &self.finish {
            None => ("abort", StopReason::None),
            Some(FinishReason::Eos) => {
                ("stop", self.token_ids.last().map_or(StopReason::None, |&t| StopReason::Token(t)))
            }
            Some(FinishReason::StopString(s)) => ("stop", StopReason::Text(s.clone())),
            Some(FinishReason::StopToken(t)) => ("stop", StopReason::Token(*t)),
            Some(r) => (r.as_openai(), StopReason::None),
        };
        let logprobs = match (self.logprobs, &self.logits) {
            (Some(top), Some(logits)) => Some(
                self.token_ids
                    .iter()
                    .enumerate()
                    .map(|(i, &token)| token_logprobs(logits.row(self.prompt_token_ids.len() - 1 + i), token, top))
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        };
        let cumulative_logprob =
            logprobs.as_ref().map(|l| l.iter().zip(&self.token_ids).map(|(m, t)| m[t]).sum::<f64>());
        let output = CompletionOutput {
            index: 0,
            text: self.text,
            token_ids: self.token_ids,
            finish_reason,
            stop_reason,
            logprobs,
            cumulative_logprob,
        };
        let request = RequestOutput {
            request_id: self.id.to_string(),
            prompt: self.prompt,
            prompt_token_ids: self.prompt_token_ids,
            finished: self.finish.is_some(),
            output: Py::new(py, output)?,
        };
        Py::new(py, request)
    }
}

/// The log-probabilities of `token` and of the `top` likeliest tokens (ties to the lower id)
/// under `row`: the oracle's float64 log-softmax of the raw row (SPEC section 5), the one the
/// server reports too. A `-inf` logit gets `-inf`.
pub fn token_logprobs(row: ArrayView1<'_, f32>, token: u32, top: usize) -> BTreeMap<u32, f64> {
    let lp = oracle::decode::token_logprobs(&row.to_vec(), token, top);
    lp.top.into_iter().chain([(token, lp.logprob)]).collect()
}
