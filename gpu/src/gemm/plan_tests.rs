//! Tests of [`super`]: which path, instantiation and grid each shape gets, the refusals, and the
//! instantiation lists against the kernel files.

use super::*;
use crate::error::Error;
use crate::gemm::{wide_serves, SKINNY_WIDE_BYTES};

const H200_SMS: usize = 132;

fn shape(m: usize, n: usize, k: usize) -> GemmShape {
    GemmShape { m, n, k }
}

/// asynct-0.5b's weights as the decode rows' tests plan them: (N, K, the epilogue after it) of
/// qkv, o_proj, gate/up and down_proj (also the class forms' tests).
pub(in crate::gemm) const MODEL_WEIGHTS: [(usize, usize, EpilogueKind); 4] = [
    (2048, 1024, EpilogueKind::QkNormRopeCache),
    (1024, 1024, EpilogueKind::PeriLn),
    (6144, 1024, EpilogueKind::SiluMul),
    (1024, 3072, EpilogueKind::PeriLn),
];

/// The skinny tile of `plan`, which must be skinny (also `super::staged`'s tests).
pub(in crate::gemm) fn skinny(plan: &GemmPlan) -> &SkinnyTile {
    match &plan.path {
        GemmPath::Skinny(t) => t,
        _ => panic!("{} is not skinny", plan.name()),
    }
}

#[test]
fn a_wgmma_plan_names_its_epilogue_and_covers_every_tile() {
    for kind in EpilogueKind::ALL {
        let plan = GemmPlan::wgmma_epilogue(shape(8448, 6144, 1024), kind).unwrap();
        let GemmPath::Wgmma(tile) = &plan.path else { panic!("{} is not wgmma", plan.name()) };
        assert_eq!(tile.entry, format!("gemm_wgmma{}", kind.suffix()));
        assert_eq!(tile.grid, (48, 66));
        assert_eq!(plan.name(), format!("wgmma{}", kind.suffix().replace('_', "-")));
    }
    let GemmPath::Wgmma(tile) = GemmPlan::wgmma_epilogue(shape(129, 1040, 64), EpilogueKind::Store).unwrap().path
    else {
        panic!("not wgmma")
    };
    assert_eq!(tile.grid, (9, 2));
}

#[test]
fn a_wgmma_plan_refuses_what_its_tma_boxes_and_grid_cannot_take() {
    let refused = |s: GemmShape, needle: &str| {
        let err = GemmPlan::wgmma_epilogue(s, EpilogueKind::Store).unwrap_err().to_string();
        assert!(err.contains(needle), "{s}: {err}");
    };
    refused(shape(64, 1024, 1000), "`k` must be a multiple of 64");
    refused(shape(64, 1000, 1024), "`n` must be a multiple of 16");
    let paired = GemmPlan::wgmma_epilogue(shape(64, 1000, 1024), EpilogueKind::SiluMul).unwrap_err().to_string();
    assert!(paired.contains("gemm wgmma") && paired.contains("SiluMul epilogue takes"), "{paired}");
    refused(shape(128 * 65_536, 16, 64), "65535 tiles");
    refused(shape(0, 16, 64), "`m`");
}

#[test]
fn rows_per_cta_fill_the_sms_twice_or_fall_to_eight() {
    let rows = |m, n| skinny(&GemmPlan::skinny(shape(m, n, 1024), H200_SMS).unwrap()).rows;
    // asynct-0.5b's weights: O and down (N 1024), QKV (2048), gate/up (6144), LM head (151936).
    assert_eq!([rows(1, 1024), rows(1, 2048), rows(1, 6144), rows(1, 151_936)], [8, 8, 16, 64]);
    // Wider x tiles cap the rows (accumulators), never below what the grid allows.
    assert_eq!([rows(32, 151_936), rows(64, 151_936), rows(64, 6144)], [32, 16, 16]);
    for m_tile in SKINNY_M_TILES {
        for n in [1, 7, 1000, 6144, 151_936] {
            let t = skinny(&GemmPlan::skinny(shape(m_tile, n, 64), H200_SMS).unwrap()).clone();
            assert!(rows_fit(t.m_tile, t.rows));
            assert_eq!((t.grid as usize, t.slabs), (n.div_ceil(t.rows), 1));
            let one_wave = t.m_tile >= ONE_WAVE_MIN_M_TILE && (H200_SMS..=2 * H200_SMS).contains(&(t.grid as usize));
            assert!(t.rows == 8 || one_wave || t.grid as usize >= 2 * H200_SMS, "{t:?}");
            assert_eq!(t.entry, format!("gemm_skinny_m{}_r{}", t.m_tile, t.rows));
        }
    }
}

