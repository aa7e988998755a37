//! The plan of a GEMM: which path and, for the skinny kernel, which instantiation and grid, all
//! from static facts (the rows the launch covers, N, K, the SM count). Pure host code, tested on
//! the CPU.
//!
//! The caller picks the path by what its rows are: `model`'s `gpu_backend::linear` plans decode
//! rows with [`GemmPlan::decode_rows`] (at any `M`), and chunk (prefill) rows and the LM
//! head's logit rows with [`GemmPlan::cublaslt_pinned`], each at its own reference `M` (chunk
//! rows with [`GemmPlan::wgmma_epilogue`] where their elementwise ops are fused, when asked);
//! the tests and benchmarks' default (skinny up to [`SKINNY_MAX_M`] rows, cuBLASLt beyond) is
//! theirs (`verify::gemm_default`). The skinny kernel's bits for a row of x do not depend on `M`,
//! on the other rows or on the instantiation (`gemm_skinny.cu`'s header says why), so every
//! decode step, at every batch bucket, computes a request's rows the same way; it takes any `M`
//! (past 64 rows in slabs of 64), which is how the model runs decode rows of batches wider than
//! 64.
//! [`GemmPlan::cublaslt`] lets cuBLASLt's heuristic choose per `M`, which may split K
//! differently at different `M`; [`GemmPlan::cublaslt_pinned`] instead asks the heuristic once,
//! at a reference `M`, for an algorithm that does not split K, and runs it at every `M`, so that
//! (checked on the H200 by `gpu_gemm`) a row's bits do not depend on the rows beside it.
//!
//! For the skinny kernel the plan picks the x tile (`m_tile`, the smallest of 8, 16, 32, 64
//! holding `M`, 64 past it: fewer accumulators and loads for small batches) and the rows of W per
//! CTA: the most, so that each CTA's x reads (M K 2 bytes, from L2) are spread over more weight
//! bytes, while the grid still fills every SM twice (the kernel's launch bounds give two CTAs per
//! SM); a W too small for that gets the fewest rows its epilogue takes, the most CTAs there can
//! be. From an x tile of [`ONE_WAVE_MIN_M_TILE`] rows, the fewest rows whose grid covers every SM
//! and fits one wave (two CTAs an SM) come first: there a CTA is bound by issuing its products
//! and reading x, and a grid of 1.45 waves (gate/up of asynct-0.5b at 16 rows, 384 CTAs) leaves a
//! ragged second wave on the step's path. With one slab of 8 rows a CTA is bound by its rounds of
//! loads instead, which 32 rows of W double (gate/up: one round of a warp's 4 steps at 16 rows,
//! two at 32): RESULTS run 218 measured the one-wave rule 2.3% faster at B32 and 4-6% slower at
//! B1 to B8 (H100). The epilogue ([`EpilogueKind`], fixed by the plan) is what the kernel does
//! with each finished output: store it, or run the elementwise op that follows the GEMM in the
//! model on it ([`GemmPlan::skinny_epilogue`]).

use crate::error::{unsupported, Result};

