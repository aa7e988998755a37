//! Prefix caching through `asynct serve` (asynct-tiny on the CPU, 512-token chunks): prompts that
//! share more than a chunk with an earlier one get the completions a `--no-prefix-caching` server
//! gives, and `/metrics` counts the prompt tokens looked up and found.

#[allow(dead_code)]
mod serve_support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_support::Server;

fn completion(server: &Server, prompt: &[u32], seed: u64) -> Value {
    let body = json!({
        "model": "tiny", "prompt": prompt, "max_tokens": 12, "temperature": 0.8, "seed": seed, "ignore_eos": true
    });
    let r = server.post("/v1/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// Waits (10 s at most) for the metric to read `want`: the engine thread publishes after a step.
fn await_metric(server: &Server, name: &str, want: f64) {
    let start = Instant::now();
    while server.metric(name) != want {
        assert!(start.elapsed() < Duration::from_secs(10), "{name} is {}, expected {want}", server.metric(name));
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn shared_prefixes_hit_whole_chunks_change_no_completion_and_are_counted_in_tokens() {
    let cached = Server::start("prefix-on", &[]);
    let plain = Server::start("prefix-off", &["--no-prefix-caching"]);
    let first: Vec<u32> = (0..1100).map(|t| (t * 37 + 5) % 490 + 3).collect();
    let mut second = first[..1030].to_vec();
    second.extend((0..70).map(|t| (t * 11 + 100) % 490 + 3));
    // The second and third reuse two whole chunks (1024 tokens); the first reuses nothing.
    for (prompt, seed) in [(&first, 1), (&second, 2), (&first, 3)] {
        let (a, b) = (completion(&cached, prompt, seed), completion(&plain, prompt, seed));
        assert_eq!(a["choices"], b["choices"], "seed {seed}");
        assert_eq!(a["usage"], b["usage"], "seed {seed}");
    }
    await_metric(&cached, "asynct_prefix_cache_queries_total", 3.0 * 1100.0);
    await_metric(&cached, "asynct_prefix_cache_hits_total", 2.0 * 1024.0);
    assert_eq!(plain.metric("asynct_prefix_cache_queries_total"), 0.0);
    assert_eq!(plain.metric("asynct_prefix_cache_hits_total"), 0.0);
    let help = cached.get("/metrics").text();
    assert!(help.contains("# HELP asynct_prefix_cache_hits_total Prompt tokens (not requests)"), "{help}");
    assert_eq!(cached.metric("asynct_kv_blocks_used"), 0.0, "cached blocks no one holds count as free");
}
