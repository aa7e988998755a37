//! The only way to build a [`CompletionRequest`] or [`ChatRequest`]: parse the body's JSON and
//! check every field, turning each fault into [`ApiError::invalid`] naming the field, the limit
//! and the value given (`` `temperature` must be in [0, 2]. Given: 3.5 ``).
//!
//! Fields are read from a `serde_json::Value` by hand rather than through `#[derive(Deserialize)]`
//! because serde's messages name neither the limit nor (for type errors) the field's path as a
//! client sees it. As OpenAI does, unknown fields are ignored and `null` means "not given".
//! What needs the tokenizer (the prompt's length against the model's) is checked by the route.
//!
//! Every field that would change the result is either honoured or refused with a 400 naming it
//! ([`UNSUPPORTED`]); none is accepted and ignored.

use serde_json::{Map, Value};

use model::chat_template::ROLES;
use model::engine::LogitsProcessors;

use super::error::ApiError;
use super::output_format::output_format;
use super::types::{ChatMessage, ChatRequest, CompletionRequest, Limits, Prompt, Sampling};

/// At most this many stop strings, as OpenAI allows.
pub const MAX_STOP: usize = 4;
/// At most this many bytes in one stop string: matching costs each token about the stop strings'
/// length, so this bounds it to microseconds on the engine thread.
pub const MAX_STOP_BYTES: usize = 1024;
/// At most this many chat messages, refused before the template renders them.
pub const MAX_MESSAGES: usize = 1024;
/// The largest `logprobs` / `top_logprobs`, as OpenAI allows.
pub const MAX_LOGPROBS: usize = 20;
/// At most this many `stop_token_ids`.
pub const MAX_STOP_TOKEN_IDS: usize = 1024;
/// Fields this server does not implement and that would change the result when given (OpenAI's
/// and vLLM's): each is refused, naming it, unless absent, `null` or its no-op value.
pub const UNSUPPORTED: [&str; 17] = [
    "tools",
    "tool_choice",
    "functions",
    "function_call",
    "suffix",
    "use_beam_search",
    "length_penalty",
    "guided_json",
    "guided_grammar",
    "allowed_token_ids",
    "bad_words",
    "return_tokens_as_token_ids",
    "skip_special_tokens",
    "add_generation_prompt",
    "continue_final_message",
    "chat_template",
    "chat_template_kwargs",
];

/// Which route a body is for: the fields differ a little (`echo`, `best_of` and `logprobs`' type).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    Completion,
    Chat,
}

/// Parses and validates a `/v1/completions` body.
pub fn parse_completion(body: &[u8], limits: &Limits) -> Result<CompletionRequest, ApiError> {
    let obj = object(body)?;
    let model = model(&obj)?;
    let prompt = prompt(obj.get("prompt"), limits)?;
    let logprobs = int_in(&obj, "logprobs", 0, MAX_LOGPROBS as i64)?.map(|v| v as usize);
    let sampling = sampling(&obj, limits, logprobs, Route::Completion)?;
    Ok(CompletionRequest { model, prompt, sampling })
}

/// Parses and validates a `/v1/chat/completions` body.
pub fn parse_chat(body: &[u8], limits: &Limits) -> Result<ChatRequest, ApiError> {
    let obj = object(body)?;
    let model = model(&obj)?;
    let messages = messages(obj.get("messages"), limits)?;
    let wants = boolean(&obj, "logprobs")?.unwrap_or(false);
    let top = int_in(&obj, "top_logprobs", 0, MAX_LOGPROBS as i64)?;
    if top.is_some() && !wants {
        return Err(ApiError::invalid("top_logprobs", "`top_logprobs` needs `logprobs` set to true."));
    }
    let logprobs = wants.then(|| top.unwrap_or(0) as usize);
    let sampling = sampling(&obj, limits, logprobs, Route::Chat)?;
    Ok(ChatRequest { model, messages, sampling })
}

pub(super) fn object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(obj)) => Ok(obj),
        Ok(other) => Err(ApiError::invalid(
            "body",
            format!("The body must be a JSON object. Given: {} {}", type_name(&other), show(&other)),
        )),
        Err(e) => Err(ApiError::invalid("body", format!("The body is not valid JSON: {e}"))),
    }
}

