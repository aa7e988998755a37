//! What the GEMM checks share on the device: the plans that serve a shape, and one run into a
//! poisoned output.

use cudarc::driver::CudaSlice;
use gpu::gemm::{
    layout, rows_fit, wgmma_runs_on, EpilogueKind, Gemm, GemmPlan, GemmShape, SKINNY_MAX_M, SKINNY_M_TILES, SKINNY_ROWS,
};
use gpu::Gpu;
use half::bf16;
use model::gpu_backend::linear::DECODE_PIN_AT;

use super::reference::POISON;

/// A check's outcome, as `verify::gpu_harness` runs it.
pub type Check = Result<(), String>;

/// A GPU result as a check's error.
pub fn g<T>(r: gpu::Result<T>) -> Result<T, String> {
    r.map_err(|e| e.to_string())
}

/// asynct-0.5b's weight shapes `(name, N, K)`: q/k/v fused, o, gate/up fused, down, the LM head.
pub const MODEL_SHAPES: [(&str, usize, usize); 5] = [
    ("qkv", 2048, 1024),
    ("o_proj", 1024, 1024),
    ("gate_up", 6144, 1024),
    ("down", 1024, 3072),
    ("lm_head", 151_936, 1024),
];

/// Whether `gpu` runs wgmma (sm_90 alone): the WGMMA GEMM and the skinny kernel's warpgroup form.
pub fn runs_wgmma(gpu: &Gpu) -> bool {
    wgmma_runs_on(gpu.info().compute_capability)
}

/// What a check's summary adds on a device without wgmma: the plans that `plans` and the epilogue
/// checks leave out there, said rather than skipped silently.
pub fn wgmma_left_out(gpu: &Gpu) -> &'static str {
    if runs_wgmma(gpu) {
        ""
    } else {
        " (this device runs no wgmma: the warpgroup form and the WGMMA kernel are not checked)"
    }
}

/// Whether `gpu` runs the WGMMA GEMM (sm_90 alone) and `shape` fits it (K a multiple of 64, N of
/// 16).
pub fn wgmma_serves(gpu: &Gpu, shape: GemmShape) -> bool {
    runs_wgmma(gpu) && GemmPlan::wgmma_epilogue(shape, EpilogueKind::Store).is_ok()
}

/// Every plan that serves `shape` on `gpu`: each skinny instantiation for its `M` (the dispatcher's
/// among them; past `SKINNY_MAX_M` rows in slabs of 64) and, at up to 8 rows, its staged form with
/// x as it is (where shared memory holds the rows), the shared-x form where it takes the shape (M
/// past 32, the slab fitting shared memory), the warpgroup form where the device runs wgmma and the
/// slab fits, its wide form and its class form on warpgroups there on weights up to `WIDE_MAX_N`
/// rows (K a multiple of 512 and 1,024), the WGMMA kernel where it serves the shape, cuBLASLt's own
/// choice, and cuBLASLt pinned at the reference `M` of `PINNED_AT` where N and K are at least 64
/// (and, allowed to split K, at `DECODE_PIN_AT`, the decode rows' reference).
pub fn plans(gpu: &Gpu, shape: GemmShape) -> Result<Vec<GemmPlan>, String> {
    let mut plans = Vec::new();
    let m_tile = SKINNY_M_TILES.into_iter().find(|&t| t >= shape.m).unwrap_or(SKINNY_MAX_M);
    for rows in SKINNY_ROWS.into_iter().filter(|&r| rows_fit(m_tile, r)) {
        plans.push(g(GemmPlan::skinny_rows(shape, rows))?);
        plans.extend(GemmPlan::skinny_staged(shape, rows, EpilogueKind::Store).ok());
    }
    let sms = g(gpu.multiprocessors())?;
    plans.extend(GemmPlan::skinny_shared_x(shape, EpilogueKind::Store, sms).ok());
    if runs_wgmma(gpu) {
        plans.extend(GemmPlan::skinny_wgmma(shape, EpilogueKind::Store).ok());
        plans.extend(GemmPlan::skinny_classes(shape, EpilogueKind::Store).ok());
        if shape.n <= WIDE_MAX_N {
            plans.extend(GemmPlan::skinny_wide(shape, EpilogueKind::Store).ok());
            plans.extend(GemmPlan::skinny_classes_wg(shape, EpilogueKind::Store).ok());
        }
    }
    if wgmma_serves(gpu, shape) {
        plans.push(g(GemmPlan::wgmma_epilogue(shape, EpilogueKind::Store))?);
    }
    plans.push(g(GemmPlan::cublaslt(shape))?);
    // The model pins its weight shapes only (N and K of 64 and more); for a degenerate N such as
    // 1, cuBLASLt refuses the reference M's algorithm (CUBLAS_STATUS_NOT_SUPPORTED, by name).
    if shape.m != PINNED_AT && shape.n >= 64 && shape.k >= 64 {
        plans.push(g(GemmPlan::cublaslt_pinned(shape, PINNED_AT))?);
    }
    if shape.m != DECODE_PIN_AT && shape.n >= 64 && shape.k >= 64 {
        plans.push(g(GemmPlan::cublaslt_pinned_split(shape, DECODE_PIN_AT))?);
    }
    Ok(plans)
}

/// The widest weight the checks run the skinny kernel's wide form on: gate/up's, the widest it
/// serves in the model (its W is permuted into a copy on the host for each run, which the LM
/// head's 311 MB would make slow).
pub const WIDE_MAX_N: usize = 8192;

/// The weight `plan` reads where that is not `w` as stored: the class-step copy of `w` (a
/// `[N, K]` weight) for the skinny kernel's wide form, made on the host.
pub fn weight_for(gpu: &Gpu, plan: &GemmPlan, w: &CudaSlice<bf16>) -> Result<Option<CudaSlice<bf16>>, String> {
    if !plan.reads_class_steps() {
        return Ok(None);
    }
    let host = g(gpu.download(w))?;
    Ok(Some(g(gpu.upload(&layout::to_class_steps(&host, plan.shape.k)))?))
}

/// The reference `M` of the pinned cuBLASLt plans under test (the GPU model pins at its step's
/// token capacity, a few hundred rows).
pub const PINNED_AT: usize = 768;

/// The tests' default plan on this device (`verify::gemm_default`).
pub fn default_plan(gpu: &Gpu, shape: GemmShape) -> Result<GemmPlan, String> {
    g(verify::gemm_default::default_plan(shape, g(gpu.multiprocessors())?, runs_wgmma(gpu)))
}

/// Runs `gemm` on `x` and `w` (as stored; [`weight_for`] makes the copy a plan reads instead)
/// into a new output poisoned with NaN, and returns the output.
pub fn run(gpu: &Gpu, gemm: &Gemm, x: &CudaSlice<bf16>, w: &CudaSlice<bf16>) -> Result<Vec<bf16>, String> {
    let s = gemm.plan().shape;
    let class_steps = weight_for(gpu, gemm.plan(), w)?;
    let w = class_steps.as_ref().unwrap_or(w);
    let mut y = g(gpu.upload(&vec![POISON; s.m * s.n]))?;
    g(gemm.run(&x.as_view(), &w.as_view(), &mut y.as_view_mut()))?;
    g(gpu.download(&y))
}

/// A plan's name with cuBLASLt's pinned algorithm, for messages.
pub fn label(gemm: &Gemm) -> String {
    match gemm.algorithm() {
        Some(algo) => format!("{} ({algo}) {}", gemm.plan().name(), gemm.plan().shape),
        None => format!("{} {}", gemm.plan().name(), gemm.plan().shape),
    }
}