#[test]
fn from_32_rows_the_rows_per_cta_run_in_one_wave_first() {
    let rows = |m, n, kind| skinny(&GemmPlan::skinny_epilogue(shape(m, n, 1024), H200_SMS, kind).unwrap()).rows;
    let (silu, periln, qk) = (EpilogueKind::SiluMul, EpilogueKind::PeriLn, EpilogueKind::QkNormRopeCache);
    // gate/up: 16 rows a CTA (384 CTAs, 1.45 waves) up to 16 rows of x, 32 (192, one wave) from 17.
    assert_eq!([rows(1, 6144, silu), rows(8, 6144, silu), rows(16, 6144, silu)], [16, 16, 16]);
    assert_eq!([rows(17, 6144, silu), rows(32, 6144, silu)], [32, 32]);
    // No one-wave grid covers every SM: the rule before it (o, down and QKV keep their plans).
    assert_eq!([rows(32, 1024, periln), rows(32, 2048, qk)], [8, 16]);
    // The fewest rows whose grid (slabs counted) fits one wave and covers every SM, if any.
    for m in [17, 32, 64, 65, 128] {
        for n in [1024, 2048, 6144, 151_936] {
            let t = skinny(&GemmPlan::skinny(shape(m, n, 1024), H200_SMS).unwrap()).clone();
            let ctas = |rows: usize| n.div_ceil(rows) * t.slabs;
            let fits = |rows: usize| rows_fit(t.m_tile, rows) && (H200_SMS..=2 * H200_SMS).contains(&ctas(rows));
            match SKINNY_ROWS.into_iter().find(|&r| fits(r)) {
                Some(fewest) => assert_eq!(t.rows, fewest, "{t:?}"),
                None => assert!(t.rows == 8 || ctas(t.rows) >= 2 * H200_SMS, "{t:?}"),
            }
        }
    }
}

/// The kernel's macro token of each epilogue in its entry list.
fn macro_name(kind: EpilogueKind) -> &'static str {
    match kind {
        EpilogueKind::Store => "STORE",
        EpilogueKind::PeriLn => "PERILN",
        EpilogueKind::SiluMul => "SILU_MUL",
        EpilogueKind::QkNormRopeCache => "QK",
    }
}

#[test]
fn the_instantiations_are_the_kernels_list() {
    let src = crate::kernels::GEMM_SKINNY.source;
    let mut count = 0;
    for kind in EpilogueKind::ALL {
        for m_tile in SKINNY_M_TILES {
            for rows in SKINNY_ROWS {
                let line = format!("GEMM_SKINNY_ENTRY({m_tile}, {rows}, {}, {})", macro_name(kind), kind.suffix());
                let planned = GemmPlan::skinny_rows_epilogue(shape(m_tile, 64, 64), rows, kind).is_ok();
                assert_eq!(src.contains(&line), planned, "{line}");
                assert_eq!(planned, rows_fit(m_tile, rows) && rows >= kind.min_rows(), "{line}");
                count += usize::from(planned);
            }
        }
    }
    assert_eq!(count, src.matches("\nGEMM_SKINNY_ENTRY(").count());
    for (m_tile, rows, kind) in SKINNY_THREE_CTAS {
        let line = format!("GEMM_SKINNY_C3_ENTRY({m_tile}, {rows}, {}, {})", macro_name(kind), kind.suffix());
        assert!(src.contains(&line), "{line}");
    }
    assert_eq!(SKINNY_THREE_CTAS.len(), src.matches("\nGEMM_SKINNY_C3_ENTRY(").count());
}

