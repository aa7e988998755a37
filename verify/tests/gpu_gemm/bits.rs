//! The bitwise properties: a skinny row's bits at every M and beside any rows, two runs alike, a
//! CUDA graph's replays alike the eager run; and the refusals of bad shapes and buffers.

use std::sync::Arc;

use gpu::gemm::{EpilogueKind, Gemm, GemmPlan, GemmShape, SKINNY_CLASSES_WG_K};
use gpu::Gpu;
use half::bf16;
use model::gpu_backend::linear::{DECODE_PIN_AT, HEAD_PIN_AT};
use verify::gemm_default;
use verify::gpu_harness::refused;

use super::device::{
    default_plan, g, label, plans, run, runs_wgmma, wgmma_left_out, wgmma_serves, Check, MODEL_SHAPES, PINNED_AT,
    WIDE_MAX_N,
};
use super::reference::{draw_w, draw_x, same_bits, POISON};

/// An x of `m` rows holding `row` at `at`; the other rows are drawn from `seed` with larger
/// values, one all NaN and one all +inf where there are rows enough.
fn beside(row: &[bf16], m: usize, at: usize, seed: u64) -> Vec<bf16> {
    let k = row.len();
    let mut x = draw_x(seed, m, k);
    for (i, r) in x.chunks_mut(k).enumerate() {
        let gap = (i + m - at) % m;
        if gap == 1 {
            r.fill(bf16::NAN);
        } else if gap == 2 {
            r.fill(bf16::INFINITY);
        }
    }
    x[at * k..][..k].copy_from_slice(row);
    x
}

/// For N x K of the QKV, down and LM-head weights and an odd 1000 x 1000: one row of x, run
/// alone (M = 1) by the dispatcher's plan, then placed at a different position in x of every M
/// from 2 to 64 beside drawn, NaN and infinite rows, under every skinny instantiation of that M:
/// its output row has the same bits every time.
pub fn batch_invariance(gpu: &Arc<Gpu>) -> Check {
    let shapes = [MODEL_SHAPES[0], MODEL_SHAPES[3], ("odd", 1000, 1000), MODEL_SHAPES[4]];
    for (s, &(name, n, k)) in shapes.iter().enumerate() {
        let seed = 3000 + 100 * s as u64;
        let w_d = g(gpu.upload(&draw_w(seed, n, k)))?;
        let row = draw_x(seed + 1, 1, k);
        let solo_shape = GemmShape { m: 1, n, k };
        let solo_gemm = g(Gemm::new(gpu, default_plan(gpu, solo_shape)?))?;
        let solo = run(gpu, &solo_gemm, &g(gpu.upload(&row))?, &w_d)?;
        if solo.iter().any(|v| !v.is_finite()) {
            return Err(format!("{name}: the row alone gave a non-finite output"));
        }
        let mut runs = 0;
        for m in 1..=64usize {
            let at = (m * 5 + 3) % m;
            let x_d = g(gpu.upload(&beside(&row, m, at, seed + 2 + m as u64)))?;
            for plan in plans(gpu, GemmShape { m, n, k })?.into_iter().filter(|p| p.name().starts_with("skinny")) {
                let gemm = g(Gemm::new(gpu, plan))?;
                let y = run(gpu, &gemm, &x_d, &w_d)?;
                let what = format!("{name}: row {at} of {}, against the row alone", label(&gemm));
                same_bits(&what, &y[at * n..][..n], &solo)?;
                runs += 1;
            }
        }
        println!("  {name} N {n} K {k}: {runs} runs at M 1..=64 give the row's bits{}", wgmma_left_out(gpu));
    }
    Ok(())
}

/// A plan for a shape, by one path.
type PlanAt = fn(GemmShape) -> gpu::Result<GemmPlan>;

