//! Launching `gemm_skinny.cu` and `gemm_skinny_wg.cu`: one entry point, loaded once, and its
//! launch shape (the grid, and the shared-x and warpgroup forms' dynamic shared memory) from the
//! plan.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, CudaView, LaunchConfig};
use half::bf16;

use super::epilogue::Epilogue;
use super::plan::{GemmShape, SkinnyForm, SkinnyTile, SKINNY_THREADS};
use super::staged::{self, FoldLayout, FoldedX};
use crate::error::{unsupported, Result};
use crate::kernels::{GEMM_SKINNY, GEMM_SKINNY_CLASSES, GEMM_SKINNY_WG};
use crate::runtime::{launch_error, Gpu, Launch};

/// The skinny kernel of one plan, loaded.
pub(super) struct SkinnyGemm {
    func: CudaFunction,
    entry: String,
    cfg: LaunchConfig,
    /// CTAs a cluster ([`SkinnyForm::cluster`]).
    cluster: u32,
    m: i32,
    n: i32,
    k: i32,
}

impl SkinnyGemm {
    /// Loads `tile`'s entry point (compiling `gemm_skinny.cu`, or `gemm_skinny_wg.cu` for the
    /// warpgroup form, on first use).
    pub(super) fn new(gpu: &Gpu, shape: GemmShape, tile: &SkinnyTile) -> Result<Self> {
        let cfg = LaunchConfig {
            grid_dim: (tile.grid, 1, 1),
            block_dim: (SKINNY_THREADS, 1, 1),
            shared_mem_bytes: tile.shared_bytes,
        };
        // GemmShape::validate keeps all three below 2^31.
        let int = |v: usize| i32::try_from(v).expect("a validated GEMM dimension fits an int");
        let kernel = match tile.form {
            SkinnyForm::Plain
            | SkinnyForm::ThreeCtas
            | SkinnyForm::SharedX
            | SkinnyForm::Staged
            | SkinnyForm::Folded(_) => &GEMM_SKINNY,
            SkinnyForm::Warpgroup => &GEMM_SKINNY_WG,
            SkinnyForm::Classes => &GEMM_SKINNY_CLASSES,
            SkinnyForm::Wide | SkinnyForm::ClassesWg => {
                return Err(unsupported(&tile.entry, "the form reads tensor maps: gemm::wgmma launches it".into()))
            }
        };
        let func = gpu.function(kernel, &tile.entry)?;
        if tile.shared_bytes > 0 {
            gpu.set_max_dynamic_smem(&func, tile.shared_bytes)?;
        }
        let cluster = tile.form.cluster();
        let (m, n, k) = (int(shape.m), int(shape.n), int(shape.k));
        Ok(Self { func, entry: tile.entry.clone(), cfg, cluster, m, n, k })
    }

    /// Launches on `stream`; the buffers were checked by `Gemm::run_with`, and `epilogue` is the
    /// entry's.
    pub(super) fn launch(
        &self,
        stream: &Arc<CudaStream>,
        x: &CudaView<'_, bf16>,
        w: &CudaView<'_, bf16>,
        epilogue: &mut Epilogue<'_>,
    ) -> Result<()> {
        let mut b = Launch::new(stream, &self.func);
        b.cluster_x(self.cluster);
        self.push(&mut b, x, w, epilogue)?;
        // SAFETY: the arguments match GEMM_SKINNY_ENTRY in gemm_skinny.cu (and
        // GEMM_SKINNY_WG_ENTRY in gemm_skinny_wg.cu and GEMM_SKINNY_CLASSES_ENTRY in
        // gemm_skinny_classes.cu, the same list; the class form's grid a multiple of its
        // cluster) with the epilogue's parameters (the plan named the entry of `epilogue`'s
        // kind); Gemm::run_with checked the sizes (x [m, k], w [n, k], the epilogue's buffers)
        // and the 16-byte alignment of each.
        unsafe { b.launch(self.cfg) }.map_err(launch_error(&self.entry, &self.cfg))?;
        Ok(())
    }

    /// Launches a folded plan's entry (`layout` its form's) on `stream`, its x `x`; checked by
    /// `Gemm::run_folded`.
    pub(super) fn launch_folded(
        &self,
        stream: &Arc<CudaStream>,
        layout: &FoldLayout,
        x: &FoldedX<'_>,
        w: &CudaView<'_, bf16>,
        epilogue: &mut Epilogue<'_>,
    ) -> Result<()> {
        let mut b = Launch::new(stream, &self.func);
        let (log2_d, max_chunks, chunk) = staged::layout_args(layout);
        b.arg(&x.partial).arg(&x.row_len).arg(&log2_d).arg(&max_chunks).arg(&chunk);
        b.arg(w).arg(&self.m).arg(&self.n).arg(&self.k);
        epilogue.push(&self.entry, &mut b)?;
        // SAFETY: the arguments match GEMM_SKINNY_FOLD_ENTRY in gemm_skinny.cu with the epilogue's
        // parameters (the plan named the entry of `epilogue`'s kind); Gemm::run_folded checked
        // the sizes (the partials [m, heads, chunks, D], row_len [m], w [n, k], the epilogue's
        // buffers) and the 16-byte alignment of each.
        unsafe { b.launch(self.cfg) }.map_err(launch_error(&self.entry, &self.cfg))?;
        Ok(())
    }

    /// The entry's argument slots, for the megakernel's table (checked as for `launch`).
    pub(super) fn args(
        &self,
        stream: &Arc<CudaStream>,
        x: &CudaView<'_, bf16>,
        w: &CudaView<'_, bf16>,
        epilogue: &mut Epilogue<'_>,
    ) -> Result<Vec<u64>> {
        let mut b = Launch::new(stream, &self.func);
        self.push(&mut b, x, w, epilogue)?;
        Ok(b.into_slots())
    }

    /// GEMM_SKINNY_ENTRY's parameters (and GEMM_SKINNY_WG_ENTRY's): x, w, m, n, k, then the
    /// epilogue's.
    fn push(
        &self,
        b: &mut Launch<'_>,
        x: &CudaView<'_, bf16>,
        w: &CudaView<'_, bf16>,
        epilogue: &mut Epilogue<'_>,
    ) -> Result<()> {
        b.arg(x).arg(w).arg(&self.m).arg(&self.n).arg(&self.k);
        epilogue.push(&self.entry, b)
    }
}
