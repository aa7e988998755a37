//! The tensor-core prefill paths (MMA and WGMMA) and the step dispatcher held against the f64
//! oracle (SPEC sections 4 and 6, issue 4). Without a GPU every check says it skipped.
//!
//! Checks: a few small cases of each path (for compute-sanitizer); a targeted grid (1 to 64
//! sequences, query lengths 1 to 8K, prefixes 0 to 8K, mixed in one batch, GQA 1 to 8, D 64,
//! 128 and 256, blocks of 2 to 32 (under 16 keys the WGMMA loads look each key's block up),
//! every FIR length, gate zero fractions under 10% and over 95%); two runs giving the same bits;
//! a sequence giving the same bits alone and in a batch; and the dispatcher's choices with their
//! fallbacks (short queries to fake decode, D = 256 to MMA where WGMMA is not built for it),
//! each choice agreeing with the oracle; each kernel norming and rotating its queries from a
//! qkv buffer itself giving the bits it gives on the queries `qk_norm_rope_cache` normed; and the
//! WGMMA kernel's clamp of bf16 pairs giving the bits of its f32 gate; and an output off a
//! 16-byte boundary refused by name (the WGMMA kernel stores it in 16-byte pieces). The
//! drawn cases of `gpu_attention` run these paths too (they are in `gpu_paths`).

use std::fmt::Display;
use std::sync::Arc;

use gpu::attention::{
    prefill_path, AttnBuffers, Hp1Prefill, LayerBuffers, PrefillKernel, PrefillOperands, PrefillPath, PrefillPlan,
    QueryNorm, FAKE_DECODE_MAX_QUERY,
};
use gpu::ops::{Faults, HeadShape, QkNormRopeCache, QkvInputs, QkvOutputs, RopeTable, UClipNormParams};
use gpu::Gpu;
use half::bf16;
use model::gpu_backend::step_buffers::positions;
use verify::gpu_cases::{alone, case, check_cases, decodes, spread};
use verify::gpu_harness::{refused, run, GpuCheck};
use verify::gpu_paths::HostCase;
use verify::gpu_paths::{
    prefill_kinds, run_step, same_bits, step_geometry, widen_bits, GpuPath, TENSOR_CORE_TOLERANCE,
};
use verify::rng::Counter;
use verify::{compare, Bound, Case, Path, Reference};

type Check = Result<(), String>;

fn main() {
    let checks: &[GpuCheck] = &[
        ("sanitize_prefill_paths_on_a_few_small_cases", sanitize_cases),
        ("prefill_paths_agree_with_the_oracle_on_the_targeted_grid", targeted_grid),
        ("prefill_two_runs_give_the_same_bits", same_bits_twice),
        ("prefill_a_sequence_gives_the_same_bits_alone_and_in_a_batch", same_bits_alone_and_batched),
        ("the_step_dispatcher_falls_back_and_agrees_with_the_oracle", dispatcher_choices),
        ("prefill_norming_its_queries_gives_the_bits_of_the_normed_queries", norming_queries),
        ("prefill_wgmma_clamping_after_rounding_gives_the_bits_of_the_f32_gate", late_clamp),
        ("a_prefill_output_off_a_16_byte_boundary_is_refused_before_any_launch", misaligned_output),
    ];
    run("gpu_prefill", checks);
}

fn msg(e: impl Display) -> String {
    e.to_string()
}

/// The prefill paths (a path whose kernel this device cannot run supports no case; `kernels`
/// says so).
fn prefill_paths(gpu: &Arc<Gpu>) -> Vec<Box<dyn Path>> {
    kernels(gpu);
    prefill_kinds().into_iter().map(|k| Box::new(GpuPath::new(gpu, k)) as Box<dyn Path>).collect()
}

/// The kernels this device runs; prints the ones it does not, so their absence is seen.
fn kernels(gpu: &Gpu) -> Vec<PrefillKernel> {
    let cc = gpu.info().compute_capability;
    let (run, skipped): (Vec<_>, Vec<_>) =
        [PrefillKernel::Mma, PrefillKernel::Wgmma].into_iter().partition(|k| k.runs_on(cc));
    for k in skipped {
        println!("  {}: SKIPPED, compute capability {}.{} does not run it", k.name(), cc.0, cc.1);
    }
    run
}

