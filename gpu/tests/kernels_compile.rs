//! Every kernel compiles with NVRTC to a Hopper (`sm_90a`) cubin that defines its functions. Needs
//! only NVRTC, not a GPU:
//! `scripts/local-nvrtc.sh` installs the toolkit's NVRTC from PyPI so this runs on a CPU machine
//! too. A `harness = false` target, so that without NVRTC the line saying it skipped is shown
//! rather than captured as a silent pass.

use gpu::kernels::{ALL, CHECKS};
use gpu::runtime::cubin::functions;
use gpu::runtime::kernel_cache::compile;
use gpu::runtime::nvrtc_available;

fn main() {
    let files: Vec<_> = ALL.iter().chain(CHECKS).collect();
    if !nvrtc_available() {
        println!(
            "kernels_compile: SKIPPED compiling {} kernel files: no NVRTC library here (run scripts/local-nvrtc.sh, then set LD_LIBRARY_PATH as it says)",
            files.len()
        );
        println!("0 passed, 0 failed, {} skipped", files.len());
        return;
    }
    let mut failed = 0;
    for k in &files {
        match compile(k, "sm_90a").map(|cubin| functions(&cubin)) {
            Ok(Ok(names)) if !names.is_empty() => println!("test {} ... ok ({} functions)", k.name, names.len()),
            Ok(Ok(_)) => {
                failed += 1;
                println!("test {} ... FAILED: the cubin defines no function", k.name);
            }
            Ok(Err(e)) => {
                failed += 1;
                println!("test {} ... FAILED: {e}", k.name);
            }
            Err(e) => {
                failed += 1;
                println!("test {} ... FAILED\n{e}", k.name);
            }
        }
    }
    println!("{} passed, {failed} failed", files.len() - failed);
    if failed > 0 {
        std::process::exit(1);
    }
}
