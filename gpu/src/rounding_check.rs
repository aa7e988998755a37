//! The elementwise passes round f32 to bf16 with the hardware's `cvt.rn` (`ops_common.cuh`:
//! `pack8_cvt`, `round8_cvt`, `store8_cvt`), falling back to the integer form `bf16_bits` for
//! NaN; the other kernels use `bf16_bits` itself. The integer form is the definition, the one
//! `half::bf16::from_f32` (the oracle's) computes. This module runs `bf16_rounding.cu`, which
//! compares the two on every one of the 2^32 f32 bit patterns, so that the hardware form's claim
//! to the same bits is checked, not assumed.

use cudarc::driver::LaunchConfig;

use crate::error::Result;
use crate::kernels::BF16_ROUNDING;
use crate::runtime::{launch_error, Gpu, Launch};

/// What [`bf16_rounding`] found: how many f32 bit patterns the hardware form rounded differently
/// from the integer definition, and the lowest of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoundingCheck {
    /// Patterns that differed in any of the kernel's three tests (0 when the forms agree).
    pub mismatches: u64,
    /// The lowest differing pattern, if any.
    pub first: Option<u32>,
}

/// Compares the kernels' hardware bf16 rounding with its integer definition on every f32 bit
/// pattern (one launch of a few milliseconds, then a wait). `planted`: a pattern whose results
/// the kernel takes as off by one, to show that a difference is caught (`None` for the real check).
pub fn bf16_rounding(gpu: &Gpu, planted: Option<u32>) -> Result<RoundingCheck> {
    const ENTRY: &str = "bf16_rounding_check";
    let func = gpu.function(&BF16_ROUNDING, ENTRY)?;
    let count = gpu.zeros::<u64>(1)?;
    let first = gpu.upload(&[u32::MAX])?;
    let cfg = LaunchConfig { grid_dim: (4096, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    let mut b = Launch::new(gpu.stream(), &func);
    let planted = planted.map_or(-1i64, i64::from);
    b.arg(&count).arg(&first).arg(&planted);
    // SAFETY: the arguments match `bf16_rounding_check` in bf16_rounding.cu (a u64 and a u32
    // buffer of one element each, then an i64); any grid is valid.
    unsafe { b.launch(cfg) }.map_err(launch_error(ENTRY, &cfg))?;
    let mismatches = gpu.download(&count)?[0];
    let first = gpu.download(&first)?[0];
    Ok(RoundingCheck { mismatches, first: (mismatches > 0).then_some(first) })
}
