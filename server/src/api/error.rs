//! [`ApiError`]: every failure the HTTP layer reports, as OpenAI reports it.
//!
//! Clients such as the `openai` Python package branch on the status and read
//! `{"error": {"message", "type", "param", "code"}}`, so both are fixed here, once, and every
//! route and stream goes through [`ApiError::body`] or [`IntoResponse`].
//!
//! An engine refusal becomes an [`ApiError`] in one place, `From<model::Error>`: a parameter the
//! engine or the oracle refuses is a 400 naming that parameter (the prompt's own refusals, empty,
//! too long or outside the vocabulary, are the engine's `prompt`; a request whose life passes the
//! whole KV cache names `prompt` or `max_tokens`, whichever alone passes it), and anything else
//! is the engine's failure, a 500 (a cache allocation failing past admission among them).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

/// A request that failed, with what the client is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: u16,
    /// A sentence naming the field, the limit and the value.
    pub message: String,
    /// OpenAI's error `type`, e.g. `invalid_request_error`.
    pub kind: &'static str,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    /// A stable machine-readable code, when OpenAI has one.
    pub code: Option<String>,
}

impl ApiError {
    fn new(status: u16, kind: &'static str, message: impl Into<String>) -> Self {
        Self { status, message: message.into(), kind, param: None, code: None }
    }

    /// 400: `param` is malformed or out of range; `message` says how.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        Self { param: Some(param.to_string()), ..Self::new(400, "invalid_request_error", message) }
    }

    /// 404: the request names a model this server does not serve.
    pub fn unknown_model(name: &str, served: &str) -> Self {
        let message = format!("The model `{name}` does not exist; this server serves `{served}`.");
        Self {
            param: Some("model".to_string()),
            code: Some("model_not_found".to_string()),
            ..Self::new(404, "invalid_request_error", message)
        }
    }

    /// 404: no route at this path.
    pub fn not_found() -> Self {
        let message = "No such route; this server answers /v1/completions, /v1/chat/completions, \
                       /v1/models, /v1/models/{model}, /health and /metrics.";
        Self { code: Some("not_found".to_string()), ..Self::new(404, "invalid_request_error", message) }
    }

    /// 408: the request body did not arrive within `seconds`.
    pub fn body_timeout(seconds: f64) -> Self {
        let message = format!("The request body did not arrive within {seconds} s.");
        Self { code: Some("request_timeout".to_string()), ..Self::new(408, "invalid_request_error", message) }
    }

    /// 401: the API key is missing or wrong.
    pub fn unauthorized() -> Self {
        let message = "Incorrect or missing API key: send `Authorization: Bearer KEY`.";
        Self { code: Some("invalid_api_key".to_string()), ..Self::new(401, "authentication_error", message) }
    }

    /// 429: `limit` requests already wait, so this one is refused rather than queued.
    pub fn queue_full(limit: usize) -> Self {
        let message = format!("The server is overloaded: its queue of {limit} waiting requests is full. Retry later.");
        Self { code: Some("queue_full".to_string()), ..Self::new(429, "rate_limit_error", message) }
    }

    /// 400: a request of `generations` engine requests (prompts times `best_of`) where the
    /// queue holds `max_queue`: never admitted, so no 429 that invites a retry.
    pub fn larger_than_queue(generations: usize, max_queue: usize) -> Self {
        let message = format!(
            "The request makes {generations} generations (its prompts times n or best_of), more than the server's \
             queue of {max_queue} (--max-queue) ever holds: ask for fewer per request."
        );
        Self { code: Some(LARGER_THAN_QUEUE.to_string()), ..Self::invalid("prompt", message) }
    }

    /// 413: the body is longer than `limit_bytes`.
    pub fn too_large(limit_bytes: usize) -> Self {
        let message = format!("The request body is larger than the limit of {limit_bytes} bytes.");
        Self { param: Some("body".to_string()), ..Self::new(413, "invalid_request_error", message) }
    }

    /// 400: the body ended before it was whole (short of its `Content-Length`, or a chunked body
    /// without its last chunk): the client closed its side or the connection broke.
    pub fn body_cut_short() -> Self {
        Self::invalid(
            "body",
            "The request body ended before it was whole: the connection closed or broke while it was read.",
        )
    }

    /// 503: the server cannot take the request now (it is shutting down).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "service_unavailable", message)
    }

    /// 500: the engine failed; the client's request may have been fine.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "internal_error", message)
    }

    /// The JSON body, also sent as the last event of a stream that fails.
    pub fn body(&self) -> Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

