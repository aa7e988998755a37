//! Turning a submission's [`ChoiceEvent`]s into OpenAI's answers: one JSON body (collected) or a
//! server-sent-event stream that forwards each text delta as it comes.
//!
//! The stream reads the engine's channel directly, so when the client goes away axum drops the
//! body, the receiver goes with it, and the engine thread aborts the request before its next step.
//! The engine's text deltas are already whole characters with no part of a stop string, so they
//! are passed through untouched; a token that releases no text sends no chunk, unless the request
//! asked for logprobs, which every token carries.
//!
//! A prompt's engine requests are its `best_of` candidates; with `best_of > n` the `n` with the
//! highest cumulative logprob (the sum of their tokens' logprobs) are returned, best first, as
//! vLLM does (validation refuses to stream them). Under `echo` a completion's text, and with
//! `logprobs` its logprobs, begin with the prompt's. vLLM's `prompt_logprobs` (never streamed) sit
//! in each completion choice and once at the top of a chat response; a stream reports usage at its
//! end, in every chunk, or both ([`StreamUsage`]).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use model::engine::TokenLogprobs;
use serde::Serialize;
use std::sync::Arc;
use tokenizers::Tokenizer;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::api::error::{ApiError, LARGER_THAN_QUEUE};
use crate::api::logprobs::{prompt_logprobs, ChatLogprobs, ChatTokenLogprob, CompletionLogprobs, PromptLogprobs};
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

impl Kind {
    /// `e`, a refusal of the engine thread, naming this route's field: the engine names the
    /// prompt `prompt`, and a chat's only way past the whole queue is its `n`.
    pub fn attribute(self, e: ApiError) -> ApiError {
        let param = match (self, e.param.as_deref(), e.code.as_deref()) {
            (Kind::Chat, _, Some(LARGER_THAN_QUEUE)) => "n",
            (_, Some("prompt"), _) => self.prompt_field(),
            _ => return e,
        };
        ApiError { param: Some(param.to_string()), ..e }
    }

    /// The request field a refusal of the prompt names: the completion's `prompt`, or the chat's
    /// `messages` it was rendered from.
    pub fn prompt_field(self) -> &'static str {
        match self {
            Kind::Completion => "prompt",
            Kind::Chat => "messages",
        }
    }
}

/// One prompt of a submission, as `echo` repeats it.
#[derive(Clone, Debug)]
pub struct Echoed {
    /// The prompt's text (decoded, for a prompt given as ids).
    pub text: String,
    /// Its token ids.
    pub ids: Vec<u32>,
}

/// How a submission's engine requests become the response's choices.
pub struct Choices {
    /// Each prompt, in order; its candidates are engine requests `p * best_of ..`.
    pub prompts: Vec<Echoed>,
    /// Choices returned per prompt.
    pub n: usize,
    /// Candidates per prompt (`>= n`).
    pub best_of: usize,
    /// Whether the prompt comes first in each completion.
    pub echo: bool,
    /// `max_tokens: 0` under `echo`: the one token generated (for the prompt's logprobs) is
    /// left out of the response, which holds the prompt alone.
    pub prompt_only: bool,
    /// With logprobs in the response: how many alternatives each token gets.
    pub logprobs: Option<usize>,
    /// With vLLM's `prompt_logprobs`: how many alternatives each prompt token gets.
    pub prompt_logprobs: Option<usize>,
    /// Token texts for the logprobs.
    pub tokenizer: Arc<Tokenizer>,
}

impl Choices {
    fn num_candidates(&self) -> usize {
        self.prompts.len() * self.best_of
    }

    fn prompt_tokens(&self) -> usize {
        self.prompts.iter().map(|p| p.ids.len()).sum()
    }

