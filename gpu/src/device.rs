//! Finding a CUDA device without assuming one exists.
//!
//! cudarc loads libcuda lazily and panics on the first call if it is absent, so the presence
//! check must come before any other driver call.

use crate::error::{Error, Result};

/// What a test or a backend needs to know about device 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device's marketing name, e.g. "NVIDIA H200".
    pub name: String,
    /// Compute capability `(major, minor)`: `(9, 0)` on Hopper.
    pub compute_capability: (i32, i32),
}

impl DeviceInfo {
    /// The NVRTC architecture to compile for: `sm_90a` on Hopper (wgmma needs the `a`).
    pub fn nvrtc_arch(&self) -> String {
        let (major, minor) = self.compute_capability;
        if major == 9 && minor == 0 {
            "sm_90a".to_string()
        } else {
            format!("sm_{major}{minor}")
        }
    }
}

/// Device 0, or why there is none.
pub fn probe() -> Result<DeviceInfo> {
    // SAFETY: it only tries to dlopen libcuda and reports whether that worked.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(Error::NoDriver);
    }
    let ctx = cudarc::driver::CudaContext::new(0).map_err(|e| Error::NoDevice(e.to_string()))?;
    let name = ctx.name()?;
    let compute_capability = ctx.compute_capability()?;
    Ok(DeviceInfo { name, compute_capability })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvrtc_arch_picks_the_wgmma_variant_on_hopper_only() {
        let hopper = DeviceInfo { name: "H200".into(), compute_capability: (9, 0) };
        let ampere = DeviceInfo { name: "A100".into(), compute_capability: (8, 0) };
        assert_eq!(hopper.nvrtc_arch(), "sm_90a");
        assert_eq!(ampere.nvrtc_arch(), "sm_80");
    }

    #[test]
    fn probe_answers_without_panicking() {
        match probe() {
            Ok(dev) => println!("GPU found: {} ({:?})", dev.name, dev.compute_capability),
            Err(why) => println!("GPU tests skipped: {why}"),
        }
    }
}
