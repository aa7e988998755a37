//! A step's inputs on their way to the device: the batch of copies [`GpuModel::upload`] begins
//! with the step's own inputs (`super::super::step_buffers`), the pending tokens and the caller's
//! sampling parameters added to it, then queued as one upload and one spreading launch
//! (`gpu::runtime::CopyList`), the launch inside the graph where a graph replays the step.

use cudarc::driver::CudaSlice;

use super::super::pending_feed::FeedRun;
use super::super::step_buffers::DeviceStep;
use super::{GpuModel, StepFacts};
use crate::error::{Error, Result};

impl GpuModel {
    /// Adds to the inputs' batch the copy of each of `runs` from `drawn` over the uploaded ids,
    /// after them and before the step's first kernel ([`super::super::pending_feed`]).
    pub fn feed_ids(&mut self, drawn: &CudaSlice<u32>, runs: &[FeedRun]) -> Result<()> {
        for r in runs {
            if r.from + r.len > drawn.len() || r.row + r.len > self.bufs.ids.len() {
                return Err(Error::Executor(format!("a pending-token copy {r:?} outside the buffers")));
            }
            let from = drawn.slice(r.from..r.from + r.len);
            self.bufs.inputs.gather(&from, &mut self.bufs.ids.slice_mut(r.row..r.row + r.len))?;
        }
        Ok(())
    }

    /// The batch of the step's input copies that [`GpuModel::upload`] began, for the caller's
    /// own inputs (the sampling parameters) before [`GpuModel::end_inputs`].
    pub fn inputs(&mut self) -> &mut gpu::runtime::CopyList {
        &mut self.bufs.inputs
    }

    /// Queues the inputs' batch: one upload and the launch that spreads it.
    pub fn end_inputs(&mut self) -> Result<()> {
        Ok(self.bufs.inputs.end()?)
    }

    /// Queues the inputs' batch's upload alone, for a graph of [`GpuModel::capture`], whose first
    /// launch spreads it.
    pub fn upload_inputs(&mut self) -> Result<()> {
        Ok(self.bufs.inputs.upload()?)
    }

    /// Checks `step` against the buffers' capacity, begins the batch of its input copies (its
    /// inputs and picked rows; queued by [`GpuModel::end_inputs`]), and returns its shape.
    pub fn upload(&mut self, step: &DeviceStep<'_>) -> Result<StepFacts> {
        let split = self.bufs.upload(step)?;
        let (tokens, picked) = (step.token_ids.len(), step.picked);
        Ok(StepFacts {
            tokens,
            split,
            picked: picked.len(),
            picked_all: picked.len() == tokens && picked.iter().zip(0..).all(|(&r, i)| r == i),
            width: step.meta.block_table.ncols(),
        })
    }
}