    /// A completion's logprobs of the prompt (under `echo`) from `prompt_lp`, its first entry
    /// `None`, each with the `logprobs` alternatives asked (the engine scored as many as the larger
    /// of that and `prompt_logprobs`).
    fn echo_logprobs(&self, p: usize, prompt_lp: &[Option<TokenLogprobs>], offset: &mut usize) -> CompletionLogprobs {
        let top = self.logprobs.unwrap_or(0);
        let mut out = CompletionLogprobs::default();
        for (i, &id) in self.prompts[p].ids.iter().enumerate() {
            let lp = prompt_lp
                .get(i)
                .and_then(Option::as_ref)
                .map(|l| TokenLogprobs { top: l.top.iter().take(top).copied().collect(), ..l.clone() });
            *offset = out.push(&self.tokenizer, id, lp.as_ref(), *offset);
        }
        out
    }

    /// vLLM's `prompt_logprobs` of a candidate whose engine scores are `prompt_lp`, when asked.
    fn prompt_logprobs(&self, prompt_lp: &[Option<TokenLogprobs>]) -> Option<PromptLogprobs> {
        self.prompt_logprobs.map(|top| prompt_logprobs(&self.tokenizer, prompt_lp, top))
    }
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

    /// A streamed choice's new text and its tokens' logprobs (and its usage so far, where given).
    fn text_chunk(&self, index: usize, text: &str, logprobs: Option<Logprobs>, usage: Option<Usage>) -> String {
        let (id, created, model) = (&self.id, self.created, &self.model);
        match self.kind {
            Kind::Completion => {
                let lp = logprobs.and_then(Logprobs::completion);
                frame(&CompletionChunk::text(id, created, model, index, text, lp).with_usage(usage))
            }
            Kind::Chat => {
                let lp = logprobs.and_then(Logprobs::chat);
                frame(&ChatChunk::content(id, created, model, index, text, lp).with_usage(usage))
            }
        }
    }

    /// A streamed choice's end (with its usage, where given).
    fn finish_chunk(&self, index: usize, reason: &str, usage: Option<Usage>) -> String {
        let (id, created, model) = (&self.id, self.created, &self.model);
        match self.kind {
            Kind::Completion => frame(&CompletionChunk::finish(id, created, model, index, reason).with_usage(usage)),
            Kind::Chat => frame(&ChatChunk::finish(id, created, model, index, reason).with_usage(usage)),
        }
    }

    fn usage_chunk(&self, usage: Usage) -> String {
        match self.kind {
            Kind::Completion => frame(&CompletionChunk::usage(&self.id, self.created, &self.model, usage)),
            Kind::Chat => frame(&ChatChunk::usage(&self.id, self.created, &self.model, usage)),
        }
    }
}

/// Logprobs in the shape of the route that answers.
enum Logprobs {
    Completion(CompletionLogprobs),
    Chat(ChatLogprobs),
}

impl Logprobs {
    fn completion(self) -> Option<CompletionLogprobs> {
        match self {
            Logprobs::Completion(l) => Some(l),
            Logprobs::Chat(_) => None,
        }
    }

    fn chat(self) -> Option<ChatLogprobs> {
        match self {
            Logprobs::Chat(l) => Some(l),
            Logprobs::Completion(_) => None,
        }
    }
}

/// Everything one engine request produced.
#[derive(Default)]
struct Candidate {
    text: String,
    tokens: Vec<u32>,
    logprobs: Vec<TokenLogprobs>,
    prompt_logprobs: Vec<Option<TokenLogprobs>>,
    finish: Option<&'static str>,
}

impl Candidate {
    fn cumulative_logprob(&self) -> f64 {
        self.logprobs.iter().map(|l| l.logprob).sum()
    }
}

