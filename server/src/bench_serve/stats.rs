//! What `asynct bench-serve` reports: throughput and the latency distributions, each figure with
//! its definition (printed before the table and kept in the JSON), in the spirit of
//! `vllm bench serve`.

use serde::Serialize;

/// What each reported figure means.
pub const DEFINITIONS: [(&str, &str); 8] = [
    ("duration_s", "seconds from the first timed request's arrival to the end of the last response"),
    ("request_throughput", "completed requests / duration_s"),
    ("input_throughput", "prompt tokens of completed requests (the server's usage counts) / duration_s"),
    ("output_throughput", "generated tokens of completed requests / duration_s"),
    ("ttft_ms", "time to first token: from sending a request to the first streamed event carrying text (the first choice event when no token released text)"),
    ("tpot_ms", "time per output token after the first, per request: (e2el - ttft) / (output tokens - 1)"),
    ("itl_ms", "inter-token latency: the gaps between consecutive text events of a request, all requests pooled (an event may carry several tokens)"),
    ("e2el_ms", "end-to-end latency: from sending a request to its `data: [DONE]`"),
];

/// Mean, median, 90th and 99th percentile of some milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Distribution {
    pub mean: f64,
    pub median: f64,
    pub p90: f64,
    pub p99: f64,
    /// How many values.
    pub count: usize,
}

impl Distribution {
    /// `None` for no values.
    pub fn of(values: &[f64]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        Some(Self {
            mean: v.iter().sum::<f64>() / v.len() as f64,
            median: percentile(&v, 50.0),
            p90: percentile(&v, 90.0),
            p99: percentile(&v, 99.0),
            count: v.len(),
        })
    }
}

/// The `p`th percentile of sorted `v`, interpolated linearly between the two nearest ranks (as
/// numpy's default, which `vllm bench serve` uses).
fn percentile(v: &[f64], p: f64) -> f64 {
    let pos = p / 100.0 * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// One timed request's result.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RequestResult {
    pub index: usize,
    /// Prompt tokens asked for (exact for token ids; words for text).
    pub input_len: usize,
    /// `max_tokens`.
    pub output_len: usize,
    /// The server's usage counts.
    pub prompt_tokens: Option<usize>,
    pub output_tokens: Option<usize>,
    pub ttft_ms: Option<f64>,
    pub e2el_ms: Option<f64>,
    /// Why it failed; `None` for a completed request.
    pub error: Option<String>,
    /// Gaps between its text events (kept out of the JSON: the pooled distribution is there).
    #[serde(skip)]
    pub itl_ms: Vec<f64>,
}

/// The whole run's figures.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub completed: usize,
    pub failed: usize,
    pub duration_s: f64,
    pub total_input_tokens: usize,
    pub total_output_tokens: usize,
    pub request_throughput: f64,
    pub input_throughput: f64,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    pub ttft_ms: Option<Distribution>,
    pub tpot_ms: Option<Distribution>,
    pub itl_ms: Option<Distribution>,
    pub e2el_ms: Option<Distribution>,
}

impl Summary {
    /// The figures of `results` over `duration_s`.
    pub fn of(results: &[RequestResult], duration_s: f64) -> Self {
        let ok: Vec<&RequestResult> = results.iter().filter(|r| r.error.is_none()).collect();
        let input: usize = ok.iter().filter_map(|r| r.prompt_tokens).sum();
        let output: usize = ok.iter().filter_map(|r| r.output_tokens).sum();
        let per_s = |n: usize| if duration_s > 0.0 { n as f64 / duration_s } else { 0.0 };
        let ttft: Vec<f64> = ok.iter().filter_map(|r| r.ttft_ms).collect();
        let e2el: Vec<f64> = ok.iter().filter_map(|r| r.e2el_ms).collect();
        let tpot: Vec<f64> = ok
            .iter()
            .filter_map(|r| match (r.ttft_ms, r.e2el_ms, r.output_tokens) {
                (Some(t), Some(e), Some(n)) if n > 1 => Some((e - t) / (n - 1) as f64),
                _ => None,
            })
            .collect();
        let itl: Vec<f64> = ok.iter().flat_map(|r| r.itl_ms.iter().copied()).collect();
        Self {
            completed: ok.len(),
            failed: results.len() - ok.len(),
            duration_s,
            total_input_tokens: input,
            total_output_tokens: output,
            request_throughput: per_s(ok.len()),
            input_throughput: per_s(input),
            output_throughput: per_s(output),
            total_token_throughput: per_s(input + output),
            ttft_ms: Distribution::of(&ttft),
            tpot_ms: Distribution::of(&tpot),
            itl_ms: Distribution::of(&itl),
            e2el_ms: Distribution::of(&e2el),
        }
    }