/// The widest `M` the skinny kernel serves in one slab (wider batches run in slabs of it).
pub const SKINNY_MAX_M: usize = 64;
/// Rows of W per CTA the skinny kernel is instantiated for.
pub const SKINNY_ROWS: [usize; 4] = [8, 16, 32, 64];
/// The `(x tile, rows of W, epilogue)` the skinny kernel's three-CTA entries are instantiated
/// for (`gemm_skinny_c3_*`): gate/up of asynct-0.5b at one slab of decode rows, whose 384 CTAs
/// take a second wave at two CTAs an SM (RESULTS run 221: 3 us of its 6 on a B1 step's path).
pub const SKINNY_THREE_CTAS: [(usize, usize, EpilogueKind); 1] = [(8, 16, EpilogueKind::SiluMul)];
/// The x tiles (rows of x per instantiation) of the skinny kernel.
pub const SKINNY_M_TILES: [usize; 4] = [8, 16, 32, 64];
/// Threads per skinny CTA (the kernel's `THREADS`: 8 warps; the warpgroup form's two warpgroups).
pub const SKINNY_THREADS: u32 = 256;
/// Skinny CTAs resident per SM (the kernel's launch bounds).
pub const SKINNY_CTAS_PER_SM: usize = 2;
/// From this x tile up, [`GemmPlan::skinny_epilogue`] first tries the rows per CTA whose grid
/// runs in one wave (module docs).
pub const ONE_WAVE_MIN_M_TILE: usize = 32;
/// The largest K the kernels take (a 16-byte load's k index stays far from `i32::MAX`).
pub const MAX_K: usize = 1 << 30;
/// The x tile of the skinny kernel's shared-x form (`gemm_skinny.cuh`, SHARED X): slabs of 64 rows.
pub const SHARED_X_M_TILE: usize = 64;
/// Rows of W per CTA and block of the shared-x form.
pub const SHARED_X_ROWS: usize = 16;
/// The fewest W blocks each shared-x CTA must take for [`GemmPlan::decode_rows`] to pick the form.
pub const SHARED_X_MIN_BLOCKS: usize = 3;
/// Dynamic shared memory a CTA may opt into on sm_90 (227 KB): the shared-x form's slab of x and
/// partial sums must fit it.
pub const SHARED_X_MAX_BYTES: usize = 232_448;
/// The x tile (rows of x a slab) of the skinny kernel's warpgroup form (`gemm_skinny_wg.cu`): the
/// wgmma's N.
pub const SKINNY_WG_M_TILE: usize = 64;
/// Rows of W a block of the warpgroup form: the wgmma's M.
pub const SKINNY_WG_ROWS: usize = 64;
/// [`GemmPlan::decode_rows`] takes the warpgroup form where its W blocks number at least the SMs
/// over this.
pub const SKINNY_WG_MIN_FILL: usize = 2;
/// 64-column tiles of W and x in flight a warpgroup (`gemm_skinny_wg.cu`'s STAGES).
pub const SKINNY_WG_STAGES: usize = 6;
/// The dynamic shared memory of the warpgroup form (`gemm_skinny_wg.cu`'s LAUNCH), whatever the
/// shape: 1 KB of alignment and each warpgroup's ring of W and x tiles (64 rows of 128 bytes
/// each). One CTA an SM: its registers (about 220 a thread) leave no room for a second.
pub const SKINNY_WG_BYTES: usize = 1024 + 2 * SKINNY_WG_STAGES * (SKINNY_WG_ROWS + SKINNY_WG_M_TILE) * 128;
// With the kernel's 1 KB of static shared memory, within what a CTA may opt into.
const _: () = assert!(SKINNY_WG_BYTES + 1024 <= SHARED_X_MAX_BYTES);
/// The entry point's name in errors about a shape, before a path is chosen.
const ENTRY: &str = "gemm";

/// `y[m, n] = x[m, k] W[n, k]^T`: the shape of one GEMM launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemmShape {
    /// Rows of x and y the launch covers (under a CUDA graph, the captured batch bucket).
    pub m: usize,
    /// Rows of W (output features).
    pub n: usize,
    /// Columns of x and W (input features), a positive multiple of 8.
    pub k: usize,
}

impl GemmShape {
    /// Checks what every path relies on; the error names the argument and its value.
    pub fn validate(&self) -> Result<()> {
        let bad = |reason: String| Err(unsupported(ENTRY, reason));
        let int_max = i32::MAX as usize;
        if self.m == 0 || self.m > int_max {
            return bad(format!("`m` must be 1 to {int_max}, got {}", self.m));
        }
        if self.n == 0 || self.n > int_max {
            return bad(format!("`n` must be 1 to {int_max}, got {}", self.n));
        }
        if self.k == 0 || !self.k.is_multiple_of(8) || self.k > MAX_K {
            return bad(format!("`k` must be a positive multiple of 8 up to {MAX_K}, got {}", self.k));
        }
        if self.m.checked_mul(self.n).is_none() || self.n.checked_mul(self.k).is_none() {
            return bad(format!("{self} overflows an element count"));
        }
        Ok(())
    }

