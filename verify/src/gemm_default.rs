//! The GEMM plan the GEMM checks (`gpu_gemm`) and `asynct-bench --gemm` take where they do not
//! force a path: the skinny kernel up to [`SKINNY_MAX_M`] rows, in the form and rows per CTA the
//! model plans decode rows with ([`GemmPlan::decode_rows`]), cuBLASLt's own per-`M` choice
//! ([`GemmPlan::cublaslt`]) beyond. The model plans its GEMMs by lane instead (decode rows, chunk
//! rows, logit rows: `model::gpu_backend::linear`), so this policy is test machinery and lives
//! here, beside its users, rather than in `gpu`. It is not the model's plan past
//! [`SKINNY_MAX_M`] rows: decode rows take [`GemmPlan::decode_rows`] at every batch (the class
//! form on warpgroups, the wide form and the plain form's slabs at 65 to 128 rows), so a bench
//! of a step's GEMM there names its path (RESULTS run 316 profiled cuBLASLt by taking this
//! plan for the step's).

use gpu::gemm::{EpilogueKind, GemmPlan, GemmShape, SKINNY_MAX_M};

/// The skinny kernel as decode rows plan it for `sms` SMs (`wgmma`: the device runs wgmma) up to
/// [`SKINNY_MAX_M`] rows, [`GemmPlan::cublaslt`] beyond.
pub fn default_plan(shape: GemmShape, sms: usize, wgmma: bool) -> gpu::Result<GemmPlan> {
    if shape.m <= SKINNY_MAX_M {
        GemmPlan::decode_rows(shape, sms, EpilogueKind::Store, wgmma)
    } else {
        GemmPlan::cublaslt(shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu::gemm::{GemmPath, Pin, SkinnyForm};

    const H200_SMS: usize = 132;

    #[test]
    fn up_to_64_rows_go_to_the_skinny_kernel_and_wider_to_cublaslt() {
        let shape = |m| GemmShape { m, n: 2048, k: 1024 };
        for m in [1, 2, 3, 8, 9, 17, 32, 33, 64] {
            let plan = default_plan(shape(m), H200_SMS, false).unwrap();
            let GemmPath::Skinny(tile) = &plan.path else { panic!("M {m}: {} is not skinny", plan.name()) };
            assert!(tile.m_tile >= m && tile.m_tile < 2 * m.max(8), "M {m}: tile {}", tile.m_tile);
            assert_eq!(plan.epilogue, EpilogueKind::Store, "M {m}");
        }
        // The model's decode-row form past 32 rows: the warpgroup form where wgmma runs (to 64
        // rows), else shared-x where each CTA gets three W blocks (gate/up's N); the plain form
        // below.
        for m in [1, 32, 33, 64] {
            for (wgmma, wide) in [(false, SkinnyForm::SharedX), (true, SkinnyForm::Warpgroup)] {
                let plan = default_plan(GemmShape { m, n: 6144, k: 1024 }, H200_SMS, wgmma).unwrap();
                let GemmPath::Skinny(tile) = &plan.path else { panic!("M {m}: {} is not skinny", plan.name()) };
                assert_eq!(tile.form, if m > 32 { wide } else { SkinnyForm::Plain }, "M {m}: {}", plan.name());
            }
        }
        for m in [65, 128, 512, 100_000] {
            let plan = default_plan(shape(m), H200_SMS, true).unwrap();
            assert_eq!(plan.path, GemmPath::CublasLt { heuristic_m: m, pin: Pin::No });
            assert_eq!(plan.name(), "cublaslt");
        }
    }
}
