//! The `asynct` binary as the command-line tests run it: a command to completion, and a fresh
//! asynct-tiny checkpoint to run it on.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a command may run: a command that should have refused its input and exited, but
/// serves or loops instead, fails its test here rather than hanging the suite.
const DEADLINE: Duration = Duration::from_secs(600);

/// Runs `asynct args` to completion; panics if it runs past [`DEADLINE`] (and kills it).
pub fn asynct(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_asynct"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    // Read both pipes as the command writes, so a full pipe never stalls it.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            pipe.read_to_end(&mut bytes).expect("the pipe reads");
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("piped")));
    let stderr = drain(Box::new(child.stderr.take().expect("piped")));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child is waited on") {
            break status;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            panic!("asynct {args:?} still ran after {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output { status, stdout: stdout.join().expect("stdout"), stderr: stderr.join().expect("stderr") }
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
