//! The benchmark's tables: each point's paths beside the anchor JSON of
//! `scripts/attention_anchor.py` (SDPA cuDNN, SDPA flash and, for decode, FlashInfer's paged
//! decode), and the crossover of fake decode and the tensor-core prefills. Every comparison uses
//! graph-timed figures, ours and the anchor's (its `ms`); back-to-back figures are shown beside.

use serde_json::Value;

use super::data::Lengths;
use super::decode::DecodePoint;
use super::prefill::{Crossover, PrefillPoint};

/// SPEC's goal for decode: the dispatcher's time at most this fraction of the best anchor's.
pub const GOAL_RATIO: f64 = 0.75;

/// One anchor backend at one point: `{"ms", "TBps" or "TFLOPs", "eager_ms"}`, or `{"error"}`.
#[derive(Clone, Debug, PartialEq)]
pub struct AnchorTime {
    /// The backend, e.g. `cudnn`.
    pub backend: String,
    /// Graph-timed ms per call.
    pub ms: Option<f64>,
    /// Back-to-back ms per call.
    pub eager_ms: Option<f64>,
    /// Why the backend has no time.
    pub error: Option<String>,
}

/// The backends at `key` of the anchor's `section`: `decode` (keys like `B32_L4096`) or `prefill`
/// (keys like `B16_T1024`), in the JSON's order. The point's own figures (`kv_bytes`,
/// `causal_flops`) are numbers, not backends, and are passed over.
pub fn anchor_times(anchor: &Value, section: &str, key: &str) -> Vec<AnchorTime> {
    let Some(point) = anchor.get(section).and_then(|s| s.get(key)).and_then(Value::as_object) else {
        return Vec::new();
    };
    point
        .iter()
        .filter(|(_, v)| v.is_object())
        .map(|(backend, v)| AnchorTime {
            backend: backend.clone(),
            ms: v.get("ms").and_then(Value::as_f64),
            eager_ms: v.get("eager_ms").and_then(Value::as_f64),
            error: v.get("error").map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_string)),
        })
        .collect()
}

