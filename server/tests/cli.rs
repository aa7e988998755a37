//! The `asynct` binary as a user runs it: init a tiny checkpoint, generate from it, and get clear
//! errors (exit code 1, a message, no panic) for bad input.

mod asynct_bin;

use std::process::Output;

use asynct_bin::asynct;

fn tiny(label: &str) -> std::path::PathBuf {
    asynct_bin::tiny(label, 4)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn init_then_generate_prints_text_and_a_summary() {
    let dir = tiny("gen");
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
    let out = asynct(&["generate", "--model", dir.to_str().unwrap(), "--prompt", "Hello", "--max-tokens", "5"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("generated 5 tokens") && err.contains("tok/s"), "{err}");
    let again = asynct(&["generate", "--model", dir.to_str().unwrap(), "--prompt", "Hello", "--max-tokens", "5"]);
    assert_eq!(out.stdout, again.stdout, "greedy generation is deterministic");
    let uncached = asynct(&[
        "generate",
        "--model",
        dir.to_str().unwrap(),
        "--prompt",
        "Hello",
        "--max-tokens",
        "5",
        "--no-prefix-caching",
    ]);
    assert_eq!(out.stdout, uncached.stdout, "--no-prefix-caching changes no token");
    for budget in ["513", "1000000"] {
        let args = ["generate", "--model", dir.to_str().unwrap(), "--prompt", "Hello", "--max-tokens", "5"];
        let budgeted = asynct(&[&args[..], &["--max-num-batched-tokens", budget]].concat());
        assert!(budgeted.status.success(), "{}", stderr(&budgeted));
        assert_eq!(out.stdout, budgeted.stdout, "--max-num-batched-tokens {budget} changes no token");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn prompt_ids_print_ids_and_dump_logits_has_one_row_per_position() {
    let dir = tiny("ids");
    let dump = dir.join("logits.safetensors");
    let out = asynct(&[
        "generate",
        "--model",
        dir.to_str().unwrap(),
        "--prompt-ids",
        "5,6,7,8",
        "--max-tokens",
        "3",
        "--dump-logits",
        dump.to_str().unwrap(),
        "--precision",
        "f64",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ids: Vec<u32> = String::from_utf8(out.stdout).unwrap().trim().split(',').map(|t| t.parse().unwrap()).collect();
    assert_eq!(ids.len(), 3);
    let bytes = std::fs::read(&dump).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let logits = st.tensor("logits").unwrap();
    assert_eq!(logits.shape(), &[4 + 3 - 1, 512]);
    assert_eq!(logits.dtype(), safetensors::Dtype::F32);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_input_gets_a_message_and_exit_code_1() {
    let dir = tiny("bad");
    let m = dir.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["generate", "--model", "/nonexistent/asynct", "--prompt", "x"], "/nonexistent/asynct"),
        (vec!["generate", "--model", m, "--prompt-ids", "1,9999"], "9999"),
        (vec!["generate", "--model", m, "--prompt", "x", "--top-p", "1.5"], "top_p"),
        (vec!["generate", "--model", m, "--prompt", "x", "--precision", "f16"], "f16"),
        (vec!["generate", "--model", m, "--prompt", "x", "--batch", "2", "--dump-logits", "/tmp/x"], "--dump-logits"),
        (vec!["init", "--preset", "asynct-huge", "--out", "/tmp/never"], "asynct-huge"),
        (
            vec!["generate", "--model", m, "--prompt", "x", "--max-num-batched-tokens", "0"],
            "--max-num-batched-tokens: must be at least 513, got 0",
        ),
        (
            vec!["serve", "--model", m, "--device", "cpu", "--port", "0", "--max-queue", "0"],
            "--max-queue must be at least 1",
        ),
        (
            vec!["serve", "--model", m, "--device", "cpu", "--port", "0", "--max-body-bytes", "0"],
            "--max-body-bytes must be at least 1",
        ),
        (
            vec!["serve", "--model", m, "--device", "cpu", "--port", "0", "--max-num-batched-tokens", "575"],
            "--max-num-batched-tokens: must be at least 576, got 575",
        ),
        (
            vec![
                "bench",
                "--model",
                m,
                "--device",
                "cpu",
                "--scenario",
                "balanced_b32",
                "--max-num-batched-tokens",
                "512",
            ],
            "--max-num-batched-tokens: must be at least 544, got 512",
        ),
    ];
    for (args, needle) in cases {
        let out = asynct(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(needle) && !err.contains("panicked"), "{args:?}: {err}");
    }
    std::fs::write(dir.join("model.safetensors"), b"garbage").unwrap();
    let out = asynct(&["generate", "--model", m, "--prompt", "x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("model.safetensors"), "{}", stderr(&out));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn sizes_past_memory_are_refused_with_exit_code_1_not_an_abort() {
    let dir = tiny("sizes");
    let m = dir.to_str().unwrap();
    let huge = std::env::temp_dir().join(format!("asynct-cli-{}-huge-positions", std::process::id()));
    std::fs::create_dir_all(&huge).unwrap();
    for f in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(dir.join(f), huge.join(f)).unwrap();
    }
    let config = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let config = config.replace("\"max_position_embeddings\": 2048", "\"max_position_embeddings\": 1099511627776");
    std::fs::write(huge.join("config.json"), config).unwrap();
    let h = huge.to_str().unwrap();
    let serve = ["serve", "--device", "cpu", "--port", "0", "--model"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        // 10M sequences fit the default 4 GiB cache's budget, but one sequence of 2^40 tokens never does.
        ([&serve[..], &[h]].concat(), "the CPU KV cache (68719476736 blocks of 16 tokens) needs 512.0 TiB"),
        ([&serve[..], &[m, "--kv-cache-memory", "0.0001"]].concat(), "--kv-cache-memory: 0.0001 GiB holds 13 blocks"),
        ([&serve[..], &[m, "--kv-cache-memory=-1"]].concat(), "--kv-cache-memory: must be > 0"),
        ([&serve[..], &[h, "--kv-cache-memory", "1e30"]].concat(), "more than this machine's"),
        (
            vec![
                "generate",
                "--model",
                m,
                "--prompt",
                "x",
                "--batch",
                "100000000",
                "--max-tokens",
                "18446744073709551615",
            ],
            "the CPU KV cache (12800000000 blocks of 16 tokens)",
        ),
    ];
    for (args, needle) in cases {
        let out = asynct(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(needle) && !err.contains("panicked") && !err.contains("memory allocation"),
            "{args:?}: {err}"
        );
    }
    // The same config generates (its cache is the request's), as before.
    let out = asynct(&["generate", "--model", h, "--prompt", "x", "--max-tokens", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(huge).unwrap();
}