fn model(obj: &Map<String, Value>) -> Result<String, ApiError> {
    optional_model(obj)?.ok_or_else(|| ApiError::invalid("model", "`model` is required."))
}

/// The body's `model`, where given (the tokenizer routes take none, as vLLM's do).
pub(super) fn optional_model(obj: &Map<String, Value>) -> Result<Option<String>, ApiError> {
    match obj.get("model") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(wrong_type("model", "a string", v)),
    }
}

fn sampling(
    obj: &Map<String, Value>,
    limits: &Limits,
    logprobs: Option<usize>,
    route: Route,
) -> Result<Sampling, ApiError> {
    refuse_unsupported(obj, route)?;
    // `max_completion_tokens` is OpenAI's newer name; when both are given it is the one obeyed.
    let max_field = match obj.get("max_completion_tokens") {
        Some(v) if !v.is_null() => "max_completion_tokens",
        _ => "max_tokens",
    };
    let echo = match route {
        Route::Completion => boolean(obj, "echo")?.unwrap_or(false),
        Route::Chat => false,
    };
    // `max_tokens: 0` with `echo` scores the prompt alone, as OpenAI's legacy completions did.
    let least = if echo { 0 } else { 1 };
    let max_tokens = int_in(obj, max_field, least, limits.max_model_len as i64)?.map(|v| v as usize);
    let temperature = float_in(obj, "temperature", 0.0, 2.0, true)?.unwrap_or(1.0);
    let top_p = float_in(obj, "top_p", 0.0, 1.0, false)?.unwrap_or(1.0);
    let top_k = match integer(obj, "top_k")? {
        None | Some(-1) => 0,
        Some(k) if k >= 0 => usize::try_from(k).unwrap_or(usize::MAX),
        Some(k) => return Err(ApiError::invalid("top_k", format!("`top_k` must be -1 (all) or >= 0. Given: {k}"))),
    };
    let seed = match obj.get("seed") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            ApiError::invalid("seed", format!("`seed` must be an integer in [0, {}]. Given: {}", u64::MAX, show(v)))
        })?),
    };
    let n = int_in(obj, "n", 1, limits.max_n as i64)?.map_or(1, |v| v as usize);
    let stream = boolean(obj, "stream")?.unwrap_or(false);
    let best_of = match route {
        Route::Completion => int_in(obj, "best_of", 1, limits.max_n as i64)?.map_or(n, |v| v as usize),
        Route::Chat => n,
    };
    if best_of < n {
        let message = format!("`best_of` must be >= n = {n}. Given: {best_of}");
        return Err(ApiError::invalid("best_of", message));
    }
    if best_of > n && stream {
        let message = format!("`best_of` above `n` cannot stream (the best are known at the end). Given: {best_of}");
        return Err(ApiError::invalid("best_of", message));
    }
    let processors = processors(obj, limits)?;
    if let (Some(max), true) = (max_tokens, processors.min_tokens > 0) {
        if processors.min_tokens > max {
            let message = format!("`min_tokens` must be <= {max_field} = {max}. Given: {}", processors.min_tokens);
            return Err(ApiError::invalid("min_tokens", message));
        }
    }
    let truncate_prompt_tokens = truncate_prompt_tokens(obj, limits)?;
    let prompt_logprobs = int_in(obj, "prompt_logprobs", 0, MAX_LOGPROBS as i64)?.map(|v| v as usize);
    if prompt_logprobs.is_some() && stream {
        // As vLLM: they would come before any text, in a chunk OpenAI's stream has no place for.
        let message = "`prompt_logprobs` cannot stream; ask with `stream` false.";
        return Err(ApiError::invalid("prompt_logprobs", message));
    }
    let (include_usage, continuous_usage_stats) = match obj.get("stream_options") {
        None | Some(Value::Null) => (false, false),
        Some(Value::Object(opts)) => {
            let flag = |name: &str| match opts.get(name) {
                None | Some(Value::Null) => Ok(false),
                Some(Value::Bool(b)) => Ok(*b),
                Some(v) => Err(wrong_type(&format!("stream_options.{name}"), "a boolean", v)),
            };
            (flag("include_usage")?, flag("continuous_usage_stats")?)
        }
        Some(v) => return Err(wrong_type("stream_options", "an object", v)),
    };
    Ok(Sampling {
        max_tokens,
        temperature: temperature as f32,
        top_p: top_p as f32,
        top_k,
        min_p: float_in(obj, "min_p", 0.0, 1.0, true)?.unwrap_or(0.0) as f32,
        seed,
        stop: stop(obj.get("stop"))?,
        stop_token_ids: stop_token_ids(obj, limits)?,
        include_stop_str_in_output: boolean(obj, "include_stop_str_in_output")?.unwrap_or(false),
        n,
        best_of,
        ignore_eos: boolean(obj, "ignore_eos")?.unwrap_or(false),
        logprobs,
        prompt_logprobs,
        echo,
        processors,
        truncate_prompt_tokens,
        stream,
        include_usage,
        continuous_usage_stats,
    })
}

