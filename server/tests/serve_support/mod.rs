//! The test side of `asynct serve`: the real binary on a free port, and a minimal HTTP/1.1 client
//! over loopback (requests with `Connection: close`, chunked bodies decoded, server-sent events
//! read one at a time), so the tests see exactly the bytes a client would.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// A running `asynct serve` on asynct-tiny; killed and cleaned up on drop.
pub struct Server {
    pub child: Child,
    pub addr: String,
    dir: PathBuf,
    log: Arc<Mutex<String>>,
}

impl Server {
    /// Generates asynct-tiny into a fresh folder and serves it as `tiny` on the CPU with `extra` flags.
    pub fn start(label: &str, extra: &[&str]) -> Server {
        let dir = std::env::temp_dir().join(format!("asynct-serve-{}-{label}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let bin = env!("CARGO_BIN_EXE_asynct");
        let init = Command::new(bin)
            .args(["init", "--preset", "asynct-tiny", "--seed", "3", "--out", dir.to_str().unwrap()])
            .output()
            .expect("init runs");
        assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
        let mut args = vec!["serve", "--model", dir.to_str().unwrap(), "--device", "cpu", "--port", "0"];
        if !extra.contains(&"--served-model-name") {
            args.extend(["--served-model-name", "tiny"]);
        }
        args.extend(extra);
        let mut child = Command::new(bin).args(&args).stderr(Stdio::piped()).spawn().expect("serve starts");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let log = Arc::new(Mutex::new(String::new()));
        let mut addr = None;
        let mut line = String::new();
        while addr.is_none() {
            line.clear();
            if stderr.read_line(&mut line).unwrap() == 0 {
                panic!("serve exited before listening: {}", log.lock().unwrap());
            }
            log.lock().unwrap().push_str(&line);
            addr = line.trim().strip_prefix("listening on http://").map(str::to_string);
        }
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                sink.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        Server { child, addr: addr.unwrap(), dir, log }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn get(&self, path: &str) -> Response {
        send(&self.addr, "GET", path, &[], b"")
    }

    pub fn post(&self, path: &str, body: &Value) -> Response {
        send(&self.addr, "POST", path, &[], body.to_string().as_bytes())
    }

    /// Opens a streaming POST and returns its events reader once the headers are in.
    pub fn stream(&self, path: &str, body: &Value) -> Events {
        let mut stream = connect(&self.addr);
        write_request(&mut stream, "POST", path, &[], body.to_string().as_bytes());
        let mut reader = BufReader::new(stream);
        let head = read_head(&mut reader);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.to_ascii_lowercase().contains("content-type: text/event-stream"), "{head}");
        Events {
            chunked: head.to_ascii_lowercase().contains("transfer-encoding: chunked"),
            reader,
            pending: Vec::new(),
        }
    }

    /// A gauge or counter from `/metrics` (the first sample whose line starts with `name`).
    pub fn metric(&self, name: &str) -> f64 {
        let text = self.get("/metrics").text();
        let line = text.lines().find(|l| l.starts_with(name) && !l.starts_with('#'));
        let line = line.unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A whole response.
pub struct Response {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Response {
    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).expect("UTF-8 body")
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
}

fn connect(addr: &str) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("the server accepts");
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    stream
}

/// Writes a request; a server that answers before reading a huge body may close early, which is
/// not this side's failure, so write errors are left to show in the response.
pub fn write_request(stream: &mut TcpStream, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type")) {
        head.push_str("Content-Type: application/json\r\n");
    }
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-length")) {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body));
}

fn read_head(reader: &mut impl BufRead) -> String {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).expect("reading the head") == 0 || line == "\r\n" {
            return head;
        }
        head.push_str(&line);
    }
}

/// Sends one request on a fresh connection and reads the whole response.
pub fn send(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    let mut stream = connect(addr);
    write_request(&mut stream, method, path, headers, body);
    let mut reader = BufReader::new(stream);
    let head = read_head(&mut reader);
    // A connection closed with no answer shows as status 0, for the caller to report.
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut raw = Vec::new();
    let _ = reader.read_to_end(&mut raw);
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") { dechunk(&raw) } else { raw };
    Response { status, head, body }
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(end) = raw.windows(2).position(|w| w == b"\r\n") else { return out };
        let size = usize::from_str_radix(std::str::from_utf8(&raw[..end]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&raw[end + 2..end + 2 + size]);
        raw = &raw[end + 2 + size + 2..];
    }
}

/// The `data:` payloads of a server-sent-event stream, one per call.
pub struct Events {
    chunked: bool,
    reader: BufReader<TcpStream>,
    pending: Vec<u8>,
}

impl Events {
    /// The next event's data, or `None` when the stream ended.
    pub fn next_data(&mut self) -> Option<String> {
        loop {
            if let Some(end) = self.pending.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.pending.drain(..end + 2).collect();
                let event = String::from_utf8(event).expect("an event is whole UTF-8");
                let data = event.trim_end().strip_prefix("data: ").unwrap_or_else(|| panic!("not data: {event:?}"));
                return Some(data.to_string());
            }
            if !self.fill() {
                assert!(self.pending.is_empty(), "stream ended inside an event: {:?}", self.pending);
                return None;
            }
        }
    }

    /// Every remaining payload, `[DONE]` included.
    pub fn collect(mut self) -> Vec<String> {
        std::iter::from_fn(|| self.next_data()).collect()
    }

    fn fill(&mut self) -> bool {
        if !self.chunked {
            let mut buf = [0u8; 4096];
            let n = self.reader.read(&mut buf).unwrap_or(0);
            self.pending.extend_from_slice(&buf[..n]);
            return n > 0;
        }
        let mut line = String::new();
        if self.reader.read_line(&mut line).unwrap_or(0) == 0 {
            return false;
        }
        let size = usize::from_str_radix(line.trim(), 16).expect("a chunk size");
        if size == 0 {
            return false;
        }
        let mut chunk = vec![0u8; size + 2];
        self.reader.read_exact(&mut chunk).expect("a whole chunk");
        self.pending.extend_from_slice(&chunk[..size]);
        true
    }
}
