//! The GEMMs of the GPU model's linear layers: `y[M, N] = x[M, K] W[N, K]^T`, W as safetensors
//! stores `*_proj.weight` (row-major `[N, K]`), bf16 x and W, f32 accumulation, y rounded once
//! to bf16 (SPEC section 4).
//!
//! A brief overview:
//! - [`GemmPlan`] (in [`plan`]) is pure host code: from static facts ([`GemmShape`]: the rows the
//!   launch covers, which under a CUDA graph is the captured batch bucket, N and K; and the SM
//!   count) it makes the path its caller names. The model plans decode rows with
//!   [`GemmPlan::decode_rows`] (at any `M`, past 64 rows in slabs; the caller says whether the
//!   device runs wgmma) and chunk (prefill) rows with [`GemmPlan::cublaslt_pinned`] (`model`'s
//!   `gpu_backend::linear`); [`GemmPlan::skinny_rows`] and [`GemmPlan::cublaslt`] force a path
//!   for tests and benchmarks.
//! - The skinny kernel (`gemm_skinny.cu`, launched from [`skinny`]) streams W once with 16-byte
//!   loads and multiplies it on the tensor cores against all rows of x; a row's bits depend on
//!   neither `M` nor the other rows (batch-invariant, deterministic, no atomics). Its shared-x
//!   form ([`GemmPlan::skinny_shared_x`]) keeps a 64-row slab of x in shared memory and walks
//!   several W blocks per CTA, with the same bits; [`GemmPlan::decode_rows`] picks it where each
//!   CTA gets three blocks or more. Its warpgroup form (`gemm_skinny_wg.cu`, sm_90a,
//!   [`GemmPlan::skinny_wgmma`]) computes the same sums, bit for bit, on wgmma, one CTA a 64 x 64
//!   tile; decode rows take it at 33 to 64 rows on wide weights (gate/up). Its wide form
//!   (`gemm_skinny_wide.cu`, [`GemmPlan::skinny_wide`]) reads W once for 128 rows of x through
//!   the TMA, W stored in the class-step layout ([`layout::to_class_steps`]), for 65 to 128 rows.
//!   Its class form (`gemm_skinny_classes.cu`, [`GemmPlan::skinny_classes`]) puts each class of
//!   the skinny order's K steps on its own CTA of a cluster, for 9 to 64 rows, and the same on
//!   warpgroups (`gemm_skinny_classes_wg.cu`, [`GemmPlan::skinny_classes_wg`]) for 65 to 128.
//! - The WGMMA kernel (`gemm_wgmma.cu`, sm_90a, [`GemmPlan::wgmma_epilogue`]) is for prefill rows:
//!   128 x 128 tiles fed by the TMA through an mbarrier ring to two consumer warpgroups, with the
//!   same epilogues as the skinny kernel (`gemm_epilogue.cuh`). A row's bits depend on neither
//!   `M` nor its place in the tile. Correct on the H200 but 0.76-0.86x cuBLASLt's speed at M
//!   8,448 with the Store epilogue (RESULTS run 91), and with the fused epilogues slower than
//!   cuBLASLt plus the separate ops (RESULTS session 14), so the model plans it for chunk rows
//!   only when asked (`ASYNCT_CHUNK_FUSION`).
//! - cuBLASLt ([`cublaslt`]) gets one algorithm per plan, chosen by its heuristic once, and the
//!   one workspace of the device ([`CublasLt::shared`]). Its bits may change with `M`.
//! - The skinny kernel's epilogue fuses the elementwise op that follows a decode-row GEMM in the
//!   model into the GEMM: a plan fixes its [`EpilogueKind`] ([`GemmPlan::skinny_epilogue`]) and
//!   [`Gemm::run_with`] takes the op's buffers as an [`Epilogue`]. [`EpilogueKind::PeriLn`] after
//!   o_proj and down_proj is [`crate::ops::PeriLn::residual`] on the product,
//!   [`EpilogueKind::SiluMul`] after gate/up [`crate::ops::SiluMul::run`], and
//!   [`EpilogueKind::QkNormRopeCache`] after qkv [`crate::ops::QkNormRopeCache::run`], each with
//!   the same bits and one launch fewer; the WGMMA kernel takes the same epilogues. cuBLASLt
//!   plans only store.
//! - [`layout`] defines the row orders of the weights whose epilogues pair outputs (gate/up
//!   interleaved, each q and k head's RoPE pairs 8 rows apart), which the standalone ops read
//!   too.
//! - [`Gemm`] loads a plan once; [`Gemm::run`] and [`Gemm::run_with`] check the buffers and only
//!   launch, so a CUDA graph captures them and a benchmark times them alone.
//!
//! ```no_run
//! use gpu::gemm::{Gemm, GemmPlan, GemmShape};
//!
//! # fn main() -> gpu::Result<()> {
//! let gpu = gpu::Gpu::new()?;
//! // o_proj of asynct-0.5b for a decode step of 8 sequences.
//! let shape = GemmShape { m: 8, n: 1024, k: 1024 };
//! let o_proj = Gemm::new(&gpu, GemmPlan::skinny(shape, gpu.multiprocessors()?)?)?;
//! let x = gpu.zeros::<half::bf16>(8 * 1024)?;
//! let w = gpu.zeros::<half::bf16>(1024 * 1024)?;
//! let mut y = gpu.zeros::<half::bf16>(8 * 1024)?;
//! o_proj.run(&x.as_view(), &w.as_view(), &mut y.as_view_mut())?;
//! # Ok(())
//! # }
//! ```

