//! bf16 to f32 (`widen_bf16.cu`): the head GEMM stores the logits as bf16 (the oracle's `Logits`
//! round point), and the sampler reads f32 rows, as the oracle's sampler reads its f32 logits.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, CudaView, CudaViewMut};
use half::bf16;

use super::{check_aligned, check_len, elementwise_config, unsupported};
use crate::error::Result;
use crate::kernels::WIDEN_BF16;
use crate::runtime::{launch_error, Gpu, Launch};

/// `widen_bf16.cu`, loaded.
pub struct Widen {
    stream: Arc<CudaStream>,
    func: CudaFunction,
}

impl Widen {
    /// Loads `widen_bf16.cu` (compiling it on first use).
    pub fn new(gpu: &Gpu) -> Result<Self> {
        Ok(Self { stream: gpu.stream().clone(), func: gpu.function(&WIDEN_BF16, "widen_bf16")? })
    }

    /// `out[i] = f32(x[i])` for equal-length buffers whose length is a multiple of 8. Launch only.
    pub fn run(&self, x: &CudaView<'_, bf16>, out: &mut CudaViewMut<'_, f32>) -> Result<()> {
        const ENTRY: &str = "widen_bf16";
        if !x.len().is_multiple_of(8) {
            return Err(unsupported(ENTRY, format!("the length must be a multiple of 8, got {}", x.len())));
        }
        check_len(ENTRY, "out", out.len(), x.len())?;
        check_aligned(&self.stream, ENTRY, "x", x)?;
        check_aligned(&self.stream, ENTRY, "out", out)?;
        if x.is_empty() {
            return Ok(());
        }
        let num_vecs = (x.len() / 8) as i64;
        let cfg = elementwise_config(num_vecs as u64);
        let mut b = Launch::new(&self.stream, &self.func);
        b.arg(x).arg(out).arg(&num_vecs);
        // SAFETY: the arguments match `widen_bf16` in widen_bf16.cu; lengths and alignment
        // checked above.
        unsafe { b.launch(cfg) }.map_err(launch_error(ENTRY, &cfg))?;
        Ok(())
    }
}
