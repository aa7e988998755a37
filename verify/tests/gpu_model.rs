//! The GPU model (`model::gpu_backend`) on the device: a checkpoint loaded as raw bf16 lands on
//! the device in the layouts the kernels read (`gpu::gemm::layout`), bit for bit; the forward of an
//! asynct-small-shaped model (random weights) agrees with the oracle's bf16-faithful f64 forward
//! on every logits row of prefill, mixed and decode steps (prompts crossing block boundaries, a
//! chunk long enough for the tensor-core prefill and a wide GEMM, one sequence decoding alone at
//! 9 chunks as a B1 step does at 1K context); a decode row gives the
//! same bits alone and beside a prefill chunk, and twice; and a decode step gives the same bits
//! through both of its plans (the dispatcher's and the even rows'). Without a GPU every check prints that
//! it was skipped (`verify::gpu_harness`).

use std::sync::Arc;

use gpu::attention::{AttentionPath, DecodeAttention, Geometry, Plan};
use gpu::gemm::{layout, FOLD_CHUNKS};
use gpu::ops::HeadShape;
use gpu::Gpu;
use half::bf16;
use model::checkpoint::{load_weights, save_checkpoint, StoredDtype};
use model::config::ModelConfig;
use model::gpu_backend::decode_kernel::DecodeKernel;
use model::gpu_backend::forward::{GpuModel, KvSize};
use model::gpu_backend::linear::DecodeCublas;
use model::gpu_backend::step_buffers::{Capacity, DeviceStep};
use model::gpu_backend::step_program::{AttnPart, Fusion, Op, Weight};
use model::gpu_backend::weights::{gate_up_rows, qkv_rows, stacked_rows, ClassSteps, DeviceWeights};
use model::presets::Preset;
use model::start_times::StartTimes;
use ndarray::Array2;
use oracle::model::forward::Model;
use oracle::model::init::random_weights;
use oracle::model::kv_cache::KvCache;
use oracle::model::precision::Rounding;
use oracle::model::step::{LogitRows, StepInput};

#[path = "gpu_model/scenario.rs"]
mod scenario;

use scenario::{
    cache_errors, errors, gpu_model, preset_model, sequences, sequences_among, small_model, step_input, Step, BLOCK,
    BLOCKS,
};

fn main() {
    verify::gpu_harness::run(
        "gpu_model",
        &[
            ("weights_land_in_the_stacked_layouts_bit_for_bit", weights_land_in_the_stacked_layouts_bit_for_bit),
            ("the_forward_agrees_with_the_oracles_bf16_mode", the_forward_agrees_with_the_oracles_bf16_mode),
            ("a_random_asynct_0_5b_agrees_with_the_oracles_bf16_mode", half_billion_agrees_with_the_oracles_bf16_mode),
            ("a_decode_row_has_the_same_bits_alone_beside_a_chunk_and_twice", decode_row_bits),
            ("an_asynct_0_5b_decode_row_has_the_same_bits_alone_and_beside_89_others", wide_decode_row_bits),
            ("even_rows_plan_gives_the_dispatched_plans_bits", even_rows_bits),
            ("the_engine_on_the_gpu_draws_the_oracles_tokens_every_time", engine_on_the_gpu),
        ],
    )
}

