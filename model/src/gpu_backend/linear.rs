//! The model's linear layers on the GPU, `y = x W^T` over a step's rows, with one rule that keeps
//! every row's bits independent of the step it is in: a step's leading decode rows go through
//! the skinny kernel (at any batch, in slabs of 64 past 64 rows), its prefill-chunk rows through
//! cuBLASLt pinned at one reference `M` (the step capacity), or through the WGMMA kernel where
//! the step program fuses an epilogue into their GEMM (sm_90, when asked), and the rows that
//! get logits (the LM head) through cuBLASLt pinned at [`HEAD_PIN_AT`]. Each of those computes a
//! row the same way at every `M` and beside any rows (`gpu::gemm` says why; `gpu_gemm` checks it
//! on the H200), so a decoding request's tokens do not depend on its neighbours, nor a
//! prefilling one's first token on the chunks beside it. Which of the two a chunk GEMM takes is
//! fixed for the life of the model (the step program's chunk fusion), never by the step.
//!
//! The head is the one GEMM of a decode step whose weight (vocab x hidden, 311 MB for
//! asynct-0.5b) is read by every row at every batch: the skinny kernel streams it at 3.4 TB/s at
//! one row but re-reads each CTA's x slab from L2 at 128 (381 us, RESULTS run 43), where a
//! tensor-core tile does the whole batch from one read of W.
//!
//! A weight's decode rows may instead run cuBLASLt pinned at [`DECODE_PIN_AT`] rows
//! ([`DecodeCublas`], a measurement asked for by `ASYNCT_DECODE_CUBLASLT`): one algorithm at
//! every batch, so a row's bits still do not depend on its batch, but different bits from the
//! skinny kernel's and no fused epilogue (the step program then runs that weight's elementwise
//! op as its own launch).
//!
//! [`Linears`] loads each (lane, weight, shape) once; a CUDA graph recorded from them needs them
//! loaded for as long as it lives, so nothing is ever unloaded.

use std::collections::HashMap;
use std::sync::Arc;

use gpu::gemm::{DecodeForms, EpilogueKind, FoldLayout, Gemm, GemmPlan, GemmShape, Pin};
use gpu::Gpu;

use super::step_program::Weight;
use crate::error::{Error, Result};

/// Which rows a GEMM launch covers, and so which kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Decode rows: the skinny kernel.
    Rows,
    /// Prefill-chunk rows: the WGMMA kernel with a fused epilogue, or cuBLASLt pinned at the
    /// step capacity.
    Chunks,
}

/// A step's rows as the linear layers split them: `decodes` leading decode rows, then `chunks`
/// rows of prefill chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowSplit {
    /// Leading decode rows.
    pub decodes: usize,
    /// Prefill-chunk rows after them.
    pub chunks: usize,
}

impl RowSplit {
    /// Every row.
    pub fn total(&self) -> usize {
        self.decodes + self.chunks
    }

    /// The rows of `lane`: its first row and how many.
    pub fn lane(&self, lane: Lane) -> (usize, usize) {
        match lane {
            Lane::Rows => (0, self.decodes),
            Lane::Chunks => (self.decodes, self.chunks),
        }
    }
}

/// The row count the LM head's cuBLASLt algorithm is chosen for; every head plan runs that one
/// algorithm whatever its own row count. Measured on an H200 for asynct-0.5b's head (RESULTS run
/// 70, pinned at 1 to 256, each at M 1 to 128): pinned at 64 it takes 77-85 us up to M = 64 and
/// 101 us at 128, within 4% of cuBLASLt's own choice per M except at 128 (+11%); pinned at 128,
/// 100 us at M = 1; pinned at 32 or below, 181 us or more at M = 128.
pub const HEAD_PIN_AT: usize = 64;

/// The row count the algorithm of a weight's decode rows on cuBLASLt is chosen for
/// ([`DecodeCublas`]): pinned at 64 without a split of K, asynct-0.5b's gate/up took 6.2-6.3 us
/// at one row and 6.6 at 128 on an H200, where the skinny kernel takes 17.9 at 128 (RESULTS
/// runs 79-195).
pub const DECODE_PIN_AT: usize = 64;

/// The skinny kernel's forms decode rows may take on a device that runs wgmma (`wgmma`) or not:
/// every one, less those the environment turns off for measuring (`ASYNCT_STAGED_X=0`,
/// `ASYNCT_SKINNY_WIDE=0`, `ASYNCT_SKINNY_CLASSES=0`, `ASYNCT_SKINNY_CLASSES_WG=0`; each keeps the
/// forms the dispatcher would take without it, with the same bits).
pub fn decode_forms(wgmma: bool) -> DecodeForms {
    let on = |var| std::env::var(var).map_or(true, |v| v != "0");
    DecodeForms {
        staged: on("ASYNCT_STAGED_X"),
        wide: on("ASYNCT_SKINNY_WIDE"),
        classes: on("ASYNCT_SKINNY_CLASSES"),
        classes_wg: on("ASYNCT_SKINNY_CLASSES_WG"),
        ..DecodeForms::all(wgmma)
    }
}