/// vLLM's `truncate_prompt_tokens`: keep a prompt's last k tokens, k in `[1, max_model_len]`, or
/// -1 for the model's length.
fn truncate_prompt_tokens(obj: &Map<String, Value>, limits: &Limits) -> Result<Option<usize>, ApiError> {
    let max = limits.max_model_len;
    match integer(obj, "truncate_prompt_tokens")? {
        None => Ok(None),
        Some(-1) => Ok(Some(max)),
        Some(k) if k >= 1 && k as u64 <= max as u64 => Ok(Some(k as usize)),
        Some(k) => Err(ApiError::invalid(
            "truncate_prompt_tokens",
            format!("`truncate_prompt_tokens` must be -1 (the model's length) or in [1, {max}]. Given: {k}"),
        )),
    }
}

/// Refuses each field of [`UNSUPPORTED`] given with an effect, and `echo` on the chat route.
pub(super) fn refuse_unsupported(obj: &Map<String, Value>, route: Route) -> Result<(), ApiError> {
    for field in UNSUPPORTED {
        let Some(v) = obj.get(field) else { continue };
        let harmless = match (field, v) {
            (_, Value::Null) => true,
            ("tools" | "functions", Value::Array(a)) => a.is_empty(),
            ("tool_choice", Value::String(s)) => s == "none",
            ("suffix", Value::String(s)) => s.is_empty(),
            ("use_beam_search" | "return_tokens_as_token_ids" | "continue_final_message", Value::Bool(b)) => !b,
            // What this server does anyway: special tokens are never rendered, the template
            // always ends with the generation prompt.
            ("skip_special_tokens" | "add_generation_prompt", Value::Bool(b)) => *b,
            _ => false,
        };
        if !harmless {
            let message = format!("`{field}` cannot be honoured: this server does not support it. Given: {}", show(v));
            return Err(ApiError::invalid(field, message));
        }
    }
    if route == Route::Chat && boolean(obj, "echo")?.unwrap_or(false) {
        return Err(ApiError::invalid("echo", "`echo` is supported on /v1/completions only. Given: true"));
    }
    Ok(())
}

