//! cuBLASLt for the wide GEMMs (prefill steps): bf16 in, f32 compute, bf16 out, one algorithm
//! pinned per plan.
//!
//! cuBLAS is column-major, and a row-major `[r, c]` matrix is a column-major `[c, r]` one with
//! the same bytes. So the row-major `y[M, N] = x[M, K] W[N, K]^T` is computed as the
//! column-major `y^T[N, M] = op(W) x^T`: A is W, stored column-major `[K, N]` (leading dimension
//! K) and transposed; B is x, stored column-major `[K, M]` (leading dimension K), not transposed;
//! C = D is y, column-major `[N, M]` (leading dimension N). This is the "TN" layout cuBLAS's
//! GEMMs are fastest in.
//!
//! [`CublasLt`] is the library handle and its workspace, made once per [`Gpu`]
//! ([`CublasLt::shared`]) and shared by every plan. `LtMatmul` is one plan's descriptors and the
//! algorithm cuBLASLt's heuristic returned for its exact shape, queried once when the plan is
//! loaded; every launch then runs that algorithm with the shared workspace, so nothing is
//! allocated or chosen per call and a CUDA graph can capture it. The heuristic may pick a
//! different algorithm (another tile, another split of K) for another `M`, so plans made per `M`
//! are not batch-invariant. A pinned plan asks about a reference `M` instead, allowing no
//! reduction scheme (no split of K), and `cublasLtMatmulAlgoCheck` confirms the algorithm runs
//! the plan's own `M`: every plan of one N and K then computes an output from its own row and
//! column in the same order. A plan pinned with splits ([`Pin::SplitK`]) allows only the
//! reduction scheme that sums the splits' f32 partials in a pass of its own through the
//! workspace, never the in-place one that adds them into the output: the splits are the
//! algorithm's, so the same for every `M`, and `gpu_gemm` checks on the device that the order of
//! their sum is too.

use std::sync::Arc;

use cudarc::cublaslt::result::{self as ltr, CublasError};
use cudarc::cublaslt::sys;
use cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut};
use half::bf16;

use super::plan::{GemmShape, Pin};
use crate::error::{Error, Result};
use crate::runtime::Gpu;

/// The cuBLASLt handle and the workspace every plan's algorithm may use.
pub struct CublasLt {
    handle: sys::cublasLtHandle_t,
    workspace: CudaSlice<u8>,
}

// SAFETY: the handle holds no thread-affine state (cudarc marks its own CudaBlasLT handle the
// same way); every call through it is ordered on the one stream of the Gpu it was made for.
unsafe impl Send for CublasLt {}
// SAFETY: as above; the handle is only read after creation.
unsafe impl Sync for CublasLt {}

impl CublasLt {
    /// Workspace bytes: NVIDIA's recommendation for Hopper (32 MiB), enough for every algorithm
    /// the heuristic returns under it.
    pub const WORKSPACE_BYTES: usize = 32 << 20;

    /// The device's cuBLASLt handle and workspace, opened on first use and shared by every
    /// cuBLASLt GEMM after (one workspace per device, not per weight shape).
    pub fn shared(gpu: &Gpu) -> Result<Arc<Self>> {
        gpu.shared(Self::new)
    }

    /// Opens cuBLASLt on `gpu`'s context and allocates the workspace (use [`CublasLt::shared`],
    /// which does it once per device).
    pub(crate) fn new(gpu: &Gpu) -> Result<Self> {
        // SAFETY: it only tries to dlopen libcublasLt and reports whether that worked.
        if !unsafe { sys::is_culib_present() } {
            return Err(Error::NoCublasLt);
        }
        gpu.context().bind_to_thread()?;
        let handle = ltr::create_handle().map_err(blas("cublasLtCreate", "every shape"))?;
        Ok(Self { handle, workspace: gpu.zeros::<u8>(Self::WORKSPACE_BYTES)? })
    }
}

