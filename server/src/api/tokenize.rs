//! vLLM's `/tokenize` and `/detokenize` bodies: the token ids the generation routes would feed
//! the model for a prompt or a chat, and the text of a list of ids. They share the generation
//! routes' parsing, so a prompt is read, bounded and refused exactly as there.
//!
//! `/tokenize` takes `prompt` (a string, tokenised as `/v1/completions` tokenises it: no special
//! tokens added) or `messages` (rendered with the chat template and its generation prompt, as
//! `/v1/chat/completions` renders them, with the same refusals), and `return_token_strs` for each
//! id's vocabulary piece. `/detokenize` takes `tokens`, each in the vocabulary and no more of them
//! than a prompt may have characters, and decodes them with special tokens kept. `model` is optional on both, as in vLLM; given, it must be the
//! served one.

use serde::Serialize;
use serde_json::Value;

use super::error::ApiError;
use super::types::{ChatMessage, Limits};
use super::validate::{
    boolean, messages, object, optional_model, prompt_text, refuse_unsupported, token_ids, wrong_type, Route,
};

/// What `/tokenize` tokenises.
#[derive(Clone, Debug, PartialEq)]
pub enum TokenizeInput {
    /// A completion's prompt text.
    Prompt(String),
    /// A chat, rendered with the template first.
    Messages(Vec<ChatMessage>),
}

/// A validated `/tokenize` body.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenizeRequest {
    /// The model named, if any.
    pub model: Option<String>,
    /// The text or chat.
    pub input: TokenizeInput,
    /// Whether the answer lists each id's vocabulary piece.
    pub return_token_strs: bool,
}

/// A validated `/detokenize` body.
#[derive(Clone, Debug, PartialEq)]
pub struct DetokenizeRequest {
    /// The model named, if any.
    pub model: Option<String>,
    /// Ids in the vocabulary (possibly none).
    pub tokens: Vec<u32>,
}

/// `/tokenize`'s answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TokenizeResponse {
    /// How many ids.
    pub count: usize,
    /// The served model's length, which prompt and output together may not pass.
    pub max_model_len: usize,
    /// The ids.
    pub tokens: Vec<u32>,
    /// With `return_token_strs`: each id's vocabulary piece; `null` otherwise.
    pub token_strs: Option<Vec<String>>,
}

/// `/detokenize`'s answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DetokenizeResponse {
    /// The ids' text.
    pub prompt: String,
}

/// Parses and validates a `/tokenize` body.
pub fn parse_tokenize(body: &[u8], limits: &Limits) -> Result<TokenizeRequest, ApiError> {
    let obj = object(body)?;
    let input = match (obj.get("prompt").filter(|v| !v.is_null()), obj.get("messages").filter(|v| !v.is_null())) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid("prompt", "Give `prompt` or `messages`, not both."));
        }
        (Some(Value::String(s)), None) => TokenizeInput::Prompt(prompt_text(s, "prompt", limits)?),
        (Some(v), None) => return Err(wrong_type("prompt", "a string", v)),
        (None, Some(list)) => {
            refuse_unsupported(&obj, Route::Chat)?;
            TokenizeInput::Messages(messages(Some(list), limits)?)
        }
        (None, None) => return Err(ApiError::invalid("prompt", "`prompt` or `messages` is required.")),
    };
    let return_token_strs = boolean(&obj, "return_token_strs")?.unwrap_or(false);
    Ok(TokenizeRequest { model: optional_model(&obj)?, input, return_token_strs })
}

