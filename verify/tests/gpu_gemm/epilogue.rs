//! The fused epilogues of the skinny and the WGMMA kernels held to the unfused sequence they
//! replace, bit for bit: the same kernel's plain GEMM (the Store epilogue) into a buffer, then the
//! standalone kernel of `gpu::ops` on it. Fresh bf16 inputs, every output poisoned with NaN first,
//! every element, at M = 1, 3, 8, 17, 32, 64, 65, 128 (and 300 for WGMMA) on asynct-0.5b's
//! shapes, under every rows per CTA the skinny epilogue takes at that M in both of its forms (the
//! model's choice among them), and through the WGMMA kernel where the device runs it. Plus the
//! refusals of `run_with`.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaViewMut};
use gpu::gemm::{Epilogue, EpilogueKind, Gemm, GemmPath, GemmPlan, GemmShape, SkinnyForm, SKINNY_ROWS};
use gpu::ops::{
    Faults, HeadShape, PeriLn, QkNormRopeCache, QkvInputs, QkvOutputs, RopeTable, SiluMul, UClipNormParams,
};
use gpu::Gpu;
use half::bf16;
use verify::gpu_harness::refused;
use verify::rng::Counter;

use super::device::{g, runs_wgmma, weight_for, wgmma_left_out, wgmma_serves, Check};
use super::reference::{draw_w, draw_x, same_bits, uniform_bf16, POISON};

/// The batch sizes every epilogue is checked at: one row, odd rows, each x tile, and slabs (the
/// skinny kernel's below 65, the WGMMA kernel's tiles of 128 past it).
const MS: [usize; 9] = [1, 3, 8, 17, 32, 64, 65, 128, 300];

/// The plans of `kind` for `shape`, each family with the plain plan whose output its fused plans
/// must reproduce: the skinny kernel at M up to 128 (every rows of W per CTA the epilogue takes at
/// this M, plain, staged (to 8 rows), three CTAs an SM (where instantiated), shared-x and (where
/// the device runs wgmma) warpgroup, wide and the class forms (the wide form and the class form
/// on warpgroups reading the class-step copy), the model's on `sms` SMs
/// among them, against the plain form's Store plan), and the WGMMA kernel where `gpu` runs it
/// (against its own Store plan).
fn epilogue_plans(
    gpu: &Gpu,
    shape: GemmShape,
    kind: EpilogueKind,
    sms: usize,
) -> Result<Vec<(GemmPlan, Vec<GemmPlan>)>, String> {
    let mut families = Vec::new();
    if shape.m <= 128 {
        let plain = SKINNY_ROWS.into_iter().flat_map(|rows| {
            [
                GemmPlan::skinny_rows_epilogue(shape, rows, kind).ok(),
                GemmPlan::skinny_staged(shape, rows, kind).ok(),
                GemmPlan::skinny_three_ctas(shape, rows, kind).ok(),
            ]
        });
        let plain = plain.flatten();
        let wgmma = runs_wgmma(gpu);
        let warpgroup = GemmPlan::skinny_wgmma(shape, kind).ok().filter(|_| wgmma);
        let wide = GemmPlan::skinny_wide(shape, kind).ok().filter(|_| wgmma);
        let classes = GemmPlan::skinny_classes(shape, kind).ok().filter(|_| wgmma);
        let classes_wg = GemmPlan::skinny_classes_wg(shape, kind).ok().filter(|_| wgmma);
        let plans: Vec<GemmPlan> = plain
            .chain(GemmPlan::skinny_shared_x(shape, kind, sms).ok())
            .chain(warpgroup)
            .chain(wide)
            .chain(classes)
            .chain(classes_wg)
            .collect();
        let chosen = g(GemmPlan::decode_rows(shape, sms, kind, wgmma))?;
        if !plans.contains(&chosen) {
            return Err(format!(
                "{kind:?} {shape}: the dispatcher's {} is not among {} plans",
                chosen.name(),
                plans.len()
            ));
        }
        families.push((g(GemmPlan::skinny(shape, sms))?, plans));
    }
    if wgmma_serves(gpu, shape) {
        let plain = g(GemmPlan::wgmma_epilogue(shape, EpilogueKind::Store))?;
        families.push((plain, vec![g(GemmPlan::wgmma_epilogue(shape, kind))?]));
    }
    Ok(families)
}

