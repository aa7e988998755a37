//! The MLP's gated product, `silu(gate) * up`, on the output of one fused gate/up GEMM
//! (`silu_mul.cu`), whose weight is in the interleaved gate/up layout of [`crate::gemm::layout`].
//! The skinny GEMM's [`crate::gemm::EpilogueKind::SiluMul`] computes the same bits inside the
//! GEMM (decode rows); this op serves the rows cuBLASLt computes.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, CudaView, CudaViewMut};
use half::bf16;

use super::{as_i32, check_aligned, check_len, row_tiles, unsupported, ROW_TILE};
use crate::error::Result;
use crate::kernels::SILU_MUL;
use crate::runtime::{launch_error, Gpu, Launch};

/// `silu_mul.cu`, loaded.
pub struct SiluMul {
    stream: Arc<CudaStream>,
    func: CudaFunction,
}

impl SiluMul {
    /// Loads `silu_mul.cu` (compiling it on first use).
    pub fn new(gpu: &Gpu) -> Result<Self> {
        Ok(Self { stream: gpu.stream().clone(), func: gpu.function(&SILU_MUL, "silu_mul")? })
    }

    /// `out[t, c] = bf16(silu(gate[t, c]) * up[t, c])`: `gate_up` is `[tokens, 2 * intermediate]`
    /// with each row in the interleaved layout ([`crate::gemm::layout`]: channel `c = 8 i + j`'s
    /// gate at `16 i + j`, its up at `16 i + 8 + j`), `out` `[tokens, intermediate]`;
    /// `intermediate` a multiple of 8. Launch only.
    pub fn run(
        &self,
        gate_up: &CudaView<'_, bf16>,
        intermediate: usize,
        out: &mut CudaViewMut<'_, bf16>,
    ) -> Result<()> {
        const ENTRY: &str = "silu_mul";
        if intermediate == 0 || !intermediate.is_multiple_of(8) {
            return Err(unsupported(
                ENTRY,
                format!("intermediate must be a positive multiple of 8, got {intermediate}"),
            ));
        }
        if !out.len().is_multiple_of(intermediate) {
            return Err(unsupported(
                ENTRY,
                format!("`out` has {} elements, not whole rows of {intermediate}", out.len()),
            ));
        }
        let tokens = out.len() / intermediate;
        check_len(ENTRY, "gate_up", gate_up.len(), tokens * 2 * intermediate)?;
        check_aligned(&self.stream, ENTRY, "gate_up", gate_up)?;
        check_aligned(&self.stream, ENTRY, "out", out)?;
        if tokens == 0 {
            return Ok(());
        }
        let inter = as_i32(ENTRY, "intermediate", intermediate)?;
        let (cfg, tokens) = row_tiles(ENTRY, tokens, intermediate / 8, ROW_TILE)?;
        let mut b = Launch::new(&self.stream, &self.func);
        b.arg(gate_up).arg(out).arg(&tokens).arg(&inter);
        // SAFETY: the arguments match `silu_mul` in silu_mul.cu; sizes and alignment checked above.
        unsafe { b.launch(cfg) }.map_err(launch_error(ENTRY, &cfg))?;
        Ok(())
    }
}
