//! Launching `gemm_skinny_wide.cu`, the skinny kernel's wide form: the plan's entry point, loaded
//! once, the tensor maps of x (boxes of 128 rows) and of W in the class-step layout (64 rows)
//! encoded at each launch, and the grid from the plan.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, CudaView, LaunchConfig};
use half::bf16;

use super::epilogue::Epilogue;
use super::plan::{GemmShape, SkinnyTile};
use super::wgmma::tensor_map;
use super::wide_plan::{SKINNY_WIDE_M_TILE, SKINNY_WIDE_ROWS, SKINNY_WIDE_THREADS};
use crate::error::Result;
use crate::kernels::GEMM_SKINNY_WIDE;
use crate::runtime::{launch_error, Gpu, Launch};

/// The wide form of one plan, loaded.
pub(super) struct WideGemm {
    func: CudaFunction,
    entry: String,
    cfg: LaunchConfig,
    shape: GemmShape,
}

impl WideGemm {
    /// Loads `tile`'s entry point (compiling `gemm_skinny_wide.cu` on first use) with the shared
    /// memory it needs.
    pub(super) fn new(gpu: &Gpu, shape: GemmShape, tile: &SkinnyTile) -> Result<Self> {
        let func = gpu.function(&GEMM_SKINNY_WIDE, &tile.entry)?;
        gpu.set_max_dynamic_smem(&func, tile.shared_bytes)?;
        let cfg = LaunchConfig {
            grid_dim: (tile.grid, 1, 1),
            block_dim: (SKINNY_WIDE_THREADS, 1, 1),
            shared_mem_bytes: tile.shared_bytes,
        };
        Ok(Self { func, entry: tile.entry.clone(), cfg, shape })
    }

    /// Launches on `stream`; the buffers were checked by `Gemm::run_with`, `w` is in the
    /// class-step layout, and `epilogue` is the entry's.
    pub(super) fn launch(
        &self,
        stream: &Arc<CudaStream>,
        x: &CudaView<'_, bf16>,
        w: &CudaView<'_, bf16>,
        epilogue: &mut Epilogue<'_>,
    ) -> Result<()> {
        let s = self.shape;
        let mx = tensor_map(stream, &self.entry, x, s.m, s.k, SKINNY_WIDE_M_TILE)?;
        let mw = tensor_map(stream, &self.entry, w, s.n, s.k, SKINNY_WIDE_ROWS)?;
        // GemmShape::validate keeps all three below 2^31.
        let int = |v: usize| i32::try_from(v).expect("a validated GEMM dimension fits an int");
        let (m, n, k) = (int(s.m), int(s.n), int(s.k));
        let mut b = Launch::new(stream, &self.func);
        b.arg_tensor_map(mx).arg_tensor_map(mw).arg(&m).arg(&n).arg(&k);
        epilogue.push(&self.entry, &mut b)?;
        // SAFETY: the arguments match GEMM_SKINNY_WIDE_ENTRY in gemm_skinny_wide.cu with the
        // epilogue's parameters (the plan named the entry of `epilogue`'s kind); the tensor maps
        // cover exactly x [m, k] and w [n, k], whose sizes and alignment Gemm::run_with checked,
        // as it checked the epilogue's buffers; the plan checked K and N against the kernel's
        // assumptions.
        unsafe { b.launch(self.cfg) }.map_err(launch_error(&self.entry, &self.cfg))?;
        Ok(())
    }
}
