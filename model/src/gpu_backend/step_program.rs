//! The step program: a step's launches as data, built by pure host code from the step's static
//! facts, so that planning (which kernels and GEMMs to load), eager execution and graph capture
//! all walk one list instead of each writing the layer out again (issue 15).
//!
//! A step's rows fall in two classes: its leading decode rows and its prefill-chunk rows
//! ([`RowSplit`]). Decode rows go through the skinny GEMM, whose epilogue can finish the
//! elementwise op that follows (q/k norm + RoPE + cache write after qkv, the Peri-LN residual
//! after o and down, `silu * up` after gate/up), so a layer of decode rows is five launches: qkv,
//! attention, o, gate/up, down. Chunk rows go through cuBLASLt, whose epilogues cannot express
//! UClipNorm, with their elementwise ops as separate launches, or, where the model asks for it
//! ([`ProgramShape::chunk_fusion`]; off by default, measured slower) and the device runs it,
//! through the WGMMA GEMM with the same epilogues as decode rows. A separate op covers the rows
//! of both classes that were not fused, in one launch where that is every row. Either way each
//! row meets every SPEC section 4 rounding point once, in forward order, which [`Op::rounds`]
//! states and the tests check for every shape. A tensor-core prefill may norm and rotate its
//! chunk rows' queries from the qkv buffer itself ([`AttnPart::PrefillNormingQueries`]): the qk
//! op then writes only their keys and values, and no normed q makes a round trip through
//! memory (half of the pass's bytes at asynct-0.5b).
//!
//! A weight whose decode rows run cuBLASLt ([`ProgramShape::decode_cublas`]) has no epilogue
//! there: its decode rows take the separate op as chunk rows do.
//!
//! A small decode-only step may run its layers in the persistent megakernel (`gpu::mega`) instead:
//! [`StepProgram::build`] then moves every layer's five ops into [`StepProgram::persistent`], the
//! megakernel's instruction list, and leaves one [`Op::Megakernel`] in their place. The ops are
//! the same ones, bound to the same buffers, so [`StepProgram::expanded`] (what the tests walk)
//! is the graph path's program, and the bits are the graph path's.
//!
//! Fusion changes no bits: an epilogue rounds in registers exactly where the separate kernel
//! rounds on its store, with the same f32 arithmetic (`gpu_gemm` checks fused against unfused
//! bit for bit), so a decode row's result does not depend on whether a neighbour's chunk
//! shares its step.

use oracle::model::precision::RoundPoint;

use super::linear::{DecodeCublas, Lane, RowSplit};
use gpu::gemm::EpilogueKind;

/// The weight a linear op multiplies by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Weight {
    /// q, k and v stacked.
    Qkv,
    /// `o_proj`.
    O,
    /// `gate_proj` and `up_proj`, row-interleaved (`super::weights`).
    GateUp,
    /// `down_proj`.
    Down,
}

impl Weight {
    /// Every weight of a layer.
    pub const ALL: [Weight; 4] = [Weight::Qkv, Weight::O, Weight::GateUp, Weight::Down];

    /// The weight's place in [`Weight::ALL`].
    pub fn index(self) -> usize {
        match self {
            Weight::Qkv => 0,
            Weight::O => 1,
            Weight::GateUp => 2,
            Weight::Down => 3,
        }
    }
}

/// The rows an op covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rows {
    /// The leading decode rows.
    Decodes,
    /// The prefill-chunk rows after them.
    Chunks,
    /// Every row of the step.
    All,
}

impl Rows {
    /// The rows of a GEMM lane.
    fn of_lane(lane: Lane) -> Self {
        match lane {
            Lane::Rows => Rows::Decodes,
            Lane::Chunks => Rows::Chunks,
        }
    }

    /// Whether these rows include rows of `class` (`Decodes` or `Chunks`).
    pub fn covers(self, class: Rows) -> bool {
        self == Rows::All || self == class
    }
}

