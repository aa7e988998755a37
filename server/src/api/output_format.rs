//! The format guided decoding holds a request's output to (`oracle::decode::guide`), from any of
//! the three ways clients name one, at most one of them in a request:
//! - OpenAI's `response_format`: `{"type": "text"}` (the default: no format) or `{"type":
//!   "json_object"}`; `json_schema` is refused;
//! - vLLM's older `guided_choice: [...]` and `guided_regex: "..."`;
//! - vLLM's newer `structured_outputs`: `{"choice": [...]}`, `{"regex": "..."}` or
//!   `{"json_object": true}`; its other forms (`json`, `grammar`, `structural_tag`) are refused
//!   by name, as are vLLM's `guided_json` and `guided_grammar` ([`super::validate::UNSUPPORTED`]).

use serde_json::{Map, Value};

use oracle::decode::guide::OutputFormat;

use super::error::ApiError;
use super::validate::{show, wrong_type};

/// The format of `obj`'s fields, if any names one, with the field that named it.
pub fn output_format(obj: &Map<String, Value>) -> Result<Option<(&'static str, OutputFormat)>, ApiError> {
    let given = [
        ("response_format", response_format(obj.get("response_format"))?),
        ("guided_choice", guided_choice(obj.get("guided_choice"), "guided_choice")?.map(OutputFormat::Choice)),
        ("guided_regex", guided_regex(obj.get("guided_regex"), "guided_regex")?),
        ("structured_outputs", structured_outputs(obj.get("structured_outputs"))?),
    ];
    let mut named = given.into_iter().filter_map(|(field, format)| format.map(|f| (field, f)));
    match (named.next(), named.next()) {
        (Some((first, _)), Some((second, _))) => {
            Err(ApiError::invalid(second, format!("Give one output format: `{first}` or `{second}`, not both.")))
        }
        (one, None) => Ok(one),
        (None, Some(_)) => unreachable!("a second format without a first"),
    }
}

fn response_format(value: Option<&Value>) -> Result<Option<OutputFormat>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Object(o)) => match o.get("type").and_then(Value::as_str) {
            Some("text") => Ok(None),
            Some("json_object") => Ok(Some(OutputFormat::JsonObject)),
            _ => {
                let message = format!(
                    "`response_format` must have type \"text\" or \"json_object\" (json_schema is not supported). \
                     Given: {}",
                    show(v)
                );
                Err(ApiError::invalid("response_format", message))
            }
        },
        Some(v) => Err(wrong_type("response_format", "an object", v)),
    }
}

/// A list of strings at `path` (a refusal names its top-level field, as [`wrong_type`] does).
fn guided_choice(value: Option<&Value>, path: &str) -> Result<Option<Vec<String>>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str().map(str::to_string).ok_or_else(|| wrong_type(&format!("{path}[{i}]"), "a string", v))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(v) => Err(wrong_type(path, "a list of strings", v)),
    }
}

/// A pattern at `path` (a refusal names its top-level field).
fn guided_regex(value: Option<&Value>, path: &str) -> Result<Option<OutputFormat>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(p)) => Ok(Some(OutputFormat::Regex(p.clone()))),
        Some(v) => Err(wrong_type(path, "a string", v)),
    }
}

fn structured_outputs(value: Option<&Value>) -> Result<Option<OutputFormat>, ApiError> {
    let field = "structured_outputs";
    let o = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(o)) => o,
        Some(v) => return Err(wrong_type(field, "an object", v)),
    };
    let mut format = None;
    for (key, v) in o.iter().filter(|(_, v)| !v.is_null()) {
        let this = match (key.as_str(), v) {
            ("choice", _) => guided_choice(Some(v), "structured_outputs.choice")?.map(OutputFormat::Choice),
            ("regex", _) => guided_regex(Some(v), "structured_outputs.regex")?,
            ("json_object", Value::Bool(b)) => b.then_some(OutputFormat::JsonObject),
            ("json_object", _) => return Err(wrong_type("structured_outputs.json_object", "a boolean", v)),
            _ => {
                let message = format!(
                    "`structured_outputs.{key}` cannot be honoured: only `choice`, `regex` and `json_object` are \
                     supported. Given: {}",
                    show(v)
                );
                return Err(ApiError::invalid(field, message));
            }
        };
        if this.is_some() && format.is_some() {
            return Err(ApiError::invalid(
                field,
                "`structured_outputs` must name one format: `choice`, `regex` or `json_object`.",
            ));
        }
        format = format.or(this);
    }
    Ok(format)
}
