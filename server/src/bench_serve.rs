//! `asynct bench-serve`: a load generator for a running server, in the spirit of
//! `vllm bench serve`.
//!
//! ```sh
//! asynct bench-serve --url http://127.0.0.1:8000 --vocab-size 151936 --num-prompts 256 \
//!     --max-concurrency 256 --input-len 128 --output-len 256 --out serve.json
//! ```
//!
//! Each request is a streamed greedy `/v1/completions` call with `ignore_eos` and
//! `stream_options.include_usage`, so it generates exactly its output length and the server says
//! how many tokens it read and wrote. `--num-warmups` requests run one at a time first, untimed.
//! Then the timed requests arrive all at once, or at `--request-rate` per second as a Poisson
//! process, with at most `--max-concurrency` in flight. The run is bounded: `--num-prompts`
//! requests, each at most `--request-timeout` seconds, the whole at most `--max-duration`
//! seconds, after which nothing more is sent. A request fails on an HTTP error, a timeout, an
//! error event, or usage counts other than asked for; the figures count completed requests
//! only, and the command exits 1 (after printing and writing them) when any failed.

mod client;
mod stats;
mod workload;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::Semaphore;

use crate::cli::BenchServeArgs;
use client::{Client, Streamed, Target};
use stats::{RequestResult, Summary, DEFINITIONS};
use workload::{Planned, PromptKind, Shape};

/// The route every timed request goes to.
const COMPLETIONS: &str = "/v1/completions";
/// Requests of one run, at most: each keeps its result (and its ITL gaps) to the end.
const MAX_PROMPTS: usize = 1_000_000;
/// Tokens generated over the run, at most: each one's gap is kept for the ITL percentiles.
const MAX_OUTPUT_TOKENS: usize = 1 << 27;
/// Prompt tokens of the requests in flight together, at most: their prompts are held at once.
const MAX_IN_FLIGHT_PROMPT_TOKENS: usize = 1 << 26;

/// The JSON `--out` writes.
#[derive(Serialize)]
struct Report {
    url: String,
    model: String,
    num_prompts: usize,
    max_concurrency: Option<usize>,
    /// Requests per second; `null` is all at once.
    request_rate: Option<f64>,
    input_len: usize,
    output_len: usize,
    range_ratio: f64,
    prompt_kind: String,
    seed: u64,
    num_warmups: usize,
    definitions: BTreeMap<&'static str, &'static str>,
    #[serde(flatten)]
    summary: Summary,
    requests: Vec<RequestResult>,
}

/// The flags, checked.
struct Config {
    target: Target,
    shape: Shape,
    max_concurrency: Option<usize>,
    request_timeout: Duration,
    max_duration: Duration,
}

impl Config {
    fn from_args(args: &BenchServeArgs) -> Result<Self, String> {
        let target = Target::parse(&args.url)?;
        let positive = |flag: &str, n: usize| match n {
            0 => Err(format!("{flag} must be at least 1, got 0")),
            n => Ok(n),
        };
        positive("--num-prompts", args.num_prompts)?;
        positive("--input-len", args.input_len)?;
        positive("--output-len", args.output_len)?;
        let max_concurrency = args.max_concurrency.map(|c| positive("--max-concurrency", c)).transpose()?;
        if args.num_prompts > MAX_PROMPTS {
            return Err(format!("--num-prompts must be at most {MAX_PROMPTS}, got {}", args.num_prompts));
        }
        if let Some(rate) = args.request_rate {
            if !(rate.is_finite() && rate > 0.0) {
                return Err(format!("--request-rate must be a positive number of requests per second, got {rate}"));
            }
        }
        if !(0.0..1.0).contains(&args.range_ratio) {
            return Err(format!("--range-ratio must be in [0, 1), got {}", args.range_ratio));
        }
        let prompt_kind = match (args.prompt_kind.as_str(), args.vocab_size) {
            ("ids", Some(0)) => return Err("--vocab-size must be at least 1, got 0".into()),
            ("ids", Some(vocab)) => PromptKind::Ids { vocab },
            ("ids", None) => {
                return Err("--prompt-kind ids draws token ids below --vocab-size: give the model's vocab_size \
                            (its config.json), or --prompt-kind text"
                    .into())
            }
            ("text", _) => PromptKind::Text,
            (other, _) => return Err(format!("--prompt-kind must be ids or text, got `{other}`")),
        };
        let in_flight = max_concurrency.unwrap_or(args.num_prompts).min(args.num_prompts);
        let longest_input = workload::longest(args.input_len, args.range_ratio);
        if in_flight.saturating_mul(longest_input) > MAX_IN_FLIGHT_PROMPT_TOKENS {
            return Err(format!(
                "--input-len {} (up to {longest_input} with --range-ratio) for {in_flight} requests in flight holds more \
                 than {MAX_IN_FLIGHT_PROMPT_TOKENS} prompt tokens at once: lower --input-len or --max-concurrency",
                args.input_len
            ));
        }
        let longest_output = workload::longest(args.output_len, args.range_ratio);
        if args.num_prompts.saturating_mul(longest_output) > MAX_OUTPUT_TOKENS {
            return Err(format!(
                "--output-len {} (up to {longest_output} with --range-ratio) for --num-prompts {} is more than \
                 {MAX_OUTPUT_TOKENS} tokens in one run",
                args.output_len, args.num_prompts
            ));
        }
        Ok(Self {
            target,
            shape: Shape {
                num_prompts: args.num_prompts,
                input_len: args.input_len,
                output_len: args.output_len,
                range_ratio: args.range_ratio,
                prompt_kind,
                request_rate: args.request_rate,
                seed: args.seed,
            },
            max_concurrency,
            request_timeout: seconds("--request-timeout", args.request_timeout)?,
            max_duration: seconds("--max-duration", args.max_duration)?,
        })
    }
}