/// `logit_bias`, `min_tokens` and the three penalties (SPEC 5 steps 1 to 3).
fn processors(obj: &Map<String, Value>, limits: &Limits) -> Result<LogitsProcessors, ApiError> {
    let vocab = limits.vocab_size;
    let logit_bias = match obj.get("logit_bias") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| {
                let id = k.parse::<u32>().ok().filter(|&id| (id as usize) < vocab).ok_or_else(|| {
                    let message = format!(
                        "`logit_bias` keys must be token ids in [0, {vocab}). Given: {}",
                        show(&Value::String(k.clone()))
                    );
                    ApiError::invalid("logit_bias", message)
                })?;
                let bias = v.as_f64().filter(|b| (-100.0..=100.0).contains(b)).ok_or_else(|| {
                    let message = format!("`logit_bias[\"{k}\"]` must be a number in [-100, 100]. Given: {}", show(v));
                    ApiError::invalid("logit_bias", message)
                })?;
                Ok((id, bias as f32))
            })
            .collect::<Result<_, ApiError>>()?,
        Some(v) => return Err(wrong_type("logit_bias", "an object from token ids to biases", v)),
    };
    let repetition_penalty = match float_in(obj, "repetition_penalty", 0.0, f64::INFINITY, false)? {
        Some(r) if !(r as f32).is_finite() || r as f32 <= 0.0 => {
            let message = format!("`repetition_penalty` must be a finite number > 0. Given: {r}");
            return Err(ApiError::invalid("repetition_penalty", message));
        }
        r => r.map_or(1.0, |r| r as f32),
    };
    let processors = LogitsProcessors {
        logit_bias,
        min_tokens: int_in(obj, "min_tokens", 0, limits.max_model_len as i64)?.map_or(0, |v| v as usize),
        repetition_penalty,
        frequency_penalty: float_in(obj, "frequency_penalty", -2.0, 2.0, true)?.unwrap_or(0.0) as f32,
        presence_penalty: float_in(obj, "presence_penalty", -2.0, 2.0, true)?.unwrap_or(0.0) as f32,
        guide: None,
    };
    match output_format(obj)? {
        None => Ok(processors),
        Some((field, format)) => {
            // The format's own rules and its bar on min_tokens, the engine's, refused here first
            // and named as the request named the format; a regex compiles within its bounds
            // (tens of milliseconds at most) or is refused before it reaches the engine.
            let named = |e: oracle::Error| ApiError::invalid(field, e.to_string());
            format.compiles().map_err(named)?;
            let processors = LogitsProcessors { guide: Some(format), ..processors };
            processors.validate(limits.vocab_size).map_err(named)?;
            Ok(processors)
        }
    }
}

fn stop_token_ids(obj: &Map<String, Value>, limits: &Limits) -> Result<Vec<u32>, ApiError> {
    let items = match obj.get("stop_token_ids") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(v) => return Err(wrong_type("stop_token_ids", "a list of token ids", v)),
    };
    if items.len() > MAX_STOP_TOKEN_IDS {
        let message = format!("`stop_token_ids` may hold at most {MAX_STOP_TOKEN_IDS} ids. Given: {}", items.len());
        return Err(ApiError::invalid("stop_token_ids", message));
    }
    token_ids(items, "stop_token_ids", limits)
}

fn stop(value: Option<&Value>) -> Result<Vec<String>, ApiError> {
    let list = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => {
            if items.len() > MAX_STOP {
                return Err(ApiError::invalid(
                    "stop",
                    format!("`stop` may hold at most {MAX_STOP} strings. Given: {}", items.len()),
                ));
            }
            let strings = items.iter().enumerate().map(|(i, v)| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(wrong_type(&format!("stop[{i}]"), "a string", other)),
            });
            strings.collect::<Result<_, _>>()?
        }
        Some(v) => return Err(wrong_type("stop", "a string or a list of strings", v)),
    };
    if list.iter().any(String::is_empty) {
        return Err(ApiError::invalid("stop", "`stop` strings must not be empty. Given: \"\""));
    }
    if let Some((i, s)) = list.iter().enumerate().find(|(_, s)| s.len() > MAX_STOP_BYTES) {
        return Err(ApiError::invalid(
            "stop",
            format!("`stop[{i}]` may be at most {MAX_STOP_BYTES} bytes long. Given: {} bytes", s.len()),
        ));
    }
    Ok(list)
}

