//! The GPU's HP1 attention paths held against the f64 oracle and against each other (SPEC
//! sections 4 and 6). Without a GPU every check says it skipped; on the H200 the whole binary
//! runs in well under three minutes (the f64 oracle on the CPU is the slow part, so cases are
//! materialised and referenced in parallel, then run on the GPU one after another).
//!
//! Checks: every GPU path on drawn cases (each path on a quarter of them at least), on every
//! saved case of `verify/regressions/` it supports, and on a targeted grid (batch 1 to 256,
//! contexts to 32K, mixed prefill and decode, GQA 1 to 8, D 64/128/256, blocks of 16 and 32, gate
//! zero fractions under 10% and over 95%), each row within its scale-aware bound; the row
//! metadata against the oracle's fake-decode expansion; split-K, decode, G = 8, G = 16 and two
//! heads per CTA giving the same bits; two runs giving the same bits; a sequence giving the same
//! bits alone and in a batch; an unsupported head dim refused by name; a CUDA graph captured
//! on short lengths replaying long ones; and the device's count of exact gate zeros (the
//! benchmark's sparse floor) against a host mirror of its arithmetic and the f64 oracle.

use std::fmt::Display;
use std::sync::Arc;

use gpu::attention::{
    bucket, row_metadata, AttentionPath, AttnBuffers, Form, GateCounts, GateStats, GroupSize, HostInputs, Hp1Attention,
    Plan, Pv, Settled,
};
use gpu::Gpu;
use half::bf16;
use ndarray::{s, Axis};
use oracle::hp1::fake_decode::expand;
use oracle::hp1::AttnMetadata;
use oracle::model::gate_stats::GateStats as OracleGateStats;
use rayon::prelude::*;
use verify::gpu_cases::{alone, case, check_cases, decodes, draw, spread};
use verify::gpu_harness::{run, GpuCheck};
use verify::gpu_paths::{
    geometry, gpu_paths, gpu_supports, run_gpu, same_bits, widen_bits, GpuPath, GpuPathKind, HostCase, PlanChoice,
    GPU_TOLERANCE,
};
use verify::regression::regressions_dir;
use verify::{check_data, compare, large_case, load_dir, small_case, Bound, Case, CaseData, Reference};

type Check = Result<(), String>;

fn main() {
    let checks: &[GpuCheck] = &[
        ("sanitize_every_gpu_path_on_a_few_small_cases", sanitize_cases),
        ("every_gpu_path_agrees_with_the_oracle_on_drawn_cases", drawn_cases),
        ("every_saved_case_passes_every_gpu_path_that_supports_it", saved_cases),
        ("every_gpu_path_agrees_with_the_oracle_on_the_targeted_grid", targeted_grid),
        ("row_metadata_matches_the_oracle_expansion_and_skips_empty_sequences", row_metadata_matches),
        ("split_k_decode_and_both_group_sizes_give_the_same_bits", same_bits_across_paths),
        ("two_runs_give_the_same_bits", same_bits_twice),
        ("a_sequence_gives_the_same_bits_alone_and_in_a_batch", same_bits_alone_and_batched),
        ("an_unsupported_head_dim_is_refused_by_name", unsupported_head_dim),
        ("a_cuda_graph_captured_on_short_lengths_replays_long_ones", cuda_graph),
        ("the_gate_zero_count_matches_its_host_mirror_and_the_oracle", gate_zero_counts),
    ];
    run("gpu_attention", checks);
}

fn msg(e: impl Display) -> String {
    e.to_string()
}

fn drawn_cases(gpu: &Arc<Gpu>) -> Check {
    let paths = gpu_paths(gpu);
    let mut cases = draw(small_case(), 200, 0x6b0_0001)?;
    cases.extend(draw(large_case(), 10, 0x6b0_0002)?);
    // Every path takes a quarter of these at least (WGMMA, the narrowest, takes D 64 and 128 of
    // the three drawn kernel head dims; fake decode, batches with a prefill).
    check_cases(&paths, &cases)?.each_path_ran(cases.len() / 4)
}