    /// The fewest bytes the GEMM moves: W, x and y once each, bf16.
    pub fn min_bytes(&self) -> usize {
        2 * (self.n * self.k + self.m * self.k + self.m * self.n)
    }
}

impl std::fmt::Display for GemmShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "M {} x N {} x K {}", self.m, self.n, self.k)
    }
}

/// What the skinny kernel does with each finished output (the EPILOGUES of `gemm_skinny.cu`,
/// whose bits equal the GEMM followed by the standalone kernel named).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EpilogueKind {
    /// `y = bf16(x W^T)`: the plain GEMM, and the only epilogue of cuBLASLt.
    Store,
    /// The Peri-LN residual step of [`crate::ops::PeriLn::residual`] on the product (after o_proj
    /// and down_proj): the residual stream and the next sublayer's input, no `y`.
    PeriLn,
    /// [`crate::ops::SiluMul::run`] on the product of the gate/up weight in its interleaved
    /// layout ([`super::layout`]): N = `2 I`, a multiple of 16, and `I` output columns.
    SiluMul,
    /// [`crate::ops::QkNormRopeCache::run`] on the product of the qkv weight in its permuted
    /// layout ([`super::layout`]): q into its buffer, k and v into the paged caches, N =
    /// `(Hq + 2 Hkv) D`.
    QkNormRopeCache,
}

impl EpilogueKind {
    /// Every kind.
    pub const ALL: [EpilogueKind; 4] =
        [EpilogueKind::Store, EpilogueKind::PeriLn, EpilogueKind::SiluMul, EpilogueKind::QkNormRopeCache];

    /// The fewest rows of W per CTA the kind takes: 16 where it pairs rows 8 apart in one
    /// 16-row mma tile.
    pub fn min_rows(self) -> usize {
        match self {
            EpilogueKind::Store | EpilogueKind::PeriLn => SKINNY_ROWS[0],
            EpilogueKind::SiluMul | EpilogueKind::QkNormRopeCache => 16,
        }
    }

    /// The entry point's suffix after `gemm_skinny_m{m_tile}_r{rows}` or `gemm_wgmma`.
    pub fn suffix(self) -> &'static str {
        match self {
            EpilogueKind::Store => "",
            EpilogueKind::PeriLn => "_periln",
            EpilogueKind::SiluMul => "_silu_mul",
            EpilogueKind::QkNormRopeCache => "_qk_norm_rope_cache",
        }
    }

    /// Checks what the kind needs of the GEMM's shape beyond [`GemmShape::validate`] (the
    /// QkNormRopeCache epilogue checks N against its heads at the launch); a refusal names
    /// `entry`, the kernel that was asked.
    pub(super) fn check(self, shape: GemmShape, entry: &str) -> Result<()> {
        let pairs = match self {
            EpilogueKind::SiluMul => "whole groups of 8 gate and 8 up rows",
            EpilogueKind::QkNormRopeCache => "whole 16-row groups of q, k and v heads",
            EpilogueKind::Store | EpilogueKind::PeriLn => return Ok(()),
        };
        if shape.n.is_multiple_of(16) {
            Ok(())
        } else {
            Err(unsupported(
                entry,
                format!("the {self:?} epilogue takes {pairs}: N must be a multiple of 16, got {}", shape.n),
            ))
        }
    }
}

/// Which kernel body computes a skinny plan's sums; every form gives a row the same bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SkinnyForm {
    /// `gemm_skinny.cuh`'s CTA per (W block, slab of x), x read from L2.
    Plain,
    /// `gemm_skinny.cuh`'s SHARED X: one CTA an SM keeps its slab of x in shared memory.
    SharedX,
    /// `gemm_skinny_wg.cu` (sm_90a): the same sums on warpgroup MMAs, x in shared memory.
    Warpgroup,
    /// `gemm_skinny_wide.cu` (sm_90a): the same sums on warpgroup MMAs for slabs of 128 rows, W
    /// fed by the TMA in the class-step layout ([`super::layout::to_class_steps`]).
    Wide,
    /// `gemm_skinny.cuh`'s CTA as in `Plain`, three CTAs an SM ([`SKINNY_THREE_CTAS`]).
    ThreeCtas,
    /// `gemm_skinny_staged.cuh`'s rows form: at most 8 rows of x copied into shared memory by
    /// each CTA ([`super::staged`]).
    Staged,
    /// `gemm_skinny_staged.cuh`'s folded form, x the split-K attention's partials of this
    /// layout, added into shared memory by each CTA ([`super::staged`]).
    Folded(super::staged::FoldLayout),
    /// `gemm_skinny_classes.cu` (sm_90): each class of K steps on its own CTA of a cluster of 8,
    /// added through distributed shared memory ([`GemmPlan::skinny_classes`]).
    Classes,
    /// `gemm_skinny_classes_wg.cu` (sm_90a): the class form on warpgroup MMAs for one slab of
    /// 128 rows, fed by the TMA from the class-step copy ([`GemmPlan::skinny_classes_wg`]).
    ClassesWg,
}