fn bits(v: &[bf16]) -> Vec<u16> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn weights_land_in_the_stacked_layouts_bit_for_bit(gpu: &Arc<Gpu>) -> Result<(), String> {
    let msg = |e: &dyn std::fmt::Display| e.to_string();
    for tied in [true, false] {
        let mut cfg = Preset::Tiny.config();
        cfg.tie_word_embeddings = tied;
        let dims = cfg.dims();
        let mut weights = random_weights(&dims, 21);
        if !tied {
            weights.lm_head = Some(weights.embed_tokens.mapv(|x| -x * 0.5));
        }
        let dir = std::env::temp_dir().join(format!("asynct-gpu-model-{}-{tied}", std::process::id()));
        save_checkpoint(&dir, &cfg, &weights, StoredDtype::Bf16).map_err(|e| msg(&e))?;
        let host = load_weights::<bf16>(&dir, &cfg, &mut |_, _| {}).map_err(|e| msg(&e))?;
        std::fs::remove_dir_all(&dir).map_err(|e| msg(&e))?;
        let mut layers_done = Vec::new();
        // Every weight's class-step copy beside it where the head is untied, none where tied.
        let steps = ClassSteps([!tied; 4]);
        let dev = DeviceWeights::upload(
            gpu,
            &host,
            &dims,
            steps,
            &mut |done, total| layers_done.push((done, total)),
            &mut StartTimes::silent(),
        )
        .map_err(|e| msg(&e))?;
        let same = |what: &str, got: &cudarc::driver::CudaSlice<bf16>, want: Vec<bf16>| -> Result<(), String> {
            let got = gpu.download(got).map_err(|e| msg(&e))?;
            match bits(&got) == bits(&want) {
                true => Ok(()),
                false => {
                    Err(format!("{what} (tied {tied}): device bits differ from the host rows in the device layout"))
                }
            }
        };
        let one = |m: &Array2<bf16>| stacked_rows(&[m]);
        let heads = HeadShape { num_heads: dims.num_heads, num_kv_heads: dims.num_kv_heads, head_dim: dims.head_dim };
        for (i, (d, h)) in dev.layers.iter().zip(&host.layers).enumerate() {
            let a = &h.attn;
            same(&format!("layer {i} qkv"), &d.qkv, qkv_rows(&a.q_proj, &a.k_proj, &a.v_proj, heads))?;
            same(&format!("layer {i} o"), &d.o, one(&h.attn.o_proj))?;
            same(&format!("layer {i} gate_up"), &d.gate_up, gate_up_rows(&h.gate_proj, &h.up_proj))?;
            same(&format!("layer {i} down"), &d.down, one(&h.down_proj))?;
            let stored = [
                (qkv_rows(&a.q_proj, &a.k_proj, &a.v_proj, heads), dims.hidden_size),
                (one(&h.attn.o_proj), heads.q_width()),
                (gate_up_rows(&h.gate_proj, &h.up_proj), dims.hidden_size),
                (one(&h.down_proj), dims.intermediate_size),
            ];
            for (weight, (rows, k)) in Weight::ALL.into_iter().zip(stored) {
                match (d.class_steps(weight), tied) {
                    (Ok(copy), false) => {
                        same(&format!("layer {i} {weight:?} in class steps"), copy, layout::to_class_steps(&rows, k))?
                    }
                    (Err(_), true) => {}
                    (got, _) => return Err(format!("layer {i} {weight:?}: class-step copy {:?}", got.is_ok())),
                }
            }
            let sigma = gpu.download(&d.sigma).map_err(|e| msg(&e))?;
            if sigma != h.attn.hp1_sigma.iter().map(|x| x.to_f32()).collect::<Vec<_>>() {
                return Err(format!("layer {i} sigma differs"));
            }
        }
        same("embed_tokens", &dev.embed_tokens, one(&host.embed_tokens))?;
        same("head", dev.head(), one(host.lm_head.as_ref().unwrap_or(&host.embed_tokens)))?;
        if dev.lm_head.is_some() == tied {
            return Err(format!("tied {tied}, but lm_head uploaded: {}", dev.lm_head.is_some()));
        }
        let matrices = |l: &oracle::model::weights::LayerWeights<bf16>| {
            l.attn.q_proj.len()
                + l.attn.k_proj.len()
                + l.attn.v_proj.len()
                + l.attn.o_proj.len()
                + l.gate_proj.len()
                + l.up_proj.len()
                + l.down_proj.len()
        };
        let want = 2
            * (host.embed_tokens.len()
                + host.lm_head.as_ref().map_or(0, |h| h.len())
                + host.layers.iter().map(matrices).sum::<usize>());
        // The copies count as the weights they copy.
        let (hidden, inter) = (dims.hidden_size, dims.intermediate_size);
        let nk = |w: Weight| match w {
            Weight::Qkv => (heads.qkv_width(), hidden),
            Weight::O => (hidden, heads.q_width()),
            Weight::GateUp => (2 * inter, hidden),
            Weight::Down => (hidden, inter),
        };
        let want = if tied { want } else { want + steps.bytes(nk, dims.num_layers) };
        if dev.bytes != want {
            return Err(format!("{} weight bytes counted, {want} uploaded", dev.bytes));
        }
        if layers_done != (1..=dims.num_layers).map(|d| (d, dims.num_layers)).collect::<Vec<_>>() {
            return Err(format!("progress reported {layers_done:?}"));
        }
    }
    Ok(())
}

