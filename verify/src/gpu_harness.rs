//! The runner of the GPU test binaries (`harness = false` targets in `verify/tests/`).
//!
//! cargo's own harness captures what a passing test prints, so a GPU test that returns early on a
//! machine without a GPU would look like a pass. These binaries run their checks through [`run`]
//! instead, which opens the GPU once and, without one, prints that every check was skipped and
//! why, in a line cargo shows. With a GPU it runs every check, prints one line per check and the
//! closing `N passed, N failed` line, and exits non-zero on any failure.

use std::sync::Arc;
use std::time::Instant;

use gpu::Gpu;

/// One named GPU check: `Ok` or a message saying what was wrong.
pub type GpuCheck = (&'static str, fn(&Arc<Gpu>) -> std::result::Result<(), String>);

/// Fails unless `result` is `gpu::Error::Unsupported` whose message holds `needle`: a check that
/// a bad buffer or shape is refused by name, before anything is launched.
pub fn refused<T>(what: &str, result: gpu::Result<T>, needle: &str) -> std::result::Result<(), String> {
    match result {
        Err(e @ gpu::Error::Unsupported { .. }) if e.to_string().contains(needle) => Ok(()),
        Err(e) => Err(format!("{what}: refused, but the message lacks `{needle}`: {e}")),
        Ok(_) => Err(format!("{what}: accepted, should be refused naming `{needle}`")),
    }
}

/// Runs `checks` (all of them, even after a failure) and exits the process with the outcome.
pub fn run(binary: &str, checks: &[GpuCheck]) -> ! {
    let gpu = match Gpu::new() {
        Ok(g) => g,
        Err(why) => {
            println!("{binary}: SKIPPED all {} GPU checks: {why}", checks.len());
            println!("0 passed, 0 failed, {} skipped", checks.len());
            std::process::exit(0);
        }
    };
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    println!("{binary}: {} ({}), NVRTC target {}", gpu.info().name, cc(&gpu), gpu.arch());
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for (name, check) in checks {
        if filter.as_deref().is_some_and(|f| !name.contains(f)) {
            skipped += 1;
            continue;
        }
        let start = Instant::now();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&gpu)));
        let secs = start.elapsed().as_secs_f64();
        match outcome {
            Ok(Ok(())) => {
                passed += 1;
                println!("test {name} ... ok ({secs:.2} s)");
            }
            Ok(Err(msg)) => {
                failed += 1;
                println!("test {name} ... FAILED ({secs:.2} s)\n{msg}");
            }
            Err(_) => {
                failed += 1;
                println!("test {name} ... FAILED: panicked ({secs:.2} s)");
            }
        }
    }
    println!("{passed} passed, {failed} failed, {skipped} skipped");
    std::process::exit(if failed == 0 { 0 } else { 1 });
}

fn cc(gpu: &Gpu) -> String {
    let (major, minor) = gpu.info().compute_capability;
    format!("compute capability {major}.{minor}")
}