/// A fused plan for messages: its name (the skinny kernel's holds its rows of W per CTA).
fn rows(plan: &GemmPlan) -> String {
    match &plan.path {
        GemmPath::Skinny(t) if t.form == SkinnyForm::SharedX => format!("{} shared-x", t.rows),
        GemmPath::Skinny(t) if t.form == SkinnyForm::Warpgroup => format!("{} warpgroup", t.rows),
        GemmPath::Skinny(t) if t.form == SkinnyForm::Wide => format!("{} wide", t.rows),
        GemmPath::Skinny(t) if t.form == SkinnyForm::Staged => format!("{} staged", t.rows),
        GemmPath::Skinny(t) if t.form == SkinnyForm::ThreeCtas => format!("{} three CTAs an SM", t.rows),
        GemmPath::Skinny(t) => t.rows.to_string(),
        _ => plan.name(),
    }
}

/// A buffer of `n` poisoned elements.
fn poisoned(gpu: &Gpu, n: usize) -> Result<CudaSlice<bf16>, String> {
    g(gpu.upload(&vec![POISON; n]))
}

/// Fails if any of `got` is not finite: an output left poisoned (NaN) or never written.
fn all_finite(what: &str, got: &[bf16]) -> Check {
    match got.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(i) => Err(format!("{what}[{i}] = {} (bits {:#06x})", got[i], got[i].to_bits())),
    }
}

/// UClipNorm parameters over `channels`, bf16-exact: alpha of either sign, 0.25 to 1.75 (GEMM
/// outputs of a few units then clip often), weight of either sign, 0.5 to 1.5, bias within 0.5;
/// alpha, weight and bias each `[C]` when `per_channel`, else alpha and weight `[1]` and no bias.
pub fn norm(gpu: &Gpu, seed: u64, channels: usize, per_channel: bool) -> Result<UClipNormParams, String> {
    let values = |stream: u64, n: usize, lo: f64, hi: f64| -> Vec<f32> {
        let c = Counter::new(seed, stream);
        (0..n)
            .map(|i| {
                let u = c.uniform(&[i as u64]);
                let v = (lo + (hi - lo) * u.abs()).copysign(u);
                bf16::from_f64(v).to_f32()
            })
            .collect()
    };
    let len = if per_channel { channels } else { 1 };
    let (alpha, weight) = (values(1, len, 0.25, 1.75), values(2, len, 0.5, 1.5));
    let bias = per_channel.then(|| values(3, channels, 0.0, 0.5));
    g(UClipNormParams::upload(gpu, "drawn", channels, &alpha, &weight, bias.as_deref()))
}

