//! CUDA graphs: [`Gpu::capture`] records the launches a closure puts on the GPU's stream into a
//! [`Graph`], and [`Graph::launch`] replays them all with one call, without the host cost of each
//! launch (what a decode step of many small kernels pays, and what the benchmark times).
//!
//! Capture records work instead of running it, so what `record` does must be replayable as it
//! stands. The rules for a capturer:
//! - Enqueue only on [`Gpu::stream`], the stream being captured. Work on another stream is not in
//!   the graph and, since cudarc's event tracking is off (see [`Gpu::new`]), nothing orders it.
//! - Keep synchronisation, allocation and host copies out of `record` ([`Gpu::upload`],
//!   [`Gpu::download`], [`Gpu::zeros`], [`Gpu::synchronize`], [`Gpu::time_ms`]): the driver
//!   refuses a synchronisation and invalidates the capture, and an allocation or a copy it
//!   accepts is repeated by every replay. Allocate every buffer, and load every kernel (one eager
//!   call does it), before capturing.
//! - Launch geometry and kernel arguments are frozen at capture: each replay launches the same
//!   grids on the same device pointers with the same scalars. What varies per replay must live in
//!   device memory the graph reads (e.g. `seq_lens` rewritten before a replay), and the grid must
//!   be sized for the largest case it will serve (`crate::attention::Plan` sizes its grids from
//!   the geometry's capacity, not from the lengths, for this reason).
//! - The buffers a graph reads or writes must outlive it; a [`Graph`] holds no reference to them.

use std::sync::Arc;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaGraph, CudaStream, DriverError};

use super::Gpu;
use crate::error::{Error, Result};

/// Launches recorded by [`Gpu::capture`], instantiated and ready to replay on the GPU's stream.
pub struct Graph {
    graph: CudaGraph,
}

// SAFETY: CUDA asks that calls on one graph be serialised, not that they come from the thread
// that made it; a Graph moved to another thread is used from there alone (it is not Sync), and
// each call binds the stream's context first.
unsafe impl Send for Graph {}

impl Graph {
    /// Replays every recorded launch, in order, on the stream the graph was captured on
    /// (asynchronous, like a launch).
    pub fn launch(&self) -> Result<()> {
        Ok(self.graph.launch()?)
    }
}

impl Gpu {
    /// Records what `record` enqueues on [`Gpu::stream`] into a [`Graph`] (nothing runs until it
    /// is launched), following the rules in this module's docs. Capture ends even when `record`
    /// fails or panics, so the stream is usable afterwards; `record`'s error is returned first.
    /// Work already queued on the stream is not part of the graph.
    /// `record` may fail with its caller's error type (a model's, say), which comes back as it is.
    pub fn capture<E: From<Error>>(
        &self,
        record: impl FnOnce() -> std::result::Result<(), E>,
    ) -> std::result::Result<Graph, E> {
        // Thread-local mode refuses unsafe calls (a synchronisation, an allocation) made by this
        // thread while it captures, rather than by any thread of the process.
        self.stream()
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| E::from(e.into()))?;
        let capturing = Capturing { stream: Some(self.stream()) };
        let recorded = record();
        let ended = capturing.end();
        recorded?;
        let graph = ended.map_err(|e| E::from(e.into()))?.ok_or(E::from(Error::EmptyGraph))?;
        // Uploading now keeps the graph's set-up out of its first replay.
        graph.upload().map_err(|e| E::from(e.into()))?;
        Ok(Graph { graph })
    }
}

/// An open capture on a stream, ended by [`Capturing::end`] or, if `record` panics, on drop:
/// a stream left capturing would refuse all later work.
struct Capturing<'a> {
    stream: Option<&'a Arc<CudaStream>>,
}

impl Capturing<'_> {
    fn end(mut self) -> std::result::Result<Option<CudaGraph>, DriverError> {
        let stream = self.stream.take().expect("a capture is ended once");
        stream.end_capture(CUgraphInstantiate_flags(0))
    }
}

impl Drop for Capturing<'_> {
    fn drop(&mut self) {
        if let Some(stream) = self.stream.take() {
            // Unwinding already: the graph (or the reason there is none) is of no use now.
            let _ = stream.end_capture(CUgraphInstantiate_flags(0));
        }
    }
}