/// Past 64 rows: a row alone (M = 1) and at M = 65, 130 and 256 in a later slab of the skinny
/// kernel, beside drawn, NaN and infinite rows, has the same bits, in the plain form and as decode
/// rows are planned (the shared-x form where it serves, and on a device that runs wgmma the
/// warpgroup form, from M = 33); in the wide form at M 65 to 256 and the class form on warpgroups
/// at M 65 to 128 (below 65 `batch_invariance` holds them to the default plan's row alone); through
/// the WGMMA kernel at M = 7 to 2100, at every place in its tile the M puts it; through cuBLASLt
/// pinned at one reference M, a row alone and at M = 7, 65, 300, 768 and 1000 has the same bits (so
/// a prefill chunk's rows do not depend on the chunks beside them); and pinned at the LM head's
/// reference (`HEAD_PIN_AT`, 64), whole and allowed to split K at the decode rows'
/// (`DECODE_PIN_AT`, 64), at the decode buckets' M 2 to 256, the reference itself included (so a
/// request's logits, and its decode rows where a weight's run cuBLASLt, do not depend on its
/// batch); for every weight of the model.
pub fn wide_batch_invariance(gpu: &Arc<Gpu>) -> Check {
    for (s, &(name, n, k)) in MODEL_SHAPES.iter().enumerate() {
        let seed = 7000 + 100 * s as u64;
        let w_d = g(gpu.upload(&draw_w(seed, n, k)))?;
        let row = draw_x(seed + 1, 1, k);
        let row_d = g(gpu.upload(&row))?;
        let paths: [(&str, PlanAt, &[usize]); 9] = [
            ("skinny", |s| GemmPlan::skinny(s, 132), &[65, 130, 256]),
            ("decode rows", |s| GemmPlan::decode_rows(s, 132, EpilogueKind::Store, false), &[65, 130, 256]),
            ("decode rows on wgmma", |s| GemmPlan::decode_rows(s, 132, EpilogueKind::Store, true), &[33, 65, 130, 256]),
            ("pinned cuBLASLt", |s| GemmPlan::cublaslt_pinned(s, PINNED_AT), &[7, 65, 300, 768, 1000]),
            ("head-pinned cuBLASLt", |s| GemmPlan::cublaslt_pinned(s, HEAD_PIN_AT), &[2, 8, 32, 64, 65, 128, 256]),
            (
                "decode-pinned cuBLASLt splitting K",
                |s| GemmPlan::cublaslt_pinned_split(s, DECODE_PIN_AT),
                &[2, 8, 32, 64, 65, 128, 256],
            ),
            ("wgmma", |s| GemmPlan::wgmma_epilogue(s, EpilogueKind::Store), &[7, 65, 128, 129, 300, 1000, 2100]),
            ("skinny wide", |s| GemmPlan::skinny_wide(s, EpilogueKind::Store), &[65, 100, 128, 129, 256]),
            ("skinny classes wg", |s| GemmPlan::skinny_classes_wg(s, EpilogueKind::Store), &[65, 100, 128]),
        ];
        for (path, plan, ms) in paths {
            if path == "wgmma" && !wgmma_serves(gpu, GemmShape { m: 1, n, k }) {
                println!("  {name}: this device runs no WGMMA GEMM; its invariance is not checked here");
                continue;
            }
            if path == "skinny wide" && (!runs_wgmma(gpu) || n > WIDE_MAX_N) {
                println!("  {name}: the wide form is not checked here (no wgmma, or past {WIDE_MAX_N} rows)");
                continue;
            }
            if path == "skinny classes wg" && (!runs_wgmma(gpu) || n > WIDE_MAX_N || k % SKINNY_CLASSES_WG_K != 0) {
                println!("  {name}: the class form on warpgroups is not checked here (no wgmma, N, or K)");
                continue;
            }
            if path == "decode rows on wgmma" && !runs_wgmma(gpu) {
                println!("  {name}: this device runs no wgmma; the warpgroup form is not checked here");
                continue;
            }
            let solo = run(gpu, &g(Gemm::new(gpu, g(plan(GemmShape { m: 1, n, k }))?))?, &row_d, &w_d)?;
            for &m in ms {
                let at = m - 1 - (m / 3);
                let gemm = g(Gemm::new(gpu, g(plan(GemmShape { m, n, k }))?))?;
                let y = run(gpu, &gemm, &g(gpu.upload(&beside(&row, m, at, seed + m as u64)))?, &w_d)?;
                same_bits(
                    &format!("{name}: row {at} of {}, against the row alone", label(&gemm)),
                    &y[at * n..][..n],
                    &solo,
                )?;
            }
            let names: Vec<String> =
                ms.iter().filter_map(|&m| plan(GemmShape { m, n, k }).ok()).map(|p| p.name()).collect();
            println!("  {name} N {n} K {k}: {path} ({names:?}) gives the row alone's bits at M {ms:?}");
        }
    }
    Ok(())
}

