//! The folded form (`gpu::gemm::staged`) held to what it replaces, bit for bit: the split-K
//! attention finishing its rows itself (the counted launch), then the plain skinny GEMM on its
//! bf16 output. Fresh attention batches of 1 to 8 decode rows at head dims 64, 128 and 256, row
//! lengths of none (padding) and of one chunk to past `FOLD_CHUNKS` chunks (the kernel's second
//! pass of loads), every output and the workspace poisoned with NaN first; the Store and PeriLn
//! epilogues at every rows per CTA the folded form takes; and the launch that leaves its partials
//! writes every partial the fold reads.

use std::sync::Arc;

use cudarc::driver::CudaSlice;
use gpu::attention::{AttentionPath, AttnBuffers, Hp1Attention, Pv, Settled};
use gpu::gemm::{Epilogue, EpilogueKind, FoldLayout, FoldedX, Gemm, GemmPath, GemmPlan, GemmShape, FOLD_CHUNKS};
use gpu::Gpu;
use half::bf16;
use verify::gpu_cases::{case, decodes};
use verify::gpu_paths::{geometry, make_plan, HostCase, PlanChoice};

use super::device::{g, Check};
use super::epilogue::norm;
use super::reference::{draw_w, same_bits, uniform_bf16, POISON};

/// `(rows' key counts, (Hq, Hkv), D)`: one row of one chunk and of the 1K bucket's 9, rows past
/// `FOLD_CHUNKS` chunks, and full slabs of 8 rows.
const BATCHES: [(&[usize], (usize, usize), usize); 6] = [
    (&[100], (8, 4), 128),
    (&[1024], (8, 4), 128),
    (&[1500, 7, 900], (8, 4), 128),
    (&[300, 1, 126, 127, 2000, 64, 640, 1200], (4, 2), 64),
    (&[520, 253], (2, 1), 256),
    (&[1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024], (8, 4), 128),
];