impl Drop for CublasLt {
    fn drop(&mut self) {
        // SAFETY: the handle was created in `new` and is destroyed once; nothing can be using it,
        // since every LtMatmul holds an Arc of this.
        let _ = unsafe { ltr::destroy_handle(self.handle) };
    }
}

/// The algorithm cuBLASLt's heuristic picked for a plan, as its configuration attributes say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LtAlgo {
    /// `CUBLASLT_ALGO_CONFIG_ID`.
    pub id: u32,
    /// `CUBLASLT_ALGO_CONFIG_TILE_ID` (a `cublasLtMatmulTile_t`).
    pub tile: u32,
    /// `CUBLASLT_ALGO_CONFIG_STAGES_ID` (a `cublasLtMatmulStages_t`).
    pub stages: u32,
    /// `CUBLASLT_ALGO_CONFIG_SPLITK_NUM`: K splits (1 or 0: none).
    pub split_k: u32,
    /// `CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME` of the K splits.
    pub reduction: u32,
    /// Workspace bytes the algorithm uses.
    pub workspace: usize,
}

impl std::fmt::Display for LtAlgo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "algo {} tile {} stages {} split-k {} reduction {} workspace {} B",
            self.id, self.tile, self.stages, self.split_k, self.reduction, self.workspace
        )
    }
}

/// One plan's matmul descriptor, matrix layouts and pinned algorithm.
pub(super) struct LtMatmul {
    library: Arc<CublasLt>,
    shape: GemmShape,
    desc: Desc,
    w_layout: Layout,
    x_layout: Layout,
    y_layout: Layout,
    algo: sys::cublasLtMatmulAlgo_t,
    info: LtAlgo,
}

// SAFETY: the descriptors are plain host objects, written once in `new` and only read by
// cublasLtMatmul afterwards.
unsafe impl Send for LtMatmul {}
// SAFETY: as above.
unsafe impl Sync for LtMatmul {}

