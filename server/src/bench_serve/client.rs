//! The HTTP/1.1 side of `asynct bench-serve`: the one server `--url` names, a pool of kept-alive
//! connections to it, and a streamed completion timed event by event.
//!
//! Every request goes to the host and port of the URL (under its path prefix); nothing else is
//! ever connected to. A connection goes back to the pool only after its response was read to the
//! end, so the next request on it starts clean; one that the server closed while idle is retried
//! once on a fresh connection, since no byte of an answer had arrived.

use std::sync::Mutex;
use std::time::Instant;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// Bytes of one server-sent event, at most; a longer one fails the request rather than grow.
const MAX_EVENT_BYTES: usize = 1 << 20;
/// Bytes of an error body kept for the message.
const MAX_ERROR_BYTES: usize = 64 << 10;

/// The server `--url` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The host to connect to (an IPv6 address without its brackets).
    host: String,
    port: u16,
    /// `HOST:PORT` as the URL spells it, for the `Host` header.
    authority: String,
    /// The URL's path without its trailing `/`; routes are appended to it.
    prefix: String,
}

impl Target {
    /// Parses `http://HOST[:PORT][/PREFIX]`; the error names the flag.
    pub fn parse(url: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("--url must be http://HOST:PORT[/PREFIX], {why}; got `{url}`");
        let uri: Uri = url.parse().map_err(|e| bad(&format!("it does not parse ({e})")))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => return Err(bad(&format!("the scheme {other} is not spoken (plain HTTP only)"))),
            None => return Err(bad("with its scheme")),
        }
        let authority = uri.authority().ok_or_else(|| bad("with a host"))?;
        if authority.as_str().contains('@') {
            return Err(bad("without credentials in it (give --api-key)"));
        }
        if uri.query().is_some() {
            return Err(bad("without a query"));
        }
        let prefix = uri.path().trim_end_matches('/').to_string();
        if prefix.ends_with("/v1") {
            return Err(bad("naming the server's root, not its /v1 (the routes are added to it)"));
        }
        let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_string();
        Ok(Self { host, port: authority.port_u16().unwrap_or(80), authority: authority.as_str().to_string(), prefix })
    }

    /// The URL, for messages and the report.
    pub fn url(&self) -> String {
        format!("http://{}{}", self.authority, self.prefix)
    }
}

/// What the server streamed for one completion, with when each part arrived.
#[derive(Debug)]
pub struct Streamed {
    /// When the request was handed to the connection.
    pub sent: Instant,
    /// When each event carrying text arrived, in order.
    pub text_events: Vec<Instant>,
    /// When the first event carrying a choice arrived (text, or a choice's end when none of its
    /// tokens released text).
    pub first_choice: Option<Instant>,
    /// When `[DONE]` arrived.
    pub done: Instant,
    /// The usage chunk's `prompt_tokens` and `completion_tokens`.
    pub usage: Option<(usize, usize)>,
}

/// A pool of connections to the one target.
pub struct Client {
    target: Target,
    api_key: Option<String>,
    idle: Mutex<Vec<SendRequest<Full<Bytes>>>>,
}

impl Client {
    /// A client of `target` sending `api_key` as a bearer token when given.
    pub fn new(target: Target, api_key: Option<String>) -> Self {
        Self { target, api_key, idle: Mutex::new(Vec::new()) }
    }

    /// The target.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// GETs `route` and parses its JSON body.
    pub async fn get_json(&self, route: &str) -> Result<Value, String> {
        let (response, sender) = self.send(Method::GET, route, None).await?;
        let status = response.status();
        let body = read_to_end(response.into_body(), MAX_ERROR_BYTES).await?;
        self.give_back(sender);
        if status != StatusCode::OK {
            return Err(format!("GET {route}: HTTP {status}: {}", String::from_utf8_lossy(&body)));
        }
        serde_json::from_slice(&body).map_err(|e| format!("GET {route}: the body is not JSON: {e}"))
    }

