//! Launching the TMA-fed GEMMs, `gemm_wgmma.cu` (prefill rows), `gemm_skinny_wide.cu` and
//! `gemm_skinny_classes_wg.cu` (the skinny kernel's wide form and its class form on warpgroups):
//! the plan's entry point, loaded once, the tensor maps of x and W encoded at each launch (they
//! carry the buffers' addresses; each file's boxes and swizzle), and the grid (and cluster) from
//! the plan. Each takes (x's map, W's map, m, n, k) and then the epilogue's parameters.

use std::sync::Arc;

use cudarc::driver::sys;
use cudarc::driver::{CudaFunction, CudaStream, CudaView, DevicePtr, LaunchConfig};
use half::bf16;

use super::classes_plan::SKINNY_CLASSES_ROWS;
use super::classes_wg_plan::{SKINNY_CLASSES_WG_BOX_K, SKINNY_CLASSES_WG_M_TILE, SKINNY_CLASSES_WG_THREADS};
use super::epilogue::Epilogue;
use super::plan::{GemmShape, SkinnyForm, SkinnyTile, WgmmaTile, WGMMA_BK, WGMMA_TILE};
use super::wide_plan::{SKINNY_WIDE_M_TILE, SKINNY_WIDE_ROWS, SKINNY_WIDE_THREADS};
use crate::error::{unsupported, Result};
use crate::kernels::{GEMM_SKINNY_CLASSES_WG, GEMM_SKINNY_WIDE, GEMM_WGMMA};
use crate::runtime::{launch_error, Gpu, Kernel, Launch};

/// Threads per CTA of `gemm_wgmma.cu`: two consumer warpgroups and the producer warp (its THREADS).
const THREADS: u32 = 288;
/// Ring stages of `gemm_wgmma.cu` (its STAGES), each an x and a W block of 128 x 64 bf16.
const STAGES: u32 = 3;
/// Dynamic shared memory of `gemm_wgmma.cu` (its SMEM_BYTES): alignment slack, the ring, the
/// mbarriers.
const SMEM_BYTES: u32 = 1024 + STAGES * 2 * (WGMMA_TILE * WGMMA_BK * 2) as u32 + 2 * STAGES * 8;

/// How a TMA-fed GEMM's tensor maps cut x and W: rows of each in a box, the columns of a box (its
/// swizzle's span: 64 columns with the 128-byte swizzle, 32 with the 64-byte one).
#[derive(Clone, Copy)]
struct Boxes {
    x_rows: usize,
    w_rows: usize,
    k: usize,
}

/// A TMA-fed GEMM of one plan, loaded.
pub(super) struct TmaGemm {
    func: CudaFunction,
    entry: String,
    cfg: LaunchConfig,
    boxes: Boxes,
    /// CTAs a cluster ([`SkinnyForm::cluster`]; 1 for the WGMMA kernel).
    cluster: u32,
    shape: GemmShape,
}