/// Logits of every row of `steps` on the GPU and in the oracle's bf16 mode; returns one report
/// line per step and the largest whole-step error, failing beyond `bound`.
fn compare_steps(gpu: &Arc<Gpu>, seed: u64, lens: &[usize], steps: &[Step], bound: f64) -> Result<Vec<String>, String> {
    compare_preset_steps(gpu, Preset::Small, seed, lens, steps, bound, false)
}

/// How many times the oracle's own f32-to-bf16 distance the GPU may be from the bf16 mode, when
/// the bound scales with it. That distance is how far this model carries a change of rounding
/// alone, and a random 35-layer model carries it far: its K/V distance grows smoothly with depth
/// (3.6e-3 after one layer, 3.6e-2 after 35 on the H200, no layer jumping), as independent
/// roundings add up, and its f32 mode is 3.3e-2 to 4.1e-2 from its bf16 mode. The GPU measured
/// 1.03 to 1.27 times that (2026-11-30, RESULTS run 34); the factor was set at 1.5 after that
/// measurement.
const SENSITIVITY_FACTOR: f64 = 1.5;

/// [`compare_steps`] on `preset`'s shape; with `scaled`, the bound is `bound` or, where larger,
/// [`SENSITIVITY_FACTOR`] times the oracle's own f32-to-bf16 distance on the same step. Every
/// step runs on three GPU models: decode steps through the graph path's kernels on one and the
/// megakernel on another, whose logits must be the same bits, so the bound holds for both (the
/// second also has its tensor-core prefill read queries the qk pass normed, where the first's
/// norms them from qkv itself: those steps' logits must be the same bits too); and,
/// where the model can take every chunk-row fusion (the device runs the WGMMA GEMM and the
/// shapes fit it), on a third whose chunk rows fuse their elementwise ops
/// into its epilogues (`ASYNCT_CHUNK_FUSION`'s route; the other two send chunk rows through
/// cuBLASLt and separate ops, the default), which must meet the same bound.
fn compare_preset_steps(
    gpu: &Arc<Gpu>,
    preset: Preset,
    seed: u64,
    lens: &[usize],
    steps: &[Step],
    bound: f64,
    scaled: bool,
) -> Result<Vec<String>, String> {
    let (cfg, weights, host) = preset_model(preset, seed)?;
    let dims = cfg.dims();
    let mut f32_oracle = match scaled {
        true => Some((
            Model::new(dims.clone(), weights.clone(), Rounding::Exact).map_err(|e| e.to_string())?,
            KvCache::<f32>::new(&dims, BLOCKS, BLOCK),
        )),
        false => None,
    };
    let oracle = Model::new(dims.clone(), weights.cast::<f64>(), Rounding::Bf16).map_err(|e| e.to_string())?;
    let mut cache = KvCache::<f64>::new(&dims, BLOCKS, BLOCK);
    let mut model = gpu_model(gpu, &cfg, &host)?;
    model.set_decode_kernel(DecodeKernel::Graph);
    let mut mega = gpu_model(gpu, &cfg, &host)?;
    mega.set_decode_kernel(DecodeKernel::Mega);
    mega.set_prefill_norms_queries(false);
    let mut fused = gpu_model(gpu, &cfg, &host)?;
    fused.set_chunk_fusion(Fusion::ALL);
    let fused_runs = fused.chunk_fusion() == Fusion::ALL;
    let seqs = sequences(lens, dims.vocab_size, seed);
    let mut report = Vec::new();
    let mut failed = false;
    // Decode rows on cuBLASLt have no fused epilogue, which the megakernel needs: it declines them.
    let cublas = DecodeCublas::from_env().map_err(|e| e.to_string())?;
    // A step of one decode row whose table holds 2 to FOLD_CHUNKS chunks takes the B1 step's path
    // (split-K leaving its partials, o_proj adding them), unless o_proj's fold is off
    // (ASYNCT_FOLD_O=0) or o_proj's decode rows run cuBLASLt.
    let fold_on = std::env::var("ASYNCT_FOLD_O").map_or(true, |v| v != "0") && cublas.pin(Weight::O).is_none();
    let chunks = |s: &Step| (seqs[s[0].0].blocks.len() * BLOCK).div_ceil(gpu::attention::CHUNK);
    let b1_path = |s: &Step| s.len() == 1 && s[0].2 == 1 && (2..=FOLD_CHUNKS).contains(&chunks(s));
    let (mut mega_steps, mut norming_steps, mut prefill_steps, mut b1_steps) = (0, 0, 0, 0);
    for (i, step) in steps.iter().enumerate() {
        let (ids, meta, slots) = step_input(&seqs, step);
        let input = StepInput { token_ids: &ids, meta: &meta, slot_mapping: &slots, logits: LogitRows::All };
        let want = oracle.forward(&input, &mut cache).map_err(|e| e.to_string())?;
        // The oracle's every row, in order, picked on the device.
        let picked: Vec<u32> = (0..ids.len() as u32).collect();
        let on_device = DeviceStep { token_ids: &ids, meta: &meta, slot_mapping: &slots, picked: &picked };
        let got = model.forward(&on_device).map_err(|e| e.to_string())?;
        let got_mega = mega.forward(&on_device).map_err(|e| e.to_string())?;
        if let Some(at) = got.iter().zip(&got_mega).position(|(a, b)| a.to_bits() != b.to_bits()) {
            return Err(format!(
                "step {i}: logit {at} differs between the graph path's kernels and the megakernel, \
                 or between a prefill norming its queries and one reading them normed"
            ));
        }
        // The comparisons mean something only where the step did run in the megakernel, or did
        // norm its queries in the prefill: plan the step's shape again and look.
        let facts = mega.upload(&on_device).map_err(|e| e.to_string())?;
        mega_steps += usize::from(!mega.plan(facts).map_err(|e| e.to_string())?.program().persistent.is_empty());
        let facts = model.upload(&on_device).map_err(|e| e.to_string())?;
        let program = model.plan(facts).map_err(|e| e.to_string())?.program().clone();
        let has =
            |want: AttnPart| program.ops.iter().any(|op| matches!(op, Op::Attention { part, .. } if *part == want));
        norming_steps += usize::from(has(AttnPart::PrefillNormingQueries));
        if b1_path(step) {
            let folded = program.ops.iter().any(|op| matches!(op, Op::FoldedO { .. }));
            if folded != fold_on {
                return Err(format!("step {i}: one decode row folded o_proj {folded}, with the fold on {fold_on}"));
            }
            b1_steps += 1;
        }
        prefill_steps += usize::from(has(AttnPart::PrefillNormingQueries) || has(AttnPart::Prefill));
        let (error, worst_row) = errors(&got, &want).map_err(|e| format!("step {i}: {e}"))?;
        let error_fused = if fused_runs {
            let got_fused = fused.forward(&on_device).map_err(|e| e.to_string())?;
            Some(errors(&got_fused, &want).map_err(|e| format!("step {i}, fused chunk rows: {e}"))?.0)
        } else {
            None
        };
        let (limit, note) = match f32_oracle.as_mut() {
            None => (bound, String::new()),
            Some((f32_model, f32_cache)) => {
                let f32_logits = f32_model.forward(&input, f32_cache).map_err(|e| e.to_string())?;
                let (s, _) = errors(&f32_logits, &want)?;
                (
                    bound.max(SENSITIVITY_FACTOR * s),
                    format!("; the oracle's f32 mode is {s:.2e} from its bf16 mode, GPU / that {:.2}", error / s),
                )
            }
        };
        failed |= error > limit || error_fused.is_some_and(|e| e > limit);
        let fused_note = error_fused.map_or_else(
            || format!("; chunk-row fusion not checked: this device and shape allow only {:?}", fused.chunk_fusion()),
            |e| format!("; chunk rows fused into the WGMMA GEMM {e:.2e}"),
        );
        report.push(format!(
            "step {i} ({} rows): logits relative L2 {error:.2e}, worst row {worst_row:.2e}{note}{fused_note}",
            ids.len()
        ));
        if i == 0 {
            report.push(format!("  step 0's K/V: {}", cache_errors(&model, &cache, gpu, &slots)?));
        }
    }
    let decode_steps = steps.iter().filter(|step| step.iter().all(|&(_, _, len)| len == 1)).count();
    let want_mega = if cublas.is_none() { decode_steps } else { 0 };
    if mega_steps != want_mega {
        return Err(format!("{mega_steps} of the {decode_steps} decode-only steps ran in the megakernel"));
    }
    report.push(match cublas.is_none() {
        true => format!("{mega_steps} decode steps in the megakernel, the same bits as the graph path's kernels"),
        false => format!("decode rows on cuBLASLt ({} = {cublas:?}): no step in the megakernel", DecodeCublas::VAR),
    });
    if b1_steps > 0 {
        report.push(match fold_on {
            true => {
                format!("{b1_steps} one-row steps on the B1 path: split-K leaving its partials, o_proj adding them")
            }
            false => format!("{b1_steps} one-row steps with o_proj's fold off: the B1 path not checked"),
        });
    }
    // The default model norms the queries in every tensor-core prefill (decode rows fused).
    if norming_steps != prefill_steps {
        return Err(format!("{norming_steps} of the {prefill_steps} tensor-core prefill steps normed their queries"));
    }
    report.push(format!(
        "{norming_steps} steps whose prefill normed its own queries, the same bits as with the qk pass's"
    ));
    match failed {
        false => Ok(report),
        true => Err(format!("{}\nlogits differ from the oracle's bf16 mode beyond the bound", report.join("\n"))),
    }
}