/// o_proj (N 1024, K 1024) and down_proj (N 1024, K 3072) with the Peri-LN residual step fused,
/// against the plain skinny GEMM then `PeriLn::residual`: `x_out` and `h_out` have the same
/// bits, every element written, the residual untouched; the norms per channel (alpha, weight
/// and bias) after and scalar before, then the other way round.
pub fn periln(gpu: &Arc<Gpu>) -> Check {
    let sms = g(gpu.multiprocessors())?;
    let op = g(PeriLn::new(gpu))?;
    for (s, (name, n, k)) in [("o_proj", 1024usize, 1024usize), ("down_proj", 1024, 3072)].into_iter().enumerate() {
        let seed = 9000 + 100 * s as u64;
        let w = g(gpu.upload(&draw_w(seed, n, k)))?;
        let mut runs = 0;
        for (i, m) in MS.into_iter().enumerate() {
            let shape = GemmShape { m, n, k };
            let seed = seed + 10 * i as u64;
            let x = g(gpu.upload(&draw_x(seed, m, k)))?;
            let residual_host = uniform_bf16(seed, 3, m * n, 4.0);
            let residual = g(gpu.upload(&residual_host))?;
            for per_channel_after in [true, false] {
                let after = norm(gpu, seed + 1, n, per_channel_after)?;
                let before = norm(gpu, seed + 2, n, !per_channel_after)?;
                let label =
                    format!("{name} M {m}, per-channel norm {}", if per_channel_after { "after" } else { "before" });

                for (plain, fused_plans) in epilogue_plans(gpu, shape, EpilogueKind::PeriLn, sms)? {
                    let plain = g(Gemm::new(gpu, plain))?;
                    let mut a = poisoned(gpu, m * n)?;
                    g(plain.run(&x.as_view(), &w.as_view(), &mut a.as_view_mut()))?;
                    let (mut x_want, mut h_want) = (poisoned(gpu, m * n)?, poisoned(gpu, m * n)?);
                    g(op.residual(
                        &a.as_view(),
                        &residual.as_view(),
                        &after,
                        &before,
                        &mut x_want.as_view_mut(),
                        &mut h_want.as_view_mut(),
                    ))?;
                    let (x_want, h_want) = (g(gpu.download(&x_want))?, g(gpu.download(&h_want))?);
                    all_finite(&format!("unfused x_out {label}"), &x_want)?;

                    for plan in fused_plans {
                        let r = rows(&plan);
                        let fused = g(Gemm::new(gpu, plan))?;
                        let class_steps = weight_for(gpu, fused.plan(), &w)?;
                        let (mut x_out, mut h_out) = (poisoned(gpu, m * n)?, poisoned(gpu, m * n)?);
                        g(fused.run_with(
                            &x.as_view(),
                            &class_steps.as_ref().unwrap_or(&w).as_view(),
                            Epilogue::PeriLn {
                                x: residual.as_view(),
                                after: &after,
                                before: &before,
                                x_out: x_out.as_view_mut(),
                                h_out: h_out.as_view_mut(),
                            },
                        ))?;
                        let (x_got, h_got) = (g(gpu.download(&x_out))?, g(gpu.download(&h_out))?);
                        all_finite(&format!("x_out {label} rows {r}"), &x_got)?;
                        all_finite(&format!("h_out {label} rows {r}"), &h_got)?;
                        same_bits(&format!("x_out {label} rows {r}"), &x_got, &x_want)?;
                        same_bits(&format!("h_out {label} rows {r}"), &h_got, &h_want)?;
                        runs += 1;
                    }
                }
            }
            same_bits(&format!("{name} M {m}: the residual"), &g(gpu.download(&residual))?, &residual_host)?;
        }
        println!("  {name} N {n} K {k}: {runs} fused runs give the unfused bits{}", wgmma_left_out(gpu));
    }
    Ok(())
}

/// gate/up (N 6144 = 2 I, K 1024) with the SiLU-multiply fused, against the plain skinny GEMM
/// then `SiluMul::run` on its `[M, 2 I]` output (the interleaved layout both read): the same bits,
/// every element written.
pub fn silu_mul(gpu: &Arc<Gpu>) -> Check {
    let sms = g(gpu.multiprocessors())?;
    let op = g(SiluMul::new(gpu))?;
    let (n, k) = (6144usize, 1024usize);
    let inter = n / 2;
    let seed = 9500;
    let w = g(gpu.upload(&draw_w(seed, n, k)))?;
    let mut runs = 0;
    for (i, m) in MS.into_iter().enumerate() {
        let shape = GemmShape { m, n, k };
        let x = g(gpu.upload(&draw_x(seed + 1 + i as u64, m, k)))?;
        for (plain, fused_plans) in epilogue_plans(gpu, shape, EpilogueKind::SiluMul, sms)? {
            let plain = g(Gemm::new(gpu, plain))?;
            let mut gate_up = poisoned(gpu, m * n)?;
            g(plain.run(&x.as_view(), &w.as_view(), &mut gate_up.as_view_mut()))?;
            let mut want = poisoned(gpu, m * inter)?;
            g(op.run(&gate_up.as_view(), inter, &mut want.as_view_mut()))?;
            let want = g(gpu.download(&want))?;
            all_finite(&format!("unfused gate/up M {m}"), &want)?;
            for plan in fused_plans {
                let label = format!("gate/up M {m} rows {}", rows(&plan));
                let fused = g(Gemm::new(gpu, plan))?;
                let class_steps = weight_for(gpu, fused.plan(), &w)?;
                let w = class_steps.as_ref().unwrap_or(&w);
                let mut out = poisoned(gpu, m * inter)?;
                g(fused.run_with(&x.as_view(), &w.as_view(), Epilogue::SiluMul { out: out.as_view_mut() }))?;
                let got = g(gpu.download(&out))?;
                all_finite(&label, &got)?;
                same_bits(&label, &got, &want)?;
                runs += 1;
            }
        }
    }
    println!("  gate/up N {n} K {k}: {runs} fused runs give the unfused bits{}", wgmma_left_out(gpu));
    Ok(())
}