    /// The table, as `vllm bench serve` prints it.
    pub fn print(&self) {
        let line = |name: &str, value: String| println!("{name:<40}{value:>14}");
        println!("{:=^54}", " Serving Benchmark Result ");
        line("Successful requests:", self.completed.to_string());
        line("Failed requests:", self.failed.to_string());
        line("Benchmark duration (s):", format!("{:.2}", self.duration_s));
        line("Total input tokens:", self.total_input_tokens.to_string());
        line("Total generated tokens:", self.total_output_tokens.to_string());
        line("Request throughput (req/s):", format!("{:.2}", self.request_throughput));
        line("Input token throughput (tok/s):", format!("{:.2}", self.input_throughput));
        line("Output token throughput (tok/s):", format!("{:.2}", self.output_throughput));
        line("Total token throughput (tok/s):", format!("{:.2}", self.total_token_throughput));
        for (title, short, d) in [
            ("Time to First Token", "TTFT", &self.ttft_ms),
            ("Time per Output Token (excl. 1st token)", "TPOT", &self.tpot_ms),
            ("Inter-token Latency", "ITL", &self.itl_ms),
            ("End-to-end Latency", "E2EL", &self.e2el_ms),
        ] {
            println!("{:-^54}", format!(" {title} "));
            match d {
                Some(d) => {
                    line(&format!("Mean {short} (ms):"), format!("{:.2}", d.mean));
                    line(&format!("Median {short} (ms):"), format!("{:.2}", d.median));
                    line(&format!("P90 {short} (ms):"), format!("{:.2}", d.p90));
                    line(&format!("P99 {short} (ms):"), format!("{:.2}", d.p99));
                }
                None => line(&format!("{short}:"), "no values".into()),
            }
        }
        println!("{}", "=".repeat(54));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_between_ranks_as_numpy_does() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        let d = Distribution::of(&v).unwrap();
        // numpy.percentile(range(1, 11), [50, 90, 99]) = 5.5, 9.1, 9.91
        assert_eq!((d.mean, d.median, d.count), (5.5, 5.5, 10));
        assert!((d.p90 - 9.1).abs() < 1e-12 && (d.p99 - 9.91).abs() < 1e-12, "{d:?}");
        assert_eq!(Distribution::of(&[3.0]).unwrap().p99, 3.0);
        assert_eq!(Distribution::of(&[]), None);
    }

    #[test]
    fn throughput_and_tpot_count_completed_requests_only() {
        let ok = |index, ttft, e2el, n| RequestResult {
            index,
            prompt_tokens: Some(10),
            output_tokens: Some(n),
            ttft_ms: Some(ttft),
            e2el_ms: Some(e2el),
            itl_ms: vec![1.0; n - 1],
            ..Default::default()
        };
        let failed = RequestResult { index: 2, error: Some("HTTP 503".into()), ..Default::default() };
        let s = Summary::of(&[ok(0, 10.0, 40.0, 4), ok(1, 20.0, 20.0, 1), failed], 2.0);
        assert_eq!((s.completed, s.failed, s.total_input_tokens, s.total_output_tokens), (2, 1, 20, 5));
        assert_eq!((s.request_throughput, s.output_throughput, s.total_token_throughput), (1.0, 2.5, 12.5));
        let tpot = s.tpot_ms.unwrap();
        assert_eq!((tpot.count, tpot.mean), (1, 10.0), "one output token has no TPOT; (40 - 10) / 3");
        assert_eq!(s.itl_ms.unwrap().count, 3);
        assert_eq!(s.ttft_ms.unwrap().median, 15.0);
    }
}