/// `verify/regressions/` (or `$ASYNCT_REGRESSIONS`) replayed on the GPU paths; `cargo test`
/// replays the same files on the oracle paths.
fn saved_cases(gpu: &Arc<Gpu>) -> Check {
    let dir = regressions_dir();
    let saved = load_dir(&dir).map_err(msg)?;
    if saved.is_empty() {
        return Err(format!("no saved case in {}: nothing would be replayed", dir.display()));
    }
    let paths = gpu_paths(gpu);
    for (file, reg) in &saved {
        let ran: Vec<String> = paths.iter().filter(|p| p.supports(&reg.case)).map(|p| p.name()).collect();
        println!(
            "  {}: {}",
            file.display(),
            if ran.is_empty() { "no GPU path takes its shape".into() } else { ran.join(", ") }
        );
    }
    let cases: Vec<Case> = saved.into_iter().map(|(_, r)| r.case).collect();
    check_cases(&paths, &cases).map(|_| ())
}

/// A few small cases of every path, quick enough to run under compute-sanitizer
/// (`scripts/device-run.sh sanitize` selects this check by its name).
fn sanitize_cases(gpu: &Arc<Gpu>) -> Check {
    let cases = vec![
        case(&decodes(&[1, 17, 300]), (8, 4), 128, 16, 41),
        Case { relu_pre: false, ..case(&[(5, 20), (0, 33)], (4, 1), 64, 32, 42) },
        case(&[(260, 1), (0, 9)], (2, 2), 256, 16, 43),
    ];
    check_cases(&gpu_paths(gpu), &cases).map(|_| ())
}

fn targeted_grid(gpu: &Arc<Gpu>) -> Check {
    let mut cases = vec![
        // Batch sizes with mixed decode lengths, each GQA ratio, head dim and block size.
        case(&decodes(&[4000]), (8, 4), 128, 16, 1),
        case(&decodes(&spread(3, 5000, 2)), (8, 1), 64, 32, 2),
        case(&decodes(&[1, 255, 256, 257, 512, 513, 1000, 2500]), (8, 4), 128, 16, 3),
        case(&decodes(&spread(32, 2500, 4)), (8, 2), 256, 16, 4),
        case(&decodes(&spread(64, 1500, 5)), (4, 4), 256, 32, 5),
        case(&decodes(&spread(128, 700, 6)), (8, 2), 128, 32, 6),
        case(&decodes(&spread(256, 300, 7)), (8, 4), 64, 16, 7),
        // Long contexts, up to 32K.
        case(&decodes(&[32768]), (8, 4), 128, 16, 8),
        case(&decodes(&[20000, 12289]), (4, 2), 256, 32, 9),
        Case { fir_k: 8, relu_pre: false, clip_min: 0.125, ..case(&decodes(&[32000]), (8, 1), 64, 16, 10) },
        // Prefill next to decode: fake decode rows of every kind.
        case(&[(1000, 1), (300, 40), (0, 77), (5000, 3)], (8, 4), 128, 16, 11),
        case(&[(0, 600), (2000, 300)], (4, 2), 64, 32, 12),
        Case { fir_k: 1, ..case(&[(17, 200), (0, 1)], (16, 8), 128, 16, 13) },
    ];
    // Gate zero fractions at both ends (checked below, so the grid really covers them).
    // q_mean 1 puts scores near +5.7 (std 0.7) and a small sigma keeps z positive; q_mean -3/16
    // puts them near -1.1 (std 0.45), so about 1% pass the rectifier and the gate.
    let few_zeros = Case {
        q_mean: 1.0,
        sigma: vec![0.25; 8],
        clip_max: 8.0,
        ..case(&decodes(&spread(8, 3000, 14)), (8, 4), 128, 16, 14)
    };
    let most_zeros = Case { q_mean: -0.1875, ..case(&decodes(&spread(8, 3000, 15)), (8, 4), 128, 16, 15) };
    cases.extend([few_zeros, most_zeros]);
    let zero_fractions = check_cases(&gpu_paths(gpu), &cases)?.zero_fractions;
    let n = zero_fractions.len();
    match (zero_fractions.get(n.wrapping_sub(2)), zero_fractions.last()) {
        (Some(&few), Some(&most)) if few < 0.1 && most > 0.95 => Ok(()),
        other => Err(format!("zero fractions of the last two cases should be < 10% and > 95%, got {other:?}")),
    }
}

