//! `asynct bench-serve` against a CPU `asynct serve` of asynct-tiny over loopback: exact lengths,
//! every figure in the JSON consistent with the server's own counters, Poisson arrivals and
//! random lengths, text prompts, failures counted and bounded in time, bad flags refused by name.

#[allow(dead_code)]
mod serve_support;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;
use serve_support::Server;

/// asynct-tiny's vocabulary (its byte tokenizer's).
const VOCAB: &str = "512";

fn bench_serve(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_asynct")).arg("bench-serve").args(args).output().expect("the binary runs")
}

fn out_path(label: &str) -> PathBuf {
    std::env::temp_dir().join(format!("asynct-bench-serve-{}-{label}.json", std::process::id()))
}

/// Runs bench-serve against `server` with `args` and `--out`; returns the output and the JSON.
fn run(server: &Server, label: &str, args: &[&str]) -> (Output, Value) {
    let url = format!("http://{}", server.addr);
    let path = out_path(label);
    let mut all = vec!["--url", &url, "--out", path.to_str().unwrap()];
    all.extend(args);
    let out = bench_serve(&all);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("no JSON ({e}); stdout: {}\nstderr: {}", stdout(&out), String::from_utf8_lossy(&out.stderr))
    });
    let _ = std::fs::remove_file(&path);
    (out, serde_json::from_str(&text).unwrap())
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn count(v: &Value) -> u64 {
    v.as_u64().unwrap()
}

/// Mean, median, p90 and p99 are there and ordered, over `n` values.
fn check_distribution(d: &Value, n: u64, what: &str) {
    assert_eq!(count(&d["count"]), n, "{what}: {d}");
    let f = |k: &str| d[k].as_f64().unwrap_or_else(|| panic!("{what}.{k} missing: {d}"));
    assert!(f("median") <= f("p90") && f("p90") <= f("p99") && f("median") > 0.0, "{what}: {d}");
}

