//! What `LLM.generate` returns, in vLLM's shape: a `RequestOutput` per prompt holding its
//! `SamplingParams.n` `CompletionOutput`s, with the first one's fields also on the
//! `RequestOutput` itself.
//!
//! Logprobs come from the logits row each token was sampled from (the engine scores the rows of
//! the requests that ask, as for the server's `logprobs`): the log-softmax of the raw row in
//! f64, before temperature, top-k or top-p, as vLLM reports by default. An aborted request keeps
//! the logprobs of the tokens it generated. Each is a [`Logprob`], vLLM's: the log-probability,
//! the token's rank in its row (from 1, larger logit first, ties to the lower id) and its text.

use std::collections::BTreeMap;

use model::engine::FinishReason;
use oracle::decode::logprobs::{token_text, TokenLogprobs};
use pyo3::prelude::*;
use pyo3::types::PyList;
use pyo3::IntoPyObjectExt;
use tokenizers::Tokenizer;

/// Why a request stopped beyond `finish_reason`: the stop string found, or the eos id generated.
#[derive(Clone, Debug)]
enum StopReason {
    None,
    Text(String),
    Token(u32),
}

/// vLLM's `Logprob`: one token of a position's logprobs.
#[pyclass(module = "asynct", frozen, eq)]
#[derive(Clone, Debug, PartialEq)]
pub struct Logprob {
    /// The float64 log-softmax of the raw row at the token (`-inf` where its logit is).
    #[pyo3(get)]
    logprob: f64,
    /// Its place in the row, from 1: the k-th likeliest has rank k.
    #[pyo3(get)]
    rank: u32,
    /// Its id decoded alone (special tokens kept).
    #[pyo3(get)]
    decoded_token: String,
}

#[pymethods]
impl Logprob {
    fn __repr__(&self) -> String {
        format!("Logprob(logprob={:?}, rank={}, decoded_token={:?})", self.logprob, self.rank, self.decoded_token)
    }
}

/// One position's logprobs as vLLM's Python dict: the `top` likeliest tokens and the token
/// itself, each id to its [`Logprob`].
type LogprobDict = BTreeMap<u32, Logprob>;

/// One generated sequence.
#[pyclass(module = "asynct", frozen)]
pub struct CompletionOutput {
    /// Its index among the prompt's completions, `0 .. SamplingParams.n`.
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
    /// With `SamplingParams(logprobs=n)`: per generated token, a dict from token id to its
    /// [`Logprob`] holding that token and the `n` likeliest ones; else `None`.
    #[pyo3(get)]
    logprobs: Option<Vec<LogprobDict>>,
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
    /// With `SamplingParams(prompt_logprobs=n)`: per prompt token, `None` for the first, then a
    /// dict from token id to its [`Logprob`] holding that token and the `n` likeliest at its
    /// position; else `None` (and for a request aborted before its prompt was scored).
    #[pyo3(get)]
    prompt_logprobs: Option<Vec<Option<LogprobDict>>>,
    /// Its `n` completions, in order; never empty.
    outputs: Vec<Py<CompletionOutput>>,
}

#[pymethods]
impl RequestOutput {
    /// The completions, `SamplingParams.n` of them.
    #[getter]
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.outputs.iter().map(|o| o.clone_ref(py)))
    }

    /// The first completion's text.
    #[getter]
    fn text(&self) -> String {
        self.first().text.clone()
    }

    /// The first completion's token ids.
    #[getter]
    fn token_ids(&self) -> Vec<u32> {
        self.first().token_ids.clone()
    }

    /// The first completion's finish reason.
    #[getter]
    fn finish_reason(&self) -> &'static str {
        self.first().finish_reason
    }

    /// The first completion's logprobs.
    #[getter]
    fn logprobs(&self) -> Option<Vec<LogprobDict>> {
        self.first().logprobs.clone()
    }

    fn __repr__(&self) -> String {
        let o = self.first();
        format!(
            "RequestOutput(request_id={:?}, prompt={:?}, text={:?}, finish_reason={:?})",
            self.request_id, self.prompt, o.text, o.finish_reason
        )
    }
}

