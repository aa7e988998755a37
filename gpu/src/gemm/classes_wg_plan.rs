//! The plan of the skinny kernel's class form on warpgroups (`gemm_skinny_classes_wg.cu`, sm_90a,
//! launched as a TMA-fed GEMM): past 64 decode rows, each class of the skinny order's K steps on
//! its own CTA of a cluster of 8, all of x's rows (at most 128) at once, W read from its class-step
//! copy ([`super::layout::to_class_steps`]), the classes' partials added in class order through
//! distributed shared memory. Pure host code, tested on the CPU with the rest of the plan
//! ([`GemmPlan::decode_rows`] picks it).

use super::classes_plan::{class_form_ctas, SKINNY_CLASSES_ROWS};
use super::plan::{tma_fits, EpilogueKind, GemmPath, GemmPlan, GemmShape, SkinnyForm, SkinnyTile};
use crate::error::{unsupported, Result};

/// Rows of x the form takes: one slab, the two warpgroups' wgmma M (the kernel's XN).
pub const SKINNY_CLASSES_WG_M_TILE: usize = 128;
/// The form takes a K that is a multiple of this: every class has K / 256 steps of 32, a whole
/// number of its consumers' rounds of steps.
pub const SKINNY_CLASSES_WG_K: usize = 1024;
/// Threads of a CTA: two consumer warpgroups and the producer warp.
pub const SKINNY_CLASSES_WG_THREADS: u32 = 288;
/// Columns of a box of its tensor maps: one step of 32 k, a 64-byte row.
pub const SKINNY_CLASSES_WG_BOX_K: usize = 32;
/// Ring stages (the kernel's STAGES), each a step of W (64 rows) and of x (128 rows).
const STAGES: usize = 6;
/// Partials a CTA receives: 8 classes of its 16 rows of x, 68 floats a row (the kernel's PAD).
const RECV_BYTES: usize = 8 * 16 * (SKINNY_CLASSES_ROWS + 4) * 4;
/// The form's dynamic shared memory (the kernel's SMEM_BYTES): alignment slack, the ring, its
/// mbarriers and the share's, the partials received. Two CTAs fit an SM.
pub const SKINNY_CLASSES_WG_BYTES: usize = 1024
    + STAGES * (SKINNY_CLASSES_ROWS + SKINNY_CLASSES_WG_M_TILE) * SKINNY_CLASSES_WG_BOX_K * 2
    + 2 * STAGES * 8
    + 16
    + RECV_BYTES;
const _: () = assert!(2 * (SKINNY_CLASSES_WG_BYTES + 1024) <= 228 * 1024);
/// The decode rows [`GemmPlan::decode_rows`] takes the form for: past the other class form's 64,
/// within its one slab.
pub const SKINNY_CLASSES_WG_DECODE_M: std::ops::RangeInclusive<usize> = 65..=SKINNY_CLASSES_WG_M_TILE;

/// Whether [`GemmPlan::decode_rows`] takes the form for `shape` on a device of `sms` SMs that runs
/// wgmma (it still needs the form to take the shape and epilogue): at
/// [`SKINNY_CLASSES_WG_DECODE_M`] rows where its clusters number at most one CTA an SM (o_proj
/// and down_proj of asynct-0.5b; its launch bound of two an SM keeps every cluster resident at
/// once, where a second wave of clusters would double the time, RESULTS run 190). Measured on an
/// H100 (RESULTS runs 301-302): the decode step 4% faster at 65 and 96 rows and level at 128 with
/// both weights on it, though o_proj alone is slower on it (6.7 us against 5.0 at 128 rows);
/// down_proj alone on it gained less.
pub fn classes_wg_serve(shape: GemmShape, sms: usize) -> bool {
    SKINNY_CLASSES_WG_DECODE_M.contains(&shape.m)
        && shape.k.is_multiple_of(SKINNY_CLASSES_WG_K)
        && class_form_ctas(shape.n).is_some_and(|ctas| ctas <= sms)
}

