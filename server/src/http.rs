//! The HTTP face of `asynct serve`: axum routes that authorise, read and validate a request,
//! tokenise it, hand it to the engine thread and turn its events into OpenAI's JSON or SSE.
//!
//! Every failure is an [`ApiError`], so each one reaches the client as a status and an OpenAI
//! error body; nothing here unwraps client input. Bodies are read here with a limit rather than
//! through axum's extractor, whose rejections are plain text.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use http_body_util::LengthLimitError;
use model::engine::{keep_last_tokens, GenerationRequest, SamplingParams, StopConditions};
use tokenizers::Tokenizer;
use tokio::sync::watch;

use crate::api::error::ApiError;
use crate::api::tokenize::{
    parse_detokenize, parse_tokenize, DetokenizeResponse, TokenizeInput, TokenizeRequest, TokenizeResponse,
};
use crate::api::types::{ChatMessage, Limits, Prompt, Sampling};
use crate::api::validate::{parse_chat, parse_completion};
use crate::engine_thread::EngineHandle;
use crate::metrics::Metrics;
use crate::respond::{collect, sse, Choices, Echoed, Kind, Meta, StreamUsage};
use model::chat_template::ChatTemplate;

/// How a request body is read: at most `max_bytes` (else 413), within `timeout` (else 408); one
/// that ends early is a 400.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimits {
    /// Bytes buffered per request before it is parsed and validated, at most.
    pub max_bytes: usize,
    /// From the handler's first read to the body's end.
    pub timeout: Duration,
}

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// The engine thread.
    pub engine: EngineHandle,
    /// The model's tokenizer.
    pub tokenizer: Arc<Tokenizer>,
    /// Renders chat messages into the prompt.
    pub template: Arc<ChatTemplate>,
    /// What a request may ask for.
    pub limits: Limits,
    /// The one model name this server answers to.
    pub served_name: Arc<str>,
    /// The bearer token the /v1 and tokenizer routes require, when set.
    pub api_key: Option<Arc<str>>,
    /// The model's end-of-sequence ids.
    pub eos_token_ids: Arc<[u32]>,
    /// What /metrics shows.
    pub metrics: Arc<Metrics>,
    /// How bodies are read.
    pub body: BodyLimits,
    /// Turns true when shutdown begins: a body still arriving then is answered 503 at once.
    pub stopping: watch::Receiver<bool>,
}

/// The routes of `asynct serve`.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .route("/v1/models/{model}", get(model))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(|| async { ApiError::not_found() })
        .method_not_allowed_fallback(|| async { method_not_allowed() })
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

/// 405 with an OpenAI body rather than axum's empty one, so clients read every refusal alike.
fn method_not_allowed() -> ApiError {
    let message = "This route does not take that method: POST the completion, tokenize and detokenize routes, GET \
                   the others.";
    ApiError { status: 405, code: Some("method_not_allowed".to_string()), ..ApiError::invalid("method", message) }
}

async fn health() -> StatusCode {
    // The router is built only after the model loaded, so answering at all means ready.
    StatusCode::OK
}

async fn metrics(State(state): State<AppState>) -> Response {
    let content_type = HeaderValue::from_static("text/plain; version=0.0.4");
    ([(header::CONTENT_TYPE, content_type)], state.metrics.render()).into_response()
}