/// `data` with a sequence of no query rows (a bucket's padding) inserted before sequence `at`.
fn with_empty_sequence(data: &CaseData, at: usize) -> CaseData {
    let meta = &data.meta;
    let mut table = meta.block_table.clone();
    let copy = table.row(at).to_owned();
    table = ndarray::concatenate(
        Axis(0),
        &[table.slice(s![..at, ..]), copy.view().insert_axis(Axis(0)), table.slice(s![at.., ..])],
    )
    .expect("rows of one table have one width");
    let mut seq_lens = meta.seq_lens.clone();
    seq_lens.insert(at, meta.seq_lens[at]);
    let mut query_start_loc = meta.query_start_loc.clone();
    query_start_loc.insert(at, meta.query_start_loc[at]);
    CaseData::new(AttnMetadata { block_table: table, seq_lens, query_start_loc }, data.f32.clone())
}

fn row_metadata_matches(gpu: &Arc<Gpu>) -> Check {
    let data = case(&[(40, 1), (3, 9), (0, 5), (600, 2)], (4, 2), 64, 16, 21).materialise().map_err(msg)?;
    for data in [data.clone(), with_empty_sequence(&data, 1), with_empty_sequence(&data, 0)] {
        let num_tokens = data.out_shape().0;
        let rows = bucket(num_tokens) + 3;
        let run = run_gpu(gpu, &data, rows, PlanChoice::Auto).map_err(msg)?;
        let capacity = run.plan.geometry.capacity();
        let host = row_metadata(&data.meta.query_start_loc, &data.meta.seq_lens, rows, capacity);
        if (run.row_seq.clone(), run.row_len.clone()) != host {
            return Err(format!("device rows {:?} {:?}, host mirror {host:?}", run.row_seq, run.row_len));
        }
        let expanded = expand(&data.meta).map_err(msg)?;
        let oracle_rows = data.meta.rows();
        for r in 0..rows {
            let (seq, len) = match oracle_rows.get(r) {
                Some(row) => (row.seq as i32, expanded.seq_lens[r]),
                None => (0, 0),
            };
            if (run.row_seq[r], run.row_len[r]) != (seq, len) {
                return Err(format!("row {r}: device ({}, {}), oracle ({seq}, {len})", run.row_seq[r], run.row_len[r]));
            }
        }
        let path = GpuPath::new(gpu, GpuPathKind::Auto);
        let reference = Reference::compute(&data).map_err(msg)?;
        check_data(&path, &data, &reference).map_err(msg)?;
    }
    Ok(())
}

/// Cases whose rows cross many chunks, with every FIR length edge and head dim, each with an even
/// number of query heads per kv head so that two heads per CTA run too.
fn bitwise_cases() -> Vec<Case> {
    vec![
        Case { fir_k: 4, ..case(&decodes(&[1, 256, 257, 3000, 9000]), (8, 4), 128, 16, 31) },
        Case { fir_k: 8, relu_pre: false, ..case(&[(100, 50), (0, 300)], (4, 2), 64, 32, 32) },
        Case { fir_k: 1, clip_min: 0.125, ..case(&decodes(&[4097, 777]), (8, 2), 256, 16, 33) },
    ]
}

fn same_bits_across_paths(gpu: &Arc<Gpu>) -> Check {
    for c in bitwise_cases() {
        let data = c.materialise().map_err(msg)?;
        let rows = data.out_shape().0;
        for pv in [Pv::Dense, Pv::Sparse] {
            let mut first: Option<(String, Vec<bf16>)> = None;
            for path in [AttentionPath::Decode(pv), AttentionPath::SplitK(pv)] {
                for form in Form::ALL {
                    let got = run_gpu(gpu, &data, rows, PlanChoice::Exact(path, form)).map_err(msg)?;
                    let label = format!("{} {}", path.name(), form.name());
                    if !got.out.iter().any(|x| x.to_f32() != 0.0) {
                        return Err(format!("{label}: an all-zero output proves nothing, case {c:?}"));
                    }
                    match &first {
                        None => first = Some((label, got.out)),
                        Some((l0, o0)) if !same_bits(o0, &got.out) => {
                            let i = o0.iter().zip(&got.out).position(|(a, b)| a.to_bits() != b.to_bits());
                            return Err(format!("{label} differs from {l0} at element {i:?}, case {c:?}"));
                        }
                        Some(_) => {}
                    }
                }
            }
        }
    }
    Ok(())
}

fn same_bits_twice(gpu: &Arc<Gpu>) -> Check {
    for c in bitwise_cases() {
        let data = c.materialise().map_err(msg)?;
        let rows = data.out_shape().0;
        for choice in [PlanChoice::Auto, PlanChoice::Path(AttentionPath::SplitK(Pv::Sparse))] {
            let a = run_gpu(gpu, &data, rows, choice.clone()).map_err(msg)?;
            let b = run_gpu(gpu, &data, rows, choice).map_err(msg)?;
            if !same_bits(&a.out, &b.out) {
                return Err(format!("two runs of {} differ, case {c:?}", a.plan.path.name()));
            }
        }
    }
    Ok(())
}