/// The skinny kernel's instantiation and grid.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SkinnyTile {
    /// The kernel body.
    pub form: SkinnyForm,
    /// The entry point, `gemm_skinny_m{m_tile}_r{rows}{suffix}` (the epilogue's
    /// [`EpilogueKind::suffix`]).
    pub entry: String,
    /// Rows of x the instantiation holds (one of [`SKINNY_M_TILES`], at least `M`).
    pub m_tile: usize,
    /// Rows of W per CTA (one of [`SKINNY_ROWS`]).
    pub rows: usize,
    /// Slabs of `m_tile` rows of x: `ceil(M / m_tile)`.
    pub slabs: usize,
    /// CTAs: `ceil(N / rows) * slabs` (the plain and warpgroup forms), or for the shared-x form
    /// `slabs` times the CTAs that share one slab's W blocks.
    pub grid: u32,
    /// The dynamic shared memory of the shared-x, warpgroup and folded forms; 0 for the plain
    /// form, which needs none.
    pub shared_bytes: u32,
}

impl SkinnyForm {
    /// CTAs a thread-block cluster of the form's launch: the class forms' one CTA a class
    /// ([`super::SKINNY_CLASSES_CLUSTER`]), 1 (no clusters) for the others.
    pub fn cluster(self) -> u32 {
        match self {
            SkinnyForm::Classes | SkinnyForm::ClassesWg => super::SKINNY_CLASSES_CLUSTER,
            _ => 1,
        }
    }
}

impl SkinnyTile {
    /// The tile of a form whose CTA takes one block of `rows` rows of W by one slab of `m_tile`
    /// rows of x over all of K (the warpgroup and wide forms): `ceil(N / rows) * slabs` CTAs, CTA
    /// b on slab b % slabs of W block b / slabs.
    pub(super) fn per_block(
        label: &str,
        shape: GemmShape,
        form: SkinnyForm,
        entry: String,
        (m_tile, rows): (usize, usize),
        shared_bytes: usize,
    ) -> Result<Self> {
        let slabs = shape.m.div_ceil(m_tile);
        let grid = grid(label, shape, shape.n.div_ceil(rows).checked_mul(slabs))?;
        Ok(Self { form, entry, m_tile, rows, slabs, grid, shared_bytes: shared_bytes as u32 })
    }
}

/// Checks what a TMA-fed GEMM (the WGMMA kernel, the skinny kernel's wide form) asks of its shape
/// and epilogue: a valid shape, K a multiple of `k_multiple` (its whole boxes or rounds) and N of
/// 16 (the epilogues' wide walk); a refusal names `entry`.
pub(super) fn tma_fits(entry: &str, shape: GemmShape, epilogue: EpilogueKind, k_multiple: usize) -> Result<()> {
    shape.validate()?;
    epilogue.check(shape, entry)?;
    if !shape.k.is_multiple_of(k_multiple) {
        return Err(unsupported(entry, format!("`k` must be a multiple of {k_multiple}, got {}", shape.k)));
    }
    if !shape.n.is_multiple_of(16) {
        return Err(unsupported(entry, format!("`n` must be a multiple of 16, got {}", shape.n)));
    }
    Ok(())
}

