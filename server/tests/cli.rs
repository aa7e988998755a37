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
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn prompt_ids_print_ids_and_dump_logits_has_one_row_per_position() {
    let dir = tiny("ids");
    let dump = dir.join("logits.safetensors");
    let out = asynct(&[
        "generate", "--model", dir.to_str().unwrap(), "--prompt-ids", "5,6,7,8", "--max-tokens", "3",
        "--dump-logits", dump.to_str().unwrap(), "--precision", "f64",
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