/// The whole model's bound: each of SPEC section 4's per-path bounds holds for one attention
/// call, and the model compounds four layers of them with bf16 roundings that fall differently
/// from the f64 reference's; measured figures are printed and recorded in RESULTS.
const MODEL_BOUND: f64 = 2e-2;

fn the_forward_agrees_with_the_oracles_bf16_mode(gpu: &Arc<Gpu>) -> Result<(), String> {
    // A, B, C prefill (C long enough for the tensor-core prefill; 213 rows for a wide GEMM);
    // then A and B decode beside D's 20-token chunk; then all four decode.
    let steps: Vec<Step> = vec![
        vec![(0, 0, 40), (1, 0, 23), (2, 0, 150)],
        vec![(0, 40, 1), (1, 23, 1), (3, 0, 20)],
        vec![(0, 41, 1), (1, 24, 1), (2, 150, 1), (3, 20, 1)],
        vec![(0, 42, 1), (1, 25, 1), (2, 151, 1), (3, 21, 1)],
    ];
    let tensor_core = compare_steps(gpu, 31, &[45, 28, 152, 33], &steps, MODEL_BOUND)?;
    // The same kind of prompts in chunks of 16 (fake decode: P stays f32) and skinny GEMMs.
    let chunked: Vec<Step> = vec![
        vec![(0, 0, 16), (1, 0, 16)],
        vec![(0, 16, 16), (1, 16, 7)],
        vec![(1, 23, 1), (0, 32, 8)],
        vec![(0, 40, 1), (1, 24, 1)],
    ];
    let fake_decode = compare_steps(gpu, 31, &[45, 28], &chunked, MODEL_BOUND)?;
    // One sequence alone in chunks of 212, then decoding at 1,061 keys (9 chunks), as a B1 step
    // does at 1K context: split-K leaving its partials and o_proj adding them.
    let mut alone: Vec<Step> = (0..1060).step_by(212).map(|at| vec![(0, at, 212)]).collect();
    alone.extend([vec![(0, 1060, 1)], vec![(0, 1061, 1)]]);
    let one_row = compare_steps(gpu, 31, &[1100], &alone, MODEL_BOUND)?;
    println!("  tensor-core prefill:\n    {}", tensor_core.join("\n    "));
    println!("  chunks of 16 (fake decode):\n    {}", fake_decode.join("\n    "));
    println!("  one sequence alone:\n    {}", one_row.join("\n    "));
    Ok(())
}