mod classes_plan;
mod classes_wg_plan;
pub mod cublaslt;
mod decode_plan;
pub mod epilogue;
pub mod layout;
pub mod plan;
pub mod skinny;
pub mod staged;
mod wgmma;
mod wide_plan;

use std::sync::Arc;

use cudarc::driver::{CudaStream, CudaView, CudaViewMut};
use half::bf16;

pub use classes_plan::{
    classes_bytes, classes_serve, SKINNY_CLASSES_CLUSTER, SKINNY_CLASSES_DECODE_M, SKINNY_CLASSES_K,
    SKINNY_CLASSES_ROWS,
};
pub use classes_wg_plan::{
    classes_wg_serve, SKINNY_CLASSES_WG_BYTES, SKINNY_CLASSES_WG_DECODE_M, SKINNY_CLASSES_WG_K,
    SKINNY_CLASSES_WG_M_TILE,
};
pub use cublaslt::{CublasLt, LtAlgo};
pub use decode_plan::DecodeForms;
pub use epilogue::Epilogue;
pub use plan::{
    rows_fit, shared_x_bytes, wgmma_runs_on, EpilogueKind, GemmPath, GemmPlan, GemmShape, Pin, SkinnyForm, SkinnyTile,
    WgmmaTile, MAX_K, SHARED_X_MAX_BYTES, SHARED_X_MIN_BLOCKS, SHARED_X_M_TILE, SHARED_X_ROWS, SKINNY_CTAS_PER_SM,
    SKINNY_MAX_M, SKINNY_M_TILES, SKINNY_ROWS, SKINNY_THREADS, SKINNY_THREE_CTAS, SKINNY_WG_MIN_FILL, WGMMA_BK,
    WGMMA_TILE,
};
pub use staged::{load_batches, FoldLayout, FoldedX, FOLD_CHUNKS};
pub use wide_plan::{wide_serves, SKINNY_WIDE_BYTES, SKINNY_WIDE_K, SKINNY_WIDE_M_TILE, SKINNY_WIDE_ROWS};

use crate::error::{unsupported, Result};
use crate::mega::MegaOp;
use crate::runtime::{check_aligned, Gpu};
use cublaslt::LtMatmul;
use skinny::SkinnyGemm;
use wgmma::TmaGemm;

/// A plan's GEMM, loaded: the skinny or WGMMA kernel's entry point, or cuBLASLt's algorithm.
pub struct Gemm {
    plan: GemmPlan,
    stream: Arc<CudaStream>,
    exec: Exec,
}

