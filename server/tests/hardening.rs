//! `asynct serve` under hostile use, over loopback on asynct-tiny: flags that would size buffers
//! past memory, slow and stalled clients, oversized requests. Each hostile case ends in a 4xx or
//! a closed connection, and the server then answers a normal request.

#[allow(dead_code)]
mod serve_support;

use serde_json::{json, Value};
use serve_support::Server;

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