fn same_bits_alone_and_batched(gpu: &Arc<Gpu>) -> Check {
    let decode_batch = case(&decodes(&spread(128, 1200, 41)), (8, 2), 128, 16, 41);
    let mixed_batch = case(&[(300, 40), (1000, 1), (0, 64)], (8, 4), 128, 16, 42);
    for (c, picks) in [(decode_batch, vec![0, 17, 127]), (mixed_batch, vec![0, 2])] {
        let data = c.materialise().map_err(msg)?;
        let batched = run_gpu(gpu, &data, data.out_shape().0, PlanChoice::Auto).map_err(msg)?;
        let row_elems = data.out_shape().1 * data.out_shape().2;
        // Alone, the sequence runs the path and group size the dispatcher did not pick for the
        // batch (it picks the same for both), so the check also covers a change of plan.
        let other = PlanChoice::Forced(
            match batched.plan.path {
                AttentionPath::SplitK(pv) => AttentionPath::Decode(pv),
                AttentionPath::Decode(pv) => AttentionPath::SplitK(pv),
            },
            match batched.plan.form.group {
                GroupSize::Eight => GroupSize::Sixteen,
                GroupSize::Sixteen => GroupSize::Eight,
            },
        );
        for s in picks {
            let single = alone(&data, s);
            let run = run_gpu(gpu, &single, single.out_shape().0, other.clone()).map_err(msg)?;
            let q0 = data.meta.query_start_loc[s] as usize;
            let in_batch = &batched.out[q0 * row_elems..][..run.out.len()];
            if !same_bits(in_batch, &run.out) {
                return Err(format!(
                    "sequence {s}: {} {} in the batch and {} {} alone differ",
                    batched.plan.path.name(),
                    batched.plan.form.name(),
                    run.plan.path.name(),
                    run.plan.form.name()
                ));
            }
        }
    }
    Ok(())
}

fn unsupported_head_dim(gpu: &Arc<Gpu>) -> Check {
    let c = case(&decodes(&[300, 20]), (4, 2), 96, 16, 51);
    if gpu_supports(&c) || gpu_paths(gpu).iter().any(|p| p.supports(&c)) {
        return Err("a path claims to support D = 96".into());
    }
    let data = c.materialise().map_err(msg)?;
    match run_gpu(gpu, &data, 2, PlanChoice::Auto) {
        Err(verify::Error::Gpu(gpu::Error::Unsupported { reason, .. }))
            if reason.contains("head_dim") && reason.contains("96") =>
        {
            Ok(())
        }
        Err(e) => Err(format!("D = 96 refused without naming it: {e}")),
        Ok(_) => Err("D = 96 ran".into()),
    }
}

fn cuda_graph(gpu: &Arc<Gpu>) -> Check {
    let long = [9000usize, 4097, 300, 12000];
    let data = case(&decodes(&long), (8, 4), 128, 16, 61).materialise().map_err(msg)?;
    let host = HostCase::new(&data);
    let inputs = host.inputs();
    let num_tokens = data.out_shape().0;
    let geometry = geometry(&data, bucket(num_tokens));
    let plan = Plan::auto(geometry).map_err(msg)?;
    if !matches!(plan.path, AttentionPath::SplitK(_)) {
        return Err(format!("4 long rows should take split-K from the capacity, the plan is {:?}", plan.path));
    }
    let attention = Hp1Attention::new(gpu, plan.clone()).map_err(msg)?;
    // Capture on dummy lengths of one token, as an engine's warm-up does.
    let dummy = vec![1i32; long.len()];
    let mut bufs = AttnBuffers::upload(gpu, geometry, &HostInputs { seq_lens: &dummy, ..inputs }).map_err(msg)?;
    bufs.reserve_workspace(gpu, plan.workspace_len).map_err(msg)?;
    attention.build_rows(bufs.row_operands()).map_err(msg)?;
    attention.run(bufs.operands(Settled::Nothing), &host.gate()).map_err(msg)?;
    // A fault of the eager run surfaces here rather than as a failed capture.
    gpu.synchronize().map_err(msg)?;
    let graph = gpu
        .capture(|| {
            attention.build_rows(bufs.row_operands())?;
            attention.run(bufs.operands(Settled::Nothing), &host.gate())
        })
        .map_err(msg)?;

    let halved: Vec<i32> = long.iter().map(|&l| (l / 2) as i32).collect();
    for lens in [data.meta.seq_lens.clone(), halved] {
        bufs.set_metadata(gpu, inputs.block_table, &lens, inputs.query_start_loc).map_err(msg)?;
        bufs.poison_output(gpu).map_err(msg)?;
        graph.launch().map_err(msg)?;
        let mut out = bufs.download_output(gpu).map_err(msg)?;
        out.truncate(host_len(&data));
        let mut step = data.clone();
        step.meta.seq_lens = lens.clone();
        let reference = Reference::compute(&step).map_err(msg)?;
        let got = widen_bits(&out, data.out_shape()).map_err(msg)?;
        compare("gpu-graph-replay", &got, &reference, Bound::f32(GPU_TOLERANCE)).map_err(msg)?;
        let eager = run_gpu(gpu, &step, geometry.rows, PlanChoice::Exact(plan.path, plan.form)).map_err(msg)?;
        if !same_bits(&eager.out, &out) {
            return Err(format!("replay at lengths {lens:?} differs from an eager run of the same plan"));
        }
    }
    Ok(())
}