/// The code of [`ApiError::larger_than_queue`].
pub const LARGER_THAN_QUEUE: &str = "larger_than_queue";

impl From<model::Error> for ApiError {
    fn from(e: model::Error) -> Self {
        let message = e.to_string();
        match e {
            model::Error::Invalid { param, .. } => ApiError::invalid(param, message),
            model::Error::Oracle(oracle::Error::Invalid { name, .. }) => {
                ApiError::invalid(request_param(name), message)
            }
            _ => ApiError::internal(message),
        }
    }
}

/// The request field an oracle input stands for: the prompt's length is the prompt's; every
/// other name the oracle refuses is the field's own (`temperature`, `top_p`, `min_p`, `stop`,
/// `max_tokens`, `logit_bias`, the penalties).
fn request_param(oracle_name: &str) -> &str {
    match oracle_name {
        "prompt_len" => "prompt",
        other => other,
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status, self.kind, self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // Every constructor uses a valid status; the fallback only guards a hand-built value.
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(self.body())).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_kinds_follow_openai() {
        let cases = [
            (ApiError::invalid("temperature", "bad"), 400, "invalid_request_error"),
            (ApiError::unknown_model("gpt-4", "tiny"), 404, "invalid_request_error"),
            (ApiError::not_found(), 404, "invalid_request_error"),
            (ApiError::unauthorized(), 401, "authentication_error"),
            (ApiError::queue_full(8), 429, "rate_limit_error"),
            (ApiError::too_large(1024), 413, "invalid_request_error"),
            (ApiError::unavailable("shutting down"), 503, "service_unavailable"),
            (ApiError::internal("boom"), 500, "internal_error"),
        ];
        for (e, status, kind) in cases {
            assert_eq!((e.status, e.kind), (status, kind), "{e}");
            assert_eq!(e.clone().into_response().status().as_u16(), status, "{e}");
        }
    }

    #[test]
    fn body_has_exactly_openais_four_fields() {
        let body = ApiError::invalid("max_tokens", "`max_tokens` must be >= 1. Given: 0").body();
        let error = body["error"].as_object().expect("an error object");
        let mut keys: Vec<&str> = error.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["code", "message", "param", "type"]);
        assert_eq!(body["error"]["param"], "max_tokens");
        assert_eq!(body["error"]["code"], Value::Null);
        assert_eq!(body.as_object().map(|o| o.len()), Some(1));
    }

    #[test]
    fn engine_refusals_name_their_parameter_and_failures_are_500() {
        let top_p = oracle::Error::Invalid { name: "top_p", reason: "must be in (0, 1], got 0".into() };
        let cases = [
            (model::Error::Oracle(top_p), 400, Some("top_p")),
            (model::Error::Invalid { param: "min_tokens", reason: "too many".into() }, 400, Some("min_tokens")),
            (
                model::Error::Oracle(oracle::Error::Invalid { name: "prompt_len", reason: "long".into() }),
                400,
                Some("prompt"),
            ),
            (model::Error::Invalid { param: "max_tokens", reason: "needs 9 blocks".into() }, 400, Some("max_tokens")),
            (model::Error::OutOfBlocks { requested: 9, free: 1, total: 8 }, 500, None),
            (model::Error::Invalid { param: "prompt", reason: "token id 9999".into() }, 400, Some("prompt")),
            (model::Error::Request("request id 4 is already scheduled".into()), 500, None),
            (model::Error::Executor("lost".into()), 500, None),
            (model::Error::UnknownRequest { id: 3 }, 500, None),
        ];
        for (e, status, param) in cases {
            let text = e.to_string();
            let api = ApiError::from(e);
            assert_eq!((api.status, api.param.as_deref()), (status, param), "{text}");
            assert_eq!(api.message, text);
        }
    }

    #[test]
    fn messages_name_the_limit_and_the_model() {
        let e = ApiError::unknown_model("gpt-4", "tiny");
        assert!(e.message.contains("gpt-4") && e.message.contains("tiny"), "{e}");
        assert_eq!(e.code.as_deref(), Some("model_not_found"));
        assert!(ApiError::queue_full(17).message.contains("17"));
        assert!(ApiError::too_large(4096).message.contains("4096"));
    }
}