/// Which sublayer a Peri-LN residual closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sublayer {
    /// After attention: post-attention norm, residual, pre-feedforward norm.
    Attention,
    /// After the MLP: post-feedforward norm, residual, the next layer's input norm (the final
    /// norm after the last layer).
    Mlp,
}

/// Which launch computes a layer's attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttnPart {
    /// The decode kernels over every row (decode rows, or fake-decode rows of chunks too).
    Rows,
    /// The split-K kernel over every row of a decode step, leaving each chunk's partial output
    /// for [`Op::FoldedO`] to add (`gpu::gemm::staged`): no counters, no output of its own.
    RowsLeavingPartials,
    /// The decode kernels over the leading decode rows only.
    Decodes,
    /// A tensor-core prefill over the chunk rows.
    Prefill,
    /// A tensor-core prefill over the chunk rows that norms and rotates their queries from the
    /// qkv buffer itself, so the qk op before it writes only their keys and values.
    PrefillNormingQueries,
}

/// One launch of the step. `layer` is the decoder layer an op belongs to; `rows` the rows it
/// covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Op {
    /// `x = embed_tokens[ids]` and `h = input_layernorm(x)` of layer 0, every row, in one launch.
    Embed,
    /// The decode kernels' per-row metadata, once for every layer.
    BuildRows,
    /// `x W^T` over `lane`'s rows, and what `epilogue` does with the result.
    Linear { layer: usize, weight: Weight, lane: Lane, epilogue: EpilogueKind },
    /// o_proj over the decode rows, its x the attention's partials
    /// ([`AttnPart::RowsLeavingPartials`]), added and rounded as the attention's own finish
    /// would, then `epilogue` (Store or PeriLn).
    FoldedO { layer: usize, epilogue: EpilogueKind },
    /// q/k norm + RoPE + cache write over the qkv buffer; q only where `queries`.
    QkNormRopeCache { layer: usize, rows: Rows, queries: bool },
    /// HP1 attention.
    Attention { layer: usize, part: AttnPart },
    /// The gate's exact zeros over the decode kernels' rows of a layer, counted (a measurement,
    /// only in programs that ask for it).
    GateStats { layer: usize, part: AttnPart },
    /// The Peri-LN residual closing `sublayer`.
    PeriLn { layer: usize, sublayer: Sublayer, rows: Rows },
    /// `silu(gate) * up`.
    SiluMul { layer: usize, rows: Rows },
    /// Every layer in one launch of the decode megakernel: the ops of [`StepProgram::persistent`].
    Megakernel,
    /// The rows that get logits gathered from `h` (skipped when they are every row in order).
    Gather,
    /// The LM head over the picked rows (read from `h` directly when there was no gather).
    LmHead { direct: bool },
}

/// A buffer an op reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Buf {
    /// Token ids (uploaded).
    Ids,
    /// Positions and slots (uploaded).
    PositionsSlots,
    /// The step's attention metadata (uploaded).
    Meta,
    /// The prefill sequences' metadata (uploaded).
    PrefillMeta,
    /// The picked rows' indices (uploaded).
    LogitRows,
    /// Per-row decode metadata.
    RowMeta,
    /// The residual stream, and its other half.
    X,
    /// The residual stream after attention.
    XNext,
    /// The normed input of the next sublayer.
    H,
    /// The qkv GEMM output.
    Qkv,
    /// The attention's queries.
    Q,
    /// A layer's K and V cache.
    Cache(usize),
    /// The attention output.
    Attn,
    /// The split-K attention's partials, left for [`Op::FoldedO`].
    Partials,
    /// The o or down GEMM output.
    Proj,
    /// The gate/up GEMM output.
    GateUp,
    /// The MLP product.
    Mlp,
    /// The picked rows of `h`.
    Picked,
    /// The logits.
    Logits,
    /// The gate counters.
    GateCounts,
}

/// Which elementwise ops a class of rows' GEMMs finish in their epilogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fusion {
    /// q/k norm + RoPE + cache write after the qkv GEMM.
    pub qkv: bool,
    /// The Peri-LN residuals after o and down.
    pub peri_ln: bool,
    /// `silu * up` after gate/up.
    pub silu: bool,
}