/// A few small cases of every path, quick enough under compute-sanitizer
/// (`scripts/device-run.sh sanitize` selects this check by its name).
fn sanitize_cases(gpu: &Arc<Gpu>) -> Check {
    let cases = vec![
        case(&[(0, 70), (33, 5), (10, 1)], (8, 4), 128, 16, 101),
        Case { relu_pre: false, fir_k: 8, ..case(&[(100, 130)], (4, 1), 64, 32, 102) },
        case(&[(17, 65), (0, 3)], (2, 2), 256, 16, 103),
        case(&[(21, 90)], (8, 4), 128, 8, 104),
    ];
    check_cases(&prefill_paths(gpu), &cases).map(|_| ())
}

fn targeted_grid(gpu: &Arc<Gpu>) -> Check {
    let mixed = |n: usize, max_prefix: usize, max_query: usize, seed: usize| -> Vec<(usize, usize)> {
        spread(n, max_prefix + 1, seed)
            .into_iter()
            .zip(spread(n, max_query, seed + 1))
            .map(|(p, q)| (p - 1, q))
            .collect()
    };
    let mut cases = vec![
        // One long prefill, and one long chunk after a long prefix.
        case(&[(0, 8192)], (2, 1), 64, 16, 201),
        case(&[(8192, 700)], (4, 2), 128, 32, 202),
        // Many sequences of mixed prefixes and queries, decode rows among them.
        case(&mixed(64, 300, 120, 3), (8, 4), 128, 16, 203),
        case(&mixed(16, 2000, 400, 4), (8, 1), 64, 32, 204),
        case(&mixed(6, 1000, 1500, 5), (8, 8), 256, 16, 205),
        case(&[(0, 1), (5, 64), (0, 65), (63, 128), (1000, 1)], (6, 3), 128, 16, 206),
        case(&[(4097, 3000), (0, 2500)], (8, 2), 128, 16, 207),
        Case { fir_k: 1, clip_min: 0.125, ..case(&[(40, 300), (0, 200)], (16, 8), 64, 16, 208) },
        Case { fir_k: 5, relu_pre: false, clip_min: -0.5, ..case(&[(9, 250)], (4, 4), 256, 32, 209) },
        Case { fir_k: 8, ..case(&[(130, 257), (0, 191)], (8, 2), 128, 32, 210) },
        case(&decodes(&spread(24, 3000, 11)), (8, 4), 128, 16, 211),
        // Blocks under 16 keys: each key of a load looks its block up.
        case(&[(37, 150), (0, 70)], (8, 4), 128, 8, 214),
        case(&[(5, 200), (64, 33)], (4, 2), 64, 2, 215),
    ];
    // Gate zero fractions at both ends, as in gpu_attention's grid.
    let few_zeros = Case {
        q_mean: 1.0,
        sigma: vec![0.25; 8],
        clip_max: 8.0,
        ..case(&[(100, 400), (0, 300)], (8, 4), 128, 16, 212)
    };
    let most_zeros = Case { q_mean: -0.1875, ..case(&[(100, 400), (0, 300)], (8, 4), 128, 16, 213) };
    cases.extend([few_zeros, most_zeros]);
    let zero_fractions = check_cases(&prefill_paths(gpu), &cases)?.zero_fractions;
    let n = zero_fractions.len();
    match (zero_fractions.get(n.wrapping_sub(2)), zero_fractions.last()) {
        (Some(&few), Some(&most)) if few < 0.1 && most > 0.95 => Ok(()),
        other => Err(format!("zero fractions of the last two cases should be < 10% and > 95%, got {other:?}")),
    }
}

fn forced(data: &verify::CaseData, kernel: PrefillKernel) -> Result<PrefillPath, String> {
    Ok(PrefillPath::Prefill(PrefillPlan::new(step_geometry(data), kernel).map_err(msg)?))
}

fn same_bits_twice(gpu: &Arc<Gpu>) -> Check {
    let c = case(&[(300, 200), (0, 129), (77, 1)], (8, 4), 128, 16, 301);
    let data = c.materialise().map_err(msg)?;
    for kernel in kernels(gpu) {
        let plan = forced(&data, kernel)?;
        let a = run_step(gpu, &data, &plan).map_err(msg)?;
        let b = run_step(gpu, &data, &plan).map_err(msg)?;
        if !same_bits(&a, &b) {
            return Err(format!("two runs of {} differ", kernel.name()));
        }
    }
    Ok(())
}