/// Runs the command; the error is the message to print.
pub fn run(args: &BenchServeArgs) -> Result<(), String> {
    let config = Config::from_args(args)?;
    let runtime = tokio::runtime::Runtime::new().map_err(|e| format!("starting the async runtime: {e}"))?;
    let client = Arc::new(Client::new(config.target.clone(), args.api_key.clone()));
    let (model, results, duration_s) = runtime.block_on(async {
        let model = match &args.model {
            Some(m) => m.clone(),
            None => served_model(&client).await?,
        };
        println!("benchmarking {} ({model}) with {} requests", client.target().url(), args.num_prompts);
        for w in 0..args.num_warmups {
            let planned = config.shape.request(w, Duration::ZERO);
            let result = timed_request(&client, &model, &config.shape, &planned, config.request_timeout).await;
            if let Some(e) = result.error {
                return Err(format!("warm-up request {w} failed: {e}"));
            }
        }
        let (results, duration_s) = timed_run(&client, &model, &config).await;
        Ok::<_, String>((model, results, duration_s))
    })?;
    for (name, meaning) in DEFINITIONS {
        println!("  {name}: {meaning}");
    }
    let summary = Summary::of(&results, duration_s);
    summary.print();
    let first_error = results.iter().find_map(|r| r.error.clone());
    let report = Report {
        url: config.target.url(),
        model,
        num_prompts: args.num_prompts,
        max_concurrency: config.max_concurrency,
        request_rate: args.request_rate,
        input_len: args.input_len,
        output_len: args.output_len,
        range_ratio: args.range_ratio,
        prompt_kind: args.prompt_kind.clone(),
        seed: args.seed,
        num_warmups: args.num_warmups,
        definitions: DEFINITIONS.into_iter().collect(),
        summary,
        requests: results,
    };
    if let Some(path) = &args.out {
        let text = serde_json::to_string_pretty(&report).expect("the report serialises");
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    }
    match first_error {
        Some(e) => Err(format!("{} of {} requests failed; the first: {e}", report.summary.failed, args.num_prompts)),
        None => Ok(()),
    }
}

