//! The listening socket and the accept loop of `asynct serve`, and the limits every connection
//! lives under, so that slow or stalled clients cost a bounded number of sockets, bytes and
//! seconds:
//!
//! - the listen backlog is [`LISTEN_BACKLOG`], not the 128 that `TcpListener::bind` asks for
//!   (std's and mio's default): a benchmark opening 256 streams at once overflows 128, and the
//!   kernel drops each SYN past it, which the client resends only after its 1 s retransmission
//!   timeout, so a few requests start a second late; the kernel caps the backlog at
//!   `net.core.somaxconn`, which [`listen`] reports when it is lower than asked;
//! - at most `max_connections` open at once; one past it is answered 503 and closed at once;
//! - a connection waiting for a request (just opened, or after a response) is closed after
//!   `keep_alive_timeout`; once a request's first byte arrives its whole head must arrive within
//!   `header_timeout` (the head is at most [`MAX_HEAD_BYTES`]); both are enforced by [`Timed`],
//!   which sees every read, and neither runs while a request is being answered;
//! - the body's own deadline and size cap are the handler's (`http::read_body`);
//! - a client that half-closes its socket after sending still gets its response (HTTP/1
//!   half-close on);
//! - on shutdown the listener closes, connections with no request in hand close at once, the
//!   others close after their response, and whatever is still open after `drain` is dropped, so
//!   a half-sent head or an unfinished body never keeps the process alive.
//!
//! Each connection is served by hyper's HTTP/1 state machine over [`Timed`]; axum's `serve` does
//! not expose these limits.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::Router;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;

/// The longest request head (request line and headers) read; a longer one is refused by hyper.
pub const MAX_HEAD_BYTES: usize = 64 << 10;

/// Connections the kernel may hold completed for `accept` (capped at `net.core.somaxconn`).
pub const LISTEN_BACKLOG: u32 = 4096;

/// Where the kernel's cap on every listen backlog is read.
const SOMAXCONN: &str = "/proc/sys/net/core/somaxconn";

