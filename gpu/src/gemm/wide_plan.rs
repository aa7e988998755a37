//! The plan of the skinny kernel's wide form (`gemm_skinny_wide.cu`, launched as a TMA-fed GEMM
//! beside the WGMMA kernel): past 64 decode rows, a CTA a 64-row block of W by a 128-row slab of x over
//! all of K, W read once for the slab through the TMA from its class-step copy
//! ([`super::layout::to_class_steps`]), the skinny kernel's sums on wgmma. Pure host code, tested
//! on the CPU with the rest of the plan ([`GemmPlan::decode_rows`] picks it).

use super::plan::{
    tma_fits, EpilogueKind, GemmPath, GemmPlan, GemmShape, SkinnyForm, SkinnyTile, SHARED_X_MAX_BYTES,
    SKINNY_WG_MIN_FILL,
};
use crate::error::Result;

/// The x slab of the skinny kernel's wide form (`gemm_skinny_wide.cu`'s XN): two warpgroups'
/// wgmma M.
pub const SKINNY_WIDE_M_TILE: usize = 128;
/// Rows of W a CTA of the wide form: the wgmma's N.
pub const SKINNY_WIDE_ROWS: usize = 64;
/// The wide form takes a K that is a multiple of this: every class of the skinny order has K /
/// 256 steps, each ring tile is two steps of one class pair, and a consumer takes two tiles a
/// round.
pub const SKINNY_WIDE_K: usize = 512;
/// Threads of a wide-form CTA: two consumer warpgroups and the producer warp.
pub const SKINNY_WIDE_THREADS: u32 = 288;
/// Ring stages of the wide form (its STAGES), each 64 k of W (64 rows) and of x (128 rows).
const SKINNY_WIDE_STAGES: usize = 6;
/// The wide form's dynamic shared memory (its SMEM_BYTES): alignment slack, the ring, the
/// mbarriers.
pub const SKINNY_WIDE_BYTES: usize =
    1024 + SKINNY_WIDE_STAGES * (SKINNY_WIDE_ROWS + SKINNY_WIDE_M_TILE) * 128 + 2 * SKINNY_WIDE_STAGES * 8;
const _: () = assert!(SKINNY_WIDE_BYTES + 1024 <= SHARED_X_MAX_BYTES);

/// Whether [`GemmPlan::decode_rows`] takes the wide form for a weight of `n` rows and `k` columns
/// past 64 rows of x on `sms` SMs: where the form takes its K and N and its 64-row W blocks
/// number at least the SMs over [`SKINNY_WG_MIN_FILL`] (gate/up of asynct-0.5b; a W of 16 or 32
/// blocks would leave most SMs idle). A model keeps the class-step copy of exactly these weights.
pub fn wide_serves(n: usize, k: usize, sms: usize) -> bool {
    k.is_multiple_of(SKINNY_WIDE_K) && n.is_multiple_of(16) && n.div_ceil(SKINNY_WIDE_ROWS) * SKINNY_WG_MIN_FILL >= sms
}

impl GemmPlan {
    /// The skinny kernel's wide form with `epilogue` (sm_90a; the caller knows the device runs
    /// wgmma): a CTA a tile of [`SKINNY_WIDE_ROWS`] rows of W by a slab of
    /// [`SKINNY_WIDE_M_TILE`] rows of x, over all of K, its W in the class-step layout
    /// ([`GemmPlan::reads_class_steps`]). The same bits as the plain form
    /// (`gemm_skinny_wide.cu`'s header). K must be a multiple of [`SKINNY_WIDE_K`] and N of 16.
    pub fn skinny_wide(shape: GemmShape, epilogue: EpilogueKind) -> Result<Self> {
        let entry = "gemm skinny wide";
        tma_fits(entry, shape, epilogue, SKINNY_WIDE_K)?;
        let tile = SkinnyTile::per_block(
            entry,
            shape,
            SkinnyForm::Wide,
            format!("gemm_skinny_wide{}", epilogue.suffix()),
            (SKINNY_WIDE_M_TILE, SKINNY_WIDE_ROWS),
            SKINNY_WIDE_BYTES,
        )?;
        Ok(Self { shape, path: GemmPath::Skinny(tile), epilogue })
    }

    /// Whether the plan reads W in the class-step layout ([`super::layout::to_class_steps`])
    /// rather than as stored: the wide form's and the class form's on warpgroups.
    pub fn reads_class_steps(&self) -> bool {
        matches!(&self.path, GemmPath::Skinny(t) if matches!(t.form, SkinnyForm::Wide | SkinnyForm::ClassesWg))
    }
}
