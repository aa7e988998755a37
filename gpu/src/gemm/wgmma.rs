//! Launching `gemm_wgmma.cu`: the plan's entry point, loaded once, the tensor maps of x and W
//! encoded at each launch (they carry the buffers' addresses), and the grid from the plan; and
//! the tensor maps of every TMA-fed GEMM.

use std::sync::Arc;

use cudarc::driver::sys;
use cudarc::driver::{CudaFunction, CudaStream, CudaView, DevicePtr, LaunchConfig};
use half::bf16;

use super::epilogue::Epilogue;
use super::plan::{GemmShape, WgmmaTile, WGMMA_BK, WGMMA_TILE};
use crate::error::{unsupported, Result};
use crate::kernels::GEMM_WGMMA;
use crate::runtime::{launch_error, Gpu, Launch};

/// Threads per CTA: two consumer warpgroups and the producer warp (`gemm_wgmma.cu`'s THREADS).
const THREADS: u32 = 288;
/// Ring stages of the kernel (its STAGES), each an x and a W block of 128 x 64 bf16.
const STAGES: u32 = 3;
/// Dynamic shared memory (the kernel's SMEM_BYTES): alignment slack, the ring, the mbarriers.
const SMEM_BYTES: u32 = 1024 + STAGES * 2 * (WGMMA_TILE * WGMMA_BK * 2) as u32 + 2 * STAGES * 8;

/// The WGMMA kernel of one plan, loaded.
pub(super) struct WgmmaGemm {
    func: CudaFunction,
    entry: String,
    cfg: LaunchConfig,
    shape: GemmShape,
}

impl WgmmaGemm {
    /// Loads `tile`'s entry point (compiling `gemm_wgmma.cu` on first use) with the shared memory
    /// it needs.
    pub(super) fn new(gpu: &Gpu, shape: GemmShape, tile: &WgmmaTile) -> Result<Self> {
        let func = gpu.function(&GEMM_WGMMA, &tile.entry)?;
        gpu.set_max_dynamic_smem(&func, SMEM_BYTES)?;
        let cfg = LaunchConfig {
            grid_dim: (tile.grid.0, tile.grid.1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: SMEM_BYTES,
        };
        Ok(Self { func, entry: tile.entry.clone(), cfg, shape })
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
        let mx = tensor_map(stream, &self.entry, x, s.m, s.k, WGMMA_TILE)?;
        let mw = tensor_map(stream, &self.entry, w, s.n, s.k, WGMMA_TILE)?;
        // GemmShape::validate keeps all three below 2^31.
        let int = |v: usize| i32::try_from(v).expect("a validated GEMM dimension fits an int");
        let (m, n, k) = (int(s.m), int(s.n), int(s.k));
        let mut b = Launch::new(stream, &self.func);
        b.arg_tensor_map(mx).arg_tensor_map(mw).arg(&m).arg(&n).arg(&k);
        epilogue.push(&self.entry, &mut b)?;
        // SAFETY: the arguments match GEMM_WGMMA_ENTRY in gemm_wgmma.cu with the epilogue's
        // parameters (the plan named the entry of `epilogue`'s kind); the tensor maps cover
        // exactly x [m, k] and w [n, k], whose sizes and alignment Gemm::run_with checked, as it
        // checked the epilogue's buffers.
        unsafe { b.launch(self.cfg) }.map_err(launch_error(&self.entry, &self.cfg))?;
        Ok(())
    }
}

/// The tensor map of a row-major `[rows, k]` bf16 matrix at `buf` for `entry`: boxes of 64
/// columns (128 bytes, the swizzle's span) by `box_rows` rows, 128-byte swizzle, zeros past the
/// edges. The TMA-fed GEMMs (this file's and [`super::wide`]) read their operands through it.
pub(super) fn tensor_map(
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