fn prompt(value: Option<&Value>, limits: &Limits) -> Result<Prompt, ApiError> {
    let empty = || ApiError::invalid("prompt", "`prompt` must not be empty.");
    let items = match value {
        None | Some(Value::Null) => return Err(ApiError::invalid("prompt", "`prompt` is required.")),
        Some(Value::String(s)) if s.is_empty() => return Err(empty()),
        Some(Value::String(s)) => return Ok(Prompt::Text(prompt_text(s, "prompt", limits)?)),
        Some(Value::Array(items)) if items.is_empty() => return Err(empty()),
        Some(Value::Array(items)) => items,
        Some(v) => return Err(wrong_type("prompt", "a string, a list of strings or a list of token ids", v)),
    };
    // The first element decides the form; every other must match it.
    match &items[0] {
        Value::String(_) => {
            let texts = items.iter().enumerate().map(|(i, v)| match v {
                Value::String(s) if s.is_empty() => {
                    Err(ApiError::invalid("prompt", format!("`prompt[{i}]` must not be empty.")))
                }
                Value::String(s) => prompt_text(s, &format!("prompt[{i}]"), limits),
                other => Err(wrong_type(&format!("prompt[{i}]"), "a string like prompt[0]", other)),
            });
            Ok(Prompt::Texts(texts.collect::<Result<_, _>>()?))
        }
        Value::Number(_) => Ok(Prompt::Ids(token_ids(items, "prompt", limits)?)),
        Value::Array(_) => {
            let lists = items.iter().enumerate().map(|(i, v)| {
                let path = format!("prompt[{i}]");
                match v {
                    Value::Array(ids) if ids.is_empty() => {
                        Err(ApiError::invalid("prompt", format!("`{path}` must not be empty.")))
                    }
                    Value::Array(ids) => token_ids(ids, &path, limits),
                    other => Err(wrong_type(&path, "a list of token ids like prompt[0]", other)),
                }
            });
            Ok(Prompt::IdLists(lists.collect::<Result<_, _>>()?))
        }
        other => Err(wrong_type("prompt[0]", "a string, a token id or a list of token ids", other)),
    }
}

/// `text`, refused by its length before anything tokenises it.
pub(super) fn prompt_text(text: &str, path: &str, limits: &Limits) -> Result<String, ApiError> {
    let chars = text.chars().count();
    if chars > limits.max_prompt_chars {
        return Err(ApiError::invalid(
            "prompt",
            format!("`{path}` may hold at most {} characters. Given: {chars}", limits.max_prompt_chars),
        ));
    }
    Ok(text.to_string())
}

pub(super) fn token_ids(items: &[Value], path: &str, limits: &Limits) -> Result<Vec<u32>, ApiError> {
    let vocab = limits.vocab_size;
    items
        .iter()
        .enumerate()
        .map(|(i, v)| match v.as_u64() {
            Some(id) if id < vocab as u64 => Ok(id as u32),
            _ => Err(ApiError::invalid(
                field_of(path),
                format!("`{path}[{i}]` must be a token id in [0, {vocab}). Given: {}", show(v)),
            )),
        })
        .collect()
}

pub(super) fn messages(value: Option<&Value>, limits: &Limits) -> Result<Vec<ChatMessage>, ApiError> {
    let items = match value {
        None | Some(Value::Null) => return Err(ApiError::invalid("messages", "`messages` is required.")),
        Some(Value::Array(items)) if items.is_empty() => {
            return Err(ApiError::invalid("messages", "`messages` must hold at least one message. Given: []"))
        }
        Some(Value::Array(items)) => items,
        Some(v) => return Err(wrong_type("messages", "a list of messages", v)),
    };
    if items.len() > MAX_MESSAGES {
        let message = format!("`messages` may hold at most {MAX_MESSAGES} messages. Given: {}", items.len());
        return Err(ApiError::invalid("messages", message));
    }
    let messages: Vec<ChatMessage> = items.iter().enumerate().map(|(i, v)| message(i, v)).collect::<Result<_, _>>()?;
    let chars: usize = messages.iter().map(|m| m.content.chars().count()).sum();
    if chars > limits.max_prompt_chars {
        let message = format!(
            "`messages` may hold at most {} characters of content together. Given: {chars}",
            limits.max_prompt_chars
        );
        return Err(ApiError::invalid("messages", message));
    }
    Ok(messages)
}

fn message(i: usize, value: &Value) -> Result<ChatMessage, ApiError> {
    let Value::Object(msg) = value else {
        return Err(wrong_type(&format!("messages[{i}]"), "an object", value));
    };
    let role = match msg.get("role") {
        Some(Value::String(r)) if ROLES.contains(&r.as_str()) => r.as_str(),
        Some(v @ Value::String(_)) => {
            let message = format!("`messages[{i}].role` must be one of {}. Given: {}", ROLES.join(", "), show(v));
            return Err(ApiError::invalid("messages", message));
        }
        None | Some(Value::Null) => {
            return Err(ApiError::invalid("messages", format!("`messages[{i}].role` is required.")))
        }
        Some(v) => return Err(wrong_type(&format!("messages[{i}].role"), "a string", v)),
    };
    let path = format!("messages[{i}].content");
    let content = match msg.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => text_parts(parts, &path)?,
        // An assistant turn that only called tools has no content.
        None | Some(Value::Null) if role == "assistant" => String::new(),
        None | Some(Value::Null) => return Err(ApiError::invalid("messages", format!("`{path}` is required."))),
        Some(v) => return Err(wrong_type(&path, "a string or a list of text parts", v)),
    };
    Ok(ChatMessage::new(role, content).expect("a role of ROLES"))
}