/// The dynamic shared memory of the shared-x form for `m_tile` rows of x, `rows` rows of W and
/// K `k`: x's rows padded as the kernel's `shared_x_stride` pads them (64 bytes past a multiple
/// of 128), then the 8 warps' partial sums of `m_tile` x `rows + 4` floats.
pub fn shared_x_bytes(m_tile: usize, rows: usize, k: usize) -> usize {
    let row_bytes = 2 * k + (64 + 128 - (2 * k) % 128) % 128;
    m_tile * row_bytes + 8 * m_tile * (rows + 4) * 4
}

/// The WGMMA kernel's tile: `WGMMA_TILE` rows of x by `WGMMA_TILE` rows of W per CTA
/// (`gemm_wgmma.cu`'s BM and BN).
pub const WGMMA_TILE: usize = 128;
/// The K block of the WGMMA kernel (its TMA box along K): K must be a multiple of it.
pub const WGMMA_BK: usize = 64;

/// Whether a device of compute capability `cc` runs the WGMMA kernel: wgmma is sm_90's alone, as
/// for the WGMMA prefill attention (one rule, [`crate::attention::PrefillKernel::runs_on`]).
pub fn wgmma_runs_on(cc: (i32, i32)) -> bool {
    crate::attention::PrefillKernel::Wgmma.runs_on(cc)
}

/// The WGMMA kernel's entry point and grid.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WgmmaTile {
    /// `gemm_wgmma{suffix}` (the epilogue's [`EpilogueKind::suffix`]).
    pub entry: String,
    /// `(ceil(N / 128), ceil(M / 128))` CTAs.
    pub grid: (u32, u32),
}

/// Which implementation computes the GEMM.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum GemmPath {
    /// `gemm_skinny.cu`.
    Skinny(SkinnyTile),
    /// `gemm_wgmma.cu` (sm_90a only).
    Wgmma(WgmmaTile),
    /// cuBLASLt with the algorithm its heuristic picks for this shape at `heuristic_m` rows,
    /// chosen once; a pinned plan's algorithm is the same whatever its own `M` (even where that
    /// equals `heuristic_m`).
    CublasLt {
        /// The `M` the heuristic is asked about.
        heuristic_m: usize,
        /// Whether and how the algorithm is pinned.
        pin: Pin,
    },
}

/// Which algorithms a cuBLASLt plan may run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pin {
    /// The heuristic's choice for the plan's own shape ([`GemmPlan::cublaslt`]).
    No,
    /// One algorithm for every `M`, not splitting K ([`GemmPlan::cublaslt_pinned`]).
    Whole,
    /// One algorithm for every `M` that may split K, its f32 partial sums reduced by a separate
    /// pass through the workspace (never in place in the output), so the splits and their order
    /// follow from N, K and the reference `M` alone ([`GemmPlan::cublaslt_pinned_split`]).
    SplitK,
}

/// A GEMM's shape and path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GemmPlan {
    /// The shape every launch of the plan has.
    pub shape: GemmShape,
    /// The implementation.
    pub path: GemmPath,
    /// What becomes of each output: [`EpilogueKind::Store`] but for a skinny plan made by
    /// [`GemmPlan::skinny_epilogue`] or [`GemmPlan::skinny_rows_epilogue`].
    pub epilogue: EpilogueKind,
}

impl GemmPlan {
    /// The skinny kernel with the rows per CTA picked for `sms` SMs (module docs).
    pub fn skinny(shape: GemmShape, sms: usize) -> Result<Self> {
        Self::skinny_epilogue(shape, sms, EpilogueKind::Store)
    }