impl TmaGemm {
    /// The WGMMA kernel's `tile` (compiling `gemm_wgmma.cu` on first use).
    pub(super) fn wgmma(gpu: &Gpu, shape: GemmShape, tile: &WgmmaTile) -> Result<Self> {
        let cfg = LaunchConfig {
            grid_dim: (tile.grid.0, tile.grid.1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: SMEM_BYTES,
        };
        let boxes = Boxes { x_rows: WGMMA_TILE, w_rows: WGMMA_TILE, k: WGMMA_BK };
        Self::load(gpu, &GEMM_WGMMA, &tile.entry, cfg, boxes, 1, shape)
    }

    /// A skinny form's `tile` whose W is the class-step copy: the wide form's (compiling
    /// `gemm_skinny_wide.cu` on first use) or the class form's on warpgroups
    /// (`gemm_skinny_classes_wg.cu`).
    pub(super) fn class_steps(gpu: &Gpu, shape: GemmShape, tile: &SkinnyTile) -> Result<Self> {
        let (kernel, threads, boxes) = match tile.form {
            SkinnyForm::Wide => {
                let boxes = Boxes { x_rows: SKINNY_WIDE_M_TILE, w_rows: SKINNY_WIDE_ROWS, k: WGMMA_BK };
                (&GEMM_SKINNY_WIDE, SKINNY_WIDE_THREADS, boxes)
            }
            SkinnyForm::ClassesWg => {
                let boxes =
                    Boxes { x_rows: SKINNY_CLASSES_WG_M_TILE, w_rows: SKINNY_CLASSES_ROWS, k: SKINNY_CLASSES_WG_BOX_K };
                (&GEMM_SKINNY_CLASSES_WG, SKINNY_CLASSES_WG_THREADS, boxes)
            }
            other => return Err(unsupported(&tile.entry, format!("the {other:?} form reads no tensor maps"))),
        };
        let cfg = LaunchConfig {
            grid_dim: (tile.grid, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: tile.shared_bytes,
        };
        Self::load(gpu, kernel, &tile.entry, cfg, boxes, tile.form.cluster(), shape)
    }

    /// Loads `entry` of `kernel` with the shared memory `cfg` asks for.
    fn load(
        gpu: &Gpu,
        kernel: &Kernel,
        entry: &str,
        cfg: LaunchConfig,
        boxes: Boxes,
        cluster: u32,
        shape: GemmShape,
    ) -> Result<Self> {
        let func = gpu.function(kernel, entry)?;
        gpu.set_max_dynamic_smem(&func, cfg.shared_mem_bytes)?;
        Ok(Self { func, entry: entry.to_string(), cfg, boxes, cluster, shape })
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
        let s = self.shape;
        let mx = tensor_map(stream, &self.entry, x, s.m, s.k, (self.boxes.x_rows, self.boxes.k))?;
        let mw = tensor_map(stream, &self.entry, w, s.n, s.k, (self.boxes.w_rows, self.boxes.k))?;
        // GemmShape::validate keeps all three below 2^31.
        let int = |v: usize| i32::try_from(v).expect("a validated GEMM dimension fits an int");
        let (m, n, k) = (int(s.m), int(s.n), int(s.k));
        let mut b = Launch::new(stream, &self.func);
        b.cluster_x(self.cluster);
        b.arg_tensor_map(mx).arg_tensor_map(mw).arg(&m).arg(&n).arg(&k);
        epilogue.push(&self.entry, &mut b)?;
        // SAFETY: the arguments match GEMM_WGMMA_ENTRY in gemm_wgmma.cu (and
        // GEMM_SKINNY_WIDE_ENTRY in gemm_skinny_wide.cu and GEMM_SKINNY_CLASSES_WG_ENTRY in
        // gemm_skinny_classes_wg.cu, the same list) with the epilogue's parameters (the plan
        // named the entry of `epilogue`'s kind); the tensor maps cover exactly x [m, k] and w
        // [n, k] with the entry's boxes and swizzle, whose sizes and alignment Gemm::run_with
        // checked, as it checked the epilogue's buffers; the plan checked M, K and N against the
        // kernel's assumptions, and the class form's grid is a multiple of its cluster.
        unsafe { b.launch(self.cfg) }.map_err(launch_error(&self.entry, &self.cfg))?;
        Ok(())
    }
}

/// The tensor map of a row-major `[rows, k]` bf16 matrix at `buf` for `entry`: boxes of `box_k`
/// columns by `box_rows` rows, swizzled over the box's row (128 bytes at 64 columns, 64 at 32),
/// zeros past the edges.
fn tensor_map(
    stream: &CudaStream,
    entry: &str,
    buf: &CudaView<'_, bf16>,
    rows: usize,
    k: usize,
    (box_rows, box_k): (usize, usize),
) -> Result<sys::CUtensorMap> {
    let swizzle = match box_k {
        WGMMA_BK => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
        SKINNY_CLASSES_WG_BOX_K => sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_64B,
        other => return Err(unsupported(entry, format!("no swizzle spans a box of {other} columns"))),
    };
    let (ptr, _record) = buf.device_ptr(stream);
    let k = k as u64;
    let dims = [k, rows as u64];
    let strides = [k * 2];
    let boxes = [box_k as u32, box_rows as u32];
    let element_strides = [1u32, 1];
    // SAFETY: zero is a valid bit pattern of the opaque map, which the call overwrites.
    let mut map: sys::CUtensorMap = unsafe { std::mem::zeroed() };
    // SAFETY: every array outlives the call and has the rank's two entries (one stride: the
    // innermost dimension's is the element size); `ptr` is a live device allocation of
    // rows x K elements, 16-byte aligned as the encoder requires.
    let result = unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            2,
            ptr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            element_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if result != sys::CUresult::CUDA_SUCCESS {
        return Err(unsupported(entry, format!("cuTensorMapEncodeTiled of [{rows}, {k}] failed: {result:?}")));
    }
    Ok(map)
}