/// Which weights' decode rows run cuBLASLt instead of the skinny kernel, with which pin
/// ([`Pin::Whole`], or [`Pin::SplitK`] for a K long beside N) and at which reference row count
/// ([`DECODE_PIN_AT`] unless named). None by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DecodeCublas {
    /// Indexed by [`Weight::index`].
    pins: [Option<(Pin, usize)>; 4],
}

impl DecodeCublas {
    /// The environment variable [`DecodeCublas::from_env`] reads.
    pub const VAR: &'static str = "ASYNCT_DECODE_CUBLASLT";

    /// What [`DecodeCublas::VAR`] names (none where it is unset).
    pub fn from_env() -> Result<Self> {
        std::env::var(Self::VAR).map_or(Ok(Self::default()), |v| Self::parse(&v))
    }

    /// A comma list of weights, `qkv`, `o`, `gate_up` or `down`, each pinned whole or, followed by
    /// `:split`, with K split, then optionally `@M` for the reference row count (1 to 4096); empty
    /// names none.
    pub fn parse(list: &str) -> Result<Self> {
        let mut pins = [None; 4];
        for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let bad = || {
                Error::Executor(format!(
                    "{}: `{item}` is not a weight (qkv, o, gate_up or down, each optionally followed by :split, \
                     then by @M for M of 1 to 4096)",
                    Self::VAR
                ))
            };
            let (spec, at) = match item.split_once('@') {
                Some((spec, m)) => (spec, m.parse::<usize>().ok().filter(|m| (1..=4096).contains(m)).ok_or_else(bad)?),
                None => (item, DECODE_PIN_AT),
            };
            let (name, pin) = match spec.strip_suffix(":split") {
                Some(name) => (name, Pin::SplitK),
                None => (spec, Pin::Whole),
            };
            let weight = match name {
                "qkv" => Weight::Qkv,
                "o" => Weight::O,
                "gate_up" => Weight::GateUp,
                "down" => Weight::Down,
                _ => return Err(bad()),
            };
            pins[weight.index()] = Some((pin, at));
        }
        Ok(Self { pins })
    }

    /// How `weight`'s decode rows are pinned on cuBLASLt, and at which row count, if they run there.
    pub fn pin(&self, weight: Weight) -> Option<(Pin, usize)> {
        self.pins[weight.index()]
    }

    /// Whether every weight's decode rows run the skinny kernel.
    pub fn is_none(&self) -> bool {
        self.pins.iter().all(Option::is_none)
    }
}

/// One loaded GEMM's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key {
    /// A layer's GEMM: the lane, the weight, the shape over that lane's rows, and the epilogue.
    Layer(Lane, Weight, GemmShape, EpilogueKind),
    /// o_proj over the decode rows, its x the attention's partials of a layout.
    FoldedO(GemmShape, EpilogueKind, FoldLayout),
    /// The LM head over its logit rows.
    Head(GemmShape),
}

/// The loaded GEMMs of every layer GEMM and LM head a step has asked for.
pub struct Linears {
    gpu: Arc<Gpu>,
    sms: usize,
    pin_at: usize,
    decode_cublas: DecodeCublas,
    /// The skinny kernel's forms decode rows may take ([`decode_forms`]).
    forms: DecodeForms,
    loaded: HashMap<Key, Gemm>,
}

impl Linears {
    /// No GEMM loaded yet; chunk rows will run cuBLASLt's algorithm for `pin_at` rows, and the
    /// decode rows of the weights `decode_cublas` names cuBLASLt's for the row count it names, and
    /// the others the skinny kernel's `forms`.
    pub fn new(gpu: &Arc<Gpu>, pin_at: usize, decode_cublas: DecodeCublas, forms: DecodeForms) -> Result<Self> {
        Ok(Self { gpu: gpu.clone(), sms: gpu.multiprocessors()?, pin_at, decode_cublas, forms, loaded: HashMap::new() })
    }