/// The output elements of `data`'s query rows.
fn host_len(data: &CaseData) -> usize {
    let (n, h, d) = data.out_shape();
    n * h * d
}

/// `gpu::attention::GateStats` (the count behind the benchmark's sparse floor) on drawn cases and
/// a targeted list: the device's zeros must equal, exactly, a host mirror of the kernel's f32
/// arithmetic (so they are the keys the sparse-index PV skips), and the f64 oracle's zeros up to
/// 0.5% of the total (keys whose z lies within f32 rounding of the clamp edge may flip); the
/// totals must equal the oracle's. Then two launches without zeroing add up.
fn gate_zero_counts(gpu: &Arc<Gpu>) -> Check {
    let mut cases = draw(small_case(), 40, 0x6b0_0071)?;
    let bench_shape = case(&decodes(&[1024; 128]), (8, 4), 128, 16, 71);
    // A head whose gain is zero (all of its weights are zeros), and clip_min above 0 with nonzero
    // gains (no zeros at all).
    let zero_gain = Case { gamma: vec![1.0, 0.0, 2.0, 0.5], ..case(&decodes(&[300, 20, 1]), (4, 2), 128, 16, 75) };
    let no_zeros = Case { clip_min: 0.125, ..case(&decodes(&[1000, 33]), (8, 4), 128, 16, 76) };
    cases.extend([
        case(&decodes(&spread(32, 2000, 72)), (8, 4), 128, 16, 72),
        Case { fir_k: 8, relu_pre: false, ..case(&decodes(&spread(8, 3000, 73)), (8, 1), 64, 32, 73) },
        Case { fir_k: 1, ..case(&decodes(&[4097, 777, 1]), (8, 2), 256, 16, 74) },
        zero_gain.clone(),
        no_zeros.clone(),
        Case {
            q_mean: 1.0,
            sigma: vec![0.25; 8],
            clip_max: 8.0,
            ..case(&decodes(&spread(8, 3000, 77)), (8, 4), 128, 16, 77)
        },
        Case { q_mean: -0.1875, ..case(&decodes(&spread(8, 3000, 78)), (8, 4), 128, 16, 78) },
        // Prefill rows next to decode rows (fake decode), padded to the bucket.
        case(&[(1000, 1), (300, 40), (0, 77)], (8, 4), 128, 16, 79),
        bench_shape.clone(),
    ]);
    let prepared: Vec<_> = cases
        .par_iter()
        .map(|c| {
            let data = c.materialise().map_err(msg)?;
            let oracle = OracleGateStats::of_inputs(&data.inputs_f64()).map_err(msg)?;
            let mirror = mirror_counts(&data);
            Ok::<_, String>((data, oracle, mirror))
        })
        .collect();
    let stats = GateStats::new(gpu).map_err(msg)?;
    let mut failures = Vec::new();
    for (c, prepared) in cases.iter().zip(prepared) {
        let (data, oracle, mirror) = prepared?;
        let got = device_counts(gpu, &stats, &data, 1).map_err(msg)?;
        let diff = got.zeros.abs_diff(oracle.zeros);
        println!(
            "  zeros {:>9} of {:>9} on the GPU, {:>9} in the host mirror, {:>9} in the f64 oracle (differ by {:.3}%), {} rows, D {}",
            got.zeros,
            got.total,
            mirror.zeros,
            oracle.zeros,
            100.0 * diff as f64 / oracle.total.max(1) as f64,
            data.out_shape().0,
            c.head_dim
        );
        if got != mirror || got.total != oracle.total || diff as f64 > 0.005 * oracle.total as f64 {
            failures.push(format!(
                "GPU {got:?}, host mirror {mirror:?}, f64 oracle {oracle:?} (zeros may differ by 0.5%)\ncase JSON: {}",
                serde_json::to_string(c).unwrap_or_default()
            ));
        }
    }
    if !failures.is_empty() {
        return Err(format!("{} of {} cases miscounted:\n{}", failures.len(), cases.len(), failures.join("\n")));
    }
    // The edges, by their own rules: head 1 of 4 is a quarter of the weights.
    let counts = |c: &Case, launches| {
        let data = c.materialise().map_err(msg)?;
        device_counts(gpu, &stats, &data, launches).map_err(msg)
    };
    let (gain, none) = (counts(&zero_gain, 1)?, counts(&no_zeros, 1)?);
    if gain.zeros < gain.total / 4 || none.zeros != 0 {
        return Err(format!("a zero gain counted {gain:?} (a quarter at least), clip_min 0.125 {none:?} (no zeros)"));
    }
    let (once, twice) = (counts(&bench_shape, 1)?, counts(&bench_shape, 2)?);
    if twice != (GateCounts { zeros: 2 * once.zeros, total: 2 * once.total }) {
        return Err(format!("two launches counted {twice:?}, one {once:?}: the counters must add"));
    }
    Ok(())
}