    /// POSTs `body` to `route`, expecting a server-sent-event stream of completion chunks, and
    /// reads it to `[DONE]`.
    pub async fn stream(&self, route: &str, body: String) -> Result<Streamed, String> {
        let sent = Instant::now();
        let (response, sender) = self.send(Method::POST, route, Some(body)).await?;
        let status = response.status();
        let mut incoming = response.into_body();
        if status != StatusCode::OK {
            let body = read_to_end(incoming, MAX_ERROR_BYTES).await?;
            return Err(format!("HTTP {status}: {}", String::from_utf8_lossy(&body).trim()));
        }
        let mut events = Events::default();
        while !events.finished {
            let frame = match incoming.frame().await {
                Some(frame) => frame.map_err(|e| format!("reading the stream: {e}"))?,
                None => return Err("the stream ended before `data: [DONE]`".into()),
            };
            if let Ok(data) = frame.into_data() {
                events.push(&data, Instant::now())?;
            }
        }
        // The server ends the body right after [DONE]; reading that end lets the connection be reused.
        while let Some(frame) = incoming.frame().await {
            frame.map_err(|e| format!("reading the end of the stream: {e}"))?;
        }
        self.give_back(sender);
        let done = events.done_at.expect("finished streams saw [DONE]");
        Ok(Streamed {
            sent,
            text_events: events.text_at,
            first_choice: events.first_choice_at,
            done,
            usage: events.usage,
        })
    }

    /// Sends one request on a pooled connection, or a fresh one if that fails before any answer.
    async fn send(
        &self,
        method: Method,
        route: &str,
        body: Option<String>,
    ) -> Result<(Response<Incoming>, SendRequest<Full<Bytes>>), String> {
        let pooled = self.idle.lock().expect("the pool's lock is never poisoned").pop();
        if let Some(mut sender) = pooled.filter(|s| !s.is_closed()) {
            if sender.ready().await.is_ok() {
                if let Ok(response) = sender.send_request(self.request(&method, route, body.clone())?).await {
                    return Ok((response, sender));
                }
            }
        }
        let mut sender = self.connect().await?;
        let response = sender
            .send_request(self.request(&method, route, body)?)
            .await
            .map_err(|e| format!("{method} {}{route}: {e}", self.target.url()))?;
        Ok((response, sender))
    }

    fn request(&self, method: &Method, route: &str, body: Option<String>) -> Result<Request<Full<Bytes>>, String> {
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("{}{route}", self.target.prefix))
            .header(HOST, &self.target.authority);
        if let Some(key) = &self.api_key {
            builder = builder.header(AUTHORIZATION, format!("Bearer {key}"));
        }
        if body.is_some() {
            builder = builder.header(CONTENT_TYPE, "application/json");
        }
        builder.body(Full::new(Bytes::from(body.unwrap_or_default()))).map_err(|e| format!("building the request: {e}"))
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        let (host, port) = (self.target.host.as_str(), self.target.port);
        let stream = tokio::net::TcpStream::connect((host, port))
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", self.target.url()))?;
        // Small events must leave at once, not wait for more bytes to fill a segment.
        let _ = stream.set_nodelay(true);
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("HTTP handshake with {}: {e}", self.target.url()))?;
        tokio::spawn(async move {
            // A connection's own failure shows as its request's error.
            let _ = connection.await;
        });
        Ok(sender)
    }

    fn give_back(&self, sender: SendRequest<Full<Bytes>>) {
        if !sender.is_closed() {
            self.idle.lock().expect("the pool's lock is never poisoned").push(sender);
        }
    }
}

async fn read_to_end(mut body: Incoming, limit: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.map_err(|e| format!("reading the body: {e}"))?.into_data() {
            let room = limit.saturating_sub(out.len());
            out.extend_from_slice(&data[..data.len().min(room)]);
        }
    }
    Ok(out)
}

/// A server-sent-event stream of completion chunks, parsed as its bytes arrive.
#[derive(Debug, Default)]
struct Events {
    pending: Vec<u8>,
    text_at: Vec<Instant>,
    first_choice_at: Option<Instant>,
    usage: Option<(usize, usize)>,
    done_at: Option<Instant>,
    finished: bool,
}