/// Waits for every candidate to finish and answers with the whole body.
pub async fn collect(
    meta: Meta,
    mut events: UnboundedReceiver<ChoiceEvent>,
    choices: Choices,
) -> Result<Response, ApiError> {
    let mut candidates: Vec<Candidate> = (0..choices.num_candidates()).map(|_| Candidate::default()).collect();
    let mut left = candidates.len();
    while left > 0 {
        let event = events.recv().await.ok_or_else(|| ApiError::internal("the engine stopped"))?;
        let c = &mut candidates[event.index];
        match event.kind {
            EventKind::Token { .. } if choices.prompt_only => {}
            EventKind::Token { id, text, logprobs } => {
                c.text.push_str(&text);
                c.tokens.push(id);
                c.logprobs.extend(logprobs);
            }
            EventKind::Prompt(logprobs) => c.prompt_logprobs = logprobs,
            EventKind::Finished(reason) => {
                c.finish = Some(reason);
                left -= 1;
            }
            EventKind::Failed(message) => return Err(ApiError::internal(message)),
        }
    }
    let mut generated = 0;
    let mut completion_choices = Vec::new();
    let mut chat_choices = Vec::new();
    for (p, group) in candidates.chunks(choices.best_of).enumerate() {
        // Only a prompt's first candidate scored it (the request builder's rule for collected
        // responses): every choice of the prompt reads those scores.
        let prompt_lp = &group[0].prompt_logprobs;
        let mut order: Vec<usize> = (0..group.len()).collect();
        if choices.best_of > choices.n {
            order.sort_by(|&a, &b| group[b].cumulative_logprob().total_cmp(&group[a].cumulative_logprob()));
        }
        for (k, &j) in order.iter().take(choices.n).enumerate() {
            let c = &group[j];
            let index = p * choices.n + k;
            let reason = if choices.prompt_only { "length" } else { c.finish.unwrap_or_default() };
            generated += c.tokens.len();
            match meta.kind {
                Kind::Completion => {
                    let echo = if choices.echo { choices.prompts[p].text.as_str() } else { "" };
                    let logprobs = choices.logprobs.is_some().then(|| {
                        let mut offset = 0;
                        let mut out = match choices.echo {
                            true => choices.echo_logprobs(p, prompt_lp, &mut offset),
                            false => CompletionLogprobs::default(),
                        };
                        for (lp, &id) in c.logprobs.iter().zip(&c.tokens) {
                            offset = out.push(&choices.tokenizer, id, Some(lp), offset);
                        }
                        out
                    });
                    let mut choice = CompletionChoice::new(index, format!("{echo}{}", c.text), logprobs, reason);
                    choice.prompt_logprobs = choices.prompt_logprobs(prompt_lp);
                    completion_choices.push(choice);
                }
                Kind::Chat => {
                    let logprobs = choices.logprobs.is_some().then(|| ChatLogprobs {
                        content: c.logprobs.iter().map(|lp| ChatTokenLogprob::new(&choices.tokenizer, lp)).collect(),
                    });
                    chat_choices.push(ChatChoice::new(index, c.text.clone(), logprobs, reason));
                }
            }
        }
    }
    let usage = Usage::new(choices.prompt_tokens(), generated);
    let Meta { kind, id, created, model } = meta;
    Ok(match kind {
        Kind::Completion => {
            Json(CompletionResponse::new(id, created, model, completion_choices, usage)).into_response()
        }
        Kind::Chat => {
            let mut response = ChatResponse::new(id, created, model, chat_choices, usage);
            // A chat has one prompt: every candidate scored it alike.
            response.prompt_logprobs = candidates.first().and_then(|c| choices.prompt_logprobs(&c.prompt_logprobs));
            Json(response).into_response()
        }
    })
}

/// How a stream reports usage: vLLM's two `stream_options`.
#[derive(Clone, Copy, Debug, Default)]
pub struct StreamUsage {
    /// A usage chunk with no choices just before `[DONE]`.
    pub include_usage: bool,
    /// Every chunk of a choice carries its usage so far.
    pub continuous: bool,
}