impl Fusion {
    /// Every fusion on.
    pub const ALL: Fusion = Fusion { qkv: true, peri_ln: true, silu: true };
    /// None: every elementwise op its own launch.
    pub const NONE: Fusion = Fusion { qkv: false, peri_ln: false, silu: false };

    /// `default`, or what the environment variable `var` names to measure a fusion by its
    /// absence: `none`, or a comma list of the ones to keep: `qkv`, `peri_ln`, `silu`.
    pub fn from_env(var: &str, default: Fusion) -> Self {
        std::env::var(var).map_or(default, |v| Self::parse(&v))
    }

    /// The fusions a comma list names (`qkv`, `peri_ln`, `silu`; anything else, `none` included,
    /// names none).
    pub fn parse(list: &str) -> Self {
        let on = |name: &str| list.split(',').any(|p| p.trim() == name);
        Fusion { qkv: on("qkv"), peri_ln: on("peri_ln"), silu: on("silu") }
    }

    /// Only the fusions both have.
    pub fn and(self, other: Fusion) -> Self {
        Fusion { qkv: self.qkv && other.qkv, peri_ln: self.peri_ln && other.peri_ln, silu: self.silu && other.silu }
    }
}

/// What the program of a step depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProgramShape {
    /// Decoder layers.
    pub layers: usize,
    /// The step's rows by class.
    pub rows: RowSplit,
    /// How the attention runs: every row through the decode kernels (`true`), or the decode
    /// rows through them and the chunks through a tensor-core prefill.
    pub attention_on_rows: bool,
    /// Rows that get logits.
    pub picked: usize,
    /// Whether the picked rows are every row, in order (no gather needed).
    pub picked_all: bool,
    /// The fusions to apply to decode rows (the skinny GEMM's epilogues).
    pub fusion: Fusion,
    /// The weights whose decode rows run cuBLASLt, so fuse nothing whatever `fusion` says.
    pub decode_cublas: DecodeCublas,
    /// The fusions to apply to chunk rows (the WGMMA GEMM's epilogues; [`Fusion::NONE`] unless
    /// asked for, and always where the device does not run it; chunk rows' unfused GEMMs stay on
    /// cuBLASLt).
    pub chunk_fusion: Fusion,
    /// Whether to count the gate's zeros after each decode attention.
    pub gate_stats: bool,
    /// Whether a tensor-core prefill should norm its chunk rows' queries itself
    /// ([`AttnPart::PrefillNormingQueries`]), where no other op needs them normed: the chunk
    /// rows' qkv GEMM unfused and any decode rows' fused.
    pub prefill_norms_queries: bool,
    /// Whether the layers should run in the megakernel, where the step allows it: decode rows
    /// only, every fusion on, no gate statistics.
    pub persistent: bool,
    /// Whether o_proj should add the decode attention's split-K partials itself
    /// ([`Op::FoldedO`]), where the step allows it: decode rows only, the attention split-K over
    /// them (the caller's to know, with whether folding pays at its rows), o_proj's decode rows
    /// on the skinny kernel, no gate statistics, not in the megakernel.
    pub fold_o: bool,
}

/// A step's launches in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepProgram {
    /// The ops, in launch order.
    pub ops: Vec<Op>,
    /// The megakernel's ops, in order, when `ops` holds [`Op::Megakernel`]; empty otherwise.
    pub persistent: Vec<Op>,
}

