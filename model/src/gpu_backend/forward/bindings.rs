//! Binding a step program's ops to the step's buffers: [`GpuModel::walk`] turns each op into the
//! launch of its kernel (eager steps and graph capture) or into a recorded megakernel op
//! (`gpu::mega`), from the same code, so the two cannot bind an op differently.

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};
use half::bf16;

use gpu::attention::{
    GateParams, Hp1Attention, LayerBuffers, Operands, PrefillOperands, QueryNorm, RowOperands, Settled,
};
use gpu::gemm::{Epilogue, EpilogueKind, FoldedX, GemmShape};
use gpu::mega::MegaOp;
use gpu::ops::{HeadShape, QkvInputs, QkvOutputs, RopeTable, UClipNormParams};

use super::{folded_o_layout, gemm_nk, head_shape, row_split, AttnPlan, DeviceCache, GpuModel, StepFacts, StepLaunch};
use crate::error::{Error, Result};
use crate::gpu_backend::step_buffers::{Split, StepBuffers};
use crate::gpu_backend::step_program::{AttnPart, Op, Rows, Sublayer, Weight};
use crate::gpu_backend::weights::{DeviceLayer, DeviceWeights};

impl GpuModel {
    /// Binds each of `ops` (of `launch`'s program) to its buffers, then launches it or records it
    /// as a megakernel op, as `sink` says.
    pub(super) fn walk(&mut self, launch: &StepLaunch, ops: &[Op], sink: &mut Sink<'_>) -> Result<()> {
        let StepFacts { tokens: t, split, picked, width, .. } = launch.shape;
        let rows = row_split(launch.shape);
        let d = self.dims.clone();
        let (hidden, inter, vocab) = (d.hidden_size, d.intermediate_size, d.vocab_size);
        let (qkv_width, q_width) = (self.heads.qkv_width(), self.heads.q_width());
        let shape = self.heads;
        let nk = |weight| gemm_nk(&d, &shape, weight);
        let Self { weights: w, cache, bufs: b, kernels: k, linears, gate, gates, heads, megas, early_keys, .. } = self;
        let span = |r: Rows| match r {
            Rows::Decodes => 0..rows.decodes,
            Rows::Chunks => rows.decodes..t,
            Rows::All => 0..t,
        };
        // Elements of `width`-wide rows `r`.
        let el = |r: &std::ops::Range<usize>, width: usize| r.start * width..r.end * width;
        let (th, all) = (t * hidden, 0..t);
        for op in ops {
            if matches!(sink, Sink::Record(_)) && !matches!(op, Op::Linear { .. } | Op::Attention { .. }) {
                return Err(Error::Executor(format!("{op:?} has no megakernel form")));
            }
            match *op {
                Op::Embed => k.embedding.run_normed(
                    &w.embed_tokens.as_view(),
                    vocab,
                    &b.ids.slice(..t),
                    &w.layers[0].input_norm,
                    &mut b.x.slice_mut(..th),
                    &mut b.h.slice_mut(..th),
                    &mut k.faults,
                )?,
                Op::BuildRows => {
                    let (a, seqs) = match &launch.attn {
                        AttnPlan::Decode(a) => (a, split.seqs),
                        AttnPlan::Split { decodes: Some(a), .. } => (a, split.decodes),
                        AttnPlan::Split { decodes: None, .. } => {
                            return Err(Error::Executor("per-row metadata for a step without decode rows".into()))
                        }
                    };
                    let n = a.plan().geometry.rows;
                    a.build_rows(RowOperands {
                        query_start_loc: b.meta.query_start_loc.slice(..seqs + 1),
                        seq_lens: b.meta.seq_lens.slice(..seqs),
                        num_seqs: seqs,
                        row_seq: b.row_seq.slice_mut(..n),
                        row_len: b.row_len.slice_mut(..n),
                    })?;
                }
                Op::Linear { layer, weight, lane, epilogue } => {
                    let (first, m) = rows.lane(lane);
                    let r = first..first + m;
                    let (n, kk) = nk(weight);
                    let gemm = linears.get(lane, weight, GemmShape { m, n, k: kk }, epilogue)?;
                    let lw = &w.layers[layer];
                    let (hr, attn_r, mlp_r) = (el(&r, hidden), el(&r, q_width), el(&r, inter));
                    let (x, wv, epi) = match (weight, epilogue) {
                        (Weight::Qkv, EpilogueKind::Store) => {
                            (b.h.slice(hr), lw.qkv.as_view(), Epilogue::Store { y: b.qkv.slice_mut(el(&r, qkv_width)) })
                        }
                        (Weight::Qkv, EpilogueKind::QkNormRopeCache) => (
                            b.h.slice(hr),
                            lw.qkv.as_view(),
                            Epilogue::QkNormRopeCache {
                                heads: *heads,
                                rope: k.qk.rope(),
                                q_norm: &lw.q_norm,
                                k_norm: &lw.k_norm,
                                positions: b.positions.slice(r.clone()),
                                slot_mapping: b.slots.slice(r.clone()),
                                q: b.q.slice_mut(el(&r, q_width)),
                                key_cache: cache.key[layer].as_view_mut(),
                                value_cache: cache.value[layer].as_view_mut(),
                                faults: &mut k.faults,
                            },
                        ),
                        (Weight::O, EpilogueKind::Store) => {
                            (b.attn.slice(attn_r), lw.o.as_view(), Epilogue::Store { y: b.proj.slice_mut(hr) })
                        }
                        (Weight::O, EpilogueKind::PeriLn) => {
                            let c = Close::of(w, layer, Sublayer::Attention, &mut b.x, &mut b.x_next, &mut b.h, hr);
                            (b.attn.slice(attn_r), lw.o.as_view(), c.epilogue())
                        }
                        (Weight::GateUp, EpilogueKind::Store) => (
                            b.h.slice(hr),
                            lw.gate_up.as_view(),
                            Epilogue::Store { y: b.gate_up.slice_mut(el(&r, 2 * inter)) },
                        ),
                        (Weight::GateUp, EpilogueKind::SiluMul) => {
                            (b.h.slice(hr), lw.gate_up.as_view(), Epilogue::SiluMul { out: b.mlp.slice_mut(mlp_r) })
                        }
                        (Weight::Down, EpilogueKind::Store) => {
                            (b.mlp.slice(mlp_r), lw.down.as_view(), Epilogue::Store { y: b.proj.slice_mut(hr) })
                        }
                        (Weight::Down, EpilogueKind::PeriLn) => {
                            let c = Close::of(w, layer, Sublayer::Mlp, &mut b.x, &mut b.x_next, &mut b.h, hr);
                            (b.mlp.slice(mlp_r), lw.down.as_view(), c.epilogue())
                        }
                        (weight, epilogue) => {
                            return Err(Error::Executor(format!("no {epilogue:?} epilogue after the {weight:?} GEMM")))
                        }
                    };
                    let wv = if gemm.plan().reads_class_steps() { lw.class_steps(weight)?.as_view() } else { wv };
                    match sink {
                        Sink::Launch => gemm.run_with(&x, &wv, epi)?,
                        Sink::Record(ops) => ops.push(gemm.record_with(&x, &wv, epi)?),
                    }
                }
                Op::FoldedO { layer, epilogue } => {
                    let m = rows.decodes;
                    let (n, kk) = nk(Weight::O);
                    let layout = folded_o_layout(&launch.attn, &d)?;
                    let gemm = linears.folded(GemmShape { m, n, k: kk }, epilogue, layout)?;
                    let (lw, hr) = (&w.layers[layer], el(&(0..m), hidden));
                    let x = FoldedX {
                        partial: b.workspace.slice(..m * layout.heads * layout.max_chunks * layout.head_dim),
                        row_len: b.row_len.slice(..m),
                    };
                    let epi = match epilogue {
                        EpilogueKind::PeriLn => {
                            Close::of(w, layer, Sublayer::Attention, &mut b.x, &mut b.x_next, &mut b.h, hr).epilogue()
                        }
                        EpilogueKind::Store => Epilogue::Store { y: b.proj.slice_mut(hr) },
                        other => return Err(Error::Executor(format!("no {other:?} epilogue after the folded o GEMM"))),
                    };
                    match sink {
                        Sink::Launch => gemm.run_folded(&x, &lw.o.as_view(), epi)?,
                        Sink::Record(_) => {
                            return Err(Error::Executor("a folded o_proj has no megakernel form".into()))
                        }
                    }
                }
                Op::QkNormRopeCache { layer, rows: r, queries } => {
                    let r = span(r);
                    let lw = &w.layers[layer];
                    let inputs = QkvInputs {
                        qkv: b.qkv.slice(el(&r, qkv_width)),
                        positions: b.positions.slice(r.clone()),
                        slot_mapping: b.slots.slice(r.clone()),
                    };
                    let mut outputs = QkvOutputs {
                        q: queries.then(|| b.q.slice_mut(el(&r, q_width))),
                        key_cache: cache.key[layer].as_view_mut(),
                        value_cache: cache.value[layer].as_view_mut(),
                    };
                    k.qk.run(&lw.q_norm, &lw.k_norm, &inputs, &mut outputs, &mut k.faults)?;
                }
                Op::Attention { layer, part } => {
                    let l = LayerRef::of(cache, w, layer, gate, heads, width);
                    attention_part(&launch.attn, part, l, b, k.qk.rope(), split, *early_keys, sink)?;
                }
                Op::Megakernel => {
                    let (mega, table) = launch
                        .mega
                        .as_ref()
                        .ok_or_else(|| Error::Executor("a megakernel op without its table".into()))?;
                    megas[*mega].run(table)?;
                }
                Op::GateStats { layer, part } => {
                    let meter = gates.as_mut().ok_or_else(|| {
                        Error::Executor("a step planned with gate statistics runs after they stopped".into())
                    })?;
                    let a = match (&launch.attn, part) {
                        (AttnPlan::Decode(a), AttnPart::Rows) => a,
                        (AttnPlan::Split { decodes: Some(a), .. }, AttnPart::Decodes) => a,
                        _ => return Err(Error::Executor(format!("gate statistics of a {part:?} attention"))),
                    };
                    let seqs = if part == AttnPart::Rows { split.seqs } else { split.decodes };
                    let geometry = a.plan().geometry;
                    let n = geometry.rows;
                    let l = LayerRef::of(cache, w, layer, gate, heads, width);
                    let bufs =
                        l.buffers(&b.q, q_width, 0..n, &b.meta.block_table, seqs, b.attn.slice_mut(..n * q_width));
                    meter.kernel.run(
                        &bufs,
                        &b.row_seq.slice(..n),
                        &b.row_len.slice(..n),
                        &geometry,
                        gate,
                        &mut meter.counters.as_view_mut(),
                    )?;
                }
                Op::PeriLn { layer, sublayer, rows: r } => {
                    let r = el(&span(r), hidden);
                    let proj = b.proj.slice(r.clone());
                    let mut c = Close::of(w, layer, sublayer, &mut b.x, &mut b.x_next, &mut b.h, r);
                    k.peri_ln.residual(&proj, &c.x, c.after, c.before, &mut c.x_out, &mut c.h_out)?;
                }
                Op::SiluMul { rows: r, .. } => {
                    let r = span(r);
                    k.silu.run(&b.gate_up.slice(el(&r, 2 * inter)), inter, &mut b.mlp.slice_mut(el(&r, inter)))?;
                }
                Op::Gather => k.embedding.run(
                    &b.h.slice(..th),
                    t,
                    &b.logit_rows.slice(..picked),
                    &mut b.picked.slice_mut(..picked * hidden),
                    &mut k.faults,
                )?,
                Op::LmHead { direct } => {
                    let gemm = linears.head(head_shape(&d, picked))?;
                    let x = if direct { b.h.slice(el(&all, hidden)) } else { b.picked.slice(..picked * hidden) };
                    let y = b.logits.slice_mut(..picked * vocab);
                    gemm.run_with(&x, &w.head().as_view(), Epilogue::Store { y })?;
                }
            }
        }
        Ok(())
    }
}

