//! The benchmark's table: each point's paths beside the best SDPA backend of the anchor JSON.

use super::decode::DecodePoint;

/// The best SDPA time (ms) and its backend at `key` (e.g. `B32_L4096`) of the anchor's `decode`.
pub fn best_sdpa(anchor: &serde_json::Value, key: &str) -> Option<(String, f64)> {
    let point = anchor.get("decode")?.get(key)?.as_object()?;
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
        let sdpa = anchor.and_then(|a| best_sdpa(a, &key));
        let auto = p.paths.iter().find(|t| t.name == "auto");
        let best = p.paths.iter().filter(|t| t.name != "auto").min_by(|a, b| a.ms.total_cmp(&b.ms));
        let ratio = |ms: f64| sdpa.as_ref().map_or("-".to_string(), |(_, s)| format!("{:.2}x", ms / s));
        let sdpa_s = sdpa.as_ref().map_or("-".to_string(), |(b, ms)| format!("{:.1} ({b})", ms * 1e3));
        let (auto_us, auto_bw, auto_r) =
            auto.map_or(("-".into(), "-".into(), "-".into()), |t| (format!("{:.1}", t.ms * 1e3), format!("{:.2}", t.effective_tbps), ratio(t.ms)));
        let (best_name, best_us, best_r) =
            best.map_or(("-".into(), "-".into(), "-".into()), |t| (t.name.clone(), format!("{:.1}", t.ms * 1e3), ratio(t.ms)));
        s += &format!(
            "{key:<12} {:>6.1} {sdpa_s:>16} {auto_us:>10} {auto_bw:>8} {auto_r:>7} {best_name:>24} {best_us:>10} {best_r:>7}\n",
            p.zero_fraction * 100.0
        );
    }
    s
}