/// One QKV step's device inputs and poisoned outputs.
struct QkvStep {
    positions: CudaSlice<i32>,
    slot_list: Vec<i64>,
    slots: CudaSlice<i64>,
    q: CudaSlice<bf16>,
    key_cache: CudaSlice<bf16>,
    value_cache: CudaSlice<bf16>,
}

impl QkvStep {
    /// `m` tokens at positions drawn below `max_pos`, each at a distinct shuffled slot of a cache
    /// of `num_slots`, every fifth token padding (slot -1); `bad` puts token 0 past the table and
    /// token 1 past the cache.
    fn new(gpu: &Gpu, seed: u64, m: usize, heads: HeadShape, max_pos: usize, bad: bool) -> Result<Self, String> {
        let num_slots = qkv_slots(m);
        let pick = Counter::new(seed, 21);
        let mut positions: Vec<i32> = (0..m).map(|t| pick.below(max_pos as u64, &[t as u64]) as i32).collect();
        positions[0] = max_pos as i32 - 1;
        let perm = Counter::new(seed, 22).permutation(num_slots);
        let mut slots: Vec<i64> = (0..m).map(|t| if t % 5 == 2 { -1 } else { perm[t] as i64 }).collect();
        if bad {
            positions[0] = max_pos as i32 + 3;
            slots[1] = (num_slots + 7) as i64;
        }
        let cache = num_slots * heads.num_kv_heads * heads.head_dim;
        Ok(Self {
            positions: g(gpu.upload(&positions))?,
            slots: g(gpu.upload(&slots))?,
            slot_list: slots,
            q: poisoned(gpu, m * heads.q_width())?,
            key_cache: poisoned(gpu, cache)?,
            value_cache: poisoned(gpu, cache)?,
        })
    }

    /// q, the key cache and the value cache, downloaded.
    fn written(&self, gpu: &Gpu) -> Result<[Vec<bf16>; 3], String> {
        Ok([g(gpu.download(&self.q))?, g(gpu.download(&self.key_cache))?, g(gpu.download(&self.value_cache))?])
    }
}

/// The cache slots of a QKV step of `m` tokens: three spare blocks of 16.
fn qkv_slots(m: usize) -> usize {
    (m / 16 + 3) * 16
}

/// The fault word's report after a step (`None` when clean), which clears it.
fn fault_report(faults: &mut Faults) -> Option<String> {
    faults.check().err().map(|e| e.to_string())
}