fn same_bits_alone_and_batched(gpu: &Arc<Gpu>) -> Check {
    let c = case(&[(300, 200), (0, 129), (77, 1), (1000, 64)], (8, 2), 128, 32, 302);
    let data = c.materialise().map_err(msg)?;
    let row_elems = data.out_shape().1 * data.out_shape().2;
    for kernel in kernels(gpu) {
        let batched = run_step(gpu, &data, &forced(&data, kernel)?).map_err(msg)?;
        for s in 0..4 {
            let single = alone(&data, s);
            let got = run_step(gpu, &single, &forced(&single, kernel)?).map_err(msg)?;
            let q0 = data.meta.query_start_loc[s] as usize;
            if !same_bits(&batched[q0 * row_elems..][..got.len()], &got) {
                return Err(format!("{}: sequence {s} differs alone and in the batch", kernel.name()));
            }
        }
    }
    Ok(())
}

fn dispatcher_choices(gpu: &Arc<Gpu>) -> Check {
    let cc = gpu.info().compute_capability;
    let hopper = PrefillKernel::Wgmma.runs_on(cc);
    let long = if hopper { "prefill-wgmma" } else { "prefill-mma" };
    for (c, want) in [
        (case(&[(0, FAKE_DECODE_MAX_QUERY), (50, 3)], (8, 4), 128, 16, 401), "fake-decode"),
        (case(&[(0, FAKE_DECODE_MAX_QUERY + 1), (50, 3)], (8, 4), 128, 16, 402), long),
        (case(&[(20, 300)], (4, 2), 64, 16, 403), long),
        // WGMMA is not built for D = 256: the dispatcher falls back to MMA.
        (case(&[(20, 300), (0, 100)], (4, 2), 256, 16, 404), "prefill-mma"),
    ] {
        let data = c.materialise().map_err(msg)?;
        let plan = prefill_path(step_geometry(&data), cc).map_err(msg)?;
        if plan.name() != want {
            return Err(format!(
                "{:?} on {cc:?}: the dispatcher picked {}, expected {want}",
                step_geometry(&data),
                plan.name()
            ));
        }
        let bits = run_step(gpu, &data, &plan).map_err(msg)?;
        let got = widen_bits(&bits, data.out_shape()).map_err(msg)?;
        let reference = Reference::compute(&data).map_err(msg)?;
        compare(plan.name(), &got, &reference, Bound::f32(TENSOR_CORE_TOLERANCE)).map_err(msg)?;
    }
    // Host-side, so on any device: a forced WGMMA plan at D = 256 is refused by name.
    let data = case(&[(0, 100)], (4, 2), 256, 16, 405).materialise().map_err(msg)?;
    match PrefillPlan::new(step_geometry(&data), PrefillKernel::Wgmma) {
        Err(gpu::Error::Unsupported { reason, .. }) if reason.contains("256") => Ok(()),
        other => Err(format!("WGMMA at D = 256 should be refused naming it, got {other:?}")),
    }
}

