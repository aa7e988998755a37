//! Validated requests (built only by [`super::validate`]) and the bodies and stream chunks that
//! answer them, shaped as OpenAI's `/v1/completions` and `/v1/chat/completions` define them.
//!
//! Response fields OpenAI always sends are always serialised, `null` included (`logprobs`,
//! `finish_reason`), because strict clients deserialise into types that require them.

use model::engine::LogitsProcessors;
use serde::Serialize;

use super::logprobs::{ChatLogprobs, CompletionLogprobs, PromptLogprobs};

/// What a request may ask for, from the served model and the server's flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Prompt plus generated tokens may not exceed this.
    pub max_model_len: usize,
    /// Token ids must be below this.
    pub vocab_size: usize,
    /// The most choices (`n`) one request may ask for.
    pub max_n: usize,
    /// `max_tokens` when the request gives none.
    pub default_max_tokens: usize,
    /// Characters of one prompt (a chat's message contents together) read before tokenising, at
    /// most: [`Limits::prompt_chars_for`].
    pub max_prompt_chars: usize,
}

impl Limits {
    /// A token of the shipped tokenizers spans at most a few dozen characters, so a prompt of more
    /// than this many characters per token of `max_model_len` could not fit; refusing it by its
    /// length costs nothing, tokenising it first could cost a whole core.
    pub const CHARS_PER_TOKEN: usize = 32;

    /// The prompt characters a model length of `max_model_len` tokens allows.
    pub fn prompt_chars_for(max_model_len: usize) -> usize {
        max_model_len.saturating_mul(Self::CHARS_PER_TOKEN)
    }
}

/// `/v1/completions`' `prompt`, in each of the four forms OpenAI takes; never empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prompt {
    /// One string.
    Text(String),
    /// A batch of strings, one prompt each.
    Texts(Vec<String>),
    /// One prompt as token ids.
    Ids(Vec<u32>),
    /// A batch of prompts as token ids.
    IdLists(Vec<Vec<u32>>),
}

pub use model::chat_template::ChatMessage;

/// Sampling and output options common to both routes, all in range.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampling {
    /// `max_tokens` or `max_completion_tokens`; at least 1 (0 with `echo`: the prompt alone is
    /// scored), at most the model's length. When not
    /// given, the route decides: [`Limits::default_max_tokens`] for completions, the rest of the
    /// context for chat (as vLLM does).
    pub max_tokens: Option<usize>,
    /// In `[0, 2]`; 0 is greedy.
    pub temperature: f32,
    /// In `(0, 1]`.
    pub top_p: f32,
    /// 0 keeps every token (the request's -1 or 0).
    pub top_k: usize,
    /// In `[0, 1]`; 0 keeps every token.
    pub min_p: f32,
    /// Repeats a sampled run when given.
    pub seed: Option<u64>,
    /// Up to four non-empty stop strings.
    pub stop: Vec<String>,
    /// Token ids that end a choice as eos does, each in the vocabulary.
    pub stop_token_ids: Vec<u32>,
    /// Keep the matched stop string (or the stop token's text) in the output.
    pub include_stop_str_in_output: bool,
    /// Choices per prompt, in `1..=max_n`.
    pub n: usize,
    /// Candidates per prompt, `n..=max_n`; the `n` with the highest cumulative logprob are returned.
    pub best_of: usize,
    /// Keep generating past the end-of-sequence token.
    pub ignore_eos: bool,
    /// How many alternatives per token the request wants logprobs for (0 = only the chosen one).
    pub logprobs: Option<usize>,
    /// vLLM's `prompt_logprobs`: each prompt token's logprob, rank and this many alternatives, in
    /// the response beside the choices' (not streamed).
    pub prompt_logprobs: Option<usize>,
    /// Completions: the prompt's text comes first in the output (and its logprobs, with `logprobs`).
    pub echo: bool,
    /// `logit_bias`, `min_tokens`, `repetition_penalty`, `frequency_penalty`, `presence_penalty`.
    pub processors: LogitsProcessors,
    /// vLLM's `truncate_prompt_tokens`: each prompt keeps its last this many tokens (the model's
    /// length for the request's -1), once tokenised (a chat's after its template).
    pub truncate_prompt_tokens: Option<usize>,
    /// Answer as server-sent events.
    pub stream: bool,
    /// `stream_options.include_usage`: a usage chunk before `[DONE]`.
    pub include_usage: bool,
    /// vLLM's `stream_options.continuous_usage_stats`: every chunk of a choice carries its usage
    /// so far (its prompt's tokens and the tokens it has generated).
    pub continuous_usage_stats: bool,
}

