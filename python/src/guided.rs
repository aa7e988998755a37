//! `asynct.GuidedDecodingParams`, vLLM's: the format `SamplingParams(guided_decoding=...)` holds
//! the output to (`oracle::decode::guide`). Two of vLLM's forms, `choice` and `json_object`; its
//! others are not arguments here, so Python refuses them by name.

use oracle::decode::guide::OutputFormat;
use pyo3::prelude::*;

use crate::args::scalar;
use crate::errors::value_error;

/// What the output must be: exactly one of `choice` and `json_object`.
#[pyclass(module = "asynct", frozen, from_py_object)]
#[derive(Clone, Debug)]
pub struct GuidedDecodingParams {
    /// Exactly one of these strings.
    #[pyo3(get)]
    choice: Option<Vec<String>>,
    /// One JSON object.
    #[pyo3(get)]
    json_object: Option<bool>,
}

#[pymethods]
impl GuidedDecodingParams {
    /// Builds and checks the format; a bad one raises `ValueError` naming the argument.
    #[new]
    #[pyo3(signature = (*, choice=None, json_object=None), text_signature = "(*, choice=None, json_object=None)")]
    fn new(choice: Option<&Bound<'_, PyAny>>, json_object: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let choice: Option<Vec<String>> = scalar(choice, None, "choice", "a list of strings or None")?;
        let json_object: Option<bool> = scalar(json_object, None, "json_object", "a bool or None")?;
        match (&choice, json_object) {
            (Some(_), Some(true)) => return Err(value_error("choice", "give choice or json_object=True, not both")),
            (None, None | Some(false)) => return Err(value_error("choice", "give choice or json_object=True")),
            _ => {}
        }
        let params = Self { choice, json_object };
        params.format().validate().map_err(|e| match e {
            oracle::Error::Invalid { reason, .. } => value_error("choice", reason),
            other => value_error("choice", other),
        })?;
        Ok(params)
    }

    pub fn __repr__(&self) -> String {
        match &self.choice {
            Some(c) => format!("GuidedDecodingParams(choice={c:?})"),
            None => "GuidedDecodingParams(json_object=True)".to_string(),
        }
    }
}

impl GuidedDecodingParams {
    /// The engine's format. `new` has checked that exactly one is given.
    pub fn format(&self) -> OutputFormat {
        match &self.choice {
            Some(c) => OutputFormat::Choice(c.clone()),
            None => OutputFormat::JsonObject,
        }
    }
}