#[test]
fn one_slab_of_gate_up_takes_three_ctas_an_sm_where_two_would_leave_a_second_wave() {
    let gate_up = |m: usize| shape(m, 6144, 1024);
    for m in 1..=8 {
        // 384 CTAs of 16 rows: past 2 x 132, within 3 x 132.
        let plan = GemmPlan::decode_rows(gate_up(m), 132, EpilogueKind::SiluMul, true).unwrap();
        let t = skinny(&plan);
        assert_eq!((t.form, t.entry.as_str(), t.grid), (SkinnyForm::ThreeCtas, "gemm_skinny_c3_m8_r16_silu_mul", 384));
        assert_eq!(plan.name(), "skinny-c3-m8-r16-silu-mul");
        // The same CTAs as the plain plan, so the same bits.
        let plain = GemmPlan::skinny_epilogue(gate_up(m), 132, EpilogueKind::SiluMul).unwrap();
        assert_eq!((skinny(&plain).rows, skinny(&plain).grid), (t.rows, t.grid));
    }
    // Two an SM fit them in one wave on 192 SMs; three do not on 120; nor past one slab.
    for (m, sms) in [(1, 192), (1, 120), (9, 132)] {
        let plan = GemmPlan::decode_rows(gate_up(m), sms, EpilogueKind::SiluMul, true).unwrap();
        assert_ne!(skinny(&plan).form, SkinnyForm::ThreeCtas, "M {m} on {sms} SMs");
    }
    // Another epilogue or rows per CTA has no such entry.
    assert!(GemmPlan::skinny_three_ctas(gate_up(1), 16, EpilogueKind::PeriLn).is_err());
    assert!(GemmPlan::skinny_three_ctas(gate_up(1), 32, EpilogueKind::SiluMul).is_err());
    assert!(GemmPlan::skinny_three_ctas(gate_up(16), 16, EpilogueKind::SiluMul).is_err());
}

#[test]
fn an_epilogue_plan_picks_rows_as_the_dispatcher_among_those_it_takes() {
    for kind in EpilogueKind::ALL {
        for m in [1, 3, 8, 17, 32, 64, 65, 128] {
            for n in [1024, 2048, 6144] {
                let s = shape(m, n, 1024);
                let plan = GemmPlan::skinny_epilogue(s, H200_SMS, kind).unwrap();
                let t = skinny(&plan);
                let store = skinny(&GemmPlan::skinny(s, H200_SMS).unwrap()).clone();
                assert_eq!(plan.epilogue, kind);
                assert_eq!((t.m_tile, t.slabs), (store.m_tile, store.slabs));
                assert_eq!(t.rows, store.rows.max(kind.min_rows()), "{kind:?} {s}");
                assert_eq!(t.entry, format!("gemm_skinny_m{}_r{}{}", t.m_tile, t.rows, kind.suffix()));
            }
        }
    }
    let periln = GemmPlan::skinny_epilogue(shape(1, 1024, 1024), H200_SMS, EpilogueKind::PeriLn).unwrap();
    assert_eq!(periln.name(), "skinny-m8-r8-periln");
    assert_eq!(skinny(&periln).entry, "gemm_skinny_m8_r8_periln");
    for plan in [GemmPlan::cublaslt(shape(3, 64, 64)).unwrap(), GemmPlan::skinny(shape(3, 64, 64), 132).unwrap()] {
        assert_eq!(plan.epilogue, EpilogueKind::Store);
    }
    // asynct-0.5b's gate/up at one row: 16 rows per CTA fill the SMs (384 CTAs).
    let silu = GemmPlan::skinny_epilogue(shape(1, 6144, 1024), H200_SMS, EpilogueKind::SiluMul).unwrap();
    assert_eq!(skinny(&silu).entry, "gemm_skinny_m8_r16_silu_mul");
    assert_eq!(silu.name(), "skinny-m8-r16-silu-mul");
    // QKV at one row: 16 rows per CTA (128 CTAs), where the plain GEMM would take 8 (256).
    let qk = GemmPlan::skinny_epilogue(shape(1, 2048, 1024), H200_SMS, EpilogueKind::QkNormRopeCache).unwrap();
    assert_eq!(skinny(&qk).entry, "gemm_skinny_m8_r16_qk_norm_rope_cache");
    assert_eq!(skinny(&GemmPlan::skinny(shape(1, 2048, 1024), H200_SMS).unwrap()).rows, 8);
}