enum Exec {
    Skinny(SkinnyGemm),
    /// The WGMMA kernel and the skinny kernel's wide form.
    Tma(TmaGemm),
    CublasLt(LtMatmul),
}

impl Gemm {
    /// Loads `plan`: compiles and loads the skinny kernel on first use, or describes the shape to
    /// cuBLASLt and asks its heuristic for the algorithm (opening cuBLASLt on first use).
    pub fn new(gpu: &Gpu, plan: GemmPlan) -> Result<Self> {
        plan.shape.validate()?;
        let exec = match &plan.path {
            GemmPath::Skinny(tile) if plan.reads_class_steps() => {
                Exec::Tma(TmaGemm::class_steps(gpu, plan.shape, tile)?)
            }
            GemmPath::Skinny(tile) => Exec::Skinny(SkinnyGemm::new(gpu, plan.shape, tile)?),
            GemmPath::Wgmma(tile) => Exec::Tma(TmaGemm::wgmma(gpu, plan.shape, tile)?),
            GemmPath::CublasLt { heuristic_m, pin } => {
                Exec::CublasLt(LtMatmul::new(CublasLt::shared(gpu)?, plan.shape, *heuristic_m, *pin)?)
            }
        };
        Ok(Self { plan, stream: gpu.stream().clone(), exec })
    }

    /// The plan.
    pub fn plan(&self) -> &GemmPlan {
        &self.plan
    }

    /// cuBLASLt's pinned algorithm, for a cuBLASLt plan.
    pub fn algorithm(&self) -> Option<LtAlgo> {
        match &self.exec {
            Exec::Skinny(_) | Exec::Tma(_) => None,
            Exec::CublasLt(lt) => Some(lt.algo()),
        }
    }

    /// `y = x W^T` on the GPU's stream: `x` is `[M, K]`, `w` `[N, K]`, `y` `[M, N]`, each exactly
    /// that long and starting on a 16-byte boundary. A plan with the [`EpilogueKind::Store`]
    /// epilogue. Launch only.
    pub fn run(&self, x: &CudaView<'_, bf16>, w: &CudaView<'_, bf16>, y: &mut CudaViewMut<'_, bf16>) -> Result<()> {
        self.run_with(x, w, Epilogue::Store { y: y.slice_mut(..) })
    }

    /// `x W^T` on the GPU's stream, each output through `epilogue`, which must be of the plan's
    /// [`EpilogueKind`]: `x` is `[M, K]`, `w` `[N, K]`, the epilogue's buffers as [`Epilogue`]
    /// documents, each exactly that long and starting on a 16-byte boundary. Launch only.
    pub fn run_with(&self, x: &CudaView<'_, bf16>, w: &CudaView<'_, bf16>, mut epilogue: Epilogue<'_>) -> Result<()> {
        self.check(x, w, &epilogue)?;
        match &self.exec {
            Exec::Skinny(k) => k.launch(&self.stream, x, w, &mut epilogue),
            Exec::Tma(k) => k.launch(&self.stream, x, w, &mut epilogue),
            Exec::CublasLt(lt) => match epilogue {
                Epilogue::Store { mut y } => lt.launch(&self.stream, x, w, &mut y),
                other => Err(mismatch(&self.plan.name(), &self.plan, &other)),
            },
        }
    }

    /// `x W^T` on the GPU's stream for a folded plan ([`GemmPlan::skinny_fold`]), x the split-K
    /// attention's partials that `x` holds, each output through `epilogue` as for
    /// [`Gemm::run_with`]. Launch only.
    pub fn run_folded(&self, x: &FoldedX<'_>, w: &CudaView<'_, bf16>, mut epilogue: Epilogue<'_>) -> Result<()> {
        let entry = self.plan.name();
        let (Exec::Skinny(k), GemmPath::Skinny(SkinnyTile { form: SkinnyForm::Folded(layout), .. })) =
            (&self.exec, &self.plan.path)
        else {
            return Err(unsupported(&entry, "run_folded takes a folded plan; this one reads x as bf16 rows".into()));
        };
        self.check_folded(&entry, layout, x, w, &epilogue)?;
        k.launch_folded(&self.stream, layout, x, w, &mut epilogue)
    }