/// The device's counts for `data` over its batch bucket: the row metadata, then `launches`
/// launches into counters that start as garbage and are zeroed first.
fn device_counts(gpu: &Arc<Gpu>, stats: &GateStats, data: &CaseData, launches: usize) -> gpu::Result<GateCounts> {
    let host = HostCase::new(data);
    let g = geometry(data, bucket(data.out_shape().0));
    let attention = Hp1Attention::new(gpu, Plan::auto(g)?)?;
    let mut bufs = AttnBuffers::upload(gpu, g, &host.inputs())?;
    attention.build_rows(bufs.row_operands())?;
    let mut counters = gpu.upload(&[u64::MAX, 12345])?;
    stats.zero(&mut counters.as_view_mut())?;
    let ops = bufs.operands(Settled::Nothing);
    for _ in 0..launches {
        stats.run(&ops.layer, &ops.row_seq, &ops.row_len, &g, &host.gate(), &mut counters.as_view_mut())?;
    }
    stats.read(&counters.as_view())
}

/// `hp1_gate_stats.cu`'s arithmetic on the host, operation for operation (its header, SAME BITS):
/// each of 16 D-slices summed from 0 with fma in element order, then c_i + c_{i+8}, + 4, + 2, + 1;
/// then the oracle's gate in f32 (`oracle::hp1::Gate`), whose order the kernel follows.
fn mirror_counts(data: &CaseData) -> GateCounts {
    let inp = data.inputs_f32();
    let p = inp.params;
    let (_, hq, d) = data.out_shape();
    let group = hq / data.f32.key_cache.dim().2;
    let mut counts = GateCounts::default();
    for row in data.meta.rows() {
        for h in 0..hq {
            let q = data.f32.q.slice(s![row.token, h, ..]);
            let scores: Vec<f32> = (0..=row.pos)
                .map(|t| {
                    let k = inp.key(row.seq, t, h / group);
                    let c = d / 16;
                    let mut part: Vec<f32> =
                        (0..16).map(|i| (0..c).fold(0.0f32, |a, e| q[i * c + e].mul_add(k[i * c + e], a))).collect();
                    for m in [8, 4, 2, 1] {
                        for i in 0..m {
                            part[i] += part[i + m];
                        }
                    }
                    p.scale * part[0]
                })
                .collect();
            let mut weights = vec![0.0f32; scores.len()];
            inp.gate(h).apply(&[], &scores, &mut weights);
            counts.zeros += weights.iter().filter(|&&w| w == 0.0).count() as u64;
            counts.total += weights.len() as u64;
        }
    }
    counts
}