#[test]
fn pairing_epilogues_refuse_8_rows_per_cta_and_partial_groups() {
    let refused = |plan: Result<GemmPlan>, needle: &str| {
        let err = plan.unwrap_err().to_string();
        assert!(err.contains(needle), "expected `{needle}` in: {err}");
    };
    refused(
        GemmPlan::skinny_rows_epilogue(shape(1, 64, 64), 8, EpilogueKind::SiluMul),
        "`rows` must be one of [16, 32, 64] for M = 1 (x tile 8) and the SiluMul epilogue, got 8",
    );
    refused(GemmPlan::skinny_epilogue(shape(1, 72, 64), H200_SMS, EpilogueKind::SiluMul), "multiple of 16, got 72");
    refused(
        GemmPlan::skinny_rows_epilogue(shape(9, 40, 64), 16, EpilogueKind::QkNormRopeCache),
        "the QkNormRopeCache epilogue takes whole 16-row groups",
    );
    assert_eq!(
        skinny(&GemmPlan::skinny_epilogue(shape(64, 64, 64), H200_SMS, EpilogueKind::SiluMul).unwrap()).rows,
        16
    );
}

#[test]
fn bad_shapes_are_refused_by_name() {
    let refused = |plan: Result<GemmPlan>, needle: &str| {
        let err = plan.unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }));
        let err = err.to_string();
        assert!(err.contains(needle), "expected `{needle}` in: {err}");
    };
    refused(GemmPlan::skinny(shape(0, 64, 64), H200_SMS), "`m` must be 1 to");
    refused(GemmPlan::skinny(shape(1, 0, 64), H200_SMS), "`n` must be 1 to");
    refused(GemmPlan::skinny(shape(1, 64, 12), H200_SMS), "`k` must be a positive multiple of 8");
    refused(GemmPlan::skinny(shape(1, 64, 0), H200_SMS), "got 0");
    refused(GemmPlan::cublaslt(shape(1, 64, MAX_K + 8)), "got 1073741832");
    refused(GemmPlan::skinny_rows(shape(64, 64, 64), 32), "`rows` must be one of [8, 16] for M = 64");
    refused(GemmPlan::skinny_rows(shape(1, 64, 64), 24), "got 24");
    GemmPlan::skinny_rows(shape(1, 64, 8), 64).unwrap();
    GemmPlan::cublaslt(shape(1_000_000, 151_936, 1024)).unwrap();
    refused(GemmPlan::cublaslt_pinned(shape(1, 64, 64), 0), "`m` must be 1 to");
    refused(GemmPlan::cublaslt_pinned_split(shape(1, 64, 64), 0), "`m` must be 1 to");
    refused(GemmPlan::skinny(shape(1 << 30, 1 << 30, 64), H200_SMS), "more than 2^31 CTAs");
}

#[test]
fn batches_past_64_rows_run_in_slabs_of_64_with_each_w_block_adjacent() {
    for (m, slabs) in [(65, 2), (128, 2), (129, 3), (256, 4)] {
        let plan = GemmPlan::skinny(shape(m, 151_936, 1024), H200_SMS).unwrap();
        let t = skinny(&plan);
        assert_eq!((t.m_tile, t.slabs), (64, slabs), "M {m}");
        assert_eq!(t.grid as usize, 151_936usize.div_ceil(t.rows) * slabs);
    }
    // The slabs count toward filling the SMs: 2048 / 16 = 128 blocks of W, x 4 slabs >= 264.
    assert_eq!(skinny(&GemmPlan::skinny(shape(256, 2048, 1024), H200_SMS).unwrap()).rows, 16);
    assert_eq!(skinny(&GemmPlan::skinny(shape(64, 2048, 1024), H200_SMS).unwrap()).rows, 8);
    let pinned = GemmPlan::cublaslt_pinned(shape(3, 1024, 1024), 512).unwrap();
    assert_eq!(pinned.name(), "cublaslt-at-m512");
    assert_eq!(pinned.path, GemmPath::CublasLt { heuristic_m: 512, pin: Pin::Whole });
    // Pinned at its own M it is still pinned: the same algorithm as every other M of it.
    let at_own = GemmPlan::cublaslt_pinned(shape(512, 1024, 1024), 512).unwrap();
    assert_eq!(
        (at_own.name().as_str(), &at_own.path),
        ("cublaslt-at-m512", &GemmPath::CublasLt { heuristic_m: 512, pin: Pin::Whole })
    );
    let split = GemmPlan::cublaslt_pinned_split(shape(3, 1024, 3072), 64).unwrap();
    assert_eq!(
        (split.name().as_str(), &split.path),
        ("cublaslt-split-at-m64", &GemmPath::CublasLt { heuristic_m: 64, pin: Pin::SplitK })
    );
}