/// QKV (asynct-0.5b: Hq 8, Hkv 4, D 128, so N 2048, K 1024) with the q/k norm + RoPE + cache
/// write fused, against the plain skinny GEMM then `QkNormRopeCache::run`: q and both whole caches
/// have the same bits (padding tokens and unmapped slots left poisoned alike, every slot a
/// token maps to written), and the fault word reports the same; the q norm per channel and the k
/// norm scalar, then the other way round, and at M = 3 a position past the table and a slot past
/// the cache.
pub fn qk_norm_rope_cache(gpu: &Arc<Gpu>) -> Check {
    let sms = g(gpu.multiprocessors())?;
    let heads = HeadShape { num_heads: 8, num_kv_heads: 4, head_dim: 128 };
    let (n, k, max_pos) = (heads.qkv_width(), 1024usize, 4096usize);
    let op = g(QkNormRopeCache::new(gpu, heads, g(RopeTable::new(gpu, heads.head_dim, max_pos, 1e6))?))?;
    let mut faults = g(Faults::new(gpu))?;
    let seed = 9700;
    let w = g(gpu.upload(&draw_w(seed, n, k)))?;
    let mut runs = 0;
    for (i, m) in MS.into_iter().enumerate() {
        let shape = GemmShape { m, n, k };
        let seed = seed + 10 * i as u64;
        let x = g(gpu.upload(&draw_x(seed, m, k)))?;
        for (plain, fused_plans) in epilogue_plans(gpu, shape, EpilogueKind::QkNormRopeCache, sms)? {
            let plain = g(Gemm::new(gpu, plain))?;
            let mut qkv = poisoned(gpu, m * n)?;
            g(plain.run(&x.as_view(), &w.as_view(), &mut qkv.as_view_mut()))?;
            for (variant, per_channel_q) in [(0u64, true), (1, false)] {
                let q_norm = norm(gpu, seed + 1 + variant, heads.head_dim, per_channel_q)?;
                let k_norm = norm(gpu, seed + 3 + variant, heads.head_dim, !per_channel_q)?;
                let bad = m == 3 && variant == 0;
                let label = format!(
                    "qkv M {m}, per-channel {} norm{}",
                    if per_channel_q { "q" } else { "k" },
                    if bad { ", bad inputs" } else { "" }
                );

                let mut want = QkvStep::new(gpu, seed, m, heads, max_pos, bad)?;
                let inputs = QkvInputs {
                    qkv: qkv.as_view(),
                    positions: want.positions.as_view(),
                    slot_mapping: want.slots.as_view(),
                };
                let mut outputs = QkvOutputs {
                    q: Some(want.q.as_view_mut()),
                    key_cache: want.key_cache.as_view_mut(),
                    value_cache: want.value_cache.as_view_mut(),
                };
                g(op.run(&q_norm, &k_norm, &inputs, &mut outputs, &mut faults))?;
                let want_faults = fault_report(&mut faults);
                if want_faults.is_some() != bad {
                    return Err(format!("unfused {label}: fault word {want_faults:?}"));
                }
                let slots = want.slot_list.clone();
                let want = want.written(gpu)?;
                all_finite(&format!("unfused q {label}"), &want[0])?;
                check_slots(&label, heads, &slots, &want[1], &want[2])?;

                for plan in &fused_plans {
                    let plan = plan.clone();
                    let label = format!("{label} rows {}", rows(&plan));
                    let fused = g(Gemm::new(gpu, plan))?;
                    let class_steps = weight_for(gpu, fused.plan(), &w)?;
                    let mut got = QkvStep::new(gpu, seed, m, heads, max_pos, bad)?;
                    g(fused.run_with(
                        &x.as_view(),
                        &class_steps.as_ref().unwrap_or(&w).as_view(),
                        Epilogue::QkNormRopeCache {
                            heads,
                            rope: op.rope(),
                            q_norm: &q_norm,
                            k_norm: &k_norm,
                            positions: got.positions.as_view(),
                            slot_mapping: got.slots.as_view(),
                            q: got.q.as_view_mut(),
                            key_cache: got.key_cache.as_view_mut(),
                            value_cache: got.value_cache.as_view_mut(),
                            faults: &mut faults,
                        },
                    ))?;
                    let got_faults = fault_report(&mut faults);
                    if got_faults != want_faults {
                        return Err(format!("{label}: fault word {got_faults:?}, unfused {want_faults:?}"));
                    }
                    let got = got.written(gpu)?;
                    for ((what, got), want) in ["q", "key cache", "value cache"].into_iter().zip(&got).zip(&want) {
                        same_bits(&format!("{what} {label}"), got, want)?;
                    }
                    runs += 1;
                }
            }
        }
    }
    println!("  qkv N {n} K {k}: {runs} fused runs give the unfused bits{}", wgmma_left_out(gpu));
    Ok(())
}

/// After the unfused write of a step whose tokens map to `slots`: every slot of the caches a
/// token maps to holds finite keys and values, every other slot is still poisoned, so that the
/// bitwise comparison with the fused write covers both.
fn check_slots(label: &str, heads: HeadShape, slots: &[i64], key_cache: &[bf16], value_cache: &[bf16]) -> Check {
    let width = heads.num_kv_heads * heads.head_dim;
    for s in 0..key_cache.len() / width {
        let mapped = slots.contains(&(s as i64));
        for (what, cache) in [("key", key_cache), ("value", value_cache)] {
            let slot = &cache[s * width..][..width];
            let ok = if mapped {
                slot.iter().all(|v| v.is_finite())
            } else {
                slot.iter().all(|v| v.to_bits() == POISON.to_bits())
            };
            if !ok {
                return Err(format!(
                    "unfused {label}: {what} slot {s} (mapped: {mapped}) is not what the write leaves"
                ));
            }
        }
    }
    Ok(())
}