/// The first model the server lists, as `vllm bench serve` picks one.
async fn served_model(client: &Client) -> Result<String, String> {
    let list = client.get_json("/v1/models").await?;
    list["data"][0]["id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("/v1/models lists no model ({list}); give --model"))
}

/// Sends every planned request at its arrival time, at most `max_concurrency` at once; returns
/// the results in plan order and the run's duration in seconds.
async fn timed_run(client: &Arc<Client>, model: &str, config: &Config) -> (Vec<RequestResult>, f64) {
    let plan = config.shape.plan();
    let permits = Arc::new(Semaphore::new(config.max_concurrency.unwrap_or(Semaphore::MAX_PERMITS)));
    let start = Instant::now();
    let deadline = start + config.max_duration;
    let mut tasks = tokio::task::JoinSet::new();
    let mut not_sent = Vec::new();
    for planned in plan {
        let due = start + planned.arrival;
        if due >= deadline {
            not_sent.push(unsent(&planned));
            continue;
        }
        tokio::time::sleep_until(due.into()).await;
        let (client, permits, model, timeout) =
            (client.clone(), permits.clone(), model.to_string(), config.request_timeout);
        let shape = config.shape.clone();
        tasks.spawn(async move {
            let Ok(Ok(_permit)) = tokio::time::timeout_at(deadline.into(), permits.acquire_owned()).await else {
                return (unsent(&planned), None);
            };
            let left = deadline.saturating_duration_since(Instant::now());
            let result = timed_request(&client, &model, &shape, &planned, timeout.min(left)).await;
            let ended = result.error.is_none().then(Instant::now);
            (result, ended)
        });
    }
    let mut results = not_sent;
    let mut last_end = None;
    while let Some(joined) = tasks.join_next().await {
        let (result, ended) = joined.expect("request tasks do not panic");
        last_end = last_end.max(ended);
        results.push(result);
    }
    results.sort_by_key(|r| r.index);
    let duration = last_end.unwrap_or_else(Instant::now).duration_since(start);
    (results, duration.as_secs_f64())
}

fn unsent(planned: &Planned) -> RequestResult {
    RequestResult {
        index: planned.index,
        input_len: planned.input_len,
        output_len: planned.output_len,
        error: Some("not sent: --max-duration passed first".into()),
        ..Default::default()
    }
}

/// One streamed request within `timeout`, checked against what it asked for.
async fn timed_request(
    client: &Client,
    model: &str,
    shape: &Shape,
    planned: &Planned,
    timeout: Duration,
) -> RequestResult {
    let mut result = RequestResult {
        index: planned.index,
        input_len: planned.input_len,
        output_len: planned.output_len,
        ..Default::default()
    };
    let body = request_body(model, shape.prompt(planned), planned.output_len).to_string();
    let streamed = match tokio::time::timeout(timeout, client.stream(COMPLETIONS, body)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return RequestResult { error: Some(e), ..result },
        Err(_) => {
            let error = format!("no whole answer within {:.1} s", timeout.as_secs_f64());
            return RequestResult { error: Some(error), ..result };
        }
    };
    let Streamed { sent, text_events, first_choice, done, usage } = streamed;
    let ms = |from: Instant, to: Instant| to.duration_since(from).as_secs_f64() * 1e3;
    // A token that releases no text (part of a character) sends no event, so the first token is
    // seen with the first text; a request none of whose tokens released text has only its end.
    result.ttft_ms = text_events.first().or(first_choice.as_ref()).map(|&t| ms(sent, t));
    result.e2el_ms = Some(ms(sent, done));
    result.itl_ms = text_events.windows(2).map(|w| ms(w[0], w[1])).collect();
    result.error = match usage {
        None => Some("no usage chunk before [DONE]".into()),
        Some((_, n)) if n != planned.output_len => {
            Some(format!("generated {n} tokens, asked for exactly {} (ignore_eos)", planned.output_len))
        }
        Some((p, _)) if matches!(shape.prompt_kind, PromptKind::Ids { .. }) && p != planned.input_len => {
            Some(format!("the server read {p} prompt tokens, {} were sent", planned.input_len))
        }
        Some(_) if result.ttft_ms.is_none() => Some("no event carried a choice".into()),
        Some(_) => None,
    };
    if let Some((p, n)) = usage {
        (result.prompt_tokens, result.output_tokens) = (Some(p), Some(n));
    }
    result
}

/// A greedy streamed completion of exactly `max_tokens`.
fn request_body(model: &str, prompt: Value, max_tokens: usize) -> Value {
    json!({
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": true,
        "stream": true,
        "stream_options": {"include_usage": true},
    })
}

/// A flag's seconds as a duration; the error names the flag.
fn seconds(flag: &str, secs: f64) -> Result<Duration, String> {
    match Duration::try_from_secs_f64(secs) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err(format!("{flag} must be a positive number of seconds, got {secs}")),
    }
}
