//! Launching the TMA-fed GEMMs, `gemm_wgmma.cu` (prefill rows) and `gemm_skinny_wide.cu` (the
//! skinny kernel's wide form): the plan's entry point, loaded once, the tensor maps of x and W
//! encoded at each launch (they carry the buffers' addresses; each file's boxes), and the grid
//! from the plan. Both take (x's map, W's map, m, n, k) and then the epilogue's parameters.

use std::sync::Arc;

use cudarc::driver::sys;
use cudarc::driver::{CudaFunction, CudaStream, CudaView, DevicePtr, LaunchConfig};
use half::bf16;

use super::epilogue::Epilogue;
use super::plan::{GemmShape, SkinnyTile, WgmmaTile, WGMMA_BK, WGMMA_TILE};
use super::wide_plan::{SKINNY_WIDE_M_TILE, SKINNY_WIDE_ROWS, SKINNY_WIDE_THREADS};
use crate::error::{unsupported, Result};
use crate::kernels::{GEMM_SKINNY_WIDE, GEMM_WGMMA};
use crate::runtime::{launch_error, Gpu, Kernel, Launch};

/// Threads per CTA of `gemm_wgmma.cu`: two consumer warpgroups and the producer warp (its THREADS).
const THREADS: u32 = 288;
/// Ring stages of `gemm_wgmma.cu` (its STAGES), each an x and a W block of 128 x 64 bf16.
const STAGES: u32 = 3;
/// Dynamic shared memory of `gemm_wgmma.cu` (its SMEM_BYTES): alignment slack, the ring, the
/// mbarriers.
const SMEM_BYTES: u32 = 1024 + STAGES * 2 * (WGMMA_TILE * WGMMA_BK * 2) as u32 + 2 * STAGES * 8;

/// A TMA-fed GEMM of one plan, loaded.
pub(super) struct TmaGemm {
    func: CudaFunction,
    entry: String,
    cfg: LaunchConfig,
    /// Rows of x and of W in a box of their tensor maps.
    boxes: (usize, usize),
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
        Self::load(gpu, &GEMM_WGMMA, &tile.entry, cfg, (WGMMA_TILE, WGMMA_TILE), shape)
    }

    /// The skinny kernel's wide form's `tile` (compiling `gemm_skinny_wide.cu` on first use); its
    /// W is the class-step copy.
    pub(super) fn wide(gpu: &Gpu, shape: GemmShape, tile: &SkinnyTile) -> Result<Self> {
        let cfg = LaunchConfig {
            grid_dim: (tile.grid, 1, 1),
            block_dim: (SKINNY_WIDE_THREADS, 1, 1),
            shared_mem_bytes: tile.shared_bytes,
        };
        Self::load(gpu, &GEMM_SKINNY_WIDE, &tile.entry, cfg, (SKINNY_WIDE_M_TILE, SKINNY_WIDE_ROWS), shape)
    }

    /// Loads `entry` of `kernel` with the shared memory `cfg` asks for.
    fn load(
        gpu: &Gpu,
        kernel: &Kernel,
        entry: &str,
        cfg: LaunchConfig,
        boxes: (usize, usize),
        shape: GemmShape,
    ) -> Result<Self> {
        let func = gpu.function(kernel, entry)?;
        gpu.set_max_dynamic_smem(&func, cfg.shared_mem_bytes)?;
        Ok(Self { func, entry: entry.to_string(), cfg, boxes, shape })
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
        let mx = tensor_map(stream, &self.entry, x, s.m, s.k, self.boxes.0)?;
        let mw = tensor_map(stream, &self.entry, w, s.n, s.k, self.boxes.1)?;
        // GemmShape::validate keeps all three below 2^31.
        let int = |v: usize| i32::try_from(v).expect("a validated GEMM dimension fits an int");
        let (m, n, k) = (int(s.m), int(s.n), int(s.k));
        let mut b = Launch::new(stream, &self.func);
        b.arg_tensor_map(mx).arg_tensor_map(mw).arg(&m).arg(&n).arg(&k);
        epilogue.push(&self.entry, &mut b)?;
        // SAFETY: the arguments match GEMM_WGMMA_ENTRY in gemm_wgmma.cu (and
        // GEMM_SKINNY_WIDE_ENTRY in gemm_skinny_wide.cu, the same list) with the epilogue's
        // parameters (the plan named the entry of `epilogue`'s kind); the tensor maps cover
        // exactly x [m, k] and w [n, k] with the entry's boxes, whose sizes and alignment
        // Gemm::run_with checked, as it checked the epilogue's buffers; the plan checked K and N
        // against the kernel's assumptions.
        unsafe { b.launch(self.cfg) }.map_err(launch_error(&self.entry, &self.cfg))?;
        Ok(())
    }
}

/// The tensor map of a row-major `[rows, k]` bf16 matrix at `buf` for `entry`: boxes of 64
/// columns (128 bytes, the swizzle's span) by `box_rows` rows, 128-byte swizzle, zeros past the
/// edges.
fn tensor_map(
    stream: &CudaStream,
    entry: &str,
    buf: &CudaView<'_, bf16>,
    rows: usize,
    k: usize,
    box_rows: usize,
) -> Result<sys::CUtensorMap> {
    let (ptr, _record) = buf.device_ptr(stream);
    let k = k as u64;
    let dims = [k, rows as u64];
    let strides = [k * 2];
    let boxes = [WGMMA_BK as u32, box_rows as u32];
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
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if result != sys::CUresult::CUDA_SUCCESS {
        return Err(unsupported(entry, format!("cuTensorMapEncodeTiled of [{rows}, {k}] failed: {result:?}")));
    }
    Ok(map)
}
