//! `asynct.GuidedDecodingParams`, vLLM's: the format `SamplingParams(guided_decoding=...)` holds
//! the output to (`oracle::decode::guide`). Three of vLLM's forms, `choice`, `regex` and
//! `json_object`; its others are not arguments here, so Python refuses them by name.

use oracle::decode::guide::OutputFormat;
use pyo3::prelude::*;

use crate::args::scalar;
use crate::errors::value_error;

/// What the output must be: exactly one of `choice`, `regex` and `json_object`.
#[pyclass(module = "asynct", frozen, from_py_object)]
#[derive(Clone, Debug)]
pub struct GuidedDecodingParams {
    /// Exactly one of these strings.
    #[pyo3(get)]
    choice: Option<Vec<String>>,
    /// A whole match of this regular expression.
    #[pyo3(get)]
    regex: Option<String>,
    /// One JSON object.
    #[pyo3(get)]
    json_object: Option<bool>,
}

#[pymethods]
impl GuidedDecodingParams {
    /// Builds and checks the format; a bad one raises `ValueError` naming the argument.
    #[new]
    #[pyo3(
        signature = (*, choice=None, regex=None, json_object=None),
        text_signature = "(*, choice=None, regex=None, json_object=None)"
    )]
    fn new(
        choice: Option<&Bound<'_, PyAny>>,
        regex: Option<&Bound<'_, PyAny>>,
        json_object: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let choice: Option<Vec<String>> = scalar(choice, None, "choice", "a list of strings or None")?;
        let regex: Option<String> = scalar(regex, None, "regex", "a string or None")?;
        let json_object: Option<bool> = scalar(json_object, None, "json_object", "a bool or None")?;
        let given =
            usize::from(choice.is_some()) + usize::from(regex.is_some()) + usize::from(json_object == Some(true));
        if given != 1 {
            return Err(value_error("choice", "give exactly one of choice, regex and json_object=True"));
        }
        let params = Self { choice, regex, json_object };
        let name = if params.regex.is_some() { "regex" } else { "choice" };
        let format = params.format();
        format.validate().and_then(|()| format.compiles()).map_err(|e| match e {
            oracle::Error::Invalid { reason, .. } => value_error(name, reason),
            other => value_error(name, other),
        })?;
        Ok(params)
    }

    /// vLLM's form of the one format given.
    pub fn __repr__(&self) -> String {
        match (&self.choice, &self.regex) {
            (Some(c), _) => format!("GuidedDecodingParams(choice={c:?})"),
            (None, Some(r)) => format!("GuidedDecodingParams(regex={r:?})"),
            (None, None) => "GuidedDecodingParams(json_object=True)".to_string(),
        }
    }
}

impl GuidedDecodingParams {
    /// The engine's format. `new` has checked that exactly one is given.
    pub fn format(&self) -> OutputFormat {
        match (&self.choice, &self.regex) {
            (Some(c), _) => OutputFormat::Choice(c.clone()),
            (None, Some(r)) => OutputFormat::Regex(r.clone()),
            (None, None) => OutputFormat::JsonObject,
        }
    }
}