/// Two plans of one entry point share its function: the shared-x form at K = 1,024 (176 KB of
/// shared memory) runs, then the same form at K = 512 (110 KB) is loaded, and the first plan runs
/// again with the same bits (a later, smaller plan must not lower the function's limit).
pub fn a_later_smaller_plan_leaves_an_earlier_one_its_shared_memory(gpu: &Arc<Gpu>) -> Check {
    let sms = g(gpu.multiprocessors())?;
    let wide = GemmShape { m: 64, n: 1024, k: 1024 };
    let (x, w) = (g(gpu.upload(&draw_x(51, 64, 1024)))?, g(gpu.upload(&draw_w(52, 1024, 1024)))?);
    let first = g(Gemm::new(gpu, g(GemmPlan::skinny_shared_x(wide, EpilogueKind::Store, sms))?))?;
    let before = run(gpu, &first, &x, &w)?;
    let narrow = GemmShape { k: 512, ..wide };
    let second = g(Gemm::new(gpu, g(GemmPlan::skinny_shared_x(narrow, EpilogueKind::Store, sms))?))?;
    let (xs, ws) = (g(gpu.upload(&draw_x(53, 64, 512)))?, g(gpu.upload(&draw_w(54, 1024, 512)))?);
    run(gpu, &second, &xs, &ws)?;
    let after = run(gpu, &first, &x, &w).map_err(|e| format!("{} after {}: {e}", label(&first), label(&second)))?;
    same_bits(&format!("{} before and after {}", label(&first), label(&second)), &after, &before)?;
    println!("  {} ran again after {} was loaded, with its bits", label(&first), label(&second));
    Ok(())
}

/// The skinny kernel (LM head at M = 1, gate/up at 64, an odd shape at 17 under every
/// instantiation) and cuBLASLt (QKV at 128, down at 512, LM head at 512) run twice on the same
/// inputs, each time into a poisoned output: the same bits.
pub fn two_runs(gpu: &Arc<Gpu>) -> Check {
    let cases = [(151_936, 1024, 1, false), (6144, 1024, 64, false), (777, 1032, 17, false)].into_iter().chain([
        (2048, 1024, 128, true),
        (1024, 3072, 512, true),
        (151_936, 1024, 512, true),
    ]);
    for (i, (n, k, m, wide)) in cases.enumerate() {
        let shape = GemmShape { m, n, k };
        let seed = 4000 + i as u64;
        let (x_d, w_d) = (g(gpu.upload(&draw_x(seed, m, k)))?, g(gpu.upload(&draw_w(seed, n, k)))?);
        let chosen = if wide { vec![g(GemmPlan::cublaslt(shape))?] } else { plans(gpu, shape)? };
        for plan in chosen.into_iter().filter(|p| wide || p.name().starts_with("skinny")) {
            let gemm = g(Gemm::new(gpu, plan))?;
            let first = run(gpu, &gemm, &x_d, &w_d)?;
            let second = run(gpu, &gemm, &x_d, &w_d)?;
            same_bits(&format!("second run of {}", label(&gemm)), &second, &first)?;
        }
    }
    Ok(())
}