pub fn folded_x(gpu: &Arc<Gpu>) -> Check {
    let sms = g(gpu.multiprocessors())?;
    let mut runs = 0;
    for (b, &(lens, heads, d)) in BATCHES.iter().enumerate() {
        let seed = 7100 + b as u64;
        let data = case(&decodes(lens), heads, d, 16, seed).materialise().map_err(|e| e.to_string())?;
        let host = HostCase::new(&data);
        // Two rows past the third batch's last query: padding, no keys, zeros either way.
        let m = lens.len() + if b == 2 { 2 } else { 0 };
        let geo = geometry(&data, m);
        let plan = g(make_plan(geo, PlanChoice::Path(AttentionPath::SplitK(Pv::Sparse))))?;
        let attention = g(Hp1Attention::new(gpu, plan.clone()))?;
        let mut bufs = g(AttnBuffers::upload(gpu, geo, &host.inputs()))?;
        g(bufs.reserve_workspace(gpu, plan.workspace_len))?;
        g(bufs.poison_output(gpu))?;
        g(attention.build_rows(bufs.row_operands()))?;
        g(attention.run(bufs.operands(Settled::Nothing), &host.gate()))?;
        let finished = g(bufs.download_output(gpu))?;
        g(bufs.poison_workspace(gpu))?;
        g(attention.run(bufs.operands_leaving_partials(Settled::Rows), &host.gate()))?;

        let label = format!("{m} rows of {lens:?} keys, D {d}");
        let layout = FoldLayout { heads: heads.0, head_dim: d, max_chunks: geo.max_chunks() };
        let k = heads.0 * d;
        let x = g(gpu.upload(&finished))?;
        for (s, n) in [1024usize, 320].into_iter().enumerate() {
            let shape = GemmShape { m, n, k };
            let w = g(gpu.upload(&draw_w(seed + 10 * s as u64, n, k)))?;
            let (partial, row_len) =
                bufs.partials().ok_or_else(|| format!("{label}: a split-K plan without a workspace"))?;
            let folded_in = FoldedX { partial, row_len };
            let residual = g(gpu.upload(&uniform_bf16(seed, 5, m * n, 4.0)))?;
            let (after, before) = (norm(gpu, seed + 1, n, true)?, norm(gpu, seed + 2, n, false)?);
            for kind in [EpilogueKind::Store, EpilogueKind::PeriLn] {
                for cta_sms in [sms, 8, 1] {
                    let folded = g(GemmPlan::skinny_fold(shape, kind, layout, cta_sms))?;
                    let rows = match &folded.path {
                        GemmPath::Skinny(t) => t.rows,
                        _ => return Err(format!("{label}: {} is not skinny", folded.name())),
                    };
                    let plain = g(Gemm::new(gpu, g(GemmPlan::skinny_rows_epilogue(shape, rows, kind))?))?;
                    let folded = g(Gemm::new(gpu, folded))?;
                    let mut outs: Vec<[CudaSlice<bf16>; 2]> = Vec::new();
                    for fold in [false, true] {
                        let mut out = [poisoned(gpu, m * n)?, poisoned(gpu, m * n)?];
                        let [a, h] = &mut out;
                        let epi = match kind {
                            EpilogueKind::Store => Epilogue::Store { y: a.as_view_mut() },
                            _ => Epilogue::PeriLn {
                                x: residual.as_view(),
                                after: &after,
                                before: &before,
                                x_out: a.as_view_mut(),
                                h_out: h.as_view_mut(),
                            },
                        };
                        if fold {
                            g(folded.run_folded(&folded_in, &w.as_view(), epi))?;
                        } else {
                            g(plain.run_with(&x.as_view(), &w.as_view(), epi))?;
                        }
                        outs.push(out);
                    }
                    let what = format!("{label}, N {n}, {kind:?}, {rows} rows a CTA");
                    let outputs = if kind == EpilogueKind::Store { 1 } else { 2 };
                    for (i, name) in ["y or x_out", "h_out"].into_iter().enumerate().take(outputs) {
                        let (want, got) = (g(gpu.download(&outs[0][i]))?, g(gpu.download(&outs[1][i]))?);
                        if let Some(p) = want.iter().position(|v| !v.is_finite()) {
                            return Err(format!("{what}: the unfolded {name} left element {p} unwritten"));
                        }
                        same_bits(&format!("{what}: {name}"), &got, &want)?;
                    }
                    runs += 1;
                }
            }
        }
        let (_, row_len) = g(bufs.download_rows(gpu))?;
        let partial = match bufs.partials() {
            Some((p, _)) => gpu.stream().clone_dtoh(&p).map_err(|e| e.to_string())?,
            None => Vec::new(),
        };
        every_read_partial_written(&label, &partial, &row_len, layout)?;
    }
    println!("  {runs} folded launches give the finished attention's GEMM bits ({FOLD_CHUNKS} chunks a load pass)");
    Ok(())
}

/// Fails if a partial that the fold reads (chunks below `ceil(row_len / CHUNK)`) is still NaN
/// from the poison: the launch that leaves its partials must write them all. (A partial of the
/// attention is NaN only from NaN inputs, which these batches lack.)
fn every_read_partial_written(label: &str, partial: &[f32], row_len: &[i32], l: FoldLayout) -> Check {
    for (r, &len) in row_len.iter().enumerate() {
        let chunks = (len as usize).div_ceil(gpu::attention::CHUNK);
        for h in 0..l.heads {
            for c in 0..chunks {
                let at = ((r * l.heads + h) * l.max_chunks + c) * l.head_dim;
                if partial[at..at + l.head_dim].iter().any(|v| v.is_nan()) {
                    return Err(format!("{label}: row {r} head {h} chunk {c}'s partial left unwritten"));
                }
            }
        }
    }
    Ok(())
}

fn poisoned(gpu: &Gpu, n: usize) -> Result<CudaSlice<bf16>, String> {
    g(gpu.upload(&vec![POISON; n]))
}
