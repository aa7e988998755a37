//! Reading `LLM.chat`'s `messages` into conversations of [`ChatMessage`]s, as the server reads a
//! chat request's `messages`: one conversation (a list of message dicts) or several (a list of
//! such lists), each message a dict with a `role` of [`ROLES`] and a `content` that is a string,
//! or a list of `{"type": "text", "text": ...}` parts (joined with newlines), or `None` for an
//! assistant turn. Each conversation is then rendered with the checkpoint's chat template.

use model::chat_template::{ChatMessage, ROLES};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::args::describe;
use crate::errors::{type_error, value_error};

/// The conversations of `messages`, each non-empty.
pub fn parse_conversations(messages: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<ChatMessage>>> {
    let items = list(messages, "messages", "a list of message dicts, or a list of such lists")?;
    let Some(first) = items.first() else {
        return Err(value_error("messages", "is empty; a conversation needs at least one message"));
    };
    if first.is_instance_of::<PyDict>() {
        return Ok(vec![conversation(&items, "messages")?]);
    }
    items
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let path = format!("messages[{i}]");
            let c = list(c, &path, "a list of message dicts like messages[0]")?;
            if c.is_empty() {
                return Err(value_error(&path, "is empty; a conversation needs at least one message"));
            }
            conversation(&c, &path)
        })
        .collect()
}

/// `obj`'s items, where it is a sequence other than a string or a dict.
fn list<'py>(obj: &Bound<'py, PyAny>, path: &str, expected: &str) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let wrong = || type_error(path, format!("expected {expected}, got {}", describe(obj)));
    if obj.is_instance_of::<PyString>() || obj.is_instance_of::<PyDict>() {
        return Err(wrong());
    }
    obj.try_iter().map_err(|_| wrong())?.collect()
}

fn conversation(items: &[Bound<'_, PyAny>], path: &str) -> PyResult<Vec<ChatMessage>> {
    items.iter().enumerate().map(|(j, m)| message(m, &format!("{path}[{j}]"))).collect()
}

fn message(item: &Bound<'_, PyAny>, path: &str) -> PyResult<ChatMessage> {
    let d = item.cast::<PyDict>().map_err(|_| type_error(path, format!("expected a dict, got {}", describe(item))))?;
    let role: String = match d.get_item("role")? {
        Some(r) => r.extract().map_err(|_| type_error(&format!("{path}.role"), "expected a string"))?,
        None => return Err(value_error(path, "has no \"role\"")),
    };
    let content_path = format!("{path}.content");
    let content = match d.get_item("content")? {
        Some(c) if c.is_instance_of::<PyString>() => c.extract::<String>()?,
        // An assistant turn that only called tools has no content.
        None if role == "assistant" => String::new(),
        Some(c) if c.is_none() && role == "assistant" => String::new(),
        None => return Err(value_error(path, "has no \"content\"")),
        Some(c) if c.is_none() => {
            return Err(value_error(&content_path, "is None; only an assistant turn may have none"))
        }
        Some(c) => text_parts(&c, &content_path)?,
    };
    ChatMessage::new(&role, content).ok_or_else(|| {
        value_error(&format!("{path}.role"), format!("must be one of {}, got {role:?}", ROLES.join(", ")))
    })
}

/// A list of `{"type": "text", "text": str}` parts, joined with newlines as the server joins them.
fn text_parts(parts: &Bound<'_, PyAny>, path: &str) -> PyResult<String> {
    let texts = list(parts, path, "a string or a list of text parts")?
        .iter()
        .enumerate()
        .map(|(k, part)| {
            let here = format!("{path}[{k}]");
            let wrong =
                || value_error(&here, "must be a dict {\"type\": \"text\", \"text\": str} (only text is supported)");
            let d = part.cast::<PyDict>().map_err(|_| wrong())?;
            let kind: Option<String> = d.get_item("type")?.and_then(|t| t.extract().ok());
            match (kind.as_deref(), d.get_item("text")?) {
                (Some("text"), Some(t)) => {
                    t.extract::<String>().map_err(|_| type_error(&format!("{here}.text"), "expected a string"))
                }
                _ => Err(wrong()),
            }
        })
        .collect::<PyResult<Vec<String>>>()?;
    Ok(texts.join("\n"))
}