/// Each kernel on a case's cache and batch, its queries once normed and rotated by
/// `qk_norm_rope_cache` (at the engine's positions of the batch, `step_buffers::positions`) and
/// once by the kernel itself from the same qkv rows (random, in any layout: both read it the same
/// way), with per-channel alpha and bias and a scalar gain: the outputs must be the same bits,
/// and finite. The RoPE table is shorter than the longest sequences, so rows past it are clamped
/// alike (the pass reports them).
fn norming_queries(gpu: &Arc<Gpu>) -> Check {
    let cases = [
        case(&[(300, 200), (0, 129), (77, 1)], (8, 4), 128, 16, 501),
        case(&[(350, 150), (0, 70)], (2, 2), 64, 8, 502),
        case(&[(380, 90), (0, 70)], (4, 2), 256, 16, 503),
    ];
    let max_pos = 400;
    for (seed, c) in (600..).zip(cases) {
        let data = c.materialise().map_err(msg)?;
        let (tokens, heads, d) = data.out_shape();
        let kv_heads = c.num_kv_heads;
        let shape = HeadShape { num_heads: heads, num_kv_heads: kv_heads, head_dim: d };
        let rng = Counter::new(seed, 40);
        let qkv: Vec<bf16> =
            (0..tokens * shape.qkv_width()).map(|i| bf16::from_f64(3.0 * rng.uniform(&[i as u64]))).collect();
        let positions = positions(&data.meta);
        if !positions.iter().any(|&p| p >= max_pos as i32) || !positions.iter().any(|&p| p < max_pos as i32) {
            return Err(format!("case {seed}: its positions should reach past the RoPE table and stay in it"));
        }
        let param = |stream: u64, n: usize, lo: f64| -> Vec<f32> {
            (0..n).map(|i| (lo + Counter::new(seed, stream).uniform(&[i as u64])) as f32).collect()
        };
        let (alpha, weight, bias) = (param(42, d, 1.5), param(43, 1, 1.25), param(44, d, 0.0));
        let norm = UClipNormParams::upload(gpu, "q_norm", d, &alpha, &weight, Some(&bias)).map_err(msg)?;
        let (qkv_dev, positions_dev) = (gpu.upload(&qkv).map_err(msg)?, gpu.upload(&positions).map_err(msg)?);
        // The pass's q: every slot is padding, so it writes q alone. The kernel rotates by the
        // pass's table, as the model's do.
        let pass = QkNormRopeCache::new(gpu, shape, RopeTable::new(gpu, d, max_pos, 1e6).map_err(msg)?).map_err(msg)?;
        let slots = gpu.upload(&vec![-1i64; tokens]).map_err(msg)?;
        let mut q = gpu.upload(&vec![bf16::NAN; tokens * shape.q_width()]).map_err(msg)?;
        let (mut key, mut value) =
            (gpu.zeros::<bf16>(kv_heads * d).map_err(msg)?, gpu.zeros::<bf16>(kv_heads * d).map_err(msg)?);
        let mut faults = Faults::new(gpu).map_err(msg)?;
        let inputs =
            QkvInputs { qkv: qkv_dev.as_view(), positions: positions_dev.as_view(), slot_mapping: slots.as_view() };
        let mut outputs =
            QkvOutputs { q: Some(q.as_view_mut()), key_cache: key.as_view_mut(), value_cache: value.as_view_mut() };
        pass.run(&norm, &norm, &inputs, &mut outputs, &mut faults).map_err(msg)?;
        if faults.check().is_ok() {
            return Err("the qk pass should report the positions outside its table".into());
        }
        let host = HostCase::new(&data);
        for kernel in kernels(gpu) {
            let plan = match PrefillPlan::new(step_geometry(&data), kernel) {
                Ok(plan) => plan,
                // WGMMA is not built for D = 256 (dispatcher_choices checks that it says so).
                Err(_) if kernel == PrefillKernel::Wgmma && d == 256 => {
                    println!("  {} D {d}: not run, its plan refuses this head dim", kernel.name());
                    continue;
                }
                Err(e) => return Err(msg(e)),
            };
            let attention = Hp1Prefill::new(gpu, plan.clone()).map_err(msg)?;
            let mut bufs = AttnBuffers::upload(gpu, plan.geometry.base, &host.inputs()).map_err(msg)?;
            let len = tokens * shape.q_width();
            let gate = host.gate();
            let read = prefill_output(gpu, &mut bufs, len, |ops| {
                attention.run(PrefillOperands { layer: LayerBuffers { q: q.as_view(), ..ops.layer }, ..ops }, &gate)
            })?;
            let normed = prefill_output(gpu, &mut bufs, len, |ops| {
                let layer = LayerBuffers { q: qkv_dev.as_view(), q_row_stride: shape.qkv_width(), ..ops.layer };
                let query_norm = Some(QueryNorm { rope: pass.rope(), norm: &norm });
                attention.run(PrefillOperands { layer, query_norm, ..ops }, &gate)
            })?;
            if let Some(at) = read.iter().position(|v| !v.is_finite()) {
                return Err(format!("{}: output element {at} is {} reading normed queries", kernel.name(), read[at]));
            }
            if let Some(at) = read.iter().zip(&normed).position(|(a, b)| a.to_bits() != b.to_bits()) {
                return Err(format!(
                    "{} D {d}: output element {at} is {} norming the queries, {} reading them normed",
                    kernel.name(),
                    normed[at],
                    read[at]
                ));
            }
            println!("  {} D {d}, {tokens} rows: the same bits norming the queries", kernel.name());
        }
    }
    Ok(())
}

/// Each kernel refuses an output that starts 2 bytes past a 16-byte boundary, naming it, and
/// leaves that output as it was (poisoned): its stores are 16 bytes wide.
fn misaligned_output(gpu: &Arc<Gpu>) -> Check {
    let data = case(&[(30, 100), (0, 70)], (4, 2), 128, 16, 801).materialise().map_err(msg)?;
    let host = HostCase::new(&data);
    for kernel in kernels(gpu) {
        let plan = PrefillPlan::new(step_geometry(&data), kernel).map_err(msg)?;
        let attention = Hp1Prefill::new(gpu, plan.clone()).map_err(msg)?;
        let mut bufs = AttnBuffers::upload(gpu, plan.geometry.base, &host.inputs()).map_err(msg)?;
        let ops = bufs.prefill_operands();
        let len = ops.layer.out.len();
        let mut padded = gpu.upload(&vec![bf16::NAN; len + 1]).map_err(msg)?;
        let layer = LayerBuffers { out: padded.slice_mut(1..), ..ops.layer };
        let result = attention.run(PrefillOperands { layer, ..ops }, &host.gate());
        refused(kernel.name(), result, "`out` must start on a 16-byte boundary")?;
        if !gpu.download(&padded).map_err(msg)?.iter().all(|v| v.is_nan()) {
            return Err(format!("{}: a refused run wrote the output", kernel.name()));
        }
    }
    Ok(())
}