/// A validated `/v1/completions` request.
#[derive(Clone, Debug, PartialEq)]
pub struct CompletionRequest {
    /// The model the client names (checked against the served one by the route).
    pub model: String,
    /// The prompt or prompts.
    pub prompt: Prompt,
    /// Sampling and output options.
    pub sampling: Sampling,
}

/// A validated `/v1/chat/completions` request.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatRequest {
    /// The model the client names.
    pub model: String,
    /// At least one message.
    pub messages: Vec<ChatMessage>,
    /// Sampling and output options.
    pub sampling: Sampling,
}

/// Token counts of a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Prompt tokens (of one prompt's worth for each prompt, as OpenAI counts them).
    pub prompt_tokens: usize,
    /// Generated tokens over all choices.
    pub completion_tokens: usize,
    /// Their sum.
    pub total_tokens: usize,
}

impl Usage {
    /// The counts, with their total.
    pub fn new(prompt_tokens: usize, completion_tokens: usize) -> Self {
        Self { prompt_tokens, completion_tokens, total_tokens: prompt_tokens + completion_tokens }
    }
}

/// One choice of a non-streamed completion.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompletionChoice {
    /// Position among the choices (prompt-major).
    pub index: usize,
    /// The generated text.
    pub text: String,
    /// With `logprobs`: the tokens', `null` otherwise.
    pub logprobs: Option<CompletionLogprobs>,
    /// `stop` or `length`.
    pub finish_reason: String,
    /// With vLLM's `prompt_logprobs`: the prompt's (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<PromptLogprobs>,
}

impl CompletionChoice {
    /// A finished choice, without prompt logprobs.
    pub fn new(index: usize, text: String, logprobs: Option<CompletionLogprobs>, finish_reason: &str) -> Self {
        Self { index, text, logprobs, finish_reason: finish_reason.to_string(), prompt_logprobs: None }
    }
}

/// `/v1/completions`' answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompletionResponse {
    /// `cmpl-...`.
    pub id: String,
    /// `text_completion`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The served model's name.
    pub model: String,
    /// One per prompt and `n`.
    pub choices: Vec<CompletionChoice>,
    /// Token counts.
    pub usage: Usage,
}

impl CompletionResponse {
    /// The body for `choices`.
    pub fn new(id: String, created: u64, model: String, choices: Vec<CompletionChoice>, usage: Usage) -> Self {
        Self { id, object: "text_completion", created, model, choices, usage }
    }
}

/// The assistant's reply in a chat choice.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AssistantMessage {
    /// `assistant`.
    pub role: &'static str,
    /// The generated text.
    pub content: String,
}

/// One choice of a non-streamed chat completion.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChatChoice {
    /// Position among the choices.
    pub index: usize,
    /// The reply.
    pub message: AssistantMessage,
    /// With `logprobs`: the tokens', `null` otherwise.
    pub logprobs: Option<ChatLogprobs>,
    /// `stop` or `length`.
    pub finish_reason: String,
}

impl ChatChoice {
    /// A finished choice.
    pub fn new(index: usize, content: String, logprobs: Option<ChatLogprobs>, finish_reason: &str) -> Self {
        let message = AssistantMessage { role: "assistant", content };
        Self { index, message, logprobs, finish_reason: finish_reason.to_string() }
    }
}

/// `/v1/chat/completions`' answer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChatResponse {
    /// `chatcmpl-...`.
    pub id: String,
    /// `chat.completion`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The served model's name.
    pub model: String,
    /// One per `n`.
    pub choices: Vec<ChatChoice>,
    /// Token counts.
    pub usage: Usage,
    /// With vLLM's `prompt_logprobs`: the rendered prompt's (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<PromptLogprobs>,
}

impl ChatResponse {
    /// The body for `choices`, without prompt logprobs.
    pub fn new(id: String, created: u64, model: String, choices: Vec<ChatChoice>, usage: Usage) -> Self {
        Self { id, object: "chat.completion", created, model, choices, usage, prompt_logprobs: None }
    }
}