impl GemmPlan {
    /// The skinny kernel's class form on warpgroups with `epilogue` (sm_90a; the caller knows the
    /// device runs wgmma): one slab of at most [`SKINNY_CLASSES_WG_M_TILE`] rows of x, a cluster
    /// of 8 CTAs a block of 64 rows of W, W in the class-step layout
    /// ([`GemmPlan::reads_class_steps`]). The same bits as the plain form
    /// (`gemm_skinny_classes_wg.cu`'s header). K must be a multiple of [`SKINNY_CLASSES_WG_K`]
    /// and N of 16.
    pub fn skinny_classes_wg(shape: GemmShape, epilogue: EpilogueKind) -> Result<Self> {
        let entry = "gemm skinny classes wg";
        tma_fits(entry, shape, epilogue, SKINNY_CLASSES_WG_K)?;
        if shape.m > SKINNY_CLASSES_WG_M_TILE {
            return Err(unsupported(
                entry,
                format!("one slab of at most {SKINNY_CLASSES_WG_M_TILE} rows of x, got M = {}", shape.m),
            ));
        }
        let entry_name = format!("gemm_skinny_classes_wg{}", epilogue.suffix());
        let (m_tile, bytes) = (SKINNY_CLASSES_WG_M_TILE, SKINNY_CLASSES_WG_BYTES);
        let tile = SkinnyTile::per_cluster(entry, shape, SkinnyForm::ClassesWg, entry_name, m_tile, bytes)?;
        Ok(Self { shape, path: GemmPath::Skinny(tile), epilogue })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::plan::tests::{skinny as tile, MODEL_WEIGHTS};
    use crate::gemm::DecodeForms;

    #[test]
    fn the_form_has_a_cluster_of_8_ctas_a_64_row_block_and_reads_the_class_step_copy() {
        let down = GemmPlan::skinny_classes_wg(GemmShape { m: 100, n: 1024, k: 3072 }, EpilogueKind::PeriLn).unwrap();
        let t = tile(&down);
        assert_eq!(
            (t.form, t.entry.as_str(), t.m_tile, t.rows, t.grid, t.slabs),
            (SkinnyForm::ClassesWg, "gemm_skinny_classes_wg_periln", 128, 64, 16 * 8, 1)
        );
        // Slack, 6 stages of 64 + 128 rows of 64 bytes, 13 mbarriers and padding, 8 x 16 rows of
        // 68 floats.
        assert_eq!(t.shared_bytes as usize, 1024 + 6 * 192 * 64 + 96 + 16 + 8 * 16 * 68 * 4);
        assert!(down.reads_class_steps());
        assert_eq!(t.form.cluster(), 8);
        assert_eq!(down.name(), "skinny-classes-wg-m128-r64-periln");
    }

    #[test]
    fn the_form_refuses_what_its_kernel_does_not_take_by_name() {
        let refused = |m, n, k, kind| GemmPlan::skinny_classes_wg(GemmShape { m, n, k }, kind).unwrap_err().to_string();
        assert!(refused(129, 1024, 1024, EpilogueKind::Store).contains("one slab"));
        assert!(refused(100, 1024, 512, EpilogueKind::Store).contains("multiple of 1024"));
        assert!(refused(100, 1000, 1024, EpilogueKind::Store).contains("16"));
        assert!(refused(0, 1024, 1024, EpilogueKind::Store).contains("gemm"));
    }

    #[test]
    fn decode_rows_take_it_at_65_to_128_rows_where_its_clusters_fit_one_cta_an_sm() {
        for (n, k, kind) in MODEL_WEIGHTS {
            for m in [1, 32, 64, 65, 100, 128, 129, 256] {
                let shape = GemmShape { m, n, k };
                let with = GemmPlan::decode_rows(shape, 132, kind, true).unwrap();
                let takes = SKINNY_CLASSES_WG_DECODE_M.contains(&m) && n == 1024;
                assert_eq!(tile(&with).form == SkinnyForm::ClassesWg, takes, "M {m} N {n} K {k}: {}", with.name());
                let off = DecodeForms { classes_wg: false, ..DecodeForms::all(true) };
                let without_it = GemmPlan::decode_rows_with(shape, 132, kind, off).unwrap();
                assert_ne!(tile(&without_it).form, SkinnyForm::ClassesWg);
                if !takes {
                    assert_eq!(with, without_it, "the switch changes only the form's own shapes");
                }
                let ampere = GemmPlan::decode_rows(shape, 132, kind, false).unwrap();
                assert_ne!(tile(&ampere).form, SkinnyForm::ClassesWg, "no wgmma before sm_90");
            }
        }
        // A K the form does not take keeps the other forms.
        let odd =
            GemmPlan::decode_rows(GemmShape { m: 100, n: 1024, k: 1536 }, 132, EpilogueKind::Store, true).unwrap();
        assert_ne!(tile(&odd).form, SkinnyForm::ClassesWg);
    }
}
