//! Reading `LLM.generate`'s `prompts` and `sampling_params` into one checked request per prompt.
//!
//! `prompts` is a string, a list of token ids (one prompt), or a list whose items are each a
//! string, a list of token ids, or vLLM's `{"prompt": str}` / `{"prompt_token_ids": [...]}`.
//! Text is tokenised as `asynct generate --prompt` does (no special tokens added), then cut to
//! its `SamplingParams.truncate_prompt_tokens` ([`fit_prompts`]). Every prompt is checked before
//! any reaches the engine, so a bad one leaves nothing half queued.

use model::engine::keep_last_tokens;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use tokenizers::Tokenizer;

use crate::args::describe;
use crate::errors::{type_error, value_error};
use crate::sampling::SamplingParams;

/// One prompt, tokenised and checked.
pub struct Prompt {
    /// The text, when given as text.
    pub text: Option<String>,
    /// Its token ids, non-empty and inside the vocabulary.
    pub ids: Vec<u32>,
}

/// What the model allows a prompt.
pub struct Limits<'a> {
    /// The tokenizer for text prompts.
    pub tokenizer: &'a Tokenizer,
    /// Token ids must be below it.
    pub vocab_size: usize,
}

/// Every prompt of `prompts`, tokenised and checked but for its length ([`fit_prompts`]).
pub fn parse_prompts(prompts: &Bound<'_, PyAny>, limits: &Limits<'_>) -> PyResult<Vec<Prompt>> {
    let one = prompts.is_instance_of::<PyString>() || prompts.is_instance_of::<PyDict>() || is_token_list(prompts);
    let items: Vec<Bound<'_, PyAny>> = if one {
        vec![prompts.clone()]
    } else {
        let iter = prompts.try_iter().map_err(|_| {
            type_error(
                "prompts",
                format!("expected a string, a list of token ids, or a list of either, got {}", describe(prompts)),
            )
        })?;
        iter.collect::<PyResult<_>>()?
    };
    items.iter().enumerate().map(|(i, item)| parse_one(item, &format!("prompts[{i}]"), limits)).collect()
}

/// Whether `obj` is a non-empty sequence whose first item is an integer: then it is one prompt.
fn is_token_list(obj: &Bound<'_, PyAny>) -> bool {
    !obj.is_instance_of::<PyString>() && obj.get_item(0).is_ok_and(|first| first.extract::<i64>().is_ok())
}

fn parse_one(item: &Bound<'_, PyAny>, arg: &str, limits: &Limits<'_>) -> PyResult<Prompt> {
    let (text, ids) = if let Ok(s) = item.cast::<PyString>() {
        let text = s.to_cow()?.into_owned();
        let enc = limits
            .tokenizer
            .encode(text.as_str(), false)
            .map_err(|e| value_error(arg, format!("cannot be tokenised: {e}")))?;
        (Some(text), enc.get_ids().to_vec())
    } else if let Ok(d) = item.cast::<PyDict>() {
        return parse_dict(d, arg, limits);
    } else {
        let ids = item.extract::<Vec<i64>>().map_err(|_| {
            type_error(arg, format!("expected a string or a list of token ids, got {}", describe(item)))
        })?;
        (None, checked_ids(&ids, arg, limits.vocab_size)?)
    };
    if ids.is_empty() {
        return Err(value_error(arg, "is empty; a prompt needs at least one token"));
    }
    Ok(Prompt { text, ids })
}

/// Each prompt cut to the last `truncate_prompt_tokens` of its ids (its text kept, as vLLM keeps
/// it), then refused unless it leaves room to generate within `max_model_len`.
pub fn fit_prompts(mut prompts: Vec<Prompt>, params: &[SamplingParams], max_model_len: usize) -> PyResult<Vec<Prompt>> {
    for (i, (prompt, p)) in prompts.iter_mut().zip(params).enumerate() {
        if let Some(keep) = p.prompt_tokens_kept(max_model_len) {
            keep_last_tokens(&mut prompt.ids, keep);
        }
        if prompt.ids.len() >= max_model_len {
            return Err(value_error(
                &format!("prompts[{i}]"),
                format!(
                    "has {} tokens, leaving no room to generate within max_model_len {max_model_len}",
                    prompt.ids.len()
                ),
            ));
        }
    }
    Ok(prompts)
}

/// vLLM's `TextPrompt` and `TokensPrompt` dicts.
fn parse_dict(d: &Bound<'_, PyDict>, arg: &str, limits: &Limits<'_>) -> PyResult<Prompt> {
    match (d.get_item("prompt")?, d.get_item("prompt_token_ids")?) {
        (Some(p), None) if p.is_instance_of::<PyString>() => parse_one(&p, arg, limits),
        (None, Some(ids)) if !ids.is_instance_of::<PyString>() => parse_one(&ids, arg, limits),
        _ => Err(type_error(arg, "a dict prompt holds either \"prompt\" (a string) or \"prompt_token_ids\" (a list)")),
    }
}

fn checked_ids(ids: &[i64], arg: &str, vocab_size: usize) -> PyResult<Vec<u32>> {
    if let Some((j, id)) = ids.iter().enumerate().find(|(_, &id)| id < 0 || id as usize >= vocab_size) {
        return Err(value_error(arg, format!("token {j} is id {id}, outside the vocabulary of {vocab_size}")));
    }
    Ok(ids.iter().map(|&id| id as u32).collect())
}

/// One `SamplingParams` per prompt: the defaults, one for all, or a list of one each.
pub fn parse_sampling(params: Option<&Bound<'_, PyAny>>, num_prompts: usize) -> PyResult<Vec<SamplingParams>> {
    let Some(params) = params.filter(|p| !p.is_none()) else {
        return Ok(vec![SamplingParams::defaults(); num_prompts]);
    };
    if let Ok(one) = params.cast::<SamplingParams>() {
        return Ok(vec![one.get().clone(); num_prompts]);
    }
    let wrong = || {
        type_error("sampling_params", format!("expected SamplingParams or a list of them, got {}", describe(params)))
    };
    let list: Vec<SamplingParams> = params
        .try_iter()
        .map_err(|_| wrong())?
        .map(|p| p.and_then(|p| p.cast::<SamplingParams>().map(|s| s.get().clone()).map_err(|_| wrong())))
        .collect::<PyResult<_>>()?;
    if list.len() != num_prompts {
        return Err(value_error(
            "sampling_params",
            format!("has {} entries for {num_prompts} prompts; give one SamplingParams or one per prompt", list.len()),
        ));
    }
    Ok(list)
}