/// A random asynct-0.5b (35 layers): prompts crossing block boundaries, one chunk for the
/// tensor-core prefill, then decodes. The K/V report shows, layer by layer, how the distance from
/// the bf16-faithful forward grows.
fn half_billion_agrees_with_the_oracles_bf16_mode(gpu: &Arc<Gpu>) -> Result<(), String> {
    let steps: Vec<Step> =
        vec![vec![(0, 0, 70), (1, 0, 33)], vec![(0, 70, 1), (1, 33, 1)], vec![(0, 71, 1), (1, 34, 1)]];
    let report = compare_preset_steps(gpu, Preset::HalfBillion, 5, &[72, 35], &steps, MODEL_BOUND, true)?;
    println!("  asynct-0.5b (random):\n    {}", report.join("\n    "));
    Ok(())
}

fn decode_row_bits(gpu: &Arc<Gpu>) -> Result<(), String> {
    let (cfg, _, host) = small_model(37)?;
    let seqs = sequences(&[41, 20], cfg.dims().vocab_size, 9);
    let run = |steps: &[Step]| -> Result<Vec<Array2<f32>>, String> {
        let mut model = gpu_model(gpu, &cfg, &host)?;
        steps
            .iter()
            .map(|step| {
                let (ids, meta, slots) = step_input(&seqs, step);
                let picked: Vec<u32> = (0..ids.len() as u32).collect();
                let step = DeviceStep { token_ids: &ids, meta: &meta, slot_mapping: &slots, picked: &picked };
                model.forward(&step).map_err(|e| e.to_string())
            })
            .collect()
    };
    let prefill: Step = vec![(0, 0, 40)];
    let alone = run(&[prefill.clone(), vec![(0, 40, 1)]])?;
    let beside = run(&[prefill.clone(), vec![(0, 40, 1), (1, 0, 20)]])?;
    let again = run(&[prefill, vec![(0, 40, 1), (1, 0, 20)]])?;
    let bits = |a: ndarray::ArrayView1<'_, f32>| a.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    if bits(alone[1].row(0)) != bits(beside[1].row(0)) {
        return Err("the decode row's logits differ alone and beside a 20-token prefill chunk".into());
    }
    if beside.iter().zip(&again).any(|(a, b)| a.iter().zip(b).any(|(x, y)| x.to_bits() != y.to_bits())) {
        return Err("two runs of the same steps differ".into());
    }
    Ok(())
}