    /// What [`Gemm::run_with`] would launch, as a task of the decode megakernel instead
    /// ([`crate::mega`]): the same checks, then the skinny entry's arguments (the same list in
    /// every form; the megakernel computes the same sums with its own tiles). A cuBLASLt plan
    /// has no such form.
    pub fn record_with(
        &self,
        x: &CudaView<'_, bf16>,
        w: &CudaView<'_, bf16>,
        mut epilogue: Epilogue<'_>,
    ) -> Result<MegaOp> {
        self.check(x, w, &epilogue)?;
        match &self.exec {
            Exec::Skinny(k) => {
                MegaOp::gemm(self.plan.epilogue, self.plan.shape, k.args(&self.stream, x, w, &mut epilogue)?)
            }
            Exec::Tma(_) | Exec::CublasLt(_) => {
                Err(unsupported(&self.plan.name(), "only a skinny GEMM's own CTAs run in the megakernel".into()))
            }
        }
    }

    /// The checks of every launch: the epilogue's kind against the plan's, the sizes of `x` and
    /// `w`, and every buffer's alignment.
    fn check(&self, x: &CudaView<'_, bf16>, w: &CudaView<'_, bf16>, epilogue: &Epilogue<'_>) -> Result<()> {
        let entry = self.plan.name();
        if matches!(&self.plan.path, GemmPath::Skinny(SkinnyTile { form: SkinnyForm::Folded(_), .. })) {
            return Err(unsupported(&entry, "a folded plan's x is the attention's partials: run_folded".into()));
        }
        self.check_kind(&entry, epilogue)?;
        let s = self.plan.shape;
        for (what, got, want, dims) in [("x", x.len(), s.m * s.k, "[M, K]"), ("w", w.len(), s.n * s.k, "[N, K]")] {
            if got != want {
                return Err(unsupported(&entry, format!("`{what}` has {got} elements, {dims} of {s} is {want}")));
            }
        }
        check_aligned(&self.stream, &entry, "x", x)?;
        check_aligned(&self.stream, &entry, "w", w)?;
        epilogue.check(&entry, &self.stream, s)
    }

    /// [`Gemm::check`] for a folded plan of `layout`: its x the partials.
    fn check_folded(
        &self,
        entry: &str,
        layout: &FoldLayout,
        x: &FoldedX<'_>,
        w: &CudaView<'_, bf16>,
        epilogue: &Epilogue<'_>,
    ) -> Result<()> {
        self.check_kind(entry, epilogue)?;
        let s = self.plan.shape;
        if w.len() != s.n * s.k {
            return Err(unsupported(entry, format!("`w` has {} elements, [N, K] of {s} is {}", w.len(), s.n * s.k)));
        }
        staged::check(entry, s, layout, x)?;
        check_aligned(&self.stream, entry, "partial", &x.partial)?;
        check_aligned(&self.stream, entry, "w", w)?;
        epilogue.check(entry, &self.stream, s)
    }

    /// Refuses an epilogue of another kind than the plan's.
    fn check_kind(&self, entry: &str, epilogue: &Epilogue<'_>) -> Result<()> {
        if epilogue.kind() != self.plan.epilogue {
            return Err(mismatch(entry, &self.plan, epilogue));
        }
        Ok(())
    }
}

