//! Replays every saved case in `verify/regressions/` on every registered oracle path (the
//! `gpu_attention` binary replays them on the GPU paths). An empty folder replays nothing and
//! passes; a file that is not a readable case fails the test.

use verify::regression::regressions_dir;
use verify::{all_paths, load_dir};

#[test]
fn every_saved_case_passes_every_path() {
    let dir = regressions_dir();
    let saved = load_dir(&dir).unwrap_or_else(|e| panic!("{e}"));
    let paths = all_paths();
    let mut failures = Vec::new();
    for (file, regression) in &saved {
        for result in regression.replay(&paths) {
            if let Err(f) = result {
                failures.push(format!("{}: {f}", file.display()));
            }
        }
    }
    println!("replayed {} saved cases from {}", saved.len(), dir.display());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