/// asynct-0.5b (random weights): a decode row's logits alone and as the first of 90 decode rows,
/// each model fresh, every sequence's two-token prompt prefilled first (alone, then all 90 in one
/// step). Past 64 decode rows gate/up runs the skinny kernel's wide form where the device runs
/// wgmma (from its class-step copy of the weight), alone the one-row form: the same bits.
fn wide_decode_row_bits(gpu: &Arc<Gpu>) -> Result<(), String> {
    const ROWS: usize = 90;
    let (cfg, _, host) = preset_model(Preset::HalfBillion, 43)?;
    let seqs = sequences(&[3; ROWS], cfg.dims().vocab_size, 11);
    let run = |steps: &[Step]| -> Result<Array2<f32>, String> {
        let cap = Capacity { max_tokens: 256, max_seqs: 128, max_blocks_per_seq: 4 };
        let mut model = GpuModel::new(
            gpu,
            cfg.dims(),
            &host,
            KvSize::Blocks(BLOCKS),
            BLOCK,
            cap,
            &mut |_, _| {},
            &mut StartTimes::silent(),
        )
        .map_err(|e| e.to_string())?;
        let mut last = Array2::zeros((0, 0));
        for step in steps {
            let (ids, meta, slots) = step_input(&seqs, step);
            let picked: Vec<u32> = (0..ids.len() as u32).collect();
            let step = DeviceStep { token_ids: &ids, meta: &meta, slot_mapping: &slots, picked: &picked };
            last = model.forward(&step).map_err(|e| e.to_string())?;
        }
        Ok(last)
    };
    let alone = run(&[vec![(0, 0, 2)], vec![(0, 2, 1)]])?;
    let beside = run(&[(0..ROWS).map(|s| (s, 0, 2)).collect(), (0..ROWS).map(|s| (s, 2, 1)).collect()])?;
    let bits = |a: ndarray::ArrayView1<'_, f32>| a.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    if beside.nrows() != ROWS || bits(alone.row(0)) != bits(beside.row(0)) {
        return Err(format!("the decode row's logits differ alone and beside {} others", ROWS - 1));
    }
    let wide = gpu::gemm::wgmma_runs_on(gpu.info().compute_capability);
    println!("  row 0 of {ROWS} decode rows: the row alone's bits (gate/up's wide form: {wide})");
    Ok(())
}

