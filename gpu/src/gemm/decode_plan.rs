//! The model's plan for decode rows: which form of the skinny kernel serves a batch of a weight,
//! from static facts (the rows, N, K, the epilogue, the SM count, whether the device runs wgmma
//! and clusters). Every form gives a row the same bits, so the choice is free to change with `M`.
//! Pure host code, tested on the CPU with the rest of the plan.

use super::classes_plan::classes_serve;
use super::plan::{
    EpilogueKind, GemmPath, GemmPlan, GemmShape, SHARED_X_MIN_BLOCKS, SKINNY_CTAS_PER_SM, SKINNY_M_TILES,
    SKINNY_THREE_CTAS, SKINNY_WG_MIN_FILL, SKINNY_WG_M_TILE, SKINNY_WG_ROWS,
};
use super::staged::load_batches;
use super::wide_plan::wide_serves;
use crate::error::Result;

impl GemmPlan {
    /// The model's plan for decode rows: on a device that runs wgmma (`wgmma`, sm_90, which also
    /// launches clusters) the class form ([`GemmPlan::skinny_classes`]) where
    /// [`classes_serve`] says so and the form takes the shape, else
    /// [`GemmPlan::decode_rows_per_cta`]. Every form gives a row the same bits.
    pub fn decode_rows(shape: GemmShape, sms: usize, epilogue: EpilogueKind, wgmma: bool) -> Result<Self> {
        if wgmma && classes_serve(shape, sms) {
            if let Ok(plan) = Self::skinny_classes(shape, epilogue) {
                return Ok(plan);
            }
        }
        Self::decode_rows_per_cta(shape, sms, epilogue, wgmma)
    }

    /// The plan for decode rows among the forms whose CTA adds every class of a W row itself. On
    /// a device that runs wgmma (`wgmma`), the warpgroup
    /// form ([`GemmPlan::skinny_wgmma`]) at 33 to 64 rows where its 64-row W blocks number at
    /// least half the SMs ([`SKINNY_WG_MIN_FILL`]): measured faster there only (gate/up of
    /// asynct-0.5b; RESULTS run 153), its one CTA a tile leaving SMs idle on small N and its
    /// second slab re-reading W at 65 rows and more. Elsewhere the shared-x form where each of its
    /// CTAs (one an SM) takes at least [`SHARED_X_MIN_BLOCKS`] W blocks, since there one slab of x
    /// in shared memory serves several W blocks where the plain form reads it again from L2 for
    /// each (measured faster only there: RESULTS runs 133-136); else
    /// [`GemmPlan::skinny_epilogue`], or at one slab of 8 rows its staged form
    /// ([`GemmPlan::skinny_staged`]) where that takes a warp's steps in fewer batches of loads
    /// ([`load_batches`]), or its three-CTA entry ([`GemmPlan::skinny_three_ctas`]) where
    /// the grid would take a second wave at two CTAs an SM and one at three. Every form gives a
    /// row the same bits, so the choice is free to change with `M`.
    pub fn decode_rows_per_cta(shape: GemmShape, sms: usize, epilogue: EpilogueKind, wgmma: bool) -> Result<Self> {
        let plain = Self::skinny_epilogue(shape, sms, epilogue)?;
        if let GemmPath::Skinny(t) = &plain.path {
            let fewer = load_batches(shape.k, t.rows, true) < load_batches(shape.k, t.rows, false);
            if let Some(staged) = (t.m_tile == SKINNY_M_TILES[0] && fewer)
                .then(|| Self::skinny_staged(shape, t.rows, epilogue).ok())
                .flatten()
            {
                return Ok(staged);
            }
        }
        if let GemmPath::Skinny(t) = &plain.path {
            let waves = (SKINNY_CTAS_PER_SM * sms + 1..=3 * sms).contains(&(t.grid as usize));
            if waves && SKINNY_THREE_CTAS.contains(&(t.m_tile, t.rows, epilogue)) {
                return Self::skinny_three_ctas(shape, t.rows, epilogue);
            }
        }
        let fills = shape.n.div_ceil(SKINNY_WG_ROWS) * SKINNY_WG_MIN_FILL >= sms;
        if wgmma && (33..=SKINNY_WG_M_TILE).contains(&shape.m) && fills {
            return Self::skinny_wgmma(shape, epilogue);
        }
        if wgmma && shape.m > SKINNY_WG_M_TILE && wide_serves(shape.n, shape.k, sms) {
            return Self::skinny_wide(shape, epilogue);
        }
        let shared = Self::skinny_shared_x(shape, epilogue, sms).ok().filter(|plan| match &plan.path {
            GemmPath::Skinny(t) => shape.n.div_ceil(t.rows) * t.slabs >= SHARED_X_MIN_BLOCKS * t.grid as usize,
            _ => false,
        });
        Ok(shared.unwrap_or(plain))
    }
}