/// The best anchor at `key` of `section`: the backend with the least graph-timed `ms`, and that
/// time. Backends that failed (`{"error"}`) have no `ms` and are passed over.
pub fn best_anchor(anchor: &Value, section: &str, key: &str) -> Option<(String, f64)> {
    anchor_times(anchor, section, key)
        .into_iter()
        .filter_map(|t| Some((t.backend, t.ms?)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// Microseconds of `ms` to one decimal, `-` where there is none.
fn us(ms: Option<f64>) -> String {
    ms.map_or("-".into(), |ms| format!("{:.1}", ms * 1e3))
}

/// `ms` over the anchor's `anchor_ms`, `-` where either is missing.
fn ratio(ms: Option<f64>, anchor_ms: Option<f64>) -> String {
    ms.zip(anchor_ms).map_or("-".into(), |(ms, a)| format!("{:.2}x", ms / a))
}

/// One line per decode point, all graph-timed unless marked b2b (back-to-back): zero fraction,
/// each anchor backend, the best of them, the dispatcher's (`auto`) time, bandwidth and ratio to
/// the best anchor, auto's back-to-back time, the fastest forced path and its ratio, and whether
/// auto meets the goal ([`GOAL_RATIO`]).
pub fn table(points: &[DecodePoint], anchor: Option<&Value>) -> String {
    let mut s = format!(
        "decode, us per call in a CUDA graph (b2b: back-to-back launches); ratio: over the best anchor; \
         goal: auto ratio <= {GOAL_RATIO}\n"
    );
    s += &format!(
        "{:<20} {:>6} {:>8} {:>8} {:>11} {:>16} {:>8} {:>6} {:>6} {:>8} {:>22} {:>8} {:>6} {:>4}\n",
        "point",
        "zero%",
        "cudnn",
        "flash",
        "fi-paged",
        "best anchor",
        "auto us",
        "TB/s",
        "ratio",
        "b2b us",
        "best path",
        "us",
        "ratio",
        "goal"
    );
    for p in points {
        // The anchor's batches are uniform: other lengths have no anchor to compare with.
        let key = p.key();
        let anchor = anchor.filter(|_| p.lengths == Lengths::Uniform);
        let times = anchor.map_or_else(Vec::new, |a| anchor_times(a, "decode", &key));
        let best = anchor.and_then(|a| best_anchor(a, "decode", &key));
        let best_ms = best.as_ref().map(|b| b.1);
        let backend = |name: &str| us(times.iter().find(|t| t.backend == name).and_then(|t| t.ms));
        let auto = p.paths.iter().find(|t| t.name == "auto");
        let auto_ms = auto.and_then(|t| t.graph_ms);
        let forced = p
            .paths
            .iter()
            .filter(|t| t.name != "auto")
            .filter_map(|t| Some((t.name.as_str(), t.graph_ms?)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        let goal = match auto_ms.zip(best_ms) {
            Some((ms, a)) if ms <= GOAL_RATIO * a => "yes",
            Some(_) => "no",
            None => "-",
        };
        s += &format!(
            "{key:<20} {:>6.1} {:>8} {:>8} {:>11} {:>16} {:>8} {:>6} {:>6} {:>8} {:>22} {:>8} {:>6} {goal:>4}\n",
            p.zero_fraction * 100.0,
            backend("cudnn"),
            backend("flash"),
            backend("flashinfer_paged"),
            best.as_ref().map_or("-", |b| b.0.as_str()),
            us(auto_ms),
            auto.and_then(|t| t.graph_tbps).map_or("-".into(), |tbps| format!("{tbps:.2}")),
            ratio(auto_ms, best_ms),
            us(auto.map(|t| t.eager_ms)),
            forced.map_or("-", |f| f.0),
            us(forced.map(|f| f.1)),
            ratio(forced.map(|f| f.1), best_ms),
        );
    }
    s
}

/// One line per (point, path), each anchor backend first: graph-timed microseconds, causal
/// TFLOP/s from them (the anchor's flop count, so TFLOP/s compare directly), the time over the
/// best anchor's (above 1 is slower), and back-to-back microseconds beside.
pub fn prefill_table(points: &[PrefillPoint], anchor: Option<&Value>) -> String {
    let mut s = format!(
        "{:<16} {:>6} {:<18} {:<26} {:>11} {:>8} {:>7} {:>11}\n",
        "point", "zero%", "path", "ran", "us", "TFLOP/s", "ratio", "b2b us"
    );
    for p in points {
        let times = anchor.map_or_else(Vec::new, |a| anchor_times(a, "prefill", &p.key));
        let best_ms = anchor.and_then(|a| best_anchor(a, "prefill", &p.key)).map(|b| b.1);
        let zero = p.zero_fraction * 100.0;
        let line = |path: &str, ran: &str, ms: Option<f64>, eager_ms: Option<f64>, error: &Option<String>| {
            let tflops = ms.map_or("-".into(), |ms| format!("{:.1}", p.causal_flops / ms / 1e9));
            let note = error.as_ref().map_or(String::new(), |e| format!("  error: {e}"));
            format!(
                "{:<16} {zero:>6.1} {path:<18} {ran:<26} {:>11} {tflops:>8} {:>7} {:>11}{note}\n",
                p.key,
                us(ms),
                ratio(ms, best_ms),
                us(eager_ms)
            )
        };
        for t in &times {
            s += &line(&format!("anchor-{}", t.backend), "attention_anchor.py", t.ms, t.eager_ms, &t.error);
        }
        for t in &p.paths {
            s += &line(&t.name, &t.ran, t.graph_ms, t.eager_ms, &t.error);
        }
        for note in &p.skipped {
            s += &format!("{:<16} {zero:>6.1} skipped {note}\n", p.key);
        }
    }
    s
}

/// One line per query length: each path's graph-timed microseconds and the fastest, then the
/// measured crossover beside the dispatcher's threshold.
pub fn crossover_table(c: &Crossover) -> String {
    let names = ["fake-decode", "fake-decode+rows", "prefill-mma", "prefill-wgmma", "auto"];
    let mut s = format!(
        "chunked prefill: {} sequences, {} cached tokens each, then a chunk of `query` tokens; us per call in a \
         CUDA graph\n",
        c.batch, c.prefix
    );
    s += &format!("{:>6} {:>6} {:>6}", "query", "rows", "zero%");
    for n in names {
        s += &format!(" {:>17}", format!("{n} us"));
    }
    s += &format!(" {:>26} {:>14}\n", "auto ran", "fastest");
    for p in &c.points {
        s += &format!("{:>6} {:>6} {:>6.1}", p.shape.query, p.rows, p.zero_fraction * 100.0);
        for n in names {
            s += &format!(" {:>17}", us(p.graph_ms(n)));
        }
        let auto = p.paths.iter().find(|t| t.name == "auto").map_or("-", |t| t.ran.as_str());
        let fastest = p
            .paths
            .iter()
            .filter(|t| t.name != "auto" && t.name != "fake-decode+rows")
            .filter_map(|t| Some((t.name.as_str(), t.graph_ms?)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map_or("-", |(n, _)| n);
        s += &format!(" {auto:>26} {fastest:>14}\n");
    }
    let measured = c.measured_max_query.map_or("at no measured query".to_string(), |q| format!("up to query {q}"));
    s += &format!(
        "fake decode (per layer) is at least as fast as the tensor-core prefills {measured}; FAKE_DECODE_MAX_QUERY = {}\n",
        c.fake_decode_max_query
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::decode::PathTime;
    use crate::bench::prefill::{PrefillShape, PrefillTime};

    fn anchor() -> Value {
        serde_json::json!({
            "device": "H200", "flashinfer": {"error": "not installed here"},
            "decode": {
                "B1_L1024": {"kv_bytes": 1.0, "cudnn": {"ms": 0.75, "TBps": 1.0, "eager_ms": 0.9},
                             "flash": {"ms": 0.625, "eager_ms": 0.7},
                             "flashinfer_paged": {"ms": 0.5, "TBps": 2.0, "eager_ms": 0.55}},
                "B32_L4096": {"kv_bytes": 2.0, "cudnn": {"ms": 0.5}, "flash": {"eager_ms": 0.01},
                              "flashinfer_paged": {"error": "no paged kernel for this shape"}},
            },
            "prefill": {"B32_T256": {"causal_flops": 2e9, "cudnn": {"ms": 0.02, "TFLOPs": 100.0, "eager_ms": 0.03},
                                     "flash": {"ms": 0.01, "TFLOPs": 200.0, "eager_ms": 0.025}}},
        })
    }

    #[test]
    fn the_best_anchor_is_picked_across_all_three_backends_skipping_errors_and_figures() {
        let a = anchor();
        assert_eq!(best_anchor(&a, "decode", "B1_L1024"), Some(("flashinfer_paged".to_string(), 0.5)));
        // FlashInfer failed and flash has only a back-to-back figure: cuDNN is the best graph time.
        assert_eq!(best_anchor(&a, "decode", "B32_L4096"), Some(("cudnn".to_string(), 0.5)));
        assert_eq!(best_anchor(&a, "prefill", "B32_T256"), Some(("flash".to_string(), 0.01)));
        assert_eq!(best_anchor(&a, "decode", "B32_T256"), None);
        assert_eq!(best_anchor(&a, "prefill", "B1_T16384"), None);
        let times = anchor_times(&a, "decode", "B32_L4096");
        assert_eq!(times.iter().map(|t| t.backend.as_str()).collect::<Vec<_>>(), DECODE_ORDER);
        assert_eq!(times[1], AnchorTime { backend: "flash".into(), ms: None, eager_ms: Some(0.01), error: None });
        assert_eq!(times[2].error.as_deref(), Some("no paged kernel for this shape"));
    }

    /// serde_json keeps keys sorted (no `preserve_order`), so this is the JSON's order too.
    const DECODE_ORDER: [&str; 3] = ["cudnn", "flash", "flashinfer_paged"];

    fn path(name: &str, graph_ms: Option<f64>, eager_ms: f64) -> PathTime {
        PathTime {
            name: name.to_string(),
            path: String::new(),
            group: 8,
            heads: 1,
            rounds: 1,
            eager_ms,
            graph_ms,
            graph_tbps: graph_ms.map(|ms| 1.0 / ms),
            error: graph_ms.is_none().then(|| "CUDA graph: capture invalidated".to_string()),
        }
    }

    fn decode_point(batch: usize, context: usize, auto_ms: f64) -> DecodePoint {
        DecodePoint {
            batch,
            context,
            lengths: Lengths::Uniform,
            kv_bytes: 1,
            zero_fraction: 0.7,
            paths: vec![
                path("auto", Some(auto_ms), 0.875),
                path("split-k-sparse-g8", Some(0.25), 0.5),
                // Fastest back-to-back, but its graph failed: the best path is chosen by graph time.
                path("decode-dense-g16", None, 0.125),
            ],
        }
    }

    #[test]
    fn the_decode_table_compares_graph_times_with_each_anchor_and_marks_the_goal() {
        let points = [decode_point(1, 1024, 0.375), decode_point(32, 4096, 0.4), decode_point(128, 16384, 0.25)];
        let t = table(&points, Some(&anchor()));
        let row = |key: &str| -> Vec<String> {
            let line = t.lines().find(|l| l.starts_with(key)).unwrap_or_else(|| panic!("{key} in {t}"));
            line.split_whitespace().map(str::to_string).collect()
        };
        // point zero% cudnn flash fi-paged best auto TB/s ratio b2b best-path us ratio goal
        assert_eq!(
            row("B1_L1024"),
            [
                "B1_L1024",
                "70.0",
                "750.0",
                "625.0",
                "500.0",
                "flashinfer_paged",
                "375.0",
                "2.67",
                "0.75x",
                "875.0",
                "split-k-sparse-g8",
                "250.0",
                "0.50x",
                "yes"
            ],
            "{t}"
        );
        let b32 = row("B32_L4096");
        assert_eq!(b32[2..6], ["500.0", "-", "-", "cudnn"], "{t}");
        assert_eq!((b32[8].as_str(), b32[13].as_str()), ("0.80x", "no"), "{t}");
        // No anchor at the point: no ratio and no verdict.
        let b128 = row("B128_L16384");
        assert_eq!((b128[5].as_str(), b128[8].as_str(), b128[13].as_str()), ("-", "-", "-"), "{t}");
        // A batch of other lengths is named for them and not held to the uniform anchor.
        let spread = DecodePoint { lengths: Lengths::Spread, ..decode_point(1, 1024, 0.375) };
        let t = table(&[spread], Some(&anchor()));
        let line = t.lines().find(|l| l.starts_with("B1_L1024_spread ")).unwrap_or_else(|| panic!("{t}"));
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!((cells[2], cells[5], cells[8], cells[13]), ("-", "-", "-", "-"), "{t}");
    }

    fn point(key: &str, query: usize, paths: &[(&str, Option<f64>)]) -> PrefillPoint {
        PrefillPoint {
            key: key.to_string(),
            shape: PrefillShape { batch: 8, prefix: 4096, query },
            rows: 8 * query,
            causal_flops: 2e9,
            zero_fraction: 0.7,
            skipped: vec!["prefill-wgmma: compute capability 8.0 is not 9.0".to_string()],
            paths: paths
                .iter()
                .map(|&(name, ms)| PrefillTime {
                    name: name.to_string(),
                    ran: format!("{name}-entry"),
                    eager_ms: ms.map(|ms| 2.0 * ms),
                    graph_ms: ms,
                    graph_tflops: None,
                    error: ms.is_none().then(|| "launch refused".to_string()),
                })
                .collect(),
        }
    }

    #[test]
    fn the_prefill_table_gives_graph_tflops_and_the_ratio_to_the_best_anchor() {
        let p = point("B32_T256", 256, &[("prefill-mma", Some(0.02)), ("prefill-wgmma", None)]);
        let t = prefill_table(&[p], Some(&anchor()));
        let line =
            |path: &str| t.lines().find(|l| l.contains(path)).unwrap_or_else(|| panic!("{path} in {t}")).to_string();
        // 2e9 flops in 0.01 ms is 200 TFLOP/s; flash is the best anchor, its back-to-back 25 us beside.
        assert!(line("anchor-flash").ends_with("10.0    200.0   1.00x        25.0"), "{t}");
        assert!(line("anchor-cudnn").contains("2.00x"), "{t}");
        // MMA takes twice flash's graph time; its back-to-back figure is not the one compared.
        assert!(line("prefill-mma").ends_with("20.0    100.0   2.00x        40.0"), "{t}");
        assert!(line("prefill-wgmma").contains("error: launch refused"), "{t}");
        assert!(line("skipped").contains("8.0 is not 9.0"), "{t}");
        // Without the anchor there is no ratio.
        let p = point("B32_T256", 256, &[("prefill-mma", Some(0.02))]);
        assert!(!prefill_table(&[p], None).contains('x'), "no ratio without an anchor");
    }

    #[test]
    fn the_crossover_table_names_the_fastest_per_layer_path_by_graph_time() {
        let points = vec![
            point(
                "a",
                16,
                &[("fake-decode", Some(0.01)), ("fake-decode+rows", Some(0.011)), ("prefill-mma", Some(0.03))],
            ),
            point(
                "b",
                128,
                &[("fake-decode", Some(0.05)), ("fake-decode+rows", Some(0.051)), ("prefill-mma", Some(0.03))],
            ),
        ];
        let c = Crossover { batch: 8, prefix: 4096, fake_decode_max_query: 64, measured_max_query: Some(16), points };
        let t = crossover_table(&c);
        let rows: Vec<&str> =
            t.lines().filter(|l| l.trim_start().starts_with("16 ") || l.trim_start().starts_with("128 ")).collect();
        assert_eq!(rows.len(), 2, "{t}");
        assert!(rows[0].ends_with("fake-decode") && rows[1].ends_with("prefill-mma"), "{t}");
        // Graph times (10 us), not the back-to-back ones (20 us).
        assert!(rows[0].contains(" 10.0 ") && !rows[0].contains(" 20.0 "), "{t}");
        assert!(t.contains("up to query 16") && t.contains("FAKE_DECODE_MAX_QUERY = 64"), "{t}");
    }
}