#[test]
fn the_shared_x_form_shares_each_slab_s_w_blocks_evenly_and_fits_shared_memory() {
    let sx = |m, n, k, kind| GemmPlan::skinny_shared_x(shape(m, n, k), kind, H200_SMS);
    // gate/up at 128 rows: two slabs, 66 CTAs each at most, 384 blocks -> 64 CTAs of 6 blocks.
    let plan = sx(128, 6144, 1024, EpilogueKind::SiluMul).unwrap();
    let t = skinny(&plan);
    assert_eq!((t.entry.as_str(), t.m_tile, t.rows, t.slabs), ("gemm_skinny_sx_m64_r16_silu_mul", 64, 16, 2));
    assert_eq!(t.grid, 128);
    assert_eq!(t.shared_bytes as usize, 64 * (2048 + 64) + 8 * 64 * 20 * 4);
    assert_eq!(plan.name(), "skinny-sx-m64-r16-silu-mul");
    // One slab, 500 blocks over at most 132 CTAs: 4 blocks each, 125 CTAs.
    assert_eq!(skinny(&sx(40, 8000, 64, EpilogueKind::Store).unwrap()).grid, 125);
    // More slabs than SMs: one CTA a slab.
    assert_eq!(skinny(&sx(64 * 200, 64, 64, EpilogueKind::Store).unwrap()).grid, 200);
    // A row of x: 2 K bytes padded to 64 past a multiple of 128, enough for a last step's
    // 16-byte loads past K.
    for (k, row) in [(8, 64), (32, 64), (64, 192), (1024, 2112), (1000, 2112)] {
        assert_eq!(shared_x_bytes(1, 0, k), row + 8 * 4 * 4, "K {k}");
        assert_eq!(row % 128, 64, "K {k}");
        assert!(row >= 2 * k.next_multiple_of(32), "K {k}");
    }
    let refused = |plan: Result<GemmPlan>, needle: &str| {
        let err = plan.unwrap_err().to_string();
        assert!(err.contains(needle), "expected `{needle}` in: {err}");
    };
    refused(sx(32, 6144, 1024, EpilogueKind::Store), "an x tile of 64 rows only, M = 32 has 32");
    refused(sx(64, 1024, 3072, EpilogueKind::PeriLn), "bytes of shared memory, past 232448");
    refused(sx(64, 1000, 1024, EpilogueKind::SiluMul), "multiple of 16, got 1000");
    refused(sx(0, 1024, 1024, EpilogueKind::Store), "`m` must be 1 to");
}

