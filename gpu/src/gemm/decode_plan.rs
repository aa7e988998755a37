//! The model's plan for decode rows: which form of the skinny kernel serves a batch of a weight,
//! from static facts (the rows, N, K, the epilogue, the SM count, whether the device runs wgmma
//! and clusters). Every form gives a row the same bits, so the choice is free to change with `M`.
//! Pure host code, tested on the CPU with the rest of the plan.

use super::classes_plan::classes_serve;
use super::classes_wg_plan::classes_wg_serve;
use super::plan::{
    EpilogueKind, GemmPath, GemmPlan, GemmShape, SHARED_X_MIN_BLOCKS, SKINNY_CTAS_PER_SM, SKINNY_M_TILES,
    SKINNY_THREE_CTAS, SKINNY_WG_MIN_FILL, SKINNY_WG_M_TILE, SKINNY_WG_ROWS,
};
use super::staged::load_batches;
use super::wide_plan::wide_serves;
use crate::error::Result;

/// Which of the skinny kernel's forms [`GemmPlan::decode_rows_with`] may take beside the plain
/// one: the device's (`wgmma`: sm_90, whose warpgroup, wide and class forms need wgmma, the TMA
/// or clusters) and, for measuring, each optional form on or off (the model reads them from
/// `ASYNCT_STAGED_X`, `ASYNCT_SKINNY_WIDE`, `ASYNCT_SKINNY_CLASSES` and
/// `ASYNCT_SKINNY_CLASSES_WG`). Every form gives a row the same bits, so these change speed only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeForms {
    /// The device runs wgmma, the TMA and clusters (sm_90).
    pub wgmma: bool,
    /// The staged form at one slab of 8 rows ([`GemmPlan::skinny_staged`]).
    pub staged: bool,
    /// The wide form past 64 rows ([`GemmPlan::skinny_wide`]; the model keeps its class-step
    /// copies only where it may be taken).
    pub wide: bool,
    /// The class form at 9 to 64 rows ([`GemmPlan::skinny_classes`]).
    pub classes: bool,
    /// The class form on warpgroups at 65 to 128 rows ([`GemmPlan::skinny_classes_wg`]; the
    /// model keeps its class-step copies only where it may be taken).
    pub classes_wg: bool,
}

impl DecodeForms {
    /// Every form the device runs.
    pub fn all(wgmma: bool) -> Self {
        Self { wgmma, staged: true, wide: true, classes: true, classes_wg: true }
    }
}

impl GemmPlan {
    /// The model's plan for decode rows with every form the device runs
    /// ([`GemmPlan::decode_rows_with`] of [`DecodeForms::all`]).
    pub fn decode_rows(shape: GemmShape, sms: usize, epilogue: EpilogueKind, wgmma: bool) -> Result<Self> {
        Self::decode_rows_with(shape, sms, epilogue, DecodeForms::all(wgmma))
    }