/// What [`GpuModel::walk`] does with each bound op: launch it, or record it for the megakernel.
pub(super) enum Sink<'a> {
    Launch,
    Record(&'a mut Vec<MegaOp>),
}

/// What the Peri-LN residual closing a sublayer reads and writes over some elements: the
/// residual stream before it and after it (attention reads `x` and writes `x_next`, the MLP the
/// reverse), the norms after the sublayer and before the next one (the next layer's input norm,
/// or the final norm after the last layer), and the next sublayer's input `h`. The separate op
/// and the GEMM epilogue both take it, so they cannot disagree.
struct Close<'a> {
    x: CudaView<'a, bf16>,
    after: &'a UClipNormParams,
    before: &'a UClipNormParams,
    x_out: CudaViewMut<'a, bf16>,
    h_out: CudaViewMut<'a, bf16>,
}

impl<'a> Close<'a> {
    fn of(
        w: &'a DeviceWeights,
        layer: usize,
        sublayer: Sublayer,
        x: &'a mut CudaSlice<bf16>,
        x_next: &'a mut CudaSlice<bf16>,
        h: &'a mut CudaSlice<bf16>,
        r: std::ops::Range<usize>,
    ) -> Self {
        let lw = &w.layers[layer];
        let (stream_in, stream_out, after, before) = match sublayer {
            Sublayer::Attention => (x, x_next, &lw.post_attention_norm, &lw.pre_feedforward_norm),
            Sublayer::Mlp => {
                (x_next, x, &lw.post_feedforward_norm, w.layers.get(layer + 1).map_or(&w.norm, |n| &n.input_norm))
            }
        };
        Self {
            x: stream_in.slice(r.clone()),
            after,
            before,
            x_out: stream_out.slice_mut(r.clone()),
            h_out: h.slice_mut(r),
        }
    }

