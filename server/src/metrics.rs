//! [`Metrics`]: what `GET /metrics` shows, in Prometheus' text exposition format (version 0.0.4).
//!
//! Written here rather than taken from a crate because the server needs a dozen fixed series and
//! nothing else: gauges the engine thread sets after each step, counters and latency histograms
//! it bumps per step, per token and per request. Handlers only read ([`Metrics::render`]), so gauges and
//! counters are relaxed atomics (a scrape may mix two steps' values, which Prometheus tolerates)
//! and each histogram is one small mutex, so that its buckets, sum and count always agree.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use model::engine::EngineStats;

/// The finish reasons always shown, at 0 before the first such request, so that `rate()` works.
pub const FINISH_REASONS: [&str; 4] = ["stop", "length", "abort", "error"];

const TTFT_BUCKETS: &[f64] = &[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0];
const ITL_BUCKETS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5];
const E2E_BUCKETS: &[f64] = &[0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0];

/// The server's metrics; shared as `Arc<Metrics>` between the engine thread and the handlers.
pub struct Metrics {
    requests_running: AtomicU64,
    requests_waiting: AtomicU64,
    kv_blocks_used: AtomicU64,
    kv_blocks_total: AtomicU64,
    prompt_tokens: AtomicU64,
    generation_tokens: AtomicU64,
    rejected: AtomicU64,
    prefix_cache_queries: AtomicU64,
    prefix_cache_hits: AtomicU64,
    finished: Mutex<BTreeMap<String, u64>>,
    steps: [StepTime; 2],
    /// Nanoseconds the engine thread spent between consecutive steps (routing events, commands).
    between_steps_ns: AtomicU64,
    ttft: Histogram,
    itl: Histogram,
    e2e: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every series at zero.
    pub fn new() -> Self {
        Self {
            requests_running: AtomicU64::new(0),
            requests_waiting: AtomicU64::new(0),
            kv_blocks_used: AtomicU64::new(0),
            kv_blocks_total: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            prefix_cache_queries: AtomicU64::new(0),
            prefix_cache_hits: AtomicU64::new(0),
            finished: Mutex::new(FINISH_REASONS.iter().map(|r| (r.to_string(), 0)).collect()),
            steps: Default::default(),
            between_steps_ns: AtomicU64::new(0),
            ttft: Histogram::new(TTFT_BUCKETS),
            itl: Histogram::new(ITL_BUCKETS),
            e2e: Histogram::new(E2E_BUCKETS),
        }
    }

    /// Sets `asynct_requests_running`.
    pub fn set_requests_running(&self, n: usize) {
        self.requests_running.store(n as u64, Ordering::Relaxed);
    }

    /// Sets `asynct_requests_waiting`.
    pub fn set_requests_waiting(&self, n: usize) {
        self.requests_waiting.store(n as u64, Ordering::Relaxed);
    }

    /// Sets `asynct_kv_blocks_used`.
    pub fn set_kv_blocks_used(&self, n: usize) {
        self.kv_blocks_used.store(n as u64, Ordering::Relaxed);
    }

    /// Sets `asynct_kv_blocks_total`.
    pub fn set_kv_blocks_total(&self, n: usize) {
        self.kv_blocks_total.store(n as u64, Ordering::Relaxed);
    }

    /// Sets the four gauges from the engine's load, and the prefix-cache counters from its
    /// totals (which only grow, so they stay counters).
    pub fn set_engine_stats(&self, stats: &EngineStats) {
        self.set_requests_running(stats.num_running);
        self.set_requests_waiting(stats.num_waiting);
        self.set_kv_blocks_used(stats.num_blocks_used);
        self.set_kv_blocks_total(stats.num_blocks);
        self.prefix_cache_queries.store(stats.prefix_cache_queries, Ordering::Relaxed);
        self.prefix_cache_hits.store(stats.prefix_cache_hits, Ordering::Relaxed);
    }

