//! The plan of the skinny kernel's class form (`gemm_skinny_classes.cu`, sm_90): the skinny
//! order's eight classes of K steps on the eight CTAs of a cluster, each reading an eighth of x,
//! their partials added in class order through distributed shared memory. Pure host code, tested
//! on the CPU with the rest of the plan ([`GemmPlan::decode_rows`] picks it).

use super::plan::{
    grid, m_tile, EpilogueKind, GemmPath, GemmPlan, GemmShape, SkinnyForm, SkinnyTile, SHARED_X_MAX_BYTES,
};
use crate::error::{unsupported, Result};

/// Rows of W a cluster of the class form owns (8 a warp; its `ROWS`).
pub const SKINNY_CLASSES_ROWS: usize = 64;
/// CTAs a cluster: one per class of the skinny order (its `CLASSES`).
pub const SKINNY_CLASSES_CLUSTER: u32 = 8;
/// The form takes a K that is a multiple of this: every class has K / 256 whole steps of 32.
pub const SKINNY_CLASSES_K: usize = 256;
/// The decode rows [`GemmPlan::decode_rows`] takes the form for: past one slab of 8 rows, where
/// the plain form's CTAs read 16 to 64 rows of x each from L2 for every block of W.
pub const SKINNY_CLASSES_DECODE_M: std::ops::RangeInclusive<usize> = 9..=64;
/// Whether [`GemmPlan::decode_rows`] takes the class form for `shape` on a device of `sms` SMs
/// that launches clusters (it still needs the form to take the shape and epilogue): at
/// [`SKINNY_CLASSES_DECODE_M`] rows where the grid fits one CTA an SM (o_proj and down_proj of
/// asynct-0.5b; more clusters than one wave holds wait for a second). Measured (RESULTS runs
/// 243-244, H100): at 32 rows down_proj 4.8 us against the per-CTA forms' best 7.8, o_proj 3.2
/// against 3.1 to 3.3, but qkv's 32 clusters 5.7 against 3.9 and gate/up's 96 13.2 against 8.1;
/// in the decode step o_proj with down_proj 2% faster at B16 to B64 than down_proj alone.
pub fn classes_serve(shape: GemmShape, sms: usize) -> bool {
    SKINNY_CLASSES_DECODE_M.contains(&shape.m) && class_form_ctas(shape.n).is_some_and(|ctas| ctas <= sms)
}

/// CTAs of a class form's grid for `n` rows of W: a cluster of [`SKINNY_CLASSES_CLUSTER`] for
/// each block of [`SKINNY_CLASSES_ROWS`] (both class forms); `None` past `usize`.
pub(super) fn class_form_ctas(n: usize) -> Option<usize> {
    n.div_ceil(SKINNY_CLASSES_ROWS).checked_mul(SKINNY_CLASSES_CLUSTER as usize)
}

/// The class form's dynamic shared memory for an x tile of `m_tile` rows and K `k`: each class's
/// x (K / 8 columns of every row), the mbarrier (16 bytes with its padding), the partials twice
/// (those this CTA receives and those it sends: `m_tile` rows of 68 floats each) and a word a
/// thread for the store that keeps W's loads ahead of the wait (the kernel's LAUNCH).
pub fn classes_bytes(m_tile: usize, k: usize) -> usize {
    m_tile * (k / 8) * 2 + 16 + 2 * m_tile * (SKINNY_CLASSES_ROWS + 4) * 4 + 256 * 4
}

impl GemmPlan {
    /// The skinny kernel's class form with `epilogue` (sm_90; the caller knows the device runs
    /// clusters): one slab of at most 64 rows of x, a cluster of 8 CTAs a block of
    /// [`SKINNY_CLASSES_ROWS`] rows of W. The same bits as the plain form
    /// (`gemm_skinny_classes.cu`'s header). K must be a multiple of [`SKINNY_CLASSES_K`].
    pub fn skinny_classes(shape: GemmShape, epilogue: EpilogueKind) -> Result<Self> {
        let entry = "gemm skinny classes";
        let m_tile = m_tile(shape)?;
        epilogue.check(shape, entry)?;
        if shape.m > m_tile {
            return Err(unsupported(entry, format!("one slab of at most {m_tile} rows of x, got M = {}", shape.m)));
        }
        if !shape.k.is_multiple_of(SKINNY_CLASSES_K) {
            return Err(unsupported(entry, format!("`k` must be a multiple of {SKINNY_CLASSES_K}, got {}", shape.k)));
        }
        let bytes = classes_bytes(m_tile, shape.k);
        if bytes > SHARED_X_MAX_BYTES {
            return Err(unsupported(
                entry,
                format!("{bytes} bytes of shared memory at K = {} past the {SHARED_X_MAX_BYTES} a CTA takes", shape.k),
            ));
        }
        let entry_name = format!("gemm_skinny_classes_m{m_tile}{}", epilogue.suffix());
        let tile = SkinnyTile::per_cluster(entry, shape, SkinnyForm::Classes, entry_name, m_tile, bytes)?;
        Ok(Self { shape, path: GemmPath::Skinny(tile), epilogue })
    }
}