impl StepProgram {
    /// The program of a step of `shape`.
    pub fn build(shape: ProgramShape) -> Self {
        let mut ops = vec![Op::Embed];
        let ProgramShape {
            layers,
            rows,
            attention_on_rows,
            picked,
            picked_all,
            fusion,
            decode_cublas,
            chunk_fusion,
            gate_stats,
            prefill_norms_queries,
            persistent,
            fold_o,
        } = shape;
        // Whether decode rows fuse `weight`'s op, which `on` asks for: not on cuBLASLt.
        let decode_fuses = |weight: Weight, on: bool| on && decode_cublas.pin(weight).is_none();
        let decode_attention = rows.decodes > 0 || attention_on_rows;
        // The separate qk op then covers chunk rows only (every row when there are no decode
        // rows), and nothing but the prefill reads their queries.
        let norming = prefill_norms_queries
            && !attention_on_rows
            && rows.chunks > 0
            && !chunk_fusion.qkv
            && (rows.decodes == 0 || decode_fuses(Weight::Qkv, fusion.qkv));
        if decode_attention {
            ops.push(Op::BuildRows);
        }
        // Decode rows alone, their attention over every row, without gate statistics: what both
        // the megakernel and the folded o_proj need of a step.
        let decode_only = rows.decodes > 0 && rows.chunks == 0 && attention_on_rows && !gate_stats;
        let mega = persistent && decode_only && fusion == Fusion::ALL && decode_cublas.is_none() && layers > 0;
        let fold = fold_o && !mega && decode_only && decode_cublas.pin(Weight::O).is_none();
        let prologue = ops.len();
        for layer in 0..layers {
            // A GEMM over each lane's rows (with `epilogue` where that lane's fusion `on` says
            // so), and the rows the separate op after it must cover, if any: one launch over
            // every row unless only one class of the step's rows was left unfused.
            let sublayer = |weight: Weight, on: fn(Fusion) -> bool, epilogue: EpilogueKind, ops: &mut Vec<Op>| {
                let fused = (decode_fuses(weight, on(fusion)), on(chunk_fusion));
                let (decodes, chunks) = (rows.decodes > 0 && !fused.0, rows.chunks > 0 && !fused.1);
                for (lane, count, fused) in [(Lane::Rows, rows.decodes, fused.0), (Lane::Chunks, rows.chunks, fused.1)]
                {
                    if count > 0 {
                        let epilogue = if fused { epilogue } else { EpilogueKind::Store };
                        ops.push(Op::Linear { layer, weight, lane, epilogue });
                    }
                }
                match (decodes, chunks) {
                    (false, false) => None,
                    (true, false) if rows.chunks > 0 => Some(Rows::Decodes),
                    (false, true) if rows.decodes > 0 => Some(Rows::Chunks),
                    _ => Some(Rows::All),
                }
            };
            if let Some(r) = sublayer(Weight::Qkv, |f| f.qkv, EpilogueKind::QkNormRopeCache, &mut ops) {
                ops.push(Op::QkNormRopeCache { layer, rows: r, queries: !norming });
            }
            let decode_part = match (attention_on_rows, fold) {
                (true, true) => Some(AttnPart::RowsLeavingPartials),
                (true, false) => Some(AttnPart::Rows),
                (false, _) => (rows.decodes > 0).then_some(AttnPart::Decodes),
            };
            if let Some(part) = decode_part {
                ops.push(Op::Attention { layer, part });
                if gate_stats {
                    ops.push(Op::GateStats { layer, part });
                }
            }
            if !attention_on_rows {
                let part = if norming { AttnPart::PrefillNormingQueries } else { AttnPart::Prefill };
                ops.push(Op::Attention { layer, part });
            }
            if fold {
                let fused = decode_fuses(Weight::O, fusion.peri_ln);
                ops.push(Op::FoldedO {
                    layer,
                    epilogue: if fused { EpilogueKind::PeriLn } else { EpilogueKind::Store },
                });
                if !fused {
                    ops.push(Op::PeriLn { layer, sublayer: Sublayer::Attention, rows: Rows::All });
                }
            } else if let Some(r) = sublayer(Weight::O, |f| f.peri_ln, EpilogueKind::PeriLn, &mut ops) {
                ops.push(Op::PeriLn { layer, sublayer: Sublayer::Attention, rows: r });
            }
            if let Some(r) = sublayer(Weight::GateUp, |f| f.silu, EpilogueKind::SiluMul, &mut ops) {
                ops.push(Op::SiluMul { layer, rows: r });
            }
            if let Some(r) = sublayer(Weight::Down, |f| f.peri_ln, EpilogueKind::PeriLn, &mut ops) {
                ops.push(Op::PeriLn { layer, sublayer: Sublayer::Mlp, rows: r });
            }
        }
        let persistent = if mega { ops.splice(prologue.., [Op::Megakernel]).collect() } else { Vec::new() };
        if picked > 0 {
            if !picked_all {
                ops.push(Op::Gather);
            }
            ops.push(Op::LmHead { direct: picked_all });
        }
        Self { ops, persistent }
    }