/// Parses and validates a `/detokenize` body.
pub fn parse_detokenize(body: &[u8], limits: &Limits) -> Result<DetokenizeRequest, ApiError> {
    let obj = object(body)?;
    let tokens = match obj.get("tokens") {
        None | Some(Value::Null) => return Err(ApiError::invalid("tokens", "`tokens` is required.")),
        // Bounded as a prompt's text is, so that no body decodes for longer than a prompt's would.
        Some(Value::Array(items)) if items.len() > limits.max_prompt_chars => {
            let message = format!("`tokens` may hold at most {} ids. Given: {}", limits.max_prompt_chars, items.len());
            return Err(ApiError::invalid("tokens", message));
        }
        Some(Value::Array(items)) => token_ids(items, "tokens", limits)?,
        Some(v) => return Err(wrong_type("tokens", "a list of token ids", v)),
    };
    Ok(DetokenizeRequest { model: optional_model(&obj)?, tokens })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LIMITS: Limits =
        Limits { max_model_len: 512, vocab_size: 600, max_n: 4, default_max_tokens: 16, max_prompt_chars: 100 };

    fn tokenize(body: Value) -> Result<TokenizeRequest, ApiError> {
        parse_tokenize(body.to_string().as_bytes(), &LIMITS)
    }

    fn detokenize(body: Value) -> Result<DetokenizeRequest, ApiError> {
        parse_detokenize(body.to_string().as_bytes(), &LIMITS)
    }

    fn refused_on<T: std::fmt::Debug>(r: Result<T, ApiError>, param: &str, words: &[&str]) {
        let e = r.expect_err("refused");
        assert_eq!((e.status, e.param.as_deref()), (400, Some(param)), "{}", e.message);
        for w in words {
            assert!(e.message.contains(w), "{:?} lacks {w:?}", e.message);
        }
    }

    #[test]
    fn tokenize_takes_a_prompt_or_messages() {
        let r = tokenize(json!({"prompt": "hi", "model": "tiny", "return_token_strs": true})).unwrap();
        let want = TokenizeRequest {
            model: Some("tiny".into()),
            input: TokenizeInput::Prompt("hi".into()),
            return_token_strs: true,
        };
        assert_eq!(r, want);
        let r = tokenize(json!({"prompt": "", "messages": null})).unwrap();
        assert_eq!((r.model, r.input, r.return_token_strs), (None, TokenizeInput::Prompt(String::new()), false));
        let chat = tokenize(json!({"messages": [{"role": "user", "content": "hi"}]})).unwrap();
        assert_eq!(chat.input, TokenizeInput::Messages(vec![ChatMessage::new("user", "hi".into()).unwrap()]));
    }

    #[test]
    fn tokenize_refusals_name_their_field() {
        refused_on(tokenize(json!({})), "prompt", &["required"]);
        refused_on(tokenize(json!({"prompt": "a", "messages": []})), "prompt", &["not both"]);
        refused_on(tokenize(json!({"prompt": [1, 2]})), "prompt", &["a string"]);
        refused_on(tokenize(json!({"prompt": "x".repeat(101)})), "prompt", &["100 characters"]);
        refused_on(tokenize(json!({"messages": []})), "messages", &["at least one"]);
        refused_on(tokenize(json!({"messages": [{"role": "robot", "content": "x"}]})), "messages", &["role"]);
        let templated = json!({"messages": [{"role": "user", "content": "x"}], "chat_template": "{{ x }}"});
        refused_on(tokenize(templated), "chat_template", &["chat_template"]);
        refused_on(tokenize(json!({"prompt": "a", "return_token_strs": 1})), "return_token_strs", &["boolean"]);
        refused_on(tokenize(json!({"prompt": "a", "model": 3})), "model", &["string"]);
        refused_on(parse_tokenize(b"[1]", &LIMITS), "body", &["object"]);
    }

    #[test]
    fn detokenize_takes_ids_in_the_vocabulary() {
        assert_eq!(detokenize(json!({"tokens": [0, 599]})).unwrap().tokens, vec![0, 599]);
        assert_eq!(detokenize(json!({"tokens": [], "model": "m"})).unwrap().model.as_deref(), Some("m"));
        refused_on(detokenize(json!({})), "tokens", &["required"]);
        refused_on(detokenize(json!({"tokens": [600]})), "tokens", &["[0, 600)", "600"]);
        refused_on(detokenize(json!({"tokens": [-1]})), "tokens", &["-1"]);
        refused_on(detokenize(json!({"tokens": "12"})), "tokens", &["list of token ids"]);
        refused_on(detokenize(json!({"tokens": vec![1; 101]})), "tokens", &["at most 100 ids", "101"]);
    }
}
