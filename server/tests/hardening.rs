//! `asynct serve` under hostile use, over loopback on asynct-tiny: flags that would size buffers
//! past memory, slow and stalled clients, oversized requests. Each hostile case ends in a 4xx or
//! a closed connection, and the server then answers a normal request.

#[allow(dead_code)]
mod serve_support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_support::{send, Server};

fn completion(prompt: &str, max_tokens: usize) -> Value {
    json!({"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": true})
}

/// A normal request gets its 200 and all its tokens.
fn answers(server: &Server) {
    let r = server.post("/v1/completions", &completion("The river", 4));
    assert_eq!(r.status, 200, "{}\n{}", r.text(), server.log());
    assert_eq!(r.json()["usage"]["completion_tokens"], 4);
}

/// Resident memory of the server process, in MiB.
fn rss_mib(server: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).unwrap();
    let kb: u64 =
        status.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap().trim().trim_end_matches(" kB").parse().unwrap();
    kb / 1024
}

#[test]
fn ten_million_seqs_serve_within_the_default_cache() {
    // Once 2.6 TB of cache and an abort; now the default 4 GiB budget, of which untouched pages cost nothing.
    let server = Server::start("many-seqs", &["--max-num-seqs", "10000000"]);
    answers(&server);
    let rss = rss_mib(&server);
    assert!(rss < 512, "RSS {rss} MiB");
}

/// A raw loopback connection to `server`, reads bounded at 5 s so a test never hangs.
fn raw(server: &Server) -> TcpStream {
    let stream = TcpStream::connect(&server.addr).expect("the server accepts");
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    stream
}

/// Everything the server sends until it closes the connection, and how long that took; a read
/// error (a reset) counts as the close.
fn until_closed(stream: &mut TcpStream) -> (String, Duration) {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut => {
                panic!("still open after {:?}, got {:?}", start.elapsed(), String::from_utf8_lossy(&got))
            }
            Err(_) => break,
        }
    }
    (String::from_utf8_lossy(&got).into_owned(), start.elapsed())
}