/// Listens on the first address `host` and `port` resolve to that binds, with a backlog of
/// [`LISTEN_BACKLOG`]; the error is the last address's. When the kernel caps backlogs lower
/// (`net.core.somaxconn`), the second value says so, naming the cap, for the caller to print.
pub async fn listen(host: &str, port: u16) -> io::Result<(TcpListener, Option<String>)> {
    let mut last = io::Error::new(io::ErrorKind::InvalidInput, "the host resolves to no address");
    for addr in tokio::net::lookup_host((host, port)).await? {
        match listen_on(addr) {
            Ok(listener) => return Ok((listener, backlog_capped())),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn listen_on(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    // As `TcpListener::bind` does: a restarted server rebinds while old connections linger.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// A warning when `net.core.somaxconn` holds the backlog below [`LISTEN_BACKLOG`].
fn backlog_capped() -> Option<String> {
    let cap: u32 = std::fs::read_to_string(SOMAXCONN).ok()?.trim().parse().ok()?;
    (cap < LISTEN_BACKLOG).then(|| {
        format!(
            "warning: {SOMAXCONN} is {cap}, so the listen backlog is {cap}, not {LISTEN_BACKLOG}: more connections \
             opened at once than that wait for the client's SYN retransmission (1 s); raise it with \
             `sysctl net.core.somaxconn={LISTEN_BACKLOG}`"
        )
    })
}

/// What each connection may take.
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    /// Connections open at once, at most.
    pub max_connections: usize,
    /// From a request's first byte to the end of its head.
    pub header_timeout: Duration,
    /// How long a connection may wait for its next request (or its first).
    pub keep_alive_timeout: Duration,
    /// After shutdown begins, how long connections may take to finish their responses.
    pub drain: Duration,
}

/// Serves `router` on `listener` until `shutdown` resolves, then drains as the module says.
pub async fn serve(listener: TcpListener, router: Router, limits: ConnLimits, shutdown: impl Future<Output = ()>) {
    let (stop, stopped) = watch::channel(false);
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => match open.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let (router, stopped) = (router.clone(), stopped.clone());
                        conns.spawn(async move {
                            connection(stream, router, limits, stopped).await;
                            drop(permit);
                        });
                    }
                    Err(_) => refuse(&stream, limits.max_connections),
                },
                // Out of file descriptors (or a connection reset before accept): the next accept
                // may succeed once a connection closes; retrying at once would spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    let _ = stop.send(true);
    let drained = async { while conns.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(limits.drain, drained).await;
    conns.abort_all();
}

/// Answers a connection past the cap with 503 if its socket takes the bytes now, and closes it.
fn refuse(stream: &TcpStream, max_connections: usize) {
    let body = format!(
        r#"{{"error":{{"message":"The server holds its limit of {max_connections} open connections; retry later.","type":"server_error","param":null,"code":"too_many_connections"}}}}"#
    );
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(response.as_bytes());
}

async fn connection(stream: TcpStream, router: Router, limits: ConnLimits, mut stopped: watch::Receiver<bool>) {
    let _ = stream.set_nodelay(true);
    let phase = Arc::new(Mutex::new(Phase::Idle(Instant::now())));
    let io = TokioIo::new(Timed::new(stream, phase.clone(), limits));
    let requests = phase.clone();
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let answering = Answering::begin(&requests);
        let response = router.clone().oneshot(req.map(Body::new));
        async move {
            let response = response.await.unwrap_or_else(|never: Infallible| match never {});
            // The request counts as answered once hyper drops the body: sent, or the client gone.
            Ok::<_, Infallible>(response.map(|body| {
                Body::new(body.map_frame(move |frame| {
                    let _ = &answering;
                    frame
                }))
            }))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .half_close(true)
        .max_header_size(MAX_HEAD_BYTES)
        .max_buf_size(MAX_HEAD_BYTES);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = stopped.wait_for(|&s| s) => {}
    }
    // No request in hand: nothing to finish, so close now rather than wait out its head.
    if !matches!(*phase.lock().expect("phase lock"), Phase::Answering(_)) {
        return;
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

/// Where a connection is between requests, which decides the read deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request's first byte, since then.
    Idle(Instant),
    /// Reading a request head whose first byte came then.
    Head(Instant),
    /// Answering this many requests (hyper answers one at a time; the count is for safety).
    Answering(usize),
}

/// Marks a request as being answered for as long as it lives.
struct Answering(Arc<Mutex<Phase>>);

impl Answering {
    fn begin(phase: &Arc<Mutex<Phase>>) -> Self {
        let mut p = phase.lock().expect("phase lock");
        *p = match *p {
            Phase::Answering(n) => Phase::Answering(n + 1),
            Phase::Idle(_) | Phase::Head(_) => Phase::Answering(1),
        };
        Self(phase.clone())
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        let mut p = self.0.lock().expect("phase lock");
        *p = match *p {
            Phase::Answering(n) if n > 1 => Phase::Answering(n - 1),
            _ => Phase::Idle(Instant::now()),
        };
    }
}

/// A socket whose reads fail with `TimedOut` past the deadline of the connection's [`Phase`]:
/// `keep_alive_timeout` after it went idle, `header_timeout` after a head's first byte. Hyper
/// polls reads in both phases, so the deadline is seen; while a request is answered there is
/// none.
struct Timed {
    io: TcpStream,
    phase: Arc<Mutex<Phase>>,
    limits: ConnLimits,
    sleep: Pin<Box<Sleep>>,
}

impl Timed {
    fn new(io: TcpStream, phase: Arc<Mutex<Phase>>, limits: ConnLimits) -> Self {
        Self { io, phase, limits, sleep: Box::pin(tokio::time::sleep(Duration::ZERO)) }
    }

    fn deadline(&self) -> Option<(Instant, &'static str)> {
        match *self.phase.lock().expect("phase lock") {
            Phase::Idle(since) => Some((since + self.limits.keep_alive_timeout, "idle past the keep-alive timeout")),
            Phase::Head(since) => {
                Some((since + self.limits.header_timeout, "request head not read within the timeout"))
            }
            Phase::Answering(_) => None,
        }
    }
}

impl AsyncRead for Timed {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    let mut p = self.phase.lock().expect("phase lock");
                    if let Phase::Idle(_) = *p {
                        *p = Phase::Head(Instant::now());
                    }
                }
                return Poll::Ready(Ok(()));
            }
            ready @ Poll::Ready(Err(_)) => return ready,
            Poll::Pending => {}
        }
        let Some((deadline, why)) = self.deadline() else { return Poll::Pending };
        let this = &mut *self;
        if this.sleep.deadline() != deadline {
            this.sleep.as_mut().reset(deadline);
        }
        match this.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, why))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for Timed {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    /// Clients that connect at once, more than the 128 of the default backlog.
    const CLIENTS: usize = 300;

    /// Connects every client before the server accepts any, as a burst of connects outruns the
    /// accept loop: past a backlog of 128 the kernel drops the SYNs and these connects would wait
    /// out the 1 s retransmission. Then serves them all, each within a bound.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_burst_of_connects_past_128_is_held_and_served_promptly() {
        let (listener, capped) = listen("127.0.0.1", 0).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut connects = JoinSet::new();
        for _ in 0..CLIENTS {
            connects.spawn(tokio::time::timeout(Duration::from_millis(500), TcpStream::connect(addr)));
        }
        let mut streams = Vec::new();
        while let Some(joined) = connects.join_next().await {
            match joined.unwrap() {
                Ok(connected) => streams.push(connected.unwrap()),
                Err(_) => panic!(
                    "a connect waited 500 ms with {} done before any accept ({})",
                    streams.len(),
                    capped.as_deref().unwrap_or("the backlog was not capped")
                ),
            }
        }
        let limits = ConnLimits {
            max_connections: CLIENTS + 20,
            header_timeout: Duration::from_secs(5),
            keep_alive_timeout: Duration::from_secs(5),
            drain: Duration::from_secs(1),
        };
        let router = Router::new().route("/health", axum::routing::get(|| async { "ok" }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, router, limits, async move {
            let _ = stopped.await;
        }));
        // Each client on a thread of its own with blocking reads, bounded by a read timeout.
        let mut answers = JoinSet::new();
        for stream in streams {
            let mut stream = stream.into_std().unwrap();
            answers.spawn_blocking(move || {
                stream.set_nonblocking(false)?;
                stream.set_read_timeout(Some(Duration::from_secs(5)))?;
                stream.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")?;
                let mut answer = Vec::new();
                stream.read_to_end(&mut answer)?;
                Ok::<_, io::Error>(answer)
            });
        }
        let mut served = 0;
        while let Some(joined) = answers.join_next().await {
            let answer = joined.unwrap().expect("answered within the 5 s read timeout");
            let text = String::from_utf8_lossy(&answer);
            assert!(text.starts_with("HTTP/1.1 200 OK") && text.ends_with("ok"), "{text}");
            served += 1;
        }
        assert_eq!(served, CLIENTS);
        stop.send(()).unwrap();
        server.await.unwrap();
    }
}