    /// The skinny kernel with `epilogue` and the rows per CTA picked for `sms` SMs (module docs)
    /// among those the epilogue takes; the model's plan for decode rows.
    pub fn skinny_epilogue(shape: GemmShape, sms: usize, epilogue: EpilogueKind) -> Result<Self> {
        let m_tile = m_tile(shape)?;
        let fill = SKINNY_CTAS_PER_SM * sms.max(1);
        let slabs = shape.m.div_ceil(m_tile);
        let takes = |rows: usize| rows_fit(m_tile, rows) && rows >= epilogue.min_rows();
        let ctas = |rows: usize| shape.n.div_ceil(rows) * slabs;
        let one_wave = (m_tile >= ONE_WAVE_MIN_M_TILE)
            .then(|| SKINNY_ROWS.into_iter().find(|&rows| takes(rows) && (sms..=fill).contains(&ctas(rows))))
            .flatten();
        let rows = one_wave
            .or_else(|| SKINNY_ROWS.into_iter().rev().find(|&rows| takes(rows) && ctas(rows) >= fill))
            .or_else(|| SKINNY_ROWS.into_iter().find(|&rows| takes(rows)))
            .expect("every x tile takes 16 rows of W, and every epilogue 16");
        Self::skinny_rows_epilogue(shape, rows, epilogue)
    }

    /// The skinny kernel with `rows` rows of W per CTA (for benchmarks and the bitwise checks
    /// across instantiations).
    pub fn skinny_rows(shape: GemmShape, rows: usize) -> Result<Self> {
        Self::skinny_rows_epilogue(shape, rows, EpilogueKind::Store)
    }

    /// The skinny kernel with `rows` rows of W per CTA and `epilogue`.
    pub fn skinny_rows_epilogue(shape: GemmShape, rows: usize, epilogue: EpilogueKind) -> Result<Self> {
        let m_tile = m_tile(shape)?;
        epilogue.check(shape, "gemm skinny")?;
        let takes = |rows: usize| SKINNY_ROWS.contains(&rows) && rows_fit(m_tile, rows) && rows >= epilogue.min_rows();
        if !takes(rows) {
            let allowed: Vec<usize> = SKINNY_ROWS.into_iter().filter(|&r| takes(r)).collect();
            return Err(unsupported(
                "gemm skinny",
                format!(
                    "`rows` must be one of {allowed:?} for M = {} (x tile {m_tile}) and the {epilogue:?} epilogue, got {rows}",
                    shape.m
                ),
            ));
        }
        let slabs = shape.m.div_ceil(m_tile);
        let grid = grid("gemm skinny", shape, shape.n.div_ceil(rows).checked_mul(slabs))?;
        let entry = format!("gemm_skinny_m{m_tile}_r{rows}{}", epilogue.suffix());
        let tile = SkinnyTile { form: SkinnyForm::Plain, entry, m_tile, rows, slabs, grid, shared_bytes: 0 };
        Ok(Self { shape, path: GemmPath::Skinny(tile), epilogue })
    }

    /// The skinny kernel's three-CTA entry for `rows` rows of W and `epilogue` (listed in
    /// [`SKINNY_THREE_CTAS`] with the shape's x tile): the plain form's CTAs, its bits.
    pub fn skinny_three_ctas(shape: GemmShape, rows: usize, epilogue: EpilogueKind) -> Result<Self> {
        let plain = Self::skinny_rows_epilogue(shape, rows, epilogue)?;
        let GemmPath::Skinny(mut tile) = plain.path else {
            unreachable!("skinny_rows_epilogue plans the skinny kernel")
        };
        if !SKINNY_THREE_CTAS.contains(&(tile.m_tile, rows, epilogue)) {
            return Err(unsupported(
                "gemm skinny",
                format!("no three-CTA entry for x tile {}, {rows} rows and {epilogue:?}", tile.m_tile),
            ));
        }
        tile.form = SkinnyForm::ThreeCtas;
        tile.entry = format!("gemm_skinny_c3_m{}_r{rows}{}", tile.m_tile, epilogue.suffix());
        Ok(Self { shape, path: GemmPath::Skinny(tile), epilogue })
    }

