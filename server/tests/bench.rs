//! `asynct bench` on a tiny checkpoint on the CPU: its JSON's counts agree with what was asked
//! (every token generated, every step counted), the anchor's best variant is read, and bad
//! flags get a message and exit code 1.

mod asynct_bin;

use asynct_bin::asynct;
use serde_json::Value;

fn tiny(label: &str) -> std::path::PathBuf {
    asynct_bin::tiny(label, 2)
}

fn count(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("{v} is not a count"))
}

#[test]
fn scenarios_and_decode_batches_report_consistent_counts() {
    let dir = tiny("counts");
    let (json, anchor) = (dir.join("bench.json"), dir.join("anchor.json"));
    std::fs::write(&anchor, r#"{"ms_per_step": {"eager": {"B2": 8.0}, "compiled": {"B2": 4.0, "B1": 1.0}}}"#).unwrap();
    let out = asynct(&[
        "bench",
        "--model",
        dir.to_str().unwrap(),
        "--device",
        "cpu",
        "--scenario",
        "balanced_b32",
        "--scenario",
        "prefill_heavy_b16",
        "--requests",
        "3",
        "--prompt-len",
        "40",
        "--output-len",
        "5",
        "--decode-batch",
        "2,3",
        "--context",
        "48",
        "--warmup-steps",
        "2",
        "--steps",
        "4",
        "--anchor",
        anchor.to_str().unwrap(),
        "--out",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("prefill_tok_s: prompt tokens / seconds"), "the definitions are printed: {stdout}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["max_num_seqs"], 3, "the largest batch the run needs");
    assert_eq!(report["prefix_caching"], true, "on unless --no-prefix-caching");

    let scenarios = report["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 2);
    for s in scenarios {
        assert_eq!(count(&s["generated_tokens"]), 3 * 5, "{s}");
        assert_eq!(count(&s["prompt_tokens"]), 3 * 40, "{s}");
        let steps = &s["steps"];
        let total = count(&steps["decode"]) + count(&steps["mixed"]) + count(&steps["prefill"]);
        assert!(total > 0 && count(&steps["decode"]) > 0, "{s}");
        // Each request draws one token per step from its first on: at least output_len - 1
        // steps follow the first token.
        assert!(total >= 5, "{s}");
        assert!(s["wall_s"].as_f64().unwrap() >= s["prefill_s"].as_f64().unwrap(), "{s}");
        let step = s["decode_step_ms"]["median"].as_f64().unwrap();
        assert!(s["decode_tok_s"].as_f64().unwrap() > 0.0 && step > 0.0, "{s}");
        assert!(s["decode_step_executor_ms"]["median"].as_f64().unwrap() <= step, "{s}");
    }

    let decode = report["decode"].as_array().unwrap();
    assert_eq!(decode.iter().map(|d| count(&d["batch"])).collect::<Vec<_>>(), vec![2, 3]);
    for d in decode {
        assert_eq!(count(&d["timed_steps"]), 4, "{d}");
        // Prompts and drawn tokens make 44 for every sequence; two warm-up steps attend over 44
        // and 45, the four timed ones over 46 to 49: centred on the context of 48.
        assert_eq!(d["attended"], serde_json::json!([46, 49]), "every sequence at one length: {d}");
        let median = d["step_ms"]["median"].as_f64().unwrap();
        assert!(median > 0.0 && d["step_ms"]["min"].as_f64().unwrap() <= median, "{d}");
        let executor = d["executor_ms"]["median"].as_f64().unwrap();
        assert!(executor > 0.0 && executor <= median, "the executor's part of each step: {d}");
        let floor = report["weight_floor_ms"].as_f64().unwrap();
        assert!((d["ratio_to_floor"].as_f64().unwrap() - median / floor).abs() < 1e-9 * median / floor);
    }
    assert_eq!(decode[0]["anchor"]["variant"], "compiled", "the best variant at B2");
    assert!(
        (decode[0]["ratio_to_anchor"].as_f64().unwrap() - decode[0]["step_ms"]["median"].as_f64().unwrap() / 4.0).abs()
            < 1e-12
    );
    assert!(decode[1]["anchor"].is_null(), "no anchor figure at B3");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_flags_get_a_message_and_exit_code_1() {
    let dir = tiny("bad");
    let m = dir.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["bench", "--model", m, "--device", "cpu"], "--scenario"),
        (vec!["bench", "--model", m, "--device", "cpu", "--scenario", "huge_b64"], "huge_b64"),
        (
            vec!["bench", "--model", m, "--device", "cpu", "--decode-batch", "4", "--max-num-seqs", "2"],
            "--max-num-seqs",
        ),
        (
            vec!["bench", "--model", m, "--device", "cpu", "--decode-batch", "1,2", "--profile-steps", "1"],
            "--profile-steps",
        ),
        (vec!["bench", "--model", m, "--device", "cpu", "--decode-batch", "1", "--context", "20"], "--context"),
        (vec!["bench", "--model", m, "--device", "cpu", "--scenario", "long_decode_b32"], "long_decode_b32"),
        (
            vec![
                "bench",
                "--model",
                m,
                "--device",
                "cpu",
                "--decode-batch",
                "1",
                "--context",
                "64",
                "--anchor",
                "/nonexistent/a.json",
            ],
            "/nonexistent/a.json",
        ),
    ];
    for (args, needle) in cases {
        let out = asynct(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(needle) && !err.contains("panicked"), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}