    /// The launches the program makes.
    pub fn launches(&self) -> usize {
        self.ops.len()
    }

    /// The step's ops with the megakernel's list in its place: the arithmetic the step does,
    /// whichever way it launches.
    pub fn expanded(&self) -> Vec<Op> {
        let mut out = Vec::with_capacity(self.ops.len() + self.persistent.len());
        for op in &self.ops {
            match op {
                Op::Megakernel => out.extend_from_slice(&self.persistent),
                op => out.push(*op),
            }
        }
        out
    }
}

impl Op {
    /// The rows the op covers; `None` for the ops over the picked rows.
    pub fn rows(&self) -> Option<Rows> {
        match *self {
            Op::Embed | Op::BuildRows | Op::Megakernel => Some(Rows::All),
            Op::Gather | Op::LmHead { .. } => None,
            Op::Linear { lane, .. } => Some(Rows::of_lane(lane)),
            Op::FoldedO { .. } => Some(Rows::Decodes),
            Op::QkNormRopeCache { rows, .. } | Op::PeriLn { rows, .. } | Op::SiluMul { rows, .. } => Some(rows),
            Op::Attention { part, .. } | Op::GateStats { part, .. } => Some(match part {
                AttnPart::Rows | AttnPart::RowsLeavingPartials => Rows::All,
                AttnPart::Decodes => Rows::Decodes,
                AttnPart::Prefill | AttnPart::PrefillNormingQueries => Rows::Chunks,
            }),
        }
    }

    /// The SPEC section 4 points at which the op rounds its rows to bf16, in order; `layers` is
    /// the model's layer count (the last layer's Peri-LN ends with the final norm).
    pub fn rounds(&self, layers: usize) -> Vec<RoundPoint> {
        use RoundPoint::*;
        let qk = [QNormRope, KNormRope];
        let attn_close = [PostAttnNorm, AttnResidual, PreFfnNorm];
        let mlp_close = |layer: usize| {
            let next = if layer + 1 == layers { FinalNorm } else { InputNorm };
            vec![PostFfnNorm, FfnResidual, next]
        };
        match *self {
            // The megakernel's rounding points are those of its ops (StepProgram::expanded).
            Op::BuildRows | Op::Gather | Op::GateStats { .. } | Op::Megakernel => vec![],
            Op::Embed => vec![InputNorm],
            Op::Linear { layer, weight, epilogue, .. } => {
                let mut points = match weight {
                    Weight::Qkv => vec![QProj, KProj, VProj],
                    Weight::O => vec![OProj],
                    Weight::GateUp => vec![GateProj, UpProj],
                    Weight::Down => vec![DownProj],
                };
                match (weight, epilogue) {
                    (_, EpilogueKind::Store) => {}
                    (Weight::Qkv, EpilogueKind::QkNormRopeCache) => points.extend(qk),
                    (Weight::O, EpilogueKind::PeriLn) => points.extend(attn_close),
                    (Weight::GateUp, EpilogueKind::SiluMul) => points.push(MlpProduct),
                    (Weight::Down, EpilogueKind::PeriLn) => points.extend(mlp_close(layer)),
                    (w, e) => panic!("no {e:?} epilogue after the {w:?} GEMM"),
                }
                points
            }
            Op::QkNormRopeCache { queries: true, .. } => qk.to_vec(),
            Op::QkNormRopeCache { queries: false, .. } => vec![KNormRope],
            Op::Attention { part: AttnPart::PrefillNormingQueries, .. } => vec![QNormRope, AttnOutput],
            // f32 partials; FoldedO rounds their sums.
            Op::Attention { part: AttnPart::RowsLeavingPartials, .. } => vec![],
            Op::FoldedO { epilogue: EpilogueKind::PeriLn, .. } => {
                [AttnOutput, OProj].into_iter().chain(attn_close).collect()
            }
            Op::FoldedO { .. } => vec![AttnOutput, OProj],
            Op::Attention { .. } => vec![AttnOutput],
            Op::PeriLn { sublayer: Sublayer::Attention, .. } => attn_close.to_vec(),
            Op::PeriLn { layer, sublayer: Sublayer::Mlp, .. } => mlp_close(layer),
            Op::SiluMul { .. } => vec![MlpProduct],
            Op::LmHead { .. } => vec![Logits],
        }
    }