    /// A request was admitted with `n` prompt tokens.
    pub fn record_prompt(&self, n: usize) {
        self.prompt_tokens.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// A request's first token came `latency` after it arrived; counts one generated token.
    pub fn record_first_token(&self, latency: Duration) {
        self.generation_tokens.fetch_add(1, Ordering::Relaxed);
        self.ttft.observe(latency.as_secs_f64());
    }

    /// A later token came `gap` after the request's previous one; counts one generated token.
    pub fn record_inter_token(&self, gap: Duration) {
        self.generation_tokens.fetch_add(1, Ordering::Relaxed);
        self.itl.observe(gap.as_secs_f64());
    }

    /// A request ended for `reason` (`stop`, `length`, `abort` or `error`) `e2e` after it arrived.
    pub fn record_finished(&self, reason: &str, e2e: Duration) {
        *lock(&self.finished).entry(reason.to_string()).or_insert(0) += 1;
        self.e2e.observe(e2e.as_secs_f64());
    }

    /// An engine step took `took` (inside `Engine::step`); `decode_only` when every row of it
    /// was a decode row, the step an engine-only benchmark's decode step time measures.
    pub fn record_step(&self, decode_only: bool, took: Duration) {
        let s = &self.steps[usize::from(!decode_only)];
        s.count.fetch_add(1, Ordering::Relaxed);
        s.ns.fetch_add(nanos(took), Ordering::Relaxed);
    }

    /// The engine thread spent `took` between two consecutive steps: the server's own work on
    /// the thread the steps wait for.
    pub fn record_between_steps(&self, took: Duration) {
        self.between_steps_ns.fetch_add(nanos(took), Ordering::Relaxed);
    }

    /// A request was refused with 429 because the queue was full.
    pub fn record_rejected(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// Every series in the text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let gauges = [
            ("asynct_requests_running", "Requests admitted and unfinished.", &self.requests_running),
            (
                "asynct_requests_waiting",
                "Requests queued for the engine, preempted ones included.",
                &self.requests_waiting,
            ),
            ("asynct_kv_blocks_used", "KV-cache blocks held by running requests.", &self.kv_blocks_used),
            ("asynct_kv_blocks_total", "KV-cache blocks in all.", &self.kv_blocks_total),
        ];
        for (name, help, value) in gauges {
            header(&mut out, name, help, "gauge");
            let _ = writeln!(out, "{name} {}", load(value));
        }
        let counters = [
            ("asynct_prompt_tokens_total", "Prompt tokens of admitted requests.", &self.prompt_tokens),
            ("asynct_generation_tokens_total", "Tokens generated.", &self.generation_tokens),
            ("asynct_requests_rejected_total", "Requests refused because the queue was full.", &self.rejected),
            (
                "asynct_prefix_cache_queries_total",
                "Prompt tokens (not requests) looked up in the prefix cache, each request's once.",
                &self.prefix_cache_queries,
            ),
            (
                "asynct_prefix_cache_hits_total",
                "Prompt tokens (not requests) of those lookups found in the prefix cache, not computed.",
                &self.prefix_cache_hits,
            ),
        ];
        for (name, help, value) in counters {
            header(&mut out, name, help, "counter");
            let _ = writeln!(out, "{name} {}", load(value));
        }
        header(
            &mut out,
            "asynct_engine_steps_total",
            "Engine steps, by kind (decode: every row a decode row).",
            "counter",
        );
        for (kind, s) in STEP_KINDS.iter().zip(&self.steps) {
            let _ = writeln!(out, "asynct_engine_steps_total{{kind=\"{kind}\"}} {}", load(&s.count));
        }
        let help = "Seconds inside the engine's steps, by kind.";
        header(&mut out, "asynct_engine_step_seconds_total", help, "counter");
        for (kind, s) in STEP_KINDS.iter().zip(&self.steps) {
            let _ = writeln!(out, "asynct_engine_step_seconds_total{{kind=\"{kind}\"}} {}", seconds(load(&s.ns)));
        }
        let (name, help) = (
            "asynct_engine_between_steps_seconds_total",
            "Seconds the engine thread spent between consecutive steps: routing events, taking commands.",
        );
        header(&mut out, name, help, "counter");
        let _ = writeln!(out, "{name} {}", seconds(load(&self.between_steps_ns)));
        header(&mut out, "asynct_requests_total", "Requests ended, by finish reason.", "counter");
        for (reason, n) in lock(&self.finished).iter() {
            let _ = writeln!(out, "asynct_requests_total{{finish_reason=\"{}\"}} {n}", escape(reason));
        }
        let histograms = [
            ("asynct_time_to_first_token_seconds", "Seconds from arrival to the first token.", &self.ttft),
            ("asynct_inter_token_latency_seconds", "Seconds between a request's consecutive tokens.", &self.itl),
            ("asynct_e2e_request_latency_seconds", "Seconds from arrival to the end of a request.", &self.e2e),
        ];
        for (name, help, histogram) in histograms {
            header(&mut out, name, help, "histogram");
            histogram.render(&mut out, name);
        }
        out
    }
}