/// Bad shapes are refused by the plans, and buffers of the wrong size or alignment by
/// `Gemm::run` before anything is launched (the output stays poisoned), on both paths.
pub fn refusals(gpu: &Arc<Gpu>) -> Check {
    let sms = g(gpu.multiprocessors())?;
    let shape = |m, n, k| GemmShape { m, n, k };
    let plan = |s| gemm_default::default_plan(s, sms, runs_wgmma(gpu));
    refused("M = 0", plan(shape(0, 64, 64)), "`m`")?;
    refused("N = 0", plan(shape(4, 0, 64)), "`n`")?;
    refused("K = 12", plan(shape(4, 64, 12)), "`k` must be a positive multiple of 8")?;
    refused("K = 0", GemmPlan::cublaslt(shape(200, 64, 0)), "`k`")?;
    refused("skinny rows 32 at M = 64", GemmPlan::skinny_rows(shape(64, 64, 64), 32), "`rows`")?;
    for m in [4usize, 65] {
        let s = shape(m, 64, 64);
        let gemm = g(Gemm::new(gpu, default_plan(gpu, s)?))?;
        let x = g(gpu.upload(&draw_x(5000, m, 64)))?;
        let w = g(gpu.upload(&draw_w(5000, 64, 64)))?;
        let mut y = g(gpu.upload(&vec![POISON; m * 64]))?;
        let name = gemm.plan().name();
        let short = x.slice(..m * 64 - 8);
        refused(&name, gemm.run(&short, &w.as_view(), &mut y.as_view_mut()), "`x` has")?;
        refused(&name, gemm.run(&x.as_view(), &w.slice(8..), &mut y.as_view_mut()), "`w` has")?;
        refused(&name, gemm.run(&x.as_view(), &w.as_view(), &mut y.slice_mut(1..)), "`y` has")?;
        let padded = g(gpu.upload(&draw_x(5001, m * 64 + 1, 1)))?;
        let odd = padded.slice(1..);
        refused(&name, gemm.run(&odd, &w.as_view(), &mut y.as_view_mut()), "`x` must start on a 16-byte boundary")?;
        if !g(gpu.download(&y))?.iter().all(|v| v.to_bits() == POISON.to_bits()) {
            return Err(format!("{name}: a refused run wrote the output"));
        }
    }
    Ok(())
}

/// A skinny GEMM (QKV, M = 8) and a cuBLASLt one (QKV, M = 128) captured into CUDA graphs with
/// `Gpu::capture`: two replays, each into a re-poisoned output, give the eager run's bits.
pub fn graph_replay(gpu: &Arc<Gpu>) -> Check {
    let (_, n, k) = MODEL_SHAPES[0];
    for (i, m) in [8usize, 128].into_iter().enumerate() {
        let shape = GemmShape { m, n, k };
        let gemm = g(Gemm::new(gpu, default_plan(gpu, shape)?))?;
        let seed = 6000 + i as u64;
        let (x, w) = (g(gpu.upload(&draw_x(seed, m, k)))?, g(gpu.upload(&draw_w(seed, n, k)))?);
        let eager = run(gpu, &gemm, &x, &w)?;
        let poison = vec![POISON; m * n];
        let mut y = g(gpu.upload(&poison))?;
        let graph = g(gpu.capture(|| gemm.run(&x.as_view(), &w.as_view(), &mut y.as_view_mut())))?;
        for replay in 0..2 {
            g(gpu.stream().memcpy_htod(&poison, &mut y).map_err(gpu::Error::from))?;
            g(graph.launch())?;
            let got = g(gpu.download(&y))?;
            same_bits(&format!("replay {replay} of {}", label(&gemm)), &got, &eager)?;
        }
    }
    Ok(())
}
