//! Every kernel compiles with NVRTC for Hopper (`sm_90a`) and Ampere (`sm_80`, where the kernel
//! does not need Hopper). Needs only NVRTC, not a GPU: `scripts/local-nvrtc.sh` installs the
//! toolkit's NVRTC from PyPI so this runs on a CPU machine too. Without NVRTC it says it skipped.

use gpu::kernels::ALL;
use gpu::runtime::kernel_cache::compile;
use gpu::runtime::nvrtc_available;

#[test]
fn every_kernel_compiles_for_hopper() {
    if !nvrtc_available() {
        println!("SKIPPED: no NVRTC library here (run scripts/local-nvrtc.sh, then set LD_LIBRARY_PATH as it says)");
        return;
    }
    for k in ALL {
        let ptx = compile(k, "sm_90a").unwrap_or_else(|e| panic!("{e}"));
        assert!(ptx.contains(".entry"), "{}: no kernel entry in the PTX", k.name);
    }
}
