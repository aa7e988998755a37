//! The `asynct` binary as the command-line tests run it: a command to completion, and a fresh
//! asynct-tiny checkpoint to run it on.

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs `asynct args` to completion.
pub fn asynct(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_asynct")).args(args).output().expect("the binary runs")
}

/// A fresh folder, named after the test binary, the process and `label`, holding asynct-tiny
/// generated with `seed`.
pub fn tiny(label: &str, seed: u64) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("asynct-{}-{}-{label}", env!("CARGO_CRATE_NAME"), std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let seed = seed.to_string();
    let out = asynct(&["init", "--preset", "asynct-tiny", "--out", dir.to_str().unwrap(), "--seed", &seed]);
    assert!(out.status.success(), "init failed: {}", String::from_utf8_lossy(&out.stderr));
    dir
}