    fn epilogue(self) -> Epilogue<'a> {
        Epilogue::PeriLn { x: self.x, after: self.after, before: self.before, x_out: self.x_out, h_out: self.h_out }
    }
}

/// One layer's cache and weights, as its attention reads them.
struct LayerRef<'a> {
    key: &'a CudaSlice<bf16>,
    value: &'a CudaSlice<bf16>,
    weights: &'a DeviceLayer,
    gate: &'a GateParams,
    q_width: usize,
    qkv_width: usize,
    width: usize,
}

impl<'a> LayerRef<'a> {
    /// Layer `layer` of `cache` and `w`.
    fn of(
        cache: &'a DeviceCache,
        w: &'a DeviceWeights,
        layer: usize,
        gate: &'a GateParams,
        heads: &HeadShape,
        width: usize,
    ) -> Self {
        let (q_width, qkv_width) = (heads.q_width(), heads.qkv_width());
        let (key, value, weights) = (&cache.key[layer], &cache.value[layer], &w.layers[layer]);
        Self { key, value, weights, gate, q_width, qkv_width, width }
    }

    /// The launch buffers over query rows `rows` of `q` (rows of `q_row` elements: the queries,
    /// or the qkv rows for a prefill that norms them), table rows `seqs` of `table`, into `out`.
    fn buffers(
        &self,
        q: &'a CudaSlice<bf16>,
        q_row: usize,
        rows: std::ops::Range<usize>,
        table: &'a CudaSlice<i32>,
        seqs: usize,
        out: CudaViewMut<'a, bf16>,
    ) -> LayerBuffers<'a> {
        LayerBuffers {
            q: q.slice(rows.start * q_row..rows.end * q_row),
            q_row_stride: q_row,
            key_cache: self.key.as_view(),
            value_cache: self.value.as_view(),
            block_table: table.slice(..seqs * self.width),
            sigma: self.weights.sigma.as_view(),
            gamma: self.weights.gamma.as_view(),
            out,
        }
    }
}