impl RequestOutput {
    /// The first completion, whose fields the request's own getters show.
    fn first(&self) -> &CompletionOutput {
        self.outputs[0].get()
    }
}

/// Everything known about one prompt's requests once generate is done with them.
pub struct Done {
    /// The engine's id of its first choice.
    pub id: u64,
    /// The prompt text, when it was given as text.
    pub prompt: Option<String>,
    /// The prompt's ids.
    pub prompt_token_ids: Vec<u32>,
    /// Each prompt token's logprobs (`None` for the first), when `SamplingParams.prompt_logprobs`
    /// asked for them and the engine scored them.
    pub prompt_logprobs: Option<Vec<Option<TokenLogprobs>>>,
    /// Its `n` choices, in order; at least one.
    pub choices: Vec<Choice>,
}

/// One choice of a prompt.
pub struct Choice {
    /// Generated ids.
    pub token_ids: Vec<u32>,
    /// Generated text.
    pub text: String,
    /// Why it ended; `None` when aborted.
    pub finish: Option<FinishReason>,
    /// Each generated token's logprobs, when `SamplingParams.logprobs` asked for them: the
    /// engine's, from the raw logits row the token was drawn from.
    pub logprobs: Option<Vec<TokenLogprobs>>,
}

impl Choice {
    /// The Python object of choice `index`.
    fn into_py(self, py: Python<'_>, tokenizer: &Tokenizer, index: usize) -> PyResult<Py<CompletionOutput>> {
        let (finish_reason, stop_reason) = match &self.finish {
            None => ("abort", StopReason::None),
            Some(FinishReason::Eos) => {
                ("stop", self.token_ids.last().map_or(StopReason::None, |&t| StopReason::Token(t)))
            }
            Some(FinishReason::StopString(s)) => ("stop", StopReason::Text(s.clone())),
            Some(FinishReason::StopToken(t)) => ("stop", StopReason::Token(*t)),
            Some(r) => (r.as_openai(), StopReason::None),
        };
        let cumulative_logprob = self.logprobs.as_ref().map(|l| l.iter().map(|lp| lp.logprob).sum::<f64>());
        let logprobs = self.logprobs.map(|l| l.iter().map(|lp| as_dict(tokenizer, lp)).collect::<Vec<_>>());
        let output = CompletionOutput {
            index,
            text: self.text,
            token_ids: self.token_ids,
            finish_reason,
            stop_reason,
            logprobs,
            cumulative_logprob,
        };
        Py::new(py, output)
    }
}

impl Done {
    /// The Python object; `tokenizer` names the logprobs' tokens.
    pub fn into_py(self, py: Python<'_>, tokenizer: &Tokenizer) -> PyResult<Py<RequestOutput>> {
        let finished = self.choices.iter().all(|c| c.finish.is_some());
        let outputs = self
            .choices
            .into_iter()
            .enumerate()
            .map(|(i, c)| c.into_py(py, tokenizer, i))
            .collect::<PyResult<Vec<_>>>()?;
        let request = RequestOutput {
            request_id: self.id.to_string(),
            prompt: self.prompt,
            prompt_token_ids: self.prompt_token_ids,
            finished,
            prompt_logprobs: self
                .prompt_logprobs
                .map(|l| l.iter().map(|lp| lp.as_ref().map(|lp| as_dict(tokenizer, lp))).collect()),
            outputs,
        };
        Py::new(py, request)
    }
}

/// A position's logprobs as vLLM's Python dict (SPEC section 5's float64 log-softmax of the raw
/// row, the one the server reports too): the `top` likeliest, ranked 1 on, and the token itself.
fn as_dict(tokenizer: &Tokenizer, lp: &TokenLogprobs) -> LogprobDict {
    let named = |(id, logprob, rank)| (id, Logprob { logprob, rank, decoded_token: token_text(tokenizer, id) });
    lp.ranked().map(named).collect()
}