impl Events {
    /// Takes the bytes that arrived `at`; each whole event in them is read.
    fn push(&mut self, bytes: &[u8], at: Instant) -> Result<(), String> {
        self.pending.extend_from_slice(bytes);
        while let Some(end) = find(&self.pending, b"\n\n") {
            let event: Vec<u8> = self.pending.drain(..end + 2).collect();
            self.event(&event[..end], at)?;
            if self.finished {
                return Ok(());
            }
        }
        if self.pending.len() > MAX_EVENT_BYTES {
            return Err(format!("an event of more than {MAX_EVENT_BYTES} bytes"));
        }
        Ok(())
    }

    fn event(&mut self, event: &[u8], at: Instant) -> Result<(), String> {
        let text = std::str::from_utf8(event).map_err(|_| "an event that is not UTF-8".to_string())?;
        for line in text.lines() {
            let Some(data) = line.strip_prefix("data:").map(str::trim) else { continue };
            if data == "[DONE]" {
                self.done_at = Some(at);
                self.finished = true;
                return Ok(());
            }
            let chunk: Value = serde_json::from_str(data).map_err(|e| format!("an event that is not JSON: {e}"))?;
            if let Some(error) = chunk.get("error") {
                return Err(format!("the server ended the stream with an error: {error}"));
            }
            let choices = chunk["choices"].as_array().map_or(&[][..], Vec::as_slice);
            if !choices.is_empty() && self.first_choice_at.is_none() {
                self.first_choice_at = Some(at);
            }
            if choices.iter().any(|c| c["text"].as_str().is_some_and(|t| !t.is_empty())) {
                self.text_at.push(at);
            }
            let usage = &chunk["usage"];
            if let (Some(p), Some(c)) = (usage["prompt_tokens"].as_u64(), usage["completion_tokens"].as_u64()) {
                self.usage = Some((p as usize, c as usize));
            }
        }
        Ok(())
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_plain_http_to_one_host_with_an_optional_prefix() {
        let t = Target::parse("http://127.0.0.1:8000").unwrap();
        assert_eq!((t.host.as_str(), t.port, t.prefix.as_str()), ("127.0.0.1", 8000, ""));
        let t = Target::parse("http://[::1]:9/api/").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.prefix.as_str(), t.url().as_str()),
            ("::1", 9, "/api", "http://[::1]:9/api")
        );
        assert_eq!(Target::parse("http://localhost").unwrap().port, 80);
        for (url, needle) in [
            ("https://127.0.0.1:8000", "the scheme https is not spoken"),
            ("127.0.0.1:8000", "with its scheme"),
            ("http://u:p@127.0.0.1:8000", "without credentials"),
            ("http://127.0.0.1:8000/?a=1", "without a query"),
            ("http://127.0.0.1:8000/v1", "not its /v1"),
            ("http://", "does not parse"),
        ] {
            let err = Target::parse(url).unwrap_err();
            assert!(err.contains(needle) && err.contains("--url"), "{url}: {err}");
        }
    }

    #[test]
    fn events_split_anywhere_are_read_whole_and_text_events_are_timed() {
        let stream = concat!(
            "data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":null}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"text\":\"bc\",\"finish_reason\":null}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":3,\"total_tokens\":7}}\n\n",
            "data: [DONE]\n\n",
        )
        .as_bytes();
        for cut in [1, 7, 50, stream.len()] {
            let mut events = Events::default();
            let t0 = Instant::now();
            for (i, piece) in stream.chunks(cut).enumerate() {
                events.push(piece, t0 + std::time::Duration::from_millis(i as u64)).unwrap();
            }
            assert!(events.finished, "cut {cut}");
            assert_eq!(events.text_at.len(), 2, "the empty chunks carry no text (cut {cut})");
            assert_eq!(events.first_choice_at, Some(events.text_at[0]));
            assert_eq!(events.usage, Some((4, 3)));
        }
    }

    #[test]
    fn an_error_event_or_an_endless_event_fails_the_request() {
        let mut events = Events::default();
        let err = events.push(b"data: {\"error\":{\"message\":\"boom\"}}\n\n", Instant::now()).unwrap_err();
        assert!(err.contains("boom"), "{err}");
        let mut events = Events::default();
        let err = events.push(&vec![b'x'; MAX_EVENT_BYTES + 1], Instant::now()).unwrap_err();
        assert!(err.contains("an event of more than"), "{err}");
    }
}