    /// The skinny kernel's shared-x form with `epilogue`, for `sms` SMs: one CTA an SM keeps a
    /// slab of [`SHARED_X_M_TILE`] rows of x in shared memory and takes W blocks of
    /// [`SHARED_X_ROWS`] rows in turn, the CTAs of one slab sharing its W blocks evenly. The same
    /// bits as the plain form (`gemm_skinny.cuh`, SHARED X). It takes `M` past 32 rows (a 64-row
    /// x tile, as the plain form's) and a K whose slab fits [`SHARED_X_MAX_BYTES`].
    pub fn skinny_shared_x(shape: GemmShape, epilogue: EpilogueKind, sms: usize) -> Result<Self> {
        let entry = "gemm skinny shared-x";
        let (m_tile, rows) = (m_tile(shape)?, SHARED_X_ROWS);
        epilogue.check(shape, entry)?;
        if m_tile != SHARED_X_M_TILE {
            let why = format!("an x tile of {SHARED_X_M_TILE} rows only, M = {} has {m_tile}", shape.m);
            return Err(unsupported(entry, why));
        }
        let slabs = shape.m.div_ceil(m_tile);
        let bytes = shared_x_bytes(m_tile, rows, shape.k);
        if bytes > SHARED_X_MAX_BYTES {
            let why = format!("{shape} needs {bytes} bytes of shared memory, past {SHARED_X_MAX_BYTES}");
            return Err(unsupported(entry, why));
        }
        let blocks = shape.n.div_ceil(rows);
        let most = (sms / slabs).max(1);
        let per_slab = blocks.div_ceil(blocks.div_ceil(most));
        let grid = grid(entry, shape, per_slab.checked_mul(slabs))?;
        let tile = SkinnyTile {
            form: SkinnyForm::SharedX,
            entry: format!("gemm_skinny_sx_m{m_tile}_r{rows}{}", epilogue.suffix()),
            m_tile,
            rows,
            slabs,
            grid,
            shared_bytes: bytes as u32,
        };
        Ok(Self { shape, path: GemmPath::Skinny(tile), epilogue })
    }

    /// The skinny kernel's warpgroup form with `epilogue` (sm_90a; the caller knows the device
    /// runs wgmma): a CTA a tile of [`SKINNY_WG_ROWS`] rows of W by a slab of
    /// [`SKINNY_WG_M_TILE`] rows of x, over all of K. The same bits as the plain form
    /// (`gemm_skinny_wg.cu`'s header).
    pub fn skinny_wgmma(shape: GemmShape, epilogue: EpilogueKind) -> Result<Self> {
        let entry = "gemm skinny warpgroup";
        shape.validate()?;
        epilogue.check(shape, entry)?;
        let tile = SkinnyTile::per_block(
            entry,
            shape,
            SkinnyForm::Warpgroup,
            format!("gemm_skinny_wg_m{SKINNY_WG_M_TILE}{}", epilogue.suffix()),
            (SKINNY_WG_M_TILE, SKINNY_WG_ROWS),
            SKINNY_WG_BYTES,
        )?;
        Ok(Self { shape, path: GemmPath::Skinny(tile), epilogue })
    }

    /// The WGMMA kernel with `epilogue` (sm_90a; prefill rows). Its bits for a row of x depend on
    /// neither `M` nor the row's place (`gemm_wgmma.cu`'s header), so no reference `M` is needed.
    pub fn wgmma_epilogue(shape: GemmShape, epilogue: EpilogueKind) -> Result<Self> {
        let entry = "gemm wgmma";
        tma_fits(entry, shape, epilogue, WGMMA_BK)?;
        let rows = shape.m.div_ceil(WGMMA_TILE);
        if rows > u16::MAX as usize {
            return Err(unsupported(entry, format!("{shape} needs more than 65535 tiles of x rows")));
        }
        // N < 2^31 (validated), so its tiles fit a u32.
        let grid = (shape.n.div_ceil(WGMMA_TILE) as u32, rows as u32);
        Ok(Self {
            shape,
            path: GemmPath::Wgmma(WgmmaTile { entry: format!("gemm_wgmma{}", epilogue.suffix()), grid }),
            epilogue,
        })
    }

    /// cuBLASLt with the heuristic's algorithm for this very shape.
    pub fn cublaslt(shape: GemmShape) -> Result<Self> {
        shape.validate()?;
        Ok(Self {
            shape,
            path: GemmPath::CublasLt { heuristic_m: shape.m, pin: Pin::No },
            epilogue: EpilogueKind::Store,
        })
    }