    /// Loads the GEMM of `weight` in `shape` over `lane`'s rows with `epilogue` (once per key):
    /// the skinny kernel for decode rows (its warpgroup, wide, class or shared-x form where
    /// [`GemmPlan::decode_rows`] picks it; cuBLASLt where [`DecodeCublas`] names the weight); for
    /// chunk rows the WGMMA kernel with a fused epilogue, cuBLASLt (pinned) to store. The model
    /// fuses chunk rows only where the device runs the WGMMA kernel
    /// (`GpuModel::set_chunk_fusion`).
    pub fn prepare(&mut self, lane: Lane, weight: Weight, shape: GemmShape, epilogue: EpilogueKind) -> Result<()> {
        let (sms, pin_at, forms) = (self.sms, self.pin_at, self.forms);
        let decode_pin = self.decode_cublas.pin(weight);
        self.load(Key::Layer(lane, weight, shape, epilogue), || match (lane, epilogue, decode_pin) {
            (Lane::Rows, EpilogueKind::Store, Some((Pin::SplitK, at))) => GemmPlan::cublaslt_pinned_split(shape, at),
            (Lane::Rows, EpilogueKind::Store, Some((_, at))) => GemmPlan::cublaslt_pinned(shape, at),
            (Lane::Rows, _, _) => GemmPlan::decode_rows_with(shape, sms, epilogue, forms),
            (Lane::Chunks, EpilogueKind::Store, _) => GemmPlan::cublaslt_pinned(shape, pin_at.max(shape.m)),
            (Lane::Chunks, _, _) => GemmPlan::wgmma_epilogue(shape, epilogue),
        })
    }

    /// Loads o_proj's folded GEMM of `shape` over the decode rows with `epilogue`, its x the
    /// attention's partials of `layout` (once per key).
    pub fn prepare_folded(&mut self, shape: GemmShape, epilogue: EpilogueKind, layout: FoldLayout) -> Result<()> {
        let sms = self.sms;
        self.load(Key::FoldedO(shape, epilogue, layout), || GemmPlan::skinny_fold(shape, epilogue, layout, sms))
    }

    /// The GEMM [`Linears::prepare_folded`] loaded for this key.
    pub fn folded(&self, shape: GemmShape, epilogue: EpilogueKind, layout: FoldLayout) -> Result<&Gemm> {
        self.loaded(Key::FoldedO(shape, epilogue, layout))
    }

    /// Loads the LM head's GEMM of `shape` (`M` logit rows; once per shape).
    pub fn prepare_head(&mut self, shape: GemmShape) -> Result<()> {
        self.load(Key::Head(shape), || GemmPlan::cublaslt_pinned(shape, HEAD_PIN_AT))
    }

    /// The weights whose decode rows these GEMMs run on cuBLASLt (the step program's
    /// [`super::step_program::ProgramShape::decode_cublas`]).
    pub fn decode_cublas(&self) -> DecodeCublas {
        self.decode_cublas
    }

    /// The GEMM [`Linears::prepare`] loaded for this key.
    pub fn get(&self, lane: Lane, weight: Weight, shape: GemmShape, epilogue: EpilogueKind) -> Result<&Gemm> {
        self.loaded(Key::Layer(lane, weight, shape, epilogue))
    }

    /// The head GEMM [`Linears::prepare_head`] loaded for `shape`.
    pub fn head(&self, shape: GemmShape) -> Result<&Gemm> {
        self.loaded(Key::Head(shape))
    }

    fn load(&mut self, key: Key, plan: impl FnOnce() -> gpu::Result<GemmPlan>) -> Result<()> {
        if !self.loaded.contains_key(&key) {
            let gemm = Gemm::new(&self.gpu, plan()?)?;
            self.loaded.insert(key, gemm);
        }
        Ok(())
    }

    fn loaded(&self, key: Key) -> Result<&Gemm> {
        self.loaded.get(&key).ok_or_else(|| Error::Executor(format!("no GEMM was planned for {key:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_rows_come_first_and_chunk_rows_after_them() {
        let rows = RowSplit { decodes: 3, chunks: 100 };
        assert_eq!((rows.lane(Lane::Rows), rows.lane(Lane::Chunks), rows.total()), ((0, 3), (3, 100), 103));
    }

    #[test]
    fn decode_cublas_names_weights_and_their_pins_and_refuses_anything_else() {
        let d = DecodeCublas::parse(" gate_up, down:split@128 ").unwrap();
        assert_eq!(
            [Weight::Qkv, Weight::O, Weight::GateUp, Weight::Down].map(|w| d.pin(w)),
            [None, None, Some((Pin::Whole, DECODE_PIN_AT)), Some((Pin::SplitK, 128))]
        );
        assert!(!d.is_none());
        assert!(DecodeCublas::parse("").unwrap().is_none());
        assert_eq!(DecodeCublas::default(), DecodeCublas::parse(",").unwrap());
        for bad in ["gate", "down:splits", "qkv:whole", "o split", "o@0", "o@4097", "o@", "o@x", "o@8:split"] {
            let e = DecodeCublas::parse(bad).unwrap_err().to_string();
            assert!(e.contains(DecodeCublas::VAR) && e.contains(bad), "{bad}: {e}");
        }
    }
}