impl SkinnyTile {
    /// The tile of a class form (`form`, its entry point `entry`): a cluster of
    /// [`SKINNY_CLASSES_CLUSTER`] CTAs for each block of [`SKINNY_CLASSES_ROWS`] rows of W, one
    /// slab of `m_tile` rows of x, `shared_bytes` of dynamic shared memory a CTA; a refusal names
    /// `label`.
    pub(super) fn per_cluster(
        label: &str,
        shape: GemmShape,
        form: SkinnyForm,
        entry: String,
        m_tile: usize,
        shared_bytes: usize,
    ) -> Result<Self> {
        let grid = grid(label, shape, class_form_ctas(shape.n))?;
        let shared_bytes = shared_bytes as u32;
        Ok(Self { form, entry, m_tile, rows: SKINNY_CLASSES_ROWS, slabs: 1, grid, shared_bytes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::plan::tests::{skinny as tile, MODEL_WEIGHTS};
    use crate::gemm::DecodeForms;

    #[test]
    fn the_class_form_has_a_cluster_of_8_ctas_a_64_row_block_and_its_shared_memory() {
        let down = GemmPlan::skinny_classes(GemmShape { m: 32, n: 1024, k: 3072 }, EpilogueKind::PeriLn).unwrap();
        let t = tile(&down);
        assert_eq!(
            (t.form, t.entry.as_str(), t.m_tile, t.rows),
            (SkinnyForm::Classes, "gemm_skinny_classes_m32_periln", 32, 64)
        );
        assert_eq!((t.grid, t.slabs, t.form.cluster()), (16 * 8, 1, 8));
        // Each class's 384 columns of 32 rows, the mbarrier, twice 32 partial rows of 68 floats,
        // a word a thread.
        assert_eq!(t.shared_bytes as usize, 32 * 384 * 2 + 16 + 2 * 32 * 68 * 4 + 1024);
        let ragged = GemmPlan::skinny_classes(GemmShape { m: 9, n: 100, k: 512 }, EpilogueKind::Store).unwrap();
        assert_eq!((tile(&ragged).m_tile, tile(&ragged).grid), (16, 16));
        assert_eq!(down.name(), "skinny-classes-m32-r64-periln");
    }

    #[test]
    fn the_class_form_refuses_what_its_kernel_does_not_take_by_name() {
        let refused = |m, n, k, kind| GemmPlan::skinny_classes(GemmShape { m, n, k }, kind).unwrap_err().to_string();
        assert!(refused(65, 1024, 1024, EpilogueKind::Store).contains("one slab"), "past 64 rows");
        assert!(refused(8, 1024, 1000, EpilogueKind::Store).contains("multiple of 256"));
        assert!(refused(64, 1024, 16384, EpilogueKind::Store).contains("shared memory"));
        assert!(refused(8, 1000, 1024, EpilogueKind::SiluMul).contains("16"), "pairs of 8 rows");
        assert!(refused(0, 1024, 1024, EpilogueKind::Store).contains("gemm"));
    }

    #[test]
    fn decode_rows_take_the_class_form_at_9_to_64_rows_where_its_grid_fits_one_cta_an_sm() {
        for (n, k, kind) in MODEL_WEIGHTS {
            for m in [1, 8, 9, 16, 32, 33, 64, 65, 128] {
                let shape = GemmShape { m, n, k };
                let with = GemmPlan::decode_rows(shape, 132, kind, true).unwrap();
                let classes = tile(&with).form == SkinnyForm::Classes;
                let takes = SKINNY_CLASSES_DECODE_M.contains(&m) && n == 1024;
                assert_eq!(classes, takes, "M {m} N {n} K {k} {kind:?}: {}", with.name());
                if !classes {
                    let per_cta = DecodeForms { classes: false, ..DecodeForms::all(true) };
                    assert_eq!(with, GemmPlan::decode_rows_with(shape, 132, kind, per_cta).unwrap());
                }
                let without = GemmPlan::decode_rows(shape, 132, kind, false).unwrap();
                assert_ne!(tile(&without).form, SkinnyForm::Classes, "no clusters without sm_90");
            }
        }
        // A K the form does not take keeps the per-CTA forms.
        let odd = GemmPlan::decode_rows(GemmShape { m: 16, n: 1024, k: 1000 }, 132, EpilogueKind::Store, true).unwrap();
        assert_ne!(tile(&odd).form, SkinnyForm::Classes);
    }
}