    /// cuBLASLt with the algorithm, not splitting K, that the heuristic picks for this N and K at
    /// `heuristic_m` rows: every plan of one (N, K, `heuristic_m`) runs the same algorithm,
    /// whatever its own `M`.
    pub fn cublaslt_pinned(shape: GemmShape, heuristic_m: usize) -> Result<Self> {
        Self::pinned_as(shape, heuristic_m, Pin::Whole)
    }

    /// cuBLASLt with the algorithm the heuristic picks for this N and K at `heuristic_m` rows
    /// among those that split K with a separate reduction pass (or do not split it): for a
    /// weight whose K is long beside its N (down_proj), where an unsplit algorithm leaves most
    /// SMs idle. Every plan of one (N, K, `heuristic_m`) runs the same algorithm and splits.
    pub fn cublaslt_pinned_split(shape: GemmShape, heuristic_m: usize) -> Result<Self> {
        Self::pinned_as(shape, heuristic_m, Pin::SplitK)
    }

    fn pinned_as(shape: GemmShape, heuristic_m: usize, pin: Pin) -> Result<Self> {
        GemmShape { m: heuristic_m, ..shape }.validate()?;
        shape.validate()?;
        Ok(Self { shape, path: GemmPath::CublasLt { heuristic_m, pin }, epilogue: EpilogueKind::Store })
    }

    /// A short stable name: `skinny-m8-r64`, `skinny-m8-r16-periln` with an epilogue,
    /// `skinny-sx-m64-r16` and `skinny-wg-m64-r64` for the shared-x and warpgroup forms,
    /// `wgmma` (`wgmma-silu-mul`), `cublaslt`, or `cublaslt-at-m512` when pinned
    /// (`cublaslt-split-at-m512` when it may split K).
    pub fn name(&self) -> String {
        match &self.path {
            GemmPath::Skinny(t) => {
                let form = match t.form {
                    SkinnyForm::Plain => "",
                    SkinnyForm::ThreeCtas => "c3-",
                    SkinnyForm::SharedX => "sx-",
                    SkinnyForm::Warpgroup => "wg-",
                    SkinnyForm::Wide => "wide-",
                    SkinnyForm::Staged => "staged-",
                    SkinnyForm::Folded(_) => "fold-",
                    SkinnyForm::Classes => "classes-",
                    SkinnyForm::ClassesWg => "classes-wg-",
                };
                format!("skinny-{form}m{}-r{}{}", t.m_tile, t.rows, self.epilogue.suffix().replace('_', "-"))
            }
            GemmPath::Wgmma(_) => format!("wgmma{}", self.epilogue.suffix().replace('_', "-")),
            GemmPath::CublasLt { pin: Pin::No, .. } => "cublaslt".to_string(),
            GemmPath::CublasLt { heuristic_m, pin: Pin::Whole } => format!("cublaslt-at-m{heuristic_m}"),
            GemmPath::CublasLt { heuristic_m, pin: Pin::SplitK } => format!("cublaslt-split-at-m{heuristic_m}"),
        }
    }
}

/// `ctas` (None where counting them overflowed) as a grid, refused past 2^31 CTAs.
pub(super) fn grid(entry: &str, shape: GemmShape, ctas: Option<usize>) -> Result<u32> {
    ctas.and_then(|g| u32::try_from(g).ok())
        .filter(|&g| g <= i32::MAX as u32)
        .ok_or_else(|| unsupported(entry, format!("{shape} needs more than 2^31 CTAs")))
}

/// The smallest x tile holding `shape.m` (the widest past it), after checking the shape.
pub(super) fn m_tile(shape: GemmShape) -> Result<usize> {
    shape.validate()?;
    Ok(SKINNY_M_TILES.into_iter().find(|&t| t >= shape.m).unwrap_or(SKINNY_MAX_M))
}

/// Whether the kernel is instantiated for (`m_tile`, `rows`): its accumulators,
/// `max(1, rows / 16) * m_tile / 8` tiles of 4 registers, stay within 8 tiles.
pub fn rows_fit(m_tile: usize, rows: usize) -> bool {
    (rows / 16).max(1) * (m_tile / 8) <= 8
}

#[cfg(test)]
#[path = "plan_tests.rs"]
pub(super) mod tests;