/// asynct-0.5b (random weights): a decode step of 128 rows of 2 to 4 chunks each gives the same
/// logits bits through the dispatcher's attention (split-K) and through the plan the decode
/// graphs replay for even rows (the paired decode kernel, `gpu::attention::even_rows`), on one
/// model, the prompts prefilled one at a time first (the step written twice into the cache, the
/// same values).
fn even_rows_bits(gpu: &Arc<Gpu>) -> Result<(), String> {
    const ROWS: usize = 128;
    const WIDTH: usize = 24;
    const CACHE_BLOCKS: usize = ROWS * WIDTH;
    let (cfg, _, host) = preset_model(Preset::HalfBillion, 47)?;
    let dims = cfg.dims();
    let lens: Vec<usize> = (0..ROWS).map(|s| 200 + (s * 7) % 180).collect();
    let seqs = sequences_among(&lens, dims.vocab_size, 13, CACHE_BLOCKS);
    let cap = Capacity { max_tokens: 512, max_seqs: ROWS, max_blocks_per_seq: WIDTH };
    let blocks = KvSize::Blocks(CACHE_BLOCKS);
    let mut model =
        GpuModel::new(gpu, dims.clone(), &host, blocks, BLOCK, cap, &mut |_, _| {}, &mut StartTimes::silent())
            .map_err(|e| e.to_string())?;
    let forward = |model: &mut GpuModel, step: &Step, attention| -> Result<Array2<f32>, String> {
        let (ids, meta, slots) = step_input(&seqs, step);
        let picked: Vec<u32> = (0..ids.len() as u32).collect();
        let step = DeviceStep { token_ids: &ids, meta: &meta, slot_mapping: &slots, picked: &picked };
        model.forward_with(&step, attention).map_err(|e| e.to_string())
    };
    for (s, &len) in lens.iter().enumerate() {
        forward(&mut model, &vec![(s, 0, len - 1)], DecodeAttention::Dispatched)?;
    }
    let decode: Step = lens.iter().enumerate().map(|(s, &len)| (s, len - 1, 1)).collect();
    let dispatched = forward(&mut model, &decode, DecodeAttention::Dispatched)?;
    let even = forward(&mut model, &decode, DecodeAttention::Even)?;
    let geometry = Geometry {
        rows: ROWS,
        num_heads: dims.num_heads,
        num_kv_heads: dims.num_kv_heads,
        head_dim: dims.head_dim,
        block_size: BLOCK,
        max_blocks_per_seq: WIDTH,
    };
    let auto = Plan::auto(geometry).map_err(|e| e.to_string())?.path;
    if matches!(auto, AttentionPath::Decode(_)) {
        return Err(format!(
            "the dispatcher took {} itself: the check would compare a kernel with itself",
            auto.name()
        ));
    }
    let bits = |a: &Array2<f32>| a.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    if dispatched.nrows() != ROWS || bits(&dispatched) != bits(&even) {
        return Err(format!("{ROWS} decode rows' logits differ through {} and the paired decode kernel", auto.name()));
    }
    println!(
        "  {ROWS} decode rows of 200 to 379 keys: {} and the paired decode kernel give the same bits",
        auto.name()
    );
    Ok(())
}

