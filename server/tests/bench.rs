//! `asynct bench` on a tiny checkpoint on the CPU: its JSON's counts agree with what was asked
//! (every token generated, every step counted, the requests sampled at a temperature, which the
//! JSON records), the anchor's best variant is read, and bad flags get a message and exit code 1;
//! and on the shipped trained model, decode batches over windows of its held-out text
//! (`--prompt-text`) report that text's gate statistics.

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
        "--temperature",
        "0.7",
        "--out",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("prefill_tok_s: prompt tokens / seconds"), "the definitions are printed: {stdout}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["max_num_seqs"], 3, "the largest batch the run needs");
    assert_eq!(report["prefix_caching"], true, "on unless --no-prefix-caching");
    let temperature = report["temperature"].as_f64().expect("the temperature is recorded");
    assert!((temperature - 0.7).abs() < 1e-6, "the run's --temperature recorded: {temperature}");

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
        // Each request's time to its first token: the last of them is prefill_s.
        let ttft = &s["ttft_ms"];
        let (min, median, mean) =
            (ttft["min"].as_f64().unwrap(), ttft["median"].as_f64().unwrap(), ttft["mean"].as_f64().unwrap());
        let most = s["prefill_s"].as_f64().unwrap() * 1e3;
        assert!(0.0 < min && min <= median && median <= most && min <= mean && mean <= most, "{s}");
        let step = s["decode_step_ms"]["median"].as_f64().unwrap();
        assert!(s["decode_tok_s"].as_f64().unwrap() > 0.0 && step > 0.0, "{s}");
        assert!(s["decode_step_executor_ms"]["median"].as_f64().unwrap() <= step, "{s}");
        // Every step with a prefill chunk, in order, its parts within its wall time; together
        // they carry every prompt token.
        let chunk_steps = s["chunk_steps"].as_array().unwrap();
        assert_eq!(chunk_steps.len() as u64, count(&steps["mixed"]) + count(&steps["prefill"]), "{s}");
        let rows: u64 = chunk_steps.iter().map(|p| count(&p["tokens"]) - count(&p["decodes"])).sum();
        assert_eq!(rows, 3 * 40, "{s}");
        for p in chunk_steps {
            let ms = |k: &str| p[k].as_f64().unwrap_or_else(|| panic!("{k} in {p}"));
            let parts = ms("schedule_ms") + ms("executor_ms") + ms("hand_out_ms");
            assert!(ms("executor_ms") > 0.0 && parts <= ms("wall_ms") + 1e-9, "{p}");
        }
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
        // Each phase is a part of every step, so its median is at most the step's (medians of
        // different phases need not add up within it: the per-step sum is model's engine test's).
        for phase in ["schedule", "hand_out"] {
            let ms = d["host_ms"][phase]["median"].as_f64().unwrap();
            assert!(ms > 0.0 && ms <= median, "the host's {phase} within the step: {d}");
        }
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
fn decode_twins_time_a_pair_of_half_batches_after_the_whole_batches() {
    let dir = tiny("twins");
    let json = dir.join("bench.json");
    let m = dir.to_str().unwrap();
    let args = ["bench", "--model", m, "--device", "cpu", "--decode-batch", "2,4", "--context", "48"];
    let out = asynct(
        &[&args[..], &["--decode-twins", "--warmup-steps", "1", "--steps", "3"]]
            .concat()
            .iter()
            .copied()
            .chain(["--out", json.to_str().unwrap()])
            .collect::<Vec<_>>(),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let whole: Vec<u64> = report["decode"].as_array().unwrap().iter().map(|d| count(&d["batch"])).collect();
    assert_eq!(whole, vec![2, 4], "the whole batches are timed as without the flag: {report}");
    let twins = report["twins"].as_array().unwrap();
    assert_eq!(twins.iter().map(|t| count(&t["batch"])).collect::<Vec<_>>(), vec![2, 4], "{report}");
    for t in twins {
        assert_eq!(count(&t["timed_steps"]), 3, "{t}");
        let (min, median) = (t["pair_ms"]["min"].as_f64().unwrap(), t["pair_ms"]["median"].as_f64().unwrap());
        assert!(0.0 < min && min <= median, "{t}");
    }
    assert!(stdout.contains("decode twins B4: two engines of 2 rows"), "{stdout}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_flags_get_a_message_and_exit_code_1() {
    let dir = tiny("bad");
    let m = dir.to_str().unwrap();
    let decode = ["bench", "--model", m, "--device", "cpu", "--decode-batch", "1", "--context", "64"];
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
        (
            vec!["bench", "--model", m, "--device", "cpu", "--scenario", "all", "--profile-steps", "2"],
            "--profile-steps",
        ),
        (
            vec![
                "bench",
                "--model",
                m,
                "--device",
                "cpu",
                "--scenario",
                "prefill_heavy_b16",
                "--decode-batch",
                "1",
                "--profile-steps",
                "2",
            ],
            "--profile-steps",
        ),
        (vec!["bench", "--model", m, "--device", "cpu", "--decode-batch", "1", "--context", "20"], "--context"),
        (vec!["bench", "--model", m, "--device", "cpu", "--scenario", "long_decode_b32"], "long_decode_b32"),
        ([&decode[..], &["--temperature=-0.5"]].concat(), "--temperature"),
        ([&decode[..], &["--temperature=nan"]].concat(), "--temperature"),
        ([&decode[..], &["--anchor", "/nonexistent/a.json"]].concat(), "/nonexistent/a.json"),
        ([&decode[..], &["--decode-twins"]].concat(), "--decode-twins"),
    ];
    for (args, needle) in cases {
        let out = asynct(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(needle) && !err.contains("panicked"), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// The decode JSON of `asynct bench` on the shipped model at batch 2, with `extra` flags.
fn trained_decode(label: &str, extra: &[&str]) -> Value {
    let model = concat!(env!("CARGO_MANIFEST_DIR"), "/../trained/asynct-mini-shakespeare");
    let json = std::env::temp_dir().join(format!("asynct-bench-{}-{label}.json", std::process::id()));
    let mut args = vec!["bench", "--model", model, "--device", "cpu", "--decode-batch", "2", "--context", "48"];
    args.extend(["--warmup-steps", "1", "--steps", "2", "--out", json.to_str().unwrap()]);
    args.extend(extra);
    let out = asynct(&args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let report = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(json).unwrap();
    report
}

#[test]
fn decode_batches_over_a_text_report_its_gate_statistics() {
    let text = concat!(env!("CARGO_MANIFEST_DIR"), "/../trained/asynct-mini-shakespeare/heldout.txt");
    let random = trained_decode("random", &[]);
    let on_text = trained_decode("text", &["--prompt-text", text]);
    assert!(random["prompt_text"].is_null() && random["prompt_text_tokens"].is_null(), "{random}");
    assert_eq!(on_text["prompt_text"], text);
    assert!(count(&on_text["prompt_text_tokens"]) > 10_000, "the held-out plays' tokens: {on_text}");
    let zeros = |r: &Value| r["decode"][0]["gate_zero_fraction"].as_f64().unwrap_or_else(|| panic!("counted: {r}"));
    let (z_random, z_text) = (zeros(&random), zeros(&on_text));
    assert!((0.0..1.0).contains(&z_random) && (0.0..1.0).contains(&z_text), "{z_random} {z_text}");
    assert_ne!(z_random, z_text, "real text is not random ids to the gate");
    assert_eq!(zeros(&trained_decode("again", &["--prompt-text", text])), z_text, "the same windows every run");
}

#[test]
fn a_prompt_text_that_is_missing_or_too_short_is_refused() {
    let dir = tiny("text");
    let m = dir.to_str().unwrap();
    let short = dir.join("short.txt");
    std::fs::write(&short, "too short").unwrap();
    let base = ["bench", "--model", m, "--device", "cpu", "--decode-batch", "2", "--context", "48"];
    for (text, needle) in
        [("/nonexistent/t.txt", "--prompt-text /nonexistent/t.txt"), (short.to_str().unwrap(), "tokens")]
    {
        let out = asynct(&[&base[..], &["--prompt-text", text]].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{text}: {err}");
        assert!(err.contains("--prompt-text") && err.contains(needle) && !err.contains("panicked"), "{text}: {err}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}