/// A streamed completion choice: new text, or its end with empty text.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompletionChunkChoice {
    /// Which choice.
    pub index: usize,
    /// The text released since the last chunk.
    pub text: String,
    /// With `logprobs`: those of this chunk's tokens.
    pub logprobs: Option<CompletionLogprobs>,
    /// Set on the choice's last chunk only.
    pub finish_reason: Option<String>,
}

/// One `data:` event of a streamed completion; `usage` only on the final usage chunk, whose
/// `choices` is empty.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompletionChunk {
    /// The response's id, repeated on every chunk.
    pub id: String,
    /// `text_completion`, as OpenAI streams it.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The served model's name.
    pub model: String,
    /// Zero or one choice.
    pub choices: Vec<CompletionChunkChoice>,
    /// On the usage chunk, and on every chunk with `continuous_usage_stats`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

impl CompletionChunk {
    fn with(id: &str, created: u64, model: &str, choices: Vec<CompletionChunkChoice>, usage: Option<Usage>) -> Self {
        let (id, model) = (id.to_string(), model.to_string());
        Self { id, object: "text_completion", created, model, choices, usage }
    }

    /// Choice `index` released `text` (with its tokens' `logprobs`, when asked).
    pub fn text(
        id: &str,
        created: u64,
        model: &str,
        index: usize,
        text: &str,
        logprobs: Option<CompletionLogprobs>,
    ) -> Self {
        let choice = CompletionChunkChoice { index, text: text.to_string(), logprobs, finish_reason: None };
        Self::with(id, created, model, vec![choice], None)
    }

    /// Choice `index` ended for `reason`.
    pub fn finish(id: &str, created: u64, model: &str, index: usize, reason: &str) -> Self {
        let finish_reason = Some(reason.to_string());
        let choice = CompletionChunkChoice { index, text: String::new(), logprobs: None, finish_reason };
        Self::with(id, created, model, vec![choice], None)
    }

    /// The usage chunk sent before `[DONE]` when the request asked for it.
    pub fn usage(id: &str, created: u64, model: &str, usage: Usage) -> Self {
        Self::with(id, created, model, Vec::new(), Some(usage))
    }

    /// This chunk with `usage` (vLLM's `continuous_usage_stats`), where given.
    pub fn with_usage(self, usage: Option<Usage>) -> Self {
        Self { usage: usage.or(self.usage), ..self }
    }
}

/// A chat delta: the role on a choice's first chunk, then content.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Delta {
    /// `assistant`, first chunk only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// Text released since the last chunk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// A streamed chat choice.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChatChunkChoice {
    /// Which choice.
    pub index: usize,
    /// What changed.
    pub delta: Delta,
    /// With `logprobs`: those of this chunk's tokens.
    pub logprobs: Option<ChatLogprobs>,
    /// Set on the choice's last chunk only.
    pub finish_reason: Option<String>,
}

/// One `data:` event of a streamed chat completion.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChatChunk {
    /// The response's id, repeated on every chunk.
    pub id: String,
    /// `chat.completion.chunk`.
    pub object: &'static str,
    /// Unix seconds.
    pub created: u64,
    /// The served model's name.
    pub model: String,
    /// Zero or one choice.
    pub choices: Vec<ChatChunkChoice>,
    /// On the usage chunk, and on every chunk with `continuous_usage_stats`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

impl ChatChunk {
    fn with(id: &str, created: u64, model: &str, choice: Option<ChatChunkChoice>, usage: Option<Usage>) -> Self {
        let (id, model) = (id.to_string(), model.to_string());
        Self { id, object: "chat.completion.chunk", created, model, choices: choice.into_iter().collect(), usage }
    }

    fn choice(index: usize, delta: Delta, finish_reason: Option<String>) -> Option<ChatChunkChoice> {
        Some(ChatChunkChoice { index, delta, logprobs: None, finish_reason })
    }

    /// Opens choice `index`: OpenAI sends the role, with empty content, before any text.
    pub fn role(id: &str, created: u64, model: &str, index: usize) -> Self {
        let delta = Delta { role: Some("assistant"), content: Some(String::new()) };
        Self::with(id, created, model, Self::choice(index, delta, None), None)
    }

