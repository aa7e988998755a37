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
//! states and the tests check for every shape.
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

use super::linear::{Lane, RowSplit};
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
    /// The decode kernels over the leading decode rows only.
    Decodes,
    /// A tensor-core prefill over the chunk rows.
    Prefill,
}

/// One launch of the step. `layer` is the decoder layer an op belongs to; `rows` the rows it
/// covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Op {
    /// `x = embed_tokens[ids]`, every row.
    Embed,
    /// `h = input_layernorm(x)` of layer 0, every row.
    InputNorm,
    /// The decode kernels' per-row metadata, once for every layer.
    BuildRows,
    /// `x W^T` over `lane`'s rows, and what `epilogue` does with the result.
    Linear { layer: usize, weight: Weight, lane: Lane, epilogue: EpilogueKind },
    /// q/k norm + RoPE + cache write over the qkv buffer.
    QkNormRopeCache { layer: usize, rows: Rows },
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
    /// The fusions to apply to chunk rows (the WGMMA GEMM's epilogues; [`Fusion::NONE`] unless
    /// asked for, and always where the device does not run it; chunk rows' unfused GEMMs stay on
    /// cuBLASLt).
    pub chunk_fusion: Fusion,
    /// Whether to count the gate's zeros after each decode attention.
    pub gate_stats: bool,
    /// Whether the layers should run in the megakernel, where the step allows it: decode rows
    /// only, every fusion on, no gate statistics.
    pub persistent: bool,
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
        let mut ops = vec![Op::Embed, Op::InputNorm];
        let ProgramShape {
            layers,
            rows,
            attention_on_rows,
            picked,
            picked_all,
            fusion,
            chunk_fusion,
            gate_stats,
            persistent,
        } = shape;
        let decode_attention = rows.decodes > 0 || attention_on_rows;
        if decode_attention {
            ops.push(Op::BuildRows);
        }
        let prologue = ops.len();
        for layer in 0..layers {
            // A GEMM over each lane's rows (with `epilogue` where that lane's fusion `on` says
            // so), and the rows the separate op after it must cover, if any: one launch over
            // every row unless only one class of the step's rows was left unfused.
            let sublayer = |weight: Weight, on: fn(Fusion) -> bool, epilogue: EpilogueKind, ops: &mut Vec<Op>| {
                let separate = |count: usize, fusion: Fusion| count > 0 && !on(fusion);
                let (decodes, chunks) = (separate(rows.decodes, fusion), separate(rows.chunks, chunk_fusion));
                for (lane, count, fusion) in
                    [(Lane::Rows, rows.decodes, fusion), (Lane::Chunks, rows.chunks, chunk_fusion)]
                {
                    if count > 0 {
                        let epilogue = if on(fusion) { epilogue } else { EpilogueKind::Store };
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
                ops.push(Op::QkNormRopeCache { layer, rows: r });
            }
            let decode_part =
                if attention_on_rows { Some(AttnPart::Rows) } else { (rows.decodes > 0).then_some(AttnPart::Decodes) };
            if let Some(part) = decode_part {
                ops.push(Op::Attention { layer, part });
                if gate_stats {
                    ops.push(Op::GateStats { layer, part });
                }
            }
            if !attention_on_rows {
                ops.push(Op::Attention { layer, part: AttnPart::Prefill });
            }
            if let Some(r) = sublayer(Weight::O, |f| f.peri_ln, EpilogueKind::PeriLn, &mut ops) {
                ops.push(Op::PeriLn { layer, sublayer: Sublayer::Attention, rows: r });
            }
            if let Some(r) = sublayer(Weight::GateUp, |f| f.silu, EpilogueKind::SiluMul, &mut ops) {
                ops.push(Op::SiluMul { layer, rows: r });
            }
            if let Some(r) = sublayer(Weight::Down, |f| f.peri_ln, EpilogueKind::PeriLn, &mut ops) {
                ops.push(Op::PeriLn { layer, sublayer: Sublayer::Mlp, rows: r });
            }
        }
        let mega = persistent
            && rows.decodes > 0
            && rows.chunks == 0
            && attention_on_rows
            && fusion == Fusion::ALL
            && !gate_stats
            && layers > 0;
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
            Op::Embed | Op::InputNorm | Op::BuildRows | Op::Megakernel => Some(Rows::All),
            Op::Gather | Op::LmHead { .. } => None,
            Op::Linear { lane, .. } => Some(Rows::of_lane(lane)),
            Op::QkNormRopeCache { rows, .. } | Op::PeriLn { rows, .. } | Op::SiluMul { rows, .. } => Some(rows),
            Op::Attention { part, .. } | Op::GateStats { part, .. } => Some(match part {
                AttnPart::Rows => Rows::All,
                AttnPart::Decodes => Rows::Decodes,
                AttnPart::Prefill => Rows::Chunks,
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
            Op::Embed | Op::BuildRows | Op::Gather | Op::GateStats { .. } | Op::Megakernel => vec![],
            Op::InputNorm => vec![InputNorm],
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
            Op::QkNormRopeCache { .. } => qk.to_vec(),
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
            Op::Embed => (vec![Ids], vec![X]),
            // Its ops' buffers (StepProgram::expanded).
            Op::Megakernel => (vec![], vec![]),
            Op::InputNorm => (vec![X], vec![H]),
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
            Op::QkNormRopeCache { layer, .. } => (vec![Qkv, PositionsSlots], vec![Q, Cache(layer)]),
            Op::Attention { layer, part } => match part {
                AttnPart::Prefill => (vec![Q, Cache(layer), PrefillMeta], vec![Attn]),
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
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// A shape of 3 layers whose chunk rows are not fused (the default).
    fn shape(decodes: usize, chunks: usize, attention_on_rows: bool, fusion: Fusion) -> ProgramShape {
        let tokens = decodes + chunks;
        ProgramShape {
            layers: 3,
            rows: RowSplit { decodes, chunks },
            attention_on_rows,
            picked: tokens.min(decodes + 2),
            picked_all: chunks == 0,
            fusion,
            chunk_fusion: Fusion::NONE,
            gate_stats: false,
            persistent: false,
        }
    }

    /// Every shape the executor can plan: decode-only, prefill-only, mixed, fake decode, each
    /// with every fusion setting of either class of rows, with and without the megakernel asked
    /// for.
    fn shapes() -> Vec<ProgramShape> {
        let fusions = [Fusion::ALL, Fusion::NONE, Fusion { qkv: false, ..Fusion::ALL }, Fusion::parse("qkv,silu")];
        let mut all = Vec::new();
        for fusion in fusions {
            for chunk_fusion in fusions {
                for (d, c) in [(1, 0), (32, 0), (128, 0), (0, 512), (3, 100), (1, 7)] {
                    for persistent in [false, true] {
                        let s = ProgramShape { persistent, chunk_fusion, ..shape(d, c, c == 0, fusion) };
                        all.push(s);
                        all.push(ProgramShape { gate_stats: true, ..s });
                        if c > 0 {
                            all.push(ProgramShape { attention_on_rows: true, ..s });
                        }
                    }
                }
            }
        }
        all
    }

    #[test]
    fn the_megakernel_takes_every_layer_of_a_fused_decode_step_and_nothing_else() {
        let graph = StepProgram::build(shape(8, 0, true, Fusion::ALL));
        let mega = StepProgram::build(ProgramShape { persistent: true, ..shape(8, 0, true, Fusion::ALL) });
        // embed, input norm, rows, the megakernel, the head.
        assert_eq!(
            mega.ops,
            vec![Op::Embed, Op::InputNorm, Op::BuildRows, Op::Megakernel, Op::LmHead { direct: true }]
        );
        assert_eq!(mega.persistent.len(), 3 * 5);
        assert_eq!(mega.expanded(), graph.ops);
        assert!(graph.persistent.is_empty());
        // Chunk rows, an unfused op or gate statistics keep the graph path's launches.
        for s in [
            shape(3, 100, false, Fusion::ALL),
            shape(3, 100, true, Fusion::ALL),
            shape(8, 0, true, Fusion { silu: false, ..Fusion::ALL }),
            ProgramShape { gate_stats: true, ..shape(8, 0, true, Fusion::ALL) },
        ] {
            let asked = StepProgram::build(ProgramShape { persistent: true, ..s });
            assert_eq!(asked, StepProgram::build(s), "{s:?}");
        }
    }

    #[test]
    fn a_fused_decode_layer_is_five_launches() {
        let p = StepProgram::build(shape(32, 0, true, Fusion::ALL));
        let layer1: Vec<_> = p.ops.iter().filter(|op| layer_of(op) == Some(1)).collect();
        assert_eq!(layer1.len(), 5, "{layer1:?}");
        // embed, input norm, rows, 3 x 5, the head without a gather
        assert_eq!(p.launches(), 3 + 15 + 1);
        let unfused = StepProgram::build(shape(32, 0, true, Fusion::NONE));
        assert_eq!(unfused.launches(), 3 + 3 * 9 + 1);
    }

    fn layer_of(op: &Op) -> Option<usize> {
        match *op {
            Op::Linear { layer, .. }
            | Op::QkNormRopeCache { layer, .. }
            | Op::Attention { layer, .. }
            | Op::GateStats { layer, .. }
            | Op::PeriLn { layer, .. }
            | Op::SiluMul { layer, .. } => Some(layer),
            Op::Embed | Op::InputNorm | Op::BuildRows | Op::Megakernel | Op::Gather | Op::LmHead { .. } => None,
        }
    }

    #[test]
    fn every_row_meets_every_rounding_point_once_in_forward_order() {
        for s in shapes() {
            let p = StepProgram::build(s).expanded();
            let mut want = Vec::new();
            for _ in 0..s.layers {
                want.extend(RoundPoint::ALL.iter().copied().filter(|r| r.in_layer()));
            }
            // Layer 0's input norm is the prologue's, layer l's the close of layer l - 1, and the
            // last layer's close rounds the final norm.
            want.push(RoundPoint::FinalNorm);
            for class in [Rows::Decodes, Rows::Chunks] {
                let present = if class == Rows::Decodes { s.rows.decodes } else { s.rows.chunks };
                if present == 0 {
                    continue;
                }
                let got: Vec<_> = p
                    .iter()
                    .filter(|op| op.rows().is_some_and(|r| r.covers(class)))
                    .flat_map(|op| op.rounds(s.layers))
                    .collect();
                assert_eq!(got, want, "{class:?} rows of {s:?}");
            }
            let head: Vec<_> = p.iter().filter(|op| op.rows().is_none()).flat_map(|op| op.rounds(s.layers)).collect();
            assert_eq!(head, vec![RoundPoint::Logits], "{s:?}");
        }
    }

    #[test]
    fn every_buffer_is_written_before_it_is_read() {
        let uploaded = [Buf::Ids, Buf::PositionsSlots, Buf::Meta, Buf::PrefillMeta, Buf::LogitRows];
        for s in shapes() {
            let p = StepProgram::build(s).expanded();
            for class in [Rows::Decodes, Rows::Chunks] {
                let present = if class == Rows::Decodes { s.rows.decodes } else { s.rows.chunks };
                if present == 0 {
                    continue;
                }
                let mut written: HashSet<Buf> = uploaded.into_iter().collect();
                for op in &p {
                    // The head's ops read the picked rows, which may be of either class.
                    if !op.rows().is_none_or(|r| r.covers(class)) {
                        continue;
                    }
                    let (reads, writes) = op.access();
                    for b in reads {
                        assert!(written.contains(&b), "{op:?} reads {b:?} of {class:?} rows before any write in {s:?}");
                    }
                    written.extend(writes);
                }
                assert!(written.contains(&Buf::Logits), "{s:?}");
            }
        }
    }

    #[test]
    fn no_attention_follows_the_op_that_writes_the_row_metadata() {
        // The attention launches with `rows_settled` (it reads the row metadata before waiting
        // for the kernel before it), which is a race right after the op that writes them.
        for s in shapes() {
            let ops = StepProgram::build(s).expanded();
            for pair in ops.windows(2) {
                if matches!(pair[1], Op::Attention { .. }) {
                    assert!(!pair[0].access().1.contains(&Buf::RowMeta), "{:?} right after {:?} in {s:?}", pair[1], pair[0]);
                }
            }
        }
    }

    #[test]
    fn gate_statistics_follow_each_decode_attention_and_only_when_asked() {
        let count =
            |s: ProgramShape| StepProgram::build(s).ops.iter().filter(|op| matches!(op, Op::GateStats { .. })).count();
        assert_eq!(count(ProgramShape { gate_stats: true, ..shape(32, 0, true, Fusion::ALL) }), 3);
        assert_eq!(count(ProgramShape { gate_stats: true, ..shape(0, 512, false, Fusion::ALL) }), 0);
        assert_eq!(count(shape(32, 0, true, Fusion::ALL)), 0);
    }

    #[test]
    fn a_layer_reads_its_residual_from_where_the_last_close_left_it() {
        // X holds the stream entering a layer and XNext after its attention: the attention close
        // reads X and writes XNext, the MLP close the reverse, so they never read what they write.
        for s in shapes() {
            for op in StepProgram::build(s).expanded() {
                let (reads, writes) = op.access();
                assert!(reads.iter().all(|b| !writes.contains(b)), "{op:?} reads what it writes");
            }
        }
    }

    #[test]
    fn chunk_rows_keep_their_separate_ops_and_decode_rows_their_epilogues() {
        let p = StepProgram::build(shape(3, 100, false, Fusion::ALL));
        let layer0: Vec<_> = p.ops.iter().filter(|op| layer_of(op) == Some(0)).collect();
        assert!(layer0.contains(&&Op::Linear {
            layer: 0,
            weight: Weight::O,
            lane: Lane::Rows,
            epilogue: EpilogueKind::PeriLn
        }));
        assert!(layer0.contains(&&Op::PeriLn { layer: 0, sublayer: Sublayer::Attention, rows: Rows::Chunks }));
        assert!(layer0.contains(&&Op::Attention { layer: 0, part: AttnPart::Prefill }));
        let none = StepProgram::build(shape(3, 100, false, Fusion::NONE));
        assert!(none.ops.contains(&Op::PeriLn { layer: 0, sublayer: Sublayer::Attention, rows: Rows::All }));
        assert!(none
            .ops
            .iter()
            .all(|op| !matches!(op, Op::Linear { epilogue, .. } if *epilogue != EpilogueKind::Store)));
    }

    #[test]
    fn fused_chunk_rows_take_the_epilogues_and_leave_no_separate_op() {
        let chunked = |s: ProgramShape| ProgramShape { chunk_fusion: Fusion::ALL, ..s };
        let prefill = StepProgram::build(chunked(shape(0, 512, false, Fusion::ALL)));
        let layer1: Vec<_> = prefill.ops.iter().filter(|op| layer_of(op) == Some(1)).copied().collect();
        assert_eq!(
            layer1,
            vec![
                Op::Linear {
                    layer: 1,
                    weight: Weight::Qkv,
                    lane: Lane::Chunks,
                    epilogue: EpilogueKind::QkNormRopeCache
                },
                Op::Attention { layer: 1, part: AttnPart::Prefill },
                Op::Linear { layer: 1, weight: Weight::O, lane: Lane::Chunks, epilogue: EpilogueKind::PeriLn },
                Op::Linear { layer: 1, weight: Weight::GateUp, lane: Lane::Chunks, epilogue: EpilogueKind::SiluMul },
                Op::Linear { layer: 1, weight: Weight::Down, lane: Lane::Chunks, epilogue: EpilogueKind::PeriLn },
            ]
        );
        // Mixed: each lane its own fused GEMM, two attention parts, no separate op.
        let mixed = StepProgram::build(chunked(shape(3, 100, false, Fusion::ALL)));
        assert_eq!(mixed.ops.iter().filter(|op| layer_of(op) == Some(0)).count(), 10);
        assert!(!mixed
            .ops
            .iter()
            .any(|op| matches!(op, Op::PeriLn { .. } | Op::SiluMul { .. } | Op::QkNormRopeCache { .. })));
        // Decode rows unfused beside fused chunks: the separate op covers the decode rows alone.
        let decodes_unfused = StepProgram::build(chunked(shape(3, 100, false, Fusion::NONE)));
        assert!(decodes_unfused.ops.contains(&Op::SiluMul { layer: 2, rows: Rows::Decodes }));
        assert!(!decodes_unfused.ops.iter().any(|op| matches!(op, Op::SiluMul { rows: Rows::All | Rows::Chunks, .. })));
        // A decode-only step is the same program whatever the chunk rows' fusion.
        let decode = shape(32, 0, true, Fusion::ALL);
        assert_eq!(StepProgram::build(chunked(decode)), StepProgram::build(decode));
    }

    #[test]
    fn a_fusion_list_names_the_fusions_to_keep() {
        assert_eq!(Fusion::parse("none"), Fusion::NONE);
        assert_eq!(Fusion::parse("qkv, silu"), Fusion { qkv: true, peri_ln: false, silu: true });
        assert_eq!(Fusion::parse("peri_ln,qkv,silu"), Fusion::ALL);
        assert_eq!(Fusion::ALL.and(Fusion::parse("silu")), Fusion::parse("silu"));
        assert_eq!(Fusion::parse("qkv").and(Fusion::NONE), Fusion::NONE);
    }
}
