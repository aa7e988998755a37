//! Turning a submission's [`ChoiceEvent`]s into OpenAI's answers: one JSON body (collected) or a
//! server-sent-event stream that forwards each text delta as it comes.
//!
//! The stream reads the engine's channel directly, so when the client goes away axum drops the
//! body, the receiver goes with it, and the engine thread aborts the request before its next step.
//! The engine's text deltas are already whole characters with no part of a stop string, so they
//! are passed through untouched; a token that releases no text sends no chunk.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::api::error::ApiError;
use crate::api::types::{
    ChatChoice, ChatChunk, ChatResponse, CompletionChoice, CompletionChunk, CompletionResponse, Usage,
};
use crate::engine_thread::{ChoiceEvent, EventKind};

/// Which API answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `/v1/completions`.
    Completion,
    /// `/v1/chat/completions`.
    Chat,
}

/// What every chunk and body of one response repeats.
pub struct Meta {
    kind: Kind,
    id: String,
    created: u64,
    model: String,
}

impl Meta {
    /// A fresh id, stamped now.
    pub fn new(kind: Kind, model: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let created = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let prefix = match kind {
            Kind::Completion => "cmpl",
            Kind::Chat => "chatcmpl",
        };
        let id = format!("{prefix}-{created:x}{:06x}", NEXT.fetch_add(1, Ordering::Relaxed));
        Self { kind, id, created, model: model.to_string() }
    }

    /// A streamed choice's new text.
    fn text_chunk(&self, index: usize, text: &str) -> String {
        match self.kind {
            Kind::Completion => frame(&CompletionChunk::text(&self.id, self.created, &self.model, index, text)),
            Kind::Chat => frame(&ChatChunk::content(&self.id, self.created, &self.model, index, text)),
        }
    }

    /// A streamed choice's end.
    fn finish_chunk(&self, index: usize, reason: &str) -> String {
        match self.kind {
            Kind::Completion => frame(&CompletionChunk::finish(&self.id, self.created, &self.model, index, reason)),
            Kind::Chat => frame(&ChatChunk::finish(&self.id, self.created, &self.model, index, reason)),
        }
    }

    fn usage_chunk(&self, usage: Usage) -> String {
        match self.kind {
            Kind::Completion => frame(&CompletionChunk::usage(&self.id, self.created, &self.model, usage)),
            Kind::Chat => frame(&ChatChunk::usage(&self.id, self.created, &self.model, usage)),
        }
    }

    /// The whole body for choices given as (text, finish reason).
    fn response(self, choices: Vec<(String, &str)>, usage: Usage) -> Response {
        let Meta { kind, id, created, model } = self;
        let choices = choices.into_iter().enumerate();
        match kind {
            Kind::Completion => {
                let choices = choices.map(|(i, (text, reason))| CompletionChoice::new(i, text, reason)).collect();
                Json(CompletionResponse::new(id, created, model, choices, usage)).into_response()
            }
            Kind::Chat => {
                let choices = choices.map(|(i, (text, reason))| ChatChoice::new(i, text, reason)).collect();
                Json(ChatResponse::new(id, created, model, choices, usage)).into_response()
            }
        }
    }
}

/// Waits for every choice to finish and answers with the whole body.
pub async fn collect(
    meta: Meta,
    mut events: UnboundedReceiver<ChoiceEvent>,
    num_choices: usize,
    prompt_tokens: usize,
) -> Result<Response, ApiError> {
    let mut texts = vec![String::new(); num_choices];
    let mut finish: Vec<Option<&str>> = vec![None; num_choices];
    let mut generated = 0;
    let mut left = num_choices;
    while left > 0 {
        let event = events.recv().await.ok_or_else(|| ApiError::internal("the engine stopped"))?;
        match event.kind {
            EventKind::Token { text, .. } => {
                texts[event.index].push_str(&text);
                generated += 1;
            }
            EventKind::Finished(reason) => {
                finish[event.index] = Some(reason);
                left -= 1;
            }
            EventKind::Failed(message) => return Err(ApiError::internal(message)),
        }
    }
    let choices = texts.into_iter().zip(finish.into_iter().map(Option::unwrap_or_default)).collect();
    Ok(meta.response(choices, Usage::new(prompt_tokens, generated)))
}

/// Streams the choices as server-sent events, ending with `data: [DONE]`; with `usage_prompt`
/// (the prompt's token count), a usage chunk with no choices comes just before it.
pub fn sse(
    meta: Meta,
    events: UnboundedReceiver<ChoiceEvent>,
    num_choices: usize,
    usage_prompt: Option<usize>,
) -> Response {
    let mut frames = VecDeque::new();
    if meta.kind == Kind::Chat {
        // OpenAI opens each chat choice with the role before any content.
        frames.extend((0..num_choices).map(|i| frame(&ChatChunk::role(&meta.id, meta.created, &meta.model, i))));
    }
    let state = Stream { meta, events, left: num_choices, frames, usage_prompt, generated: 0, done: false };
    let body = Body::from_stream(futures_util::stream::unfold(state, |mut s| async move {
        s.next_frame().await.map(|f| (Ok::<_, Infallible>(f), s))
    }));
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream")),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
    ];
    (headers, body).into_response()
}

fn frame(value: &impl Serialize) -> String {
    // Serialising these plain structs cannot fail; an empty object keeps the stream well formed.
    let json = serde_json::to_string(value).unwrap_or_else(|_| "{}".to_string());
    format!("data: {json}\n\n")
}

struct Stream {
    meta: Meta,
    events: UnboundedReceiver<ChoiceEvent>,
    left: usize,
    frames: VecDeque<String>,
    usage_prompt: Option<usize>,
    generated: usize,
    done: bool,
}

impl Stream {
    async fn next_frame(&mut self) -> Option<String> {
        loop {
            if let Some(f) = self.frames.pop_front() {
                return Some(f);
            }
            if self.done {
                return None;
            }
            if self.left == 0 {
                if let Some(prompt) = self.usage_prompt {
                    self.frames.push_back(self.meta.usage_chunk(Usage::new(prompt, self.generated)));
                }
                self.frames.push_back("data: [DONE]\n\n".to_string());
                self.done = true;
                continue;
            }
            let Some(event) = self.events.recv().await else {
                self.fail(ApiError::internal("the engine stopped"));
                continue;
            };
            match event.kind {
                EventKind::Token { text, .. } => {
                    self.generated += 1;
                    if !text.is_empty() {
                        self.frames.push_back(self.meta.text_chunk(event.index, &text));
                    }
                }
                EventKind::Finished(reason) => {
                    self.left -= 1;
                    self.frames.push_back(self.meta.finish_chunk(event.index, reason));
                }
                EventKind::Failed(message) => self.fail(ApiError::internal(message)),
            }
        }
    }

    /// Ends the stream with the error as its last event, as OpenAI reports errors mid-stream.
    fn fail(&mut self, error: ApiError) {
        self.frames.push_back(frame(&error.body()));
        self.frames.push_back("data: [DONE]\n\n".to_string());
        self.done = true;
    }
}