impl LtMatmul {
    /// Describes `shape` (module docs) and asks the heuristic once for its best algorithm at
    /// `heuristic_m` rows (among those `pin` allows, even at the shape's own `M`: every pinned
    /// plan of one N, K and `heuristic_m` then gets the same algorithm).
    pub(super) fn new(library: Arc<CublasLt>, shape: GemmShape, heuristic_m: usize, pin: Pin) -> Result<Self> {
        let s = shape.to_string();
        let (m, n, k) = (shape.m as u64, shape.n as u64, shape.k as u64);
        let bf = sys::cudaDataType_t::CUDA_R_16BF;
        let desc = Desc(
            ltr::create_matmul_desc(sys::cublasComputeType_t::CUBLAS_COMPUTE_32F, sys::cudaDataType_t::CUDA_R_32F)
                .map_err(blas("cublasLtMatmulDescCreate", &s))?,
        );
        // cublasOperation_t: 1 is CUBLAS_OP_T, 0 CUBLAS_OP_N.
        desc.set(sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA, &1i32, &s)?;
        desc.set(sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB, &0i32, &s)?;
        let layout = |rows: u64, cols: u64, ld: u64| {
            ltr::create_matrix_layout(bf, rows, cols, ld as i64)
                .map(Layout)
                .map_err(blas("cublasLtMatrixLayoutCreate", &s))
        };
        let w_layout = layout(k, n, k)?;
        let x_layout = layout(k, m, k)?;
        let y_layout = layout(n, m, n)?;
        // The heuristic is asked about layouts of `heuristic_m` rows (a pinned plan's reference).
        let reference = match heuristic_m != shape.m {
            true => Some((layout(k, heuristic_m as u64, k)?, layout(n, heuristic_m as u64, n)?)),
            false => None,
        };
        let (x_asked, y_asked) = reference.as_ref().map_or((&x_layout, &y_layout), |(x, y)| (x, y));

        let pref = Pref(ltr::create_matmul_pref().map_err(blas("cublasLtMatmulPreferenceCreate", &s))?);
        use sys::cublasLtMatmulPreferenceAttributes_t as P;
        pref.set(P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &(CublasLt::WORKSPACE_BYTES as u64), &s)?;
        // Gemm::run guarantees 16-byte aligned buffers, not the 256 bytes cuBLASLt otherwise
        // assumes: algorithms that need more are left out.
        for attr in [
            P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
            P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
            P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
        ] {
            pref.set(attr, &16u32, &s)?;
        }
        // cublasLtReductionScheme_t: NONE 0, INPLACE 1, COMPUTE_TYPE 2, OUTPUT_TYPE 4.
        let schemes = match pin {
            Pin::No => None,
            // NONE alone: algorithms that split K are left out.
            Pin::Whole => Some(0u32),
            // COMPUTE_TYPE alone: OUTPUT_TYPE rounds each split's sum to bf16 before adding
            // them, a second rounding SPEC section 4 does not have (gpu_gemm caught it off the
            // f64 reference's bound, RESULTS run 206).
            Pin::SplitK => Some(2u32),
        };
        if let Some(mask) = schemes {
            pref.set(P::CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, &s)?;
        }
        let pinned = pin != Pin::No;
        // SAFETY: every descriptor was created above and is alive; C and D share y's layout.
        let best = unsafe {
            ltr::get_matmul_algo_heuristic(library.handle, desc.0, w_layout.0, x_asked.0, y_asked.0, y_asked.0, pref.0)
        }
        .map_err(blas("cublasLtMatmulAlgoGetHeuristic", &s))?;
        if pinned {
            let mut checked = std::mem::MaybeUninit::<sys::cublasLtMatmulHeuristicResult_t>::uninit();
            // SAFETY: the descriptors are alive, `best.algo` came from the heuristic for the same
            // operation and N, K, and `checked` has room for the result the call writes.
            unsafe {
                sys::cublasLtMatmulAlgoCheck(
                    library.handle,
                    desc.0,
                    w_layout.0,
                    x_layout.0,
                    y_layout.0,
                    y_layout.0,
                    &best.algo,
                    checked.as_mut_ptr(),
                )
            }
            .result()
            .map_err(blas("cublasLtMatmulAlgoCheck", &s))?;
        }
        let config = |attr| algo_config(&best.algo, attr).map_err(blas("cublasLtMatmulAlgoConfigGetAttribute", &s));
        use sys::cublasLtMatmulAlgoConfigAttributes_t as A;
        let info = LtAlgo {
            id: config(A::CUBLASLT_ALGO_CONFIG_ID)?,
            tile: config(A::CUBLASLT_ALGO_CONFIG_TILE_ID)?,
            stages: config(A::CUBLASLT_ALGO_CONFIG_STAGES_ID)?,
            split_k: config(A::CUBLASLT_ALGO_CONFIG_SPLITK_NUM)?,
            reduction: config(A::CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME)?,
            workspace: best.workspaceSize,
        };
        Ok(Self { library, shape, desc, w_layout, x_layout, y_layout, algo: best.algo, info })
    }

    /// The pinned algorithm.
    pub(super) fn algo(&self) -> LtAlgo {
        self.info
    }

