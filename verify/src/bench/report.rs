//! The benchmark's tables: each point's paths beside the best SDPA backend of the anchor JSON,
//! and the crossover of fake decode and the tensor-core prefills.

use super::decode::DecodePoint;
use super::prefill::{Crossover, PrefillPoint};

/// The best SDPA time (ms) and its backend at `key` of the anchor's `section`: `decode` (keys
/// like `B32_L4096`) or `prefill` (keys like `B16_T1024`). Backends that failed (`{"error"}`)
/// and the point's own figures (`kv_bytes`, `causal_flops`) have no `ms` and are passed over.
pub fn best_sdpa(anchor: &serde_json::Value, section: &str, key: &str) -> Option<(String, f64)> {
    let point = anchor.get(section)?.get(key)?.as_object()?;
    point
        .iter()
        .filter_map(|(backend, v)| Some((backend.clone(), v.get("ms")?.as_f64()?)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// One line per point: zero fraction, SDPA, the dispatcher's time and ratio, the best forced path.
pub fn table(points: &[DecodePoint], anchor: Option<&serde_json::Value>) -> String {
    let mut s = format!(
        "{:<12} {:>6} {:>16} {:>10} {:>8} {:>7} {:>24} {:>10} {:>7}\n",
        "point", "zero%", "best SDPA us", "auto us", "auto TB/s", "ratio", "best path", "us", "ratio"
    );
    for p in points {
        let key = format!("B{}_L{}", p.batch, p.context);
        let sdpa = anchor.and_then(|a| best_sdpa(a, "decode", &key));
        let auto = p.paths.iter().find(|t| t.name == "auto");
        let best = p.paths.iter().filter(|t| t.name != "auto").min_by(|a, b| a.ms.total_cmp(&b.ms));
        let ratio = |ms: f64| sdpa.as_ref().map_or("-".to_string(), |(_, s)| format!("{:.2}x", ms / s));
        let sdpa_s = sdpa.as_ref().map_or("-".to_string(), |(b, ms)| format!("{:.1} ({b})", ms * 1e3));
        let (auto_us, auto_bw, auto_r) = auto.map_or(("-".into(), "-".into(), "-".into()), |t| {
            (format!("{:.1}", t.ms * 1e3), format!("{:.2}", t.effective_tbps), ratio(t.ms))
        });
        let (best_name, best_us, best_r) = best.map_or(("-".into(), "-".into(), "-".into()), |t| {
            (t.name.clone(), format!("{:.1}", t.ms * 1e3), ratio(t.ms))
        });
        s += &format!(
            "{key:<12} {:>6.1} {sdpa_s:>16} {auto_us:>10} {auto_bw:>8} {auto_r:>7} {best_name:>24} {best_us:>10} {best_r:>7}\n",
            p.zero_fraction * 100.0
        );
    }
    s
}

/// One line per (point, path), the best SDPA backend first: microseconds, causal TFLOP/s (the
/// anchor's flop count, so TFLOP/s compare directly) and the time over the best SDPA time
/// (above 1 is slower than SDPA).
pub fn prefill_table(points: &[PrefillPoint], anchor: Option<&serde_json::Value>) -> String {
    let mut s = format!(
        "{:<16} {:>6} {:<18} {:<26} {:>11} {:>8} {:>7}\n",
        "point", "zero%", "path", "ran", "us", "TFLOP/s", "ratio"
    );
    for p in points {
        let sdpa = anchor.and_then(|a| best_sdpa(a, "prefill", &p.key));
        let zero = p.zero_fraction * 100.0;
        let line = |path: &str, ran: &str, ms: Option<f64>, note: &str| {
            let (us, tflops) = ms.map_or(("-".into(), "-".into()), |ms| {
                (format!("{:.1}", ms * 1e3), format!("{:.1}", p.causal_flops / ms / 1e9))
            });
            let ratio = match (ms, &sdpa) {
                (Some(ms), Some((_, sdpa_ms))) => format!("{:.2}x", ms / sdpa_ms),
                _ => "-".into(),
            };
            format!("{:<16} {zero:>6.1} {path:<18} {ran:<26} {us:>11} {tflops:>8} {ratio:>7}{note}\n", p.key)
        };
        if let Some((backend, ms)) = &sdpa {
            s += &line(&format!("sdpa-{backend}"), "torch", Some(*ms), "");
        }
        for t in &p.paths {
            let note = t.error.as_ref().map_or(String::new(), |e| format!("  error: {e}"));
            s += &line(&t.name, &t.ran, t.ms, &note);
        }
        for note in &p.skipped {
            s += &format!("{:<16} {zero:>6.1} skipped {note}\n", p.key);
        }
    }
    s
}

/// One line per query length: each path's microseconds and the fastest, then the measured
/// crossover beside the dispatcher's threshold.
pub fn crossover_table(c: &Crossover) -> String {
    let names = ["fake-decode", "fake-decode+rows", "prefill-mma", "prefill-wgmma", "auto"];
    let mut s = format!(
        "chunked prefill: {} sequences, {} cached tokens each, then a chunk of `query` tokens\n",
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
            s += &format!(" {:>17}", p.ms(n).map_or("-".into(), |ms| format!("{:.1}", ms * 1e3)));
        }
        let auto = p.paths.iter().find(|t| t.name == "auto").map_or("-", |t| t.ran.as_str());
        let fastest = p
            .paths
            .iter()
            .filter(|t| t.name != "auto" && t.name != "fake-decode+rows")
            .filter_map(|t| Some((t.name.as_str(), t.ms?)))
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
    use crate::bench::prefill::{PrefillTime, StepShape};

    #[test]
    fn best_sdpa_reads_the_named_section_and_skips_errors_and_figures() {
        let anchor = serde_json::json!({
            "decode": {"B1_L1024": {"kv_bytes": 1.0, "cudnn": {"ms": 0.5}, "flash": {"ms": 0.2}}},
            "prefill": {"B1_T16384": {"causal_flops": 1e12, "cudnn": {"ms": 3.0, "TFLOPs": 300.0},
                                      "flash": {"error": "no kernel"}}},
        });
        assert_eq!(best_sdpa(&anchor, "decode", "B1_L1024"), Some(("flash".to_string(), 0.2)));
        assert_eq!(best_sdpa(&anchor, "prefill", "B1_T16384"), Some(("cudnn".to_string(), 3.0)));
        assert_eq!(best_sdpa(&anchor, "decode", "B1_T16384"), None);
        assert_eq!(best_sdpa(&anchor, "prefill", "B32_T256"), None);
    }

    fn point(key: &str, query: usize, paths: &[(&str, Option<f64>)]) -> PrefillPoint {
        PrefillPoint {
            key: key.to_string(),
            shape: StepShape { batch: 8, prefix: 4096, query },
            rows: 8 * query,
            causal_flops: 2e9,
            zero_fraction: 0.7,
            skipped: vec!["prefill-wgmma: compute capability 8.0 is not 9.0".to_string()],
            paths: paths
                .iter()
                .map(|&(name, ms)| PrefillTime {
                    name: name.to_string(),
                    ran: format!("{name}-entry"),
                    ms,
                    tflops: None,
                    error: ms.is_none().then(|| "launch refused".to_string()),
                })
                .collect(),
        }
    }

    #[test]
    fn the_prefill_table_gives_tflops_and_the_ratio_to_the_best_sdpa_backend() {
        let anchor = serde_json::json!({"prefill": {"B32_T256": {"cudnn": {"ms": 0.02}, "flash": {"ms": 0.01}}}});
        let p = point("B32_T256", 256, &[("prefill-mma", Some(0.02)), ("prefill-wgmma", None)]);
        let t = prefill_table(&[p], Some(&anchor));
        let line =
            |path: &str| t.lines().find(|l| l.contains(path)).unwrap_or_else(|| panic!("{path} in {t}")).to_string();
        // 2e9 flops in 0.01 ms is 200 TFLOP/s; MMA takes twice flash's time.
        assert!(line("sdpa-flash").contains("10.0") && line("sdpa-flash").contains("200.0"), "{t}");
        assert!(line("prefill-mma").contains("100.0") && line("prefill-mma").contains("2.00x"), "{t}");
        assert!(line("prefill-wgmma").contains("error: launch refused"), "{t}");
        assert!(line("skipped").contains("8.0 is not 9.0"), "{t}");
        // Without the anchor there is no ratio.
        let p = point("B32_T256", 256, &[("prefill-mma", Some(0.02))]);
        assert!(!prefill_table(&[p], None).contains('x'), "no ratio without an anchor");
    }

    #[test]
    fn the_crossover_table_names_the_fastest_per_layer_path() {
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
        assert!(t.contains("up to query 16") && t.contains("FAKE_DECODE_MAX_QUERY = 64"), "{t}");
    }
}