/// The refusal of an epilogue the plan was not made for.
fn mismatch(entry: &str, plan: &GemmPlan, epilogue: &Epilogue<'_>) -> crate::Error {
    unsupported(entry, format!("the plan's epilogue is {:?}, the launch's {:?}", plan.epilogue, epilogue.kind()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{GEMM_SKINNY, GEMM_SKINNY_CLASSES_WG, GEMM_SKINNY_WIDE};
    use crate::runtime::cubin::functions;
    use crate::runtime::kernel_cache::compile;
    use crate::runtime::nvrtc_available;

    #[test]
    fn every_entry_a_plan_can_name_is_in_the_compiled_kernel() {
        if !nvrtc_available() {
            println!("SKIPPED: no NVRTC library here (scripts/local-nvrtc.sh installs one)");
            return;
        }
        let names = functions(&compile(&GEMM_SKINNY, "sm_90a").unwrap_or_else(|e| panic!("{e}"))).unwrap();
        let entry = |plan: &GemmPlan| match &plan.path {
            GemmPath::Skinny(tile) => tile.entry.clone(),
            _ => unreachable!("a skinny plan"),
        };
        for kind in EpilogueKind::ALL {
            for m in 1..=SKINNY_MAX_M {
                let shape = GemmShape { m, n: 128, k: 64 };
                for rows in SKINNY_ROWS {
                    let Ok(plan) = GemmPlan::skinny_rows_epilogue(shape, rows, kind) else {
                        let fits = rows_fit(m.next_power_of_two().max(8), rows) && rows >= kind.min_rows();
                        assert!(!fits, "M {m} rows {rows} {kind:?} refused");
                        continue;
                    };
                    assert!(names.contains(&entry(&plan)), "{} missing", entry(&plan));
                }
                // The shared-x form takes the 64-row x tile alone.
                match GemmPlan::skinny_shared_x(shape, kind, 132) {
                    Ok(plan) => assert!(m > 32 && names.contains(&entry(&plan)), "M {m}: {} missing", entry(&plan)),
                    Err(e) => assert!(m <= 32, "M {m} {kind:?} refused: {e}"),
                }
            }
        }
        for (m_tile, rows, kind) in SKINNY_THREE_CTAS {
            let plan = GemmPlan::skinny_three_ctas(GemmShape { m: m_tile, n: 128, k: 64 }, rows, kind).unwrap();
            assert!(names.contains(&entry(&plan)), "{} missing", entry(&plan));
        }
        // The folded form at every rows per CTA its plans pick, for o_proj's epilogues.
        let layout = FoldLayout { heads: 2, head_dim: 32, max_chunks: 3 };
        let mut rows_seen = Vec::new();
        for (m, n, sms) in [(1, 128, 132), (8, 256, 8), (2, 1024, 12), (1, 4096, 2)] {
            for kind in [EpilogueKind::Store, EpilogueKind::PeriLn] {
                let plan = GemmPlan::skinny_fold(GemmShape { m, n, k: 64 }, kind, layout, sms).unwrap();
                assert!(names.contains(&entry(&plan)), "{} missing", entry(&plan));
                if let GemmPath::Skinny(t) = &plan.path {
                    rows_seen.push(t.rows);
                }
            }
        }
        assert!(SKINNY_ROWS.iter().all(|r| rows_seen.contains(r)), "rows per CTA {rows_seen:?}");
        // The staged form at every rows per CTA each epilogue takes.
        for kind in EpilogueKind::ALL {
            for rows in SKINNY_ROWS.into_iter().filter(|&r| r >= kind.min_rows()) {
                let plan = GemmPlan::skinny_staged(GemmShape { m: 5, n: 256, k: 64 }, rows, kind).unwrap();
                assert!(names.contains(&entry(&plan)), "{} missing", entry(&plan));
            }
        }
        // The wide form, every epilogue, in its own file.
        let wide = functions(&compile(&GEMM_SKINNY_WIDE, "sm_90a").unwrap_or_else(|e| panic!("{e}"))).unwrap();
        for kind in EpilogueKind::ALL {
            let plan = GemmPlan::skinny_wide(GemmShape { m: 100, n: 128, k: 512 }, kind).unwrap();
            assert!(wide.contains(&entry(&plan)), "{} missing", entry(&plan));
        }
        // The class form on warpgroups, every epilogue, in its own file.
        let classes_wg =
            functions(&compile(&GEMM_SKINNY_CLASSES_WG, "sm_90a").unwrap_or_else(|e| panic!("{e}"))).unwrap();
        for kind in EpilogueKind::ALL {
            let plan = GemmPlan::skinny_classes_wg(GemmShape { m: 100, n: 128, k: 1024 }, kind).unwrap();
            assert!(classes_wg.contains(&entry(&plan)), "{} missing", entry(&plan));
        }
    }
}