/// The first `len` outputs `launch` leaves on `bufs`' operands, the output poisoned with NaN
/// before it.
fn prefill_output(
    gpu: &Gpu,
    bufs: &mut AttnBuffers,
    len: usize,
    launch: impl FnOnce(PrefillOperands<'_>) -> gpu::Result<()>,
) -> Result<Vec<bf16>, String> {
    bufs.poison_output(gpu).map_err(msg)?;
    launch(bufs.prefill_operands()).map_err(msg)?;
    let mut out = bufs.download_output(gpu).map_err(msg)?;
    out.truncate(len);
    Ok(out)
}

/// The WGMMA kernel clamping the gates of the tiles below the diagonal on their bf16 pairs (its
/// default) against the same kernel gating every tile in f32 (`Hp1Prefill::with_exact_gate`):
/// the same bits. The gates clamp on both sides (inputs scaled up, a clip_min above 0 and a low
/// clip_max), gamma takes both signs and 0 (which keeps the f32 gate), and the cases reach both
/// entries (3 taps with relu_pre, and the general gate), D 64 and 128, one and two heads a CTA,
/// and blocks of 2 and 16 keys.
fn late_clamp(gpu: &Arc<Gpu>) -> Check {
    if !kernels(gpu).contains(&PrefillKernel::Wgmma) {
        return Ok(());
    }
    let cases = [
        Case {
            gamma: vec![1.0, -0.75, 2.0, 0.0, 0.3, -2.0, 1.5, 0.01],
            input_scale: 2.0,
            ..case(&[(300, 200), (0, 129), (77, 1)], (8, 4), 128, 16, 711)
        },
        Case {
            clip_min: 0.25,
            clip_max: 0.5,
            gamma: vec![-1.0, 0.5, 3.0, -0.25],
            ..case(&[(0, 300), (100, 64)], (4, 4), 64, 2, 712)
        },
        Case {
            fir_k: 2,
            relu_pre: false,
            clip_min: 0.1,
            clip_max: 0.9,
            gamma: vec![0.5, -1.5, 1.0, 0.0, -0.125, 4.0, 2.0, -3.0],
            input_scale: 3.0,
            ..case(&[(50, 260), (0, 90)], (8, 2), 128, 16, 713)
        },
    ];
    for c in cases {
        let data = c.materialise().map_err(msg)?;
        let host = HostCase::new(&data);
        let plan = PrefillPlan::new(step_geometry(&data), PrefillKernel::Wgmma).map_err(msg)?;
        let late = Hp1Prefill::new(gpu, plan.clone()).map_err(msg)?;
        let exact = Hp1Prefill::new(gpu, plan.clone()).map_err(msg)?.with_exact_gate();
        let mut bufs = AttnBuffers::upload(gpu, plan.geometry.base, &host.inputs()).map_err(msg)?;
        let (tokens, heads, d) = data.out_shape();
        let len = tokens * heads * d;
        let gate = host.gate();
        let a = prefill_output(gpu, &mut bufs, len, |ops| late.run(ops, &gate))?;
        let b = prefill_output(gpu, &mut bufs, len, |ops| exact.run(ops, &gate))?;
        if let Some(at) = b.iter().position(|v| !v.is_finite()) {
            return Err(format!("D {d}: output element {at} is {} with the f32 gate", b[at]));
        }
        if b.iter().all(|v| v.to_f32() == 0.0) {
            return Err(format!("D {d}: every output is 0; the case checks no clamp"));
        }
        if let Some(at) = a.iter().zip(&b).position(|(x, y)| x.to_bits() != y.to_bits()) {
            return Err(format!(
                "{}: output element {at} is {} clamping pairs, {} with the f32 gate",
                plan.entry, a[at], b[at]
            ));
        }
        println!("  {} ({}), {tokens} rows: the same bits clamping bf16 pairs", plan.entry_for(&gate), plan.entry);
    }
    Ok(())
}