#[test]
fn decode_rows_take_the_shared_x_form_where_each_cta_gets_three_w_blocks() {
    let pick = |m, n, k, kind| GemmPlan::decode_rows(shape(m, n, k), H200_SMS, kind, false).unwrap().name();
    let silu = EpilogueKind::SiluMul;
    // asynct-0.5b's gate/up: 384 blocks, 3 a CTA at one slab, 6 at two.
    assert_eq!(pick(128, 6144, 1024, silu), "skinny-sx-m64-r16-silu-mul");
    assert_eq!(pick(33, 6144, 1024, silu), "skinny-sx-m64-r16-silu-mul");
    // Up to 32 rows, at 2 blocks a CTA (QKV at 128 rows), on small N, or where the slab does
    // not fit: the plain form.
    assert_eq!(pick(32, 6144, 1024, silu), "skinny-m32-r32-silu-mul");
    assert_eq!(pick(128, 2048, 1024, EpilogueKind::QkNormRopeCache), "skinny-m64-r16-qk-norm-rope-cache");
    assert_eq!(pick(128, 1024, 1024, EpilogueKind::PeriLn), "skinny-m64-r8-periln");
    assert_eq!(pick(128, 1024, 3072, EpilogueKind::PeriLn), "skinny-m64-r8-periln");
    for m in [1, 17, 33, 64, 65, 128, 300] {
        for kind in EpilogueKind::ALL {
            let plan = GemmPlan::decode_rows(shape(m, 6144, 1024), H200_SMS, kind, false).unwrap();
            let t = skinny(&plan);
            assert_eq!(plan.epilogue, kind);
            let narrow = match (m, kind) {
                (1, EpilogueKind::SiluMul) => SkinnyForm::ThreeCtas,
                _ => SkinnyForm::Plain,
            };
            assert_eq!(t.form, if m > 32 { SkinnyForm::SharedX } else { narrow }, "{m} {kind:?}: {t:?}");
        }
    }
}

#[test]
fn decode_rows_take_the_warpgroup_form_at_33_to_64_rows_where_its_blocks_fill_half_the_sms() {
    let plan = |m, n, k, kind| GemmPlan::decode_rows(shape(m, n, k), H200_SMS, kind, true).unwrap();
    for kind in EpilogueKind::ALL {
        // gate/up's 96 blocks of 64 rows fill 132 SMs by half; one slab of x.
        for m in [33, 40, 64] {
            let p = plan(m, 6144, 1024, kind);
            assert_eq!(skinny(&p).form, SkinnyForm::Warpgroup, "{m} {kind:?}");
            assert_eq!(p.name(), format!("skinny-wg-m64-r64{}", kind.suffix().replace('_', "-")));
        }
        assert_eq!(skinny(&plan(64, 64 * 66, 1024, kind)).form, SkinnyForm::Warpgroup);
        // Up to 32 rows, on small N (qkv, o, down: 16 to 32 blocks), or without wgmma: as without
        // wgmma.
        for (m, n, k) in [
            (1, 6144, 1024),
            (32, 6144, 1024),
            (128, 2048, 1024),
            (128, 1024, 3072),
            (64, 2048, 1024),
            (64, 1024, 3072),
            (64, 64 * 65, 1024),
        ] {
            let per_cta =
                crate::gemm::DecodeForms { classes: false, classes_wg: false, ..crate::gemm::DecodeForms::all(true) };
            let with = GemmPlan::decode_rows_with(shape(m, n, k), H200_SMS, kind, per_cta).unwrap();
            assert_ne!(skinny(&with).form, SkinnyForm::Warpgroup, "{m} {n} {k} {kind:?}");
            assert_eq!(with, GemmPlan::decode_rows(shape(m, n, k), H200_SMS, kind, false).unwrap());
        }
    }
}

#[test]
fn decode_rows_take_the_wide_form_past_64_rows_where_its_blocks_fill_half_the_sms() {
    let plan = |m, n, k, kind| GemmPlan::decode_rows(shape(m, n, k), H200_SMS, kind, true).unwrap();
    for kind in EpilogueKind::ALL {
        for (m, slabs) in [(65, 1), (128, 1), (129, 2), (300, 3)] {
            let p = plan(m, 6144, 1024, kind);
            let t = skinny(&p);
            assert_eq!((t.form, t.slabs, t.grid), (SkinnyForm::Wide, slabs, 96 * slabs as u32), "{m} {kind:?}");
            assert_eq!(t.entry, format!("gemm_skinny_wide{}", kind.suffix()));
            assert!(p.reads_class_steps());
            assert_eq!(p.name(), format!("skinny-wide-m128-r64{}", kind.suffix().replace('_', "-")));
            let without = GemmPlan::decode_rows(shape(m, 6144, 1024), H200_SMS, kind, false).unwrap();
            assert!(!without.reads_class_steps(), "{m} {kind:?} without wgmma");
        }
        // qkv, o and down (32 and 16 blocks of 64 rows), a K the form does not take, 64 rows; o
        // and down read the class steps on the class form on warpgroups instead.
        for (m, n, k) in [(128, 2048, 1024), (128, 1024, 1024), (128, 1024, 3072), (128, 6144, 768), (64, 6144, 1024)] {
            let p = plan(m, n, k, kind);
            assert_ne!(skinny(&p).form, SkinnyForm::Wide, "{m} {n} {k} {kind:?}");
            assert_eq!(p.reads_class_steps(), n == 1024, "{m} {n} {k} {kind:?}");
        }
    }
    assert!(wide_serves(6144, 1024, H200_SMS) && wide_serves(66 * 64, 3072, H200_SMS));
    assert!(!wide_serves(65 * 64, 1024, H200_SMS) && !wide_serves(6144, 1280, H200_SMS) && !wide_serves(6152, 1024, 8));
}