    /// Runs the pinned algorithm on `stream` (the Gpu's); the buffers were checked by `Gemm::run`.
    pub(super) fn launch(
        &self,
        stream: &Arc<CudaStream>,
        x: &CudaView<'_, bf16>,
        w: &CudaView<'_, bf16>,
        y: &mut CudaViewMut<'_, bf16>,
    ) -> Result<()> {
        stream.context().bind_to_thread()?;
        let (alpha, beta) = (1.0f32, 0.0f32);
        let (x_ptr, _x_record) = x.device_ptr(stream);
        let (w_ptr, _w_record) = w.device_ptr(stream);
        let (y_ptr, _y_record) = y.device_ptr_mut(stream);
        let (ws_ptr, _ws_record) = self.library.workspace.device_ptr(stream);
        // SAFETY: the descriptors describe exactly these buffers' shapes (checked by Gemm::run),
        // the algorithm came from the heuristic for these descriptors with a workspace limit of
        // the workspace passed, and beta = 0 so C (y's own pointer) is not read.
        unsafe {
            ltr::matmul(
                self.library.handle,
                self.desc.0,
                (&alpha) as *const f32 as *const _,
                (&beta) as *const f32 as *const _,
                w_ptr as *const _,
                self.w_layout.0,
                x_ptr as *const _,
                self.x_layout.0,
                y_ptr as *const _,
                self.y_layout.0,
                y_ptr as *mut _,
                self.y_layout.0,
                &self.algo,
                ws_ptr as *mut _,
                CublasLt::WORKSPACE_BYTES,
                stream.cu_stream() as sys::cudaStream_t,
            )
        }
        .map_err(blas("cublasLtMatmul", &self.shape.to_string()))
    }
}

/// Maps a cuBLASLt status to [`Error::Blas`].
fn blas<'a>(call: &'static str, shape: &'a str) -> impl FnOnce(CublasError) -> Error + 'a {
    move |source| Error::Blas { call, shape: shape.to_string(), source }
}

/// One 32-bit configuration attribute of an algorithm.
fn algo_config(
    algo: &sys::cublasLtMatmulAlgo_t,
    attr: sys::cublasLtMatmulAlgoConfigAttributes_t,
) -> std::result::Result<u32, CublasError> {
    let (mut value, mut written) = (0u32, 0usize);
    // SAFETY: `value` has room for the 4 bytes announced; every attribute read here is 32-bit.
    unsafe {
        sys::cublasLtMatmulAlgoConfigGetAttribute(
            algo,
            attr,
            (&mut value) as *mut u32 as *mut _,
            std::mem::size_of::<u32>(),
            &mut written,
        )
    }
    .result()?;
    Ok(value)
}

/// A matmul descriptor, destroyed on drop.
struct Desc(sys::cublasLtMatmulDesc_t);

impl Desc {
    fn set<T>(&self, attr: sys::cublasLtMatmulDescAttributes_t, value: &T, shape: &str) -> Result<()> {
        // SAFETY: the descriptor is alive and `value` is the attribute's type, read for its size.
        unsafe { ltr::set_matmul_desc_attribute(self.0, attr, value as *const T as *const _, std::mem::size_of::<T>()) }
            .map_err(blas("cublasLtMatmulDescSetAttribute", shape))
    }
}

impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: created once by create_matmul_desc, destroyed once here.
        let _ = unsafe { ltr::destroy_matmul_desc(self.0) };
    }
}

/// A matrix layout, destroyed on drop.
struct Layout(sys::cublasLtMatrixLayout_t);

impl Drop for Layout {
    fn drop(&mut self) {
        // SAFETY: created once by create_matrix_layout, destroyed once here.
        let _ = unsafe { ltr::destroy_matrix_layout(self.0) };
    }
}

/// A heuristic preference, destroyed on drop (it is only needed for the query).
struct Pref(sys::cublasLtMatmulPreference_t);

impl Pref {
    fn set<T>(&self, attr: sys::cublasLtMatmulPreferenceAttributes_t, value: &T, shape: &str) -> Result<()> {
        // SAFETY: the preference is alive and `value` is the attribute's type, read for its size.
        unsafe { ltr::set_matmul_pref_attribute(self.0, attr, value as *const T as *const _, std::mem::size_of::<T>()) }
            .map_err(blas("cublasLtMatmulPreferenceSetAttribute", shape))
    }
}

impl Drop for Pref {
    fn drop(&mut self) {
        // SAFETY: created once by create_matmul_pref, destroyed once here.
        let _ = unsafe { ltr::destroy_matmul_pref(self.0) };
    }
}