/// Streams the choices as server-sent events, ending with `data: [DONE]`, reporting usage as
/// `usage` asks. `choices.best_of` must be `choices.n`.
pub fn sse(meta: Meta, events: UnboundedReceiver<ChoiceEvent>, choices: Choices, usage: StreamUsage) -> Response {
    let num = choices.num_candidates();
    let mut state = Stream {
        usage_prompt: usage.include_usage.then(|| choices.prompt_tokens()),
        continuous: usage.continuous,
        meta,
        choices,
        events,
        left: num,
        frames: VecDeque::new(),
        generated: vec![0; num],
        offsets: vec![0; num],
        done: false,
    };
    for i in 0..num {
        let usage = state.usage_of(i);
        let s = &mut state;
        if s.meta.kind == Kind::Chat {
            // OpenAI opens each chat choice with the role before any content.
            let role = ChatChunk::role(&s.meta.id, s.meta.created, &s.meta.model, i).with_usage(usage);
            s.frames.push_back(frame(&role));
        }
        if s.meta.kind == Kind::Completion && s.choices.echo && s.choices.logprobs.is_none() {
            // With logprobs the prompt's text goes out with its logprobs, when they arrive.
            let chunk = s.meta.text_chunk(i, &s.choices.prompts[i / s.choices.best_of].text, None, usage);
            s.frames.push_back(chunk);
        }
    }
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
    choices: Choices,
    events: UnboundedReceiver<ChoiceEvent>,
    left: usize,
    frames: VecDeque<String>,
    usage_prompt: Option<usize>,
    /// Whether every chunk carries its choice's usage so far.
    continuous: bool,
    /// Each choice's generated tokens so far.
    generated: Vec<usize>,
    /// Each choice's completion `text_offset` so far.
    offsets: Vec<usize>,
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
                    let generated = self.generated.iter().sum();
                    self.frames.push_back(self.meta.usage_chunk(Usage::new(prompt, generated)));
                }
                self.frames.push_back("data: [DONE]\n\n".to_string());
                self.done = true;
                continue;
            }
            let Some(event) = self.events.recv().await else {
                self.fail(ApiError::internal("the engine stopped"));
                continue;
            };
            let i = event.index;
            match event.kind {
                EventKind::Token { .. } if self.choices.prompt_only => {}
                EventKind::Token { id, text, logprobs } => {
                    self.generated[i] += 1;
                    let logprobs =
                        logprobs.filter(|_| self.choices.logprobs.is_some()).map(|lp| self.token_logprobs(i, id, &lp));
                    if !text.is_empty() || logprobs.is_some() {
                        self.frames.push_back(self.meta.text_chunk(i, &text, logprobs, self.usage_of(i)));
                    }
                }
                EventKind::Prompt(prompt_lp) => {
                    if self.meta.kind == Kind::Completion && self.choices.echo {
                        let p = i / self.choices.best_of;
                        let lp = self.choices.echo_logprobs(p, &prompt_lp, &mut self.offsets[i]);
                        let logprobs = self.choices.logprobs.map(|_| Logprobs::Completion(lp));
                        let chunk = self.meta.text_chunk(i, &self.choices.prompts[p].text, logprobs, self.usage_of(i));
                        self.frames.push_back(chunk);
                    }
                }
                EventKind::Finished(reason) => {
                    self.left -= 1;
                    let reason = if self.choices.prompt_only { "length" } else { reason };
                    self.frames.push_back(self.meta.finish_chunk(i, reason, self.usage_of(i)));
                }
                EventKind::Failed(message) => self.fail(ApiError::internal(message)),
            }
        }
    }

    /// Choice `i`'s usage so far, when every chunk carries it.
    fn usage_of(&self, i: usize) -> Option<Usage> {
        let prompt = || self.choices.prompts[i / self.choices.best_of].ids.len();
        self.continuous.then(|| Usage::new(prompt(), self.generated[i]))
    }

    /// One streamed token's logprobs in the route's shape.
    fn token_logprobs(&mut self, i: usize, id: u32, lp: &TokenLogprobs) -> Logprobs {
        let tokenizer = &self.choices.tokenizer;
        match self.meta.kind {
            Kind::Completion => {
                let mut out = CompletionLogprobs::default();
                self.offsets[i] = out.push(tokenizer, id, Some(lp), self.offsets[i]);
                Logprobs::Completion(out)
            }
            Kind::Chat => Logprobs::Chat(ChatLogprobs { content: vec![ChatTokenLogprob::new(tokenizer, lp)] }),
        }
    }

    /// Ends the stream with the error as its last event, as OpenAI reports errors mid-stream.
    fn fail(&mut self, error: ApiError) {
        self.frames.push_back(frame(&error.body()));
        self.frames.push_back("data: [DONE]\n\n".to_string());
        self.done = true;
    }
}
