//! Where a queued step's device time goes between its kernels' span and the next step: events
//! recorded around its phases in stream order (its inputs' copies, its forward and draw, its
//! results' copies back), read once the step is collected. The step trace
//! (`gpu::runtime::step_trace`) times the launches inside a step; these time what lies around
//! them, which no kernel can stamp. A measurement for benchmarks ([`StepExecutor::mark_steps`]):
//! four events a step, off unless asked for. They are not free: a marked step ran 30-55 us
//! slower than an unmarked one on an H100 (RESULTS runs 224-227), so the bench marks steps of
//! their own, after the timed ones.
//!
//! [`StepExecutor::mark_steps`]: crate::executor::StepExecutor::mark_steps

use std::cell::Cell;
use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaEvent, CudaStream};

use crate::error::Result;
use crate::executor::StepPhases;

/// The events of one step in flight, recorded in its stream order.
pub(super) struct StepMarks {
    /// Before its first copy of inputs.
    start: CudaEvent,
    /// After its inputs' copies, before its forward; recorded only where the step replays a
    /// graph (an eager step interleaves its copies with its launches).
    inputs: CudaEvent,
    inputs_recorded: Cell<bool>,
    /// After its forward and draw.
    forward: CudaEvent,
    /// After its results' copies back.
    end: CudaEvent,
}

impl StepMarks {
    pub(super) fn new(ctx: &Arc<CudaContext>) -> Result<Self> {
        let timed = || ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(gpu::Error::from);
        Ok(Self {
            start: timed()?,
            inputs: timed()?,
            inputs_recorded: Cell::new(false),
            forward: timed()?,
            end: timed()?,
        })
    }

    pub(super) fn start(&self, stream: &CudaStream) -> Result<()> {
        self.inputs_recorded.set(false);
        Ok(self.start.record(stream).map_err(gpu::Error::from)?)
    }

    pub(super) fn inputs(&self, stream: &CudaStream) -> Result<()> {
        self.inputs_recorded.set(true);
        Ok(self.inputs.record(stream).map_err(gpu::Error::from)?)
    }

    pub(super) fn forward(&self, stream: &CudaStream) -> Result<()> {
        Ok(self.forward.record(stream).map_err(gpu::Error::from)?)
    }

    pub(super) fn end(&self, stream: &CudaStream) -> Result<()> {
        Ok(self.end.record(stream).map_err(gpu::Error::from)?)
    }

    /// The phases' device times; waits for the step's last event.
    pub(super) fn phases(&self) -> Result<StepPhases> {
        let us = |a: &CudaEvent, b: &CudaEvent| -> Result<f64> {
            Ok(f64::from(a.elapsed_ms(b).map_err(gpu::Error::from)?) * 1e3)
        };
        let (inputs_us, forward_us) = if self.inputs_recorded.get() {
            (Some(us(&self.start, &self.inputs)?), us(&self.inputs, &self.forward)?)
        } else {
            (None, us(&self.start, &self.forward)?)
        };
        Ok(StepPhases {
            inputs_us,
            forward_us,
            results_us: us(&self.forward, &self.end)?,
            total_us: us(&self.start, &self.end)?,
        })
    }
}