fn status_of(response: &str) -> u16 {
    response.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

const HEAD: &str = "POST /v1/completions HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n";

#[test]
fn slow_and_stalled_clients_are_cut_off_by_the_timeouts() {
    let server = Server::start(
        "timeouts",
        &["--header-read-timeout", "0.3", "--keep-alive-timeout", "0.5", "--body-read-timeout", "0.4"],
    );
    // Silent from the start: closed at the keep-alive timeout.
    let (got, took) = until_closed(&mut raw(&server));
    assert!(got.is_empty() && took >= Duration::from_millis(400) && took < Duration::from_secs(3), "{got:?} {took:?}");

    // A head started and never finished (slowloris): closed at the header timeout.
    let mut s = raw(&server);
    s.write_all(HEAD.as_bytes()).unwrap();
    let (got, took) = until_closed(&mut s);
    assert!(status_of(&got) == 0 || status_of(&got) >= 400, "{got:?}");
    assert!(took >= Duration::from_millis(200) && took < Duration::from_secs(3), "{took:?}");

    // A slowloris that trickles a byte every 100 ms keeps no connection past the header timeout.
    let mut s = raw(&server);
    let start = Instant::now();
    for b in HEAD.bytes() {
        if s.write_all(&[b]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        assert!(start.elapsed() < Duration::from_secs(3), "a trickled head is still read");
    }

    // A body stalled halfway (declared length, then chunked): 408, and the connection closes.
    let body = completion("The river", 2).to_string();
    for framing in ["length", "chunked"] {
        let mut s = raw(&server);
        let half = &body[..body.len() / 2];
        let request = match framing {
            "length" => format!("{HEAD}Content-Length: {}\r\n\r\n{half}", body.len()),
            _ => format!("{HEAD}Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{half}\r\n", half.len()),
        };
        s.write_all(request.as_bytes()).unwrap();
        let (got, took) = until_closed(&mut s);
        assert_eq!(status_of(&got), 408, "{framing}: {got}");
        assert!(got.contains("request_timeout") && took < Duration::from_secs(3), "{framing}: {got} {took:?}");
    }

    // Idle after a keep-alive response: closed at the keep-alive timeout.
    let mut s = raw(&server);
    s.write_all(format!("{HEAD}Content-Length: {}\r\n\r\n{body}", body.len()).as_bytes()).unwrap();
    let (got, took) = until_closed(&mut s);
    assert_eq!(status_of(&got), 200, "{got}");
    assert!(took >= Duration::from_millis(400) && took < Duration::from_secs(3), "{took:?}");
    answers(&server);
}

#[test]
fn a_client_that_half_closes_after_sending_gets_its_answer() {
    let server = Server::start("half-close", &[]);
    let body = completion("The river", 3).to_string();
    let mut s = raw(&server);
    let request = format!("{HEAD}Connection: close\r\nContent-Length: {}\r\n\r\n{body}", body.len());
    s.write_all(request.as_bytes()).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let (got, _) = until_closed(&mut s);
    assert_eq!(status_of(&got), 200, "{got}");
    assert!(got.contains("\"completion_tokens\":3"), "{got}");
    answers(&server);
}

#[test]
fn a_body_cut_short_by_a_half_close_is_a_400_not_a_413() {
    let server = Server::start("cut-short", &[]);
    let body = completion("The river", 3).to_string();
    // One byte short of the declared length, or a chunked body without its last chunk, then the
    // client closes its side: the body ended early, which is not a body over the limit.
    let short = &body[..body.len() - 1];
    for request in [
        format!("{HEAD}Connection: close\r\nContent-Length: {}\r\n\r\n{short}", body.len()),
        format!("{HEAD}Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{short}\r\n", short.len()),
    ] {
        let mut s = raw(&server);
        s.write_all(request.as_bytes()).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let (got, _) = until_closed(&mut s);
        assert_eq!(status_of(&got), 400, "{got}");
        assert!(got.contains("ended before") && got.contains("\"param\":\"body\""), "{got}");
    }
    answers(&server);
}

#[test]
fn oversized_heads_and_bodies_are_refused_before_buffering() {
    let server = Server::start("sizes", &["--max-body-bytes", "1000"]);
    // A body past --max-body-bytes, declared or chunked: 413 without reading it all.
    let big = format!("{{\"model\": \"tiny\", \"prompt\": \"{}\"}}", "x".repeat(2000));
    let declared = send(&server.addr, "POST", "/v1/completions", &[], big.as_bytes());
    assert_eq!(declared.status, 413, "{}", declared.text());
    let mut s = raw(&server);
    let request =
        format!("{HEAD}Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{big}\r\n0\r\n\r\n", big.len());
    s.write_all(request.as_bytes()).unwrap();
    let (got, _) = until_closed(&mut s);
    assert_eq!(status_of(&got), 413, "{got}");
    // A head past 64 KiB: refused (431) or closed, never buffered on.
    let mut s = raw(&server);
    let huge = format!("{HEAD}X-Filler: {}\r\n\r\n", "a".repeat(100 << 10));
    let _ = s.write_all(huge.as_bytes());
    let (got, _) = until_closed(&mut s);
    assert!(status_of(&got) == 0 || status_of(&got) == 431, "{got}");
    answers(&server);
}

#[test]
fn connections_past_the_cap_are_refused_until_one_closes() {
    let server = Server::start("cap", &["--max-connections", "3", "--keep-alive-timeout", "30"]);
    let held: Vec<TcpStream> = (0..3).map(|_| raw(&server)).collect();
    std::thread::sleep(Duration::from_millis(100));
    let (got, _) = until_closed(&mut raw(&server));
    assert!(status_of(&got) == 0 || (status_of(&got) == 503 && got.contains("too_many_connections")), "{got}");
    drop(held);
    // The server sees the three close on their next read; then a normal request gets through.
    let start = Instant::now();
    while server.post("/v1/completions", &completion("x", 1)).status != 200 {
        assert!(start.elapsed() < Duration::from_secs(3), "the cap was not released");
        std::thread::sleep(Duration::from_millis(20));
    }
    answers(&server);
}

#[test]
fn sigterm_closes_connections_still_sending_within_the_deadline() {
    let mut server = Server::start(
        "sigterm-senders",
        &[
            "--shutdown-timeout",
            "1",
            "--header-read-timeout",
            "60",
            "--keep-alive-timeout",
            "60",
            "--body-read-timeout",
            "60",
        ],
    );
    let mut half_head = raw(&server);
    half_head.write_all(HEAD.as_bytes()).unwrap();
    let mut half_body = raw(&server);
    half_body.write_all(format!("{HEAD}Transfer-Encoding: chunked\r\n\r\n5\r\n{{\"mod\r\n").as_bytes()).unwrap();
    let idle = raw(&server);
    answers(&server);
    let start = Instant::now();
    let pid = server.child.id().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let (got, _) = until_closed(&mut half_body);
    assert_eq!(status_of(&got), 503, "{got}");
    until_closed(&mut half_head);
    let status = server.child.wait().unwrap();
    let took = start.elapsed();
    assert!(status.success(), "exit {status:?}: {}", server.log());
    assert!(took < Duration::from_secs(3), "exit took {took:?}");
    drop(idle);
}

#[test]
fn huge_chats_and_stop_strings_are_refused_before_tokenising() {
    let server = Server::start("cheap-refusals", &[]);
    let many: Vec<Value> = (0..20_000).map(|_| json!({"role": "user", "content": "hi there"})).collect();
    let started = Instant::now();
    let r = server.post("/v1/chat/completions", &json!({"model": "tiny", "messages": many, "max_tokens": 1}));
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("at most 1024 messages"), "{}", r.text());
    // asynct-tiny's 2048 tokens allow 65536 prompt characters.
    let long = json!({"model": "tiny", "messages": [{"role": "user", "content": "x".repeat(70_000)}]});
    let r = server.post("/v1/chat/completions", &long);
    assert!(r.status == 400 && r.text().contains("65536 characters"), "{}", r.text());
    let r = server.post("/v1/completions", &json!({"model": "tiny", "prompt": "y".repeat(70_000)}));
    assert!(r.status == 400 && r.text().contains("65536 characters"), "{}", r.text());
    let mut stop = completion("The river", 4);
    stop["stop"] = json!(["s".repeat(500_000)]);
    let r = server.post("/v1/completions", &stop);
    assert!(r.status == 400 && r.text().contains("1024 bytes"), "{}", r.text());
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    answers(&server);
}