#[test]
fn the_wide_form_refuses_what_its_kernel_does_not_take() {
    let refused = |n, k| GemmPlan::skinny_wide(shape(100, n, k), EpilogueKind::Store).unwrap_err().to_string();
    assert!(refused(6144, 768).contains("multiple of 512"), "{}", refused(6144, 768));
    assert!(refused(6150, 1024).contains("multiple of 16"), "{}", refused(6150, 1024));
    let plan = GemmPlan::skinny_wide(shape(100, 6144, 1024), EpilogueKind::Store).unwrap();
    assert_eq!(skinny(&plan).shared_bytes as usize, SKINNY_WIDE_BYTES);
    assert!(!GemmPlan::skinny_wgmma(shape(64, 6144, 1024), EpilogueKind::Store).unwrap().reads_class_steps());
}

#[test]
fn the_warpgroup_form_takes_a_cta_a_64_by_64_tile_and_fits_shared_memory() {
    let plan = GemmPlan::skinny_wgmma(shape(128, 6144, 1024), EpilogueKind::SiluMul).unwrap();
    let t = skinny(&plan);
    assert_eq!((t.entry.as_str(), t.m_tile, t.rows, t.slabs, t.grid), ("gemm_skinny_wg_m64_silu_mul", 64, 64, 2, 192));
    assert_eq!(plan.name(), "skinny-wg-m64-r64-silu-mul");
    // The rings of W and x, whatever K.
    assert_eq!(t.shared_bytes as usize, 1024 + 2 * 6 * (8192 + 8192));
    for k in [8, 3072, 1 << 20] {
        assert_eq!(skinny(&GemmPlan::skinny_wgmma(shape(65, 1024, k), EpilogueKind::PeriLn).unwrap()).grid, 32);
    }
    let err = GemmPlan::skinny_wgmma(shape(64, 1000, 1024), EpilogueKind::SiluMul).unwrap_err().to_string();
    assert!(err.contains("multiple of 16, got 1000"), "{err}");
}

#[test]
fn the_warpgroup_instantiations_are_the_kernels_list() {
    let src = crate::kernels::GEMM_SKINNY_WG.source;
    assert!(src.contains(&format!("constexpr int STAGES = {SKINNY_WG_STAGES};")), "the ring's depth");
    // Launched with the plain form's block: two warpgroups.
    let groups = SKINNY_THREADS / 128;
    assert!(src.contains(&format!("constexpr int GROUPS = {groups};")) && groups == 2, "the block size");
    for kind in EpilogueKind::ALL {
        let line = format!("GEMM_SKINNY_WG_ENTRY({}, {})", macro_name(kind), kind.suffix());
        assert!(src.contains(&line), "{line}");
        let plan = GemmPlan::skinny_wgmma(shape(64, 64, 64), kind).unwrap();
        assert_eq!(skinny(&plan).entry, format!("gemm_skinny_wg_m64{}", kind.suffix()));
    }
    assert_eq!(src.matches("\nGEMM_SKINNY_WG_ENTRY(").count(), EpilogueKind::ALL.len());
}

#[test]
fn min_bytes_counts_w_x_and_y_once() {
    assert_eq!(shape(1, 2048, 1024).min_bytes(), 2 * (2048 * 1024 + 1024 + 2048));
    assert_eq!(shape(3, 5, 8).to_string(), "M 3 x N 5 x K 8");
}
