//! Where a queued step's results land on the host: its page-locked memory and the events the
//! executor waits on and times it by. [`super::in_flight::InFlightRing`] hands them out in turn.

use cudarc::driver::{CudaEvent, PinnedHostSlice};
use gpu::ops::FaultKind;
use gpu::runtime::MappedHost;
use gpu::Gpu;
use half::bf16;

use super::step_marks::StepMarks;
use crate::error::Result;
#[cfg(doc)]
use crate::executor::LogitsWanted;

/// The page-locked host memory the results of a step in flight land in: its tokens and its fault
/// word (mapped, written by `gpu::ops::StepResults`), its scored logits (copied), and the event
/// recorded behind them: waiting for it waits for that step alone, not for the steps queued
/// after it. (cudarc's own events on page-locked memory are not recorded with its event tracking
/// off, as the runtime has it.)
pub(super) struct Landing {
    pub(super) tokens: MappedHost<u32>,
    pub(super) faults: MappedHost<u32>,
    /// The scored rows' bf16 logits ([`LogitsWanted::ScoredRows`]), grown to the most a step has
    /// brought: most steps score nothing, and 128 rows of Qwen3's vocabulary are 39 MB.
    pub(super) logits: Option<PinnedHostSlice<bf16>>,
    /// How many scored rows the step holding it brings back; `None` when it wants no logits.
    pub(super) scored: Option<usize>,
    pub(super) copied: CudaEvent,
    /// The events timing the step's phases, made at the first step marked and kept for the
    /// next; `marked` says whether the step holding the landing records them.
    marks: Option<StepMarks>,
    marked: bool,
}

impl Landing {
    pub(super) fn new(gpu: &Gpu, rows: usize) -> Result<Self> {
        let copied = gpu.context().new_event(None).map_err(gpu::Error::from)?;
        let faults = MappedHost::new(gpu, FaultKind::WORDS)?;
        let tokens = MappedHost::new(gpu, rows)?;
        Ok(Self { tokens, faults, logits: None, scored: None, copied, marks: None, marked: false })
    }

    /// Marks the step that takes the landing where `on` (its first event recorded on `gpu`'s
    /// stream, the events made the first time), or leaves it unmarked.
    pub(super) fn start_marks(&mut self, on: bool, gpu: &Gpu) -> Result<()> {
        self.marked = on;
        if !on {
            return Ok(());
        }
        let marks = match self.marks.take() {
            Some(marks) => marks,
            None => StepMarks::new(gpu.context())?,
        };
        self.marks.insert(marks).start(gpu.stream())
    }

    /// The step's events where it is marked.
    pub(super) fn marks(&self) -> Option<&StepMarks> {
        self.marks.as_ref().filter(|_| self.marked)
    }
}