/// One part of a layer's attention over `b.q` (or `b.qkv`, normed with `rope` by a prefill that
/// norms its queries) into `b.attn`, as the step's plan says; `early_keys` lets the decode rows'
/// attention read their older keys before the op before it ends ([`Settled::OlderKeys`]).
#[allow(clippy::too_many_arguments)]
fn attention_part(
    attn: &AttnPlan,
    part: AttnPart,
    layer: LayerRef<'_>,
    b: &mut StepBuffers,
    rope: &RopeTable,
    split: Split,
    early_keys: bool,
    sink: &mut Sink<'_>,
) -> Result<()> {
    let qw = layer.q_width;
    // The op before an attention op is a GEMM or an op on q, never BuildRows (StepProgram's
    // tests), and the block table is uploaded before the step. A decode row's keys but its
    // newest were written by earlier steps; a fake-decode chunk row's were not, and the launch
    // over the first `seqs` sequences holds chunk rows where they pass the leading decodes.
    let mut decode = |a: &Hp1Attention, b: &mut StepBuffers, seqs: usize, leave_partials: bool| -> Result<()> {
        let settled = if early_keys && seqs <= split.decodes { Settled::OlderKeys } else { Settled::Rows };
        let plan = a.plan();
        let rows = plan.geometry.rows;
        let (ws, counters) = match plan.workspace_len {
            0 => (None, None),
            len if leave_partials => (Some(b.workspace.slice_mut(..len)), None),
            len => (Some(b.workspace.slice_mut(..len)), Some(b.counters.slice_mut(..plan.counter_len))),
        };
        let ops = Operands {
            layer: layer.buffers(&b.q, qw, 0..rows, &b.meta.block_table, seqs, b.attn.slice_mut(..rows * qw)),
            row_seq: b.row_seq.slice(..rows),
            row_len: b.row_len.slice(..rows),
            workspace: ws,
            counters,
            leave_partials,
            settled,
        };
        match sink {
            Sink::Launch => Ok(a.run(ops, layer.gate)?),
            Sink::Record(recorded) => {
                recorded.push(a.record(ops, layer.gate)?);
                Ok(())
            }
        }
    };
    match (attn, part) {
        (AttnPlan::Decode(a), AttnPart::Rows) => decode(a, b, split.seqs, false),
        (AttnPlan::Decode(a), AttnPart::RowsLeavingPartials) => decode(a, b, split.seqs, true),
        (AttnPlan::Split { decodes: Some(a), .. }, AttnPart::Decodes) => decode(a, b, split.decodes, false),
        (AttnPlan::Split { .. }, AttnPart::Prefill | AttnPart::PrefillNormingQueries)
            if matches!(sink, Sink::Record(_)) =>
        {
            Err(Error::Executor("a tensor-core prefill has no megakernel form".into()))
        }
        (AttnPlan::Split { prefill, rows, .. }, AttnPart::Prefill | AttnPart::PrefillNormingQueries) => {
            let rows = *rows;
            let (start, seqs) = (split.decodes, split.seqs - split.decodes);
            let out = b.attn.slice_mut(start * qw..(start + rows) * qw);
            let r = start..start + rows;
            let table = &b.prefill_meta.block_table;
            let (buffers, query_norm) = match part {
                AttnPart::PrefillNormingQueries => (
                    layer.buffers(&b.qkv, layer.qkv_width, r, table, seqs, out),
                    Some(QueryNorm { rope, norm: &layer.weights.q_norm }),
                ),
                _ => (layer.buffers(&b.q, qw, r, table, seqs, out), None),
            };
            let ops = PrefillOperands {
                layer: buffers,
                seq_lens: b.prefill_meta.seq_lens.slice(..seqs),
                query_start_loc: b.prefill_meta.query_start_loc.slice(..seqs + 1),
                num_seqs: seqs,
                query_norm,
            };
            Ok(prefill.run(ops, layer.gate)?)
        }
        _ => Err(Error::Executor(format!("the step's attention plan has no {part:?} part"))),
    }
}