    /// The plan for decode rows among `forms`. The class form ([`GemmPlan::skinny_classes`])
    /// where [`classes_serve`] says so and the form takes the shape, and past 64 rows its
    /// warpgroup form ([`GemmPlan::skinny_classes_wg`]) where [`classes_wg_serve`] does. Else,
    /// among the forms whose CTA adds every class of a W row itself, the warpgroup form
    /// ([`GemmPlan::skinny_wgmma`]) at 33 to 64 rows where its 64-row W blocks number at least
    /// half the SMs
    /// ([`SKINNY_WG_MIN_FILL`]): measured faster there only (gate/up of asynct-0.5b; RESULTS run
    /// 153), its one CTA a tile leaving SMs idle on small N and its second slab re-reading W at
    /// 65 rows and more. Elsewhere the shared-x form where each of its CTAs (one an SM) takes at
    /// least [`SHARED_X_MIN_BLOCKS`] W blocks, since there one slab of x in shared memory serves
    /// several W blocks where the plain form reads it again from L2 for each (measured faster
    /// only there: RESULTS runs 133-136); else
    /// [`GemmPlan::skinny_epilogue`], or at one slab of 8 rows its staged form
    /// ([`GemmPlan::skinny_staged`]) where that takes a warp's steps in fewer batches of loads
    /// ([`load_batches`]), or its three-CTA entry ([`GemmPlan::skinny_three_ctas`]) where
    /// the grid would take a second wave at two CTAs an SM and one at three. Every form gives a
    /// row the same bits, so the choice is free to change with `M`.
    pub fn decode_rows_with(shape: GemmShape, sms: usize, epilogue: EpilogueKind, forms: DecodeForms) -> Result<Self> {
        if forms.wgmma && forms.classes && classes_serve(shape, sms) {
            if let Ok(plan) = Self::skinny_classes(shape, epilogue) {
                return Ok(plan);
            }
        }
        if forms.wgmma && forms.classes_wg && classes_wg_serve(shape, sms) {
            if let Ok(plan) = Self::skinny_classes_wg(shape, epilogue) {
                return Ok(plan);
            }
        }
        let plain = Self::skinny_epilogue(shape, sms, epilogue)?;
        if let GemmPath::Skinny(t) = &plain.path {
            let fewer = load_batches(shape.k, t.rows, true) < load_batches(shape.k, t.rows, false);
            if let Some(staged) = (forms.staged && t.m_tile == SKINNY_M_TILES[0] && fewer)
                .then(|| Self::skinny_staged(shape, t.rows, epilogue).ok())
                .flatten()
            {
                return Ok(staged);
            }
            let waves = (SKINNY_CTAS_PER_SM * sms + 1..=3 * sms).contains(&(t.grid as usize));
            if waves && SKINNY_THREE_CTAS.contains(&(t.m_tile, t.rows, epilogue)) {
                return Self::skinny_three_ctas(shape, t.rows, epilogue);
            }
        }
        let fills = shape.n.div_ceil(SKINNY_WG_ROWS) * SKINNY_WG_MIN_FILL >= sms;
        if forms.wgmma && (33..=SKINNY_WG_M_TILE).contains(&shape.m) && fills {
            return Self::skinny_wgmma(shape, epilogue);
        }
        if forms.wgmma && forms.wide && shape.m > SKINNY_WG_M_TILE && wide_serves(shape.n, shape.k, sms) {
            return Self::skinny_wide(shape, epilogue);
        }
        let shared = Self::skinny_shared_x(shape, epilogue, sms).ok().filter(|plan| match &plan.path {
            GemmPath::Skinny(t) => shape.n.div_ceil(t.rows) * t.slabs >= SHARED_X_MIN_BLOCKS * t.grid as usize,
            _ => false,
        });
        Ok(shared.unwrap_or(plain))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::{SkinnyForm, SKINNY_CLASSES_DECODE_M};

    fn form(m: usize, n: usize, k: usize, kind: EpilogueKind, forms: DecodeForms) -> SkinnyForm {
        match GemmPlan::decode_rows_with(GemmShape { m, n, k }, 132, kind, forms).unwrap().path {
            GemmPath::Skinny(t) => t.form,
            other => panic!("not a skinny plan: {other:?}"),
        }
    }

    #[test]
    fn each_form_turned_off_leaves_its_shapes_to_the_others() {
        let all = DecodeForms::all(true);
        // asynct-0.5b: down_proj at 4 and 32 rows, gate/up at 128.
        let down = |m, forms| form(m, 1024, 3072, EpilogueKind::PeriLn, forms);
        let gate_up = |m, forms| form(m, 6144, 1024, EpilogueKind::SiluMul, forms);
        assert_eq!(
            (down(4, all), down(32, all), gate_up(128, all)),
            (SkinnyForm::Staged, SkinnyForm::Classes, SkinnyForm::Wide)
        );
        assert_eq!(down(4, DecodeForms { staged: false, ..all }), SkinnyForm::Plain);
        assert_eq!(down(32, DecodeForms { classes: false, ..all }), SkinnyForm::Plain);
        assert_ne!(gate_up(128, DecodeForms { wide: false, ..all }), SkinnyForm::Wide);
        // Without sm_90 none of the forms that need it, whatever the switches say.
        let ampere = DecodeForms::all(false);
        assert_eq!(down(32, ampere), SkinnyForm::Plain);
        assert_ne!(gate_up(128, ampere), SkinnyForm::Wide);
        assert_eq!(
            gate_up(64, ampere),
            form(64, 6144, 1024, EpilogueKind::SiluMul, DecodeForms { wgmma: false, ..all })
        );
        // Each switch changes only its own form's shapes.
        for m in [1, 8, 9, 32, 33, 64, 65, 128] {
            if !SKINNY_CLASSES_DECODE_M.contains(&m) {
                assert_eq!(down(m, DecodeForms { classes: false, ..all }), down(m, all), "M {m}");
            }
            if m > 8 {
                assert_eq!(down(m, DecodeForms { staged: false, ..all }), down(m, all), "M {m}");
            }
            if m <= 64 {
                assert_eq!(gate_up(m, DecodeForms { wide: false, ..all }), gate_up(m, all), "M {m}");
            }
        }
    }
}