/// Joins `{"type": "text", "text": ...}` parts with newlines, as vLLM does; other kinds of part
/// (images, audio) are refused rather than silently dropped.
fn text_parts(parts: &[Value], path: &str) -> Result<String, ApiError> {
    let texts = parts.iter().enumerate().map(|(j, part)| {
        let here = format!("{path}[{j}]");
        let kind = part.get("type").and_then(Value::as_str);
        match (kind, part.get("text")) {
            (Some("text"), Some(Value::String(t))) => Ok(t.as_str()),
            (Some("text"), other) => {
                Err(wrong_type(&format!("{here}.text"), "a string", other.unwrap_or(&Value::Null)))
            }
            _ => Err(ApiError::invalid(
                "messages",
                format!("`{here}` must be a part of type \"text\" (only text is supported). Given: {}", show(part)),
            )),
        }
    });
    Ok(texts.collect::<Result<Vec<_>, _>>()?.join("\n"))
}

fn integer(obj: &Map<String, Value>, field: &str) -> Result<Option<i64>, ApiError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_i64() {
            Some(i) => Ok(Some(i)),
            None if v.as_u64().is_some() => Ok(Some(i64::MAX)),
            None => Err(wrong_type(field, "an integer", v)),
        },
    }
}

fn int_in(obj: &Map<String, Value>, field: &str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
    match integer(obj, field)? {
        Some(i) if i < lo => Err(ApiError::invalid(field, format!("`{field}` must be >= {lo}. Given: {i}"))),
        Some(i) if i > hi => {
            Err(ApiError::invalid(field, format!("`{field}` must be <= {hi}. Given: {}", shown(obj, field))))
        }
        other => Ok(other),
    }
}

/// A number in `[lo, hi]`, or `(lo, hi]` when `lo_inclusive` is false; `hi` may be infinite.
fn float_in(
    obj: &Map<String, Value>,
    field: &str,
    lo: f64,
    hi: f64,
    lo_inclusive: bool,
) -> Result<Option<f64>, ApiError> {
    let v = match obj.get(field) {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v.as_f64().ok_or_else(|| wrong_type(field, "a number", v))?,
    };
    let above_lo = if lo_inclusive { v >= lo } else { v > lo };
    if above_lo && v <= hi {
        Ok(Some(v))
    } else {
        let open = if lo_inclusive { '[' } else { '(' };
        let range = if hi.is_finite() { format!("{open}{lo}, {hi}]") } else { format!("{open}{lo}, inf)") };
        let message = format!("`{field}` must be in {range}. Given: {}", shown(obj, field));
        Err(ApiError::invalid(field, message))
    }
}

pub(super) fn boolean(obj: &Map<String, Value>, field: &str) -> Result<Option<bool>, ApiError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(wrong_type(field, "a boolean", v)),
    }
}

pub(super) fn wrong_type(path: &str, expected: &str, given: &Value) -> ApiError {
    let message = format!("`{path}` must be {expected}. Given: {} {}", type_name(given), show(given));
    ApiError::invalid(field_of(path), message)
}

/// The request field a value's path lies in: `prompt` of `prompt[2][0]`, `stream_options` of
/// `stream_options.include_usage`.
fn field_of(path: &str) -> &str {
    path.split(['[', '.']).next().unwrap_or(path)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn shown(obj: &Map<String, Value>, field: &str) -> String {
    obj.get(field).map_or_else(String::new, show)
}

/// The value as JSON, cut short: a hostile body must not be echoed back whole.
pub(super) fn show(v: &Value) -> String {
    const MAX_CHARS: usize = 80;
    let text = v.to_string();
    match text.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