    /// The buffers the op reads, then those it writes.
    pub fn access(&self) -> (Vec<Buf>, Vec<Buf>) {
        use Buf::*;
        match *self {
            Op::Embed => (vec![Ids], vec![X, H]),
            // Its ops' buffers (StepProgram::expanded).
            Op::Megakernel => (vec![], vec![]),
            Op::BuildRows => (vec![Meta], vec![RowMeta]),
            Op::Linear { layer, weight, epilogue, .. } => match (weight, epilogue) {
                (Weight::Qkv, EpilogueKind::QkNormRopeCache) => (vec![H, PositionsSlots], vec![Q, Cache(layer)]),
                (Weight::Qkv, _) => (vec![H], vec![Qkv]),
                (Weight::O, EpilogueKind::PeriLn) => (vec![Attn, X], vec![XNext, H]),
                (Weight::O, _) => (vec![Attn], vec![Proj]),
                (Weight::GateUp, EpilogueKind::SiluMul) => (vec![H], vec![Mlp]),
                (Weight::GateUp, _) => (vec![H], vec![GateUp]),
                (Weight::Down, EpilogueKind::PeriLn) => (vec![Mlp, XNext], vec![X, H]),
                (Weight::Down, _) => (vec![Mlp], vec![Proj]),
            },
            Op::FoldedO { epilogue: EpilogueKind::PeriLn, .. } => (vec![Partials, RowMeta, X], vec![XNext, H]),
            Op::FoldedO { .. } => (vec![Partials, RowMeta], vec![Proj]),
            Op::QkNormRopeCache { layer, queries: true, .. } => (vec![Qkv, PositionsSlots], vec![Q, Cache(layer)]),
            Op::QkNormRopeCache { layer, queries: false, .. } => (vec![Qkv, PositionsSlots], vec![Cache(layer)]),
            Op::Attention { layer, part } => match part {
                AttnPart::Prefill => (vec![Q, Cache(layer), PrefillMeta], vec![Attn]),
                // Its queries' positions are their places in their sequences (PrefillMeta).
                AttnPart::PrefillNormingQueries => (vec![Qkv, Cache(layer), PrefillMeta], vec![Attn]),
                AttnPart::RowsLeavingPartials => (vec![Q, Cache(layer), Meta, RowMeta], vec![Partials]),
                _ => (vec![Q, Cache(layer), Meta, RowMeta], vec![Attn]),
            },
            Op::GateStats { layer, .. } => (vec![Q, Cache(layer), Meta, RowMeta], vec![GateCounts]),
            Op::PeriLn { sublayer: Sublayer::Attention, .. } => (vec![Proj, X], vec![XNext, H]),
            Op::PeriLn { sublayer: Sublayer::Mlp, .. } => (vec![Proj, XNext], vec![X, H]),
            Op::SiluMul { .. } => (vec![GateUp], vec![Mlp]),
            Op::Gather => (vec![H, LogitRows], vec![Picked]),
            Op::LmHead { direct: true } => (vec![H], vec![Logits]),
            Op::LmHead { direct: false } => (vec![Picked], vec![Logits]),
        }
    }
}

#[cfg(test)]
#[path = "step_program_tests.rs"]
mod tests;