async fn models(State(state): State<AppState>, headers: HeaderMap) -> Response {
    match authorize(&state, &headers) {
        Ok(()) => Json(ModelList::of(&state)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `GET /v1/models/{model}` (the openai client's `models.retrieve`): the served model's card, or
/// 404 `model_not_found` naming the served one.
async fn model(
    State(state): State<AppState>,
    headers: HeaderMap,
    name: Result<Path<String>, PathRejection>,
) -> Response {
    let found = authorize(&state, &headers).and_then(|()| {
        let Path(name) = name.map_err(|_| ApiError::not_found())?;
        check_model(&state, &name)
    });
    match found {
        Ok(()) => Json(ModelCard::of(&state)).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn completions(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    serve_completion(state, headers, body).await.unwrap_or_else(IntoResponse::into_response)
}

async fn chat(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    serve_chat(state, headers, body).await.unwrap_or_else(IntoResponse::into_response)
}

async fn serve_completion(state: AppState, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let req = read_valid(&state, &headers, body, parse_completion).await?;
    check_model(&state, &req.model)?;
    let tokenizer = state.tokenizer.clone();
    let (echo, keep) = (req.sampling.echo, req.sampling.truncate_prompt_tokens);
    let prompts = off_the_runtime(move || {
        // A prompt of ids is decoded only when `echo` shows it, and so is what is left of a text.
        let from_ids = |ids: Vec<u32>| {
            let text = if echo { tokenizer.decode(&ids, false).unwrap_or_default() } else { String::new() };
            Echoed { text, ids }
        };
        let text = |text: String| match keep_last(encode(&tokenizer, &text, Kind::Completion)?, keep) {
            (ids, false) => Ok(Echoed { ids, text }),
            (ids, true) => Ok(from_ids(ids)),
        };
        let ids = |ids: Vec<u32>| from_ids(keep_last(ids, keep).0);
        match req.prompt {
            Prompt::Text(t) => Ok(vec![text(t)?]),
            Prompt::Texts(texts) => texts.into_iter().map(text).collect(),
            Prompt::Ids(list) => Ok(vec![ids(list)]),
            Prompt::IdLists(lists) => Ok(lists.into_iter().map(ids).collect()),
        }
    })
    .await?;
    run(&state, Kind::Completion, &req.model, prompts, &req.sampling).await
}

async fn serve_chat(state: AppState, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let req = read_valid(&state, &headers, body, parse_chat).await?;
    check_model(&state, &req.model)?;
    let (template, tokenizer, messages) = (state.template.clone(), state.tokenizer.clone(), req.messages);
    let keep = req.sampling.truncate_prompt_tokens;
    let ids = off_the_runtime(move || Ok(keep_last(chat_ids(&template, &tokenizer, &messages)?, keep).0)).await?;
    run(&state, Kind::Chat, &req.model, vec![Echoed { text: String::new(), ids }], &req.sampling).await
}

async fn tokenize(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    serve_tokenize(state, headers, body).await.unwrap_or_else(IntoResponse::into_response)
}

async fn detokenize(State(state): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    serve_detokenize(state, headers, body).await.unwrap_or_else(IntoResponse::into_response)
}

/// vLLM's `/tokenize`: the ids the completion or chat route would feed the model.
async fn serve_tokenize(state: AppState, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let TokenizeRequest { model, input, return_token_strs } =
        read_valid(&state, &headers, body, parse_tokenize).await?;
    if let Some(model) = model {
        check_model(&state, &model)?;
    }
    let (template, tokenizer) = (state.template.clone(), state.tokenizer.clone());
    let max_model_len = state.limits.max_model_len;
    let answer = off_the_runtime(move || {
        let tokens = match input {
            TokenizeInput::Prompt(text) => encode(&tokenizer, &text, Kind::Completion)?,
            TokenizeInput::Messages(messages) => chat_ids(&template, &tokenizer, &messages)?,
        };
        let piece = |id: u32| tokenizer.id_to_token(id).unwrap_or_default();
        let token_strs = return_token_strs.then(|| tokens.iter().map(|&id| piece(id)).collect());
        Ok(TokenizeResponse { count: tokens.len(), max_model_len, tokens, token_strs })
    })
    .await?;
    Ok(Json(answer).into_response())
}

/// vLLM's `/detokenize`: the text of ids, special tokens kept.
async fn serve_detokenize(state: AppState, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let req = read_valid(&state, &headers, body, parse_detokenize).await?;
    if let Some(model) = &req.model {
        check_model(&state, model)?;
    }
    let tokenizer = state.tokenizer.clone();
    let prompt = off_the_runtime(move || {
        let decoded = tokenizer.decode(&req.tokens, false);
        decoded.map_err(|e| ApiError::invalid("tokens", format!("cannot decode the tokens: {e}")))
    })
    .await?;
    Ok(Json(DetokenizeResponse { prompt }).into_response())
}

/// A request's body, once its caller is authorised, read within the limits and validated by
/// `parse`.
async fn read_valid<T>(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    parse: fn(&[u8], &Limits) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    authorize(state, headers)?;
    let bytes = read_body(state, headers, body).await?;
    parse(&bytes, &state.limits)
}

fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(key) = &state.api_key else { return Ok(()) };
    let given = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    match given.and_then(|v| v.strip_prefix("Bearer ")) {
        Some(token) if token == &**key => Ok(()),
        _ => Err(ApiError::unauthorized()),
    }
}

async fn read_body(state: &AppState, headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
    let BodyLimits { max_bytes, timeout } = state.body;
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max_bytes as u64) {
        return Err(ApiError::too_large(max_bytes));
    }
    let mut stopping = state.stopping.clone();
    tokio::select! {
        read = tokio::time::timeout(timeout, axum::body::to_bytes(body, max_bytes)) => match read {
            Ok(Ok(bytes)) => Ok(bytes),
            // Past the declared length check, a chunked body over the limit; anything else is a
            // body that ended early (a half-closed client still reads the answer) or a client gone.
            Ok(Err(e)) => match e.into_inner().is::<LengthLimitError>() {
                true => Err(ApiError::too_large(max_bytes)),
                false => Err(ApiError::body_cut_short()),
            },
            Err(_) => Err(ApiError::body_timeout(timeout.as_secs_f64())),
        },
        _ = stopping.wait_for(|&s| s) => Err(ApiError::unavailable("the server is shutting down")),
    }
}

fn check_model(state: &AppState, model: &str) -> Result<(), ApiError> {
    if model == &*state.served_name {
        Ok(())
    } else {
        Err(ApiError::unknown_model(model, &state.served_name))
    }
}

/// Runs `work` (rendering, tokenising: up to a body's worth of text) on the blocking pool, so
/// the async workers stay free for `/health`, streams and other requests.
async fn off_the_runtime<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work).await.map_err(|_| ApiError::internal("tokenising the prompt failed"))?
}

fn encode(tokenizer: &Tokenizer, text: &str, kind: Kind) -> Result<Vec<u32>, ApiError> {
    let encoding = tokenizer.encode(text, false);
    let field = kind.prompt_field();
    let encoding = encoding.map_err(|e| ApiError::invalid(field, format!("cannot tokenise the prompt: {e}")))?;
    Ok(encoding.get_ids().to_vec())
}

/// A chat's prompt ids: its messages rendered with the template, then tokenised.
fn chat_ids(template: &ChatTemplate, tokenizer: &Tokenizer, messages: &[ChatMessage]) -> Result<Vec<u32>, ApiError> {
    encode(tokenizer, &template.render(messages).map_err(|e| ApiError::invalid("messages", e))?, Kind::Chat)
}

/// `ids` cut to its last `keep` tokens where given ([`keep_last_tokens`]), and whether any were.
fn keep_last(mut ids: Vec<u32>, keep: Option<usize>) -> (Vec<u32>, bool) {
    let cut = keep.is_some_and(|k| keep_last_tokens(&mut ids, k));
    (ids, cut)
}

/// The engine requests for `prompts`, `best_of` per prompt in OpenAI's choice order
/// (prompt-major), with seed `seed + j` for the `j`-th of a prompt's candidates so that they
/// differ yet repeat. A request that gives no `max_tokens` gets [`Limits::default_max_tokens`]
/// on completions and the rest of the context on chat (as vLLM does), at most the rest of the
/// context either way.
fn engine_requests(
    state: &AppState,
    kind: Kind,
    prompts: &[Echoed],
    sampling: &Sampling,
) -> Result<Vec<GenerationRequest>, ApiError> {
    let max_len = state.limits.max_model_len;
    let seed = sampling.seed.unwrap_or_else(rand_seed);
    // The best of several candidates is chosen by their tokens' logprobs.
    let logprobs = sampling.logprobs.or((sampling.best_of > sampling.n).then_some(0));
    let mut out = Vec::with_capacity(prompts.len() * sampling.best_of);
    for Echoed { ids: prompt, .. } in prompts {
        if prompt.is_empty() {
            return Err(ApiError::invalid(kind.prompt_field(), "the prompt has no tokens".to_string()));
        }
        let rest = max_len.saturating_sub(prompt.len());
        if rest == 0 {
            let message = format!("the prompt has {} tokens, the model's length is {max_len}", prompt.len());
            return Err(ApiError::invalid(kind.prompt_field(), message));
        }
        let max_tokens = match (sampling.max_tokens, kind) {
            // The prompt's logprobs come with the first token, which the response then drops.
            (Some(0), _) => 1,
            (Some(m), _) => m,
            (None, Kind::Completion) => state.limits.default_max_tokens.min(rest),
            (None, Kind::Chat) => rest,
        };
        if max_tokens > rest {
            return Err(ApiError::invalid(
                "max_tokens",
                format!(
                    "the prompt has {} tokens and max_tokens is {max_tokens}: together they exceed the model's length of {max_len}",
                    prompt.len(),
                ),
            ));
        }
        for j in 0..sampling.best_of {
            out.push(GenerationRequest {
                prompt: prompt.clone(),
                sampling: SamplingParams {
                    temperature: sampling.temperature,
                    top_k: sampling.top_k,
                    top_p: sampling.top_p,
                    min_p: sampling.min_p,
                    seed: seed.wrapping_add(j as u64),
                },
                processors: sampling.processors.clone(),
                stop: StopConditions {
                    eos_token_ids: state.eos_token_ids.to_vec(),
                    stop: sampling.stop.clone(),
                    max_tokens,
                    max_model_len: max_len,
                    ignore_eos: sampling.ignore_eos,
                    stop_token_ids: sampling.stop_token_ids.clone(),
                    include_stop_str_in_output: sampling.include_stop_str_in_output,
                },
                logprobs,
                // `echo`'s logprobs and vLLM's `prompt_logprobs` share one scoring, the larger top;
                // a prompt's candidates share it too (the same bits), unless streamed, where each
                // choice's echo goes out when its own prompt is scored.
                prompt_logprobs: sampling
                    .logprobs
                    .filter(|_| sampling.echo)
                    .max(sampling.prompt_logprobs)
                    .filter(|_| j == 0 || sampling.stream),
                skip_prefix_cache: false,
            });
        }
    }
    Ok(out)
}

/// A seed for a request that gave none: OpenAI samples differently on each call without one.
fn rand_seed() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

async fn run(
    state: &AppState,
    kind: Kind,
    model: &str,
    prompts: Vec<Echoed>,
    sampling: &Sampling,
) -> Result<Response, ApiError> {
    let requests = engine_requests(state, kind, &prompts, sampling)?;
    let events = state.engine.submit(requests).await.map_err(|e| kind.attribute(e))?;
    let meta = Meta::new(kind, model);
    let choices = Choices {
        prompts,
        n: sampling.n,
        best_of: sampling.best_of,
        echo: sampling.echo,
        prompt_only: sampling.max_tokens == Some(0),
        logprobs: sampling.logprobs,
        prompt_logprobs: sampling.prompt_logprobs,
        tokenizer: state.tokenizer.clone(),
    };
    if sampling.stream {
        let usage = StreamUsage { include_usage: sampling.include_usage, continuous: sampling.continuous_usage_stats };
        Ok(sse(meta, events, choices, usage))
    } else {
        collect(meta, events, choices).await
    }
}

/// `GET /v1/models`'s body: the one served model.
#[derive(serde::Serialize)]
struct ModelList {
    object: &'static str,
    data: Vec<ModelCard>,
}

#[derive(serde::Serialize)]
struct ModelCard {
    id: String,
    object: &'static str,
    created: u64,
    owned_by: &'static str,
    /// vLLM's addition: prompt and output together may not pass it.
    max_model_len: usize,
}

impl ModelList {
    fn of(state: &AppState) -> Self {
        Self { object: "list", data: vec![ModelCard::of(state)] }
    }
}

impl ModelCard {
    fn of(state: &AppState) -> Self {
        let (id, max_model_len) = (state.served_name.to_string(), state.limits.max_model_len);
        Self { id, object: "model", created: 0, owned_by: "asynct", max_model_len }
    }
}