/// The `kind` label of the step series, in the order of `Metrics::steps`.
const STEP_KINDS: [&str; 2] = ["decode", "other"];

/// Steps of one kind and their summed wall time.
#[derive(Default)]
struct StepTime {
    count: AtomicU64,
    ns: AtomicU64,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn seconds(ns: u64) -> f64 {
    ns as f64 * 1e-9
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A label value as the format requires: backslash, quote and newline escaped.
fn escape(label: &str) -> String {
    label.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Takes the lock even if a holder panicked: every update leaves the data consistent.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Fixed upper bounds; counts are kept per bucket and made cumulative when rendered.
struct Histogram {
    bounds: &'static [f64],
    state: Mutex<HistogramState>,
}

struct HistogramState {
    /// One per bound, then one for values above them all (`+Inf`).
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "bucket bounds must increase");
        Self { bounds, state: Mutex::new(HistogramState { counts: vec![0; bounds.len() + 1], sum: 0.0 }) }
    }

    fn observe(&self, seconds: f64) {
        // `le` is inclusive: a value equal to a bound belongs to that bound's bucket.
        let bucket = self.bounds.partition_point(|&b| b < seconds);
        let mut s = lock(&self.state);
        s.counts[bucket] += 1;
        s.sum += seconds;
    }

    fn render(&self, out: &mut String, name: &str) {
        let s = lock(&self.state);
        let mut cumulative = 0;
        for (bound, n) in self.bounds.iter().zip(&s.counts) {
            cumulative += n;
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        cumulative += s.counts[self.bounds.len()];
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {cumulative}", s.sum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample line that starts with `series ` exactly.
    fn sample(text: &str, series: &str) -> f64 {
        let prefix = format!("{series} ");
        let line = text.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no {series} in\n{text}"));
        line[prefix.len()..].parse().unwrap()
    }

    #[test]
    fn every_required_series_has_help_type_and_a_value() {
        let text = Metrics::new().render();
        for (name, kind) in [
            ("asynct_requests_running", "gauge"),
            ("asynct_requests_waiting", "gauge"),
            ("asynct_kv_blocks_used", "gauge"),
            ("asynct_kv_blocks_total", "gauge"),
            ("asynct_prompt_tokens_total", "counter"),
            ("asynct_generation_tokens_total", "counter"),
            ("asynct_requests_total", "counter"),
            ("asynct_prefix_cache_queries_total", "counter"),
            ("asynct_prefix_cache_hits_total", "counter"),
            ("asynct_engine_steps_total", "counter"),
            ("asynct_engine_step_seconds_total", "counter"),
            ("asynct_engine_between_steps_seconds_total", "counter"),
            ("asynct_time_to_first_token_seconds", "histogram"),
            ("asynct_inter_token_latency_seconds", "histogram"),
            ("asynct_e2e_request_latency_seconds", "histogram"),
        ] {
            assert!(text.contains(&format!("# HELP {name} ")), "{name}");
            assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "{name}");
        }
        for reason in FINISH_REASONS {
            assert_eq!(sample(&text, &format!("asynct_requests_total{{finish_reason=\"{reason}\"}}")), 0.0);
        }
        assert_eq!(sample(&text, "asynct_e2e_request_latency_seconds_count"), 0.0);
    }

    #[test]
    fn every_line_is_a_comment_or_a_sample() {
        let m = Metrics::new();
        m.record_finished("stop", Duration::from_millis(30));
        for line in m.render().lines() {
            let ok = line.starts_with("# HELP asynct_")
                || line.starts_with("# TYPE asynct_")
                || (line.starts_with("asynct_")
                    && line.rsplit_once(' ').is_some_and(|(_, v)| v.parse::<f64>().is_ok()));
            assert!(ok, "malformed line {line:?}");
        }
    }

    #[test]
    fn gauges_follow_the_engine() {
        let m = Metrics::new();
        let stats = EngineStats {
            num_running: 3,
            num_waiting: 2,
            num_blocks_used: 17,
            num_blocks: 64,
            num_preemptions: 1,
            prefix_cache_queries: 1536,
            prefix_cache_hits: 1024,
        };
        m.set_engine_stats(&stats);
        let text = m.render();
        assert_eq!(sample(&text, "asynct_prefix_cache_queries_total"), 1536.0);
        assert_eq!(sample(&text, "asynct_prefix_cache_hits_total"), 1024.0);
        assert_eq!(sample(&text, "asynct_requests_running"), 3.0);
        assert_eq!(sample(&text, "asynct_requests_waiting"), 2.0);
        assert_eq!(sample(&text, "asynct_kv_blocks_used"), 17.0);
        assert_eq!(sample(&text, "asynct_kv_blocks_total"), 64.0);
        m.set_requests_running(0);
        assert_eq!(sample(&m.render(), "asynct_requests_running"), 0.0);
    }

    #[test]
    fn counters_add_up() {
        let m = Metrics::new();
        m.record_prompt(5);
        m.record_prompt(7);
        m.record_first_token(Duration::from_millis(3));
        m.record_inter_token(Duration::from_millis(1));
        m.record_inter_token(Duration::from_millis(1));
        m.record_finished("length", Duration::from_secs(1));
        m.record_finished("length", Duration::from_secs(2));
        m.record_finished("abort", Duration::from_secs(3));
        m.record_rejected();
        m.record_step(true, Duration::from_millis(6));
        m.record_step(true, Duration::from_millis(7));
        m.record_step(false, Duration::from_millis(20));
        m.record_between_steps(Duration::from_micros(250));
        m.record_between_steps(Duration::from_micros(250));
        let text = m.render();
        assert_eq!(sample(&text, "asynct_engine_steps_total{kind=\"decode\"}"), 2.0);
        assert_eq!(sample(&text, "asynct_engine_steps_total{kind=\"other\"}"), 1.0);
        assert!((sample(&text, "asynct_engine_step_seconds_total{kind=\"decode\"}") - 0.013).abs() < 1e-12);
        assert!((sample(&text, "asynct_engine_step_seconds_total{kind=\"other\"}") - 0.020).abs() < 1e-12);
        assert!((sample(&text, "asynct_engine_between_steps_seconds_total") - 0.0005).abs() < 1e-12);
        assert_eq!(sample(&text, "asynct_prompt_tokens_total"), 12.0);
        assert_eq!(sample(&text, "asynct_generation_tokens_total"), 3.0);
        assert_eq!(sample(&text, "asynct_requests_rejected_total"), 1.0);
        assert_eq!(sample(&text, "asynct_requests_total{finish_reason=\"length\"}"), 2.0);
        assert_eq!(sample(&text, "asynct_requests_total{finish_reason=\"abort\"}"), 1.0);
        assert_eq!(sample(&text, "asynct_requests_total{finish_reason=\"stop\"}"), 0.0);
        assert_eq!(sample(&text, "asynct_time_to_first_token_seconds_count"), 1.0);
        assert_eq!(sample(&text, "asynct_inter_token_latency_seconds_count"), 2.0);
    }

    #[test]
    fn buckets_are_cumulative_inclusive_and_end_at_inf() {
        let m = Metrics::new();
        // 0.1 equals a bound (inclusive), 0.3 falls between bounds, 1000 is above them all.
        for secs in [0.05, 0.1, 0.3, 1000.0] {
            m.record_finished("stop", Duration::from_secs_f64(secs));
        }
        let text = m.render();
        let name = "asynct_e2e_request_latency_seconds";
        let bucket = |le: &str| sample(&text, &format!("{name}_bucket{{le=\"{le}\"}}"));
        assert_eq!((bucket("0.1"), bucket("0.25"), bucket("0.5"), bucket("300")), (2.0, 2.0, 3.0, 3.0));
        assert_eq!(bucket("+Inf"), 4.0);
        assert_eq!(sample(&text, &format!("{name}_count")), 4.0);
        assert!((sample(&text, &format!("{name}_sum")) - 1000.45).abs() < 1e-9);
        let counts: Vec<f64> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{name}_bucket")))
            .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
            .collect();
        assert_eq!(counts.len(), E2E_BUCKETS.len() + 1);
        assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
    }

    #[test]
    fn labels_are_escaped() {
        let m = Metrics::new();
        m.record_finished("we\"ird\\\n", Duration::ZERO);
        assert!(m.render().contains(r#"asynct_requests_total{finish_reason="we\"ird\\\n"} 1"#));
    }

    #[test]
    fn metrics_are_shared_across_threads() {
        let m = std::sync::Arc::new(Metrics::new());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let m = m.clone();
                std::thread::spawn(move || (0..250).for_each(|_| m.record_inter_token(Duration::from_micros(10))))
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let text = m.render();
        assert_eq!(sample(&text, "asynct_generation_tokens_total"), 1000.0);
        assert_eq!(sample(&text, "asynct_inter_token_latency_seconds_bucket{le=\"+Inf\"}"), 1000.0);
    }
}