/// A tiny-vocabulary model with the GPU's head dim, written with the byte tokenizer.
fn byte_model(dir: &std::path::Path) -> Result<ModelConfig, String> {
    let mut cfg = Preset::Tiny.config();
    (cfg.head_dim, cfg.hidden_size, cfg.intermediate_size) = (128, 256, 512);
    let weights = random_weights(&cfg.dims(), 41);
    save_checkpoint(dir, &cfg, &weights, StoredDtype::Bf16).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("tokenizer.json"), model::byte_tokenizer::tokenizer_json().map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    Ok(cfg)
}

/// Every request's tokens from the GPU engine: eight requests (greedy and seeded temperature,
/// prompts from 3 to 150 tokens, so chunks take the tensor-core prefill beside decode rows).
fn gpu_engine_tokens(
    gpu: &Arc<Gpu>,
    dir: &std::path::Path,
    cfg: &ModelConfig,
    record: bool,
) -> Result<Vec<Vec<u32>>, String> {
    use model::engine::{Engine, GenerationRequest, SamplingParams, StopConditions};
    use model::gpu_backend::executor::{GpuExecutor, GpuOptions};
    use model::scheduler::SchedulerConfig;
    let e = |x: model::Error| x.to_string();
    let options = GpuOptions {
        max_num_seqs: 8,
        max_batched_tokens: 256,
        max_model_len: cfg.max_position_embeddings,
        block_size: BLOCK,
        memory_utilization: 0.3,
        cuda_graphs: false,
        decode_kernel: DecodeKernel::default(),
        kv_blocks: None,
    };
    let executor = GpuExecutor::load(gpu, dir, cfg, options, &mut |_, _| {}, &mut StartTimes::silent()).map_err(e)?;
    let tokenizer = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).map_err(|x| x.to_string())?;
    let sched = SchedulerConfig {
        max_num_seqs: 8,
        max_batched_tokens: 256,
        prefill_chunk: 64,
        max_model_len: cfg.max_position_embeddings,
        prefix_caching: true,
    };
    let mut engine = Engine::new(Box::new(executor), Arc::new(tokenizer), sched, record).map_err(e)?;
    for i in 0..8u32 {
        let len = [3, 17, 150, 40, 64, 65, 9, 100][i as usize];
        let sampling = match i % 2 {
            0 => SamplingParams::greedy(),
            _ => SamplingParams { top_p: 0.95, ..SamplingParams::with_temperature(0.8, u64::from(i)) },
        };
        let stop = StopConditions {
            eos_token_ids: vec![],
            stop: vec![],
            max_tokens: 24,
            max_model_len: cfg.max_position_embeddings,
            ignore_eos: true,
            ..Default::default()
        };
        let prompt = (0..len).map(|t| (t * 37 + i * 11) % 500).collect();
        engine.add_request(GenerationRequest { prompt, sampling, stop, ..Default::default() }).map_err(e)?;
    }
    Ok(engine.run_to_completion().map_err(e)?.into_iter().map(|c| c.token_ids).collect())
}

fn engine_on_the_gpu(gpu: &Arc<Gpu>) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("asynct-gpu-engine-{}", std::process::id()));
    let cfg = byte_model(&dir)?;
    // Recording brings every row's logits back (the LM head over every row, the sampled ones
    // first); not recording only the sampled rows'. Same steps, same logits: the tokens must
    // agree. (gpu_sampling holds each device-drawn token against the oracle's draw.)
    let on_device = gpu_engine_tokens(gpu, &dir, &cfg, false)?;
    let recording = gpu_engine_tokens(gpu, &dir, &cfg, true)?;
    let again = gpu_engine_tokens(gpu, &dir, &cfg, false)?;
    std::fs::remove_dir_all(&dir).map_err(|e| e.to_string())?;
    if on_device.iter().any(|t| t.len() != 24) {
        return Err(format!("every request should generate 24 tokens: {on_device:?}"));
    }
    if on_device != recording {
        return Err(format!("the engine drew {on_device:?}, recording every row's logits {recording:?}"));
    }
    if on_device != again {
        return Err("two runs of the engine differ".into());
    }
    println!("  8 requests x 24 tokens, the same with and without recording; first: {:?}", &on_device[0][..8]);
    Ok(())
}