    /// Choice `index` released `text` (with its tokens' `logprobs`, when asked).
    pub fn content(
        id: &str,
        created: u64,
        model: &str,
        index: usize,
        text: &str,
        logprobs: Option<ChatLogprobs>,
    ) -> Self {
        let delta = Delta { role: None, content: Some(text.to_string()) };
        let choice = Some(ChatChunkChoice { index, delta, logprobs, finish_reason: None });
        Self::with(id, created, model, choice, None)
    }

    /// Choice `index` ended for `reason`, with an empty delta.
    pub fn finish(id: &str, created: u64, model: &str, index: usize, reason: &str) -> Self {
        let choice = Self::choice(index, Delta::default(), Some(reason.to_string()));
        Self::with(id, created, model, choice, None)
    }

    /// The usage chunk sent before `[DONE]` when the request asked for it.
    pub fn usage(id: &str, created: u64, model: &str, usage: Usage) -> Self {
        Self::with(id, created, model, None, Some(usage))
    }

    /// This chunk with `usage` (vLLM's `continuous_usage_stats`), where given.
    pub fn with_usage(self, usage: Option<Usage>) -> Self {
        Self { usage: usage.or(self.usage), ..self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, to_value};

    #[test]
    fn completion_response_serialises_as_openai() {
        let choices = vec![CompletionChoice::new(0, "hi".into(), None, "length")];
        let body = CompletionResponse::new("cmpl-1".into(), 7, "tiny".into(), choices, Usage::new(3, 2));
        assert_eq!(
            to_value(&body).unwrap(),
            json!({
                "id": "cmpl-1", "object": "text_completion", "created": 7, "model": "tiny",
                "choices": [{"index": 0, "text": "hi", "logprobs": null, "finish_reason": "length"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            })
        );
    }

    #[test]
    fn chat_response_serialises_as_openai() {
        let choices = vec![ChatChoice::new(0, "yo".into(), None, "stop")];
        let body = ChatResponse::new("chatcmpl-1".into(), 7, "tiny".into(), choices, Usage::new(4, 1));
        let v = to_value(&body).unwrap();
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(
            v["choices"][0],
            json!({"index": 0, "message": {"role": "assistant", "content": "yo"}, "logprobs": null, "finish_reason": "stop"})
        );
        assert_eq!(v["usage"]["total_tokens"], 5);
    }

    #[test]
    fn completion_chunks_carry_text_then_finish_then_usage() {
        let text = to_value(CompletionChunk::text("c", 1, "m", 2, "ab", None)).unwrap();
        assert_eq!(text["choices"], json!([{"index": 2, "text": "ab", "logprobs": null, "finish_reason": null}]));
        assert!(text.get("usage").is_none());
        let finish = to_value(CompletionChunk::finish("c", 1, "m", 2, "stop")).unwrap();
        assert_eq!(finish["choices"][0]["finish_reason"], "stop");
        assert_eq!(finish["choices"][0]["text"], "");
        let usage = to_value(CompletionChunk::usage("c", 1, "m", Usage::new(1, 2))).unwrap();
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["completion_tokens"], 2);
        assert_eq!(usage["object"], "text_completion");
    }

    #[test]
    fn chat_chunks_open_with_the_role() {
        let role = to_value(ChatChunk::role("c", 1, "m", 0)).unwrap();
        assert_eq!(role["object"], "chat.completion.chunk");
        assert_eq!(role["choices"][0]["delta"], json!({"role": "assistant", "content": ""}));
        let content = to_value(ChatChunk::content("c", 1, "m", 0, "é", None)).unwrap();
        assert_eq!(content["choices"][0]["delta"], json!({"content": "é"}));
        assert_eq!(content["choices"][0]["finish_reason"], json!(null));
        let finish = to_value(ChatChunk::finish("c", 1, "m", 0, "length")).unwrap();
        assert_eq!(finish["choices"][0]["delta"], json!({}));
        assert_eq!(finish["choices"][0]["finish_reason"], "length");
        let usage = to_value(ChatChunk::usage("c", 1, "m", Usage::new(5, 0))).unwrap();
        assert_eq!((usage["choices"].clone(), usage["usage"]["total_tokens"].clone()), (json!([]), json!(5)));
    }
}