#[test]
fn fixed_concurrency_runs_exact_lengths_and_its_counts_match_the_servers() {
    let server = Server::start("bench-fixed", &["--max-num-seqs", "8"]);
    let args = [
        "--vocab-size",
        VOCAB,
        "--num-prompts",
        "12",
        "--max-concurrency",
        "4",
        "--input-len",
        "16",
        "--output-len",
        "8",
    ];
    let (out, report) = run(&server, "fixed", &args);
    assert!(out.status.success(), "{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    let text = stdout(&out);
    for needle in [
        "Successful requests:",
        "Output token throughput (tok/s):",
        "P99 TTFT (ms):",
        "Median ITL (ms):",
        "ttft_ms: time to first token",
    ] {
        assert!(text.contains(needle), "`{needle}` missing from:\n{text}");
    }
    assert_eq!((count(&report["completed"]), count(&report["failed"])), (12, 0), "{report}");
    assert_eq!(report["model"], "tiny", "the server's first model when --model is not given");
    assert_eq!((count(&report["total_input_tokens"]), count(&report["total_output_tokens"])), (12 * 16, 12 * 8));
    let requests = report["requests"].as_array().unwrap();
    assert_eq!(requests.len(), 12);
    for (i, r) in requests.iter().enumerate() {
        assert_eq!(
            (count(&r["index"]), count(&r["prompt_tokens"]), count(&r["output_tokens"])),
            (i as u64, 16, 8),
            "{r}"
        );
        let (ttft, e2el) = (r["ttft_ms"].as_f64().unwrap(), r["e2el_ms"].as_f64().unwrap());
        assert!(0.0 < ttft && ttft <= e2el, "{r}");
    }
    let duration = report["duration_s"].as_f64().unwrap();
    let throughput = report["output_throughput"].as_f64().unwrap();
    assert!((throughput - 96.0 / duration).abs() < 1e-6 * throughput, "{report}");
    for name in ["ttft_ms", "tpot_ms", "e2el_ms"] {
        check_distribution(&report[name], 12, name);
    }
    assert!(count(&report["itl_ms"]["count"]) > 0);
    // The server saw exactly the warm-up and the timed requests, nothing else.
    assert_eq!(server.metric("asynct_prompt_tokens_total"), (13 * 16) as f64);
    assert_eq!(server.metric("asynct_generation_tokens_total"), (13 * 8) as f64);
}

#[test]
fn poisson_arrivals_with_random_lengths_and_text_prompts() {
    let server = Server::start("bench-poisson", &["--max-num-seqs", "8"]);
    let args = [
        "--vocab-size",
        VOCAB,
        "--num-prompts",
        "16",
        "--request-rate",
        "200",
        "--range-ratio",
        "0.5",
        "--input-len",
        "16",
        "--output-len",
        "8",
        "--seed",
        "3",
    ];
    let (out, report) = run(&server, "poisson", &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!((report["request_rate"].as_f64(), count(&report["completed"])), (Some(200.0), 16));
    let requests = report["requests"].as_array().unwrap();
    let (mut inputs, mut outputs) = (Vec::new(), Vec::new());
    for r in requests {
        assert_eq!(r["prompt_tokens"], r["input_len"], "token-id prompts are read as sent: {r}");
        assert_eq!(r["output_tokens"], r["output_len"], "ignore_eos makes lengths exact: {r}");
        inputs.push(count(&r["input_len"]));
        outputs.push(count(&r["output_len"]));
    }
    assert!(inputs.iter().all(|n| (8..=24).contains(n)) && outputs.iter().all(|n| (4..=12).contains(n)));
    assert!(inputs.iter().any(|&n| n != inputs[0]), "random lengths vary: {inputs:?}");
    assert_eq!(count(&report["total_output_tokens"]), outputs.iter().sum::<u64>());

    let text = ["--prompt-kind", "text", "--num-prompts", "4", "--input-len", "6", "--output-len", "3"];
    let (out, report) = run(&server, "text", &text);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for r in report["requests"].as_array().unwrap() {
        // The byte tokenizer reads six words of two to six letters as at least 17 tokens.
        assert!(count(&r["prompt_tokens"]) >= 17 && count(&r["output_tokens"]) == 3, "{r}");
    }
}

#[test]
fn failed_requests_are_counted_bounded_in_time_and_exit_1() {
    let server = Server::start("bench-fail", &["--max-num-seqs", "4"]);
    let started = Instant::now();
    let timeouts = [
        "--vocab-size",
        VOCAB,
        "--num-prompts",
        "3",
        "--num-warmups",
        "0",
        "--output-len",
        "1900",
        "--request-timeout",
        "0.2",
    ];
    let (out, report) = run(&server, "timeouts", &timeouts);
    assert!(!out.status.success() && started.elapsed() < Duration::from_secs(20));
    assert!(String::from_utf8_lossy(&out.stderr).contains("3 of 3 requests failed"), "{out:?}");
    assert_eq!((count(&report["completed"]), count(&report["failed"])), (0, 3));
    for r in report["requests"].as_array().unwrap() {
        assert!(r["error"].as_str().unwrap().contains("no whole answer within 0.2 s"), "{r}");
    }

    // At 2 requests a second, a 1.5 s run sends the first few and no more.
    let started = Instant::now();
    let short = [
        "--vocab-size",
        VOCAB,
        "--num-prompts",
        "50",
        "--request-rate",
        "2",
        "--max-duration",
        "1.5",
        "--output-len",
        "2",
    ];
    let (out, report) = run(&server, "deadline", &short);
    assert!(!out.status.success() && started.elapsed() < Duration::from_secs(20));
    let unsent = report["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["error"].as_str().is_some_and(|e| e.contains("not sent")))
        .count();
    assert!(count(&report["completed"]) >= 1 && unsent >= 40, "{} completed, {unsent} unsent", report["completed"]);

    // A model the server does not serve: every request fails with the server's message.
    let (out, report) =
        run(&server, "model", &["--vocab-size", VOCAB, "--num-prompts", "2", "--num-warmups", "0", "--model", "nope"]);
    assert!(!out.status.success());
    assert!(report["requests"][0]["error"].as_str().unwrap().contains("HTTP 404"), "{report}");
    // The server is fine after all of it.
    assert_eq!(server.get("/health").status, 200);
}

#[test]
fn bad_flags_and_unreachable_servers_are_refused_by_name() {
    let url = "http://127.0.0.1:9";
    for (args, needle) in [
        (vec!["--url", "https://127.0.0.1:8000", "--vocab-size", "5"], "--url must be http://"),
        (vec!["--url", "127.0.0.1:8000", "--vocab-size", "5"], "--url must be http://"),
        (vec!["--url", url], "--vocab-size"),
        (vec!["--url", url, "--vocab-size", "0"], "--vocab-size must be at least 1"),
        (vec!["--url", url, "--vocab-size", "5", "--num-prompts", "0"], "--num-prompts must be at least 1"),
        (vec!["--url", url, "--vocab-size", "5", "--max-concurrency", "0"], "--max-concurrency must be at least 1"),
        (vec!["--url", url, "--vocab-size", "5", "--num-prompts", "1000001"], "--num-prompts must be at most 1000000"),
        (vec!["--url", url, "--vocab-size", "5", "--input-len", "1000000"], "lower --input-len or --max-concurrency"),
        (
            vec![
                "--url",
                url,
                "--vocab-size",
                "5",
                "--num-prompts",
                "1000000",
                "--max-concurrency",
                "256",
                "--output-len",
                "1000",
            ],
            "tokens in one run",
        ),
        (vec!["--url", url, "--vocab-size", "5", "--input-len", "18446744073709551615"], "prompt tokens at once"),
        (vec!["--url", url, "--vocab-size", "5", "--request-rate", "0"], "--request-rate must be a positive"),
        (vec!["--url", url, "--vocab-size", "5", "--request-rate", "inf"], "--request-rate must be a positive"),
        (vec!["--url", url, "--vocab-size", "5", "--range-ratio", "1"], "--range-ratio must be in [0, 1)"),
        (vec!["--url", url, "--vocab-size", "5", "--prompt-kind", "images"], "--prompt-kind must be ids or text"),
        (vec!["--url", url, "--vocab-size", "5", "--request-timeout", "0"], "--request-timeout must be a positive"),
        (vec!["--url", url, "--vocab-size", "5", "--max-duration=-1"], "--max-duration must be a positive"),
        (vec!["--url", url, "--vocab-size", "5"], "cannot connect to http://127.0.0.1:9"),
    ] {
        let out = bench_serve(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: expected `{needle}` in: {stderr}");
    }
}