/// The Peri-LN epilogue over `residual`.
fn periln_over<'a>(
    residual: &'a CudaSlice<bf16>,
    x_out: CudaViewMut<'a, bf16>,
    h_out: CudaViewMut<'a, bf16>,
    after: &'a UClipNormParams,
    before: &'a UClipNormParams,
) -> Epilogue<'a> {
    Epilogue::PeriLn { x: residual.as_view(), after, before, x_out, h_out }
}

/// `run_with` refuses, before launching (the outputs stay poisoned): an epilogue the plan was not
/// made for (both ways, and on a cuBLASLt plan), buffers of the wrong length or alignment (a
/// SiluMul output as wide as the GEMM's among them), and norms over the wrong channels.
pub fn refusals(gpu: &Arc<Gpu>) -> Check {
    let sms = g(gpu.multiprocessors())?;
    let (m, n, k) = (4usize, 64usize, 64usize);
    let shape = GemmShape { m, n, k };
    let x = g(gpu.upload(&draw_x(11, m, k)))?;
    let w = g(gpu.upload(&draw_w(11, n, k)))?;
    let residual = g(gpu.upload(&draw_x(12, m, n)))?;
    let (after, before, narrow) = (norm(gpu, 1, n, true)?, norm(gpu, 2, n, false)?, norm(gpu, 3, n / 2, true)?);
    let store = g(Gemm::new(gpu, g(GemmPlan::skinny(shape, sms))?))?;
    let fused = g(Gemm::new(gpu, g(GemmPlan::skinny_epilogue(shape, sms, EpilogueKind::PeriLn))?))?;
    let lt = g(Gemm::new(gpu, g(GemmPlan::cublaslt(shape))?))?;
    let (mut y, mut x_out, mut h_out) = (poisoned(gpu, m * n)?, poisoned(gpu, m * n)?, poisoned(gpu, m * n)?);
    let mut big = poisoned(gpu, m * n + 8)?;

    let (xv, wv) = (x.as_view(), w.as_view());
    refused("Store on a PeriLn plan", fused.run(&xv, &wv, &mut y.as_view_mut()), "epilogue is PeriLn")?;
    refused(
        "PeriLn on a Store plan",
        store.run_with(&xv, &wv, periln_over(&residual, x_out.as_view_mut(), h_out.as_view_mut(), &after, &before)),
        "epilogue is Store",
    )?;
    refused(
        "PeriLn on a cuBLASLt plan",
        lt.run_with(&xv, &wv, periln_over(&residual, x_out.as_view_mut(), h_out.as_view_mut(), &after, &before)),
        "epilogue is Store",
    )?;
    refused(
        "a short x_out",
        fused.run_with(&xv, &wv, periln_over(&residual, x_out.slice_mut(8..), h_out.as_view_mut(), &after, &before)),
        "`x_out` has",
    )?;
    refused(
        "a misaligned h_out",
        fused.run_with(
            &xv,
            &wv,
            periln_over(&residual, x_out.as_view_mut(), big.slice_mut(1..m * n + 1), &after, &before),
        ),
        "`h_out` must start on a 16-byte boundary",
    )?;
    refused(
        "an after norm over N / 2",
        fused.run_with(&xv, &wv, periln_over(&residual, x_out.as_view_mut(), h_out.as_view_mut(), &narrow, &before)),
        "the `after` norm has 32 channels",
    )?;
    let short = Epilogue::PeriLn {
        x: residual.slice(8..),
        after: &after,
        before: &before,
        x_out: x_out.as_view_mut(),
        h_out: h_out.as_view_mut(),
    };
    refused("a short residual", fused.run_with(&xv, &wv, short), "`x (the residual)` has")?;
    let silu = g(Gemm::new(gpu, g(GemmPlan::skinny_epilogue(shape, sms, EpilogueKind::SiluMul))?))?;
    refused(
        "a SiluMul out of N columns, not N / 2",
        silu.run_with(&xv, &wv, Epilogue::SiluMul { out: y.as_view_mut() }),
        "`out` has 256 elements, 128",
    )?;
    for (what, got) in [("y", &y), ("x_out", &x_out), ("h_out", &h_out)] {
        if !g(gpu.download(got))?.iter().all(|v| v.to_bits() == POISON.to_bits()) {
            return Err(format!("a refused run wrote `{what}`"));
        }
    }
    Ok(())
}
